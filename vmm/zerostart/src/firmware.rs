//! Firmware boot (`zerostart run --firmware CLOUDHV.fd`): the VMM loads a
//! PVH ELF firmware (EDK2's CloudHv build), enters it through PVH, and hands
//! it the kernel, initramfs, command line and the pre-zeroed hint over
//! QEMU's fw_cfg device (`devices::fw_cfg`).
//!
//! The hint is fw_cfg file `opt/org.zerostart/prezeroed` (docs/hint-abi.md,
//! transport (b)): all RAM minus everything the VMM wrote — the firmware
//! image, `hvm_start_info` and its memory map, GDT, MP and ACPI tables, and
//! the whole first MiB — from guestmem's write tracker and vm-memory's
//! dirty bitmap. The kernel, initramfs and hint themselves stay in VMM
//! memory (fw_cfg items), so they take no guest RAM out of the hint.
//!
//! `--firmware-hint scrub` sends the same ranges as a *scrub request*
//! (flag `SCRUB_REQUEST`, entries without `ZEROED`): the firmware zeroes
//! them itself before publishing a zero hint to the OS.
//!
//! Flat images (OVMF.fd, mapped below 4 GiB and entered at the reset
//! vector) are refused: OVMF also needs a PCI host bridge (q35/i440fx)
//! that zerostart does not emulate.

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use arch::layout::{RamLayout, CMDLINE_START, HIMEM_START};
use devices::fw_cfg::{self, key, FwCfg};
use kvm_bindings::kvm_sregs;
use linux_loader::loader::elf::{Elf, PvhBootCapability};
use linux_loader::loader::KernelLoader;
use vm_memory::GuestAddress;

use crate::cli::FirmwareHint;
use crate::guest::{Entry, GuestInputs, PreparedGuest};
use crate::guest_memory::{GuestRam, Tracked};
use crate::hint;
use crate::kernel::{self, Format, Kernel};

/// The fw_cfg device as the VMM builds it: DMA into the guest's RAM.
pub type FwCfgDevice = FwCfg<guestmem::GuestMemory>;

