//! Sizes on the command line and the memory the machine can give.

use crate::BenchError;

/// Parses a size the way cloud-hypervisor does: plain bytes, or a number
/// with a binary suffix `K`, `M`, `G` or `T` (case-insensitive, an
/// optional trailing `B`/`iB` is accepted): `4G`, `512M`, `1024K`, `4096`.
///
/// Zero, empty, fractional, negative and overflowing sizes are errors.
pub fn parse_size(s: &str) -> Result<u64, BenchError> {
    let bad = || BenchError::BadSize(s.to_string());
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix("ib"))
        .or_else(|| {
            t.strip_suffix(['B', 'b'])
                .filter(|r| r.ends_with(|c: char| c.is_ascii_alphabetic()))
        })
        .unwrap_or(t);
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                _ => return Err(bad()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let v = n.checked_mul(1u64 << shift).ok_or_else(bad)?;
    if v == 0 {
        return Err(bad());
    }
    Ok(v)
}

/// Formats bytes for people: `4 GiB`, `512 MiB`, `1.5 GiB`.
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v:.0} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `MemAvailable` from /proc/meminfo, in bytes.
pub fn mem_available() -> Option<u64> {
    meminfo_kib(
        &std::fs::read_to_string("/proc/meminfo").ok()?,
        "MemAvailable",
    )
    .map(|k| k * 1024)
}

/// A `Key: N kB` field of a meminfo text.
pub(crate) fn meminfo_kib(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(key)?.strip_prefix(':')?;
        rest.split_whitespace().next()?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4G").unwrap(), 4 << 30);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("1024K").unwrap(), 1 << 20);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("2g").unwrap(), 2 << 30);
        assert_eq!(parse_size("1T").unwrap(), 1 << 40);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("64MB").unwrap(), 64 << 20);
        for bad in [
            "",
            "G",
            "0",
            "0M",
            "-1G",
            "1.5G",
            "4X",
            "abc",
            "4 G",
            "99999999999999999999",
            "16777216T",
            "12B",
        ] {
            let e = parse_size(bad).unwrap_err().to_string();
            assert!(
                e.contains("invalid size") && !e.contains('\n'),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(4 << 30), "4 GiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(100), "100 B");
    }

    #[test]
    fn meminfo() {
        let t = "MemTotal:       24684084 kB\nMemAvailable:   24337648 kB\nHugePages_Free:  12\n";
        assert_eq!(meminfo_kib(t, "MemAvailable"), Some(24337648));
        assert_eq!(meminfo_kib(t, "HugePages_Free"), Some(12));
        assert_eq!(meminfo_kib(t, "Mem"), None);
        assert!(mem_available().unwrap() > 0);
    }
}
