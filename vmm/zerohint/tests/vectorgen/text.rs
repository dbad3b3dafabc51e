//! Golden vectors for the text form of the hint (docs/hint-abi.md, "Text
//! form"): `text.json` and `zshint_text_vectors.h`.
//!
//! Texts are made here with a bit-by-bit base64url encoder of its own, not
//! the crate's, and every vector states its outcome by hand; `vectors()`
//! refuses to produce a vector the crate disagrees with.

use std::fmt::Write as _;

use zerohint::{
    decode_exact, decode_text, find_in_cmdline, find_in_oem_strings, TextError, TEXT_MAX_BYTES,
};

use super::{c_name, Expect, Vector};

/// Where the text rides.
#[derive(Clone, Debug)]
pub enum Transport {
    /// (d): the whole kernel command line.
    Cmdline(String),
    /// (e): the SMBIOS type 11 OEM strings, in order.
    Smbios(Vec<String>),
}

/// What a consumer must find.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextExpect {
    /// No hint on this transport.
    Absent,
    /// A text error (ABI name) with, for `TextBadChar`, the character index.
    Text(&'static str, Option<usize>),
    /// The text decodes to these bytes, which validated with an exact
    /// length give this outcome.
    Decoded(Vec<u8>, Expect),
}

/// One text vector.
pub struct TextVector {
    pub name: String,
    pub transport: Transport,
    pub expect: TextExpect,
    /// The `.bin` file the decoded bytes equal, if there is one.
    pub file: Option<String>,
    pub description: String,
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// base64url without padding, one bit at a time (RFC 4648 section 5): the
/// last group is filled with zero bits, so the text is canonical.
pub fn b64url(bytes: &[u8]) -> String {
    let bits: Vec<u8> = bytes
        .iter()
        .flat_map(|b| (0..8).rev().map(move |i| (b >> i) & 1))
        .collect();
    bits.chunks(6)
        .map(|c| {
            let v = (0..6).fold(0usize, |v, i| {
                (v << 1) | usize::from(*c.get(i).unwrap_or(&0))
            });
            char::from(ALPHABET[v])
        })
        .collect()
}

fn sextet(c: char) -> usize {
    ALPHABET
        .iter()
        .position(|&a| char::from(a) == c)
        .expect("a base64url character")
}

fn bytes_of<'a>(bins: &'a [Vector], file: &str) -> &'a [u8] {
    &bins
        .iter()
        .find(|v| v.file == file)
        .unwrap_or_else(|| panic!("no binary vector writes {file}"))
        .bytes
}

/// The same 2 MiB-spaced ranges as `ok_max_entries`, `n` of them.
fn hint_of(n: u64) -> Vec<u8> {
    let entries = (0..n)
        .map(|i| super::z(i * 2 * super::M2, super::M2, 21))
        .collect();
    super::raw(entries).bytes()
}

struct Builder(Vec<TextVector>);

impl Builder {
    fn add(&mut self, name: &str, t: Transport, expect: TextExpect, file: Option<&str>, d: &str) {
        self.0.push(TextVector {
            name: name.to_string(),
            transport: t,
            expect,
            file: file.map(str::to_string),
            description: d.to_string(),
        });
    }
}

fn cmd(s: impl Into<String>) -> Transport {
    Transport::Cmdline(s.into())
}

fn smbios(v: &[&str]) -> Transport {
    Transport::Smbios(v.iter().map(|s| s.to_string()).collect())
}

fn text_err(name: &'static str) -> TextExpect {
    TextExpect::Text(name, None)
}

fn bad_char(index: usize) -> TextExpect {
    TextExpect::Text("TextBadChar", Some(index))
}

