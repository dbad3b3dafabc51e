//! The one hint publisher: every boot path — zerostart's direct boot
//! (setup_data), its firmware boot (fw_cfg) and `zerostart launch` for an
//! external VMM (a fw_cfg file handed to QEMU or cloud-hypervisor) —
//! computes, encodes, publishes and freezes the pre-zeroed hint through
//! [`publish`].
//!
//! Why one function: the order of the steps is the security argument.
//! The hint is computed only after every byte the VMM writes before the
//! guest's first instruction has been written or accounted for; it is
//! encoded once; the transport puts the blob where the guest finds it;
//! then the hint is computed *again* and the boot is refused if the two
//! differ (something wrote into hinted memory in between), and the source
//! freezes it so later VMM writes into hinted memory fail. The test-only
//! corruptions (a flipped checksum bit, a byte planted inside a hinted
//! range behind the tracker's back) happen here too, so every path's
//! negative controls exercise the same code.

use clap::ValueEnum;
use zerohint::Hint;

/// Environment variable that unlocks the test-only switches that hand the
/// guest a false hint (`--test-corrupt-hint`, and `zerostart launch`'s
/// `--test-*`): an operator must never get one by a typo or a copied
/// command.
pub const TEST_SWITCH_ENV: &str = "ZEROSTART_TEST_SWITCHES";

/// True if [`TEST_SWITCH_ENV`] is `1` in this process's environment.
pub fn test_switches_unlocked() -> bool {
    std::env::var_os(TEST_SWITCH_ENV).is_some_and(|v| v == "1")
}

/// Test-only hint corruption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CorruptHint {
    /// Flip a bit in the encoded blob: the guest must report it invalid.
    Checksum,
    /// Write a non-zero byte into a hinted range after building the hint:
    /// the guest must report non-zero memory.
    Dirty,
    /// Write a non-zero byte into every 64 MiB of every hinted range
    /// ([`dirty_addresses`]): the negative control for a guest that checks
    /// a large share of its memory but not all of it (a Linux guest
    /// faulting in 85 % of what is free). A single planted byte can lie in
    /// pages such a check never reads (a `make test` run missed it: the
    /// guest read 786 of 979 hinted MiB); sixteen per GiB cannot all be
    /// missed that way.
    DirtySpread,
}

impl CorruptHint {
    /// The switch's name on the command line (`dirty-spread`), also what
    /// the timeline records.
    pub fn name(self) -> String {
        self.to_possible_value()
            .map_or_else(String::new, |v| v.get_name().to_string())
    }

    /// Where this corruption writes its non-zero bytes into hinted memory
    /// (none for `checksum`, which breaks the blob instead).
    pub fn planted(self, h: &Hint) -> Vec<u64> {
        match self {
            CorruptHint::Checksum => Vec::new(),
            CorruptHint::Dirty => dirty_address(h).into_iter().collect(),
            CorruptHint::DirtySpread => dirty_addresses(h),
        }
    }
}

/// [`CorruptHint::DirtySpread`]'s spacing.
pub const DIRTY_SPREAD: u64 = 64 << 20;

/// Hint publishing errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The hint changed after the boot data was written: something wrote
    /// into hinted memory. Never boot with such a hint.
    #[error(
        "internal error: the zero hint changed while writing boot data ({0}); refusing to boot"
    )]
    Changed(String),
    /// Encoding failed (too many ranges, bad page shift).
    #[error("encoding the zero hint: {0}")]
    Encode(#[from] zerohint::Error),
    /// The memory behind the hint (tracking, freezing, the test plant).
    #[error(transparent)]
    Ram(#[from] guestmem::Error),
    /// An external VMM's memory (the launcher's region) failed.
    #[error("{0}")]
    External(String),
}

/// Where the hint's ranges come from and who enforces them afterwards.
pub trait HintSource {
    /// The zero hint for the memory as it is now (`None`: no hint, e.g.
    /// `prezero=off`).
    fn zero_hint(&mut self) -> Result<Option<Hint>, Error>;
    /// Computes the hint once more after the transport wrote its data and
    /// freezes it: from now on nothing may write into hinted memory.
    fn freeze(&mut self) -> Result<Option<Hint>, Error>;
    /// Test only (`--test-corrupt-hint dirty`): writes `byte` at guest
    /// physical `addr` without telling any tracker, as a buggy VMM would.
    fn plant(&mut self, addr: u64, byte: u8) -> Result<(), Error>;
}

/// What the guest is told about the ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A zero hint: the ranges read zero at the first instruction.
    Zero,
    /// The same ranges as a scrub request: the firmware zeroes them itself.
    Scrub,
}

