//! The kernel command line: where it ends and what it asks of the probe.

use core::fmt;

/// Longest command line the probe reads, including the NUL. Matches the
/// `cmdline_size` the probe's setup header advertises (2047 + NUL).
pub const MAX_LEN: usize = 2048;

/// Parameter that states which hint outcome the test expects.
pub const EXPECT_PARAM: &str = "zsprobe.expect=";

/// Parameter that makes the probe fault on purpose, to test that an
/// exception becomes a verdict line instead of a silent triple fault.
pub const FAULT_PARAM: &str = "zsprobe.fault=";

/// A deliberate fault (`zsprobe.fault=ud|pf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `ud`: an invalid opcode (vector 6).
    InvalidOpcode,
    /// `pf`: a read of an unmapped address (vector 14).
    PageFault,
}

/// What the command line says the VMM handed over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expect {
    /// No expectation given: any valid outcome passes.
    Any,
    /// `zsprobe.expect=absent`: there must be no hint.
    Absent,
    /// `zsprobe.expect=valid`: there must be a valid hint.
    Valid,
}

impl fmt::Display for Expect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Expect::Any => "any",
            Expect::Absent => "absent",
            Expect::Valid => "valid",
        })
    }
}

/// The command line's bytes before its NUL, or `None` if there is no NUL
/// within `bytes` (at most [`MAX_LEN`] are looked at).
pub fn terminated(bytes: &[u8]) -> Option<&[u8]> {
    let bytes = &bytes[..bytes.len().min(MAX_LEN)];
    bytes.iter().position(|&b| b == 0).map(|n| &bytes[..n])
}

/// The `zsprobe.expect=` value; the last one wins, as with kernel
/// parameters. An unknown value is an error carrying it.
pub fn expect(cmdline: &[u8]) -> Result<Expect, &[u8]> {
    let mut out = Expect::Any;
    for word in cmdline.split(|b| b.is_ascii_whitespace()) {
        if let Some(v) = word.strip_prefix(EXPECT_PARAM.as_bytes()) {
            out = match v {
                b"absent" => Expect::Absent,
                b"valid" => Expect::Valid,
                other => return Err(other),
            };
        }
    }
    Ok(out)
}

/// The `zsprobe.fault=` value, if any; the last one wins. An unknown value
/// is an error carrying it.
pub fn fault(cmdline: &[u8]) -> Result<Option<Fault>, &[u8]> {
    let mut out = None;
    for word in cmdline.split(|b| b.is_ascii_whitespace()) {
        if let Some(v) = word.strip_prefix(FAULT_PARAM.as_bytes()) {
            out = Some(match v {
                b"ud" => Fault::InvalidOpcode,
                b"pf" => Fault::PageFault,
                other => return Err(other),
            });
        }
    }
    Ok(out)
}

/// Formats bytes as one printable line: printable ASCII as is, everything
/// else (newlines included, so nothing on the command line can forge a
/// verdict line) as `\xNN`.
pub struct Escaped<'a>(pub &'a [u8]);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for &b in self.0 {
            if (0x20..0x7f).contains(&b) && b != b'\\' {
                fmt::Write::write_char(f, char::from(b))?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_nul() {
        assert_eq!(
            terminated(b"console=ttyS0\0junk"),
            Some(&b"console=ttyS0"[..])
        );
        assert_eq!(terminated(b"\0"), Some(&b""[..]));
        assert_eq!(terminated(b"no nul"), None);
        let mut long = vec![b'a'; MAX_LEN + 10];
        long[MAX_LEN + 5] = 0;
        assert_eq!(terminated(&long), None, "NUL past MAX_LEN is not looked at");
    }

    #[test]
    fn expect_values() {
        assert_eq!(expect(b"console=ttyS0"), Ok(Expect::Any));
        assert_eq!(expect(b"a zsprobe.expect=absent b"), Ok(Expect::Absent));
        assert_eq!(
            expect(b"zsprobe.expect=absent\tzsprobe.expect=valid"),
            Ok(Expect::Valid)
        );
        assert_eq!(expect(b"zsprobe.expect=maybe"), Err(&b"maybe"[..]));
        assert_eq!(expect(b"xzsprobe.expect=valid"), Ok(Expect::Any));
    }

    #[test]
    fn fault_values() {
        assert_eq!(fault(b"console=ttyS0"), Ok(None));
        assert_eq!(fault(b"zsprobe.fault=ud"), Ok(Some(Fault::InvalidOpcode)));
        assert_eq!(
            fault(b"zsprobe.fault=ud zsprobe.fault=pf"),
            Ok(Some(Fault::PageFault))
        );
        assert_eq!(fault(b"zsprobe.fault=gp"), Err(&b"gp"[..]));
    }

    #[test]
    fn escaping_keeps_one_line() {
        let s = format!("{}", Escaped(b"a b\nZSPROBE: PASS\\\xff"));
        assert_eq!(s, "a b\\x0aZSPROBE: PASS\\x5c\\xff");
        assert!(!s.contains('\n'));
    }
}