/// Every text vector, in file order; `bins` are the binary vectors whose
/// bytes several texts carry.
pub fn vectors(bins: &[Vector]) -> Vec<TextVector> {
    let one = bytes_of(bins, "ok_one.bin").to_vec();
    let many = bytes_of(bins, "ok_many.bin").to_vec();
    let t1 = b64url(&one);
    let tm = b64url(&many);
    let max = hint_of(30);
    let t_max = b64url(&max);
    let mut max_plus = max.clone();
    max_plus.extend_from_slice(&[0xa5; 16]);
    let t_31 = b64url(&hint_of(31));
    assert_eq!((t1.len(), t_max.len(), t_31.len()), (75, 1003, 1035));
    assert_eq!(b64url(&max_plus).len(), 1024);
    let ok = |b: &[u8]| TextExpect::Decoded(b.to_vec(), Expect::Ok);
    let blob = |b: &[u8], e: Expect| TextExpect::Decoded(b.to_vec(), e);
    let with_char = |i: usize, c: &str| format!("{}{c}{}", &t1[..i], &t1[i + 1..]);
    let mut v = Builder(Vec::new());

    // ---- found and decoded ----
    v.add(
        "ok_cmdline_alone",
        cmd(format!("prezero.hint={t1}")),
        ok(&one),
        Some("ok_one.bin"),
        "The parameter alone on the command line.",
    );
    v.add(
        "ok_among_params",
        cmd(format!(
            "console=ttyS0,115200 quiet prezero.hint={tm} root=/dev/vda rw"
        )),
        ok(&many),
        Some("ok_many.bin"),
        "Among other parameters.",
    );
    v.add(
        "ok_quoted_value",
        cmd(format!("quiet prezero.hint=\"{t1}\" rw")),
        ok(&one),
        Some("ok_one.bin"),
        "The value in double quotes: the kernel strips them, they are not part of the text.",
    );
    v.add(
        "ok_quoted_token",
        cmd(format!("quiet \"prezero.hint={t1}\" rw")),
        ok(&one),
        Some("ok_one.bin"),
        "The whole parameter in double quotes: the kernel strips them too.",
    );
    v.add(
        "ok_after_quoted_params",
        cmd(format!(
            "dyndbg=\"file init/main.c +p\" \"acpi_osi=!Windows 2020\" init.note=\"a -- prezero.hint=x\" prezero.hint={t1}"
        )),
        ok(&one),
        Some("ok_one.bin"),
        "After quoted parameters whose quotes hide spaces, a -- and a prezero.hint= inside another parameter's value.",
    );
    v.add(
        "ok_other_white_space",
        cmd(format!("quiet\tprezero.hint={t1}\nrw\r\n")),
        ok(&one),
        Some("ok_one.bin"),
        "Tab, newline and carriage return separate parameters like spaces (the kernel's isspace()).",
    );
    v.add(
        "ok_after_nbsp",
        cmd(format!("quiet\u{a0}prezero.hint={t1}")),
        ok(&one),
        Some("ok_one.bin"),
        "U+00A0 (UTF-8 c2 a0) before the parameter: the kernel's isspace() counts byte 0xa0 as a space, so the parameter starts after it.",
    );
    v.add(
        "ok_second_after_dashdash",
        cmd(format!("prezero.hint={t1} -- prezero.hint={tm}")),
        ok(&one),
        Some("ok_one.bin"),
        "A second copy after -- is init's argument, not a parameter: not Duplicate.",
    );
    v.add(
        "ok_max_entries",
        cmd(format!("prezero.hint={t_max}")),
        ok(&max),
        None,
        "30 entries (TEXT_MAX_ENTRIES): 752 bytes, 1003 characters, the largest hint that fits 1024 characters.",
    );
    v.add(
        "ok_smbios_among",
        smbios(&["vendor=acme", &format!("prezero.hint={t1}"), "build 42"]),
        ok(&one),
        Some("ok_one.bin"),
        "SMBIOS: the hint among other OEM strings.",
    );
    v.add(
        "ok_smbios_alone",
        smbios(&[&format!("prezero.hint={tm}")]),
        ok(&many),
        Some("ok_many.bin"),
        "SMBIOS: the only OEM string.",
    );

    // ---- absent ----
    v.add(
        "absent_empty_cmdline",
        cmd(""),
        TextExpect::Absent,
        None,
        "Empty command line.",
    );
    v.add(
        "absent_no_param",
        cmd("console=ttyS0 quiet prezero=on prezero.verify=1"),
        TextExpect::Absent,
        None,
        "Other parameters, other prezero.* parameters, no hint.",
    );
    v.add(
        "absent_longer_name_before",
        cmd(format!("xprezero.hint={t1}")),
        TextExpect::Absent,
        None,
        "xprezero.hint= is another name.",
    );
    v.add(
        "absent_longer_name_after",
        cmd(format!("prezero.hintx={t1}")),
        TextExpect::Absent,
        None,
        "prezero.hintx= is another name.",
    );
    v.add(
        "absent_case",
        cmd(format!("Prezero.hint={t1} PREZERO.HINT={t1}")),
        TextExpect::Absent,
        None,
        "The name is case-sensitive.",
    );
    v.add(
        "absent_after_dashdash",
        cmd(format!("quiet -- prezero.hint={t1}")),
        TextExpect::Absent,
        None,
        "After --: init's argument, not a kernel parameter.",
    );
    v.add(
        "absent_after_quoted_dashdash",
        cmd(format!("quiet \"--\" prezero.hint={t1}")),
        TextExpect::Absent,
        None,
        "A quoted \"--\" ends the parameters too: the kernel strips the quotes first.",
    );
    v.add(
        "absent_inside_value",
        cmd(format!("init.note=\"prezero.hint={t1}\"")),
        TextExpect::Absent,
        None,
        "prezero.hint= inside another parameter's quoted value.",
    );
    v.add(
        "absent_smbios_none",
        smbios(&[]),
        TextExpect::Absent,
        None,
        "SMBIOS: no OEM strings at all.",
    );
    v.add(
        "absent_smbios_no_match",
        smbios(&[
            "vendor=acme",
            "prezero.hint",
            &format!("prezero.hintx={t1}"),
        ]),
        TextExpect::Absent,
        None,
        "SMBIOS: no string starts with prezero.hint= (the name alone, a longer name).",
    );
    v.add(
        "absent_smbios_not_at_start",
        smbios(&[
            &format!(" prezero.hint={t1}"),
            &format!("x prezero.hint={t1}"),
            &format!("Prezero.hint={t1}"),
        ]),
        TextExpect::Absent,
        None,
        "SMBIOS: the prefix must be exactly at the start (no leading space, case-sensitive).",
    );

    // ---- duplicate ----
    v.add(
        "duplicate_equal",
        cmd(format!("prezero.hint={t1} quiet prezero.hint={t1}")),
        text_err("Duplicate"),
        None,
        "Two equal parameters: Duplicate all the same.",
    );
    v.add(
        "duplicate_different",
        cmd(format!("prezero.hint={t1} prezero.hint={tm}")),
        text_err("Duplicate"),
        None,
        "Two different parameters.",
    );
    v.add(
        "duplicate_before_text_errors",
        cmd("prezero.hint=!! prezero.hint=A"),
        text_err("Duplicate"),
        None,
        "Two parameters whose texts are both bad: Duplicate is checked first.",
    );
    v.add(
        "duplicate_empty_second",
        cmd(format!("prezero.hint={t1} prezero.hint=")),
        text_err("Duplicate"),
        None,
        "An empty prezero.hint= is a parameter too.",
    );
    v.add(
        "duplicate_bare_name",
        cmd(format!("prezero.hint={t1} prezero.hint")),
        text_err("Duplicate"),
        None,
        "A bare prezero.hint (no =) is the parameter too: Duplicate.",
    );
    v.add(
        "duplicate_smbios",
        smbios(&[
            &format!("prezero.hint={t1}"),
            "vendor=acme",
            &format!("prezero.hint={t1}"),
        ]),
        text_err("Duplicate"),
        None,
        "SMBIOS: two strings with the prefix.",
    );

    // ---- text errors, in spec order ----
    v.add(
        "too_long_1025",
        cmd(format!("prezero.hint={}", "A".repeat(1025))),
        text_err("TextTooLong"),
        None,
        "1025 characters (also 1 mod 4: the length limit is checked first).",
    );
    v.add(
        "too_long_2000",
        cmd(format!(
            "prezero.hint={}!{}",
            "A".repeat(1000),
            "A".repeat(999)
        )),
        text_err("TextTooLong"),
        None,
        "2000 characters with a bad character at 1000: the length is checked before the characters.",
    );
    v.add(
        "too_long_31_entries",
        cmd(format!("prezero.hint={t_31}")),
        text_err("TextTooLong"),
        None,
        "A valid 31-entry hint is 1035 characters: why producers stop at 30 entries.",
    );
    v.add(
        "too_long_bytes",
        cmd(format!("prezero.hint={}", "\u{e9}".repeat(600))),
        text_err("TextTooLong"),
        None,
        "600 characters U+00E9 are 1200 bytes: the limit counts bytes, as the kernel does.",
    );
    v.add(
        "too_long_smbios",
        smbios(&[&format!("prezero.hint={}", "A".repeat(1028))]),
        text_err("TextTooLong"),
        None,
        "SMBIOS: 1028 characters.",
    );
    v.add(
        "bad_char_padding",
        cmd(format!("prezero.hint={t1}=")),
        bad_char(75),
        None,
        "Standard = padding (the 56-byte hint's 75 characters padded to 76).",
    );
    v.add(
        "bad_char_plus",
        cmd(format!("prezero.hint={}", with_char(10, "+"))),
        bad_char(10),
        None,
        "+ from the standard base64 alphabet at index 10 (base64url has -).",
    );
    v.add(
        "bad_char_slash",
        cmd(format!("prezero.hint={}", with_char(20, "/"))),
        bad_char(20),
        None,
        "/ from the standard base64 alphabet at index 20 (base64url has _).",
    );
    v.add(
        "bad_char_dot",
        cmd(format!("prezero.hint={}", with_char(74, "."))),
        bad_char(74),
        None,
        "A . as the last character.",
    );
    v.add(
        "bad_char_non_ascii",
        cmd(format!("prezero.hint={}", with_char(5, "\u{e9}"))),
        bad_char(5),
        None,
        "U+00E9 (bytes c3 a9) at index 5: the index of its first byte.",
    );
    v.add(
        "bad_char_space_in_quotes",
        cmd(format!("prezero.hint=\"{} {}\"", &t1[..40], &t1[40..])),
        bad_char(40),
        None,
        "A space inside the quoted value is part of the text: bad at index 40.",
    );
    v.add(
        "bad_char_inner_quotes",
        cmd("prezero.hint=AB\"CD EF\""),
        bad_char(2),
        None,
        "Quotes that do not open the value are not stripped (they still join AB\"CD and EF\" into one parameter).",
    );
    v.add(
        "bad_char_open_quote",
        cmd(format!("prezero.hint=\"{t1} quiet")),
        bad_char(75),
        None,
        "An unterminated quote runs to the end of the line: the text is the rest of the line, without the opening quote.",
    );
    v.add(
        "bad_char_nbsp_cut",
        cmd(format!("prezero.hint={t1}\u{a0}quiet")),
        bad_char(75),
        None,
        "U+00A0 (c2 a0) right after the text: the kernel splits at byte 0xa0, so the text ends with byte 0xc2.",
    );
    v.add(
        "bad_char_before_length",
        cmd("prezero.hint=AAAA!"),
        bad_char(4),
        None,
        "5 characters, the last one bad: the characters are checked before the length.",
    );
    v.add(
        "bad_char_smbios_space",
        smbios(&[&format!("prezero.hint= {t1}")]),
        bad_char(0),
        None,
        "SMBIOS: nothing is trimmed, a space after the prefix is the text's first character.",
    );
    v.add(
        "bad_char_smbios_quotes",
        smbios(&[&format!("prezero.hint=\"{t1}\"")]),
        bad_char(0),
        None,
        "SMBIOS: quotes are not stripped.",
    );
    v.add(
        "bad_length_1",
        cmd("prezero.hint=A"),
        text_err("TextBadLength"),
        None,
        "1 character: no byte count encodes to a length of 1 mod 4.",
    );
    v.add(
        "bad_length_5",
        cmd("prezero.hint=AAAAA"),
        text_err("TextBadLength"),
        None,
        "5 characters.",
    );
    v.add(
        "bad_length_77",
        cmd(format!("prezero.hint={t1}AA")),
        text_err("TextBadLength"),
        None,
        "A hint's 75 characters plus 2: 77 characters.",
    );
    v.add(
        "non_canonical_tail2",
        cmd("prezero.hint=AB"),
        text_err("TextNonCanonical"),
        None,
        "2-character tail (1 byte, 4 unused bits) with unused bit 0 set: AA is the canonical text of that byte.",
    );
    let last = t1.chars().last().expect("non-empty");
    let stray = char::from(ALPHABET[sextet(last) | 1]);
    v.add(
        "non_canonical_tail3",
        cmd(format!("prezero.hint={}{stray}", &t1[..74])),
        text_err("TextNonCanonical"),
        None,
        "A 56-byte hint's 75 characters (3-character tail: 2 bytes, 2 unused bits) with unused bit 0 set in the last one.",
    );
    v.add(
        "non_canonical_smbios",
        smbios(&["prezero.hint=AAC"]),
        text_err("TextNonCanonical"),
        None,
        "SMBIOS: 3-character tail with unused bit 1 set.",
    );

    // ---- decoded, then the blob checks (exact length) ----
    v.add(
        "empty_value",
        cmd("quiet prezero.hint= rw"),
        blob(&[], super::err("Truncated")),
        Some("trunc_zero_bytes.bin"),
        "An empty text is valid and decodes to 0 bytes, which the blob check calls Truncated.",
    );
    v.add(
        "empty_quoted_value",
        cmd("prezero.hint=\"\""),
        blob(&[], super::err("Truncated")),
        Some("trunc_zero_bytes.bin"),
        "An empty quoted value.",
    );
    v.add(
        "empty_bare_name",
        cmd("quiet prezero.hint rw"),
        blob(&[], super::err("Truncated")),
        Some("trunc_zero_bytes.bin"),
        "A bare prezero.hint (no =) is the parameter with an empty text, as the kernel's early-parameter handler gets it (NULL): Truncated, refused rather than ignored.",
    );
    v.add(
        "empty_smbios",
        smbios(&["prezero.hint="]),
        blob(&[], super::err("Truncated")),
        Some("trunc_zero_bytes.bin"),
        "SMBIOS: the prefix alone.",
    );
    v.add(
        "tail2_canonical",
        cmd("prezero.hint=AQ"),
        blob(&[0x01], super::err("Truncated")),
        None,
        "A canonical 2-character tail decodes to 1 byte (0x01).",
    );
    v.add(
        "tail3_canonical",
        cmd("prezero.hint=AAE"),
        blob(&[0x00, 0x01], super::err("Truncated")),
        None,
        "A canonical 3-character tail decodes to 2 bytes (0x00 0x01).",
    );
    for (name, file, e, desc) in [
        (
            "blob_truncated",
            "trunc_entries_header_only.bin",
            super::err("Truncated"),
            "entry_count 1, header only.",
        ),
        (
            "blob_bad_magic",
            "bad_magic.bin",
            super::err("BadMagic"),
            "Magic ZSHINT02.",
        ),
        (
            "blob_too_many_entries",
            "too_many_entries.bin",
            super::err("TooManyEntries"),
            "entry_count 513: the count is checked before the length, and the header fits a text.",
        ),
        (
            "blob_bad_length",
            "trailing_garbage.bin",
            super::err("BadLength"),
            "A valid hint plus 16 bytes: the text gives an exact length, so trailing bytes are BadLength.",
        ),
        (
            "blob_bad_checksum",
            "bad_checksum.bin",
            super::err("BadChecksum"),
            "One bit of the checksum flipped.",
        ),
        (
            "blob_misaligned",
            "entry_misaligned_length.bin",
            super::err_at("Misaligned", 1),
            "Entry 1 length 0x100001: entry errors carry the entry index.",
        ),
    ] {
        let b = bytes_of(bins, file).to_vec();
        v.add(
            name,
            cmd(format!("prezero.hint={}", b64url(&b))),
            blob(&b, e),
            Some(file),
            desc,
        );
    }
    v.add(
        "blob_1024_chars",
        cmd(format!("prezero.hint={}", b64url(&max_plus))),
        blob(&max_plus, super::err("BadLength")),
        None,
        "Exactly 1024 characters is not TextTooLong: 768 bytes, a 30-entry hint plus 16 bytes, BadLength.",
    );

    let vectors = v.0;
    for tv in &vectors {
        if let (Some(f), TextExpect::Decoded(b, _)) = (&tv.file, &tv.expect) {
            assert_eq!(bytes_of(bins, f), b.as_slice(), "{}: file {f}", tv.name);
        }
        check_against_crate(tv);
    }
    vectors
}

