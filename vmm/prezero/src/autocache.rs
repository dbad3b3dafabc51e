//! The on-disk cache of `auto`'s decisions, per CPU and thread count.
//!
//! Why: a calibration that calls ties reliably needs whole passes over
//! 4× the last-level cache per thread, interleaved, several rounds: too
//! much to pay at every VMM start, and a fresh draw at every start is
//! what let `auto` flip between two backends within noise (ci13: clzero
//! 56.7 vs AVX2 NT 55.3 GiB/s at 2 threads). One decision per machine
//! and thread count, measured once and then reused, makes `auto` the same
//! backend in every process on that machine.
//!
//! The file is `$ZEROSTART_AUTO_CACHE` (`off` disables it; unoptimized
//! builds use no cache unless it is set), else
//! `$XDG_CACHE_HOME/zerostart/prezero-auto.json`, else
//! `~/.cache/zerostart/prezero-auto.json`. An entry is used only when its
//! whole key matches this process ([`Key`]: CPU model, a hash of the
//! CPU's feature flags, the candidate backends, the thread count and the
//! picking rule's version): a changed CPU (a VM migrated, a home
//! directory shared by two machines), a new backend or a changed rule
//! simply misses. A file that does not parse, or an entry naming a
//! backend this CPU lacks, is never trusted: it counts as a miss and is
//! rewritten by the next calibration.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Backend;

/// Environment variable: the cache file's path, or `off` for no cache.
pub const CACHE_ENV: &str = "ZEROSTART_AUTO_CACHE";

/// Bumped whenever the calibration or the picking rule changes, so that
/// decisions made by an older rule are measured again.
pub const RULE_VERSION: u32 = 2;

/// Most entries kept in the file (oldest dropped first): one per thread
/// count of each CPU that shares the file.
const MAX_ENTRIES: usize = 256;

/// What a cached decision is valid for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Key {
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// FNV-1a 64 of the `flags` line of /proc/cpuinfo, hex.
    pub features: String,
    /// The backends `auto` chooses from here, comma separated.
    pub candidates: String,
    /// Worker threads the decision is for.
    pub threads: usize,
    /// [`RULE_VERSION`] of the rule that decided.
    pub rule: u32,
}

impl Key {
    /// The key of this process for `threads` workers.
    pub fn here(threads: usize, candidates: &[Backend]) -> Key {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        Key::from_cpuinfo(&cpuinfo, threads, candidates)
    }

    /// The key for a /proc/cpuinfo text (first CPU's `model name` and
    /// `flags`).
    pub fn from_cpuinfo(cpuinfo: &str, threads: usize, candidates: &[Backend]) -> Key {
        let field = |name: &str| {
            cpuinfo
                .lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| k.trim() == name)
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default()
        };
        Key {
            cpu_model: field("model name"),
            features: format!("{:016x}", fnv1a64(field("flags").as_bytes())),
            candidates: candidates
                .iter()
                .map(|b| b.name())
                .collect::<Vec<_>>()
                .join(","),
            threads,
            rule: RULE_VERSION,
        }
    }
}

/// FNV-1a, 64 bit: a stable hash (std's is randomly seeded per process).
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// One cached decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    /// What it is valid for.
    pub key: Key,
    /// The chosen backend's name.
    pub backend: String,
    /// The calibration it came from: (backend name, aggregate GiB/s).
    pub gib_per_s: Vec<(String, f64)>,
    /// Per-backend scaling used to break a tie (empty if there was none).
    pub scaling: Vec<(String, f64)>,
    /// Backends within the tie band of the fastest.
    pub tied: Vec<String>,
}

/// The whole file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct File {
    /// Cached decisions, oldest first.
    pub entries: Vec<Entry>,
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    /// A valid entry for the key.
    Hit(Entry),
    /// No entry for the key (including entries for another key).
    Miss,
    /// The file does not parse, or the key's entry names a backend this
    /// CPU cannot run: not trusted.
    Malformed(String),
}

impl File {
    /// Parses the file's text.
    pub fn parse(text: &str) -> Result<File, String> {
        serde_json::from_str(text).map_err(|e| e.to_string())
    }