/// The result of [`publish`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The zero hint (what the VMM claims zero); `None` without one.
    pub zero: Option<Hint>,
    /// What was sent: the zero hint or the scrub request.
    pub sent: Option<Hint>,
    /// The blob handed to the transport (after a test corruption).
    pub blob: Option<Vec<u8>>,
}

impl Published {
    /// The zero hint the guest may rely on: `None` for a scrub request.
    pub fn claimed_zero(&self) -> Option<&Hint> {
        self.sent
            .as_ref()
            .filter(|h| !h.is_scrub_request())
            .and(self.zero.as_ref())
    }
}

/// Byte of the encoded hint flipped by `--test-corrupt-hint checksum` (in
/// the header's CRC-32 field, so every consumer reports `BadChecksum`).
pub const CORRUPT_BYTE: usize = 0x18;

/// Computes the hint from `src`, encodes it (as a scrub request with
/// [`Mode::Scrub`]), hands the blob to `transport` (which may write boot
/// data into memory the hint does not cover), then freezes the hint and
/// refuses if it changed. `corrupt` applies the test-only corruptions.
pub fn publish<S, E>(
    src: &mut S,
    mode: Mode,
    corrupt: Option<CorruptHint>,
    transport: impl FnOnce(&mut S, Option<&[u8]>) -> Result<(), E>,
) -> Result<Published, E>
where
    S: HintSource,
    E: From<Error>,
{
    let zero = src.zero_hint()?;
    let sent = match (&zero, mode) {
        (Some(h), Mode::Scrub) => Some(scrub_request(h).map_err(Error::Encode)?),
        (h, _) => h.clone(),
    };
    let blob = match &sent {
        Some(h) => {
            let mut blob = h.encode().map_err(Error::Encode)?;
            if corrupt == Some(CorruptHint::Checksum) {
                blob[CORRUPT_BYTE] ^= 1;
            }
            Some(blob)
        }
        None => None,
    };
    transport(src, blob.as_deref())?;
    let fin = src.freeze()?;
    if fin != zero {
        return Err(Error::Changed(
            "the finalized hint differs from the one passed to the guest".into(),
        )
        .into());
    }
    if let (Some(c), Some(h)) = (corrupt, zero.as_ref()) {
        for addr in c.planted(h) {
            src.plant(addr, 0xa5)?;
        }
    }
    Ok(Published { zero, sent, blob })
}

/// Where `--test-corrupt-hint dirty` plants its byte: the middle of the
/// largest hinted range (plus 123, so it is not page aligned).
pub fn dirty_address(h: &Hint) -> Option<u64> {
    h.entries
        .iter()
        .max_by_key(|e| e.length)
        .map(|e| ((e.start + e.length / 2) & !0xfff) + 123)
}

/// Where `--test-corrupt-hint dirty-spread` plants its bytes: in every
/// hinted range, byte 123 of the page at each [`DIRTY_SPREAD`] step from
/// the range's start (so at least one per range).
pub fn dirty_addresses(h: &Hint) -> Vec<u64> {
    h.entries
        .iter()
        .flat_map(|e| {
            (0..e.length.div_ceil(DIRTY_SPREAD)).map(move |i| e.start + i * DIRTY_SPREAD + 123)
        })
        .collect()
}

/// The same ranges as `zero`, as a scrub request (ranges not claimed zero).
pub fn scrub_request(zero: &Hint) -> Result<Hint, zerohint::Error> {
    let ranges: Vec<(u64, u64)> = zero.entries.iter().map(|e| (e.start, e.length)).collect();
    let shift = zero.entries.first().map_or(12, |e| e.page_shift);
    Hint::scrub_from_ranges(&ranges, shift)
}

