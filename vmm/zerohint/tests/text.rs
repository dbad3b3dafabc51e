//! The text form (docs/hint-abi.md "Text form"): base64url round trips,
//! a decoder that accepts exactly the canonical texts and never panics,
//! the kernel-compatible command-line search, and a producer that fits the
//! limits by dropping whole ranges, smallest first.

use proptest::prelude::*;
use zerohint::*;

const P: u64 = PAGE_SIZE;

/// A valid hint of up to `max` entries; lengths of 1..`len_pages` pages, so
/// a small `len_pages` gives many ties.
fn hint(max: usize, len_pages: u64) -> impl Strategy<Value = Hint> {
    let shift = prop::sample::select(PAGE_SHIFTS.to_vec());
    (
        any::<bool>(),
        0u64..1 << 30,
        prop::collection::vec((0u64..1 << 20, 1..len_pages, shift), 0..=max),
    )
        .prop_map(|(scrub, base, parts)| {
            let mut cur = base * P;
            let entries = parts
                .into_iter()
                .map(|(gap, len, page_shift)| {
                    let start = cur + gap * P;
                    cur = start + len * P;
                    Entry {
                        start,
                        length: len * P,
                        flags: if scrub { 0 } else { ENTRY_FLAG_ZEROED },
                        page_shift,
                    }
                })
                .collect();
            Hint {
                flags: u32::from(scrub),
                entries,
            }
        })
}

fn zero_hint(max: usize, len_pages: u64) -> impl Strategy<Value = Hint> {
    hint(max, len_pages).prop_map(|mut h| {
        h.flags = 0;
        for e in &mut h.entries {
            e.flags = ENTRY_FLAG_ZEROED;
        }
        h
    })
}

fn decode_all(text: &str) -> Vec<u8> {
    let mut buf = [0u8; TEXT_MAX_BYTES];
    let n = decode_text(text, &mut buf).expect("text decodes");
    buf[..n].to_vec()
}

/// Command-line pieces, quotes and white space of every kind included, so
/// the tokenizer meets everything the kernel's does.
fn cmdline_piece() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(" ".to_string()),
        Just("\t".to_string()),
        Just("\u{a0}".to_string()),
        Just("\"".to_string()),
        Just("=".to_string()),
        Just("--".to_string()),
        Just("prezero.hint".to_string()),
        Just("prezero.hint=".to_string()),
        Just("AAAA".to_string()),
        Just("quiet".to_string()),
        Just("\u{e9}".to_string()),
        "[a-zA-Z0-9_.=\" -]{0,6}",
    ]
}

fn cmdline() -> impl Strategy<Value = String> {
    prop::collection::vec(cmdline_piece(), 0..16).prop_map(|v| v.concat())
}

