//! `zerostart run --firmware`: a tiny 32-bit PVH "firmware" reads the
//! zero hint over fw_cfg (port and DMA interfaces), checks its CRC-32 in the
//! guest, and prints it; the test decodes it and checks what it claims.
//! Also the one-line errors of bad firmware options.

mod common;

use std::path::Path;
use std::process::Output;

use assert_cmd::Command;
use common::{
    assert_one_line_error, bzimage, elf_kernel, have_kvm, run_cmd_with_serial, ELF_LOAD as LOAD,
    PHYS32_ENTRY,
};

/// The test firmware, from this nasm source (`nasm -f bin`):
///
/// ```text
/// bits 32
/// org 0x1000000
/// ACC     equ 0x80000
/// DIRBUF  equ 0x81000
/// BLOB    equ 0x90000
/// COM1    equ 0x3f8
/// start:
///     mov esp, ACC
///     mov dx, 0x510          ; select signature
///     xor eax, eax
///     out dx, ax
///     inc dx
///     mov bl, 'S'
///     in al, dx
///     cmp al, 'Q'
///     jne fail
///     in al, dx
///     cmp al, 'E'
///     jne fail
///     in al, dx
///     cmp al, 'M'
///     jne fail
///     in al, dx
///     cmp al, 'U'
///     jne fail
///     mov bl, 'I'            ; ID must have the DMA bit
///     dec dx
///     mov ax, 1
///     out dx, ax
///     inc dx
///     in al, dx
///     test al, 2
///     jz fail
///     mov edi, ACC           ; DMA: select+read the directory
///     mov eax, (0x19 << 16) | 0x0a
///     mov ecx, 0x1000
///     mov ebx, DIRBUF
///     call setup
///     mov bl, 'D'
///     call dma
///     test eax, eax
///     jnz fail
///     mov esi, DIRBUF        ; find the hint file
///     mov ecx, [esi]
///     bswap ecx
///     add esi, 4
/// .next:
///     mov bl, 'F'
///     test ecx, ecx
///     jz fail
///     push ecx
///     push esi
///     lea edi, [esi + 8]
///     mov esi, name
///     mov ecx, namelen
///     repe cmpsb
///     pop esi
///     pop ecx
///     je .found
///     add esi, 64
///     dec ecx
///     jmp .next
/// .found:
///     mov ebp, [esi]         ; size
///     bswap ebp
///     movzx eax, word [esi + 4]
///     xchg al, ah            ; key
///     shl eax, 16
///     or eax, 0x0a
///     mov edi, ACC
///     mov ecx, ebp
///     mov ebx, BLOB
///     call setup
///     mov bl, 'R'
///     call dma
///     test eax, eax
///     jnz fail
///     mov ebx, [BLOB + 0x18] ; CRC-32 with the checksum field read as 0
///     mov dword [BLOB + 0x18], 0
///     mov esi, BLOB
///     mov ecx, ebp
///     mov eax, 0xffffffff
/// .byte:
///     xor al, [esi]
///     inc esi
///     mov dl, 8
/// .bit:
///     shr eax, 1
///     jnc .nox
///     xor eax, 0xedb88320
/// .nox:
///     dec dl
///     jnz .bit
///     loop .byte
///     not eax
///     mov [BLOB + 0x18], ebx
///     cmp eax, ebx
///     mov bl, 'C'
///     jne fail
///     mov edi, ACC           ; DMA into the MMIO hole: error bit
///     mov eax, (0x19 << 16) | 0x0a
///     mov ecx, 16
///     mov ebx, 0xd0000000
///     call setup
///     call dma
///     cmp eax, 1
///     mov bl, 'E'
///     jne fail
///     mov dx, COM1           ; "H=<hex of the blob>\n"
///     mov al, 'H'
///     out dx, al
///     mov al, '='
///     out dx, al
///     mov esi, BLOB
///     mov ecx, ebp
/// .hex:
///     lodsb
///     mov ah, al
///     shr al, 4
///     call nib
///     mov al, ah
///     and al, 0x0f
///     call nib
///     loop .hex
///     mov al, 10
///     out dx, al
///     mov al, 0xfe
///     out 0x64, al
///     hlt
/// ; eax = control, ecx = length, ebx = address: FWCfgDmaAccess at edi
/// setup:
///     bswap eax
///     mov [edi], eax
///     bswap ecx
///     mov [edi + 4], ecx
///     mov dword [edi + 8], 0
///     bswap ebx
///     mov [edi + 12], ebx
///     ret
/// ; start the transfer at ACC (high half, low half); eax = control after it
/// dma:
///     mov dx, 0x514
///     xor eax, eax
///     out dx, eax
///     mov dx, 0x518
///     mov eax, ACC
///     bswap eax
///     out dx, eax
///     mov eax, [ACC]
///     bswap eax
///     ret
/// nib:
///     add al, '0'
///     cmp al, '9'
///     jbe .o
///     add al, 7
/// .o:
///     out dx, al
///     ret
/// fail:
///     mov dx, COM1
///     mov al, bl
///     out dx, al
///     mov al, 10
///     out dx, al
///     mov al, 0xfe
///     out 0x64, al
///     hlt
/// name: db "opt/org.zerostart/prezeroed", 0
/// namelen equ $ - name
/// ```
///
/// Serial output: `H=<hex of the hint file>` on success, else one letter:
/// S signature, I no DMA in ID, D directory DMA, F file not found, R file
/// DMA, C CRC mismatch, E a DMA into the MMIO hole did not fail.
const FW_GUEST: [u8; 463] = [
    0xbc, 0x00, 0x00, 0x08, 0x00, 0x66, 0xba, 0x10, 0x05, 0x31, 0xc0, 0x66, 0xef, 0x66, 0x42, 0xb3,
    0x53, 0xec, 0x3c, 0x51, 0x0f, 0x85, 0x8a, 0x01, 0x00, 0x00, 0xec, 0x3c, 0x45, 0x0f, 0x85, 0x81,
    0x01, 0x00, 0x00, 0xec, 0x3c, 0x4d, 0x0f, 0x85, 0x78, 0x01, 0x00, 0x00, 0xec, 0x3c, 0x55, 0x0f,
    0x85, 0x6f, 0x01, 0x00, 0x00, 0xb3, 0x49, 0x66, 0x4a, 0x66, 0xb8, 0x01, 0x00, 0x66, 0xef, 0x66,
    0x42, 0xec, 0xa8, 0x02, 0x0f, 0x84, 0x5a, 0x01, 0x00, 0x00, 0xbf, 0x00, 0x00, 0x08, 0x00, 0xb8,
    0x0a, 0x00, 0x19, 0x00, 0xb9, 0x00, 0x10, 0x00, 0x00, 0xbb, 0x00, 0x10, 0x08, 0x00, 0xe8, 0x06,
    0x01, 0x00, 0x00, 0xb3, 0x44, 0xe8, 0x15, 0x01, 0x00, 0x00, 0x85, 0xc0, 0x0f, 0x85, 0x32, 0x01,
    0x00, 0x00, 0xbe, 0x00, 0x10, 0x08, 0x00, 0x8b, 0x0e, 0x0f, 0xc9, 0x83, 0xc6, 0x04, 0xb3, 0x46,
    0x85, 0xc9, 0x0f, 0x84, 0x1c, 0x01, 0x00, 0x00, 0x51, 0x56, 0x8d, 0x7e, 0x08, 0xbe, 0xb3, 0x01,
    0x00, 0x01, 0xb9, 0x1c, 0x00, 0x00, 0x00, 0xf3, 0xa6, 0x5e, 0x59, 0x74, 0x06, 0x83, 0xc6, 0x40,
    0x49, 0xeb, 0xdb, 0x8b, 0x2e, 0x0f, 0xcd, 0x0f, 0xb7, 0x46, 0x04, 0x86, 0xc4, 0xc1, 0xe0, 0x10,
    0x83, 0xc8, 0x0a, 0xbf, 0x00, 0x00, 0x08, 0x00, 0x89, 0xe9, 0xbb, 0x00, 0x00, 0x09, 0x00, 0xe8,
    0xa5, 0x00, 0x00, 0x00, 0xb3, 0x52, 0xe8, 0xb4, 0x00, 0x00, 0x00, 0x85, 0xc0, 0x0f, 0x85, 0xd1,
    0x00, 0x00, 0x00, 0x8b, 0x1d, 0x18, 0x00, 0x09, 0x00, 0xc7, 0x05, 0x18, 0x00, 0x09, 0x00, 0x00,
    0x00, 0x00, 0x00, 0xbe, 0x00, 0x00, 0x09, 0x00, 0x89, 0xe9, 0xb8, 0xff, 0xff, 0xff, 0xff, 0x32,
    0x06, 0x46, 0xb2, 0x08, 0xd1, 0xe8, 0x73, 0x05, 0x35, 0x20, 0x83, 0xb8, 0xed, 0xfe, 0xca, 0x75,
    0xf3, 0xe2, 0xec, 0xf7, 0xd0, 0x89, 0x1d, 0x18, 0x00, 0x09, 0x00, 0x39, 0xd8, 0xb3, 0x43, 0x0f,
    0x85, 0x8f, 0x00, 0x00, 0x00, 0xbf, 0x00, 0x00, 0x08, 0x00, 0xb8, 0x0a, 0x00, 0x19, 0x00, 0xb9,
    0x10, 0x00, 0x00, 0x00, 0xbb, 0x00, 0x00, 0x00, 0xd0, 0xe8, 0x3b, 0x00, 0x00, 0x00, 0xe8, 0x4c,
    0x00, 0x00, 0x00, 0x83, 0xf8, 0x01, 0xb3, 0x45, 0x75, 0x6a, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x48,
    0xee, 0xb0, 0x3d, 0xee, 0xbe, 0x00, 0x00, 0x09, 0x00, 0x89, 0xe9, 0xac, 0x88, 0xc4, 0xc0, 0xe8,
    0x04, 0xe8, 0x44, 0x00, 0x00, 0x00, 0x88, 0xe0, 0x24, 0x0f, 0xe8, 0x3b, 0x00, 0x00, 0x00, 0xe2,
    0xea, 0xb0, 0x0a, 0xee, 0xb0, 0xfe, 0xe6, 0x64, 0xf4, 0x0f, 0xc8, 0x89, 0x07, 0x0f, 0xc9, 0x89,
    0x4f, 0x04, 0xc7, 0x47, 0x08, 0x00, 0x00, 0x00, 0x00, 0x0f, 0xcb, 0x89, 0x5f, 0x0c, 0xc3, 0x66,
    0xba, 0x14, 0x05, 0x31, 0xc0, 0xef, 0x66, 0xba, 0x18, 0x05, 0xb8, 0x00, 0x00, 0x08, 0x00, 0x0f,
    0xc8, 0xef, 0xa1, 0x00, 0x00, 0x08, 0x00, 0x0f, 0xc8, 0xc3, 0x04, 0x30, 0x3c, 0x39, 0x76, 0x02,
    0x04, 0x07, 0xee, 0xc3, 0x66, 0xba, 0xf8, 0x03, 0x88, 0xd8, 0xee, 0xb0, 0x0a, 0xee, 0xb0, 0xfe,
    0xe6, 0x64, 0xf4, 0x6f, 0x70, 0x74, 0x2f, 0x6f, 0x72, 0x67, 0x2e, 0x7a, 0x65, 0x72, 0x6f, 0x73,
    0x74, 0x61, 0x72, 0x74, 0x2f, 0x70, 0x72, 0x65, 0x7a, 0x65, 0x72, 0x6f, 0x65, 0x64, 0x00,
];

