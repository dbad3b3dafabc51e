//! Fixtures shared by guestmem's hugetlb integration tests (`hugetlb.rs`,
//! `redteam_tracking.rs`): guest RAM from an option string, the hugepage
//! pool check that skips or (with ZEROSTART_REQUIRE_HUGEPAGES=1) fails, a
//! private hugetlbfs mount, and an earlier tenant's file.
//!
//! Each test binary uses a subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::ffi::CString;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use guestmem::{check_hugepages, Error, GuestRam, PageSize};
use vm_memory::GuestAddress;

pub const M: u64 = 1 << 20;

/// Tests in one binary share the host's hugepage pool: run them one at a
/// time (lock with `POOL.lock().unwrap_or_else(|p| p.into_inner())`).
pub static POOL: Mutex<()> = Mutex::new(());

/// Guest RAM of `size` bytes at GPA 0 from a `--memory` option string.
pub fn create(opts: &str, size: u64) -> Result<GuestRam, Error> {
    let cfg = options::memory(&format!("size={size},{opts}")).unwrap();
    GuestRam::create(&cfg, &[(GuestAddress(0), size)], None)
}

/// True when `bytes` of free 2M hugepages are available; otherwise skips
/// (prints why) or, with ZEROSTART_REQUIRE_HUGEPAGES=1, panics.
pub fn have_pages(bytes: u64) -> bool {
    match check_hugepages(PageSize::Size2M, bytes) {
        Ok(()) => true,
        Err(e) => {
            testsupport::skip("HUGEPAGES", format!("no hugepages: {e}"));
            false
        }
    }
}

/// Reads `/sys/kernel/mm/hugepages/hugepages-2048kB/<file>`.
pub fn pool_2m(file: &str) -> u64 {
    std::fs::read_to_string(format!("/sys/kernel/mm/hugepages/hugepages-2048kB/{file}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// A private 2M hugetlbfs mount, unmounted on drop.
pub struct Mount(pub PathBuf);

impl Mount {
    /// Mounts at a fresh directory named after `tag`; `None` (skip) without
    /// root, a panic with ZEROSTART_REQUIRE_HUGEPAGES set.
    pub fn new(tag: &str) -> Option<Mount> {
        let dir =
            std::env::temp_dir().join(format!("guestmem-hugetlbfs-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let c = CString::new(dir.as_os_str().as_bytes()).ok()?;
        // SAFETY: valid C strings; mounting a fresh private hugetlbfs.
        let r = unsafe {
            libc::mount(
                c"none".as_ptr(),
                c.as_ptr(),
                c"hugetlbfs".as_ptr(),
                0,
                c"pagesize=2M".as_ptr().cast(),
            )
        };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            let _ = std::fs::remove_dir(&dir);
            testsupport::skip(
                "HUGEPAGES",
                format!("cannot mount hugetlbfs (needs root): {e}"),
            );
            return None;
        }
        Some(Mount(dir))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Ok(c) = CString::new(self.0.as_os_str().as_bytes()) {
            // SAFETY: unmounting what new() mounted.
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Fills `path` (on hugetlbfs, `size` bytes) with a secret (0xa5), as an
/// earlier tenant would. Mode 0600: zerostart refuses a file others could
/// open.
pub fn dirty_file(path: &Path, size: u64) {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .unwrap();
    f.set_len(size).unwrap();
    let mut m = hostmem::Mapping::file(f.as_fd(), 0, size as usize)
        .map()
        .unwrap();
    // SAFETY: the test's own file, written by nobody else meanwhile.
    unsafe { m.as_mut_slice() }.fill(0xa5);
}

/// Reads the whole of `path` through a shared mapping (hugetlbfs has no
/// read(2)); an empty file reads as empty.
pub fn read_file(path: &Path) -> Vec<u8> {
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    if len == 0 {
        return Vec::new();
    }
    let m = hostmem::Mapping::file(f.as_fd(), 0, len)
        .prot(hostmem::Prot::Read)
        .map()
        .unwrap();
    // SAFETY: the whole file, which nobody writes while it is copied.
    unsafe { m.as_slice() }.to_vec()
}
