//! Helpers shared by the tests that run the `zerostart` binary (`cli.rs`,
//! `firmware.rs`, `redteam_hint.rs`): the command, one boot with the
//! guest's serial port read back, the one-line-error check, and builders
//! of tiny kernels and firmware images.
//!
//! Each test binary uses a subset, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::Output;

use assert_cmd::Command;

/// The `zerostart` binary of this build, with a 60 s limit and no
/// `ZEROSTART_KVM_DEVICE` from the environment. Test-only switches stay
/// locked; add `.env("ZEROSTART_TEST_SWITCHES", "1")` to use them.
pub fn zerostart() -> Command {
    let mut c = Command::cargo_bin("zerostart").unwrap();
    c.env_remove("ZEROSTART_KVM_DEVICE");
    c.timeout(std::time::Duration::from_secs(60));
    c
}

/// What one boot left: the process's output and every byte the guest
/// wrote to its serial port.
pub struct Booted {
    /// Exit status, stdout and stderr of `zerostart run`.
    pub out: Output,
    /// The guest's serial output (empty when the VM never wrote one).
    pub serial: Vec<u8>,
}

impl Booted {
    /// The serial output as text (tests' guests print ASCII).
    pub fn log(&self) -> String {
        String::from_utf8_lossy(&self.serial).into_owned()
    }

    /// stderr as text, for assertion messages.
    pub fn err(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
}

/// Boots `zerostart run <image_flag> <image> --serial file=<tmp> <extra>`
/// and reads the serial file back: the one way every boot test runs a
/// guest and sees what it printed. `image_flag` is `--kernel` or
/// `--firmware`; `extra` comes last, so a test may add its own
/// `--memory` (the VMM's default is used otherwise).
pub fn run_with_serial(image_flag: &str, image: &Path, extra: &[&str]) -> Booted {
    run_cmd_with_serial(zerostart(), image_flag, image, extra)
}

/// [`run_with_serial`] on a prepared command (one with the test-only
/// switches unlocked, say).
pub fn run_cmd_with_serial(
    mut cmd: Command,
    image_flag: &str,
    image: &Path,
    extra: &[&str],
) -> Booted {
    let dir = tempfile::tempdir().unwrap();
    let serial = dir.path().join("serial.log");
    let out = cmd
        .timeout(std::time::Duration::from_secs(120))
        .arg("run")
        .arg(image_flag)
        .arg(image)
        .arg("--serial")
        .arg(format!("file={}", serial.display()))
        .args(extra)
        .output()
        .unwrap();
    let serial = std::fs::read(&serial).unwrap_or_default();
    Booted { out, serial }
}

/// True when /dev/kvm can be opened read-write. Otherwise the calling test
/// skips (says why), or fails under ZEROSTART_REQUIRE_KVM=1: `make test`
/// must not report a boot test passed that never booted.
pub fn have_kvm() -> bool {
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
    {
        Ok(_) => true,
        Err(e) => {
            testsupport::skip("KVM", format!("/dev/kvm cannot be opened: {e} (load kvm: modprobe kvm_intel or kvm_amd, and run as a user that may open /dev/kvm)"));
            false
        }
    }
}

/// Asserts a clean failure: exit code 1, one stderr line containing all of
/// `needles`, no panic.
pub fn assert_one_line_error(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<_> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {err}");
    for n in needles {
        assert!(lines[0].contains(n), "'{n}' not in: {}", lines[0]);
    }
}

/// Writes `bytes` to a temporary file (deleted on drop).
pub fn temp_file(bytes: &[u8]) -> tempfile::NamedTempFile {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(bytes).unwrap();
    f
}

/// A boot-protocol 2.15 bzImage header (one setup sector, 64-bit entry,
/// code32_start 1 MiB, cmdline_size 2047) followed by the protected-mode
/// part `payload`, which is loaded at 1 MiB.
pub fn bzimage_bytes(payload: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 0x400];
    b[0x1f1] = 1; // setup_sects
    b[0x1fe..0x200].copy_from_slice(&[0x55, 0xaa]);
    b[0x202..0x206].copy_from_slice(b"HdrS");
    b[0x206..0x208].copy_from_slice(&0x20fu16.to_le_bytes());
    b[0x211] = 1; // LOADED_HIGH
    b[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes()); // code32_start
    b[0x236..0x238].copy_from_slice(&1u16.to_le_bytes()); // XLF_KERNEL_64
    b[0x238..0x23c].copy_from_slice(&2047u32.to_le_bytes());
    b.extend_from_slice(payload);
    b
}

