//! The checked-in golden vectors (tests/vectors/) are exactly what the
//! generator produces, and the decoder agrees with every expectation as
//! read back from vectors.json (not from the generator's memory).

mod vectorgen;

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;
use zerohint::{check_in_ram, decode, decode_exact, Entry, Error};

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

/// Files in tests/vectors/ that are written by hand, not generated.
const HAND_WRITTEN: [&str; 2] = ["check_c_header.c", "check_vectors.py"];

#[test]
fn generator_reproduces_checked_in_files() {
    let files = vectorgen::files();
    let mut stale = Vec::new();
    for (name, want) in &files {
        match std::fs::read(dir().join(name)) {
            Ok(got) if got == *want => {}
            Ok(_) => stale.push(format!("{name} differs")),
            Err(e) => stale.push(format!("{name}: {e}")),
        }
    }
    let generated: BTreeSet<&str> = files.iter().map(|(n, _)| n.as_str()).collect();
    for entry in std::fs::read_dir(dir()).expect("tests/vectors exists") {
        let name = entry.expect("readable dir").file_name();
        let name = name.to_string_lossy().into_owned();
        if !generated.contains(name.as_str()) && !HAND_WRITTEN.contains(&name.as_str()) {
            stale.push(format!("{name} is not produced by the generator"));
        }
    }
    assert!(
        stale.is_empty(),
        "tests/vectors is out of date ({}); regenerate with \
         `cargo run -p zerohint --example gen_vectors -- tests/vectors` and review the diff",
        stale.join(", ")
    );
}

fn u64_of(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

#[test]
fn decoder_matches_vectors_json() {
    let text = std::fs::read_to_string(dir().join("vectors.json")).expect("vectors.json");
    let vectors: Vec<Value> = serde_json::from_str(&text).expect("vectors.json parses");
    assert!(vectors.len() >= 25, "only {} vectors", vectors.len());
    let mut seen = BTreeSet::new();
    for v in &vectors {
        let name = v["name"].as_str().expect("name");
        let bytes = std::fs::read(dir().join(v["file"].as_str().expect("file"))).expect("bin");
        let exact = v["exact"].as_bool().expect("exact");
        let ram: Option<Vec<(u64, u64)>> = v.get("ram").map(|r| {
            r.as_array()
                .expect("ram list")
                .iter()
                .map(|p| (u64_of(&p[0]), u64_of(&p[1])))
                .collect()
        });
        let got = if exact {
            decode_exact(&bytes)
        } else {
            decode(&bytes)
        }
        .and_then(|view| {
            if let Some(ram) = &ram {
                check_in_ram(&view, ram)?;
            }
            Ok(view)
        });
        let expect = v["expect"].as_str().expect("expect");
        seen.insert(expect.to_string());
        match got {
            Ok(view) => {
                assert_eq!(expect, "ok", "{name}: decoded fine, expected {expect}");
                assert_eq!(u64::from(view.flags()), u64_of(&v["flags"]), "{name}");
                let want: Vec<Entry> = v["entries"]
                    .as_array()
                    .expect("entries")
                    .iter()
                    .map(|e| Entry {
                        start: u64_of(&e[0]),
                        length: u64_of(&e[1]),
                        flags: u64_of(&e[2]) as u32,
                        page_shift: u64_of(&e[3]) as u8,
                    })
                    .collect();
                assert_eq!(view.entries().collect::<Vec<_>>(), want, "{name}");
                assert_eq!(view.len(), want.len(), "{name}");
                // A valid vector re-encodes to exactly its hint bytes.
                let mut out = vec![0u8; view.size()];
                zerohint::encode_into(view.flags(), &want, &mut out).expect("re-encode");
                assert_eq!(out, bytes[..view.size()], "{name}: re-encode");
            }
            Err(e) => {
                assert_eq!(e.name(), expect, "{name}: got {e:?}");
                let index = v.get("index").map(|i| u64_of(i) as usize);
                assert_eq!(e.index(), index, "{name}: index");
            }
        }
    }
    for n in Error::ALL_NAMES.iter().chain(&["ok"]) {
        assert!(seen.contains(*n), "no vector expects {n}");
    }
}