    /// The entry for `key`, checked: its backend must be one of the key's
    /// candidates and available on this CPU.
    pub fn lookup(&self, key: &Key) -> Lookup {
        let Some(e) = self.entries.iter().rev().find(|e| e.key == *key) else {
            return Lookup::Miss;
        };
        match e.backend.parse::<Backend>() {
            Ok(b)
                if b.is_available()
                    && key.candidates.split(',').any(|c| c == b.name())
                    && e.gib_per_s.iter().all(|g| g.1.is_finite() && g.1 >= 0.0) =>
            {
                Lookup::Hit(e.clone())
            }
            _ => Lookup::Malformed(format!(
                "entry for {} threads names backend '{}', not one of {}",
                key.threads, e.backend, key.candidates
            )),
        }
    }

    /// Replaces the entry for `entry.key` (keeping other keys' entries,
    /// the newest [`MAX_ENTRIES`]).
    pub fn insert(&mut self, entry: Entry) {
        self.entries.retain(|e| e.key != entry.key);
        self.entries.push(entry);
        let extra = self.entries.len().saturating_sub(MAX_ENTRIES);
        self.entries.drain(..extra);
    }
}

/// The cache file's path (see the module docs), or `None` when it is off
/// or there is no home directory.
pub fn path() -> Option<PathBuf> {
    // Unit tests never touch the developer's cache unless told to, and
    // unoptimized builds neither read nor write it: their kernels run at
    // a fraction of the speed and rank backends differently (a debug
    // test run once cached clzero at 14.8 against AVX2 NT at 5.9 GiB/s,
    // where release code runs both at ≈37).
    if (cfg!(test) || cfg!(debug_assertions)) && std::env::var_os(CACHE_ENV).is_none() {
        return None;
    }
    path_from(
        std::env::var_os(CACHE_ENV),
        std::env::var_os("XDG_CACHE_HOME"),
        std::env::var_os("HOME"),
    )
}

fn path_from(
    explicit: Option<std::ffi::OsString>,
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    let nonempty = |v: Option<std::ffi::OsString>| v.filter(|v| !v.is_empty());
    if let Some(p) = nonempty(explicit) {
        return (p != "off" && p != "0").then(|| PathBuf::from(p));
    }
    let dir = match (nonempty(xdg), nonempty(home)) {
        (Some(x), _) => PathBuf::from(x),
        (None, Some(h)) => PathBuf::from(h).join(".cache"),
        (None, None) => return None,
    };
    Some(dir.join("zerostart").join("prezero-auto.json"))
}

/// Reads `path` and looks `key` up (a missing file is a miss).
pub fn load(path: &Path, key: &Key) -> Lookup {
    match std::fs::read_to_string(path) {
        Ok(text) => match File::parse(&text) {
            Ok(f) => f.lookup(key),
            Err(e) => Lookup::Malformed(e),
        },
        Err(_) => Lookup::Miss,
    }
}

