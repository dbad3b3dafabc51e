//! The probe's whole sequence of checks, over an abstract [`Platform`].

use core::fmt;

use boottimer::marker::INIT_STARTED;

use crate::bootparams::{BootParams, SIZE as BOOT_PARAMS_SIZE};
use crate::cmdline::{self, Escaped, Expect, Fault};
use crate::e820::{self, Table};
use crate::ranges::{Areas, Written};
use crate::scan::{scan, Counts};
use crate::setup_data::{self, Node};
use crate::verdict::{Failure, Verdict};
use crate::MARKER_BOOT_PARAMS_OK;

/// What the probe needs from the machine it runs on.
pub trait Platform {
    /// The bytes of guest-physical `[gpa, gpa+len)`, or `None` if the span
    /// is not addressable (not mapped, or overflows). Callers only ask for
    /// spans e820 describes (or that the boot protocol promises mapped).
    fn phys(&self, gpa: u64, len: u64) -> Option<&[u8]>;
    /// Prints one informational line (the prefix is added by the caller).
    fn log(&self, args: fmt::Arguments<'_>);
    /// Writes a boot-timer marker.
    fn marker(&self, id: u16);
    /// Highest address (exclusive) [`Platform::map_ram`] can map.
    fn map_limit(&self) -> u64;
    /// Identity-maps `[0, end)` with the probe's own page tables, so nothing
    /// depends on how much the VMM mapped beyond the boot protocol's promise.
    fn map_ram(&self, end: u64) -> Result<(), Failure>;
    /// Raises the CPU exception `zsprobe.fault=` asked for. Does not return
    /// on a real CPU; if it does, the run fails with `fault_not_raised`.
    fn inject_fault(&self, fault: Fault);
}

/// Where the probe itself lies: `[start, end)` covers its loaded image,
/// bss and stack (the `init_size` window).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Image {
    /// Load address.
    pub start: u64,
    /// Exclusive end of bss and stack.
    pub end: u64,
}

/// Hint entries logged one by one; the rest are summarised.
const LOGGED_RANGES: usize = 16;
/// Scan granule: one slice per GiB keeps every slice well below isize::MAX
/// and lets a platform map lazily.
const SCAN_CHUNK: u64 = 1 << 30;

macro_rules! log {
    ($p:expr, $($arg:tt)*) => { $p.log(format_args!($($arg)*)) };
}

/// Runs every check on the `boot_params` at `boot_params` and returns the
/// verdict. Writes the `custom_100` marker after boot_params passed and
/// `init_started` right before the zero scan; the caller writes `test_done`
/// and prints the verdict.
pub fn run<P: Platform>(p: &P, boot_params: u64, image: Image) -> Verdict {
    match run_checked(p, boot_params, image) {
        Ok(v) | Err(v) => v,
    }
}

