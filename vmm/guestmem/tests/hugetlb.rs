//! hugetlb backings against the real kernel. They need free 2 MiB hugepages
//! (and root to mount hugetlbfs): `make test-guestmem` reserves them around
//! the run and sets ZEROSTART_REQUIRE_HUGEPAGES=1, which turns a missing
//! resource into a failure instead of a skip.

mod common;

use common::{create, dirty_file, have_pages, pool_2m, read_file, Mount, M, POOL};
use guestmem::{check_hugepages, Error, GuestRam, PageSize};
use vm_memory::GuestAddress;

#[test]
fn memfd_hugetlb_is_zero_and_hinted_with_2m_pages() {
    let _g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_pages(64 * M) {
        return;
    }
    for opts in [
        "hugepages=on",
        "hugepages=on,prefault=on,prefault_method=populate",
        "hugepages=on,prefault=on,prefault_method=nt",
    ] {
        let mut r = create(opts, 64 * M).unwrap();
        r.write_tracked(b"boot", GuestAddress(0x1000)).unwrap();
        let h = r.finalize_hint().unwrap().unwrap();
        assert!(h.entries.iter().all(|e| e.page_shift == 21));
        assert_eq!(h.total_bytes(), 64 * M - 4096, "{opts}");
        assert_eq!(r.verify_zero(&h).unwrap(), 64 * M - 4096);
    }
}

/// 1 GiB pages: `make test-guestmem` tries to reserve one, but a fragmented
/// host may not have a free contiguous GiB, so this one only skips.
#[test]
fn memfd_hugetlb_1g() {
    let _g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if let Err(e) = check_hugepages(PageSize::Size1G, 1 << 30) {
        testsupport::skip(
            "HUGEPAGE_1G",
            format!("no free 1G hugepage (the host cannot always find a contiguous GiB): {e}"),
        );
        return;
    }
    let mut r = create("hugepages=on,hugepage_size=1G,prefault=on", 1 << 30).unwrap();
    r.write_tracked(&[7; 100], GuestAddress(0x20_0000)).unwrap();
    let h = r.finalize_hint().unwrap().unwrap();
    assert!(h.entries.iter().all(|e| e.page_shift == 30));
    assert_eq!(h.total_bytes(), (1 << 30) - 4096);
    assert_eq!(r.verify_zero(&h).unwrap(), (1 << 30) - 4096);
    assert_eq!(
        r.prefault_stats().method,
        guestmem::PrepMethod::PopulateWrite
    );
    assert_eq!(r.prefault_stats().backing, guestmem::BackingKind::Hugetlb1G);
}

#[test]
fn hugetlbfs_file_with_old_tenant_data_never_leaks() {
    let _g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_pages(32 * M) {
        return;
    }
    let Some(mnt) = Mount::new("tenant") else {
        return;
    };
    let path = mnt.0.join("vm0");
    for opts in [
        "",
        ",prefault=on,prefault_method=populate",
        ",prefault=on,prefault_method=nt",
    ] {
        dirty_file(&path, 32 * M);
        // The control: the file really holds the secret the VM must not see.
        assert!(
            read_file(&path).iter().all(|&b| b == 0xa5),
            "the earlier tenant's secret did not read back from {}",
            path.display()
        );
        let r = create(&format!("file={}{opts}", path.display()), 32 * M).unwrap();
        let h = r.zero_hint().unwrap().unwrap();
        assert_eq!(h.total_bytes(), 32 * M);
        // Every byte the hint claims must really be zero.
        assert_eq!(r.verify_zero(&h).unwrap(), 32 * M, "{opts}");
    }
    // Directory: a fresh unlinked file.
    let r = create(&format!("file={}", mnt.0.display()), 32 * M).unwrap();
    let h = r.zero_hint().unwrap().unwrap();
    assert_eq!(r.verify_zero(&h).unwrap(), 32 * M);
    assert_eq!(
        std::fs::read_dir(&mnt.0).unwrap().count(),
        1,
        "the directory mode must not leave a file behind"
    );
}

#[test]
fn hugetlbfs_file_is_locked_against_a_second_vm() {
    let _g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    if !have_pages(8 * M) {
        return;
    }
    let Some(mnt) = Mount::new("lock") else {
        return;
    };
    let path = mnt.0.join("shared");
    let _a = create(&format!("file={}", path.display()), 4 * M).unwrap();
    let e = create(&format!("file={}", path.display()), 4 * M).unwrap_err();
    assert!(e.to_string().contains("another VM uses this file"), "{e}");
}

#[test]
fn hugepage_shortage_is_an_error_before_any_fault() {
    let _g = POOL.lock().unwrap_or_else(|p| p.into_inner());
    let usable = pool_2m("free_hugepages") - pool_2m("resv_hugepages");
    let size = (usable + 1) * 2 * M;
    for opts in ["hugepages=on,prefault=on", "hugepages=on"] {
        let e = create(opts, size).map(|_| ()).unwrap_err();
        let s = e.to_string();
        assert!(
            matches!(e, Error::NotEnoughHugepages { .. }) && s.contains("sudo tee"),
            "{s}"
        );
    }
}

#[test]
fn file_not_on_hugetlbfs_is_refused() {
    let p = std::env::temp_dir().join(format!("guestmem-not-huge-{}", std::process::id()));
    let cfg = options::memory(&format!("size=4M,file={}", p.display())).unwrap();
    // Skip the pool check's influence: with no free pages it fails first,
    // which is also a correct refusal.
    let e = GuestRam::create(&cfg, &[(GuestAddress(0), 4 * M)], None).unwrap_err();
    let stray = p.exists();
    let _ = std::fs::remove_file(&p);
    assert!(!stray, "a refused file= must not be created");
    let s = e.to_string();
    assert!(s.contains("hugetlbfs") || s.contains("hugepages"), "{s}");
}

#[test]
fn misaligned_size_names_the_fix() {
    let e = options::memory("size=5M,hugepages=on")
        .unwrap_err()
        .to_string();
    assert!(e.contains("multiple of 2M"), "{e}");
    let e = options::memory("size=1536M,hugepages=on,hugepage_size=1G")
        .unwrap_err()
        .to_string();
    assert!(e.contains("multiple of 1G"), "{e}");
}