/// Panics unless the crate finds, decodes and validates exactly as
/// `tv.expect` says.
pub fn check_against_crate(tv: &TextVector) {
    let found = match &tv.transport {
        Transport::Cmdline(c) => find_in_cmdline(c),
        Transport::Smbios(s) => {
            let refs: Vec<&str> = s.iter().map(String::as_str).collect();
            find_in_oem_strings(&refs)
        }
    };
    let got: Result<Option<Vec<u8>>, TextError> = found.and_then(|t| {
        t.map(|t| {
            let mut buf = [0u8; TEXT_MAX_BYTES];
            let n = decode_text(t, &mut buf)?;
            Ok(buf[..n].to_vec())
        })
        .transpose()
    });
    match (&tv.expect, got) {
        (TextExpect::Absent, Ok(None)) => {}
        (TextExpect::Text(name, index), Err(e)) => {
            assert_eq!((e.name(), e.index()), (*name, *index), "{}", tv.name);
        }
        (TextExpect::Decoded(want, blob), Ok(Some(bytes))) => {
            assert_eq!(&bytes, want, "{}: decoded bytes", tv.name);
            match (blob, decode_exact(&bytes)) {
                (Expect::Ok, Ok(_)) => {}
                (Expect::Err(n, i), Err(e)) => {
                    assert_eq!((e.name(), e.index()), (*n, *i), "{}: blob", tv.name)
                }
                (want, got) => panic!("{}: blob expected {want:?}, got {got:?}", tv.name),
            }
        }
        (want, got) => panic!("{}: expected {want:?}, got {got:?}", tv.name),
    }
}

