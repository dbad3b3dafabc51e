//! Exactness: every backend and thread count zeroes exactly the range it
//! is given, for any alignment and length, and touches nothing around it.

use prezero::{available_backends, zero_with, Backend, Choice, PageSize, Zeroer};
use proptest::prelude::*;

/// Canary bytes on each side of the target range.
const GUARD: usize = 192;
const FILL: u8 = 0xa5;

/// Runs `f` on `[GUARD + off, GUARD + off + len)` of a buffer filled with
/// `FILL` and checks inside is zero and outside untouched.
fn check(off: usize, len: usize, f: impl FnOnce(*mut u8, usize)) -> Result<(), TestCaseError> {
    let mut buf = vec![FILL; GUARD + off + len + GUARD];
    let start = GUARD + off;
    f(unsafe { buf.as_mut_ptr().add(start) }, len);
    let inside = &buf[start..start + len];
    if let Some(i) = inside.iter().position(|&b| b != 0) {
        return Err(TestCaseError::fail(format!("byte {i} of {len} not zeroed")));
    }
    for (i, &b) in buf[..start].iter().chain(&buf[start + len..]).enumerate() {
        prop_assert_eq!(b, FILL, "canary {} touched (off {}, len {})", i, off, len);
    }
    Ok(())
}

fn backend() -> impl Strategy<Value = Backend> {
    prop::sample::select(available_backends())
}

fn granule() -> impl Strategy<Value = PageSize> {
    prop::sample::select(PageSize::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Single-threaded, small and odd ranges: heads, tails, sub-line bodies.
    #[test]
    fn single_backend_is_exact(b in backend(), off in 0usize..192, len in 0usize..9000) {
        check(off, len, |p, l| unsafe { zero_with(b, p, l) }.unwrap())?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Parallel jobs large enough to be split over several workers.
    #[test]
    fn parallel_is_exact(
        b in backend(),
        threads in 1usize..=4,
        g in granule(),
        pin in any::<bool>(),
        fault_in in any::<bool>(),
        off in 0usize..4096,
        len in 0usize..(13 << 20),
    ) {
        let z = Zeroer::new(Choice::Backend(b)).unwrap().threads(threads).granule(g).pin_cpus(pin);
        check(off, len, |p, l| {
            let st = if fault_in {
                unsafe { z.try_zero_raw(p, l, None) }.unwrap()
            } else {
                unsafe { z.zero_raw(p, l, None) }
            };
            assert_eq!(st.bytes, l as u64);
            assert_eq!(st.backend, b);
            assert!(st.threads <= threads);
        })?;
    }

    /// `auto` below and above the small-job threshold.
    #[test]
    fn auto_is_exact(
        threads in 1usize..=3,
        off in 0usize..128,
        len in prop_oneof![
            0usize..(2 << 20),
            (prezero::small_threshold() - 4096)..(prezero::small_threshold() + (3 << 20)),
        ],
    ) {
        let z = Zeroer::new(Choice::Auto).unwrap().threads(threads);
        check(off, len, |p, l| { unsafe { z.zero_raw(p, l, None) }; })?;
    }
}
