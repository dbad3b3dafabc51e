//! The checked-in golden vectors (tests/vectors/) are exactly what the
//! generator produces, and the decoder agrees with every expectation as
//! read back from vectors.json and text.json (not from the generator's
//! memory).

mod vectorgen;

use std::collections::BTreeSet;
use std::path::PathBuf;

use serde_json::Value;
use zerohint::{
    check_in_ram, decode, decode_exact, decode_text, encode_text, find_in_cmdline,
    find_in_oem_strings, Entry, Error, TextError, TEXT_MAX_BYTES, TEXT_PREFIX,
};

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

/// What the crate makes of one text.json vector: `(expect, index, decoded
/// bytes)` in the file's terms.
fn text_outcome(v: &Value) -> (String, Option<usize>, Option<Vec<u8>>) {
    let found = match v["transport"].as_str().expect("transport") {
        "cmdline" => find_in_cmdline(v["input"].as_str().expect("cmdline string")),
        "smbios" => {
            let strings: Vec<&str> = v["input"]
                .as_array()
                .expect("smbios list")
                .iter()
                .map(|s| s.as_str().expect("OEM string"))
                .collect();
            find_in_oem_strings(&strings)
        }
        t => panic!("unknown transport {t}"),
    };
    let text = match found {
        Ok(Some(text)) => text,
        Ok(None) => return ("Absent".into(), None, None),
        Err(e) => return (e.name().into(), e.index(), None),
    };
    let mut buf = [0u8; TEXT_MAX_BYTES];
    let n = match decode_text(text, &mut buf) {
        Ok(n) => n,
        Err(e) => return (e.name().into(), e.index(), None),
    };
    let bytes = buf[..n].to_vec();
    match decode_exact(&bytes) {
        Ok(_) => ("ok".into(), None, Some(bytes)),
        Err(e) => (e.name().into(), e.index(), Some(bytes)),
    }
}

#[test]
fn text_decoder_matches_text_json() {
    let text = std::fs::read_to_string(dir().join("text.json")).expect("text.json");
    let vectors: Vec<Value> = serde_json::from_str(&text).expect("text.json parses");
    assert!(vectors.len() >= 40, "only {} text vectors", vectors.len());
    let mut seen = BTreeSet::new();
    let mut names = BTreeSet::new();
    for v in &vectors {
        let name = v["name"].as_str().expect("name");
        assert!(names.insert(name), "{name}: duplicate name");
        assert!(
            v["description"].as_str().is_some_and(|d| !d.is_empty()),
            "{name}: description"
        );
        let expect = v["expect"].as_str().expect("expect");
        seen.insert(expect.to_string());
        let index = v.get("index").map(|i| u64_of(i) as usize);
        let (got, got_index, bytes) = text_outcome(v);
        assert_eq!((got.as_str(), got_index), (expect, index), "{name}");
        if let Some(file) = v.get("file") {
            let want = std::fs::read(dir().join(file.as_str().expect("file"))).expect("bin");
            assert_eq!(
                bytes.as_ref(),
                Some(&want),
                "{name}: decoded bytes vs {file}"
            );
        }
        // Whatever decodes is the crate's own encoding of its bytes: one
        // hint, one text.
        if let Some(bytes) = &bytes {
            let cmdline = v["input"].as_str();
            let text = match cmdline {
                Some(c) => find_in_cmdline(c).unwrap().unwrap(),
                None => v["input"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find_map(|s| s.as_str().unwrap().strip_prefix(TEXT_PREFIX))
                    .unwrap(),
            };
            assert_eq!(encode_text(bytes), text, "{name}: re-encode");
        }
    }
    let needed = ["ok", "Absent"].into_iter().chain(TextError::ALL_NAMES);
    for n in needed {
        assert!(seen.contains(n), "no text vector expects {n}");
    }
}
