//! Red-team tests of the zero hint the real `zerostart` binary hands a guest.
//!
//! The guest is `hintdump` (tests/redteam/hintdump.asm): entered like Linux,
//! it prints the setup header it was given and the raw hint blob from the
//! setup_data list on COM1, then resets. The tests decode that blob with
//! `zerohint` and check, from the guest's side, that no hinted byte is one
//! the VMM wrote or one the kernel writes before it can read the hint.
//! Each test names the leak it hunts.

mod common;

use std::path::Path;

use common::{bzimage_bytes, have_kvm, run_with_serial, temp_file};

const MIB: u64 = 1 << 20;

/// tests/redteam/hintdump.asm, assembled with `nasm -f bin`.
const HINTDUMP: [u8; 137] = [
    0x66, 0xba, 0xf8, 0x03, 0xb0, 0x42, 0xee, 0xb0, 0x3a, 0xee, 0x48, 0x8d, 0xbe, 0xf0, 0x01, 0x00,
    0x00, 0xb9, 0xa0, 0x00, 0x00, 0x00, 0xe8, 0x3b, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x9e, 0x50, 0x02,
    0x00, 0x00, 0x48, 0x85, 0xdb, 0x74, 0x0e, 0x81, 0x7b, 0x08, 0x01, 0x00, 0x48, 0x5a, 0x74, 0x0a,
    0x48, 0x8b, 0x1b, 0xeb, 0xed, 0xb0, 0x4e, 0xee, 0xeb, 0x12, 0xb0, 0x48, 0xee, 0xb0, 0x3a, 0xee,
    0x8b, 0x4b, 0x0c, 0x48, 0x8d, 0x7b, 0x10, 0xe8, 0x0a, 0x00, 0x00, 0x00, 0xb0, 0x0a, 0xee, 0xb0,
    0xfe, 0xe6, 0x64, 0xf4, 0xeb, 0xf6, 0x85, 0xc9, 0x74, 0x21, 0x44, 0x0f, 0xb6, 0x07, 0x44, 0x89,
    0xc0, 0xc1, 0xe8, 0x04, 0xe8, 0x16, 0x00, 0x00, 0x00, 0x44, 0x89, 0xc0, 0x83, 0xe0, 0x0f, 0xe8,
    0x0b, 0x00, 0x00, 0x00, 0x48, 0xff, 0xc7, 0xff, 0xc9, 0xeb, 0xdb, 0xb0, 0x0a, 0xee, 0xc3, 0x04,
    0x30, 0x3c, 0x39, 0x76, 0x02, 0x04, 0x27, 0xee, 0xc3,
];

/// Setup-header fields of the test bzImage.
#[derive(Clone, Copy)]
struct Header {
    /// `relocatable_kernel`.
    relocatable: bool,
    /// `kernel_alignment`.
    align: u32,
    /// `pref_address` (LOAD_PHYSICAL_ADDR of a real kernel).
    pref: u64,
    /// `init_size`.
    init_size: u32,
    /// `cmdline_size`.
    cmdline_size: u32,
}

/// Like a stock distribution kernel (Debian 6.12: relocatable, 2 MiB
/// alignment, pref_address 16 MiB, loaded at 1 MiB), with a smaller
/// init_size.
const DISTRO_LIKE: Header = Header {
    relocatable: true,
    align: 0x20_0000,
    pref: 0x100_0000,
    init_size: 0x80_0000,
    cmdline_size: 2047,
};

/// A boot-protocol 2.15 bzImage (code32_start 1 MiB) running `HINTDUMP`.
fn bzimage(h: Header) -> tempfile::NamedTempFile {
    // The 64-bit entry is at load address + 0x200.
    let mut payload = vec![0u8; 0x200];
    payload.extend_from_slice(&HINTDUMP);
    let mut b = bzimage_bytes(&payload);
    b[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes()); // initrd_addr_max
    b[0x230..0x234].copy_from_slice(&h.align.to_le_bytes());
    b[0x234] = u8::from(h.relocatable);
    b[0x238..0x23c].copy_from_slice(&h.cmdline_size.to_le_bytes());
    b[0x258..0x260].copy_from_slice(&h.pref.to_le_bytes());
    b[0x260..0x264].copy_from_slice(&h.init_size.to_le_bytes());
    temp_file(&b)
}

/// What the guest saw.
struct Seen {
    /// boot_params bytes 0x1f0..0x290.
    hdr: Vec<u8>,
    /// The hint blob, if there was one.
    hint: Option<Vec<u8>>,
}

impl Seen {
    fn u32_at(&self, off: usize) -> u64 {
        let o = off - 0x1f0;
        u64::from(u32::from_le_bytes(self.hdr[o..o + 4].try_into().unwrap()))
    }

    fn u64_at(&self, off: usize) -> u64 {
        let o = off - 0x1f0;
        u64::from_le_bytes(self.hdr[o..o + 8].try_into().unwrap())
    }

