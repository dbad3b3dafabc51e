//! Runs the `zerostart` binary: bad input gives one line naming the problem
//! and the fix, a non-zero exit and no panic; a tiny 64-bit guest boots.

mod common;

use std::path::Path;
use std::process::Output;

use common::{
    assert_one_line_error, bzimage_64, elf_kernel, have_kvm, run_with_serial, temp_file, zerostart,
    PHYS32_ENTRY,
};

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
    let f = temp_file(&[0x42; 4096]);
    assert_one_line_error(&run_with(f.path(), &[]), &["not a Linux bzImage", "HdrS"]);
    let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
    elf.extend_from_slice(&[0; 4096]);
    let e = temp_file(&elf);
    assert_one_line_error(&run_with(e.path(), &[]), &["ELF", "not x86-64"]);
    let short = tempfile::NamedTempFile::new().unwrap();
    assert_one_line_error(&run_with(short.path(), &[]), &["too short"]);
}

#[test]
fn bad_memory_sizes() {
    let k = bzimage_64(&OK_GUEST);
    let out = run_with(k.path(), &["--memory", "size=lots"]);
    assert_one_line_error(&out, &["size='lots' is not a size", "e.g. 4G"]);
    let out = run_with(k.path(), &["--memory", "size=1000"]);
    assert_one_line_error(&out, &["multiple of 4 KiB"]);
    let out = run_with(k.path(), &["--memory", "size=64T"]);
    assert_one_line_error(&out, &["exceeds this host's memory", "smaller"]);
    let out = run_with(k.path(), &["--memory", "colour=blue"]);
    assert_one_line_error(&out, &["colour", "size, hugepages"]);
}

/// One grammar for every option list: a key given twice is refused the
/// same way by --cpus (which used to take the last one) and --memory.
#[test]
fn duplicate_keys_are_refused_by_every_option() {
    let k = bzimage_64(&OK_GUEST);
    for (opt, list) in [
        ("--cpus", "boot=1,boot=2"),
        ("--memory", "size=64M,size=128M"),
    ] {
        let out = run_with(k.path(), &[opt, list]);
        assert_one_line_error(&out, &[&opt[2..], "given more than once", "at most once"]);
    }
    let out = run_with(k.path(), &["--cpus", "boot=1,sockets=2"]);
    assert_one_line_error(&out, &["unknown key 'sockets'", "valid keys: boot"]);
}

/// Every bad --disk is one line naming the problem and the fix, before
/// any memory is mapped or KVM opened.
#[test]
fn bad_disk_values() {
    let k = bzimage_64(&OK_GUEST);
    let img = temp_file(&[0u8; 4096]);
    let img_arg = format!("path={}", img.path().display());
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = format!("path={}", dir.path().display());
    let bad_ro = format!("{img_arg},readonly=maybe");
    let unknown = format!("{img_arg},cache=none");
    for (disk, needles) in [
        (
            "readonly=on",
            &["--disk", "path= is required", "path=rootfs.img"][..],
        ),
        ("path=", &["--disk", "path=''", "raw image's path"][..]),
        ("/img", &["--disk", "not key=value", "path=rootfs.img"][..]),
        (
            bad_ro.as_str(),
            &["--disk", "readonly='maybe'", "readonly=on or readonly=off"][..],
        ),
        (
            unknown.as_str(),
            &[
                "--disk",
                "unknown key 'cache'",
                "valid keys: path, readonly",
            ][..],
        ),
        (
            "path=/nonexistent/disk.img",
            &[
                "cannot open disk image /nonexistent/disk.img",
                "check --disk path=",
            ][..],
        ),
        (dir_arg.as_str(), &["disk image", "raw image"][..]),
    ] {
        let out = run_with(
            k.path(),
            &["--disk", disk, "--kvm-device", "/nonexistent/kvm"],
        );
        assert_one_line_error(&out, needles);
    }
    // 20 disks: one more than there are IOAPIC pins for.
    let mut args = Vec::new();
    for _ in 0..20 {
        args.extend(["--disk", img_arg.as_str()]);
    }
    let out = run_with(k.path(), &args);
    assert_one_line_error(&out, &["20 virtio devices", "at most 19", "attach fewer"]);
    // Each image is opened (and locked) once, in planning: the same image
    // writable and again read-only is refused before KVM is touched.
    let ro_arg = format!("{img_arg},readonly=on");
    let out = run_with(
        k.path(),
        &[
            "--disk",
            &img_arg,
            "--disk",
            &ro_arg,
            "--kvm-device",
            "/nonexistent/kvm",
        ],
    );
    assert_one_line_error(&out, &["is in use", "readonly=on"]);
    // Control: good --disks get past planning (to the missing KVM device).
    let img2 = temp_file(&[0u8; 4096]);
    let out = run_with(
        k.path(),
        &[
            "--disk",
            &img_arg,
            "--disk",
            &format!("path={},readonly=on", img2.path().display()),
            "--kvm-device",
            "/nonexistent/kvm",
        ],
    );
    assert_one_line_error(&out, &["/nonexistent/kvm does not exist"]);
}