/// The vector's `expect` name and index, as in text.json.
pub fn expect_of(e: &TextExpect) -> (&'static str, Option<usize>) {
    match e {
        TextExpect::Absent => ("Absent", None),
        TextExpect::Text(n, i) => (n, *i),
        TextExpect::Decoded(_, Expect::Ok) => ("ok", None),
        TextExpect::Decoded(_, Expect::Err(n, i)) => (n, *i),
    }
}

/// A JSON string: ASCII only, everything else as \u escapes, so the file
/// reads the same in any encoding.
pub fn json_str(s: &str) -> String {
    let mut o = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => o.push_str("\\\""),
            '\\' => o.push_str("\\\\"),
            '\n' => o.push_str("\\n"),
            '\r' => o.push_str("\\r"),
            '\t' => o.push_str("\\t"),
            ' '..='~' => o.push(c),
            _ => {
                for u in c.encode_utf16(&mut [0; 2]) {
                    let _ = write!(o, "\\u{u:04x}");
                }
            }
        }
    }
    o.push('"');
    o
}

pub fn json(vectors: &[TextVector]) -> String {
    let mut s = String::from("[\n");
    for (i, v) in vectors.iter().enumerate() {
        let (transport, input) = match &v.transport {
            Transport::Cmdline(c) => ("cmdline", json_str(c)),
            Transport::Smbios(l) => (
                "smbios",
                format!(
                    "[{}]",
                    l.iter().map(|x| json_str(x)).collect::<Vec<_>>().join(", ")
                ),
            ),
        };
        let (expect, index) = expect_of(&v.expect);
        let _ = write!(
            s,
            "  {{\"name\": \"{}\", \"transport\": \"{transport}\", \"input\": {input}, \"expect\": \"{expect}\"",
            v.name
        );
        if let Some(index) = index {
            let _ = write!(s, ", \"index\": {index}");
        }
        if let Some(f) = &v.file {
            let _ = write!(s, ", \"file\": \"{f}\"");
        }
        let _ = write!(s, ", \"description\": {}}}", json_str(&v.description));
        s.push_str(if i + 1 < vectors.len() { ",\n" } else { "\n" });
    }
    s.push_str("]\n");
    s
}

