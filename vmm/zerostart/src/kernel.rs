//! Opening, checking and loading the kernel image.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use linux_loader::loader::bootparam::setup_header;
use linux_loader::loader::elf::{Elf, PvhBootCapability};
use linux_loader::loader::{bzimage::BzImage, KernelLoader};
use vm_memory::{GuestAddress, GuestMemoryBackend};

/// `HdrS` at offset 0x202.
const HDRS: u32 = 0x5372_6448;
/// xloadflags bit 0: the kernel has a 64-bit entry point at +0x200.
const XLF_KERNEL_64: u16 = 1;
/// Offset of the 64-bit entry from the protected-mode load address.
const ENTRY_64_OFFSET: u64 = 0x200;

/// Kernel image errors; each message names the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No such file.
    #[error("kernel image {0} does not exist; pass the path of a Linux bzImage with --kernel")]
    NotFound(PathBuf),
    /// Cannot open or read it.
    #[error("cannot read kernel image {path}: {err}; check the path and its permissions")]
    Unreadable {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// Not a bzImage.
    #[error("{path} is not a Linux bzImage ({why}); pass arch/x86/boot/bzImage (or a PVH vmlinux), not a compressed archive")]
    NotBzImage {
        /// Path.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Old or 32-bit-only kernel.
    #[error("{path} has no 64-bit entry point (boot protocol {version:#x}, xloadflags {xloadflags:#x}); use an x86_64 kernel with boot protocol 2.12 or later")]
    No64BitEntry {
        /// Path.
        path: PathBuf,
        /// Boot protocol version.
        version: u16,
        /// xloadflags.
        xloadflags: u16,
    },
    /// ELF without the PVH note.
    #[error("{0} is an ELF kernel without a PVH entry note; build it with CONFIG_PVH=y or boot arch/x86/boot/bzImage")]
    NoPvhEntry(PathBuf),
    /// linux-loader failed to place it.
    #[error("loading kernel {path} into guest memory failed: {err}; give the VM more memory")]
    Load {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: linux_loader::loader::Error,
    },
}

/// Kernel image formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Linux bzImage: 64-bit boot protocol, `boot_params`, setup_data (the
    /// hint).
    BzImage,
    /// ELF `vmlinux` with a PVH entry note: 32-bit entry, `hvm_start_info`;
    /// no setup_data, so no hint.
    Elf,
    /// A PVH ELF firmware (`--firmware`): the hint goes over fw_cfg.
    Firmware,
}

/// An opened and checked kernel image.
#[derive(Debug)]
pub struct Kernel {
    path: PathBuf,
    file: File,
    format: Format,
}

/// A kernel placed in guest memory.
#[derive(Debug, Clone, Copy)]
pub struct LoadedKernel {
    /// Lowest address the image may occupy (bzImage: its load address; ELF:
    /// 1 MiB, since segments may start anywhere above it).
    pub load_addr: GuestAddress,
    /// End of the bytes written (ELF: including each segment's bss).
    pub end: u64,
    /// Entry point: 64-bit entry (bzImage) or PVH entry (ELF).
    pub entry: GuestAddress,
    /// How the image is entered.
    pub format: Format,
    /// The setup header (bzImage; default for ELF).
    pub header: setup_header,
}

/// The command-line limit of a kernel without a setup header
/// (x86 `COMMAND_LINE_SIZE` - 1).
const ELF_CMDLINE_SIZE: u32 = 2047;
/// initramfs limit without a setup header (the protocol's default).
const ELF_INITRD_ADDR_MAX: u32 = 0x7fff_ffff;

impl LoadedKernel {
    /// Bytes from the load address the kernel occupies or uses before it
    /// reads its memory map: the larger of the loaded image and the setup
    /// header's `init_size` (boot protocol 2.10+).
    pub fn footprint(&self) -> u64 {
        let image = self.end - self.load_addr.0;
        let init = if self.format == Format::BzImage && self.header.version >= 0x20a {
            u64::from(self.header.init_size)
        } else {
            0
        };
        image.max(init)
    }

    /// The kernel's command-line limit, excluding the NUL.
    pub fn cmdline_size(&self) -> u32 {
        match self.format {
            Format::BzImage => self.header.cmdline_size,
            Format::Elf | Format::Firmware => ELF_CMDLINE_SIZE,
        }
    }

    /// Highest address the initramfs may occupy.
    pub fn initrd_addr_max(&self) -> u32 {
        match self.format {
            Format::BzImage if self.header.initrd_addr_max != 0 => self.header.initrd_addr_max,
            _ => ELF_INITRD_ADDR_MAX,
        }
    }
}

