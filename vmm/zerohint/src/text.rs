//! The text form of the hint (docs/hint-abi.md, "Text form"): the exact
//! bytes of a v1 hint as unpadded, canonical base64url, so the hint can ride
//! on channels every VMM already has: (d) the kernel parameter
//! `prezero.hint=<text>` and (e) an SMBIOS type 11 OEM string
//! `prezero.hint=<text>`.
//!
//! A consumer first finds the text ([`find_in_cmdline`],
//! [`find_in_oem_strings`]; `Ok(None)` is "no hint", not an error), then
//! decodes it ([`decode_text`]) and validates the bytes with
//! [`crate::decode_exact`]: the text says how many bytes there are, so
//! trailing bytes are `BadLength`. Every step reports the first rule broken,
//! in the spec's order, so the Rust, Python and kernel C implementations
//! agree on the golden vectors (`tests/vectors/text.json`).
//!
//! The decoder is strict on purpose: one hint has exactly one text (no
//! padding, no second alphabet, no stray bits), so two transports that carry
//! the same hint carry the same string, and nothing lenient can turn a
//! mangled text into bytes nobody wrote.

use core::fmt;

#[cfg(feature = "alloc")]
use alloc::string::String;
#[cfg(feature = "alloc")]
use alloc::vec::Vec;

#[cfg(feature = "alloc")]
use crate::{Error, Hint};

/// The kernel parameter's name. Matched exactly (the kernel would also
/// accept `-` for `_`, but the name has neither).
pub const TEXT_PARAM: &str = "prezero.hint";
/// What precedes the text: in a command line the parameter and its `=`, in
/// SMBIOS the exact, case-sensitive start of the OEM string.
pub const TEXT_PREFIX: &str = "prezero.hint=";
/// Longest text a consumer accepts, in characters (bytes: the kernel sees
/// bytes, and any non-ASCII byte is a bad character anyway). Bounds the
/// decode buffer a consumer needs before it has looked at the text.
pub const TEXT_MAX_CHARS: usize = 1024;
/// Most bytes a text within [`TEXT_MAX_CHARS`] decodes to: the buffer
/// [`decode_text`] needs.
pub const TEXT_MAX_BYTES: usize = TEXT_MAX_CHARS / 4 * 3;
/// Most entries a hint in text form can have: 32 + 30 * 24 = 752 bytes is
/// 1003 characters, 31 entries would be 1035.
pub const TEXT_MAX_ENTRIES: usize = 30;
/// Longest x86 kernel command line, hint included: `COMMAND_LINE_SIZE`
/// (2048) less its NUL. A longer line is cut by the kernel, so a producer
/// must never make one.
pub const CMDLINE_MAX: usize = 2047;

// TEXT_MAX_ENTRIES is the largest hint that fits TEXT_MAX_CHARS.
const _: () = assert!(
    text_len(crate::encoded_size(TEXT_MAX_ENTRIES)) <= TEXT_MAX_CHARS
        && text_len(crate::encoded_size(TEXT_MAX_ENTRIES + 1)) > TEXT_MAX_CHARS
);

/// The number of characters of the text of `bytes` bytes:
/// ceil(bytes * 4 / 3), there is no padding.
pub const fn text_len(bytes: usize) -> usize {
    (bytes * 4).div_ceil(3)
}

/// Why a text transport's hint was rejected before its bytes were looked
/// at. The variants, their order and their names are part of the ABI: C
/// `ZSHINT_TEXT_E_*` code = [`TextError::code`] (0 is a decoded text, 1 is
/// "absent", which is no error: [`find_in_cmdline`] says `Ok(None)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TextError {
    /// More than one `prezero.hint=` parameter, or more than one OEM string
    /// with the prefix, even when they are equal: a second copy can only
    /// come from a confused or hostile producer.
    Duplicate,
    /// The text is longer than [`TEXT_MAX_CHARS`].
    TooLong,
    /// A character outside the base64url alphabet (`=` padding included).
    BadChar {
        /// Zero-based index of the first bad character (a byte offset; all
        /// characters before it are ASCII, so it is also the character
        /// index).
        index: usize,
    },
    /// The length is 1 more than a multiple of 4, which no byte count
    /// encodes to.
    BadLength,
    /// The last character's unused low bits are not zero: the text is not
    /// the one encoding of its bytes.
    NonCanonical,
}