/// A bzImage whose protected-mode part is `payload`.
pub fn bzimage(payload: &[u8]) -> tempfile::NamedTempFile {
    temp_file(&bzimage_bytes(payload))
}

/// A bzImage whose 64-bit entry (load address + 0x200) runs `code`.
pub fn bzimage_64(code: &[u8]) -> tempfile::NamedTempFile {
    let mut payload = vec![0u8; 0x200];
    payload.extend_from_slice(code);
    bzimage(&payload)
}

/// Where [`elf_kernel`] loads its only segment (16 MiB, like vmlinux; also
/// its entry).
pub const ELF_LOAD: u64 = 0x100_0000;

/// Xen ELF note type of the 32-bit PVH entry point (XEN_ELFNOTE_PHYS32_ENTRY).
pub const PHYS32_ENTRY: u32 = 18;

/// An x86 ELF64 with one PT_LOAD segment (`code` at [`ELF_LOAD`]) and a
/// PT_NOTE holding one "Xen" note of type `note_type` pointing at it
/// ([`PHYS32_ENTRY`] makes it a PVH kernel). `machine` is e_machine: 0x3e
/// (EM_X86_64) for vmlinux, 3 (EM_386) is what EDK2 stamps on CLOUDHV.fd.
pub fn elf_kernel(code: &[u8], machine: u16, note_type: u32) -> tempfile::NamedTempFile {
    let mut b = vec![0u8; 0x1000];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // ELFCLASS64
    b[5] = 1; // little endian
    b[6] = 1; // EV_CURRENT
    b[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    b[18..20].copy_from_slice(&machine.to_le_bytes());
    b[20..24].copy_from_slice(&1u32.to_le_bytes());
    b[24..32].copy_from_slice(&ELF_LOAD.to_le_bytes()); // e_entry
    b[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    b[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    b[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    b[56..58].copy_from_slice(&2u16.to_le_bytes()); // e_phnum
    let phdr = |b: &mut Vec<u8>, at: usize, kind: u32, off: u64, addr: u64, size: u64| {
        b[at..at + 4].copy_from_slice(&kind.to_le_bytes());
        b[at + 4..at + 8].copy_from_slice(&7u32.to_le_bytes()); // RWX
        b[at + 8..at + 16].copy_from_slice(&off.to_le_bytes());
        b[at + 16..at + 24].copy_from_slice(&addr.to_le_bytes());
        b[at + 24..at + 32].copy_from_slice(&addr.to_le_bytes());
        b[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
        b[at + 40..at + 48].copy_from_slice(&size.to_le_bytes());
        b[at + 48..at + 56].copy_from_slice(&0x1000u64.to_le_bytes());
    };
    phdr(&mut b, 64, 1, 0x1000, ELF_LOAD, code.len() as u64);
    // Note: namesz 4, descsz 4, type, "Xen\0", entry.
    let mut note = Vec::new();
    for v in [4u32, 4, note_type] {
        note.extend_from_slice(&v.to_le_bytes());
    }
    note.extend_from_slice(b"Xen\0");
    note.extend_from_slice(&(ELF_LOAD as u32).to_le_bytes());
    phdr(&mut b, 120, 4, 0x200, 0, note.len() as u64);
    b[0x200..0x200 + note.len()].copy_from_slice(&note);
    b.extend_from_slice(code);
    temp_file(&b)
}
