//! Checks for memory files on hugetlbfs that no other user may reach:
//! shared by the pool's `--hugetlbfs DIR` region files and guestmem's
//! `file=` guest RAM, so both refuse the same things with the same words.
//!
//! Whoever else can open such a file (another owner, a group/other
//! permission bit, a directory others can write, where they could plant a
//! file or a symlink before we create ours) can read the memory it holds
//! and write into it behind the zero hint.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;

/// `f_type` of hugetlbfs (`include/uapi/linux/magic.h`).
pub const HUGETLBFS_MAGIC: i64 = 0x9584_58f6;

/// Whether a `statfs` result is hugetlbfs with pages of `page_bytes`.
// `f_type`/`f_bsize` are i64 on x86_64 glibc but narrower elsewhere.
#[allow(clippy::unnecessary_cast)]
pub fn statfs_ok(st: &libc::statfs, page_bytes: u64) -> io::Result<()> {
    if st.f_type as i64 != HUGETLBFS_MAGIC || st.f_bsize as u64 != page_bytes {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "filesystem type {:#x} with block size {:#x}",
                st.f_type as i64, st.f_bsize as u64
            ),
        ));
    }
    Ok(())
}

/// Whether `path` is on hugetlbfs with pages of `page_bytes`.
pub fn check_path(path: &Path, page_bytes: u64) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    // SAFETY: statfs fills the zeroed struct from a valid C path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    statfs_ok(&st, page_bytes)
}

/// Whether the open file `fd` is on hugetlbfs with pages of `page_bytes`
/// (after the open, so a path that changed under us is still caught).
pub fn check_fd(fd: BorrowedFd<'_>, page_bytes: u64) -> io::Result<()> {
    // SAFETY: fstatfs fills the zeroed struct; the fd is valid.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    statfs_ok(&st, page_bytes)
}

/// This process's effective uid.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Why a memory file with owner `uid` and `mode` is not private to this
/// process, and the command that fixes it: it must be ours and have no
/// group/other permission bit.
pub fn file_not_private(uid: u32, mode: u32, path: &Path) -> Option<(String, String)> {
    let me = euid();
    if uid != me {
        return Some((
            format!("is owned by uid {uid}, not by this process (uid {me})"),
            format!("chown {me} {}", path.display()),
        ));
    }
    let mode = mode & 0o777;
    if mode & 0o077 != 0 {
        return Some((
            format!("has mode {mode:o} (group/other access)"),
            format!("chmod 600 {}", path.display()),
        ));
    }
    None
}

/// Why a directory that will hold memory files is not safe, and the
/// command that fixes it: it must belong to this process's user or root
/// and be writable by nobody else (else another user could create a file
/// or symlink where ours will be, or swap ours for one of theirs).
pub fn dir_not_private(uid: u32, mode: u32, path: &Path) -> Option<(String, String)> {
    let me = euid();
    if uid != me && uid != 0 {
        return Some((
            format!("is owned by uid {uid}, not by this process (uid {me}) or root"),
            format!("chown {me} {}", path.display()),
        ));
    }
    let mode = mode & 0o7777;
    if mode & 0o022 != 0 {
        return Some((
            format!("has mode {mode:o}: group/other may create files in it"),
            format!("chmod go-w {}", path.display()),
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_must_be_ours_and_0600() {
        let p = Path::new("/x");
        assert!(file_not_private(euid(), 0o100600, p).is_none());
        let (why, fix) = file_not_private(euid(), 0o100640, p).unwrap();
        assert!(
            why.contains("mode 640") && fix == "chmod 600 /x",
            "{why} {fix}"
        );
        let (why, fix) = file_not_private(euid() + 1, 0o600, p).unwrap();
        assert!(
            why.contains("owned by uid") && fix.starts_with("chown "),
            "{why}"
        );
    }

    #[test]
    fn dirs_must_not_be_writable_by_others() {
        let p = Path::new("/d");
        assert!(dir_not_private(euid(), 0o40700, p).is_none());
        assert!(dir_not_private(0, 0o40755, p).is_none());
        for mode in [0o40777, 0o41777, 0o40770, 0o40702] {
            let (why, fix) = dir_not_private(euid(), mode, p).unwrap();
            assert!(
                why.contains("may create files") && fix == "chmod go-w /d",
                "{why}"
            );
        }
        if euid() != 0 {
            assert!(dir_not_private(euid() + 1, 0o40700, p).is_some());
        } else {
            assert!(dir_not_private(1, 0o40700, p).is_some());
        }
    }

    #[test]
    fn tmp_is_not_hugetlbfs() {
        let e = check_path(&std::env::temp_dir(), 2 << 20).unwrap_err();
        assert!(e.to_string().contains("filesystem type"), "{e}");
    }
}