    /// The decoded hint entries as `(start, end)`.
    fn ranges(&self) -> Vec<(u64, u64)> {
        let blob = self.hint.as_ref().expect("the guest found no hint");
        let view = zerohint::decode_exact(blob).expect("hint decodes");
        assert!(!view.is_scrub_request());
        view.entries().map(|e| (e.start, e.end())).collect()
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

/// Boots `kernel` through `zerostart run` with `args` and returns what the
/// guest printed.
fn boot(kernel: &Path, args: &[&str]) -> Seen {
    let b = run_with_serial("--kernel", kernel, args);
    assert_eq!(
        b.out.status.code(),
        Some(0),
        "zerostart {args:?}: {}",
        b.err()
    );
    let text = b.log();
    let mut hdr = None;
    let mut hint = None;
    let mut none = false;
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("B:") {
            hdr = Some(unhex(h));
        } else if let Some(h) = line.strip_prefix("H:") {
            hint = Some(unhex(h));
        } else if line == "N" {
            none = true;
        }
    }
    let hdr = hdr.unwrap_or_else(|| panic!("no B: line in {text:?}"));
    assert_eq!(hdr.len(), 0xa0, "{text:?}");
    assert!(hint.is_some() != none, "{text:?}");
    Seen { hdr, hint }
}

fn overlaps(ranges: &[(u64, u64)], s: u64, e: u64) -> Option<(u64, u64)> {
    ranges.iter().copied().find(|&(rs, re)| rs < e && s < re)
}

/// Leak hunted: a relocatable kernel loaded at 1 MiB (every stock x86
/// kernel) runs its decompressor at `max(align_up(load, kernel_alignment),
/// pref_address)` — 16 MiB — and writes `init_size` bytes from there before
/// it can read the hint (boot.rst, "init_size"; head_64.S). A VMM that only
/// excludes `[load, load + init_size)` hints pages the guest has already
/// written: a false zero for any consumer that trusts the hint for them.
#[test]
fn relocated_kernel_working_area_is_not_hinted() {
    if !have_kvm() {
        return;
    }
    for (h, run) in [
        (DISTRO_LIKE, 0x100_0000u64),
        // Non-relocatable: the kernel runs at pref_address, wherever it was
        // loaded.
        (
            Header {
                relocatable: false,
                ..DISTRO_LIKE
            },
            0x100_0000,
        ),
        // Relocatable with pref below the load address: load address
        // rounded up to the alignment (1 MiB up to 4 MiB).
        (
            Header {
                align: 0x40_0000,
                pref: 0x20_0000,
                ..DISTRO_LIKE
            },
            0x40_0000,
        ),
    ] {
        let k = bzimage(h);
        let seen = boot(k.path(), &["--memory", "size=64M"]);
        let r = seen.ranges();
        let end = run + u64::from(h.init_size);
        assert_eq!(
            overlaps(&r, run, end),
            None,
            "working area {run:#x}..{end:#x} hinted: {r:x?}"
        );
        // The load-address window stays excluded too.
        assert_eq!(
            overlaps(&r, MIB, MIB + u64::from(h.init_size)),
            None,
            "{r:x?}"
        );
        // And the hint is not empty: RAM above the working area is claimed.
        assert!(overlaps(&r, 40 * MIB, 64 * MIB).is_some(), "{r:x?}");
    }
}

/// Leak hunted: anything the VMM places for the guest (command line of the
/// kernel's maximum length, a large initramfs, boot_params, setup_data,
/// the hint blob itself) inside the hint, or a hint range outside e820 RAM,
/// at sizes that end at odd places around the 3..4 GiB hole.
#[test]
fn vmm_placed_data_is_never_hinted() {
    if !have_kvm() {
        return;
    }
    let k = bzimage(DISTRO_LIKE);
    let data: Vec<u8> = (0..(5 * MIB + 123) as u32)
        .map(|i| (i % 251) as u8 | 1)
        .collect();
    let initrd = temp_file(&data);
    let cmdline = "z".repeat(2047);
    let initrd_path = initrd.path().to_str().unwrap().to_string();
    for size in [
        64 * MIB + 4096,
        513 * MIB,
        3072 * MIB - 4096,
        3072 * MIB,
        3072 * MIB + 4096,
        4096 * MIB - 2 * MIB,
    ] {
        let mem = format!("size={size},thp=off");
        let seen = boot(
            k.path(),
            &[
                "--memory",
                &mem,
                "--cmdline",
                &cmdline,
                "--initramfs",
                &initrd_path,
                "--cpus",
                "boot=3",
            ],
        );
        let r = seen.ranges();
        let ctx = format!("size={size:#x}: {r:x?}");
        // Placed data, as the guest was told.
        let (rd, rd_len) = (seen.u32_at(0x218), seen.u32_at(0x21c));
        assert_eq!(rd_len, data.len() as u64, "{ctx}");
        assert_eq!(overlaps(&r, rd, rd + rd_len), None, "initramfs {ctx}");
        let cl = seen.u32_at(0x228);
        assert_eq!(overlaps(&r, cl, cl + 2048), None, "cmdline {ctx}");
        let sd = seen.u64_at(0x250);
        let blob_end = sd + 16 + seen.hint.as_ref().unwrap().len() as u64;
        assert_eq!(overlaps(&r, sd, blob_end), None, "setup_data {ctx}");
        assert_eq!(overlaps(&r, 0, MIB), None, "first MiB {ctx}");
        // Every range inside e820 RAM, 4 KiB aligned, sorted, disjoint.
        let ram: Vec<(u64, u64)> = arch::boot::e820_map(&arch::layout::RamLayout::new(size))
            .into_iter()
            .filter(|e| e.kind == arch::boot::E820_RAM)
            .map(|e| (e.addr, e.addr + e.size))
            .collect();
        let mut prev = 0;
        for &(s, e) in &r {
            assert!(
                s % 4096 == 0 && e % 4096 == 0 && s < e && s >= prev,
                "{ctx}"
            );
            assert!(
                ram.iter().any(|&(a, b)| s >= a && e <= b),
                "{s:#x}..{e:#x} outside e820 RAM {ram:x?}; {ctx}"
            );
            prev = e;
        }
        // The hint claims the RAM nobody wrote: all of it but the first
        // MiB, the kernel's windows, the initramfs (and its partial pages).
        let total: u64 = r.iter().map(|&(s, e)| e - s).sum();
        let excluded = MIB + 2 * u64::from(DISTRO_LIKE.init_size) + rd_len + 2 * 4096;
        assert!(total + excluded >= size, "only {total:#x} hinted; {ctx}");
    }
}