/// `TextTooLong` → `TOO_LONG`, `Duplicate` → `DUPLICATE`.
fn text_c_name(name: &str) -> String {
    c_name(name.strip_prefix("Text").unwrap_or(name))
}

/// A C string literal of `s`'s bytes, split into lines of adjacent
/// literals. Printable ASCII stays (`"`, `\` and `?` escaped, the last so
/// no trigraph can form), tab, newline and return as `\t` `\n` `\r`,
/// anything else as a 3-digit octal escape (which never absorbs a
/// following digit).
fn c_str(s: &str, indent: &str) -> String {
    let mut pieces = Vec::new();
    for &b in s.as_bytes() {
        pieces.push(match b {
            b'"' => "\\\"".to_string(),
            b'\\' => "\\\\".to_string(),
            b'?' => "\\?".to_string(),
            b'\t' => "\\t".to_string(),
            b'\n' => "\\n".to_string(),
            b'\r' => "\\r".to_string(),
            b' '..=b'~' => char::from(b).to_string(),
            _ => format!("\\{b:03o}"),
        });
    }
    if pieces.is_empty() {
        return "\"\"".to_string();
    }
    let lines: Vec<String> = pieces
        .chunks(72)
        .map(|c| format!("\"{}\"", c.concat()))
        .collect();
    lines.join(&format!("\n{indent}"))
}