/// The test firmware as CLOUDHV.fd looks: a PVH ELF whose only segment is
/// loaded at [`LOAD`]; `machine` 3 (EM_386) is what EDK2 stamps on it.
fn pvh_elf(code: &[u8], machine: u16) -> tempfile::NamedTempFile {
    elf_kernel(code, machine, PHYS32_ENTRY)
}

/// `zerostart` with the test-only switches unlocked.
fn zerostart() -> Command {
    let mut c = common::zerostart();
    c.env("ZEROSTART_TEST_SWITCHES", "1");
    c
}

/// Runs the test firmware; returns stderr and the serial log.
fn run_fw(fw: &Path, extra: &[&str]) -> (Output, String) {
    let mem: &[&str] = if extra.contains(&"--memory") {
        &[]
    } else {
        &["--memory", "size=64M"]
    };
    let b = run_cmd_with_serial(zerostart(), "--firmware", fw, &[mem, extra].concat());
    let log = b.log();
    (b.out, log)
}

/// The hint bytes the guest printed.
fn printed_hint(log: &str) -> Vec<u8> {
    let hex = log
        .strip_prefix("H=")
        .and_then(|l| l.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("guest did not print the hint: {log:?}"));
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn firmware_reads_the_hint_over_fw_cfg() {
    if !have_kvm() {
        return;
    }
    const MIB: u64 = 1 << 20;
    let fw = pvh_elf(&FW_GUEST, 3);
    let kernel = bzimage(&[0x90; 0x3000]);
    for with_kernel in [false, true] {
        let k = kernel.path().to_str().unwrap();
        let extra: &[&str] = if with_kernel { &["--kernel", k] } else { &[] };
        let (out, log) = run_fw(fw.path(), extra);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.contains("exit=i8042 reset"), "{err}");
        let blob = printed_hint(&log);
        let hint = zerohint::decode_exact(&blob).expect("the guest read a valid hint");
        assert!(!hint.is_scrub_request());
        // Everything the VMM wrote is outside: the first MiB (start info,
        // GDT, MP and ACPI tables) and [1 MiB, end of the firmware image),
        // as for a PVH kernel.
        let image_end = (LOAD + FW_GUEST.len() as u64).next_multiple_of(4096);
        let ram = [(image_end, 64 * MIB - image_end)];
        zerohint::check_in_ram(&hint, &ram).expect("every range is RAM above the image");
        // And all the rest is claimed.
        assert_eq!(hint.total_bytes(), 64 * MIB - image_end, "{err}");
        let mib = hint.total_bytes() >> 20;
        assert!(
            err.contains(&format!("hint={} ranges/{mib} MiB", hint.len())),
            "{err}"
        );
    }
}

