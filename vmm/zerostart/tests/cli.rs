//! Runs the `zerostart` binary: bad input gives one line naming the problem
//! and the fix, a non-zero exit and no panic; a tiny 64-bit guest boots.

use std::io::Write;
use std::path::Path;
use std::process::Output;

use assert_cmd::Command;

/// A bzImage whose 64-bit entry (load address + 0x200) runs `code`.
fn bzimage(code: &[u8]) -> tempfile::NamedTempFile {
    let mut b = vec![0u8; 0x400 + 0x200];
    b[0x1f1] = 1; // setup_sects
    b[0x1fe..0x200].copy_from_slice(&[0x55, 0xaa]);
    b[0x202..0x206].copy_from_slice(b"HdrS");
    b[0x206..0x208].copy_from_slice(&0x20fu16.to_le_bytes());
    b[0x211] = 1; // LOADED_HIGH
    b[0x214..0x218].copy_from_slice(&0x10_0000u32.to_le_bytes());
    b[0x236..0x238].copy_from_slice(&1u16.to_le_bytes()); // XLF_KERNEL_64
    b[0x238..0x23c].copy_from_slice(&2047u32.to_le_bytes());
    b.extend_from_slice(code);
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&b).unwrap();
    f
}

/// 64-bit guest (nasm listing):
/// ```text
///     cmp dword [rsi+0x202], 0x53726448 ; boot_params.hdr.header == "HdrS"
///     jne fail
///     mov dx, 0x3f8 ; "OK\n" on COM1
///     mov al, 'O' ; out dx, al ; mov al, 'K' ; out dx, al ; mov al, 10 ; out dx, al
///     mov dx, 0x440 ; mov eax, 0x5a530001 ; out dx, eax  ; kernel_started marker
///     mov al, 0xfe ; out 0x64, al                        ; i8042 reset
/// fail:
///     mov dx, 0x3f8 ; mov al, 'X' ; out dx, al ; mov al, 0xfe ; out 0x64, al
/// ```
const OK_GUEST: [u8; 50] = [
    0x81, 0xbe, 0x02, 0x02, 0x00, 0x00, 0x48, 0x64, 0x72, 0x53, 0x75, 0x1b, 0x66, 0xba, 0xf8, 0x03,
    0xb0, 0x4f, 0xee, 0xb0, 0x4b, 0xee, 0xb0, 0x0a, 0xee, 0x66, 0xba, 0x40, 0x04, 0xb8, 0x01, 0x00,
    0x53, 0x5a, 0xef, 0xb0, 0xfe, 0xe6, 0x64, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x58, 0xee, 0xb0, 0xfe,
    0xe6, 0x64,
];

/// 32-bit PVH guest (nasm listing):
/// ```text
///     cmp dword [ebx], 0x336ec578   ; hvm_start_info.magic
///     jne fail
///     "PVH\n" on COM1, kernel_started marker, i8042 reset
/// fail:
///     "X" on COM1, i8042 reset
/// ```
const PVH_GUEST: [u8; 49] = [
    0x81, 0x3b, 0x78, 0xc5, 0x6e, 0x33, 0x75, 0x1e, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x50, 0xee, 0xb0,
    0x56, 0xee, 0xb0, 0x48, 0xee, 0xb0, 0x0a, 0xee, 0x66, 0xba, 0x40, 0x04, 0xb8, 0x01, 0x00, 0x53,
    0x5a, 0xef, 0xb0, 0xfe, 0xe6, 0x64, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x58, 0xee, 0xb0, 0xfe, 0xe6,
    0x64,
];