pub fn header(vectors: &[TextVector]) -> String {
    let mut s = String::from(
        "/* SPDX-License-Identifier: Apache-2.0 OR BSD-3-Clause */\n\
         /* Generated by `cargo run -p zerohint --example gen_vectors -- tests/vectors`; do not edit. */\n\
         /*\n \
         * zerostart hint ABI v1, text form (docs/hint-abi.md \"Text form\"): the\n \
         * golden vectors of text.json, for the kernel's command line and SMBIOS\n \
         * OEM string consumers. See README.md.\n \
         *\n \
         * A consumer finds the text (Absent, Duplicate), decodes it (TOO_LONG,\n \
         * BAD_CHAR, BAD_LENGTH, NON_CANONICAL: first failure wins), and only\n \
         * then validates the decoded bytes as a hint with an exact length. So\n \
         * data, len, expect and index are meaningful only when text_expect is\n \
         * ZSHINT_TEXT_E_OK; otherwise data is NULL and len, expect and index\n \
         * are 0. text_index is 0 unless text_expect is ZSHINT_TEXT_E_BAD_CHAR,\n \
         * index is 0 unless expect is an entry error. Input strings are the\n \
         * UTF-8 bytes of text.json's strings.\n \
         */\n\
         #ifndef ZSHINT_TEXT_VECTORS_H\n#define ZSHINT_TEXT_VECTORS_H\n\n#include \"zshint_errors.h\"\n\n\
         /* Longest text in characters (bytes), and what it decodes to at most. */\n\
         #define ZSHINT_TEXT_MAX_CHARS 1024\n\
         #define ZSHINT_TEXT_MAX_BYTES 768\n\
         /* Most entries a hint in text form can have (1003 characters). */\n\
         #define ZSHINT_TEXT_MAX_ENTRIES 30\n\
         /* The kernel parameter, and the start of the SMBIOS OEM string. */\n\
         #define ZSHINT_TEXT_PREFIX \"prezero.hint=\"\n\n\
         /* Text results, in the order of docs/hint-abi.md \"Text form\". */\n\
         #define ZSHINT_TEXT_E_OK 0\n\
         #define ZSHINT_TEXT_E_ABSENT 1\n",
    );
    for (i, n) in TextError::ALL_NAMES.iter().enumerate() {
        let _ = writeln!(s, "#define ZSHINT_TEXT_E_{} {}", text_c_name(n), i + 2);
    }
    let _ = writeln!(
        s,
        "#define ZSHINT_TEXT_E_COUNT {}\n",
        TextError::ALL_NAMES.len() + 2
    );
    s.push_str("/* X-macro: ZSHINT_TEXT_ERRORS(X) expands X(CODE_SUFFIX, \"name\") for every code, OK first. */\n");
    s.push_str(
        "#define ZSHINT_TEXT_ERRORS(X) \\\n\tX(OK, \"ok\") \\\n\tX(ABSENT, \"Absent\") \\\n",
    );
    for (i, n) in TextError::ALL_NAMES.iter().enumerate() {
        let sep = if i + 1 < TextError::ALL_NAMES.len() {
            " \\"
        } else {
            ""
        };
        let _ = writeln!(s, "\tX({}, \"{}\"){}", text_c_name(n), n, sep);
    }
    s.push_str(
        "\n#define ZSHINT_TEXT_CMDLINE 0\n#define ZSHINT_TEXT_SMBIOS 1\n\n\
         struct zshint_text_vector {\n\
         \tconst char *name;\n\
         \tint transport;                 /* ZSHINT_TEXT_CMDLINE / ZSHINT_TEXT_SMBIOS */\n\
         \tconst char *const *input;      /* CMDLINE: input[0] is the whole command line; SMBIOS: the OEM strings */\n\
         \tunsigned int input_count;\n\
         \tint text_expect;               /* ZSHINT_TEXT_E_* */\n\
         \tunsigned int text_index;       /* BAD_CHAR: index of the first bad character in the text */\n\
         \tconst unsigned char *data;     /* decoded bytes when text_expect == OK (NULL when len == 0) */\n\
         \tunsigned int len;\n\
         \tint expect;                    /* ZSHINT_E_* (from zshint_errors.h) of data validated with an exact length */\n\
         \tunsigned int index;            /* entry errors: the entry index */\n\
         };\n\n",
    );
    for v in vectors {
        let inputs: Vec<&str> = match &v.transport {
            Transport::Cmdline(c) => vec![c.as_str()],
            Transport::Smbios(l) => l.iter().map(String::as_str).collect(),
        };
        if !inputs.is_empty() {
            let _ = writeln!(
                s,
                "static const char *const zshint_text_in_{}[{}] = {{",
                v.name,
                inputs.len()
            );
            for i in inputs {
                let _ = writeln!(s, "\t{},", c_str(i, "\t"));
            }
            s.push_str("};\n\n");
        }
        if let TextExpect::Decoded(b, _) = &v.expect {
            if !b.is_empty() {
                let _ = writeln!(
                    s,
                    "static const unsigned char zshint_text_data_{}[{}] = {{",
                    v.name,
                    b.len()
                );
                for chunk in b.chunks(12) {
                    let line: Vec<String> = chunk.iter().map(|x| format!("0x{x:02x}")).collect();
                    let _ = writeln!(s, "\t{},", line.join(", "));
                }
                s.push_str("};\n\n");
            }
        }
    }
    let _ = writeln!(s, "#define ZSHINT_TEXT_VECTOR_COUNT {}\n", vectors.len());
    s.push_str(
        "static const struct zshint_text_vector zshint_text_vectors[ZSHINT_TEXT_VECTOR_COUNT] = {\n",
    );
    for v in vectors {
        let (transport, count) = match &v.transport {
            Transport::Cmdline(_) => ("ZSHINT_TEXT_CMDLINE", 1),
            Transport::Smbios(l) => ("ZSHINT_TEXT_SMBIOS", l.len()),
        };
        let input = if count == 0 {
            "0".to_string()
        } else {
            format!("zshint_text_in_{}", v.name)
        };
        let (text_expect, text_index, data, len, expect, index) = match &v.expect {
            TextExpect::Absent => (
                "ABSENT".to_string(),
                0,
                "0".to_string(),
                0,
                "OK".to_string(),
                0,
            ),
            TextExpect::Text(n, i) => (
                text_c_name(n),
                i.unwrap_or(0),
                "0".to_string(),
                0,
                "OK".to_string(),
                0,
            ),
            TextExpect::Decoded(b, e) => {
                let data = if b.is_empty() {
                    "0".to_string()
                } else {
                    format!("zshint_text_data_{}", v.name)
                };
                let (code, index) = match e {
                    Expect::Ok => ("OK".to_string(), 0),
                    Expect::Err(n, i) => (c_name(n), i.unwrap_or(0)),
                };
                ("OK".to_string(), 0, data, b.len(), code, index)
            }
        };
        let _ = writeln!(
            s,
            "\t{{ \"{}\", {transport}, {input}, {count}, ZSHINT_TEXT_E_{text_expect}, {text_index}, {data}, {len}, ZSHINT_E_{expect}, {index} }},",
            v.name
        );
    }
    s.push_str("};\n\n#endif /* ZSHINT_TEXT_VECTORS_H */\n");
    s
}

