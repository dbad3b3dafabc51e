//! `auto`'s decision cache: a valid entry for this CPU and thread count
//! is used without measuring; an entry naming a backend this machine
//! cannot use is not trusted (measured again and rewritten). Its own test
//! binary: decisions are made once per process.

use prezero::autocache::{Entry, File, Key, Lookup, CACHE_ENV};
use prezero::Source;

#[test]
fn hits_are_used_and_bad_entries_are_measured_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("prezero-auto.json");
    let cands = prezero::candidates();
    // The last candidate: rarely what a measurement picks, so a decision
    // that ignored the cache shows.
    let cached = *cands.last().unwrap();
    let mut f = File::default();
    f.entries.push(Entry {
        key: Key::here(2, &cands),
        backend: cached.name().into(),
        gib_per_s: cands.iter().map(|b| (b.name().into(), 10.0)).collect(),
        scaling: vec![],
        tied: vec![cached.name().into()],
    });
    // Thread count 3: an entry that names no backend.
    f.entries.push(Entry {
        key: Key::here(3, &cands),
        backend: "no_such_backend".into(),
        gib_per_s: vec![],
        scaling: vec![],
        tied: vec![],
    });
    std::fs::write(&path, serde_json::to_string(&f).unwrap()).unwrap();
    // Set before any other thread of this test binary exists.
    std::env::set_var(CACHE_ENV, &path);

    let hit = prezero::calibration_for(2);
    assert_eq!(
        (hit.source, hit.backend),
        (Source::Cached, cached),
        "{hit:?}"
    );
    assert_eq!(hit.gib_per_s.len(), cands.len());

    let bad = prezero::calibration_for(3);
    assert_eq!(bad.source, Source::Measured, "{bad:?}");
    assert!(cands.contains(&bad.backend));
    // Rewritten: the next process gets the measured decision.
    let text = std::fs::read_to_string(&path).unwrap();
    let f = File::parse(&text).unwrap();
    match f.lookup(&Key::here(3, &cands)) {
        Lookup::Hit(e) => assert_eq!(e.backend, bad.backend.name()),
        other => panic!("{other:?}"),
    }
    // The hit's entry is still there.
    assert!(matches!(f.lookup(&Key::here(2, &cands)), Lookup::Hit(_)));
}