/// An x86-64 ELF with one PT_LOAD segment (`code` at 16 MiB, like vmlinux)
/// and, when `pvh`, a PT_NOTE with the Xen PHYS32_ENTRY note pointing at it.
fn elf_kernel(code: &[u8], pvh: bool) -> tempfile::NamedTempFile {
    const LOAD: u64 = 0x100_0000;
    let mut b = vec![0u8; 0x1000];
    b[..4].copy_from_slice(b"\x7fELF");
    b[4] = 2; // ELFCLASS64
    b[5] = 1; // little endian
    b[6] = 1; // EV_CURRENT
    b[16..18].copy_from_slice(&2u16.to_le_bytes()); // ET_EXEC
    b[18..20].copy_from_slice(&0x3eu16.to_le_bytes()); // EM_X86_64
    b[20..24].copy_from_slice(&1u32.to_le_bytes());
    b[24..32].copy_from_slice(&LOAD.to_le_bytes()); // e_entry
    b[32..40].copy_from_slice(&64u64.to_le_bytes()); // e_phoff
    b[52..54].copy_from_slice(&64u16.to_le_bytes()); // e_ehsize
    b[54..56].copy_from_slice(&56u16.to_le_bytes()); // e_phentsize
    b[56..58].copy_from_slice(&2u16.to_le_bytes()); // e_phnum
    let phdr = |b: &mut Vec<u8>, at: usize, kind: u32, off: u64, addr: u64, size: u64| {
        b[at..at + 4].copy_from_slice(&kind.to_le_bytes());
        b[at + 4..at + 8].copy_from_slice(&5u32.to_le_bytes()); // R+X
        b[at + 8..at + 16].copy_from_slice(&off.to_le_bytes());
        b[at + 16..at + 24].copy_from_slice(&addr.to_le_bytes());
        b[at + 24..at + 32].copy_from_slice(&addr.to_le_bytes());
        b[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
        b[at + 40..at + 48].copy_from_slice(&size.to_le_bytes());
        b[at + 48..at + 56].copy_from_slice(&0x1000u64.to_le_bytes());
    };
    phdr(&mut b, 64, 1, 0x1000, LOAD, code.len() as u64);
    // Note: namesz 4, descsz 4, type 18 (or 17, not PVH), "Xen\0", entry.
    let note_type: u32 = if pvh { 18 } else { 17 };
    let mut note = Vec::new();
    for v in [4u32, 4, note_type] {
        note.extend_from_slice(&v.to_le_bytes());
    }
    note.extend_from_slice(b"Xen\0");
    note.extend_from_slice(&(LOAD as u32).to_le_bytes());
    phdr(&mut b, 120, 4, 0x200, 0, note.len() as u64);
    b[0x200..0x200 + note.len()].copy_from_slice(&note);
    b.extend_from_slice(code);
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&b).unwrap();
    f
}

fn zerostart() -> Command {
    let mut c = Command::cargo_bin("zerostart").unwrap();
    c.env_remove("ZEROSTART_KVM_DEVICE");
    c.timeout(std::time::Duration::from_secs(60));
    c
}

/// Asserts a clean failure: exit code 1, one stderr line containing all of
/// `needles`, no panic.
fn assert_one_line_error(out: &Output, needles: &[&str]) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(!err.contains("panicked"), "{err}");
    let lines: Vec<_> = err.lines().collect();
    assert_eq!(lines.len(), 1, "expected one line, got: {err}");
    for n in needles {
        assert!(lines[0].contains(n), "'{n}' not in: {}", lines[0]);
    }
}

fn run_with(kernel: &Path, extra: &[&str]) -> Output {
    zerostart()
        .arg("run")
        .arg("--kernel")
        .arg(kernel)
        .args(["--serial", "off"])
        .args(extra)
        .output()
        .unwrap()
}

fn have_kvm() -> bool {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok()
}

#[test]
fn missing_kernel() {
    let out = run_with(Path::new("/nonexistent/bzImage"), &[]);
    assert_one_line_error(
        &out,
        &["/nonexistent/bzImage", "does not exist", "--kernel"],
    );
}

#[test]
fn kernel_is_a_directory() {
    let d = tempfile::tempdir().unwrap();
    let out = run_with(d.path(), &[]);
    assert_one_line_error(&out, &["not a Linux bzImage", "directory"]);
}

#[test]
fn non_kernel_files() {
    let mut f = tempfile::NamedTempFile::new().unwrap();
    f.write_all(&[0x42; 4096]).unwrap();
    assert_one_line_error(&run_with(f.path(), &[]), &["not a Linux bzImage", "HdrS"]);
    let mut e = tempfile::NamedTempFile::new().unwrap();
    e.write_all(b"\x7fELF\x02\x01\x01").unwrap();
    e.write_all(&[0; 4096]).unwrap();
    assert_one_line_error(&run_with(e.path(), &[]), &["ELF", "not x86-64"]);
    let short = tempfile::NamedTempFile::new().unwrap();
    assert_one_line_error(&run_with(short.path(), &[]), &["too short"]);
}

#[test]
fn bad_memory_sizes() {
    let k = bzimage(&OK_GUEST);
    let out = run_with(k.path(), &["--memory", "size=lots"]);
    assert_one_line_error(&out, &["size=\"lots\"", "e.g. 4G"]);
    let out = run_with(k.path(), &["--memory", "size=1000"]);
    assert_one_line_error(&out, &["multiple of 4 KiB"]);
    let out = run_with(k.path(), &["--memory", "size=64T"]);
    assert_one_line_error(&out, &["exceeds this host's memory", "smaller"]);
    let out = run_with(k.path(), &["--memory", "colour=blue"]);
    assert_one_line_error(&out, &["colour", "size, hugepages"]);
}