impl TextError {
    /// Every error name in ABI order: `ALL_NAMES[i]` is C code
    /// `ZSHINT_TEXT_E_*` = `i + 2` (0 is `ok`, 1 is `Absent`).
    pub const ALL_NAMES: [&'static str; 5] = [
        "Duplicate",
        "TextTooLong",
        "TextBadChar",
        "TextBadLength",
        "TextNonCanonical",
    ];

    /// The ABI name (`"TextBadChar"` …), shared with the C codes and the
    /// vectors' `expect` field.
    pub fn name(&self) -> &'static str {
        Self::ALL_NAMES[usize::from(self.code()) - 2]
    }

    /// The C code `ZSHINT_TEXT_E_*` (2..=6).
    pub fn code(&self) -> u8 {
        match self {
            TextError::Duplicate => 2,
            TextError::TooLong => 3,
            TextError::BadChar { .. } => 4,
            TextError::BadLength => 5,
            TextError::NonCanonical => 6,
        }
    }

    /// The index of the first bad character, for [`TextError::BadChar`].
    pub fn index(&self) -> Option<usize> {
        match *self {
            TextError::BadChar { index } => Some(index),
            _ => None,
        }
    }
}

impl fmt::Display for TextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TextError::Duplicate => f.write_str("more than one prezero.hint= text"),
            TextError::TooLong => f.write_str("hint text longer than 1024 characters"),
            TextError::BadChar { index } => {
                write!(
                    f,
                    "hint text character {index} is not base64url (no padding)"
                )
            }
            TextError::BadLength => f.write_str("hint text length is 1 more than a multiple of 4"),
            TextError::NonCanonical => {
                f.write_str("hint text's last character has unused bits set")
            }
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for TextError {}

#[cfg(feature = "alloc")]
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

fn sextet(c: u8) -> Option<u8> {
    match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'-' => Some(62),
        b'_' => Some(63),
        _ => None,
    }
}

/// The text rules in the spec's order; the decoded length.
fn check(text: &[u8]) -> Result<usize, TextError> {
    if text.len() > TEXT_MAX_CHARS {
        return Err(TextError::TooLong);
    }
    let mut last = 0;
    for (index, &c) in text.iter().enumerate() {
        last = sextet(c).ok_or(TextError::BadChar { index })?;
    }
    // A tail of 2 characters carries 1 byte (4 bits unused), of 3 carries
    // 2 bytes (2 bits unused).
    let (tail_bytes, unused) = match text.len() % 4 {
        1 => return Err(TextError::BadLength),
        2 => (1, 0x0f),
        3 => (2, 0x03),
        _ => (0, 0),
    };
    if last & unused != 0 {
        return Err(TextError::NonCanonical);
    }
    Ok(text.len() / 4 * 3 + tail_bytes)
}

/// Decodes a hint text into `out` and returns the number of bytes, which
/// the caller then validates with [`crate::decode_exact`]. Checks, first
/// failure wins: [`TextError::TooLong`], [`TextError::BadChar`],
/// [`TextError::BadLength`], [`TextError::NonCanonical`]. Never allocates;
/// writes nothing on error. An empty text is valid and decodes to 0 bytes
/// (which the blob check then calls `Truncated`).
///
/// # Panics
/// If `out` is shorter than the decoded length: give it
/// [`TEXT_MAX_BYTES`] (768) bytes and it never is.
pub fn decode_text(text: &str, out: &mut [u8]) -> Result<usize, TextError> {
    let text = text.as_bytes();
    let n = check(text)?;
    assert!(
        out.len() >= n,
        "decode_text: {n} bytes do not fit a {}-byte buffer (use TEXT_MAX_BYTES)",
        out.len()
    );
    let (mut acc, mut bits, mut o) = (0u32, 0u32, 0usize);
    for &c in text {
        // Every character passed `check`.
        acc = (acc << 6) | u32::from(sextet(c).unwrap_or(0));
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out[o] = (acc >> bits) as u8;
            o += 1;
            acc &= (1 << bits) - 1;
        }
    }
    Ok(n)
}