/// The README's table of text vectors.
pub fn readme(vectors: &[TextVector]) -> String {
    let mut s = String::from(README_TEXT_HEAD);
    s.push_str("| name | transport | expect | file | description |\n|---|---|---|---|---|\n");
    for v in vectors {
        let transport = match v.transport {
            Transport::Cmdline(_) => "cmdline",
            Transport::Smbios(_) => "smbios",
        };
        let expect = match expect_of(&v.expect) {
            (n @ "TextBadChar", Some(i)) => format!("{n} (character {i})"),
            (n, Some(i)) => format!("{n} (entry {i})"),
            (n, None) => n.to_string(),
        };
        let file = v
            .file
            .as_deref()
            .map_or(String::new(), |f| format!("`{f}`"));
        let _ = writeln!(
            s,
            "| `{}` | {transport} | {expect} | {file} | {} |",
            v.name,
            v.description.replace('|', "\\|")
        );
    }
    s
}

const README_TEXT_HEAD: &str = r#"
## Text vectors

The text form (docs/hint-abi.md, "Text form"): the same bytes as
unpadded, canonical base64url in the kernel parameter `prezero.hint=` or
an SMBIOS type 11 OEM string `prezero.hint=`. A consumer finds the text
(`Absent`, `Duplicate`), decodes it (`TextTooLong`, `TextBadChar`,
`TextBadLength`, `TextNonCanonical`, first failure wins), then validates
the decoded bytes with an exact length (`expect` is then `ok` or the
binary error name above). The inputs themselves are in `text.json`.

"#;