#[test]
fn zero_vcpus() {
    let k = bzimage(&OK_GUEST);
    let out = run_with(k.path(), &["--cpus", "boot=0"]);
    assert_one_line_error(&out, &["boot='0'", "1..=32"]);
}

#[test]
fn kvm_device_missing_or_wrong() {
    let k = bzimage(&OK_GUEST);
    let out = run_with(k.path(), &["--kvm-device", "/nonexistent/kvm"]);
    assert_one_line_error(&out, &["/nonexistent/kvm does not exist", "modprobe"]);
    // Also through the environment.
    let out = zerostart()
        .env("ZEROSTART_KVM_DEVICE", "/nonexistent/kvm2")
        .args(["run", "--serial", "off", "--kernel"])
        .arg(k.path())
        .output()
        .unwrap();
    assert_one_line_error(&out, &["/nonexistent/kvm2"]);
    let out = run_with(k.path(), &["--kvm-device", "/dev/null"]);
    assert_one_line_error(&out, &["/dev/null is not a KVM device"]);
}

/// Runs as an unprivileged user when we are root (CI): /dev/kvm is
/// root-only here, and the kernel file can be made unreadable.
#[test]
fn not_permitted() {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 || Command::new("setpriv").arg("--help").output().is_err() {
        eprintln!("skipped: needs root and setpriv to drop privileges");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("zerostart");
    std::fs::copy(assert_cmd::cargo::cargo_bin("zerostart"), &bin).unwrap();
    let kpath = dir.path().join("bzImage");
    std::fs::copy(bzimage(&OK_GUEST).path(), &kpath).unwrap();
    let as_nobody = |kernel_mode: u32, dev: &str| {
        std::fs::set_permissions(&kpath, std::fs::Permissions::from_mode(kernel_mode)).unwrap();
        std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(&bin)
            .args(["run", "--serial", "off", "--kvm-device", dev, "--kernel"])
            .arg(&kpath)
            .output()
            .unwrap()
    };
    let out = as_nobody(0o600, "/dev/kvm");
    assert_one_line_error(&out, &["cannot read kernel image", "permission"]);
    let denied = tempfile::NamedTempFile::new_in(dir.path()).unwrap();
    std::fs::set_permissions(denied.path(), std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = as_nobody(0o644, denied.path().to_str().unwrap());
    assert_one_line_error(&out, &["permission denied", "kvm group"]);
}

#[test]
fn hugepages_without_reservation() {
    let k = bzimage(&OK_GUEST);
    // More 2 MiB pages than are free (usually none are reserved).
    let free = std::fs::read_to_string("/proc/meminfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("HugePages_Free:"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    let size = format!("size={}M,hugepages=on", (free + 1) * 2);
    let out = run_with(k.path(), &["--memory", &size]);
    assert_one_line_error(&out, &["hugepages but only", "nr_hugepages"]);
}

#[test]
fn boots_a_tiny_guest() {
    if !have_kvm() {
        eprintln!("skipped: /dev/kvm not available");
        return;
    }
    let k = bzimage(&OK_GUEST);
    let dir = tempfile::tempdir().unwrap();
    let tl = dir.path().join("t.json");
    let serial = dir.path().join("serial.log");
    for cpus in ["boot=1", "boot=3"] {
        let out = zerostart()
            .arg("run")
            .arg("--kernel")
            .arg(k.path())
            .args(["--cpus", cpus, "--memory", "size=128M"])
            .arg("--serial")
            .arg(format!("file={}", serial.display()))
            .arg("--timeline")
            .arg(&tl)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        assert!(err.contains("exit=i8042 reset"), "{err}");
        let log = std::fs::read_to_string(&serial).unwrap();
        assert!(log.ends_with("OK\n"), "serial: {log:?}");
        let j: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&tl).unwrap()).unwrap();
        let names: Vec<&str> = j["phases"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        for n in [
            "process_start",
            "memory_ready",
            "first_kvm_run",
            "kernel_started",
            "first_serial_output",
            "exit",
        ] {
            assert!(names.contains(&n), "{n} missing from {names:?}");
        }
        assert_eq!(j["memory_bytes"], 128u64 << 20);
        assert_eq!(j["exit"]["code"], 0);
        assert!(j["prezero"]["hint_bytes"].as_u64().unwrap() > 100 << 20);
    }
}

#[test]
fn boots_a_pvh_elf() {
    if !have_kvm() {
        eprintln!("skipped: /dev/kvm not available");
        return;
    }
    let k = elf_kernel(&PVH_GUEST, true);
    let dir = tempfile::tempdir().unwrap();
    let serial = dir.path().join("serial.log");
    let out = zerostart()
        .arg("run")
        .arg("--kernel")
        .arg(k.path())
        .args(["--memory", "size=128M"])
        .arg("--serial")
        .arg(format!("file={}", serial.display()))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("PVH boot carries no setup_data"), "{err}");
    assert_eq!(std::fs::read_to_string(&serial).unwrap(), "PVH\n");
}

#[test]
fn elf_without_pvh_note() {
    let k = elf_kernel(&PVH_GUEST, false);
    let out = run_with(k.path(), &["--memory", "size=128M"]);
    assert_one_line_error(&out, &["without a PVH entry note", "CONFIG_PVH"]);
}

/// `mov dx, 0x600; mov al, 0x34; out dx, al` (ACPI S5 | SLP_EN), then an
/// i8042 reset if that did not end the VM.
const POWEROFF_GUEST: [u8; 11] = [
    0x66, 0xba, 0x00, 0x06, 0xb0, 0x34, 0xee, 0xb0, 0xfe, 0xe6, 0x64,
];

#[test]
fn acpi_poweroff_ends_the_vm() {
    if !have_kvm() {
        eprintln!("skipped: /dev/kvm not available");
        return;
    }
    let k = bzimage(&POWEROFF_GUEST);
    let out = run_with(k.path(), &["--memory", "size=64M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("exit=acpi poweroff"), "{err}");
    // Without ACPI the port is unclaimed: the fallback reset ends it.
    let out = run_with(k.path(), &["--memory", "size=64M", "--acpi", "off"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("exit=i8042 reset"), "{err}");
}

/// `int3` with the boot IDT (one non-present entry): #GP, #DF, triple
/// fault on hardware KVM; this development host's software KVM cannot
/// emulate the delivery and reports an internal error instead. Either way
/// the VMM must end cleanly with the reason on stderr.
#[test]
fn guest_fault_ends_the_vm_cleanly() {
    if !have_kvm() {
        eprintln!("skipped: /dev/kvm not available");
        return;
    }
    let k = bzimage(&[0xcc]);
    let out = run_with(k.path(), &["--memory", "size=64M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    match out.status.code() {
        Some(0) => assert!(err.contains("exit=triple fault"), "{err}"),
        Some(1) => {
            assert!(
                err.starts_with("zerostart: error: KVM internal error on vCPU 0 at rip 0x100200"),
                "{err}"
            )
        }
        c => panic!("exit {c:?}: {err}"),
    }
}

/// A guest spinning forever (`jmp $`) plus an AP waiting for SIPI: SIGTERM
/// must kick both vCPUs out of KVM_RUN, and the run ends with 128 + 15 and
/// its timeline written.
#[test]
fn sigterm_stops_a_spinning_guest() {
    if !have_kvm() {
        eprintln!("skipped: /dev/kvm not available");
        return;
    }
    let k = bzimage(&[0xeb, 0xfe]);
    let dir = tempfile::tempdir().unwrap();
    let tl = dir.path().join("t.json");
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("zerostart"))
        .arg("run")
        .arg("--kernel")
        .arg(k.path())
        .args([
            "--serial", "off", "--cpus", "boot=2", "--memory", "size=64M",
        ])
        .arg("--timeline")
        .arg(&tl)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(err.contains("exit=terminated by signal 15"), "{err}");
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tl).unwrap()).unwrap();
    assert_eq!(j["exit"]["code"], 143);
}

#[test]
fn help_hides_test_flags() {
    let out = zerostart().args(["run", "--help"]).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("--kernel") && s.contains("--memory"));
    assert!(!s.contains("test-corrupt-hint") && !s.contains("kvm-device"));
}

#[test]
fn corrupt_hint_switch_is_locked_without_the_test_env() {
    // Refused before anything is opened: no kernel, no KVM needed.
    let out = zerostart()
        .env_remove("ZEROSTART_TEST_SWITCHES")
        .args([
            "run",
            "--kernel",
            "/nonexistent",
            "--test-corrupt-hint=dirty",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("ZEROSTART_TEST_SWITCHES=1"), "{err}");
}