/// Every bad `--net` / `--vsock` value is one line naming the fix, before
/// any memory or KVM is touched.
#[test]
fn bad_net_and_vsock_values() {
    let k = bzimage_64(&OK_GUEST);
    let vhost_net = Path::new("/dev/vhost-net").exists();
    let vhost_vsock = Path::new("/dev/vhost-vsock").exists();
    let mut cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["--net", ""], vec!["--net", "tap= is required"]),
        (vec!["--net", "tap=a/b"], vec!["--net", "interface name"]),
        (
            vec!["--net", "tap=t0,mac=01:02:03:04:05:06"],
            vec!["--net", "unicast"],
        ),
        (
            vec!["--net", "tap=t0,mac=zz"],
            vec!["--net", "six hex pairs"],
        ),
        (
            vec!["--net", "tap=t0,vhost=yes please"],
            vec!["--net", "vhost=on"],
        ),
        (
            vec!["--net", "tap=t0,queues=4"],
            vec!["--net", "unknown key 'queues'"],
        ),
        (
            vec!["--net", "tap=zs-no-such0,vhost=off"],
            vec![
                "tap=zs-no-such0",
                "no such network interface",
                "ip tuntap add",
            ],
        ),
        (
            vec!["--net", "tap=zs-a,vhost=off", "--net", "tap=zs-a,vhost=off"],
            vec!["tap=zs-a is given twice"],
        ),
        (
            vec![
                "--net",
                "tap=zs-a,mac=0a:00:00:00:00:01,vhost=off",
                "--net",
                "tap=zs-b,mac=0a:00:00:00:00:01,vhost=off",
            ],
            vec!["mac=0a:00:00:00:00:01", "two devices"],
        ),
        (vec!["--vsock", "cid=2"], vec!["--vsock", "from 3 to"]),
        (vec!["--vsock", "cid=x"], vec!["--vsock", "from 3 to"]),
        (
            vec!["--vsock", "socket=/tmp/x"],
            vec!["--vsock", "unknown key 'socket'"],
        ),
    ];
    if !vhost_net {
        cases.push((
            vec!["--net", "tap=zs-no-such0,vhost=on"],
            vec![
                "vhost=on",
                "/dev/vhost-net does not exist",
                "modprobe vhost_net",
                "vhost=off",
            ],
        ));
    } else {
        testsupport::skip(
            "NO_VHOST_NET",
            "the vhost=on without /dev/vhost-net case: /dev/vhost-net exists here",
        );
    }
    if !vhost_vsock {
        cases.push((
            vec!["--vsock", "cid=3"],
            vec!["/dev/vhost-vsock does not exist", "modprobe vhost_vsock"],
        ));
    } else {
        testsupport::skip(
            "NO_VHOST_VSOCK",
            "the --vsock without /dev/vhost-vsock case: /dev/vhost-vsock exists here",
        );
    }
    for (args, needles) in cases {
        let mut a = args.clone();
        a.extend(["--kvm-device", "/nonexistent/kvm"]);
        let out = run_with(k.path(), &a);
        assert_one_line_error(&out, &needles);
    }
}

/// 64-bit guest that reads the first virtio-mmio window through KVM MMIO
/// exits (nasm listing):
/// ```text
///     mov ebx, 0xd0000000
///     mov eax, [rbx]      ; cmp eax, 0x74726976 ("virt") ; jne fail
///     mov eax, [rbx+8]    ; cmp eax, 2 (block)           ; jne fail
///     "V\n" on COM1, i8042 reset
/// fail:
///     "X" on COM1, i8042 reset
/// ```
const VIRTIO_GUEST: [u8; 47] = [
    0xbb, 0x00, 0x00, 0x00, 0xd0, 0x8b, 0x03, 0x3d, 0x76, 0x69, 0x72, 0x74, 0x75, 0x16, 0x8b, 0x43,
    0x08, 0x83, 0xf8, 0x02, 0x75, 0x0e, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x56, 0xee, 0xb0, 0x0a, 0xee,
    0xb0, 0xfe, 0xe6, 0x64, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x58, 0xee, 0xb0, 0xfe, 0xe6, 0x64,
];

/// With a --disk the guest finds a virtio-mmio block device at
/// 0xd0000000; without one (the negative control) it reads open bus.
#[test]
fn guest_sees_the_virtio_mmio_window() {
    if !have_kvm() {
        return;
    }
    let k = bzimage_64(&VIRTIO_GUEST);
    let img = temp_file(&[0u8; 4096]);
    let disk = format!("path={}", img.path().display());
    for (with_disk, expect) in [(true, "V\n"), (false, "X")] {
        let mut extra = vec!["--memory", "size=64M"];
        if with_disk {
            extra.extend(["--disk", &disk]);
        }
        let b = run_with_serial("--kernel", k.path(), &extra);
        assert_eq!(b.out.status.code(), Some(0), "{}", b.err());
        assert_eq!(b.log(), expect, "with_disk={with_disk}");
    }
}