/// The kernel's `isspace()` (lib/ctype.c, Latin-1): the ASCII white space
/// and 0xA0, so a no-break space splits parameters like a space does.
fn is_space(c: u8) -> bool {
    matches!(c, b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | b' ' | 0xa0)
}

/// One parameter as the kernel's `next_arg()` splits it, as byte offsets
/// into the command line.
struct Arg {
    /// Offset of the token's first byte (its opening quote, if any).
    #[cfg_attr(not(feature = "alloc"), allow(dead_code))]
    start: usize,
    /// The name: the token before its first `=` (a leading `=` does not
    /// count), or the whole token without its enclosing quotes.
    param: (usize, usize),
    /// The value after the `=`, without the quotes the kernel strips.
    val: Option<(usize, usize)>,
}

/// The kernel's `parse_args()` walk over a command line (lib/cmdline.c
/// `next_arg()`, kernel/params.c): tokens split at unquoted white space; a
/// `"` toggles quoting anywhere in a token; a token that starts with `"`
/// loses that quote and, if it ends with one, the last; a value that starts
/// with `"` loses that quote and, if the token ends with one, the last. The
/// line ends at its first NUL, as the kernel's C string does.
struct Args<'a> {
    s: &'a [u8],
    pos: usize,
    /// The last token ran to the end inside quotes.
    open_quote: bool,
}

impl<'a> Args<'a> {
    fn new(cmdline: &'a [u8]) -> Args<'a> {
        let end = cmdline
            .iter()
            .position(|&c| c == 0)
            .unwrap_or(cmdline.len());
        let mut a = Args {
            s: &cmdline[..end],
            pos: 0,
            open_quote: false,
        };
        a.skip_spaces();
        a
    }

    fn skip_spaces(&mut self) {
        while self.pos < self.s.len() && is_space(self.s[self.pos]) {
            self.pos += 1;
        }
    }

    fn bytes(&self, (a, b): (usize, usize)) -> &'a [u8] {
        &self.s[a..b]
    }
}

impl Iterator for Args<'_> {
    type Item = Arg;

    fn next(&mut self) -> Option<Arg> {
        let s = self.s;
        if self.pos >= s.len() {
            return None;
        }
        let start = self.pos;
        let quoted = s[start] == b'"';
        let args = start + usize::from(quoted);
        let mut in_quote = quoted;
        let (mut i, mut equals) = (0, 0);
        while args + i < s.len() {
            let c = s[args + i];
            if is_space(c) && !in_quote {
                break;
            }
            if equals == 0 && c == b'=' {
                equals = i;
            }
            if c == b'"' {
                in_quote = !in_quote;
            }
            i += 1;
        }
        let end = args + i;
        // The kernel overwrites a closing quote with NUL: it ends whatever
        // the token's last part is (the name, or the value).
        let quote_at_end = i > 0 && s[end - 1] == b'"';
        let arg = if equals == 0 {
            let pend = if quoted && quote_at_end { end - 1 } else { end };
            Arg {
                start,
                param: (args, pend),
                val: None,
            }
        } else {
            let mut vs = args + equals + 1;
            let mut ve = end;
            if vs < end && s[vs] == b'"' {
                vs += 1;
                if quote_at_end {
                    ve = end - 1;
                }
            }
            if quoted && quote_at_end {
                ve = end - 1;
            }
            Arg {
                start,
                param: (args, args + equals),
                val: Some((vs, ve.max(vs))),
            }
        };
        if end < s.len() {
            self.pos = end + 1;
            self.skip_spaces();
        } else {
            self.pos = end;
            self.open_quote = in_quote;
        }
        Some(arg)
    }
}

