//! The memory behind guest RAM: a hugetlb memfd, or a hugetlbfs file made
//! zero and private before use, or (`prezero=pool`) a lease the VMM took.
//! The primitives are `hostmem`'s; what is guestmem's is the promise that
//! the memory reads as zero and nobody else can write it.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::{Error, PageSize};

pub(super) fn memfd(page: PageSize, size: u64) -> Result<File, Error> {
    hostmem::memfd(c"zerostart-guest-ram", size, page, hostmem::Sealing::Never).map_err(|source| {
        // memfd_create fails on a kernel without the size; ftruncate on a
        // size that is not a multiple of it.
        if source.raw_os_error() == Some(libc::EINVAL) && size.checked_rem(page.bytes()) != Some(0)
        {
            Error::Backing {
                what: "ftruncate of the hugetlb memfd".into(),
                source,
                fix: "size= must be a multiple of the hugepage size",
            }
        } else {
            Error::Backing {
                what: format!("memfd_create(MFD_HUGETLB {})", page.name()),
                source,
                fix: "the host kernel needs hugetlb support for this page size",
            }
        }
    })
}

// The hugetlbfs and privacy checks are `hostmem::hugetlbfs` (the pool's too), so
// guest RAM files and pool region files refuse the same things.
pub(crate) fn check_hugetlbfs(dir: &Path, page: PageSize) -> io::Result<()> {
    hostmem::hugetlbfs::check_path(dir, page.bytes())
}

fn check_hugetlbfs_fd(file: &File, page: PageSize) -> io::Result<()> {
    use std::os::fd::AsFd;
    hostmem::hugetlbfs::check_fd(file.as_fd(), page.bytes())
}

/// Opens (or creates) the hugetlbfs file and makes its content zero: a
/// directory gets a new file that is unlinked at once (nobody else can open
/// it); a named file is `flock`ed exclusively, truncated to 0 (freeing every
/// page of an earlier user) and re-grown (new pages are cleared by the kernel
/// when first faulted). A named file must be this user's and closed to
/// group and others: whoever else can write it could change hinted guest
/// memory behind the hint's back (and read the live guest), which `flock`
/// cannot stop. Returns the file and whether it is named (not a fresh
/// unlinked one).
pub(super) fn hugetlbfs_file(
    path: &Path,
    page: PageSize,
    size: u64,
) -> Result<(File, bool), Error> {
    let fix_mount = "put the file on a hugetlbfs mount with that page size, e.g. mount -t hugetlbfs -o pagesize=2M none /dev/hugepages";
    let err = |what: String, source: io::Error, fix| Error::Backing { what, source, fix };
    // Check the filesystem before creating anything, so a wrong path leaves
    // no stray file behind.
    let dir = if path.is_dir() {
        path
    } else {
        path.parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    };
    check_hugetlbfs(dir, page).map_err(|source| {
        err(
            format!(
                "{} is not on a hugetlbfs mount with {} pages",
                path.display(),
                page.name()
            ),
            source,
            fix_mount,
        )
    })?;
    let file = if path.is_dir() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let name = path.join(format!("zerostart-{}-{nanos}", std::process::id()));
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(&name)
            .map_err(|e| err(format!("create {}", name.display()), e, fix_mount))?;
        std::fs::remove_file(&name)
            .map_err(|e| err(format!("unlink {}", name.display()), e, fix_mount))?;
        f
    } else {
        OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| err(format!("open {}", path.display()), e, fix_mount))?
    };
    // The file itself, in case `path` is a symlink to another filesystem.
    check_hugetlbfs_fd(&file, page).map_err(|source| {
        err(
            format!(
                "{} is not a hugetlbfs file with {} pages",
                path.display(),
                page.name()
            ),
            source,
            fix_mount,
        )
    })?;
    let named = !path.is_dir();
    if named {
        private_file(&file, path)?;
    }
    // SAFETY: flock on a valid fd.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return Err(err(
            format!("lock {}", path.display()),
            io::Error::last_os_error(),
            "another VM uses this file; give each VM its own file=",
        ));
    }
    file.set_len(0)
        .and_then(|_| file.set_len(size))
        .map_err(|e| err(format!("truncate {}", path.display()), e, fix_mount))?;
    Ok((file, named))
}

/// Refuses a named backing file that another user could open: not owned by
/// this process's effective uid, or with any group/other permission bit.
fn private_file(file: &File, path: &Path) -> Result<(), Error> {
    use std::os::unix::fs::MetadataExt;
    let md = file.metadata().map_err(|source| Error::Backing {
        what: format!("stat {}", path.display()),
        source,
        fix: "check the file= path",
    })?;
    match hostmem::hugetlbfs::file_not_private(md.uid(), md.mode(), path) {
        None => Ok(()),
        Some((why, fix)) => Err(Error::UnsafeBackingFile {
            path: path.to_path_buf(),
            why,
            fix,
        }),
    }
}

/// Memory the VMM leased for guest RAM (`prezero=pool`): guestmem maps
/// it and keeps `keep` (the lease) alive until the mappings are gone, so
/// the pool learns the lease ended only after the guest's RAM is unmapped
/// (a mapping still alive then would make it retire the region). Leasing
/// is the VMM's business: guestmem does not talk to the pool.
pub struct LeasedMemory {
    /// The leased memory in guest order: one piece for a lease of one
    /// region, one per region for a lease of several (docs/pool.md,
    /// "Leases of any size"), each a file already known zero.
    pub pieces: Vec<LeasedPiece>,
    /// Dropped after the mappings (ends the lease).
    pub keep: Box<dyn std::any::Any + Send + Sync>,
}

/// One file of a lease: `[offset, offset + len)` of it is guest RAM.
#[derive(Debug)]
pub struct LeasedPiece {
    /// The leased memory file (hugetlb or shmem).
    pub file: File,
    /// Where the lease starts in `file`.
    pub offset: u64,
    /// Bytes of the lease in this file.
    pub len: u64,
}

impl LeasedMemory {
    /// Bytes leased in all (at least the guest's RAM size).
    pub fn len(&self) -> u64 {
        self.pieces.iter().map(|p| p.len).sum()
    }

    /// Whether nothing was leased.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl std::fmt::Debug for LeasedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeasedMemory")
            .field("pieces", &self.pieces)
            .finish_non_exhaustive()
    }
}
