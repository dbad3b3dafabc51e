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
    assert_one_line_error(&run_with(e.path(), &[]), &["ELF"]);
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
fn help_hides_test_flags() {
    let out = zerostart().args(["run", "--help"]).output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("--kernel") && s.contains("--memory"));
    assert!(!s.contains("test-corrupt-hint") && !s.contains("kvm-device"));
}
