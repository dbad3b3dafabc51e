//! Runs the real benchmark on a small buffer and checks the JSON report:
//! exact schema, every method at every thread count, consistent numbers.
//! (No timing targets here: see `make bench-check`.)

use serde_json::Value;
use zerobench::{run, BenchZeroArgs, Report};

#[test]
fn small_run_writes_the_documented_json() {
    let path = std::env::temp_dir().join(format!("zerobench-{}.json", std::process::id()));
    let args = BenchZeroArgs {
        size: 64 << 20,
        threads: Some(vec![1, 2]),
        json: Some(path.clone()),
        reps: 1,
        // Tests must not change the machine's hugepage pool.
        no_hugepage_reserve: true,
        // A test has no business taking the CPU from others.
        no_realtime: true,
        pin_auto: None,
    };
    let report = run(&args).unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();

    // Exactly these top-level keys, with these types.
    let top = v.as_object().unwrap();
    let mut keys: Vec<&str> = top.keys().map(|k| k.as_str()).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "auto_backend",
            "auto_paired",
            "auto_picks",
            "results",
            "size_bytes"
        ]
    );
    assert_eq!(top["size_bytes"].as_u64(), Some(64 << 20));
    let auto = top["auto_backend"].as_str().unwrap();
    assert_eq!(
        auto.parse::<prezero::Backend>().unwrap(),
        prezero::auto_backend()
    );

    let results = top["results"].as_array().unwrap();
    let mut seen = Vec::new();
    for r in results {
        let o = r.as_object().unwrap();
        let mut keys: Vec<&str> = o.keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(keys, ["gib_per_s", "method", "ms_per_gib", "threads"]);
        let g = o["gib_per_s"].as_f64().unwrap();
        let ms = o["ms_per_gib"].as_f64().unwrap();
        assert!(g > 0.0 && g.is_finite(), "{r}");
        assert!((g * ms - 1000.0).abs() < 1e-6 * 1000.0, "{r}");
        seen.push((
            o["method"].as_str().unwrap().to_string(),
            o["threads"].as_u64().unwrap() as usize,
        ));
    }
    let mut want: Vec<String> = prezero::available_backends()
        .iter()
        .map(|b| b.name().to_string())
        .collect();
    want.extend(
        [
            "memset",
            "auto",
            "kernel_populate_4k",
            "kernel_populate_thp",
        ]
        .map(String::from),
    );
    for m in &want {
        for t in [1, 2] {
            assert!(seen.contains(&(m.clone(), t)), "missing {m} x{t}");
        }
    }
    let allowed = |m: &str| want.iter().any(|w| w == m) || m == "kernel_populate_hugetlb";
    assert!(
        seen.iter().all(|(m, t)| allowed(m) && (*t == 1 || *t == 2)),
        "{seen:?}"
    );
    seen.sort();
    let n = seen.len();
    seen.dedup();
    assert_eq!(seen.len(), n, "duplicate entries");

    // auto's decision at each thread count, checkable from the report.
    let picks = top["auto_picks"].as_array().unwrap();
    let threads: Vec<u64> = picks
        .iter()
        .map(|p| p["threads"].as_u64().unwrap())
        .collect();
    assert_eq!(threads, [1, 2]);
    for p in picks {
        let o = p.as_object().unwrap();
        let mut keys: Vec<&str> = o.keys().map(|k| k.as_str()).collect();
        keys.sort();
        assert_eq!(
            keys,
            ["backend", "calibration", "source", "threads", "tied"]
        );
        let t = o["threads"].as_u64().unwrap() as usize;
        assert_eq!(
            o["backend"].as_str().unwrap(),
            prezero::auto_backend_threads(t).name()
        );
    }
    zerobench::check_picks(&report, None).unwrap();

    // The typed report round-trips and equals what run() returned.
    let typed: Report = serde_json::from_str(&text).unwrap();
    assert_eq!(typed, report);
}