fn run_checked<P: Platform>(p: &P, bp_addr: u64, image: Image) -> Result<Verdict, Verdict> {
    // boot_params is identity-mapped by the boot protocol's promise.
    let bp_bytes = p
        .phys(bp_addr, BOOT_PARAMS_SIZE as u64)
        .ok_or(Failure::BootParamsUnreadable)?;
    let bp = BootParams::new(bp_bytes)?;
    log!(
        p,
        "boot_params addr={bp_addr:#x} version={:#06x}",
        bp.version()
    );
    let table = Table::parse(&bp)?;
    for e in table.entries() {
        log!(
            p,
            "e820 start={:#x} end={:#x} type={}",
            e.addr,
            e.end(),
            e.kind
        );
    }
    if !table.covers_any(bp_addr, BOOT_PARAMS_SIZE as u64, u64::MAX) {
        return Err(Failure::BootParamsNotInE820 { addr: bp_addr }.into());
    }
    if !table.covers_ram(image.start, image.end - image.start, u64::MAX) {
        return Err(Failure::ImageNotInRam {
            start: image.start,
            end: image.end,
        }
        .into());
    }

    // From here on nothing relies on the VMM's page tables.
    let ram_end = table.ram_end();
    let limit = p.map_limit();
    if ram_end > limit {
        return Err(Failure::RamBeyondMap { ram_end, limit }.into());
    }
    let map_end = table.end().min(limit);
    p.map_ram(map_end)?;
    let readable = |a: u64, l: u64| {
        if table.covers_any(a, l, map_end) {
            p.phys(a, l)
        } else {
            None
        }
    };

    let cl_addr = bp.cmd_line_ptr();
    if cl_addr == 0 {
        return Err(Failure::NoCmdline.into());
    }
    let cl_room = table.contiguous_end(cl_addr).map_or(0, |end| {
        (end.min(map_end).saturating_sub(cl_addr)).min(cmdline::MAX_LEN as u64)
    });
    let cl_bytes =
        readable(cl_addr, cl_room).ok_or(Failure::CmdlineNotInMemory { addr: cl_addr })?;
    let cl = cmdline::terminated(cl_bytes).ok_or(Failure::CmdlineUnterminated { addr: cl_addr })?;
    log!(p, "cmdline={}", Escaped(cl));
    let expect = cmdline::expect(cl).map_err(|_| Failure::BadExpect)?;
    if let Some(f) = cmdline::fault(cl).map_err(|_| Failure::BadFault)? {
        log!(p, "injecting fault={f:?}");
        p.inject_fault(f);
        return Err(Failure::FaultNotRaised.into());
    }
    p.marker(MARKER_BOOT_PARAMS_OK);

    // Everything written before the scan, to keep out of the hint.
    let mut written = Areas::default();
    written.push(Written::Probe, image.start, image.end - image.start);
    written.push(Written::BootParams, bp_addr, BOOT_PARAMS_SIZE as u64);
    written.push(Written::Cmdline, cl_addr, cl.len() as u64 + 1);

    let mut hint: Option<Node> = None;
    setup_data::walk(bp.setup_data(), readable, |n| {
        log!(
            p,
            "setup_data index={} addr={:#x} type={:#x} len={}",
            n.index,
            n.addr,
            n.kind,
            n.len
        );
        written.push(
            Written::SetupData,
            n.addr,
            setup_data::HEADER_SIZE + u64::from(n.len),
        );
        if n.kind == zerohint::SETUP_TYPE {
            if let Some(h) = hint {
                return Err(Failure::MultipleHints {
                    first: h.addr,
                    second: n.addr,
                });
            }
            hint = Some(*n);
        }
        Ok(())
    })?;

    let Some(node) = hint else {
        if expect == Expect::Valid {
            return Err(Failure::ExpectMismatch {
                expected: expect,
                found: Expect::Absent,
            }
            .into());
        }
        p.marker(INIT_STARTED);
        return Ok(Verdict::PassAbsent { e820: table.len() });
    };

    let bytes = match node.len {
        // An empty node is readable (its header was) and decodes as
        // Truncated, like any too-short hint.
        0 => &[][..],
        len => readable(node.data(), u64::from(len)).ok_or(Failure::SetupDataBadLength {
            index: node.index,
            addr: node.addr,
            len,
        })?,
    };
    let view = zerohint::decode_exact(bytes).map_err(Verdict::HintInvalid)?;
    // Logged before the remaining checks, so a rejected hint can be read.
    let hinted_bytes = view.total_bytes();
    log!(
        p,
        "hint addr={:#x} ranges={} hinted_bytes={hinted_bytes}",
        node.data(),
        view.len()
    );
    for (i, e) in view.entries().enumerate().take(LOGGED_RANGES) {
        log!(
            p,
            "range index={i} start={:#x} end={:#x} page_shift={}",
            e.start,
            e.end(),
            e.page_shift
        );
    }
    if view.len() > LOGGED_RANGES {
        log!(p, "range more={}", view.len() - LOGGED_RANGES);
    }
    if view.is_scrub_request() {
        return Err(Failure::ScrubRequestInSetupData.into());
    }
    let mut usable = [(0u64, 0u64); e820::MAX_ENTRIES];
    let n_usable = table.usable(&mut usable);
    zerohint::check_in_ram(&view, &usable[..n_usable]).map_err(Verdict::HintInvalid)?;
    for (index, e) in view.entries().enumerate() {
        if let Some(a) = written.overlapping(e.start, e.end()) {
            return Err(Failure::HintOverlapsWritten {
                index,
                what: a.what,
                area: a.start,
            }
            .into());
        }
    }
    if expect == Expect::Absent {
        return Err(Failure::ExpectMismatch {
            expected: expect,
            found: Expect::Valid,
        }
        .into());
    }

    p.marker(INIT_STARTED);
    let mut total = Counts::default();
    let mut first_gpa = None;
    for e in view.entries() {
        let mut off = 0;
        while off < e.length {
            let len = (e.length - off).min(SCAN_CHUNK);
            let gpa = e.start + off;
            let s = readable(gpa, len).ok_or(Failure::RangeUnreadable { start: gpa })?;
            let c = scan(s);
            if first_gpa.is_none() {
                first_gpa = c.first_nonzero.map(|o| gpa + o);
            }
            total.merge(c, 0);
            off += len;
        }
    }
    Ok(match first_gpa {
        None => Verdict::PassValid {
            ranges: view.len(),
            hinted_bytes,
            zero_bytes: total.zero,
            e820: table.len(),
        },
        Some(first_nonzero) => Verdict::Nonzero {
            ranges: view.len(),
            hinted_bytes,
            zero_bytes: total.zero,
            nonzero_bytes: total.nonzero,
            first_nonzero,
        },
    })
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use zerohint::{encode_into, Entry, Error, SETUP_TYPE};

    use super::*;
    use crate::bootparams::*;
    use crate::e820::{ENTRY_SIZE, TYPE_RAM};

    const MEM: usize = 8 << 20;
    const BP: u64 = 0x7000;
    const CMDLINE: u64 = 0x2_0000;
    const SETUP: u64 = 0x9000;
    const IMAGE: Image = Image {
        start: 0x10_0000,
        end: 0x18_0000,
    };

    /// A guest memory image plus everything the probe reports.
    struct Fake {
        mem: Vec<u8>,
        lines: RefCell<Vec<String>>,
        markers: RefCell<Vec<u16>>,
        mapped: RefCell<Option<u64>>,
        limit: u64,
    }

    impl Platform for Fake {
        fn inject_fault(&self, fault: Fault) {
            self.lines.borrow_mut().push(format!("fault {fault:?}"));
        }
        fn phys(&self, gpa: u64, len: u64) -> Option<&[u8]> {
            let end = gpa.checked_add(len)?;
            if let Some(m) = *self.mapped.borrow() {
                assert!(end <= m, "read past the probe's own mapping");
            }
            self.mem
                .get(usize::try_from(gpa).ok()?..usize::try_from(end).ok()?)
        }
        fn log(&self, args: fmt::Arguments<'_>) {
            self.lines.borrow_mut().push(args.to_string());
        }
        fn marker(&self, id: u16) {
            self.markers.borrow_mut().push(id);
        }
        fn map_limit(&self) -> u64 {
            self.limit
        }
        fn map_ram(&self, end: u64) -> Result<(), Failure> {
            *self.mapped.borrow_mut() = Some(end);
            Ok(())
        }
    }

    impl Fake {
        fn new() -> Fake {
            let mut f = Fake {
                mem: vec![0; MEM],
                lines: RefCell::default(),
                markers: RefCell::default(),
                mapped: RefCell::default(),
                limit: 64 << 30,
            };
            let bp = BP as usize;
            f.mem[bp + OFF_HEADER..bp + OFF_HEADER + 4].copy_from_slice(b"HdrS");
            f.put(BP + OFF_VERSION as u64, &0x020cu16.to_le_bytes());
            f.put(
                BP + OFF_CMD_LINE_PTR as u64,
                &(CMDLINE as u32).to_le_bytes(),
            );
            f.cmdline("console=ttyS0");
            f.e820(&[
                (0, 0x9fc00, TYPE_RAM),
                (0x9fc00, 0x400, 2),
                (0x10_0000, MEM as u64 - 0x10_0000, TYPE_RAM),
            ]);
            // The probe's image is not zero.
            f.mem[IMAGE.start as usize..IMAGE.end as usize].fill(0xcc);
            f
        }

        fn put(&mut self, gpa: u64, b: &[u8]) {
            self.mem[gpa as usize..gpa as usize + b.len()].copy_from_slice(b);
        }

        fn cmdline(&mut self, s: &str) {
            self.put(CMDLINE, s.as_bytes());
            self.put(CMDLINE + s.len() as u64, &[0]);
        }

        fn e820(&mut self, v: &[(u64, u64, u32)]) {
            self.mem[BP as usize + OFF_E820_ENTRIES] = v.len() as u8;
            for (i, &(a, s, t)) in v.iter().enumerate() {
                let off = BP + (OFF_E820_TABLE + i * ENTRY_SIZE) as u64;
                self.put(off, &a.to_le_bytes());
                self.put(off + 8, &s.to_le_bytes());
                self.put(off + 16, &t.to_le_bytes());
            }
        }

        /// Writes a setup_data list of `(addr, type, data)` and links it.
        fn setup_data(&mut self, nodes: &[(u64, u32, Vec<u8>)]) {
            let first = nodes.first().map_or(0, |n| n.0);
            self.put(BP + OFF_SETUP_DATA as u64, &first.to_le_bytes());
            for (i, (addr, kind, data)) in nodes.iter().enumerate() {
                let next = nodes.get(i + 1).map_or(0, |n| n.0);
                self.put(*addr, &next.to_le_bytes());
                self.put(addr + 8, &kind.to_le_bytes());
                self.put(addr + 12, &(data.len() as u32).to_le_bytes());
                self.put(addr + 16, data);
            }
        }

        fn hint(&mut self, flags: u32, ranges: &[(u64, u64)]) {
            let bytes = encode(flags, ranges);
            self.setup_data(&[
                (SETUP, 1, b"other".to_vec()),
                (SETUP + 0x100, SETUP_TYPE, bytes),
            ]);
        }

        fn run(&self) -> Verdict {
            let v = run(self, BP, IMAGE);
            for l in self.lines.borrow().iter() {
                assert!(!l.starts_with("PASS") && !l.starts_with("FAIL"), "{l}");
                assert!(!l.contains('\n'));
            }
            v
        }
    }

    fn encode(flags: u32, ranges: &[(u64, u64)]) -> Vec<u8> {
        let entries: Vec<Entry> = ranges
            .iter()
            .map(|&(s, l)| Entry {
                start: s,
                length: l,
                flags: 1 - flags,
                page_shift: 12,
            })
            .collect();
        let mut out = vec![0; zerohint::encoded_size(entries.len())];
        encode_into(flags, &entries, &mut out).unwrap();
        out
    }

    const GOOD: &[(u64, u64)] = &[(0x1_0000, 0x1_0000), (0x20_0000, 0x60_0000)];

    #[test]
    fn valid_zero_hint_passes_and_markers_are_in_order() {
        let mut f = Fake::new();
        f.hint(0, GOOD);
        let v = f.run();
        assert_eq!(
            v,
            Verdict::PassValid {
                ranges: 2,
                hinted_bytes: 0x61_0000,
                zero_bytes: 0x61_0000,
                e820: 3
            }
        );
        assert_eq!(
            *f.markers.borrow(),
            vec![MARKER_BOOT_PARAMS_OK, INIT_STARTED]
        );
        assert_eq!(*f.mapped.borrow(), Some(MEM as u64));
        let lines = f.lines.borrow();
        assert!(
            lines.iter().any(|l| l == "cmdline=console=ttyS0"),
            "{lines:?}"
        );
        assert!(lines
            .iter()
            .any(|l| l.starts_with("setup_data index=1 addr=0x9100 type=0x5a480001")));
    }

    #[test]
    fn absent_hint_passes() {
        let f = Fake::new();
        assert_eq!(f.run(), Verdict::PassAbsent { e820: 3 });
        assert_eq!(
            *f.markers.borrow(),
            vec![MARKER_BOOT_PARAMS_OK, INIT_STARTED]
        );
    }

    #[test]
    fn one_dirty_byte_anywhere_fails_with_its_address() {
        for gpa in [0x1_0000u64, 0x1_ffff, 0x20_0000, 0x34_5677, 0x7f_ffff] {
            let mut f = Fake::new();
            f.hint(0, GOOD);
            f.mem[gpa as usize] = 1;
            assert_eq!(
                f.run(),
                Verdict::Nonzero {
                    ranges: 2,
                    hinted_bytes: 0x61_0000,
                    zero_bytes: 0x61_0000 - 1,
                    nonzero_bytes: 1,
                    first_nonzero: gpa
                },
                "{gpa:#x}"
            );
        }
    }

    #[test]
    fn dirty_byte_outside_the_hint_is_fine() {
        let mut f = Fake::new();
        f.hint(0, GOOD);
        f.mem[0x1_ffff + 1] = 1;
        f.mem[0x1f_ffff] = 1;
        assert!(f.run().passed());
    }

    #[test]
    fn corrupt_hint_is_invalid() {
        let mut f = Fake::new();
        let mut bytes = encode(0, GOOD);
        bytes[40] ^= 1;
        f.setup_data(&[(SETUP, SETUP_TYPE, bytes)]);
        assert_eq!(f.run(), Verdict::HintInvalid(Error::BadChecksum));
        assert_eq!(*f.markers.borrow(), vec![MARKER_BOOT_PARAMS_OK]);
    }

    #[test]
    fn transport_length_must_be_exact_and_empty_node_is_truncated() {
        let mut f = Fake::new();
        let mut bytes = encode(0, GOOD);
        bytes.push(0);
        f.setup_data(&[(SETUP, SETUP_TYPE, bytes)]);
        assert_eq!(f.run(), Verdict::HintInvalid(Error::BadLength));
        let mut f = Fake::new();
        f.setup_data(&[(SETUP, SETUP_TYPE, vec![])]);
        assert_eq!(f.run(), Verdict::HintInvalid(Error::Truncated));
    }

    #[test]
    fn range_outside_ram_is_invalid() {
        let mut f = Fake::new();
        // The legacy hole between 640 KiB and 1 MiB is not RAM.
        f.hint(0, &[(0x1_0000, 0x1000), (0xa_0000, 0x1000)]);
        assert_eq!(f.run(), Verdict::HintInvalid(Error::OutOfRam { index: 1 }));
        let mut f = Fake::new();
        f.hint(0, &[(MEM as u64 - 0x1000, 0x2000)]);
        assert_eq!(f.run(), Verdict::HintInvalid(Error::OutOfRam { index: 0 }));
    }

    #[test]
    fn hint_over_written_areas_fails() {
        let cases: &[((u64, u64), Written, u64)] = &[
            ((0x17_f000, 0x1000), Written::Probe, IMAGE.start),
            ((0x7000, 0x1000), Written::BootParams, BP),
            ((0x2_0000, 0x1000), Written::Cmdline, CMDLINE),
            ((0x9000, 0x1000), Written::SetupData, SETUP),
        ];
        for &(range, what, area) in cases {
            let mut f = Fake::new();
            f.hint(0, &[range]);
            assert_eq!(
                f.run(),
                Verdict::Fail(Failure::HintOverlapsWritten {
                    index: 0,
                    what,
                    area
                }),
                "{what}"
            );
        }
    }

    #[test]
    fn expectation_is_enforced() {
        let mut f = Fake::new();
        f.cmdline("console=ttyS0 zsprobe.expect=valid");
        assert_eq!(
            f.run(),
            Verdict::Fail(Failure::ExpectMismatch {
                expected: Expect::Valid,
                found: Expect::Absent
            })
        );
        let mut f = Fake::new();
        f.cmdline("zsprobe.expect=absent");
        f.hint(0, GOOD);
        assert_eq!(
            f.run(),
            Verdict::Fail(Failure::ExpectMismatch {
                expected: Expect::Absent,
                found: Expect::Valid
            })
        );
        let mut f = Fake::new();
        f.cmdline("zsprobe.expect=valid");
        f.hint(0, GOOD);
        assert!(f.run().passed());
        let mut f = Fake::new();
        f.cmdline("zsprobe.expect=yes");
        assert_eq!(f.run(), Verdict::Fail(Failure::BadExpect));
    }

    #[test]
    fn fault_injection_is_requested_from_the_platform() {
        let mut f = Fake::new();
        f.cmdline("zsprobe.fault=pf");
        f.hint(0, GOOD);
        // The fake returns, as a CPU without the fault would.
        assert_eq!(f.run(), Verdict::Fail(Failure::FaultNotRaised));
        assert!(f.lines.borrow().iter().any(|l| l == "fault PageFault"));
        let mut f = Fake::new();
        f.cmdline("zsprobe.fault=never");
        assert_eq!(f.run(), Verdict::Fail(Failure::BadFault));
    }

    #[test]
    fn scrub_request_and_duplicate_hints_fail() {
        let mut f = Fake::new();
        f.hint(zerohint::HDR_FLAG_SCRUB_REQUEST, GOOD);
        assert_eq!(f.run(), Verdict::Fail(Failure::ScrubRequestInSetupData));
        let mut f = Fake::new();
        let b = encode(0, GOOD);
        f.setup_data(&[
            (SETUP, SETUP_TYPE, b.clone()),
            (SETUP + 0x200, SETUP_TYPE, b),
        ]);
        assert_eq!(
            f.run(),
            Verdict::Fail(Failure::MultipleHints {
                first: SETUP,
                second: SETUP + 0x200
            })
        );
    }

    #[test]
    fn setup_data_pointer_into_a_hole_fails() {
        let mut f = Fake::new();
        f.setup_data(&[(SETUP, 1, vec![])]);
        f.put(SETUP, &0xa_0000u64.to_le_bytes());
        assert_eq!(
            f.run(),
            Verdict::Fail(Failure::SetupDataBadPointer {
                index: 1,
                addr: 0xa_0000
            })
        );
    }

    #[test]
    fn cmdline_problems_fail() {
        let mut f = Fake::new();
        f.put(BP + OFF_CMD_LINE_PTR as u64, &0u32.to_le_bytes());
        assert_eq!(f.run(), Verdict::Fail(Failure::NoCmdline));
        let mut f = Fake::new();
        f.put(BP + OFF_CMD_LINE_PTR as u64, &0xa_0000u32.to_le_bytes());
        assert_eq!(
            f.run(),
            Verdict::Fail(Failure::CmdlineNotInMemory { addr: 0xa_0000 })
        );
        let mut f = Fake::new();
        f.mem[CMDLINE as usize..CMDLINE as usize + 4096].fill(b'a');
        assert_eq!(
            f.run(),
            Verdict::Fail(Failure::CmdlineUnterminated { addr: CMDLINE })
        );
        // A command line at the very end of RAM, NUL in the last byte.
        let mut f = Fake::new();
        f.put(
            BP + OFF_CMD_LINE_PTR as u64,
            &((MEM - 3) as u32).to_le_bytes(),
        );
        f.put(MEM as u64 - 3, b"ab\0");
        assert!(f.run().passed());
        assert!(f.lines.borrow().iter().any(|l| l == "cmdline=ab"));
    }

    #[test]
    fn boot_params_and_image_problems_fail() {
        let mut f = Fake::new();
        f.mem[BP as usize + OFF_HEADER] = 0;
        assert!(matches!(
            f.run(),
            Verdict::Fail(Failure::BadHeaderMagic { .. })
        ));
        let mut f = Fake::new();
        f.e820(&[
            (0x10_0000, 0x1_0000, TYPE_RAM),
            (0x20_0000, 0x10_0000, TYPE_RAM),
        ]);
        assert_eq!(
            f.run(),
            Verdict::Fail(Failure::BootParamsNotInE820 { addr: BP })
        );
        let mut f = Fake::new();
        f.e820(&[(0, 0x10_0000, TYPE_RAM), (0x10_0000, 0x1_0000, TYPE_RAM)]);
        assert_eq!(
            f.run(),
            Verdict::Fail(Failure::ImageNotInRam {
                start: IMAGE.start,
                end: IMAGE.end
            })
        );
        let mut f = Fake::new();
        f.limit = 4 << 20;
        assert_eq!(
            f.run(),
            Verdict::Fail(Failure::RamBeyondMap {
                ram_end: MEM as u64,
                limit: 4 << 20
            })
        );
        let mut f = Fake::new();
        f.e820(&[
            (0x10_0000, MEM as u64 - 0x10_0000, TYPE_RAM),
            (0, 0x9fc00, TYPE_RAM),
        ]);
        assert_eq!(f.run(), Verdict::Fail(Failure::E820Unsorted { index: 1 }));
    }
}
