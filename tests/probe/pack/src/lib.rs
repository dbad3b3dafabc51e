//! Turns the probe's linked ELF into a bzImage a Linux boot loader accepts.
//!
//! The bzImage is a one-sector setup area (boot sector with the setup
//! header, per Documentation/arch/x86/boot.rst) followed by the flat
//! protected-mode payload. The payload is the ELF's single PT_LOAD segment,
//! whose 64-bit entry must sit at payload offset 0x200 (the 64-bit boot
//! protocol jumps to load address + 0x200). Loaders such as rust-vmm's
//! linux-loader check the "HdrS" signature, version >= 0x200 and
//! LOADED_HIGH, and copy the payload to `code32_start`.
#![deny(missing_docs)]

use object::elf::{PT_LOAD, SHT_DYNAMIC, SHT_REL, SHT_RELA};
use object::read::elf::{ElfFile64, FileHeader, ProgramHeader, SectionHeader};
use object::{Endianness, Object, ObjectSymbol};

/// Where the probe is linked and must be loaded (`pref_address`,
/// `code32_start`): the traditional 1 MiB.
pub const LOAD_ADDR: u64 = 0x10_0000;
/// Offset of the 64-bit entry point in the payload.
pub const ENTRY64_OFFSET: u64 = 0x200;
/// Setup sectors after the boot sector: the header fits in the first two.
pub const SETUP_SECTS: u8 = 1;
/// Size of the setup area (boot sector + setup sectors).
pub const SETUP_SIZE: usize = (SETUP_SECTS as usize + 1) * 512;
/// Boot protocol version the header claims: 2.12 is the first with
/// `xloadflags`; everything the probe uses (setup_data 2.09, pref_address
/// and init_size 2.10) is older.
pub const PROTOCOL_VERSION: u16 = 0x020c;
/// `cmdline_size`: longest command line the probe reads, without the NUL.
pub const CMDLINE_SIZE: u32 = 2047;
/// Version string, pointed to by `kernel_version` (shown by `file`).
pub const VERSION_STRING: &str = concat!(
    "zsprobe ",
    env!("CARGO_PKG_VERSION"),
    " (zerostart probe guest)"
);

/// Offsets in the setup area (the same as in `boot_params`).
pub mod hdr {
    /// `setup_sects` (u8).
    pub const SETUP_SECTS: usize = 0x1f1;
    /// `syssize` (u32): payload size in 16-byte units.
    pub const SYSSIZE: usize = 0x1f4;
    /// `boot_flag` (u16) = 0xAA55.
    pub const BOOT_FLAG: usize = 0x1fe;
    /// `jump` (2 bytes): x86 short jump over the header.
    pub const JUMP: usize = 0x200;
    /// `header` = "HdrS".
    pub const HEADER: usize = 0x202;
    /// `version` (u16).
    pub const VERSION: usize = 0x206;
    /// `kernel_version` (u16): version string offset - 0x200.
    pub const KERNEL_VERSION: usize = 0x20e;
    /// `loadflags` (u8).
    pub const LOADFLAGS: usize = 0x211;
    /// `code32_start` (u32).
    pub const CODE32_START: usize = 0x214;
    /// `initrd_addr_max` (u32).
    pub const INITRD_ADDR_MAX: usize = 0x22c;
    /// `kernel_alignment` (u32).
    pub const KERNEL_ALIGNMENT: usize = 0x230;
    /// `relocatable_kernel` (u8).
    pub const RELOCATABLE_KERNEL: usize = 0x234;
    /// `min_alignment` (u8, log2).
    pub const MIN_ALIGNMENT: usize = 0x235;
    /// `xloadflags` (u16).
    pub const XLOADFLAGS: usize = 0x236;
    /// `cmdline_size` (u32).
    pub const CMDLINE_SIZE: usize = 0x238;
    /// `pref_address` (u64).
    pub const PREF_ADDRESS: usize = 0x258;
    /// `init_size` (u32).
    pub const INIT_SIZE: usize = 0x260;
    /// End of the 2.12 header.
    pub const END: usize = 0x268;
}

/// `loadflags` bit: protected-mode code is loaded at 0x100000.
pub const LOADED_HIGH: u8 = 1;
/// `xloadflags` bit: has the 64-bit entry at load address + 0x200.
pub const XLF_KERNEL_64: u16 = 1;

/// Where the 16-bit entry's halt loop goes (after the header).
const REAL_MODE_HALT: usize = 0x280;
/// Where the version string goes.
const VERSION_AT: usize = 0x300;