/// Firmware-boot errors; each names the fix.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Missing or unreadable firmware file.
    #[error(
        "cannot read firmware {path}: {err}; pass the path of CLOUDHV.fd (make firmware builds it)"
    )]
    Unreadable {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// Not an ELF: probably OVMF.fd.
    #[error("{0} is not a PVH ELF firmware; only CLOUDHV.fd (EDK2 CloudHvX64) is supported, flat images like OVMF.fd need a reset vector at 4 GiB and a PCI host bridge zerostart does not emulate")]
    NotElf(PathBuf),
    /// ELF of the wrong kind.
    #[error("{path} is not a 64-bit little-endian x86 ELF ({why}); pass CLOUDHV.fd")]
    BadElf {
        /// Path.
        path: PathBuf,
        /// What is wrong.
        why: &'static str,
    },
    /// ELF without the Xen PVH entry note.
    #[error(
        "{0} has no PVH entry note (Xen PHYS32_ENTRY); pass CLOUDHV.fd built by firmware/build.sh"
    )]
    NoPvhEntry(PathBuf),
    /// linux-loader could not place it.
    #[error("loading firmware {path} into guest memory failed: {err}; give the VM more memory (CLOUDHV.fd occupies 1..5 MiB)")]
    Load {
        /// Path.
        path: PathBuf,
        /// Cause.
        err: linux_loader::loader::Error,
    },
    /// An ELF kernel with --firmware.
    #[error("with --firmware, --kernel must be a bzImage (the firmware boots it through its EFI stub), but {0} is an ELF vmlinux")]
    KernelNotBzImage(PathBuf),
    /// Unreadable kernel or initramfs.
    #[error("cannot read {what} {path}: {err}; check the path")]
    Input {
        /// `kernel` or `initramfs`.
        what: &'static str,
        /// Path.
        path: PathBuf,
        /// Cause.
        err: std::io::Error,
    },
    /// initramfs without kernel.
    #[error(
        "--initramfs needs --kernel: the firmware loads an initramfs only together with a kernel"
    )]
    InitramfsWithoutKernel,
    /// Scrub without tracking.
    #[error("--firmware-hint scrub needs the VMM's write tracking, which hint=off (old spelling prezero=off) turns off; drop it from --memory")]
    ScrubWithoutTracking,
    /// Verify of a scrub request.
    #[error("--verify-hint checks a zero hint, but --firmware-hint scrub claims nothing zero; drop one of them")]
    VerifyScrub,
    /// fw_cfg item set.
    #[error("building fw_cfg items: {0}")]
    FwCfg(#[from] fw_cfg::Error),
    /// Hint encoding.
    #[error("encoding the hint for fw_cfg: {0}")]
    Hint(#[from] zerohint::Error),
    /// A bzImage shorter than its setup sectors.
    #[error("kernel {0} is shorter than its own setup sectors; pass a complete bzImage")]
    ShortKernel(PathBuf),
    /// initramfs placement for the legacy address item.
    #[error(transparent)]
    Initrd(#[from] arch::boot::Error),
    /// The kernel given with --kernel.
    #[error(transparent)]
    Kernel(#[from] kernel::Error),
    /// Guest memory tracking.
    #[error(transparent)]
    Ram(#[from] guestmem::Error),
    /// The platform tables and PVH boot state (crate::guest).
    #[error(transparent)]
    Platform(#[from] crate::guest::PlatformError),
    /// PVH boot data.
    #[error(transparent)]
    Pvh(#[from] arch::pvh::Error),
    /// Computing, publishing or freezing the hint (crate::hint).
    #[error(transparent)]
    Publish(#[from] hint::Error),
}

/// Everything `--firmware` needs, opened and checked before memory exists.
#[derive(Debug)]
pub struct FirmwareBoot {
    path: PathBuf,
    file: File,
    /// bzImage for the firmware to boot, whole file.
    kernel: Option<(PathBuf, Vec<u8>)>,
    initramfs: Option<Vec<u8>>,
    mode: FirmwareHint,
}

/// ELF `e_machine` values accepted: EDK2 stamps CloudHv with `EM_386` on an
/// ELF64 header (its entry is 32-bit PVH), a vmlinux-style image has
/// `EM_X86_64`.
const EM_386: u16 = 3;
const EM_X86_64: u16 = 0x3e;

impl FirmwareBoot {
    /// Opens the firmware and the kernel/initramfs it will be given, and
    /// checks the option combination.
    pub fn open(
        firmware: &Path,
        kernel: Option<&Path>,
        initramfs: Option<&Path>,
        mode: FirmwareHint,
        prezero_off: bool,
        verify: bool,
    ) -> Result<FirmwareBoot, Error> {
        let unreadable = |err| Error::Unreadable {
            path: firmware.to_path_buf(),
            err,
        };
        let mut file = File::open(firmware).map_err(unreadable)?;
        if file.metadata().map_err(unreadable)?.is_dir() {
            return Err(Error::Unreadable {
                path: firmware.to_path_buf(),
                err: std::io::Error::other("it is a directory"),
            });
        }
        let mut hdr = [0u8; 64];
        let n = read_up_to(&mut file, &mut hdr).map_err(unreadable)?;
        if n < 4 || &hdr[..4] != b"\x7fELF" {
            return Err(Error::NotElf(firmware.to_path_buf()));
        }
        let machine = u16::from_le_bytes([hdr[18], hdr[19]]);
        let why = if n < 64 {
            Some("truncated header")
        } else if hdr[4] != 2 || hdr[5] != 1 {
            Some("not ELFCLASS64 little endian")
        } else if machine != EM_386 && machine != EM_X86_64 {
            Some("machine is neither x86 nor x86-64")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(Error::BadElf {
                path: firmware.to_path_buf(),
                why,
            });
        }
        if mode == FirmwareHint::Scrub && prezero_off {
            return Err(Error::ScrubWithoutTracking);
        }
        if mode == FirmwareHint::Scrub && verify {
            return Err(Error::VerifyScrub);
        }
        let kernel = match kernel {
            Some(p) => {
                // Kernel::open gives the usual one-line errors for missing,
                // non-kernel and 32-bit images.
                if Kernel::open(p)?.format() != Format::BzImage {
                    return Err(Error::KernelNotBzImage(p.to_path_buf()));
                }
                Some((p.to_path_buf(), read_input("kernel", p)?))
            }
            None => None,
        };
        let initramfs = match (initramfs, &kernel) {
            (Some(_), None) => return Err(Error::InitramfsWithoutKernel),
            (Some(p), Some(_)) => Some(read_input("initramfs", p)?),
            (None, _) => None,
        };
        Ok(FirmwareBoot {
            path: firmware.to_path_buf(),
            file,
            kernel,
            initramfs,
            mode,
        })
    }
}

fn read_input(what: &'static str, p: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(p).map_err(|err| Error::Input {
        what,
        path: p.to_path_buf(),
        err,
    })
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Loads the firmware, writes the PVH boot state, builds the hint and the
/// fw_cfg device, and freezes the hint. Returns the entry state (with the
/// zero hint, `None` for a scrub request) and the device to put on the bus.
pub fn prepare(
    ram: &mut GuestRam,
    fw: &mut FirmwareBoot,
    inputs: &GuestInputs<'_>,
    base_sregs: kvm_sregs,
) -> Result<(PreparedGuest, FwCfgDevice), Error> {
    let load = Elf::load(
        ram.memory(),
        None,
        &mut fw.file,
        Some(GuestAddress(HIMEM_START)),
    )
    .map_err(|err| Error::Load {
        path: fw.path.clone(),
        err,
    })?;
    let PvhBootCapability::PvhEntryPresent(entry) = load.pvh_boot_cap else {
        return Err(Error::NoPvhEntry(fw.path.clone()));
    };
    // The loader wrote through vm-memory (dirty bitmap); mark it as well so
    // the image is excluded even if a segment's bss was never written.
    let end = load.kernel_end.max(HIMEM_START);
    ram.mark_written(GuestAddress(HIMEM_START), end - HIMEM_START)?;

    // PVH points at a command line; the firmware's own is empty (the
    // kernel's goes over fw_cfg).
    arch::BootMemory::write_tracked(&mut Tracked(ram), &[0], GuestAddress(CMDLINE_START))
        .map_err(arch::MemoryError)
        .map_err(arch::pvh::Error::Memory)?;
    let state = crate::guest::write_platform(
        ram,
        inputs,
        Entry::Pvh {
            entry,
            initrd: None,
            rsdp_in_start_info: true,
        },
        base_sregs,
    )?;

    // The hint: everything not written so far, as the fw_cfg file
    // (transport b; VMM memory, so the blob, kernel and initramfs take
    // nothing out of guest RAM), then frozen.
    let mode = match fw.mode {
        FirmwareHint::Zero => hint::Mode::Zero,
        FirmwareHint::Scrub => hint::Mode::Scrub,
    };
    let mut dev = FwCfg::new(ram.memory().clone());
    let published = hint::publish(ram, mode, inputs.corrupt, |_, blob| {
        if let Some(blob) = blob {
            dev.add_file(zerohint::FW_CFG_NAME, blob.to_vec())?;
        }
        Ok::<(), Error>(())
    })?;
    add_machine_items(&mut dev, inputs)?;
    if let Some((path, k)) = &fw.kernel {
        add_kernel_items(
            &mut dev,
            path,
            k,
            fw.initramfs.as_deref(),
            inputs.cmdline,
            inputs.layout,
        )?;
    }
    let sent = published.sent.clone();
    let zero = published.claimed_zero().cloned();
    if let Some(h) = sent.as_ref().filter(|h| h.is_scrub_request()) {
        eprintln!(
            "zerostart: note: firmware boot: scrub request of {} ranges/{} MiB sent over fw_cfg; the firmware zeroes them",
            h.entries.len(),
            h.total_bytes() >> 20
        );
    }
    Ok((
        PreparedGuest {
            regs: state.regs,
            sregs: state.sregs,
            hint: zero,
            format: Format::Firmware,
        },
        dev,
    ))
}

/// RAM size, vCPU counts and `etc/e820`, which OVMF-derived firmware reads
/// (CloudHv takes its memory map from PVH instead).
fn add_machine_items(dev: &mut FwCfgDevice, inputs: &GuestInputs<'_>) -> Result<(), fw_cfg::Error> {
    dev.set_item(key::RAM_SIZE, &inputs.layout.size().to_le_bytes()[..])?;
    dev.set_item(key::NB_CPUS, &u16::from(inputs.cpus).to_le_bytes()[..])?;
    dev.set_item(key::MAX_CPUS, &u16::from(inputs.cpus).to_le_bytes()[..])?;
    let e820: Vec<_> = arch::boot::e820_map(inputs.layout)
        .iter()
        .map(|e| (e.addr, e.size, e.kind))
        .collect();
    dev.add_file("etc/e820", fw_cfg::e820_file(&e820))?;
    Ok(())
}

/// The kernel items QEMU's `-kernel` sets and OVMF's QemuKernelLoaderFsDxe
/// reads: setup and kernel parts of the bzImage (their concatenation is the
/// image booted through the EFI stub), the initrd, and the NUL-terminated
/// command line. The `*_ADDR` items carry QEMU's legacy-loader addresses
/// (setup 0x10000, kernel 1 MiB, command line 0x20000, initrd at the top of
/// low RAM); EFI firmware ignores them.
fn add_kernel_items(
    dev: &mut FwCfgDevice,
    path: &Path,
    image: &[u8],
    initrd: Option<&[u8]>,
    cmdline: &str,
    layout: &RamLayout,
) -> Result<(), Error> {
    let (setup, kernel) =
        fw_cfg::split_bzimage(image).ok_or_else(|| Error::ShortKernel(path.to_path_buf()))?;
    let len32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX);
    dev.set_u32(key::SETUP_ADDR, 0x1_0000)?;
    dev.set_u32(key::SETUP_SIZE, len32(setup.len()))?;
    dev.set_item(key::SETUP_DATA, setup)?;
    dev.set_u32(key::KERNEL_ADDR, HIMEM_START as u32)?;
    dev.set_u32(key::KERNEL_SIZE, len32(kernel.len()))?;
    dev.set_item(key::KERNEL_DATA, kernel)?;
    let mut cl = cmdline.as_bytes().to_vec();
    cl.push(0);
    dev.set_u32(key::CMDLINE_ADDR, CMDLINE_START as u32)?;
    dev.set_u32(key::KERNEL_CMDLINE, CMDLINE_START as u32)?;
    dev.set_u32(key::CMDLINE_SIZE, len32(cl.len()))?;
    dev.set_item(key::CMDLINE_DATA, cl)?;
    if let Some(initrd) = initrd {
        let initrd_max = image
            .get(0x22c..0x230)
            .and_then(|b| b.try_into().ok())
            .map_or(0, u32::from_le_bytes);
        let at = arch::boot::initrd_addr(
            layout,
            initrd.len() as u64,
            if initrd_max == 0 {
                0x37ff_ffff
            } else {
                initrd_max
            },
            HIMEM_START + kernel.len() as u64,
        )?;
        dev.set_u32(key::INITRD_ADDR, at.0 as u32)?;
        dev.set_u32(key::INITRD_SIZE, len32(initrd.len()))?;
        dev.set_item(key::INITRD_DATA, initrd)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_memory;
    use crate::guest_memory::MemoryConfig;
    use linux_loader::loader::elf::start_info::hvm_start_info;
    use std::io::Write;
    use std::mem::offset_of;
    use vm_memory::Bytes;

    const MIB: u64 = 1 << 20;
    /// Where the test firmware's segment goes, and its sizes in the file
    /// and in memory (bss beyond the file part).
    const LOAD: u64 = 0x20_0000;
    const FILESZ: u64 = 0x1800;
    const MEMSZ: u64 = 0x5000;

    /// A PVH ELF64 (EM_386, like CLOUDHV.fd) with one segment of
    /// `FILESZ` bytes of 0x5a (memsz `MEMSZ`) at `LOAD`.
    fn firmware_file() -> tempfile::NamedTempFile {
        let mut b = vec![0u8; 0x1000];
        b[..4].copy_from_slice(b"\x7fELF");
        b[4] = 2;
        b[5] = 1;
        b[6] = 1;
        b[16..18].copy_from_slice(&2u16.to_le_bytes());
        b[18..20].copy_from_slice(&EM_386.to_le_bytes());
        b[24..32].copy_from_slice(&LOAD.to_le_bytes());
        b[32..40].copy_from_slice(&64u64.to_le_bytes());
        b[54..56].copy_from_slice(&56u16.to_le_bytes());
        b[56..58].copy_from_slice(&2u16.to_le_bytes());
        let ph = |b: &mut Vec<u8>, at: usize, kind: u32, off: u64, addr: u64, fs: u64, ms: u64| {
            b[at..at + 4].copy_from_slice(&kind.to_le_bytes());
            b[at + 8..at + 16].copy_from_slice(&off.to_le_bytes());
            b[at + 16..at + 24].copy_from_slice(&addr.to_le_bytes());
            b[at + 24..at + 32].copy_from_slice(&addr.to_le_bytes());
            b[at + 32..at + 40].copy_from_slice(&fs.to_le_bytes());
            b[at + 40..at + 48].copy_from_slice(&ms.to_le_bytes());
        };
        ph(&mut b, 64, 1, 0x1000, LOAD, FILESZ, MEMSZ);
        let mut note = Vec::new();
        for v in [4u32, 4, 18] {
            note.extend_from_slice(&v.to_le_bytes());
        }
        note.extend_from_slice(b"Xen\0");
        note.extend_from_slice(&(LOAD as u32).to_le_bytes());
        ph(
            &mut b,
            120,
            4,
            0x200,
            0,
            note.len() as u64,
            note.len() as u64,
        );
        b[0x200..0x200 + note.len()].copy_from_slice(&note);
        b.extend_from_slice(&[0x5a; FILESZ as usize]);
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&b).unwrap();
        f
    }

    fn inputs<'a>(layout: &'a RamLayout, cmdline: &'a str) -> GuestInputs<'a> {
        GuestInputs {
            initramfs: None,
            cmdline,
            layout,
            cpus: 2,
            corrupt: None,
            acpi: true,
            virtio: &[],
        }
    }

    /// Pattern-filled RAM, a firmware boot prepared over it: every byte
    /// the fw_cfg hint claims must still hold the pattern (the VMM wrote
    /// none of them), and everything else above the image is claimed.
    #[test]
    fn nothing_written_is_in_the_fw_cfg_hint() {
        let size = 64 * MIB;
        for (pattern, mode) in [(0xaau8, FirmwareHint::Zero), (0x55, FirmwareHint::Scrub)] {
            let mut ram = guest_memory::create(&MemoryConfig {
                size,
                backing: guestmem::Backing::Anonymous { thp: false },
                ..Default::default()
            })
            .unwrap();
            let fill = vec![pattern; MIB as usize];
            for off in (0..size).step_by(MIB as usize) {
                guest_memory::write_untracked(&ram, &fill, GuestAddress(off)).unwrap();
            }
            let f = firmware_file();
            let mut fw = FirmwareBoot::open(f.path(), None, None, mode, false, false).unwrap();
            let layout = guest_memory::layout(&ram);
            let (p, dev) = prepare(
                &mut ram,
                &mut fw,
                &inputs(&layout, "x"),
                kvm_sregs::default(),
            )
            .unwrap();
            assert_eq!(p.format, Format::Firmware);
            assert_eq!(p.regs.rip, LOAD);
            assert_eq!(p.hint.is_some(), mode == FirmwareHint::Zero);
            // The firmware was loaded, and its bss lies outside the hint.
            let b: u8 = ram.memory().read_obj(GuestAddress(LOAD)).unwrap();
            assert_eq!(b, 0x5a);
            let blob = dev.item(key::FILE_FIRST).unwrap();
            let view = zerohint::decode_exact(blob).unwrap();
            assert_eq!(view.is_scrub_request(), mode == FirmwareHint::Scrub);
            let mut buf = vec![0u8; MIB as usize];
            for e in view.entries() {
                assert!(e.start >= LOAD + MEMSZ, "{e:x?} below the end of the image");
                let mut at = e.start;
                while at < e.end() {
                    let n = (e.end() - at).min(MIB) as usize;
                    ram.memory()
                        .read_slice(&mut buf[..n], GuestAddress(at))
                        .unwrap();
                    assert!(
                        buf[..n].iter().all(|&x| x == pattern),
                        "written byte in {e:x?}"
                    );
                    at += n as u64;
                }
            }
            assert_eq!(view.total_bytes(), size - (LOAD + MEMSZ));
            // hvm_start_info points at the ACPI tables for CloudHv.
            let rsdp: u64 = ram
                .memory()
                .read_obj(GuestAddress(
                    arch::pvh::PVH_INFO_START + offset_of!(hvm_start_info, rsdp_paddr) as u64,
                ))
                .unwrap();
            assert_eq!(rsdp, 0xe0000);
            // The hint is frozen: the VMM can no longer write into it.
            assert!(ram.write_tracked(&[1], GuestAddress(32 * MIB)).is_err());
        }
    }

    #[test]
    fn kernel_initrd_and_cmdline_items() {
        let size = 64 * MIB;
        let mut ram = guest_memory::create(&MemoryConfig {
            size,
            backing: guestmem::Backing::Anonymous { thp: false },
            ..Default::default()
        })
        .unwrap();
        let payload: Vec<u8> = (0..10_000u32).map(|i| (i * 7) as u8).collect();
        let k = crate::kernel::test_image(0x20f, 1, &payload);
        let mut initrd = tempfile::NamedTempFile::new().unwrap();
        initrd.write_all(&[0x11; 5000]).unwrap();
        let f = firmware_file();
        let mut fw = FirmwareBoot::open(
            f.path(),
            Some(k.path()),
            Some(initrd.path()),
            FirmwareHint::Zero,
            false,
            false,
        )
        .unwrap();
        let layout = guest_memory::layout(&ram);
        let (_, dev) = prepare(
            &mut ram,
            &mut fw,
            &inputs(&layout, "console=ttyS0"),
            kvm_sregs::default(),
        )
        .unwrap();
        let le = |k: u16| u32::from_le_bytes(dev.item(k).unwrap().try_into().unwrap());
        let image = std::fs::read(k.path()).unwrap();
        let setup = dev.item(key::SETUP_DATA).unwrap();
        let kernel = dev.item(key::KERNEL_DATA).unwrap();
        assert_eq!(setup.len(), 0x400);
        assert_eq!([setup, kernel].concat(), image);
        assert_eq!(le(key::SETUP_SIZE) as usize, setup.len());
        assert_eq!(le(key::KERNEL_SIZE) as usize, kernel.len());
        assert_eq!(dev.item(key::CMDLINE_DATA).unwrap(), b"console=ttyS0\0");
        assert_eq!(le(key::CMDLINE_SIZE), 14);
        assert_eq!(dev.item(key::INITRD_DATA).unwrap(), &[0x11; 5000][..]);
        assert_eq!(le(key::INITRD_SIZE), 5000);
        assert_eq!(le(key::INITRD_ADDR) % 4096, 0);
        assert_eq!(le(key::KERNEL_ADDR), 0x10_0000);
        let ram_size = u64::from_le_bytes(dev.item(key::RAM_SIZE).unwrap().try_into().unwrap());
        assert_eq!(ram_size, size);
        // The file directory lists the hint and etc/e820.
        let dir = dev.item(key::FILE_DIR).unwrap();
        assert_eq!(&dir[..4], &2u32.to_be_bytes());
        assert_eq!(&dir[12..12 + 27], zerohint::FW_CFG_NAME.as_bytes());
        assert_eq!(&dir[4 + 64 + 8..4 + 64 + 16], b"etc/e820");
        // Nothing of kernel or initrd went into guest RAM.
        let mut buf = vec![0u8; 0x1000];
        ram.memory()
            .read_slice(&mut buf, GuestAddress(HIMEM_START))
            .unwrap();
        assert!(buf.iter().all(|&b| b == 0));
    }
}