/// 64-bit guest that reads sector 0 of its virtio-blk disk the way a
/// driver does: it programs queue 0 through the registers (KVM MMIO
/// exits), builds one read request in its RAM, writes `QueueNotify` (no
/// exit: the VMM registered it as a KVM ioeventfd, so the request runs on
/// the device's I/O thread) and polls the used ring; "R\n" if the status
/// byte is OK and the buffer holds the disk's 0x5a bytes, else "X"
/// (nasm listing):
/// ```text
/// bits 64
///     mov ebx, 0xd0000000
///     mov dword [rbx+0x70], 0          ; Status: reset
///     mov dword [rbx+0x70], 3          ; ACKNOWLEDGE | DRIVER
///     mov dword [rbx+0x24], 1          ; DriverFeaturesSel = 1
///     mov dword [rbx+0x20], 1          ; VERSION_1
///     mov dword [rbx+0x70], 0xb        ; FEATURES_OK
///     mov dword [rbx+0x30], 0          ; QueueSel = 0
///     mov dword [rbx+0x38], 16         ; QueueNum
///     mov dword [rbx+0x80], 0x200000   ; QueueDescLow
///     mov dword [rbx+0x90], 0x201000   ; QueueAvailLow
///     mov dword [rbx+0xa0], 0x202000   ; QueueUsedLow
///     mov dword [rbx+0x44], 1          ; QueueReady
///     mov dword [rbx+0x70], 0xf        ; DRIVER_OK
///     mov edi, 0x200000                ; header (16) -> buffer (512, W) -> status (1, W)
///     mov qword [rdi], 0x203000
///     mov dword [rdi+8], 16
///     mov dword [rdi+12], 0x00010001   ; flags NEXT, next 1
///     mov qword [rdi+16], 0x204000
///     mov dword [rdi+24], 512
///     mov dword [rdi+28], 0x00020003   ; flags NEXT|WRITE, next 2
///     mov qword [rdi+32], 0x203010
///     mov dword [rdi+40], 1
///     mov dword [rdi+44], 2            ; flags WRITE
///     mov qword [0x203000], 0          ; VIRTIO_BLK_T_IN
///     mov qword [0x203008], 0          ; sector 0
///     mov byte [0x203010], 0xff        ; status, until the device writes it
///     mov dword [0x202000], 0          ; used flags, idx
///     mov dword [0x201004], 0          ; avail ring[0] = head 0
///     mov dword [0x201000], 0x00010000 ; avail flags 0, idx 1
///     mov dword [rbx+0x50], 0          ; QueueNotify(0): the ioeventfd
///     mov ecx, 0x4000000
/// spin:
///     cmp word [0x202002], 1           ; used idx
///     je done
///     pause
///     dec ecx
///     jnz spin
///     jmp fail
/// done:
///     cmp byte [0x203010], 0           ; VIRTIO_BLK_S_OK
///     jne fail
///     cmp dword [0x204000], 0x5a5a5a5a ; sector 0's bytes
///     jne fail
///     cmp dword [0x2041fc], 0x5a5a5a5a
///     jne fail
///     mov dx, 0x3f8
///     mov al, 'R'
///     out dx, al
///     mov al, 10
///     out dx, al
///     mov al, 0xfe
///     out 0x64, al
/// fail:
///     mov dx, 0x3f8
///     mov al, 'X'
///     out dx, al
///     mov al, 0xfe
///     out 0x64, al
/// ```
const VIRTIO_BLK_READ_GUEST: [u8; 325] = [
    0xbb, 0x00, 0x00, 0x00, 0xd0, 0xc7, 0x43, 0x70, 0x00, 0x00, 0x00, 0x00, 0xc7, 0x43, 0x70, 0x03,
    0x00, 0x00, 0x00, 0xc7, 0x43, 0x24, 0x01, 0x00, 0x00, 0x00, 0xc7, 0x43, 0x20, 0x01, 0x00, 0x00,
    0x00, 0xc7, 0x43, 0x70, 0x0b, 0x00, 0x00, 0x00, 0xc7, 0x43, 0x30, 0x00, 0x00, 0x00, 0x00, 0xc7,
    0x43, 0x38, 0x10, 0x00, 0x00, 0x00, 0xc7, 0x83, 0x80, 0x00, 0x00, 0x00, 0x00, 0x00, 0x20, 0x00,
    0xc7, 0x83, 0x90, 0x00, 0x00, 0x00, 0x00, 0x10, 0x20, 0x00, 0xc7, 0x83, 0xa0, 0x00, 0x00, 0x00,
    0x00, 0x20, 0x20, 0x00, 0xc7, 0x43, 0x44, 0x01, 0x00, 0x00, 0x00, 0xc7, 0x43, 0x70, 0x0f, 0x00,
    0x00, 0x00, 0xbf, 0x00, 0x00, 0x20, 0x00, 0x48, 0xc7, 0x07, 0x00, 0x30, 0x20, 0x00, 0xc7, 0x47,
    0x08, 0x10, 0x00, 0x00, 0x00, 0xc7, 0x47, 0x0c, 0x01, 0x00, 0x01, 0x00, 0x48, 0xc7, 0x47, 0x10,
    0x00, 0x40, 0x20, 0x00, 0xc7, 0x47, 0x18, 0x00, 0x02, 0x00, 0x00, 0xc7, 0x47, 0x1c, 0x03, 0x00,
    0x02, 0x00, 0x48, 0xc7, 0x47, 0x20, 0x10, 0x30, 0x20, 0x00, 0xc7, 0x47, 0x28, 0x01, 0x00, 0x00,
    0x00, 0xc7, 0x47, 0x2c, 0x02, 0x00, 0x00, 0x00, 0x48, 0xc7, 0x04, 0x25, 0x00, 0x30, 0x20, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x48, 0xc7, 0x04, 0x25, 0x08, 0x30, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00,
    0xc6, 0x04, 0x25, 0x10, 0x30, 0x20, 0x00, 0xff, 0xc7, 0x04, 0x25, 0x00, 0x20, 0x20, 0x00, 0x00,
    0x00, 0x00, 0x00, 0xc7, 0x04, 0x25, 0x04, 0x10, 0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc7, 0x04,
    0x25, 0x00, 0x10, 0x20, 0x00, 0x00, 0x00, 0x01, 0x00, 0xc7, 0x43, 0x50, 0x00, 0x00, 0x00, 0x00,
    0xb9, 0x00, 0x00, 0x00, 0x04, 0x66, 0x83, 0x3c, 0x25, 0x02, 0x20, 0x20, 0x00, 0x01, 0x74, 0x08,
    0xf3, 0x90, 0xff, 0xc9, 0x75, 0xef, 0xeb, 0x32, 0x80, 0x3c, 0x25, 0x10, 0x30, 0x20, 0x00, 0x00,
    0x75, 0x28, 0x81, 0x3c, 0x25, 0x00, 0x40, 0x20, 0x00, 0x5a, 0x5a, 0x5a, 0x5a, 0x75, 0x1b, 0x81,
    0x3c, 0x25, 0xfc, 0x41, 0x20, 0x00, 0x5a, 0x5a, 0x5a, 0x5a, 0x75, 0x0e, 0x66, 0xba, 0xf8, 0x03,
    0xb0, 0x52, 0xee, 0xb0, 0x0a, 0xee, 0xb0, 0xfe, 0xe6, 0x64, 0x66, 0xba, 0xf8, 0x03, 0xb0, 0x58,
    0xee, 0xb0, 0xfe, 0xe6, 0x64,
];

