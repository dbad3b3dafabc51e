//! Host resource checks that must pass before guest RAM is touched, so a
//! shortage is an error at start-up instead of a SIGBUS mid-boot (see
//! cloud-hypervisor issues 5057 and 8742).

use std::path::{Path, PathBuf};

use crate::{Backing, Error, HugePageSize};

fn read_u64(path: &Path) -> Result<u64, std::io::Error> {
    let s = std::fs::read_to_string(path)?;
    s.trim()
        .parse()
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}

fn pool_dir(page: HugePageSize) -> PathBuf {
    PathBuf::from(format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB",
        page.bytes() >> 10
    ))
}

/// Checks that `bytes` of `page`-sized hugepages can be had right now:
/// `free_hugepages - resv_hugepages` (pages other mappings reserved but have
/// not faulted yet) must cover it. The error gives the exact command that
/// grows the pool.
pub fn check_hugepages(page: HugePageSize, bytes: u64) -> Result<(), Error> {
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
fn reclaimable_file_pages(path: &Path, page: HugePageSize) -> u64 {
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
    page: HugePageSize,
    bytes: u64,
    credit: u64,
) -> Result<(), Error> {
    let rd = |name: &str| {
        let path = dir.join(name);
        read_u64(&path).map_err(|source| Error::NoHugepagePool {
            page: page.name(),
            path,
            source,
        })
    };
    let total = rd("nr_hugepages")?;
    let free = rd("free_hugepages")?;
    let reserved = rd("resv_hugepages")?;
    let needed = bytes.div_ceil(page.bytes());
    let usable = free.saturating_sub(reserved);
    if needed <= usable.saturating_add(credit) {
        return Ok(());
    }
    let fix_path = match page {
        // The classic knob is the same pool for the default 2M size.
        HugePageSize::Size2M => format!(
            "{} (or /proc/sys/vm/nr_hugepages)",
            dir.join("nr_hugepages").display()
        ),
        HugePageSize::Size1G => dir.join("nr_hugepages").display().to_string(),
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
#[derive(Debug, Clone, Copy)]
enum Limited {
    /// Ordinary memory (anonymous guest RAM): exceeding it OOM-kills the VMM.
    Memory,
    /// hugetlb pages of one size: exceeding it SIGBUSes the faulting task.
    Hugetlb(HugePageSize),
}

impl Limited {
    fn controller(self) -> &'static str {
        match self {
            Limited::Memory => "memory",
            Limited::Hugetlb(_) => "hugetlb",
        }
    }

    /// (limit file, usage file) for cgroup v1 and v2.
    fn files(self, v2: bool) -> (String, String) {
        let hp = |p: HugePageSize| match p {
            HugePageSize::Size2M => "2MB",
            HugePageSize::Size1G => "1GB",
        };
        match (self, v2) {
            (Limited::Memory, false) => (
                "memory.limit_in_bytes".into(),
                "memory.usage_in_bytes".into(),
            ),
            (Limited::Memory, true) => ("memory.max".into(), "memory.current".into()),
            (Limited::Hugetlb(p), false) => (
                format!("hugetlb.{}.limit_in_bytes", hp(p)),
                format!("hugetlb.{}.usage_in_bytes", hp(p)),
            ),
            (Limited::Hugetlb(p), true) => (
                format!("hugetlb.{}.max", hp(p)),
                format!("hugetlb.{}.current", hp(p)),
            ),
        }
    }
}

/// The cgroup directories (own first, then ancestors) that can limit
/// `what` for this process, from `/proc/self/cgroup` and `/proc/mounts`
/// contents, under `root` ("/" outside tests).
fn cgroup_dirs(
    proc_cgroup: &str,
    mounts: &str,
    what: Limited,
    root: &Path,
) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    for line in proc_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(_), Some(ctrls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let v2 = ctrls.is_empty();
        if !v2 && !ctrls.split(',').any(|c| c == what.controller()) {
            continue;
        }
        for m in mounts.lines() {
            let mf: Vec<&str> = m.split_whitespace().collect();
            let [_, mnt, fstype, opts, ..] = mf[..] else {
                continue;
            };
            let ok = if v2 {
                fstype == "cgroup2"
            } else {
                fstype == "cgroup" && opts.split(',').any(|o| o == what.controller())
            };
            if !ok {
                continue;
            }
            let base = root.join(mnt.trim_start_matches('/'));
            let mut dir = base.join(path.trim_start_matches('/'));
            loop {
                out.push((dir.clone(), v2));
                if dir == base || !dir.pop() {
                    break;
                }
            }
        }
    }
    out
}

fn check_cgroups_in(
    proc_cgroup: &str,
    mounts: &str,
    root: &Path,
    what: Limited,
    bytes: u64,
) -> Result<(), Error> {
    for (dir, v2) in cgroup_dirs(proc_cgroup, mounts, what, root) {
        let (lim_f, use_f) = what.files(v2);
        let Ok(lim) = std::fs::read_to_string(dir.join(&lim_f)) else {
            continue;
        };
        // "max" (v2) or a huge page-rounded i64 (v1) mean unlimited.
        let Ok(limit) = lim.trim().parse::<u64>() else {
            continue;
        };
        if limit >= (1u64 << 62) {
            continue;
        }
        // Memory usage includes reclaimable page cache, so only a guest that
        // alone exceeds the limit is refused; hugetlb usage is all real.
        let usage = match what {
            Limited::Memory => 0,
            Limited::Hugetlb(_) => read_u64(&dir.join(&use_f)).unwrap_or(0),
        };
        if bytes > limit.saturating_sub(usage) {
            let file = dir.join(&lim_f);
            return Err(Error::CgroupLimit {
                what: match what {
                    Limited::Memory => "memory".into(),
                    Limited::Hugetlb(p) => format!("{} hugetlb", p.name()),
                },
                needed_mib: bytes >> 20,
                headroom_mib: limit.saturating_sub(usage) >> 20,
                fix: format!("echo {} | sudo tee {}", usage + bytes, file.display()),
            });
        }
    }
    Ok(())
}

/// Errors if a cgroup (v1 or v2, own or ancestor) of this process would
/// stop `bytes` of guest RAM from being faulted in: for hugetlb the kernel
/// would SIGBUS the faulting thread (reservations at mmap time do not
/// consult the fault-time limit), for ordinary memory it would OOM-kill the
/// VMM mid-boot. Unreadable cgroup files are skipped: this is a best-effort
/// early error, not a guarantee.
pub fn check_cgroup_limits(hugepage: Option<HugePageSize>, bytes: u64) -> Result<(), Error> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let what = hugepage.map_or(Limited::Memory, Limited::Hugetlb);
    check_cgroups_in(&cg, &mounts, Path::new("/"), what, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(total: u64, free: u64, resv: u64) -> tempdir::Dir {
        let d = tempdir::Dir::new();
        std::fs::write(d.0.join("nr_hugepages"), format!("{total}\n")).unwrap();
        std::fs::write(d.0.join("free_hugepages"), format!("{free}\n")).unwrap();
        std::fs::write(d.0.join("resv_hugepages"), format!("{resv}\n")).unwrap();
        d
    }

    /// A throwaway directory (no extra crate for one test helper).
    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "guestmem-test-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn enough_pages_pass() {
        let d = pool(1024, 600, 88);
        check_hugepages_in(&d.0, HugePageSize::Size2M, 512 * (2 << 20), 0).unwrap();
    }

    #[test]
    fn shortage_names_numbers_and_fix() {
        let d = pool(100, 50, 10);
        let e = check_hugepages_in(&d.0, HugePageSize::Size2M, 1 << 30, 0).unwrap_err();
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
        check_hugepages_in(&d.0, HugePageSize::Size2M, 1 << 30, 472).unwrap();
        let e = check_hugepages_in(&d.0, HugePageSize::Size2M, 1 << 30, 471).unwrap_err();
        let s = e.to_string();
        assert!(s.contains("but only 40 are free"), "{s}");
        assert!(s.contains("471 more that the RAM file frees"), "{s}");
        assert!(s.contains("echo 101 | sudo tee"), "{s}");
        // No file: no note.
        let e = check_hugepages_in(&d.0, HugePageSize::Size2M, 1 << 30, 0).unwrap_err();
        assert!(!e.to_string().contains("RAM file"), "{e}");
    }

    #[test]
    fn missing_pool_is_an_error() {
        let d = tempdir::Dir::new();
        let e = check_hugepages_in(&d.0, HugePageSize::Size1G, 1 << 30, 0).unwrap_err();
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
        let d = tempdir::Dir::new();
        let p = d.0.join("meminfo");
        std::fs::write(&p, "MemTotal: 10 kB\nMemAvailable:    2048 kB\n").unwrap();
        assert_eq!(mem_available_from(&p).unwrap(), 2 << 20);
        std::fs::write(&p, "MemTotal: 10 kB\n").unwrap();
        assert!(mem_available_from(&p).is_err());
    }

    #[test]
    fn cgroup_limits_v1_and_v2_with_ancestors() {
        let d = tempdir::Dir::new();
        let root = &d.0;
        let mounts = "cgroup /sys/fs/cgroup/memory cgroup rw,relatime,memory 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n\
                      cgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n";
        let cg = "4:memory:/jobs/vm1\n1:cpu:/\n0::/svc/vm1\n";
        let w = |p: &str, v: &str| {
            let p = root.join(p);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, v).unwrap();
        };
        // v1 memory: own cgroup unlimited, parent limited to 1 GiB (usage,
        // mostly page cache, is not held against the guest).
        w(
            "sys/fs/cgroup/memory/jobs/vm1/memory.limit_in_bytes",
            "9223372036854771712\n",
        );
        w(
            "sys/fs/cgroup/memory/jobs/memory.limit_in_bytes",
            "1073741824\n",
        );
        w(
            "sys/fs/cgroup/memory/jobs/memory.usage_in_bytes",
            "268435456\n",
        );
        let m = Limited::Memory;
        // Usage (mostly page cache) is not held against the guest.
        check_cgroups_in(cg, mounts, root, m, 1 << 30).unwrap();
        let e = check_cgroups_in(cg, mounts, root, m, 2 << 30)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("2048 MiB") && e.contains("leaves 1024 MiB"),
            "{e}"
        );
        assert!(
            e.contains("echo 2147483648 | sudo tee") && e.contains("jobs/memory.limit_in_bytes"),
            "{e}"
        );
        // v2 hugetlb: "max" is unlimited, a number is enforced.
        let h = Limited::Hugetlb(HugePageSize::Size2M);
        w("sys/fs/cgroup/unified/svc/vm1/hugetlb.2MB.max", "max\n");
        check_cgroups_in(cg, mounts, root, h, 1 << 40).unwrap();
        w("sys/fs/cgroup/unified/svc/hugetlb.2MB.max", "134217728\n");
        w("sys/fs/cgroup/unified/svc/hugetlb.2MB.current", "0\n");
        let e = check_cgroups_in(cg, mounts, root, h, 256 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("2M hugetlb") && e.contains("SIGBUS"), "{e}");
        check_cgroups_in(cg, mounts, root, h, 128 << 20).unwrap();
        // No cgroup info at all: nothing to check.
        check_cgroups_in("", "", root, h, 1 << 40).unwrap();
    }

    #[test]
    fn own_cgroups_are_readable_without_error() {
        check_cgroup_limits(None, 1 << 20).unwrap();
        check_cgroup_limits(Some(HugePageSize::Size2M), 2 << 20).unwrap();
    }
}