/// zerostart's own guest RAM: guestmem's write tracker and vm-memory's
/// dirty bitmap decide what is hinted; freezing makes later tracked
/// writes into hinted pages fail.
impl HintSource for crate::guest_memory::GuestRam {
    fn zero_hint(&mut self) -> Result<Option<Hint>, Error> {
        Ok(guestmem::GuestRam::zero_hint(self)?)
    }

    fn freeze(&mut self) -> Result<Option<Hint>, Error> {
        Ok(self.finalize_hint()?)
    }

    fn plant(&mut self, addr: u64, byte: u8) -> Result<(), Error> {
        Ok(crate::guest_memory::write_untracked(
            self,
            &[byte],
            vm_memory::GuestAddress(addr),
        )?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fixed set of ranges; `drift` makes the second computation differ.
    struct Fixed {
        ranges: Vec<(u64, u64)>,
        drift: bool,
        planted: Vec<u64>,
    }

    impl HintSource for Fixed {
        fn zero_hint(&mut self) -> Result<Option<Hint>, Error> {
            Ok(Some(Hint::zeroed_from_ranges(&self.ranges, 12)?))
        }
        fn freeze(&mut self) -> Result<Option<Hint>, Error> {
            if self.drift {
                self.ranges[0].1 -= 0x1000;
            }
            self.zero_hint()
        }
        fn plant(&mut self, addr: u64, _: u8) -> Result<(), Error> {
            self.planted.push(addr);
            Ok(())
        }
    }

    fn fixed(drift: bool) -> Fixed {
        Fixed {
            ranges: vec![(0x200_0000, 0x100_0000), (0x1_0000_0000, 0x400_0000)],
            drift,
            planted: vec![],
        }
    }

    #[test]
    fn blob_is_the_encoded_hint_and_decodes() {
        let mut s = fixed(false);
        let mut seen = None;
        let p = publish::<_, Error>(&mut s, Mode::Zero, None, |_, b| {
            seen = b.map(<[u8]>::to_vec);
            Ok(())
        })
        .unwrap();
        assert_eq!(seen, p.blob);
        let v = zerohint::decode_exact(p.blob.as_ref().unwrap()).unwrap();
        assert_eq!(v.total_bytes(), 0x500_0000);
        assert!(p.claimed_zero().is_some());
    }

    #[test]
    fn a_hint_that_changes_is_refused() {
        let e = publish::<_, Error>(&mut fixed(true), Mode::Zero, None, |_, _| Ok(())).unwrap_err();
        assert!(e.to_string().contains("refusing to boot"), "{e}");
    }

    #[test]
    fn corruptions() {
        let p = publish::<_, Error>(
            &mut fixed(false),
            Mode::Zero,
            Some(CorruptHint::Checksum),
            |_, _| Ok(()),
        )
        .unwrap();
        assert_eq!(
            zerohint::decode(p.blob.as_ref().unwrap()).unwrap_err(),
            zerohint::Error::BadChecksum
        );
        let mut s = fixed(false);
        publish::<_, Error>(&mut s, Mode::Zero, Some(CorruptHint::Dirty), |_, _| Ok(())).unwrap();
        // Inside the largest range, not page aligned.
        assert_eq!(s.planted, vec![0x1_0000_0000 + 0x200_0000 + 123]);
        // The timeline records the command-line names.
        assert_eq!(CorruptHint::Dirty.name(), "dirty");
        assert_eq!(CorruptHint::DirtySpread.name(), "dirty-spread");
        // Spread: one per 64 MiB step of every range (16 MiB and 64 MiB
        // here: one each).
        let mut s = fixed(false);
        publish::<_, Error>(
            &mut s,
            Mode::Zero,
            Some(CorruptHint::DirtySpread),
            |_, _| Ok(()),
        )
        .unwrap();
        let want: Vec<u64> = [0x200_0000, 0x1_0000_0000]
            .into_iter()
            .map(|a| a + 123)
            .collect();
        assert_eq!(s.planted, want);
    }

    #[test]
    fn scrub_mode_claims_nothing_zero() {
        let p = publish::<_, Error>(&mut fixed(false), Mode::Scrub, None, |_, _| Ok(())).unwrap();
        assert!(p.sent.as_ref().unwrap().is_scrub_request());
        assert!(p.claimed_zero().is_none());
    }
}