/// A virtio-blk read end to end through KVM: the guest's `QueueNotify`
/// goes to the ioeventfd, the device's I/O thread reads the image into
/// guest RAM and completes the request, the guest sees the data. The
/// negative control is a disk of other bytes, which the guest must tell
/// apart ("X").
#[test]
fn guest_reads_its_disk_through_the_io_thread() {
    if !have_kvm() {
        return;
    }
    let k = bzimage_64(&VIRTIO_BLK_READ_GUEST);
    for (byte, expect) in [(0x5au8, "R\n"), (0x00, "X")] {
        let img = temp_file(&[byte; 4096]);
        let disk = format!("path={}", img.path().display());
        let b = run_with_serial(
            "--kernel",
            k.path(),
            &["--memory", "size=64M", "--disk", &disk],
        );
        assert_eq!(b.out.status.code(), Some(0), "{}", b.err());
        assert_eq!(b.log(), expect, "disk of {byte:#x} bytes");
    }
}

/// Several disks: each `--disk` is a device of its own, disk `n` in the
/// window at `0xd0000000 + n * 4 KiB`. The read guest above, pointed at
/// the second window, reads the second image ("R": 0x5a bytes); pointed
/// at the first, the first (zeros: "X"), so the two never share a backend
/// or a window.
#[test]
fn each_disk_is_a_device_of_its_own() {
    if !have_kvm() {
        return;
    }
    // `mov ebx, 0xd0000000` is where the guest finds its device.
    let at = |base: u32| {
        let mut code = VIRTIO_BLK_READ_GUEST.to_vec();
        let mov = [0xbb, 0x00, 0x00, 0x00, 0xd0];
        let i = code.windows(5).position(|w| w == mov).unwrap();
        assert_eq!(code.windows(5).filter(|w| *w == mov).count(), 1);
        code[i + 1..i + 5].copy_from_slice(&base.to_le_bytes());
        bzimage_64(&code)
    };
    let first = temp_file(&[0x00; 4096]);
    let second = temp_file(&[0x5a; 4096]);
    let d0 = format!("path={}", first.path().display());
    let d1 = format!("path={},readonly=on", second.path().display());
    for (base, expect) in [(0xd000_1000u32, "R\n"), (0xd000_0000, "X")] {
        let k = at(base);
        let b = run_with_serial(
            "--kernel",
            k.path(),
            &["--memory", "size=64M", "--disk", &d0, "--disk", &d1],
        );
        assert_eq!(b.out.status.code(), Some(0), "{}", b.err());
        assert_eq!(b.log(), expect, "guest reading the window at {base:#x}");
    }
}