impl Arg {
    /// `--` with no value ends the kernel's parameters; the rest is init's.
    fn ends_params(&self, a: &Args<'_>) -> bool {
        self.val.is_none() && a.bytes(self.param) == b"--"
    }
}

/// Finds the hint text on a kernel command line: the value of the one
/// `prezero.hint=` parameter before any `--` token, tokenised exactly as
/// the kernel's `next_arg()` does (white space is the kernel's `isspace()`,
/// which includes byte 0xA0; double quotes are stripped as the kernel
/// strips them; the line ends at a NUL, as the kernel's C string does).
/// `Ok(None)`: no hint. [`TextError::Duplicate`]: more than one, even
/// equal. A bare `prezero.hint` without `=` is the parameter with an empty
/// text (which then fails as `Truncated`), as the kernel's early-parameter
/// handler sees it: a confused producer is refused, and cannot hide a
/// second parameter from the `Duplicate` check.
///
/// The kernel splits at a 0xA0 byte even inside a UTF-8 character; a value
/// cut that way is not a `&str`, and holds a non-ASCII byte, so it is
/// reported here as the error [`decode_text`] would give it.
pub fn find_in_cmdline(cmdline: &str) -> Result<Option<&str>, TextError> {
    let bytes = cmdline.as_bytes();
    let mut args = Args::new(bytes);
    let mut found = None;
    while let Some(arg) = args.next() {
        if arg.ends_params(&args) {
            break;
        }
        if args.bytes(arg.param) == TEXT_PARAM.as_bytes() {
            if found.is_some() {
                return Err(TextError::Duplicate);
            }
            // A bare name: an empty text where the name ends.
            found = Some(arg.val.unwrap_or((arg.param.1, arg.param.1)));
        }
    }
    match found {
        None => Ok(None),
        Some((a, b)) => match cmdline.get(a..b) {
            Some(text) => Ok(Some(text)),
            None => Err(match check(&bytes[a..b]) {
                Err(e) => e,
                // Unreachable: the cut left a non-ASCII byte in the value.
                Ok(_) => TextError::BadChar { index: 0 },
            }),
        },
    }
}

/// Finds the hint text among SMBIOS type 11 OEM strings: the rest of the
/// one string that starts with `prezero.hint=` (exact, case-sensitive; no
/// quotes or white space are stripped). `Ok(None)`: no hint.
/// [`TextError::Duplicate`]: more than one such string, even equal.
pub fn find_in_oem_strings<'a>(strings: &[&'a str]) -> Result<Option<&'a str>, TextError> {
    let mut found = None;
    for s in strings {
        if let Some(text) = s.strip_prefix(TEXT_PREFIX) {
            if found.is_some() {
                return Err(TextError::Duplicate);
            }
            found = Some(text);
        }
    }
    Ok(found)
}

/// The text of `blob`: base64url without padding, canonical. Any bytes;
/// [`Hint::encode_text_fitting`] is what a producer uses to stay within
/// the limits.
#[cfg(feature = "alloc")]
pub fn encode_text(blob: &[u8]) -> String {
    let mut s = String::with_capacity(text_len(blob.len()));
    for chunk in blob.chunks(3) {
        let b = |i: usize| u32::from(chunk.get(i).copied().unwrap_or(0));
        let n = (b(0) << 16) | (b(1) << 8) | b(2);
        for k in 0..=chunk.len() {
            s.push(char::from(ALPHABET[(n >> (18 - 6 * k)) as usize & 63]));
        }
    }
    s
}