/// A command line without quotes or a hint, with or without `--`.
fn plain_cmdline() -> impl Strategy<Value = String> {
    (
        prop::collection::vec("[a-z0-9_.]{1,8}(=[a-z0-9,/]{0,8})?", 0..8),
        prop::option::of(prop::collection::vec("[a-z0-9=-]{1,8}", 0..4)),
        0usize..1800,
    )
        .prop_map(|(params, init, pad)| {
            let mut s = params.join(" ");
            if pad > 1200 {
                // Long lines, so the command-line limit bites.
                s.push_str(&format!(" pad={}", "x".repeat(pad - 200)));
            }
            if let Some(init) = init {
                s.push_str(" -- ");
                s.push_str(&init.join(" "));
            }
            s.trim_start().to_string()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn round_trip(h in hint(TEXT_MAX_ENTRIES, 1 << 12)) {
        let bytes = h.encode().unwrap();
        let text = encode_text(&bytes);
        prop_assert_eq!(text.len(), text_len(bytes.len()));
        prop_assert!(text.len() <= TEXT_MAX_CHARS);
        prop_assert_eq!(&decode_all(&text), &bytes);
        prop_assert_eq!(Hint::from(&decode_exact(&bytes).unwrap()), h);
        let line = format!("quiet prezero.hint={text} rw");
        prop_assert_eq!(find_in_cmdline(&line), Ok(Some(text.as_str())));
        let quoted = format!("quiet \"prezero.hint={text}\"");
        prop_assert_eq!(find_in_cmdline(&quoted), Ok(Some(text.as_str())));
        let smbios = format!("prezero.hint={text}");
        prop_assert_eq!(find_in_oem_strings(&["a", &smbios]), Ok(Some(text.as_str())));
    }

    /// The decoder never panics, accepts exactly the canonical texts (what
    /// it decodes re-encodes to the same text) and reports the first bad
    /// character.
    #[test]
    fn decode_text_total(text in prop_oneof![
        any::<String>(),
        "[A-Za-z0-9_-]{0,1030}",
        "[A-Za-z0-9_=+/. -]{0,40}",
    ]) {
        let mut buf = [0u8; TEXT_MAX_BYTES];
        match decode_text(&text, &mut buf) {
            Ok(n) => {
                prop_assert_eq!(n, text.len() * 3 / 4);
                prop_assert_eq!(encode_text(&buf[..n]), text);
            }
            Err(TextError::TooLong) => prop_assert!(text.len() > TEXT_MAX_CHARS),
            Err(TextError::BadChar { index }) => {
                let b = text.as_bytes();
                let ok = |c: &u8| c.is_ascii_alphanumeric() || *c == b'-' || *c == b'_';
                prop_assert!(!ok(&b[index]));
                prop_assert!(b[..index].iter().all(ok));
            }
            Err(TextError::BadLength) => prop_assert_eq!(text.len() % 4, 1),
            Err(e) => prop_assert_eq!(e, TextError::NonCanonical),
        }
    }

    /// Arbitrary command lines never panic, and what is found is a piece
    /// of the line.
    #[test]
    fn find_in_cmdline_total(line in prop_oneof![cmdline(), any::<String>()]) {
        if let Ok(Some(text)) = find_in_cmdline(&line) {
            prop_assert!(line.contains(text));
        }
    }

    /// The producer's trimming: the text always decodes to a valid hint
    /// within both limits, holds only input ranges (whole), as many as fit,
    /// and the largest ones (ties: the lower start).
    #[test]
    fn encode_text_fitting_keeps_largest(
        h in hint(80, 6),
        max_chars in prop_oneof![0usize..1200, Just(usize::MAX)],
    ) {
        let budget = max_chars.min(TEXT_MAX_CHARS);
        let fit = (0..=TEXT_MAX_ENTRIES)
            .rev()
            .find(|&k| text_len(encoded_size(k)) <= budget)
            .unwrap_or(0)
            .min(h.entries.len());
        let got = h.encode_text_fitting(max_chars).unwrap();
        let Some((text, dropped)) = got else {
            prop_assert_eq!(fit, 0, "None although {} ranges fit", fit);
            return Ok(());
        };
        prop_assert!(text.len() <= budget);
        let bytes = decode_all(&text);
        let view = decode_exact(&bytes).unwrap();
        prop_assert_eq!(view.flags(), h.flags);
        prop_assert!(view.len() <= TEXT_MAX_ENTRIES);
        prop_assert_eq!(view.len(), fit);
        prop_assert_eq!(view.len() + dropped, h.entries.len());
        let kept: Vec<Entry> = view.entries().collect();
        for k in &kept {
            prop_assert!(h.entries.contains(k), "{:?} is not an input range", k);
        }
        let rank = |e: &Entry| (e.length, std::cmp::Reverse(e.start));
        for d in h.entries.iter().filter(|e| !kept.contains(e)) {
            for k in &kept {
                prop_assert!(rank(k) > rank(d), "dropped {:?} but kept {:?}", d, k);
            }
        }
    }

    /// The command-line helper adds exactly one parameter before any `--`,
    /// stays within the limit, and changes nothing else.
    #[test]
    fn cmdline_with_hint_adds_one_param(line in plain_cmdline(), h in zero_hint(40, 1 << 10)) {
        let (out, dropped) = cmdline_with_hint(&line, &h).unwrap();
        prop_assert!(dropped <= h.entries.len());
        if dropped == h.entries.len() {
            prop_assert_eq!(&out, &line);
            prop_assert_eq!(find_in_cmdline(&out), Ok(None));
            return Ok(());
        }
        prop_assert!(out.len() <= CMDLINE_MAX);
        let text = find_in_cmdline(&out).unwrap().expect("the hint");
        let param = format!("prezero.hint={text}");
        let restored = if line.split_whitespace().any(|t| t == "--") {
            out.replacen(&format!("{param} "), "", 1)
        } else if line.is_empty() {
            out.replacen(&param, "", 1)
        } else {
            out.replacen(&format!(" {param}"), "", 1)
        };
        prop_assert_eq!(&restored, &line);
        let view_len = decode_exact(&decode_all(text)).unwrap().len();
        prop_assert_eq!(view_len + dropped, h.entries.len());
        // One fewer character of room would have cost a range, or nothing
        // was dropped: the helper uses the room it has.
        if dropped > 0 {
            prop_assert!(out.len() + 32 > CMDLINE_MAX || view_len == TEXT_MAX_ENTRIES);
        }
    }
}

#[test]
fn rfc4648_base64url() {
    // RFC 4648 section 10, padding removed, plus the two url-safe symbols.
    for (bytes, text) in [
        (&b""[..], ""),
        (b"f", "Zg"),
        (b"fo", "Zm8"),
        (b"foo", "Zm9v"),
        (b"foob", "Zm9vYg"),
        (b"fooba", "Zm9vYmE"),
        (b"foobar", "Zm9vYmFy"),
        (&[0xfb, 0xff][..], "-_8"),
    ] {
        assert_eq!(encode_text(bytes), text);
        assert_eq!(decode_all(text), bytes);
    }
}

#[test]
fn decode_text_order_and_limits() {
    let mut buf = [0u8; TEXT_MAX_BYTES];
    let mut d = |t: &str| decode_text(t, &mut buf);
    assert_eq!(d(&"A".repeat(1025)), Err(TextError::TooLong));
    assert_eq!(d(&"A".repeat(1024)), Ok(768));
    assert_eq!(d("AAAA!"), Err(TextError::BadChar { index: 4 }));
    assert_eq!(d("Zg=="), Err(TextError::BadChar { index: 2 }));
    assert_eq!(d("AAAAA"), Err(TextError::BadLength));
    assert_eq!(d("Zh"), Err(TextError::NonCanonical));
    assert_eq!(d("Zm9"), Err(TextError::NonCanonical));
    assert_eq!(d(""), Ok(0));
    assert_eq!(TextError::BadChar { index: 3 }.name(), "TextBadChar");
    assert_eq!(TextError::NonCanonical.code(), 6);
}

#[test]
#[should_panic(expected = "TEXT_MAX_BYTES")]
fn decode_text_small_buffer_panics() {
    let _ = decode_text("AAAAAAAA", &mut [0u8; 5]);
}

#[test]
fn cmdline_tokenizer_like_the_kernel() {
    let t = "AAAA";
    for (line, want) in [
        ("prezero.hint=AAAA", Ok(Some(t))),
        ("a=\"x y\" prezero.hint=\"AAAA\"", Ok(Some(t))),
        ("\"prezero.hint=AAAA\"", Ok(Some(t))),
        ("\"--\" prezero.hint=AAAA", Ok(None)),
        ("--= prezero.hint=AAAA", Ok(Some(t))), // `--=` has a value: not the end
        ("=prezero.hint=AAAA", Ok(None)),       // a leading = is part of the name
        ("prezero.hint=AAAA\0 prezero.hint=AAAA", Ok(Some(t))), // a C string ends at NUL
        ("prezero.hint", Ok(Some(""))),
        ("a \"prezero.hint\" b", Ok(Some(""))),
        (
            "prezero.hint=AAAA prezero.hint=AAAA",
            Err(TextError::Duplicate),
        ),
        // Cut at byte 0xa0 inside U+00A0: the value ends with byte 0xc2.
        (
            "prezero.hint=AAAA\u{a0}",
            Err(TextError::BadChar { index: 4 }),
        ),
        ("prezero.hint=\u{a0}", Err(TextError::BadChar { index: 0 })),
    ] {
        assert_eq!(find_in_cmdline(line), want, "{line:?}");
    }
}

/// `n` equal ranges with gaps (built directly: `n` may exceed 512).
fn ranges(n: u64, len: u64) -> Hint {
    Hint {
        flags: 0,
        entries: (0..n)
            .map(|i| Entry::zeroed(i * 2 * len, len, 12))
            .collect(),
    }
}

#[test]
fn encode_text_fitting_edges() {
    // Nothing to say, or no room for one range: no hint, never an empty one.
    assert_eq!(Hint::default().encode_text_fitting(1024), Ok(None));
    assert_eq!(ranges(3, P).encode_text_fitting(74), Ok(None));
    // Ties: the higher start goes first.
    let (text, dropped) = ranges(3, P).encode_text_fitting(75).unwrap().unwrap();
    assert_eq!(dropped, 2);
    let view_bytes = decode_all(&text);
    let view = decode_exact(&view_bytes).unwrap();
    assert_eq!(view.entry(0).start, 0);
    // More than 512 ranges are fine: they are dropped anyway.
    let (text, dropped) = ranges(600, P)
        .encode_text_fitting(usize::MAX)
        .unwrap()
        .unwrap();
    assert_eq!((text.len(), dropped), (1003, 570));
    // An invalid hint is an error even where its bad range would be dropped.
    let mut bad = ranges(40, P);
    bad.entries[39].page_shift = 13;
    assert_eq!(
        bad.encode_text_fitting(1024),
        Err(Error::BadPageShift { index: 39 })
    );
}

#[test]
fn cmdline_with_hint_refuses_and_places() {
    let h = ranges(2, 2 * P);
    assert_eq!(
        cmdline_with_hint("quiet prezero.hint=AAAA", &h),
        Err(CmdlineError::HasHint)
    );
    assert_eq!(
        cmdline_with_hint("quiet prezero.hint", &h),
        Err(CmdlineError::HasHint)
    );
    assert_eq!(
        cmdline_with_hint("quiet a=\"b", &h),
        Err(CmdlineError::OpenQuote)
    );
    assert_eq!(cmdline_with_hint("quiet\0", &h), Err(CmdlineError::Nul));
    let scrub = Hint::scrub_from_ranges(&[(0, 2 * P)], 12).unwrap();
    assert_eq!(
        cmdline_with_hint("quiet", &scrub),
        Err(CmdlineError::ScrubRequest)
    );
    // After `--`, a hint (and an open quote) is init's business.
    let (line, dropped) = cmdline_with_hint("a -- prezero.hint=x \"", &h).unwrap();
    assert_eq!(dropped, 0);
    let text = find_in_cmdline(&line).unwrap().unwrap();
    assert_eq!(line, format!("a prezero.hint={text} -- prezero.hint=x \""));
    let (line, _) = cmdline_with_hint("", &h).unwrap();
    assert_eq!(line, format!("prezero.hint={text}"));
    let (line, _) = cmdline_with_hint("\"--\"", &h).unwrap();
    assert_eq!(line, format!("prezero.hint={text} \"--\""));
    // Exactly at the limit, and one character over it.
    let one = ranges(1, P);
    let room = CMDLINE_MAX - 1 - TEXT_PREFIX.len() - 75;
    let (line, dropped) = cmdline_with_hint(&"x".repeat(room), &one).unwrap();
    assert_eq!((line.len(), dropped), (CMDLINE_MAX, 0));
    let long = "x".repeat(room + 1);
    assert_eq!(cmdline_with_hint(&long, &one), Ok((long.clone(), 1)));
}
