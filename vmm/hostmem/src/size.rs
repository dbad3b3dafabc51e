//! The one size grammar.

/// A string that is not a size.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{0}' is not a size; write bytes or a number with K, M, G or T (binary), e.g. 4G")]
pub struct SizeError(pub String);

/// Parses a size the way cloud-hypervisor does: plain bytes, or a whole
/// number with a binary suffix `K`, `M`, `G` or `T` (any case; a trailing
/// `B` or `iB` is accepted): `4G`, `512M`, `1024K`, `4GiB`, `4096`.
/// Surrounding whitespace is ignored. Zero, empty, fractional, signed and
/// overflowing sizes are errors: no caller has a use for a zero size, and
/// each would otherwise check it.
pub fn parse_size(s: &str) -> Result<u64, SizeError> {
    let bad = || SizeError(s.to_string());
    let t = s.trim();
    // `B`/`iB` only after a unit letter (`4GiB`, `4GB`; not `4B`, `4iB`).
    let unit = |r: &&str| r.ends_with(|c: char| c.is_ascii_alphabetic());
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix("ib"))
        .filter(unit)
        .or_else(|| t.strip_suffix(['B', 'b']).filter(unit))
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
    n.checked_mul(1u64 << shift)
        .filter(|&v| v > 0)
        .ok_or_else(bad)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grammar() {
        for (s, want) in [
            ("4096", 4096),
            ("4K", 4 << 10),
            ("4k", 4 << 10),
            ("512M", 512 << 20),
            ("4G", 4 << 30),
            ("1T", 1 << 40),
            (" 4G ", 4 << 30),
            ("4GiB", 4 << 30),
            ("4gb", 4 << 30),
            ("65536K", 64 << 20),
        ] {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
        for s in [
            "",
            "0",
            "0G",
            "4X",
            "G",
            "1.5G",
            "-1G",
            "+4G",
            "4 G",
            "4B",
            "99999999999T",
            "4iB",
        ] {
            let e = parse_size(s).unwrap_err();
            assert_eq!(e, SizeError(s.to_string()));
            assert!(e.to_string().contains("e.g. 4G"), "{e}");
        }
        assert_eq!(human(4 << 30), "4 GiB");
        assert_eq!(human(3 << 29), "1.5 GiB");
        assert_eq!(human(100), "100 B");
    }
}
