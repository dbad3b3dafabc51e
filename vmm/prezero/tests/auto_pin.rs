//! `ZEROSTART_AUTO_BACKEND` pins `auto` for large jobs: no calibration,
//! no cache, at every thread count. Its own test binary (the variable is
//! read once per process, before the first decision).

use prezero::{Backend, Choice, Source, Zeroer};

#[test]
fn the_pinned_backend_is_used_at_every_thread_count() {
    // The last available backend: not what a calibration would favour on
    // most machines (portable or movnti), so an ignored pin shows.
    let want = *prezero::available_backends().last().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let file = cache.path().join("auto.json");
    // Set before any other thread of this test binary exists.
    std::env::set_var(prezero::PIN_ENV, want.name());
    std::env::set_var(prezero::autocache::CACHE_ENV, &file);
    assert_eq!(prezero::pinned().unwrap(), Some(want));
    for t in [1, 2, 3] {
        let c = prezero::calibration_for(t);
        assert_eq!((c.backend, c.source), (want, Source::Pinned), "{t}: {c:?}");
        assert!(c.gib_per_s.is_empty(), "nothing measured");
        assert_eq!(prezero::auto_backend_threads(t), want);
    }
    let z = Zeroer::new(Choice::Auto).unwrap().threads(2);
    let mut buf = vec![1u8; 64 << 20];
    let st = z.zero_slice(&mut buf);
    assert_eq!(st.backend, want);
    assert!(buf.iter().all(|&b| b == 0));
    assert!(!file.exists(), "a pinned decision is not cached");
    // A bad pin is a one-line error naming the fix.
    let bad: Result<Backend, _> = "fastest".parse();
    let e = bad.unwrap_err().to_string();
    assert!(e.contains("valid choices") && !e.contains('\n'), "{e}");
}