#[test]
fn scrub_request_and_corrupt_checksum_reach_the_firmware() {
    if !have_kvm() {
        return;
    }
    let fw = pvh_elf(&FW_GUEST, 0x3e);
    let (out, log) = run_fw(fw.path(), &["--firmware-hint", "scrub"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("scrub request of"), "{err}");
    let blob = printed_hint(&log);
    let hint = zerohint::decode_exact(&blob).expect("a valid scrub request");
    assert!(hint.is_scrub_request());
    let image_end = (LOAD + FW_GUEST.len() as u64).next_multiple_of(4096);
    assert!(hint.entries().all(|e| e.flags == 0 && e.start >= image_end));
    assert_eq!(hint.total_bytes(), (64 << 20) - image_end);
    // The VMM claims nothing zero in scrub mode.
    assert!(err.contains("hint=0 ranges"), "{err}");

    // The guest's own CRC check sees a corrupted checksum.
    let (out, log) = run_fw(fw.path(), &["--test-corrupt-hint", "checksum"]);
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(log, "C\n");
}

#[test]
fn bad_firmware_options_are_one_line_errors() {
    let dir = tempfile::tempdir().unwrap();
    let flat = dir.path().join("OVMF.fd");
    std::fs::write(&flat, vec![0xffu8; 8192]).unwrap();
    let (out, _) = run_fw(&flat, &[]);
    assert_one_line_error(&out, &["not a PVH ELF firmware", "CLOUDHV.fd", "OVMF.fd"]);
    let (out, _) = run_fw(Path::new("/nonexistent/CLOUDHV.fd"), &[]);
    assert_one_line_error(&out, &["cannot read firmware", "/nonexistent/CLOUDHV.fd"]);
    let fw = pvh_elf(&FW_GUEST, 3);
    for (off, name) in [("prezero=off", "prezero=off"), ("hint=off", "hint=off")] {
        let mem = format!("size=64M,{off}");
        let (out, _) = run_fw(fw.path(), &["--firmware-hint", "scrub", "--memory", &mem]);
        assert_one_line_error(&out, &[name]);
    }
    let (out, _) = run_fw(fw.path(), &["--firmware-hint", "scrub", "--verify-hint"]);
    assert_one_line_error(&out, &["--verify-hint", "scrub"]);
    let (out, _) = run_fw(fw.path(), &["--initramfs", "/etc/hostname"]);
    assert_one_line_error(&out, &["--initramfs needs --kernel"]);
    // An ELF vmlinux is not something EDK2 can boot from fw_cfg.
    let vmlinux = pvh_elf(&FW_GUEST, 0x3e);
    let (out, _) = run_fw(fw.path(), &["--kernel", vmlinux.path().to_str().unwrap()]);
    assert_one_line_error(&out, &["must be a bzImage"]);
    // A non-x86 ELF.
    let arm = pvh_elf(&FW_GUEST, 0xb7);
    let (out, _) = run_fw(arm.path(), &[]);
    assert_one_line_error(&out, &["neither x86 nor x86-64"]);
}

/// The VMM-side verify mode covers firmware boot too: a planted non-zero
/// byte in the fw_cfg hint's ranges makes `--verify-hint` refuse to boot,
/// and a clean run verifies every hinted byte.
#[test]
fn verify_hint_guards_the_fw_cfg_hint() {
    if !have_kvm() {
        return;
    }
    let fw = pvh_elf(&FW_GUEST, 3);
    let dir = tempfile::tempdir().unwrap();
    let tl = dir.path().join("t.json");
    let tl_arg = tl.to_str().unwrap();
    let (out, log) = run_fw(fw.path(), &["--verify-hint", "--timeline", tl_arg]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(log.starts_with("H="), "{log:?}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tl).unwrap()).unwrap();
    let hinted = j["prezero"]["hint_bytes"].as_u64().unwrap();
    assert!(hinted > 40 << 20, "{j}");
    assert_eq!(j["prezero"]["verified_bytes"].as_u64(), Some(hinted));

    let (out, log) = run_fw(
        fw.path(),
        &["--verify-hint", "--test-corrupt-hint", "dirty"],
    );
    assert_one_line_error(&out, &["--verify-hint", "refusing to boot"]);
    assert_eq!(log, "", "the guest must not have run");
}

/// A firmware that starts one fw_cfg DMA of length 0xffffffff (select an
/// absent item, read: zero-fill 4 GiB from 32 MiB) and spins (nasm):
///
/// ```text
/// bits 32
/// org 0x1000000
///     mov dword [0x80000], 0x0a00ff07  ; control be32 0x07ff000a
///     mov dword [0x80004], 0xffffffff  ; length
///     mov dword [0x80008], 0           ; address be64 0x2000000
///     mov dword [0x8000c], 0x00000002
///     mov dx, 0x440 ; mov eax, 0x5a530001 ; out dx, eax  ; kernel_started
///     mov dx, 0x514 ; xor eax, eax ; out dx, eax
///     mov dx, 0x518 ; mov eax, 0x00000800 ; out dx, eax  ; start the DMA
///     mov dx, 0x440 ; mov eax, 0x5a530003 ; out dx, eax  ; test_done
///     mov dx, 0x3f8 ; mov al, 'R' ; out dx, al ; mov al, 10 ; out dx, al
///     jmp $
/// ```
const LONG_DMA_FW: [u8; 89] = [
    0xc7, 0x05, 0x00, 0x00, 0x08, 0x00, 0x07, 0xff, 0x00, 0x0a, 0xc7, 0x05, 0x04, 0x00, 0x08, 0x00,
    0xff, 0xff, 0xff, 0xff, 0xc7, 0x05, 0x08, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc7, 0x05,
    0x0c, 0x00, 0x08, 0x00, 0x02, 0x00, 0x00, 0x00, 0x66, 0xba, 0x40, 0x04, 0xb8, 0x01, 0x00, 0x53,
    0x5a, 0xef, 0x66, 0xba, 0x14, 0x05, 0x31, 0xc0, 0xef, 0x66, 0xba, 0x18, 0x05, 0xb8, 0x00, 0x08,
    0x00, 0x00, 0xef, 0x66, 0xba, 0x40, 0x04, 0xb8, 0x03, 0x00, 0x53, 0x5a, 0xef, 0x66, 0xba, 0xf8,
    0x03, 0xb0, 0x52, 0xee, 0xb0, 0x0a, 0xee, 0xeb, 0xfe,
];

/// Issue 19 items 2 and 3: one `outl` asking fw_cfg for a 4 GiB DMA into
/// 5 GiB of guest RAM must not hold the vCPU (it used to zero-fill all of
/// it inside the port write: seconds, with the vCPU unkickable), and the
/// VM must stop within a bound while that DMA would still be running, with
/// every thread that writes guest memory joined before the RAM goes (it
/// used to give up on the vCPU after 2 s and drop the RAM under it: a
/// SIGBUS on a named hugetlbfs file).
#[test]
fn long_fw_cfg_dma_neither_holds_the_vcpu_nor_the_teardown() {
    use std::time::{Duration, Instant};
    if !have_kvm() {
        return;
    }
    let fw = pvh_elf(&LONG_DMA_FW, 3);
    let dir = tempfile::tempdir().unwrap();
    let serial = dir.path().join("serial.log");
    let tl = dir.path().join("t.json");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("zerostart"))
        .arg("run")
        .arg("--firmware")
        .arg(fw.path())
        .args(["--memory", "size=5G"])
        .arg("--serial")
        .arg(format!("file={}", serial.display()))
        .arg("--timeline")
        .arg(&tl)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The guest prints R once its port write returned.
    let t0 = Instant::now();
    while !std::fs::read_to_string(&serial)
        .unwrap_or_default()
        .contains('R')
    {
        if t0.elapsed() > Duration::from_secs(30) || child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // Stop it while the DMA (4 GiB of first-touch zeroing) still runs.
    std::thread::sleep(Duration::from_millis(300));
    let stop_at = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let stop = stop_at.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(!err.contains("did not stop in time"), "{err}");
    assert!(
        stop < Duration::from_millis(1500),
        "stopping took {stop:?}: {err}"
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tl).unwrap()).unwrap();
    let at = |name: &str| {
        j["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .and_then(|p| p["t_ms"].as_f64())
            .unwrap_or_else(|| panic!("{name} missing: {j}"))
    };
    let exit_ms = at("test_done") - at("kernel_started");
    assert!(
        exit_ms < 100.0,
        "the DMA's port write held the vCPU {exit_ms} ms"
    );
}

/// A firmware that polls, as OVMF, SeaBIOS and Linux do: it fills 1 MiB at
/// 32 MiB (and one dword after it) with 0xaa, asks fw_cfg for a 1 MiB DMA
/// read of an absent item (zero-fill; longer than the inline limit, so it
/// runs on the DMA worker), polls `control` until 0 (`F` on the error
/// bit), then checks the 1 MiB is zero and the dword after it untouched.
/// Prints `Z` on success, `F` on failure (nasm):
///
/// ```text
/// bits 32
/// org 0x1000000
///     mov edi, 0x2000000 ; mov ecx, 0x40001 ; mov eax, 0xaaaaaaaa ; rep stosd
///     mov dword [0x80000], 0x0a00ff07  ; control be32 0x07ff000a
///     mov dword [0x80004], 0x00001000  ; length be32 0x100000
///     mov dword [0x80008], 0           ; address be64 0x2000000
///     mov dword [0x8000c], 0x00000002
///     mov dx, 0x514 ; xor eax, eax ; out dx, eax
///     mov dx, 0x518 ; mov eax, 0x00000800 ; out dx, eax
/// poll:
///     mov eax, [0x80000] ; test eax, eax ; jz done
///     test eax, 0x01000000 ; jnz fail ; pause ; jmp poll
/// done:
///     mov edi, 0x2000000 ; mov ecx, 0x40000 ; xor eax, eax ; repe scasd ; jne fail
///     cmp dword [0x2100000], 0xaaaaaaaa ; jne fail
///     "Z\n" on COM1, i8042 reset
/// fail:
///     "F\n" on COM1, i8042 reset
/// ```
const POLLING_DMA_FW: [u8; 152] = [
    0xbf, 0x00, 0x00, 0x00, 0x02, 0xb9, 0x01, 0x00, 0x04, 0x00, 0xb8, 0xaa, 0xaa, 0xaa, 0xaa, 0xf3,
    0xab, 0xc7, 0x05, 0x00, 0x00, 0x08, 0x00, 0x07, 0xff, 0x00, 0x0a, 0xc7, 0x05, 0x04, 0x00, 0x08,
    0x00, 0x00, 0x10, 0x00, 0x00, 0xc7, 0x05, 0x08, 0x00, 0x08, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc7,
    0x05, 0x0c, 0x00, 0x08, 0x00, 0x02, 0x00, 0x00, 0x00, 0x66, 0xba, 0x14, 0x05, 0x31, 0xc0, 0xef,
    0x66, 0xba, 0x18, 0x05, 0xb8, 0x00, 0x08, 0x00, 0x00, 0xef, 0xa1, 0x00, 0x00, 0x08, 0x00, 0x85,
    0xc0, 0x74, 0x0b, 0xa9, 0x00, 0x00, 0x00, 0x01, 0x75, 0x2f, 0xf3, 0x90, 0xeb, 0xec, 0xbf, 0x00,
    0x00, 0x00, 0x02, 0xb9, 0x00, 0x00, 0x04, 0x00, 0x31, 0xc0, 0xf3, 0xaf, 0x75, 0x1b, 0x81, 0x3d,
    0x00, 0x00, 0x10, 0x02, 0xaa, 0xaa, 0xaa, 0xaa, 0x75, 0x0f, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x5a,
    0xee, 0xb0, 0x0a, 0xee, 0xb0, 0xfe, 0xe6, 0x64, 0xf4, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x46, 0xee,
    0xb0, 0x0a, 0xee, 0xb0, 0xfe, 0xe6, 0x64, 0xf4,
];

/// The DMA worker and a guest that polls `control`, on /dev/kvm.
#[test]
fn a_polling_firmware_gets_a_long_dma_from_the_worker() {
    if !have_kvm() {
        return;
    }
    let fw = pvh_elf(&POLLING_DMA_FW, 3);
    let (out, log) = run_fw(fw.path(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert_eq!(log, "Z\n", "{err}");
}
