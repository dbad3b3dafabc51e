//! Host resource checks that must pass before guest RAM is touched, so a
//! shortage is an error at start-up instead of a SIGBUS mid-boot (see
//! cloud-hypervisor issues 5057 and 8742).

use std::path::{Path, PathBuf};

use hostmem::PageSize;

use crate::{check_huge, Backing, Error};

fn pool_dir(page: PageSize) -> PathBuf {
    hostmem::hugepages::dir(page)
}

/// Checks that `bytes` of `page`-sized hugepages can be had right now:
/// `free_hugepages - resv_hugepages` (pages other mappings reserved but have
/// not faulted yet) must cover it. The error gives the exact command that
/// grows the pool. 4K is refused ([`Error::NotHugePage`]): it has no pool.
pub fn check_hugepages(page: PageSize, bytes: u64) -> Result<(), Error> {
    let page = check_huge(page)?;
    check_hugepages_in(&pool_dir(page), page, bytes, 0)
}

/// [`check_hugepages`] for guest RAM of `bytes` on `backing` (nothing to
/// check for non-hugetlb backings). A named hugetlbfs file is truncated to 0
/// before it is mapped (which frees every page it holds, an earlier VM's
/// RAM), so the pages it holds now count as free: without this, reusing a
/// file on a pool with no spare pages would be refused although the file's
/// own pages suffice. Only pages really allocated to the file count
/// (`st_blocks`, not its size: a sparse file frees less). Should the file
/// shrink between this check and the truncation, the `mmap` reservation
/// fails with a clean error, never a SIGBUS.
pub fn check_backing_hugepages(backing: &Backing, bytes: u64) -> Result<(), Error> {
    backing.check()?;
    let Some(page) = backing.hugepage() else {
        return Ok(());
    };
    let credit = match backing {
        Backing::HugetlbfsFile { path, page } => reclaimable_file_pages(path, *page),
        _ => 0,
    };
    check_hugepages_in(&pool_dir(page), page, bytes, credit)
}

/// Hugepages of `page`'s pool that `path` holds now and that truncating it
/// gives back: 0 unless it is an existing regular file on a hugetlbfs mount
/// with that page size (a directory gets a fresh file; nothing to free).
fn reclaimable_file_pages(path: &Path, page: PageSize) -> u64 {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(md) if md.is_file() && crate::ram::check_hugetlbfs(path, page).is_ok() => {
            // hugetlbfs accounts a whole hugepage in i_blocks (512-byte
            // units) for every page it holds.
            md.blocks() * 512 / page.bytes()
        }
        _ => 0,
    }
}

/// The pool check with `credit` pages that will be freed before the mapping.
pub(crate) fn check_hugepages_in(
    dir: &Path,
    page: PageSize,
    bytes: u64,
    credit: u64,
) -> Result<(), Error> {
    let c =
        hostmem::hugepages::counters_in(dir).map_err(|(path, source)| Error::NoHugepagePool {
            page: page.name(),
            path,
            source,
        })?;
    let (total, free, reserved) = (c.total, c.free, c.reserved);
    let needed = bytes.div_ceil(page.bytes());
    let usable = free.saturating_sub(reserved);
    if needed <= usable.saturating_add(credit) {
        return Ok(());
    }
    let fix_path = match page {
        // The classic knob is the same pool for the default 2M size.
        PageSize::Size2M => format!(
            "{} (or /proc/sys/vm/nr_hugepages)",
            dir.join("nr_hugepages").display()
        ),
        _ => dir.join("nr_hugepages").display().to_string(),
    };
    Err(Error::NotEnoughHugepages {
        page: page.name(),
        needed,
        free: usable,
        reserved,
        total,
        file_pages: credit,
        fix_total: total + (needed - usable - credit),
        fix_path,
    })
}

/// The host's `MemAvailable` in bytes.
pub fn mem_available() -> Result<u64, Error> {
    mem_available_from(Path::new("/proc/meminfo"))
}

fn mem_available_from(path: &Path) -> Result<u64, Error> {
    let err = |source| Error::HostFile {
        path: path.to_path_buf(),
        source,
    };
    let s = std::fs::read_to_string(path).map_err(err)?;
    s.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kb| kb << 10)
        .ok_or_else(|| {
            err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "no MemAvailable line",
            ))
        })
}

/// Errors if `bytes` exceeds the host's `MemAvailable` (for non-hugetlb
/// backings; hugetlb pages are not part of MemAvailable and are checked by
/// [`check_hugepages`]).
pub fn check_mem_available(bytes: u64) -> Result<(), Error> {
    let avail = mem_available()?;
    if bytes > avail {
        return Err(Error::NotEnoughMemory {
            size_mib: bytes >> 20,
            available_mib: avail >> 20,
        });
    }
    Ok(())
}

/// What a cgroup limit applies to.
#[cfg(test)]
mod tests {
    use super::*;

    fn pool(total: u64, free: u64, resv: u64) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("nr_hugepages"), format!("{total}\n")).unwrap();
        std::fs::write(d.path().join("free_hugepages"), format!("{free}\n")).unwrap();
        std::fs::write(d.path().join("resv_hugepages"), format!("{resv}\n")).unwrap();
        d
    }

    #[test]
    fn enough_pages_pass() {
        let d = pool(1024, 600, 88);
        check_hugepages_in(d.path(), PageSize::Size2M, 512 * (2 << 20), 0).unwrap();
    }

    #[test]
    fn shortage_names_numbers_and_fix() {
        let d = pool(100, 50, 10);
        let e = check_hugepages_in(d.path(), PageSize::Size2M, 1 << 30, 0).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("needs 512 free 2M hugepages but only 40"), "{s}");
        assert!(s.contains("echo 572 | sudo tee"), "{s}");
        assert!(s.contains("/proc/sys/vm/nr_hugepages"), "{s}");
    }

    /// Pages a reused RAM file will free count, and the fix asks only for
    /// the rest.
    #[test]
    fn file_pages_are_credited() {
        let d = pool(100, 50, 10);
        // 512 needed, 40 usable: 472 from the file suffice, 471 do not.
        check_hugepages_in(d.path(), PageSize::Size2M, 1 << 30, 472).unwrap();
        let e = check_hugepages_in(d.path(), PageSize::Size2M, 1 << 30, 471).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("but only 40 are free"), "{s}");
        assert!(s.contains("471 more that the RAM file frees"), "{s}");
        assert!(s.contains("echo 101 | sudo tee"), "{s}");
        // No file: no note.
        let e = check_hugepages_in(d.path(), PageSize::Size2M, 1 << 30, 0).unwrap_err();
        assert!(!e.to_string().contains("RAM file"), "{e}");
    }

    #[test]
    fn missing_pool_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        let e = check_hugepages_in(d.path(), PageSize::Size1G, 1 << 30, 0).unwrap_err();
        assert!(e.to_string().contains("no 1G hugepage pool"), "{e}");
    }

    #[test]
    fn meminfo_parses_and_huge_request_fails() {
        let avail = mem_available().unwrap();
        assert!(avail > 0);
        let e = check_mem_available(avail + (1 << 40))
            .unwrap_err()
            .to_string();
        assert!(e.contains("exceeds the host's MemAvailable"), "{e}");
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("meminfo");
        std::fs::write(&p, "MemTotal: 10 kB\nMemAvailable:    2048 kB\n").unwrap();
        assert_eq!(mem_available_from(&p).unwrap(), 2 << 20);
        std::fs::write(&p, "MemTotal: 10 kB\n").unwrap();
        assert!(mem_available_from(&p).is_err());
    }
}