/// Adds `entry` to the file at `path` (a malformed file is replaced),
/// writing a temporary file and renaming it over, so a concurrent reader
/// sees the old or the new file, never half of one.
pub fn store(path: &Path, entry: Entry) -> std::io::Result<()> {
    let mut f = std::fs::read_to_string(path)
        .ok()
        .and_then(|t| File::parse(&t).ok())
        .unwrap_or_default();
    f.insert(entry);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("json.{}.tmp", std::process::id()));
    let text = serde_json::to_string_pretty(&f).map_err(std::io::Error::other)?;
    std::fs::write(&tmp, text + "\n")?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CPUINFO: &str = "processor\t: 0\nmodel name\t: AMD EPYC 9654\nflags\t\t: fpu sse2 avx2 clzero\n\nprocessor\t: 1\nmodel name\t: AMD EPYC 9654\nflags\t\t: fpu sse2 avx2 clzero\n";

    fn entry(key: &Key, backend: &str) -> Entry {
        Entry {
            key: key.clone(),
            backend: backend.into(),
            gib_per_s: vec![(backend.into(), 50.0)],
            scaling: vec![],
            tied: vec![backend.into()],
        }
    }

    #[test]
    fn key_follows_model_features_threads_and_rule() {
        let c = [Backend::Portable];
        let k = Key::from_cpuinfo(CPUINFO, 2, &c);
        assert_eq!(k.cpu_model, "AMD EPYC 9654");
        assert_eq!(k.candidates, "portable");
        assert_eq!(k.rule, RULE_VERSION);
        assert_eq!(k, Key::from_cpuinfo(CPUINFO, 2, &c), "stable");
        assert_ne!(k, Key::from_cpuinfo(CPUINFO, 4, &c));
        let other_flags = CPUINFO.replace("clzero", "avx512f");
        assert_ne!(k.features, Key::from_cpuinfo(&other_flags, 2, &c).features);
        let other_model = CPUINFO.replace("9654", "7763");
        assert_ne!(k, Key::from_cpuinfo(&other_model, 2, &c));
    }

    #[test]
    fn hit_miss_and_malformed() {
        let here = Backend::Portable; // available everywhere
        let k = Key::from_cpuinfo(CPUINFO, 2, &[here]);
        let mut f = File::default();
        assert_eq!(f.lookup(&k), Lookup::Miss);
        f.insert(entry(&k, here.name()));
        assert!(matches!(f.lookup(&k), Lookup::Hit(e) if e.backend == "portable"));
        // Another thread count, CPU or rule version misses.
        let k4 = Key {
            threads: 4,
            ..k.clone()
        };
        assert_eq!(f.lookup(&k4), Lookup::Miss);
        let old = Key {
            rule: RULE_VERSION - 1,
            ..k.clone()
        };
        assert_eq!(f.lookup(&old), Lookup::Miss);
        // A backend that is not a candidate (or not a backend) is refused.
        f.insert(entry(&k, "no_such_backend"));
        assert!(matches!(f.lookup(&k), Lookup::Malformed(_)));
        f.insert(entry(&k, "rep_stosb"));
        assert!(matches!(f.lookup(&k), Lookup::Malformed(_)));
        // Text that is not the format is refused.
        for bad in ["", "{", "[]", "{\"entries\": 3}", "{\"entries\": [{}]}"] {
            assert!(File::parse(bad).is_err(), "{bad}");
        }
        // Replacing keeps one entry per key, and other keys' entries.
        f.insert(entry(&k4, here.name()));
        f.insert(entry(&k, here.name()));
        assert_eq!(f.entries.len(), 2);
        assert!(matches!(f.lookup(&k4), Lookup::Hit(_)));
    }

    #[test]
    fn store_and_load_round_trip_and_replace_garbage() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("sub/prezero-auto.json");
        let k = Key::from_cpuinfo(CPUINFO, 1, &[Backend::Portable]);
        assert_eq!(load(&p, &k), Lookup::Miss, "no file");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "not json").unwrap();
        assert!(matches!(load(&p, &k), Lookup::Malformed(_)));
        store(&p, entry(&k, "portable")).unwrap();
        assert!(matches!(load(&p, &k), Lookup::Hit(e) if e.backend == "portable"));
    }

    #[test]
    fn path_rules() {
        let s = |v: &str| Some(std::ffi::OsString::from(v));
        assert_eq!(path_from(s("off"), s("/x"), s("/h")), None);
        assert_eq!(path_from(s("0"), None, None), None);
        assert_eq!(
            path_from(s("/tmp/c.json"), s("/x"), s("/h")),
            Some(PathBuf::from("/tmp/c.json"))
        );
        assert_eq!(
            path_from(None, s("/x"), s("/h")),
            Some(PathBuf::from("/x/zerostart/prezero-auto.json"))
        );
        assert_eq!(
            path_from(s(""), s(""), s("/h")),
            Some(PathBuf::from("/h/.cache/zerostart/prezero-auto.json"))
        );
        assert_eq!(path_from(None, None, None), None);
        // Unit tests never default to the developer's cache.
        if std::env::var_os(CACHE_ENV).is_none() {
            assert_eq!(path(), None);
        }
    }
}