/// Why an ELF cannot become a probe bzImage.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Not a 64-bit little-endian ELF.
    #[error("not a 64-bit ELF: {0}")]
    Parse(#[from] object::Error),
    /// Not exactly one PT_LOAD segment.
    #[error("expected exactly one PT_LOAD segment, found {0}: check guest/link.ld's PHDRS")]
    Segments(usize),
    /// The segment is not linked at [`LOAD_ADDR`].
    #[error("PT_LOAD at vaddr {vaddr:#x} paddr {paddr:#x}, expected {LOAD_ADDR:#x}: check guest/link.ld")]
    LoadAddress {
        /// Virtual address.
        vaddr: u64,
        /// Physical address.
        paddr: u64,
    },
    /// A required symbol is missing.
    #[error("symbol `{0}` missing: the probe must define it (guest/src/entry.rs, guest/link.ld)")]
    Symbol(&'static str),
    /// The 64-bit entry is not at payload offset 0x200.
    #[error("startup_64 at {found:#x}, expected load address + 0x200 = {expected:#x}: .head.text must come first and keep `.org 0x200`")]
    Entry {
        /// Where it is.
        found: u64,
        /// Where it must be.
        expected: u64,
    },
    /// Dynamic relocations: the probe must be linked static, non-PIE.
    #[error("ELF has relocation or dynamic section `{0}`: build with -C relocation-model=static (use make probe)")]
    Dynamic(String),
    /// The segment's file range lies outside the file.
    #[error("PT_LOAD file range lies outside the ELF file: truncated build output?")]
    Truncated,
    /// A size that does not fit its header field.
    #[error("{0} too large for the setup header")]
    TooLarge(&'static str),
}

/// What [`pack`] produced, for the build log and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The bzImage bytes.
    pub image: Vec<u8>,
    /// Payload (protected-mode part) size.
    pub payload_size: u64,
    /// `init_size`: image + bss + stacks, page-rounded.
    pub init_size: u32,
}

fn put16(b: &mut [u8], off: usize, v: u16) {
    b[off..off + 2].copy_from_slice(&v.to_le_bytes());
}

fn put32(b: &mut [u8], off: usize, v: u32) {
    b[off..off + 4].copy_from_slice(&v.to_le_bytes());
}

fn put64(b: &mut [u8], off: usize, v: u64) {
    b[off..off + 8].copy_from_slice(&v.to_le_bytes());
}

/// Builds the bzImage from the probe's ELF bytes.
pub fn pack(elf: &[u8]) -> Result<Packed, Error> {
    let file = ElfFile64::<Endianness>::parse(elf)?;
    let endian = file.endian();
    let header = file.elf_header();

    for s in header.sections(endian, elf)?.iter() {
        let t = s.sh_type(endian);
        if t == SHT_RELA || t == SHT_REL || t == SHT_DYNAMIC {
            let name = header
                .sections(endian, elf)?
                .section_name(endian, s)
                .map(|n| String::from_utf8_lossy(n).into_owned())
                .unwrap_or_default();
            return Err(Error::Dynamic(name));
        }
    }

    let loads: Vec<_> = header
        .program_headers(endian, elf)?
        .iter()
        .filter(|p| p.p_type(endian) == PT_LOAD)
        .collect();
    if loads.len() != 1 {
        return Err(Error::Segments(loads.len()));
    }
    let seg = loads[0];
    let (vaddr, paddr) = (seg.p_vaddr(endian), seg.p_paddr(endian));
    if vaddr != LOAD_ADDR || paddr != LOAD_ADDR {
        return Err(Error::LoadAddress { vaddr, paddr });
    }

    let sym = |name: &'static str| {
        file.symbols()
            .find(|s| s.name() == Ok(name))
            .map(|s| s.address())
            .ok_or(Error::Symbol(name))
    };
    let expected = LOAD_ADDR + ENTRY64_OFFSET;
    let entry = sym("startup_64")?;
    if entry != expected || file.entry() != expected {
        return Err(Error::Entry {
            found: entry,
            expected,
        });
    }
    let image_end = sym("__image_end")?;
    let mem_end = LOAD_ADDR + seg.p_memsz(endian);
    let init_end = image_end.max(mem_end);
    let init_size = u32::try_from((init_end - LOAD_ADDR).next_multiple_of(4096))
        .map_err(|_| Error::TooLarge("init_size"))?;

    let payload = seg.data(endian, elf).map_err(|()| Error::Truncated)?;
    let syssize =
        u32::try_from(payload.len().div_ceil(16)).map_err(|_| Error::TooLarge("payload"))?;

    let mut image = vec![0u8; SETUP_SIZE];
    let s = &mut image;
    s[hdr::SETUP_SECTS] = SETUP_SECTS;
    put32(s, hdr::SYSSIZE, syssize);
    put16(s, hdr::BOOT_FLAG, 0xaa55);
    // jmp short to the halt loop: a real-mode entry is not supported.
    s[hdr::JUMP] = 0xeb;
    s[hdr::JUMP + 1] = (REAL_MODE_HALT - (hdr::JUMP + 2)) as u8;
    s[hdr::HEADER..hdr::HEADER + 4].copy_from_slice(b"HdrS");
    put16(s, hdr::VERSION, PROTOCOL_VERSION);
    put16(s, hdr::KERNEL_VERSION, (VERSION_AT - 0x200) as u16);
    s[hdr::LOADFLAGS] = LOADED_HIGH;
    put32(s, hdr::CODE32_START, LOAD_ADDR as u32);
    put32(s, hdr::INITRD_ADDR_MAX, 0x7fff_ffff);
    put32(s, hdr::KERNEL_ALIGNMENT, 0x20_0000);
    // Linked for one address: a loader must put it at pref_address.
    s[hdr::RELOCATABLE_KERNEL] = 0;
    s[hdr::MIN_ALIGNMENT] = 12;
    put16(s, hdr::XLOADFLAGS, XLF_KERNEL_64);
    put32(s, hdr::CMDLINE_SIZE, CMDLINE_SIZE);
    put64(s, hdr::PREF_ADDRESS, LOAD_ADDR);
    put32(s, hdr::INIT_SIZE, init_size);
    // cli; hlt; jmp $-1
    s[REAL_MODE_HALT..REAL_MODE_HALT + 4].copy_from_slice(&[0xfa, 0xf4, 0xeb, 0xfd]);
    s[VERSION_AT..VERSION_AT + VERSION_STRING.len()].copy_from_slice(VERSION_STRING.as_bytes());

    image.extend_from_slice(payload);
    Ok(Packed {
        image,
        payload_size: payload.len() as u64,
        init_size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    /// The linked probe ELF: `PROBE_ELF` (set by make test-probe) or the
    /// default build output.
    fn probe_elf() -> Vec<u8> {
        let path = std::env::var_os("PROBE_ELF")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../../target/probe-cargo/x86_64-unknown-linux-gnu/release/probe")
            });
        std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}: build the probe first with make probe",
                path.display()
            )
        })
    }

    fn le16(b: &[u8], o: usize) -> u16 {
        u16::from_le_bytes([b[o], b[o + 1]])
    }

    fn le32(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
    }

    #[test]
    fn header_is_what_linux_loaders_check() {
        let p = pack(&probe_elf()).unwrap();
        let b = &p.image;
        assert_eq!(b[hdr::SETUP_SECTS], SETUP_SECTS);
        assert_eq!(le16(b, hdr::BOOT_FLAG), 0xaa55);
        assert_eq!(&b[hdr::HEADER..hdr::HEADER + 4], b"HdrS");
        assert!(le16(b, hdr::VERSION) >= 0x020c);
        assert_eq!(b[hdr::LOADFLAGS] & LOADED_HIGH, LOADED_HIGH);
        assert_eq!(le16(b, hdr::XLOADFLAGS) & XLF_KERNEL_64, XLF_KERNEL_64);
        assert_eq!(le32(b, hdr::CODE32_START), LOAD_ADDR as u32);
        assert_eq!(le32(b, hdr::KERNEL_ALIGNMENT), 0x20_0000);
        assert_eq!(b[hdr::RELOCATABLE_KERNEL], 0);
        assert_eq!(
            u64::from_le_bytes(
                b[hdr::PREF_ADDRESS..hdr::PREF_ADDRESS + 8]
                    .try_into()
                    .unwrap()
            ),
            LOAD_ADDR
        );
        // init_size covers the payload and is page-granular.
        let init = le32(b, hdr::INIT_SIZE);
        assert_eq!(init, p.init_size);
        assert!(u64::from(init) >= p.payload_size);
        assert_eq!(init % 4096, 0);
        // syssize counts the payload in 16-byte units.
        assert_eq!(
            u64::from(le32(b, hdr::SYSSIZE)),
            p.payload_size.div_ceil(16)
        );
        assert_eq!(b.len(), SETUP_SIZE + p.payload_size as usize);
        // The 64-bit entry (cli; cld) is at payload offset 0x200.
        let entry = SETUP_SIZE + ENTRY64_OFFSET as usize;
        assert_eq!(&b[entry..entry + 2], &[0xfa, 0xfc]);
        // The version string is where kernel_version points.
        let v = 0x200 + usize::from(le16(b, hdr::KERNEL_VERSION));
        assert!(b[v..].starts_with(VERSION_STRING.as_bytes()));
        const { assert!(hdr::END <= SETUP_SIZE) };
    }

    #[test]
    fn packing_is_deterministic() {
        let elf = probe_elf();
        assert_eq!(pack(&elf).unwrap(), pack(&elf).unwrap());
    }

    #[test]
    fn rejects_what_is_not_a_probe() {
        assert!(matches!(pack(b"not an ELF at all"), Err(Error::Parse(_))));
        // An ELF whose entry is elsewhere: patch e_entry (offset 24).
        let mut elf = probe_elf();
        elf[24..32].copy_from_slice(&(LOAD_ADDR + 0x300).to_le_bytes());
        assert!(matches!(pack(&elf), Err(Error::Entry { .. })));
    }
}