impl Kernel {
    /// Opens `path` and checks it is a bzImage with a 64-bit entry point or
    /// an x86-64 ELF, before any guest memory is allocated.
    pub fn open(path: &Path) -> Result<Kernel, Error> {
        let unreadable = |err| Error::Unreadable {
            path: path.to_path_buf(),
            err,
        };
        let mut file = File::open(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Error::NotFound(path.to_path_buf())
            } else {
                unreadable(e)
            }
        })?;
        if file.metadata().map_err(unreadable)?.is_dir() {
            return Err(Error::NotBzImage {
                path: path.to_path_buf(),
                why: "it is a directory".into(),
            });
        }
        let mut hdr = [0u8; 0x1f1 + 0x7b];
        let not_bz = |why: &str| Error::NotBzImage {
            path: path.to_path_buf(),
            why: why.to_string(),
        };
        let n = read_full(&mut file, &mut hdr).map_err(unreadable)?;
        let u16_at = |o: usize| u16::from_le_bytes([hdr[o], hdr[o + 1]]);
        if n >= 64 && hdr.starts_with(b"\x7fELF") {
            // ELFCLASS64, little endian, EM_X86_64.
            if hdr[4] != 2 || hdr[5] != 1 || u16_at(18) != 0x3e {
                return Err(not_bz(
                    "it is an ELF file but not x86-64 (64-bit, little endian)",
                ));
            }
            return Ok(Kernel {
                path: path.to_path_buf(),
                file,
                format: Format::Elf,
            });
        }
        if n < hdr.len() {
            return Err(not_bz("file too short for a setup header"));
        }
        if u32::from_le_bytes(hdr[0x202..0x206].try_into().unwrap_or_default()) != HDRS {
            return Err(not_bz("no HdrS signature at offset 0x202"));
        }
        let version = u16_at(0x206);
        let xloadflags = if version >= 0x20c { u16_at(0x236) } else { 0 };
        if xloadflags & XLF_KERNEL_64 == 0 {
            return Err(Error::No64BitEntry {
                path: path.to_path_buf(),
                version,
                xloadflags,
            });
        }
        Ok(Kernel {
            path: path.to_path_buf(),
            file,
            format: Format::BzImage,
        })
    }

    /// The image format found by [`Kernel::open`].
    pub fn format(&self) -> Format {
        self.format
    }

    /// Loads the image: a bzImage's protected-mode part at its preferred
    /// address (1 MiB), an ELF's segments at their physical addresses.
    /// The caller must record `[load_addr, load_addr + footprint())` as
    /// written.
    pub fn load<M: GuestMemoryBackend>(&mut self, mem: &M) -> Result<LoadedKernel, Error> {
        let himem = Some(GuestAddress(arch::layout::HIMEM_START));
        let load_err = |err| Error::Load {
            path: self.path.clone(),
            err,
        };
        match self.format {
            Format::BzImage => {
                let r = BzImage::load(mem, None, &mut self.file, himem).map_err(load_err)?;
                Ok(LoadedKernel {
                    load_addr: r.kernel_load,
                    end: r.kernel_end,
                    entry: GuestAddress(r.kernel_load.0 + ENTRY_64_OFFSET),
                    format: Format::BzImage,
                    header: r.setup_header.unwrap_or_default(),
                })
            }
            Format::Elf | Format::Firmware => {
                let r = Elf::load(mem, None, &mut self.file, himem).map_err(load_err)?;
                let PvhBootCapability::PvhEntryPresent(entry) = r.pvh_boot_cap else {
                    return Err(Error::NoPvhEntry(self.path.clone()));
                };
                Ok(LoadedKernel {
                    load_addr: GuestAddress(arch::layout::HIMEM_START),
                    end: r.kernel_end.max(arch::layout::HIMEM_START),
                    entry,
                    format: Format::Elf,
                    header: setup_header::default(),
                })
            }
        }
    }
}

fn read_full(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    f.seek(SeekFrom::Start(0))?;
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A minimal bzImage for tests: one setup sector, boot protocol
/// `version`, `xloadflags`, and `payload` as the protected-mode part.
#[cfg(test)]
pub(crate) fn test_image(version: u16, xlf: u16, payload: &[u8]) -> tempfile::NamedTempFile {
    use std::io::Write;
    let mut b = vec![0u8; 0x400];
    b[0x1f1] = 1; // setup_sects
    b[0x202..0x206].copy_from_slice(b"HdrS");
    b[0x206..0x208].copy_from_slice(&version.to_le_bytes());
    b[0x211] = 1; // loadflags: LOADED_HIGH
    b[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes());
    b[0x22c..0x230].copy_from_slice(&0x7fff_ffffu32.to_le_bytes()); // initrd_addr_max
    b[0x236..0x238].copy_from_slice(&xlf.to_le_bytes());
    b[0x238..0x23c].copy_from_slice(&2047u32.to_le_bytes()); // cmdline_size
    b.extend_from_slice(payload);
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&b).unwrap();
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn image(version: u16, xlf: u16) -> tempfile::NamedTempFile {
        let mut p = vec![0u8; 0xc00];
        p[0] = 0xf4; // hlt
        test_image(version, xlf, &p)
    }

    #[test]
    fn accepts_64bit_bzimage_and_loads_it() {
        let f = image(0x20f, 1);
        let mut k = Kernel::open(f.path()).unwrap();
        let mem =
            vm_memory::GuestMemoryMmap::<()>::from_ranges(&[(GuestAddress(0), 4 << 20)]).unwrap();
        let l = k.load(&mem).unwrap();
        assert_eq!(l.load_addr, GuestAddress(0x10_0000));
        assert_eq!(l.entry, GuestAddress(0x10_0200));
        assert_eq!(l.end, 0x10_0000 + 0x1000 - 0x400);
        use vm_memory::Bytes;
        let b: u8 = mem.read_obj(GuestAddress(0x10_0000)).unwrap();
        assert_eq!(b, 0xf4);
    }

    #[test]
    fn rejects_bad_images() {
        assert!(matches!(
            Kernel::open(Path::new("/nonexistent/k")),
            Err(Error::NotFound(_))
        ));
        assert!(matches!(
            Kernel::open(image(0x20f, 0).path()),
            Err(Error::No64BitEntry { .. })
        ));
        assert!(matches!(
            Kernel::open(image(0x20a, 1).path()),
            Err(Error::No64BitEntry { .. })
        ));
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(b"\x7fELF").unwrap();
        f.write_all(&[0u8; 0x400]).unwrap();
        let e = Kernel::open(f.path()).unwrap_err();
        assert!(e.to_string().contains("ELF"), "{e}");
        assert!(matches!(
            Kernel::open(Path::new("/")),
            Err(Error::NotBzImage { .. })
        ));
    }
}