/// With `--net` on a real tap (in a network namespace of the test's
/// own) the guest finds a virtio-net device (ID 1) at 0xd0000000: the
/// whole `--net` path of the builder (tap attach, user-space backend here
/// where /dev/vhost-net is absent, its RX thread, teardown). The negative
/// control without `--net` reads open bus. SKIPs without root or `ip`.
#[test]
fn guest_sees_a_virtio_net_device() {
    if !have_kvm() {
        return;
    }
    // SAFETY: plain libc query.
    if unsafe { libc::geteuid() } != 0 {
        testsupport::skip("TAP", "a tap in a network namespace needs root");
        return;
    }
    let ns = format!("zsnet-cli-{}", std::process::id());
    let ip = |args: &[&str]| {
        std::process::Command::new("ip")
            .args(args)
            .status()
            .is_ok_and(|s| s.success())
    };
    if !ip(&["netns", "add", &ns]) {
        testsupport::skip("TAP", "`ip netns add` failed (install iproute2)");
        return;
    }
    struct Del(String);
    impl Drop for Del {
        fn drop(&mut self) {
            let _ = std::process::Command::new("ip")
                .args(["netns", "del", &self.0])
                .status();
        }
    }
    let _del = Del(ns.clone());
    assert!(ip(&["-n", &ns, "tuntap", "add", "zst0", "mode", "tap"]));
    assert!(ip(&["-n", &ns, "link", "set", "zst0", "up"]));
    let mut guest = VIRTIO_GUEST;
    assert_eq!(&guest[17..20], &[0x83, 0xf8, 0x02], "cmp eax, 2");
    guest[19] = 1; // virtio-net
    let k = bzimage_64(&guest);
    let dir = tempfile::tempdir().unwrap();
    for (with_net, expect) in [(true, "V\n"), (false, "X")] {
        let serial = dir.path().join(format!("serial-{with_net}.log"));
        let mut cmd = std::process::Command::new("ip");
        cmd.args(["netns", "exec", &ns, env!("CARGO_BIN_EXE_zerostart"), "run"])
            .arg("--kernel")
            .arg(k.path())
            .args(["--memory", "size=64M"])
            .arg("--serial")
            .arg(format!("file={}", serial.display()))
            .env_remove("ZEROSTART_KVM_DEVICE");
        if with_net {
            cmd.args(["--net", "tap=zst0"]);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{err}");
        let log = std::fs::read_to_string(&serial).unwrap();
        assert_eq!(log, expect, "with_net={with_net}: {err}");
    }
}

#[test]
fn zero_vcpus() {
    let k = bzimage_64(&OK_GUEST);
    let out = run_with(k.path(), &["--cpus", "boot=0"]);
    assert_one_line_error(&out, &["boot='0'", "1..=32"]);
}

#[test]
fn kvm_device_missing_or_wrong() {
    let k = bzimage_64(&OK_GUEST);
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
    if unsafe { libc::getuid() } != 0
        || std::process::Command::new("setpriv")
            .arg("--help")
            .output()
            .is_err()
    {
        testsupport::skip("ROOT", "needs root and setpriv to drop privileges");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = dir.path().join("zerostart");
    std::fs::copy(assert_cmd::cargo::cargo_bin("zerostart"), &bin).unwrap();
    let kpath = dir.path().join("bzImage");
    std::fs::copy(bzimage_64(&OK_GUEST).path(), &kpath).unwrap();
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
    let k = bzimage_64(&OK_GUEST);
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
        return;
    }
    let k = bzimage_64(&OK_GUEST);
    let dir = tempfile::tempdir().unwrap();
    let tl = dir.path().join("t.json");
    let tl_arg = tl.to_str().unwrap();
    for cpus in ["boot=1", "boot=3"] {
        let b = run_with_serial(
            "--kernel",
            k.path(),
            &[
                "--cpus",
                cpus,
                "--memory",
                "size=128M",
                "--timeline",
                tl_arg,
            ],
        );
        let err = b.err();
        assert_eq!(b.out.status.code(), Some(0), "{err}");
        assert!(err.contains("exit=i8042 reset"), "{err}");
        let log = b.log();
        assert!(log.ends_with("OK\n"), "serial: {log:?}");
        // Read back as the one type the SLO runner reads it with.
        let j: timeline::RunTimeline =
            serde_json::from_str(&std::fs::read_to_string(&tl).unwrap()).unwrap();
        let names: Vec<&str> = j.phases.iter().map(|p| p.name.as_str()).collect();
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
        assert_eq!(j.memory_bytes, 128 << 20);
        assert_eq!(j.vcpus, if cpus == "boot=1" { 1 } else { 3 });
        assert_eq!(j.exit.code, 0);
        assert!(j.prezero.hint_bytes > 100 << 20);
    }
}

#[test]
fn boots_a_pvh_elf() {
    if !have_kvm() {
        return;
    }
    let k = elf_kernel(&PVH_GUEST, 0x3e, PHYS32_ENTRY);
    let b = run_with_serial("--kernel", k.path(), &["--memory", "size=128M"]);
    let err = b.err();
    assert_eq!(b.out.status.code(), Some(0), "{err}");
    assert!(err.contains("PVH boot carries no setup_data"), "{err}");
    assert_eq!(b.log(), "PVH\n");
}

#[test]
fn elf_without_pvh_note() {
    let k = elf_kernel(&PVH_GUEST, 0x3e, 17);
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
        return;
    }
    let k = bzimage_64(&POWEROFF_GUEST);
    let out = run_with(k.path(), &["--memory", "size=64M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("exit=acpi poweroff"), "{err}");
    // Without ACPI the port is unclaimed: the fallback reset ends it.
    let out = run_with(k.path(), &["--memory", "size=64M", "--acpi", "off"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("exit=i8042 reset"), "{err}");
    // The ACPI reset register (`1` to port 0x600) is an ACPI reset, not
    // an i8042 one.
    let k = bzimage_64(&ACPI_RESET_GUEST);
    let out = run_with(k.path(), &["--memory", "size=64M"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("exit=acpi reset code=0"), "{err}");
}

/// `mov dx, 0x600; mov al, 1; out dx, al` (ACPI reset), then an i8042
/// reset if that did not end the VM.
const ACPI_RESET_GUEST: [u8; 11] = [
    0x66, 0xba, 0x00, 0x06, 0xb0, 0x01, 0xee, 0xb0, 0xfe, 0xe6, 0x64,
];

/// `cli; hlt`: the guest can never run again (how Linux powers off
/// without ACPI). With the in-kernel irqchip no exit reaches the VMM, so
/// only the halt watch can end the run; it must, with exit code 0, within
/// a few seconds, with and without ACPI tables, and with a second vCPU the
/// guest never started. (Before the watch, this test hung.)
#[test]
fn halt_with_interrupts_off_ends_the_vm() {
    if !have_kvm() {
        return;
    }
    let k = bzimage_64(&[0xfa, 0xf4, 0xeb, 0xfc]); // cli; hlt; jmp hlt
    for extra in [&[][..], &["--acpi", "off"][..], &["--cpus", "boot=2"][..]] {
        let mut args = vec!["--memory", "size=64M"];
        args.extend_from_slice(extra);
        let t0 = std::time::Instant::now();
        let out = run_with(k.path(), &args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            err.contains("exit=halted: every vCPU stopped with interrupts off code=0"),
            "{args:?}: {err}"
        );
        assert!(
            t0.elapsed().as_secs() < 10,
            "{args:?}: took {:?}",
            t0.elapsed()
        );
    }
}

/// `lidt` of an empty IDT, then `ud2`: #UD cannot be delivered, nor the
/// #GP and #DF that follow, so the CPU triple-faults (KVM_EXIT_SHUTDOWN,
/// on hardware KVM and on this host's software KVM alike). A crashed guest
/// is not a clean reboot: exit code 2, `exit=triple fault`, its own point
/// in the timeline and `exit.kind` `guest_crash`. (Before, this ended with
/// code 0 as `VmEvent::Reset`, and the test accepted that, or a KVM
/// internal error, as a pass.)
///
/// ```text
///     lidt [rel z]
///     ud2
/// z:  dw 0
///     dq 0
/// ```
const TRIPLE_FAULT_GUEST: [u8; 19] = [
    0x0f, 0x01, 0x1d, 0x02, 0x00, 0x00, 0x00, 0x0f, 0x0b, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x00, 0x00,
];

#[test]
fn triple_fault_is_a_crash_not_a_clean_exit() {
    if !have_kvm() {
        return;
    }
    let k = bzimage_64(&TRIPLE_FAULT_GUEST);
    let dir = tempfile::tempdir().unwrap();
    let tl = dir.path().join("t.json");
    let out = run_with(
        k.path(),
        &["--memory", "size=64M", "--timeline", tl.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.starts_with("zerostart: error: the guest crashed (triple fault)"),
        "{err}"
    );
    assert!(err.contains("exit=triple fault code=2"), "{err}");
    let j: timeline::RunTimeline =
        serde_json::from_str(&std::fs::read_to_string(&tl).unwrap()).unwrap();
    assert_eq!(
        (j.exit.kind.as_str(), j.exit.code, j.exit.reason.as_str()),
        ("guest_crash", 2, "triple fault")
    );
    let names: Vec<&str> = j.phases.iter().map(|p| p.name.as_str()).collect();
    assert!(names.contains(&"triple_fault"), "{names:?}");
}

/// String port I/O, 64-bit guest (nasm listing):
/// ```text
///     lea rsi, [rel msg] ; mov dx, 0x3f8 ; mov ecx, 10 ; rep outsb
///     mov al, 0xf2 ; out 0x60, al        ; keyboard "get ID": fa ab 83
///     mov al, 0xaa ; out 0x64, al ; out 0x64, al ; two self-tests: 55 55
///     lea rdi, [rel buf] ; mov dx, 0x60 ; mov ecx, 5 ; rep insb
///     lea rsi, [rel buf] ; mov dx, 0x3f8 ; mov ecx, 5 ; rep outsb
///     mov al, 0xfe ; out 0x64, al ; hlt
/// msg: db "rep outsb", 10
/// buf: times 5 db 0
/// ```
/// Each `rep` exits once with its whole count; every byte must reach the
/// device as its own access (before, COM1 got `r` and the i8042 read
/// gave `fa 00 00 00 00`).
const STRING_IO_GUEST: [u8; 84] = [
    0x48, 0x8d, 0x35, 0x3e, 0x00, 0x00, 0x00, 0x66, 0xba, 0xf8, 0x03, 0xb9, 0x0a, 0x00, 0x00, 0x00,
    0xf3, 0x6e, 0xb0, 0xf2, 0xe6, 0x60, 0xb0, 0xaa, 0xe6, 0x64, 0xe6, 0x64, 0x48, 0x8d, 0x3d, 0x2c,
    0x00, 0x00, 0x00, 0x66, 0xba, 0x60, 0x00, 0xb9, 0x05, 0x00, 0x00, 0x00, 0xf3, 0x6c, 0x48, 0x8d,
    0x35, 0x1a, 0x00, 0x00, 0x00, 0x66, 0xba, 0xf8, 0x03, 0xb9, 0x05, 0x00, 0x00, 0x00, 0xf3, 0x6e,
    0xb0, 0xfe, 0xe6, 0x64, 0xf4, 0x72, 0x65, 0x70, 0x20, 0x6f, 0x75, 0x74, 0x73, 0x62, 0x0a, 0x00,
    0x00, 0x00, 0x00, 0x00,
];

#[test]
fn string_port_io_is_delivered_element_by_element() {
    if !have_kvm() {
        return;
    }
    let k = bzimage_64(&STRING_IO_GUEST);
    let b = run_with_serial("--kernel", k.path(), &["--memory", "size=64M"]);
    let err = b.err();
    assert_eq!(b.out.status.code(), Some(0), "{err}");
    assert!(err.contains("exit=i8042 reset"), "{err}");
    let log = b.serial;
    assert_eq!(
        log,
        b"rep outsb\n\xfa\xab\x83\x55\x55",
        "serial: {:?}",
        String::from_utf8_lossy(&log)
    );
}

/// A guest spinning forever (`jmp $`) plus an AP waiting for SIPI: SIGTERM
/// must kick both vCPUs out of KVM_RUN, and the run ends with 128 + 15 and
/// its timeline written.
#[test]
fn sigterm_stops_a_spinning_guest() {
    if !have_kvm() {
        return;
    }
    let k = bzimage_64(&[0xeb, 0xfe]);
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

/// The terminal settings that matter, comparable.
fn termios_of(fd: i32) -> (u32, u32, u32, u32, Vec<u8>) {
    // SAFETY: tcgetattr fills the zeroed struct for a valid fd.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::tcgetattr(fd, &mut t) }, 0);
    (t.c_iflag, t.c_oflag, t.c_cflag, t.c_lflag, t.c_cc.to_vec())
}

/// With `--serial tty` and stdin a terminal (a pty here), the terminal is
/// raw while the guest runs (no ICANON/ECHO/ISIG: keys go to the guest) and
/// exactly as before once zerostart ends: after a guest-ended run, an error
/// after the run, a guest fault, SIGTERM and SIGINT. A pty that is only
/// stdout (stdin not a terminal) is never touched.
#[test]
fn terminal_is_raw_during_the_run_and_restored_after() {
    use std::os::fd::{FromRawFd, OwnedFd};
    use std::process::Stdio;
    if !have_kvm() {
        return;
    }
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty fills two fds; they are owned below.
    let r = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(r, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: fresh fds from openpty, each owned once.
    let (_master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let raw_fd = std::os::fd::AsRawFd::as_raw_fd(&slave);
    let before = termios_of(raw_fd);
    let raw_bits = libc::ICANON | libc::ECHO | libc::ISIG;
    assert_eq!(before.3 & raw_bits, raw_bits, "a fresh pty is cooked");
    let spin = bzimage_64(&[0xeb, 0xfe]);
    let ok = bzimage_64(&OK_GUEST);
    let fault = bzimage_64(&[0xcc]);
    let dir = tempfile::tempdir().unwrap();
    let bad_timeline = dir.path().join("missing-dir").join("t.json");

    /// Kernel, extra args, signal to send once running (0: none), whether
    /// stdin is the pty, accepted exit codes.
    type Case<'a> = (&'a Path, Vec<&'a str>, i32, bool, &'a [i32]);
    let cases: [Case; 6] = [
        (ok.path(), vec![], 0, true, &[0]),
        (
            ok.path(),
            vec!["--timeline", bad_timeline.to_str().unwrap()],
            0,
            true,
            &[1],
        ),
        (fault.path(), vec![], 0, true, &[0, 1]),
        (spin.path(), vec![], libc::SIGTERM, true, &[143]),
        (spin.path(), vec![], libc::SIGINT, true, &[130]),
        (spin.path(), vec![], libc::SIGTERM, false, &[143]),
    ];
    for (kernel, extra, sig, tty_stdin, codes) in cases {
        let what = format!("{kernel:?} {extra:?} signal {sig} stdin tty {tty_stdin}");
        let pty = || Stdio::from(slave.try_clone().unwrap());
        let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("zerostart"))
            .env_remove("ZEROSTART_KVM_DEVICE")
            .arg("run")
            .arg("--kernel")
            .arg(kernel)
            .args(["--memory", "size=64M", "--serial", "tty"])
            .args(&extra)
            .stdin(if tty_stdin { pty() } else { Stdio::null() })
            .stdout(pty())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        if sig != 0 {
            // Wait until the guest runs: raw mode (stdin a tty), or a
            // while (stdin not a tty: the pty must stay cooked meanwhile).
            let t0 = std::time::Instant::now();
            loop {
                let now = termios_of(raw_fd);
                if tty_stdin && now.3 & raw_bits == 0 {
                    // Only the three local-mode bits change.
                    assert_eq!(now.3, before.3 & !raw_bits, "{what}");
                    assert_eq!((now.0, now.1, now.2), (before.0, before.1, before.2));
                    break;
                }
                if !tty_stdin {
                    assert_eq!(
                        now, before,
                        "{what}: a non-tty stdin must not touch the pty"
                    );
                    if t0.elapsed() > std::time::Duration::from_millis(700) {
                        break;
                    }
                }
                assert!(
                    t0.elapsed() < std::time::Duration::from_secs(30),
                    "{what}: never saw raw mode"
                );
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            // SAFETY: signalling our own child.
            unsafe { libc::kill(child.id() as i32, sig) };
        }
        let status = child.wait().unwrap();
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(
            status.code().is_some_and(|c| codes.contains(&c)),
            "{what}: {status:?} {err}"
        );
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert_eq!(
            termios_of(raw_fd),
            before,
            "{what}: terminal not restored; {err}"
        );
    }
}

/// A vCPU blocked on console output: the guest prints to COM1 forever and
/// the serial output is a FIFO whose reader never reads, so the vCPU
/// thread blocks in `write` holding COM1. SIGTERM must still stop it in
/// time (the kick interrupts the write) and the VMM exit with the signal's
/// status and its timeline: no hang, no thread left behind. (Had it stayed
/// stuck, teardown keeps guest RAM mapped and warns; the summary no longer
/// waits on COM1's lock either way.)
///
/// `mov dx, 0x3f8 ; mov al, 'A' ; l: out dx, al ; jmp l`
#[test]
fn a_vcpu_blocked_on_serial_output_still_stops() {
    use std::time::{Duration, Instant};
    if !have_kvm() {
        return;
    }
    let k = bzimage_64(&[0x66, 0xba, 0xf8, 0x03, 0xb0, 0x41, 0xee, 0xeb, 0xfd]);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("serial.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: plain libc calls on a path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    // The reader that never reads (opened first so the VMM's open does not
    // block).
    // SAFETY: as above; the descriptor is closed at the end.
    let reader = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_NONBLOCK) };
    assert!(reader >= 0);
    let tl = dir.path().join("t.json");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("zerostart"))
        .arg("run")
        .arg("--kernel")
        .arg(k.path())
        .args(["--memory", "size=64M"])
        .arg("--serial")
        .arg(format!("file={}", fifo.display()))
        .arg("--timeline")
        .arg(&tl)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Until the guest has filled the pipe (64 KiB, Linux's default), so the
    // vCPU thread is blocked in its write when the stop comes.
    let filled = Instant::now();
    loop {
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD on our own descriptor into a c_int.
        unsafe { libc::ioctl(reader, libc::FIONREAD, &mut queued) };
        if queued >= 65536 {
            break;
        }
        assert!(
            filled.elapsed() < Duration::from_secs(20),
            "the guest did not fill the pipe in 20 s ({queued} bytes)"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // A moment for the next write to block.
    std::thread::sleep(Duration::from_millis(50));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = child.wait_with_output().unwrap();
    // SAFETY: our descriptor.
    unsafe { libc::close(reader) };
    let err = String::from_utf8_lossy(&out.stderr);
    let status = status.unwrap_or_else(|| panic!("zerostart hung after SIGTERM: {err}"));
    assert_eq!(status.code(), Some(143), "{status:?}: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(!err.contains("did not stop in time"), "{err}");
    assert!(
        t0.elapsed() < Duration::from_secs(2),
        "stopping took {:?}: {err}",
        t0.elapsed()
    );
    let j: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&tl).unwrap()).unwrap();
    assert_eq!(j["exit"]["code"], 143);
}

/// `zerostart vmm-argv`: the builder's argv as JSON (file or stdin), as
/// one shell line with --shell, a Firecracker config in `files`, and a
/// bad spec, a missing file or --shell with files as one line each.
#[test]
fn vmm_argv_prints_the_built_command() {
    let spec = r#"{"vmm":"qemu","binary":"/q","cpus":1,"memory":{"backing":"anonymous","size_mib":64},
        "kernel":"/k","cmdline":"console=ttyS0 quiet","serial":"stdio","qemu":{"no_reboot":true}}"#;
    let f = temp_file(spec.as_bytes());
    let out = zerostart()
        .args(["vmm-argv"])
        .arg(f.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["argv"][0], "/q");
    assert_eq!(
        doc["argv"].as_array().unwrap().last().unwrap(),
        "console=ttyS0 quiet"
    );
    assert_eq!(doc["files"], serde_json::json!({}));

    let out = zerostart()
        .args(["vmm-argv", "--shell", "-"])
        .write_stdin(spec)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        "/q -machine q35 -accel kvm -smp 1 -m 64M -nodefaults -no-user-config -display none \
         -no-reboot -serial stdio -kernel /k -append 'console=ttyS0 quiet'\n"
    );

    let fc = r#"{"vmm":"firecracker","binary":"/fc","memory":{"backing":"anonymous","size_mib":64},
        "kernel":"/k","firecracker":{"config_path":"/tmp/x.json"}}"#;
    let out = zerostart()
        .args(["vmm-argv", "-"])
        .write_stdin(fc)
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(doc["files"]["/tmp/x.json"]
        .as_str()
        .unwrap()
        .contains("\"mem_size_mib\":64"));
    let out = zerostart()
        .args(["vmm-argv", "--shell", "-"])
        .write_stdin(fc)
        .output()
        .unwrap();
    assert_one_line_error(&out, &["reads /tmp/x.json", "drop --shell"]);

    let out = zerostart()
        .args(["vmm-argv", "-"])
        .write_stdin(r#"{"vmm":"qemu","binary":"/q"}"#)
        .output()
        .unwrap();
    assert_one_line_error(&out, &["vmm qemu: `memory` is missing; give its size"]);
    let out = zerostart()
        .args(["vmm-argv", "/no/such/spec.json"])
        .output()
        .unwrap();
    assert_one_line_error(&out, &["cannot read /no/such/spec.json", "; give"]);
}