#[cfg(feature = "alloc")]
impl Hint {
    /// Keeps only the ranges the text form has room for within
    /// `min(max_chars, TEXT_MAX_CHARS)` characters, dropping the smallest
    /// first (of equal lengths, the higher start first), as
    /// [`Hint::encode_text_fitting`] does; for a producer that hands the
    /// trimmed hint on (the launcher publishes it, then encodes it).
    /// `false`, and the hint unchanged, when not even one range fits.
    pub fn fit_text(&mut self, max_chars: usize) -> bool {
        let budget = max_chars.min(TEXT_MAX_CHARS);
        let mut keep = self.entries.len().min(TEXT_MAX_ENTRIES);
        while keep > 0 && text_len(crate::encoded_size(keep)) > budget {
            keep -= 1;
        }
        if keep == 0 {
            return false;
        }
        // Largest first; of equal lengths the lower start (starts are
        // distinct: the entries are sorted and disjoint).
        let mut order: Vec<usize> = (0..self.entries.len()).collect();
        order.sort_unstable_by(|&a, &b| {
            let (a, b) = (&self.entries[a], &self.entries[b]);
            b.length.cmp(&a.length).then(a.start.cmp(&b.start))
        });
        let mut kept = alloc::vec![false; self.entries.len()];
        for &i in &order[..keep] {
            kept[i] = true;
        }
        let mut i = 0;
        self.entries.retain(|_| {
            i += 1;
            kept[i - 1]
        });
        true
    }

    /// The hint as text of at most `min(max_chars, TEXT_MAX_CHARS)`
    /// characters, and how many ranges were dropped to fit: the smallest
    /// first (of equal lengths, the higher start first), never a part of
    /// one, since dropping a range only costs clearing time. `None` when
    /// not even one range fits (or the hint has none): a producer then
    /// passes no hint, never an empty one.
    ///
    /// The whole hint is validated first, so an invalid entry is an error
    /// even if it would have been dropped; more than 512 entries are
    /// allowed, as they are dropped anyway. Any hint kind is encoded, but
    /// the text transports are the kernel's, which only take zero hints
    /// ([`cmdline_with_hint`] refuses a scrub request).
    pub fn encode_text_fitting(&self, max_chars: usize) -> Result<Option<(String, usize)>, Error> {
        if self.flags & !crate::HDR_FLAG_SCRUB_REQUEST != 0 {
            return Err(Error::ReservedNonZero);
        }
        let mut prev = None;
        for (index, e) in self.entries.iter().enumerate() {
            crate::check_entry(e, false, self.is_scrub_request(), prev, index)?;
            prev = Some(e);
        }
        let mut trimmed = self.clone();
        let before = trimmed.entries.len();
        if !trimmed.fit_text(max_chars) {
            return Ok(None);
        }
        let text = encode_text(&trimmed.encode()?);
        debug_assert!(text.len() <= max_chars.min(TEXT_MAX_CHARS));
        Ok(Some((text, before - trimmed.entries.len())))
    }
}

/// Why [`cmdline_with_hint`] would not add a hint to a command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg(feature = "alloc")]
#[non_exhaustive]
pub enum CmdlineError {
    /// The line already has a `prezero.hint` parameter (with or without a
    /// value) before `--`: a second one would make the kernel refuse both
    /// as `Duplicate`, and replacing someone else's hint is not ours to do.
    HasHint,
    /// The line ends inside double quotes: anything appended would be part
    /// of the last parameter's value, not a parameter.
    OpenQuote,
    /// The line holds a NUL byte: the kernel's line ends there, so the
    /// hint would not be seen.
    Nul,
    /// A scrub request: valid only on fw_cfg, the kernel refuses it here.
    ScrubRequest,
    /// The hint itself is invalid.
    Hint(Error),
}

#[cfg(feature = "alloc")]
impl From<Error> for CmdlineError {
    fn from(e: Error) -> CmdlineError {
        CmdlineError::Hint(e)
    }
}

#[cfg(feature = "alloc")]
impl fmt::Display for CmdlineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CmdlineError::HasHint => {
                f.write_str("the kernel command line already has a prezero.hint parameter")
            }
            CmdlineError::OpenQuote => {
                f.write_str("the kernel command line ends inside double quotes")
            }
            CmdlineError::Nul => f.write_str("the kernel command line holds a NUL byte"),
            CmdlineError::ScrubRequest => {
                f.write_str("a scrub request cannot go on the kernel command line")
            }
            CmdlineError::Hint(e) => write!(f, "invalid hint: {e}"),
        }
    }
}

