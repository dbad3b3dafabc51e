//! The committed JSON Schemas (docs/schema/timeline-*.schema.json, which
//! tests/zstest/timeline.py validates against) are exactly what the types
//! generate, and documents in the shape the writers produce round-trip
//! through the types byte for byte.

use std::path::PathBuf;

use serde_json::json;
use timeline::{
    GuestPhase, GuestPhaseName, LaunchExit, LaunchHint, LaunchTimeline, Phase, PrezeroReport,
    RunExit, RunTimeline,
};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/schema")
}

#[test]
fn committed_schemas_are_generated() {
    let mut stale = Vec::new();
    for (name, want) in timeline::schemas() {
        match std::fs::read_to_string(dir().join(name)) {
            Ok(got) if got == want => {}
            Ok(_) => stale.push(format!("{name} differs")),
            Err(e) => stale.push(format!("{name}: {e}")),
        }
    }
    assert!(
        stale.is_empty(),
        "docs/schema is out of date ({}); regenerate with \
         `cargo run -p timeline --example gen_schema -- docs/schema` and review the diff",
        stale.join(", ")
    );
}

fn phase(name: &str, t_ms: f64) -> Phase {
    Phase {
        name: name.into(),
        t_ms,
    }
}

fn run_doc() -> RunTimeline {
    RunTimeline {
        exit: RunExit {
            code: 0,
            kind: "reset".into(),
            reason: "i8042 reset".into(),
        },
        guest_phases: vec![GuestPhase {
            guest_uptime_ms: 380,
            host_ms: 410.5,
            name: GuestPhaseName::UserspaceStarted,
        }],
        memory_bytes: 1 << 30,
        phases: vec![
            phase("process_start", 0.0),
            phase("memory_ready", 12.5),
            phase("exit", 900.25),
        ],
        prezero: PrezeroReport {
            backend: None,
            backing: "hugetlb_2m".into(),
            bytes: 1 << 30,
            gib_per_s: 4.0,
            hint_bytes: 0,
            hint_ranges: 0,
            method: "populate_write".into(),
            mode: "engine".into(),
            ms: 250.0,
            threads: 2,
            verified_bytes: 0,
        },
        vcpus: 2,
    }
}

/// The typed run document is byte for byte what `zerostart run` wrote
/// when it built the JSON by hand (a `json!` value: sorted keys).
#[test]
fn run_document_bytes_are_unchanged() {
    let d = run_doc();
    let p = &d.prezero;
    let old = json!({
        "phases": d.phases,
        "guest_phases": [{"name": "userspace_started", "host_ms": 410.5, "guest_uptime_ms": 380}],
        "memory_bytes": d.memory_bytes,
        "vcpus": d.vcpus,
        "prezero": {
            "mode": p.mode, "backend": p.backend, "method": p.method, "backing": p.backing,
            "bytes": p.bytes, "ms": p.ms, "gib_per_s": p.gib_per_s, "threads": p.threads,
            "hint_ranges": p.hint_ranges, "hint_bytes": p.hint_bytes,
            "verified_bytes": p.verified_bytes,
        },
        "exit": {"reason": "i8042 reset", "kind": "reset", "code": 0},
    });
    let text = timeline::to_file_text(&d);
    assert_eq!(text, serde_json::to_string_pretty(&old).unwrap() + "\n");
    assert_eq!(serde_json::from_str::<RunTimeline>(&text).unwrap(), d);
}

/// The same for `zerostart launch`, with and without a hint.
#[test]
fn launch_document_bytes_are_unchanged() {
    let mut d = LaunchTimeline {
        argv: vec!["qemu-system-x86_64".into(), "-m".into(), "1024M".into()],
        boot: "uefi".into(),
        exit: LaunchExit {
            code: 0,
            signal: None,
        },
        guest_phases: vec![],
        hint: Some(LaunchHint {
            bytes: 1 << 20,
            corrupt: None,
            ranges: vec![[1 << 20, 1 << 20]],
        }),
        hint_transport: "fw_cfg".into(),
        lease: Some(3),
        lease_held_bytes: Some(2 << 30),
        memory_bytes: 1 << 30,
        memory_source: "pool".into(),
        memory_source_asked: "pool".into(),
        phases: [
            "process_start",
            "memory_ready",
            "hint_ready",
            "vmm_spawned",
            "exit",
        ]
        .iter()
        .enumerate()
        .map(|(i, n)| phase(n, i as f64 * 1.5))
        .collect(),
        vmm: "qemu".into(),
    };
    for hint in [true, false] {
        if !hint {
            d.hint = None;
            d.lease = None;
            d.lease_held_bytes = None;
            d.exit = LaunchExit {
                code: 137,
                signal: Some(9),
            };
        }
        let old = json!({
            "phases": d.phases,
            "guest_phases": d.guest_phases,
            "vmm": d.vmm,
            "boot": d.boot,
            "hint_transport": d.hint_transport,
            "argv": d.argv,
            "memory_bytes": d.memory_bytes,
            "memory_source": d.memory_source,
            "memory_source_asked": d.memory_source_asked,
            "lease": d.lease,
            "lease_held_bytes": d.lease_held_bytes,
            "hint": d.hint.as_ref().map(|h| json!({
                "ranges": h.ranges,
                "bytes": h.bytes,
                "corrupt": h.corrupt,
            })),
            "exit": {"code": d.exit.code, "signal": d.exit.signal},
        });
        let text = timeline::to_file_text(&d);
        assert_eq!(text, serde_json::to_string_pretty(&old).unwrap() + "\n");
        assert_eq!(serde_json::from_str::<LaunchTimeline>(&text).unwrap(), d);
    }
}

/// A renamed key is an error that names the key, not a silent default.
#[test]
fn renamed_key_fails_by_name() {
    let text = timeline::to_file_text(&run_doc()).replace("\"vcpus\"", "\"cpus\"");
    let e = serde_json::from_str::<RunTimeline>(&text).unwrap_err();
    assert!(e.to_string().contains("missing field `vcpus`"), "{e}");
}
