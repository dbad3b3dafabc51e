//! Red-team tests of guestmem's zero-leak bookkeeping: each test names the
//! leak it hunts. The hugetlbfs ones need root and free 2 MiB hugepages;
//! they skip without (fail with ZEROSTART_REQUIRE_HUGEPAGES=1).

use guestmem::{Error, GuestRam, MemoryConfig};
use vm_memory::{Bytes, GuestAddress};

const M: u64 = 1 << 20;

fn create(opts: &str, size: u64) -> Result<GuestRam, Error> {
    let cfg = MemoryConfig::parse(&format!("size={size},{opts}")).unwrap();
    GuestRam::create(&cfg, &[(GuestAddress(0), size)], None)
}

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