#[cfg(feature = "std")]
impl std::error::Error for CmdlineError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            CmdlineError::Hint(e) => Some(e),
            _ => None,
        }
    }
}

/// `cmdline` with ` prezero.hint=<text>` added, the whole line within
/// [`CMDLINE_MAX`], and how many ranges were dropped to fit (see
/// [`Hint::encode_text_fitting`]). The parameter goes before a `--` token
/// if there is one (after it, it would be init's argument), else at the
/// end. When not even one range fits, the line comes back unchanged with
/// every range counted as dropped: `hint.entries.len() - dropped` ranges
/// were passed.
#[cfg(feature = "alloc")]
pub fn cmdline_with_hint(cmdline: &str, hint: &Hint) -> Result<(String, usize), CmdlineError> {
    if hint.is_scrub_request() {
        return Err(CmdlineError::ScrubRequest);
    }
    let budget = cmdline_text_budget(cmdline)?;
    let Some((text, dropped)) = hint.encode_text_fitting(budget)? else {
        return Ok((String::from(cmdline), hint.entries.len()));
    };
    Ok((cmdline_with_text(cmdline, &text)?, dropped))
}

/// Where `prezero.hint=` goes on `cmdline`: the byte offset of a `--`
/// token (the parameter goes before it), or `None` for the end. Refuses a
/// line the parameter cannot be added to (see [`CmdlineError`]).
#[cfg(feature = "alloc")]
fn hint_slot(cmdline: &str) -> Result<Option<usize>, CmdlineError> {
    let bytes = cmdline.as_bytes();
    if bytes.contains(&0) {
        return Err(CmdlineError::Nul);
    }
    let mut args = Args::new(bytes);
    let mut dashes = None;
    while let Some(arg) = args.next() {
        if arg.ends_params(&args) {
            dashes = Some(arg.start);
            break;
        }
        if args.bytes(arg.param) == TEXT_PARAM.as_bytes() {
            return Err(CmdlineError::HasHint);
        }
    }
    if args.open_quote {
        return Err(CmdlineError::OpenQuote);
    }
    Ok(dashes)
}

/// How many characters the hint's text may take on `cmdline`: what is
/// left of [`CMDLINE_MAX`] after the line, one separating space (none on
/// an empty line) and `prezero.hint=`. For a producer that trims its hint
/// first ([`Hint::fit_text`]) and adds it with [`cmdline_with_text`].
#[cfg(feature = "alloc")]
pub fn cmdline_text_budget(cmdline: &str) -> Result<usize, CmdlineError> {
    hint_slot(cmdline)?;
    let sep = usize::from(!cmdline.is_empty());
    Ok(CMDLINE_MAX.saturating_sub(cmdline.len() + sep + TEXT_PREFIX.len()))
}

/// `cmdline` with ` prezero.hint=<text>` added: before a `--` token if
/// there is one (after it, it would be init's argument), else at the end.
/// `text` is taken as it is (a test may pass a corrupt one); the caller
/// keeps it within [`cmdline_text_budget`].
#[cfg(feature = "alloc")]
pub fn cmdline_with_text(cmdline: &str, text: &str) -> Result<String, CmdlineError> {
    let dashes = hint_slot(cmdline)?;
    let sep = usize::from(!cmdline.is_empty());
    let mut line = String::with_capacity(cmdline.len() + sep + TEXT_PREFIX.len() + text.len());
    match dashes {
        Some(at) => {
            line.push_str(&cmdline[..at]);
            line.push_str(TEXT_PREFIX);
            line.push_str(text);
            line.push(' ');
            line.push_str(&cmdline[at..]);
        }
        None => {
            line.push_str(cmdline);
            if sep == 1 {
                line.push(' ');
            }
            line.push_str(TEXT_PREFIX);
            line.push_str(text);
        }
    }
    Ok(line)
}
