//! Red-team tests of guestmem's zero-leak bookkeeping: each test names the
//! leak it hunts. The hugetlbfs ones need root and free 2 MiB hugepages;
//! they skip without (fail with ZEROSTART_REQUIRE_HUGEPAGES=1).

mod common;

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use common::{create, dirty_file, have_pages, pool_2m, read_file, Mount, M, POOL};
use guestmem::{check_backing_hugepages, check_hugepages, Error, PageSize};
use vm_memory::{Bytes, GuestAddress, GuestMemoryBackend};

/// Leak hunted: a write through vm-memory (a loader, a device model) after
/// the hint was frozen. `finalize_hint` is what the VMM calls right before
/// the first `KVM_RUN`; called again, it must not hand back the frozen hint
/// as if it were still true.
#[test]
fn write_after_freeze_is_caught_by_a_later_finalize() {
    let mut r = create("thp=off", 8 * M).unwrap();
    r.write_tracked(b"boot", GuestAddress(0x1000)).unwrap();
    let h = r.finalize_hint().unwrap().unwrap();
    assert_eq!(r.finalize_hint().unwrap(), Some(h.clone()), "idempotent");
    // A loader that bypasses write_tracked, after the freeze.
    r.memory()
        .write_slice(&[0x5a; 3], GuestAddress(3 * M + 4094))
        .unwrap();
    match r.finalize_hint() {
        Err(Error::HintInvalidated { page }) => assert_eq!(page, 3 * M),
        other => panic!("write after freeze not caught: {other:?}"),
    }
    // And the tracked door still refuses outright.
    assert!(matches!(
        r.write_tracked(&[1], GuestAddress(5 * M)),
        Err(Error::WriteAfterFinalize { .. })
    ));
    // A write outside the hint (the already excluded boot page) is fine.
    let mut r = create("thp=off", 8 * M).unwrap();
    r.write_tracked(b"boot", GuestAddress(0x1000)).unwrap();
    let h = r.finalize_hint().unwrap().unwrap();
    r.memory()
        .write_slice(b"again", GuestAddress(0x1000))
        .unwrap();
    assert_eq!(r.finalize_hint().unwrap(), Some(h));
}

/// Leak hunted: a named hugetlbfs file keeps the tenant's memory after its
/// VM ends. The next zerostart truncates it before use, but anything else
/// that opens the file in between (a backup, another tenant's process with
/// access to the mount) reads the previous guest's RAM, and its pages stay
/// out of the pool holding that data.
#[test]
fn named_hugetlbfs_file_holds_no_tenant_data_after_the_vm() {
    let _g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_pages(8 * M) {
        return;
    }
    let Some(mnt) = Mount::new("after") else {
        return;
    };
    let path = mnt.0.join("vm0");
    {
        let mut r = create(&format!("file={}", path.display()), 4 * M).unwrap();
        r.write_tracked(b"TENANT-A SECRET", GuestAddress(M + 17))
            .unwrap();
        // The guest's own writes go straight to the mapping.
        let host = r.memory().get_host_address(GuestAddress(3 * M)).unwrap();
        // SAFETY: inside the live mapping; stands in for a vCPU write.
        unsafe { host.write_bytes(0x5a, 4096) };
        assert!(read_file(&path)
            .windows(15)
            .any(|w| w == b"TENANT-A SECRET"));
    }
    let left = read_file(&path);
    assert!(
        left.iter().all(|&b| b == 0),
        "tenant data left in {}: {} non-zero bytes",
        path.display(),
        left.iter().filter(|&&b| b != 0).count()
    );
}

fn make_file(path: &Path, mode: u32) {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(mode)
        .open(path)
        .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Leak hunted: a named hugetlbfs file that another user may open. Whoever
/// can write it can change hinted guest memory after the hint was built (a
/// false zero the VMM cannot see); whoever can read it reads the live
/// guest. `flock` only keeps out other zerostarts, so such a file is
/// refused with the fix, before it is touched.
#[test]
fn named_hugetlbfs_file_open_to_others_is_refused() {
    let _g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_pages(8 * M) {
        return;
    }
    let Some(mnt) = Mount::new("mode") else {
        return;
    };
    for mode in [0o644, 0o620, 0o604, 0o660] {
        let path = mnt.0.join(format!("vm-{mode:o}"));
        make_file(&path, mode);
        let e = create(&format!("file={}", path.display()), 4 * M).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("chmod 600") && s.contains(&format!("{mode:o}")),
            "{s}"
        );
    }
    // Owned by another user, even with mode 0600: that user can write it.
    let path = mnt.0.join("vm-other-owner");
    make_file(&path, 0o600);
    let c = CString::new(path.as_os_str().as_bytes()).unwrap();
    // SAFETY: chown of our own test file.
    assert_eq!(unsafe { libc::chown(c.as_ptr(), 4242, 4242) }, 0);
    let e = create(&format!("file={}", path.display()), 4 * M).unwrap_err();
    assert!(e.to_string().contains("owned by uid 4242"), "{e}");
    // 0600 and ours: accepted.
    let path = mnt.0.join("vm-ok");
    make_file(&path, 0o600);
    create(&format!("file={}", path.display()), 4 * M).unwrap();
}

/// The false refusal that used to be in docs/security.md: a named file
/// still holding an earlier VM's pages on a pool with no other spare pages.
/// Its pages are freed by the truncation before use, so they count; the VM
/// must start and its RAM must verify all-zero (the earlier tenant's pages
/// are not handed back). Only pages the file really holds count: a sparse
/// file of the same size is not credited.
#[test]
fn reused_file_on_a_full_pool_is_accepted_and_zero() {
    let _g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_pages(8 * M) {
        return;
    }
    let Some(mnt) = Mount::new("full") else {
        return;
    };
    let usable = || pool_2m("free_hugepages") - pool_2m("resv_hugepages");
    // The earlier tenant takes up to 64 of the free pages...
    let held = usable().min(64);
    let path = mnt.0.join("tenant");
    dirty_file(&path, held * 2 * M);
    // ...and the next VM needs more than the pool has left.
    let vm = (usable() + held) * 2 * M;
    assert!(
        check_hugepages(PageSize::Size2M, vm).is_err(),
        "the pool alone must be short for this test to mean anything"
    );
    let backing = options::memory(&format!("size={vm},file={}", path.display()))
        .unwrap()
        .backing;
    check_backing_hugepages(&backing, vm).unwrap();
    let r = create(&format!("file={}", path.display()), vm).unwrap();
    let h = r.zero_hint().unwrap().unwrap();
    assert_eq!(h.total_bytes(), vm);
    assert_eq!(r.verify_zero(&h).unwrap(), vm, "tenant data reached the VM");
    drop(r);
    // Truncated after the VM: holds nothing, so a sparse file of any size
    // earns no credit.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(vm)
        .unwrap();
    let e = check_backing_hugepages(&backing, (usable() + 1) * 2 * M).unwrap_err();
    assert!(
        matches!(e, Error::NotEnoughHugepages { file_pages: 0, .. }),
        "{e}"
    );
    std::fs::remove_file(&path).unwrap();
}
