//! Golden argv of every command the project runs today (the nested
//! host's L2 scripts, the SLO runner), serde round trips and refusals.

use super::*;

fn built(json: &str) -> Built {
    build(&parse(json).unwrap_or_else(|e| panic!("{e}"))).unwrap_or_else(|e| panic!("{e}"))
}

fn argv(json: &str) -> Vec<String> {
    built(json).argv
}

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(str::to_string).collect()
}

fn err(json: &str) -> String {
    match parse(json).and_then(|s| build(&s)) {
        Ok(b) => panic!("built {:?}", b.argv),
        Err(e) => e.to_string(),
    }
}

/// tests/nested-host/scenario.sh, vmm qemu: microvm + qboot on a hugetlb
/// memfd. (Was `-M microvm,x-option-roms=off,rtc=on,memory-backend=ram
/// -bios qboot.rom -enable-kvm`: the same machine, accel spelled -accel.)
#[test]
fn qemu_microvm_as_scenario_sh() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"/qemu/bin/qemu-system-x86_64","cpus":2,
            "memory":{"backing":"memfd-hugetlb","size_mib":1024,"prealloc":true},
            "firmware":"qboot.rom","kernel":"/zs/kernels/patched",
            "initrd":"/zs/l3-initramfs.cpio.gz","cmdline":"console=ttyS0 quiet zsinit.halt=poweroff",
            "serial":{"file":"/tmp/a.serial"},
            "qemu":{"data_dirs":["/qemu/share"],"machine":"microvm","cpu":"host","no_reboot":true}}"#,
    );
    let mut want = words(
        "/qemu/bin/qemu-system-x86_64 -L /qemu/share \
         -machine microvm,x-option-roms=off,rtc=on,memory-backend=ram -accel kvm -cpu host -smp 2 \
         -m 1024M -object memory-backend-memfd,id=ram,size=1024M,hugetlb=on,hugetlbsize=2M,prealloc=on \
         -bios qboot.rom -nodefaults -no-user-config -display none -no-reboot -serial file:/tmp/a.serial \
         -kernel /zs/kernels/patched -initrd /zs/l3-initramfs.cpio.gz -append",
    );
    want.push("console=ttyS0 quiet zsinit.halt=poweroff".into());
    assert_eq!(a, want);
}

/// microvm on SeaBIOS's bios-microvm.bin keeps its option ROMs (the
/// linuxboot_dma ROM starts the kernel) and its virtio-mmio devices.
#[test]
fn qemu_microvm_seabios_keeps_option_roms() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"/qemu/bin/qemu-system-x86_64","cpus":1,
            "memory":{"backing":"anonymous","size_mib":512},
            "firmware":"bios-microvm.bin","kernel":"/k","cmdline":"console=ttyS0",
            "serial":"stdio","vsock":{"cid":5},
            "qemu":{"machine":"microvm-seabios"}}"#,
    );
    let joined = a.join(" ");
    assert!(joined.contains("-machine microvm,rtc=on "), "{joined}");
    assert!(!joined.contains("x-option-roms"), "{joined}");
    assert!(joined.contains("-bios bios-microvm.bin"), "{joined}");
    assert!(joined.contains("vhost-vsock-device"), "{joined}");
}

/// tests/nested-host/scenario.sh, vmm zerostart.
#[test]
fn zerostart_run_as_scenario_sh() {
    let a = argv(
        r#"{"vmm":"zerostart-run","binary":"/zs/zerostart","kernel":"/zs/kernels/patched",
            "initrd":"/zs/l3-initramfs.cpio.gz","cmdline":"console=ttyS0 quiet","cpus":1,
            "memory":{"backing":"zerostart","value":"size=1024M,hugepages=on,prefault=on,hint=on"},
            "serial":{"file":"/tmp/a.serial"},"timeline":"/tmp/a.timeline.json",
            "extra_args":["--verify-hint"]}"#,
    );
    let mut want = words("/zs/zerostart run --kernel /zs/kernels/patched --initramfs /zs/l3-initramfs.cpio.gz --cmdline");
    want.push("console=ttyS0 quiet".into());
    want.extend(words(
        "--cpus boot=1 --memory size=1024M,hugepages=on,prefault=on,hint=on \
         --serial file=/tmp/a.serial --timeline /tmp/a.timeline.json --verify-hint",
    ));
    assert_eq!(a, want);
}

/// l2-pool.sh's stock_mem + l2-demo.sh's stock scenario: QEMU as
/// operators run it (hugetlbfs, prealloc, OVMF). (Was `-machine
/// q35,accel=kvm,memory-backend=ram`.)
#[test]
fn qemu_stock_as_l2_demo() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"/qemu/bin/qemu-system-x86_64","cpus":1,
            "memory":{"backing":"hugetlbfs","size_mib":512,"path":"/dev/hugepages","prealloc":true,"prealloc_threads":2},
            "firmware":"/zs/fw/OVMF.fd","kernel":"/zs/kernels/stock","initrd":"/zs/l3-initramfs.cpio.gz",
            "cmdline":"console=ttyS0","serial":"stdio",
            "qemu":{"data_dirs":["/qemu/share"],"cpu":"host","no_reboot":true,"log":"/tmp/s.qlog"}}"#,
    );
    assert_eq!(
        a,
        words(
            "/qemu/bin/qemu-system-x86_64 -L /qemu/share -machine q35,memory-backend=ram -accel kvm \
             -cpu host -smp 1 -m 512M \
             -object memory-backend-file,id=ram,size=512M,mem-path=/dev/hugepages,share=on,prealloc=on,prealloc-threads=2 \
             -bios /zs/fw/OVMF.fd -nodefaults -no-user-config -display none -no-reboot -serial stdio \
             -d cpu_reset,guest_errors -trace qemu_system_shutdown_request -D /tmp/s.qlog \
             -kernel /zs/kernels/stock -initrd /zs/l3-initramfs.cpio.gz -append console=ttyS0"
        )
    );
}

/// l2-launch.sh's QEMU scenario: the launcher on pool memory, OVMF, the
/// debug console and QEMU's log. (Was `-machine q35,accel=kvm`.)
#[test]
fn launch_qemu_as_l2_launch() {
    let a = argv(
        r#"{"vmm":"zerostart-launch","binary":"/zs/zerostart",
            "memory":{"backing":"zerostart","value":"size=1024M,source=pool:/tmp/pool.sock"},
            "firmware":"/zs/fw/OVMF.fd","timeline":"/tmp/l.tl.json","extra_args":["--verify"],
            "launch":{"vmm":"qemu","binary":"/qemu/bin/qemu-system-x86_64","cpus":1,
              "kernel":"/zs/kernels/patched","initrd":"/zs/l3-initramfs.cpio.gz","cmdline":"console=ttyS0",
              "serial":"stdio",
              "qemu":{"data_dirs":["/qemu/share"],"cpu":"host","no_reboot":true,"debugcon":"/tmp/l.fw","log":"/tmp/l.qlog"}}}"#,
    );
    assert_eq!(
        a,
        words(
            "/zs/zerostart launch --vmm qemu --vmm-binary /qemu/bin/qemu-system-x86_64 \
             --memory size=1024M,source=pool:/tmp/pool.sock --firmware /zs/fw/OVMF.fd \
             --timeline /tmp/l.tl.json --verify -- \
             -L /qemu/share -machine q35 -accel kvm -cpu host -smp 1 -nodefaults -no-user-config \
             -display none -no-reboot -serial stdio -debugcon file:/tmp/l.fw -global isa-debugcon.iobase=0x402 \
             -d cpu_reset,guest_errors -trace qemu_system_shutdown_request -D /tmp/l.qlog \
             -kernel /zs/kernels/patched -initrd /zs/l3-initramfs.cpio.gz -append console=ttyS0"
        )
    );
}

/// l2-launch.sh's cloud-hypervisor scenarios: firmware + UKI disk, and
/// the direct boot. The same order docs/launch.md gives operators.
#[test]
fn launch_chv_as_l2_launch() {
    let a = argv(
        r#"{"vmm":"zerostart-launch","binary":"/zs/zerostart",
            "memory":{"backing":"zerostart","value":"size=512M,source=pool:/tmp/pool.sock"},
            "firmware":"/zs/fw/CLOUDHV.fd","timeline":"/tmp/c.tl.json",
            "launch":{"vmm":"cloud-hypervisor","binary":"/zs/cloud-hypervisor","cpus":1,
              "disks":[{"path":"/zs/esp/c.img","readonly":true}],"serial":"tty"}}"#,
    );
    assert_eq!(
        a,
        words(
            "/zs/zerostart launch --vmm cloud-hypervisor --vmm-binary /zs/cloud-hypervisor \
             --memory size=512M,source=pool:/tmp/pool.sock --firmware /zs/fw/CLOUDHV.fd \
             --timeline /tmp/c.tl.json -- --cpus boot=1 --disk path=/zs/esp/c.img,readonly=on \
             --serial tty --console off"
        )
    );
    let a = argv(
        r#"{"vmm":"zerostart-launch","binary":"/zs/zerostart",
            "memory":{"backing":"zerostart","value":"size=512M,source=prefault"},
            "timeline":"/tmp/d.tl.json",
            "launch":{"vmm":"cloud-hypervisor","binary":"/zs/cloud-hypervisor","cpus":1,
              "kernel":"/zs/kernels/patched","initrd":"/zs/l3-initramfs.cpio.gz","cmdline":"console=ttyS0 quiet",
              "serial":"tty"}}"#,
    );
    let mut want = words(
        "/zs/zerostart launch --vmm cloud-hypervisor --vmm-binary /zs/cloud-hypervisor \
         --memory size=512M,source=prefault --timeline /tmp/d.tl.json -- --cpus boot=1 \
         --kernel /zs/kernels/patched --initramfs /zs/l3-initramfs.cpio.gz --cmdline",
    );
    want.push("console=ttyS0 quiet".into());
    want.extend(words("--serial tty --console off"));
    assert_eq!(a, want);
}

/// l2-launch.sh's Firecracker scenario: the config file's document and
/// `--config-file` after the launcher's `--`.
#[test]
fn launch_firecracker_as_l2_launch() {
    let b = built(
        r#"{"vmm":"zerostart-launch","binary":"/zs/zerostart",
            "memory":{"backing":"zerostart","value":"size=256M,source=none"},"timeline":"/tmp/f.tl.json",
            "launch":{"vmm":"firecracker","binary":"/zs/firecracker","cpus":1,
              "memory":{"backing":"anonymous","size_mib":256},
              "kernel":"/zs/kernels/patched.vmlinux","initrd":"/zs/l3-initramfs.cpio.gz",
              "cmdline":"console=ttyS0 \"q\"","firecracker":{"config_path":"/tmp/f.fc.json"}}}"#,
    );
    assert_eq!(
        b.argv,
        words(
            "/zs/zerostart launch --vmm firecracker --vmm-binary /zs/firecracker \
             --memory size=256M,source=none --timeline /tmp/f.tl.json -- --config-file /tmp/f.fc.json"
        )
    );
    let doc: serde_json::Value = serde_json::from_str(&b.files["/tmp/f.fc.json"]).unwrap();
    assert_eq!(
        doc,
        serde_json::json!({"boot-source": {"kernel_image_path": "/zs/kernels/patched.vmlinux",
            "initrd_path": "/zs/l3-initramfs.cpio.gz", "boot_args": "console=ttyS0 \"q\""},
            "drives": [], "machine-config": {"vcpu_count": 1, "mem_size_mib": 256}})
    );
    assert_eq!(b.files.len(), 1);
}

/// l2-microvm.sh's three ways: the devices in each one's own syntax.
/// (Stock QEMU's disk was `-drive file=,if=virtio,format=raw,cache=none`
/// and its netdev id `n0`: now the launcher's spelling, the same
/// virtio-blk-pci and virtio-net-pci devices in the same order.)
#[test]
fn microvm_devices_each_way() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"q","cpus":1,
            "memory":{"backing":"hugetlbfs","size_mib":2048,"path":"/dev/hugepages","prealloc":true,"prealloc_threads":2},
            "firmware":"OVMF.fd","kernel":"k","initrd":"i","cmdline":"c","serial":"stdio",
            "disks":[{"path":"/dev/vdc"}],"nets":[{"tap":"zstap2","mac":"52:54:00:77:00:03","vhost":true}],
            "vsock":{"cid":5},"qemu":{"cpu":"host","no_reboot":true}}"#,
    );
    let dev = a.iter().position(|x| x == "-drive").unwrap();
    assert_eq!(
        a[dev - 4..],
        words(
            "-kernel k -initrd i -drive file=/dev/vdc,format=raw,if=none,id=zs-disk0,cache=none \
             -device virtio-blk-pci,drive=zs-disk0 \
             -netdev tap,id=zs-net0,ifname=zstap2,script=no,downscript=no,vhost=on \
             -device virtio-net-pci,netdev=zs-net0,mac=52:54:00:77:00:03,romfile= \
             -device vhost-vsock-pci,guest-cid=5 -append c"
        )[..]
    );
    let dev = r#""disks":[{"path":"/dev/vda"}],"nets":[{"tap":"zstap0","mac":"52:54:00:77:00:01"}],"vsock":{"cid":3}"#;
    let a = argv(&format!(
        r#"{{"vmm":"zerostart-run","binary":"z","kernel":"k","cmdline":"c","cpus":1,
            "memory":{{"backing":"zerostart","value":"size=2048M,hugepages=on,hugepage_size=2M,prezero=pool:/tmp/pool.sock"}},
            "serial":"tty","timeline":"t",{dev}}}"#
    ));
    assert_eq!(
        a,
        words(
            "z run --kernel k --cmdline c --cpus boot=1 \
             --memory size=2048M,hugepages=on,hugepage_size=2M,prezero=pool:/tmp/pool.sock \
             --serial tty --timeline t --disk path=/dev/vda --net tap=zstap0,mac=52:54:00:77:00:01 --vsock cid=3"
        )
    );
    let a = argv(&format!(
        r#"{{"vmm":"zerostart-launch","binary":"z",
            "memory":{{"backing":"zerostart","value":"size=2048M,source=pool:/tmp/pool.sock"}},
            "firmware":"OVMF.fd","timeline":"t",{dev},
            "launch":{{"vmm":"qemu","binary":"q","cpus":1,"kernel":"k","cmdline":"c","serial":"stdio",
              "qemu":{{"data_dirs":["/qemu/share"],"cpu":"host","no_reboot":true}}}}}}"#
    ));
    assert_eq!(
        a,
        words(
            "z launch --vmm qemu --vmm-binary q --memory size=2048M,source=pool:/tmp/pool.sock \
             --firmware OVMF.fd --timeline t --disk path=/dev/vda --net tap=zstap0,mac=52:54:00:77:00:01 \
             --vsock cid=3 -- -L /qemu/share -machine q35 -accel kvm -cpu host -smp 1 -nodefaults \
             -no-user-config -display none -no-reboot -serial stdio -kernel k -append c"
        )
    );
}

/// l2-pool.sh's stock_memory_ready: the same memory, no guest, -S and
/// the monitor on stdio.
#[test]
fn qemu_memory_ready_probe() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"q",
            "memory":{"backing":"hugetlbfs","size_mib":512,"path":"/dev/hugepages","prealloc":true,"prealloc_threads":2},
            "qemu":{"data_dirs":["/qemu/share"],"monitor":"stdio"},"extra_args":["-S"]}"#,
    );
    assert_eq!(
        a,
        words(
            "q -L /qemu/share -machine q35,memory-backend=ram -accel kvm -m 512M \
             -object memory-backend-file,id=ram,size=512M,mem-path=/dev/hugepages,share=on,prealloc=on,prealloc-threads=2 \
             -nodefaults -no-user-config -display none -monitor stdio -S"
        )
    );
}

/// The SLO runner's direct QEMU on TCG, anonymous memory preallocated.
#[test]
fn qemu_pc_tcg() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"q","cpus":2,"memory":{"backing":"anonymous","size_mib":256,"prealloc":true},
            "kernel":"k","cmdline":"c","serial":"stdio","qemu":{"machine":"pc","accel":"tcg","cpu":"max","no_reboot":true}}"#,
    );
    assert_eq!(
        a,
        words(
            "q -machine pc -accel tcg,thread=multi -cpu max -smp 2 -m 256M -mem-prealloc -nodefaults \
             -no-user-config -display none -no-reboot -serial stdio -kernel k -append c"
        )
    );
}

/// The SLO runner's direct cloud-hypervisor and Firecracker.
#[test]
fn chv_and_firecracker_direct() {
    let a = argv(
        r#"{"vmm":"cloud-hypervisor","binary":"ch","cpus":2,
            "memory":{"backing":"memfd-hugetlb","size_mib":512,"prealloc":true},
            "kernel":"k","initrd":"i","cmdline":"c","serial":"tty"}"#,
    );
    assert_eq!(
        a,
        words(
            "ch --cpus boot=2 --memory size=512M,hugepages=on,prefault=on --kernel k --initramfs i \
             --cmdline c --serial tty --console off"
        )
    );
    let b = built(
        r#"{"vmm":"firecracker","binary":"fc","cpus":2,"memory":{"backing":"memfd-hugetlb","size_mib":512},
            "kernel":"k","cmdline":"c","firecracker":{"config_path":"w/fc.json","no_api":true}}"#,
    );
    assert_eq!(b.argv, words("fc --no-api --config-file w/fc.json"));
    assert_eq!(
        b.files["w/fc.json"],
        r#"{"boot-source":{"kernel_image_path":"k","boot_args":"c"},"drives":[],"machine-config":{"vcpu_count":2,"mem_size_mib":512,"huge_pages":"2M"}}"#
    );
}

/// A spec survives JSON both ways, the launcher's VMM inside included.
#[test]
fn serde_round_trip() {
    let text = r#"{"vmm":"zerostart-launch","binary":"/zs/zerostart",
        "memory":{"backing":"zerostart","value":"size=1G,source=pool"},"firmware":"OVMF.fd",
        "disks":[{"path":"d","readonly":true}],"nets":[{"tap":"t","mac":"0a:5a:53:00:00:01","vhost":false}],
        "vsock":{"cid":4,"socket":"/v"},"timeline":"t.json","extra_args":["--verify"],
        "launch":{"vmm":"qemu","binary":"q","cpus":1,"kernel":"k","serial":{"file":"s"},
          "qemu":{"data_dirs":["/qemu/share","/d2"],"machine":"pc","accel":"tcg","tcg_thread":"single",
            "display":"nographic","monitor":{"unix":"/m.sock"},"cpu":"max","no_reboot":true,
            "debugcon":"fw","log":"l","fw_cfg":[{"name":"opt/x","file":"/x"}],"oem_strings":["a=b"],
            "loaders":[{"file":"/b","addr":4096}]}}}"#;
    let s = parse(text).unwrap();
    let again = parse(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(s, again);
    assert_eq!(s.launch.as_ref().unwrap().serial, Serial::File("s".into()));
    let b = build(&s).unwrap();
    let b2: Built = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
    assert_eq!(b, b2);
}

/// Every refusal is one line, "problem; fix", and names the field.
#[test]
fn bad_specs_say_what_to_change() {
    let cases: &[(&str, &str)] = &[
        (r#"{"vmm":"qemu"#, "vmm spec: EOF"),
        (r#"{"vmm":"bochs","binary":"b"}"#, "unknown variant `bochs`"),
        (r#"{"vmm":"qemu","binary":"q","colour":"red"}"#, "unknown field `colour`"),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1,"hugetlb":true}}"#,
            "unknown field `hugetlb`",
        ),
        (r#"{"vmm":"qemu","memory":{"backing":"anonymous","size_mib":1}}"#, "vmm qemu: `binary` is missing; give the program's path"),
        (r#"{"vmm":"qemu","binary":"q"}"#, "vmm qemu: `memory` is missing; give its size and backing"),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"serial":"tty"}"#,
            "vmm qemu: `serial` tty is not a QEMU serial backend; use \"stdio\"",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"nets":[{"tap":"t"}]}"#,
            "vmm qemu: `nets[].vhost` is missing; say true",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"nets":[{"tap":"t","mac":"01:00:00:00:00:00","vhost":true}]}"#,
            "vmm qemu: `nets[].mac` '01:00:00:00:00:00' is not a MAC; --net: mac=",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"disks":[{"path":"a,b"}]}"#,
            "vmm qemu: `devices` --disk path=a,b: QEMU's -drive cannot take a comma in a file name; rename the image",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"cmdline":"c"}"#,
            "vmm qemu: `cmdline` does not apply; remove it (-append needs a direct kernel boot",
        ),
        (
            r#"{"vmm":"cloud-hypervisor","binary":"c","memory":{"backing":"anonymous","size_mib":1},"qemu":{}}"#,
            "vmm cloud-hypervisor: `qemu` does not apply",
        ),
        (
            r#"{"vmm":"zerostart-run","binary":"z","memory":{"backing":"zerostart","value":"size=1G,colour=red"}}"#,
            "vmm zerostart-run: `memory.value` 'size=1G,colour=red' is not zerostart run's --memory; --memory: unknown key 'colour'",
        ),
        (
            r#"{"vmm":"zerostart-launch","binary":"z","memory":{"backing":"zerostart","value":"size=1G"}}"#,
            "vmm zerostart-launch: `launch` is missing; give the spec of the VMM",
        ),
        (
            r#"{"vmm":"zerostart-launch","binary":"z","memory":{"backing":"zerostart","value":"size=1G"},
                "launch":{"vmm":"qemu","memory":{"backing":"anonymous","size_mib":1}}}"#,
            "vmm qemu: `memory` backing anonymous is not one this VMM takes; give backing none: the launcher supplies",
        ),
        (
            r#"{"vmm":"zerostart-launch","binary":"z","memory":{"backing":"zerostart","value":"size=1G"},
                "launch":{"vmm":"zerostart-run"}}"#,
            "vmm zerostart-launch: `launch.vmm` is zerostart-run; the launcher starts qemu",
        ),
        (
            r#"{"vmm":"firecracker","binary":"f","memory":{"backing":"anonymous","size_mib":1},"kernel":"k"}"#,
            "vmm firecracker: `firecracker` is missing; give {\"config_path\": PATH}",
        ),
        (
            r#"{"vmm":"cloud-hypervisor","binary":"c","memory":{"backing":"anonymous","size_mib":1},"nets":[{"tap":"t","vhost":true}]}"#,
            "cloud-hypervisor moves tap frames in user space (its vhost is vhost-user, another backend); use vhost=off",
        ),
    ];
    for (json, want) in cases {
        let e = err(json);
        assert!(e.contains(want), "{json}\n  got: {e}\n want: {want}");
        assert!(!e.contains('\n'), "{e}");
        assert!(e.contains("; "), "no fix in: {e}");
    }
}

/// A word the shell would split or expand is single-quoted, a plain one
/// left bare, and a quote inside survives.
#[test]
fn shell_line_quotes_what_the_shell_reads() {
    assert_eq!(
        shell_line(&[
            "q",
            "-append",
            "a b",
            "it's",
            "",
            "x=$y",
            "tap,id=n0,romfile="
        ]),
        r#"q -append 'a b' 'it'\''s' '' 'x=$y' tap,id=n0,romfile="#
    );
}

/// microvm has no PCI bus: the same devices on virtio-mmio.
#[test]
fn microvm_devices_are_virtio_mmio() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"q","cpus":1,
            "memory":{"backing":"memfd-hugetlb","size_mib":1024,"prealloc":true},
            "kernel":"k","cmdline":"c","serial":"stdio",
            "disks":[{"path":"/dev/vdc","readonly":true}],"nets":[{"tap":"t0","mac":"52:54:00:77:00:03","vhost":false}],
            "vsock":{"cid":5},"qemu":{"machine":"microvm"}}"#,
    );
    let dev = a.iter().position(|x| x == "-drive").unwrap();
    assert_eq!(
        a[dev..],
        words(
            "-drive file=/dev/vdc,format=raw,if=none,id=zs-disk0,cache=none,readonly=on \
             -device virtio-blk-device,drive=zs-disk0 \
             -netdev tap,id=zs-net0,ifname=t0,script=no,downscript=no,vhost=off \
             -device virtio-net-device,netdev=zs-net0,mac=52:54:00:77:00:03 \
             -device vhost-vsock-device,guest-cid=5 -append c"
        )[..]
    );
}

/// tests/zstest/qemu.py l2_command: the nested host L2 on multi-threaded
/// TCG, two `-L` dirs in their order, the monitor on a unix socket, the
/// end log, the microvm harness's rootfs drives (snapshot, writeback).
/// (Was `-drive file=,if=virtio,format=raw,snapshot=on`: the same
/// virtio-blk-pci device, QEMU's default cache said.)
#[test]
fn qemu_l2_as_l2_command() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"/b/qemu-system-x86_64","cpus":2,
            "memory":{"backing":"anonymous","size_mib":4096,"prealloc":true},
            "kernel":"/v","initrd":"/i","cmdline":"console=ttyS0 panic=-1","serial":"stdio",
            "disks":[{"path":"/r/rootfs.ext4","snapshot":true,"cache":"writeback"},
                     {"path":"/r/rootfs.ext4","snapshot":true,"cache":"writeback"}],
            "qemu":{"data_dirs":["/d1","/d2"],"machine":"pc","accel":"tcg","cpu":"EPYC,+svm",
              "no_reboot":true,"monitor":{"unix":"/t/monitor.sock"},"end_log":"/t/l2-qemu.log"}}"#,
    );
    let mut want = words(
        "/b/qemu-system-x86_64 -L /d1 -L /d2 -machine pc -accel tcg,thread=multi -cpu EPYC,+svm -smp 2 \
         -m 4096M -mem-prealloc -nodefaults -no-user-config -display none -no-reboot -serial stdio \
         -monitor unix:/t/monitor.sock,server=on,wait=off \
         -d cpu_reset -trace qemu_system_shutdown_request -D /t/l2-qemu.log -kernel /v -initrd /i \
         -drive file=/r/rootfs.ext4,format=raw,if=none,id=zs-disk0,cache=writeback,snapshot=on \
         -device virtio-blk-pci,drive=zs-disk0 \
         -drive file=/r/rootfs.ext4,format=raw,if=none,id=zs-disk1,cache=writeback,snapshot=on \
         -device virtio-blk-pci,drive=zs-disk1 -append",
    );
    want.push("console=ttyS0 panic=-1".into());
    assert_eq!(a, want);
    let a = argv(
        r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":64},
            "qemu":{"accel":"tcg","tcg_thread":"single","monitor":"none"}}"#,
    );
    assert_eq!(
        a,
        words(
            "q -machine q35 -accel tcg,thread=single -m 64M -nodefaults -no-user-config -display none \
             -monitor none"
        )
    );
}

/// tests/zstest/qemu.py kernel_command: the guest kernel tests' one-shot
/// TCG boot, -nographic as they always ran, a scratch disk and the
/// loader plants (the hint blob, a byte pattern) after it. (Was no
/// -machine, QEMU's default pc, `-m N` in MiB, the disk as `-drive
/// if=virtio`, which QEMU created after the loaders: another order of
/// devices that are not on one bus.)
#[test]
fn qemu_kernel_test_boot() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"qemu-system-x86_64","cpus":2,
            "memory":{"backing":"anonymous","size_mib":2048},"kernel":"/k/bzImage","initrd":"/i",
            "cmdline":"console=ttyS0 panic=-1 quiet","serial":"stdio",
            "qemu":{"machine":"pc","accel":"tcg","tcg_thread":"single","cpu":"max","display":"nographic",
              "no_reboot":true,"end_log":"/w/boot.log.qemu.log",
              "loaders":[{"file":"/b","addr":134217728},{"file":"/p","addr":1073741824}]},
            "disks":[{"path":"/w/flag","cache":"writeback"}],
            "extra_args":["-netdev","user,id=n0"]}"#,
    );
    let mut want = words(
        "qemu-system-x86_64 -machine pc -accel tcg,thread=single -cpu max -smp 2 -m 2048M \
         -nodefaults -no-user-config -nographic -no-reboot -serial stdio \
         -d cpu_reset -trace qemu_system_shutdown_request -D /w/boot.log.qemu.log \
         -kernel /k/bzImage -initrd /i \
         -drive file=/w/flag,format=raw,if=none,id=zs-disk0,cache=writeback \
         -device virtio-blk-pci,drive=zs-disk0 \
         -device loader,file=/b,addr=134217728,force-raw=on \
         -device loader,file=/p,addr=1073741824,force-raw=on -append",
    );
    want.push("console=ttyS0 panic=-1 quiet".into());
    want.extend(words("-netdev user,id=n0"));
    assert_eq!(a, want);
}

/// tests/kernel/cases.py efi: zerostart's OVMF on q35, the hint in fw_cfg,
/// the firmware's debug console into a file.
#[test]
fn qemu_kernel_test_efi_boot() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"q","cpus":2,"memory":{"backing":"anonymous","size_mib":1024},
            "firmware":"/fw/OVMF.fd","kernel":"/k","cmdline":"c","serial":"stdio",
            "qemu":{"accel":"tcg","cpu":"max","display":"nographic","no_reboot":true,
              "debugcon":"/w/boot-efi.fw.log",
              "fw_cfg":[{"name":"opt/org.zerostart/prezeroed","file":"/w/efi.hint"}]}}"#,
    );
    assert_eq!(
        a,
        words(
            "q -machine q35 -accel tcg,thread=multi -cpu max -smp 2 -m 1024M -bios /fw/OVMF.fd \
             -nodefaults -no-user-config -nographic -no-reboot -serial stdio \
             -debugcon file:/w/boot-efi.fw.log -global isa-debugcon.iobase=0x402 \
             -fw_cfg name=opt/org.zerostart/prezeroed,file=/w/efi.hint -kernel /k -append c"
        )
    );
}

/// tests/kernel/cases.py `ipxe`: SeaBIOS boots iPXE from the virtio-net
/// NIC's option ROM, which fetches the kernel over QEMU's TFTP: no
/// `-kernel`, the boot script names kernel, initrd and command line.
#[test]
fn qemu_network_boot() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"q","cpus":2,"memory":{"backing":"anonymous","size_mib":2048},
            "serial":"stdio","qemu":{"machine":"pc","accel":"tcg","tcg_thread":"single","cpu":"max",
            "display":"nographic","no_reboot":true,
            "net_boot":{"tftp_dir":"/w/ipxe","bootfile":"boot.ipxe"}}}"#,
    );
    assert_eq!(
        a,
        words(
            "q -machine pc -accel tcg,thread=single -cpu max -smp 2 -m 2048M -nodefaults -no-user-config \
             -nographic -no-reboot -serial stdio \
             -nic user,model=virtio-net-pci,tftp=/w/ipxe,bootfile=boot.ipxe -boot order=n"
        )
    );
}

/// tests/firmware/qemu/run_tests.py: OVMF booting ZeroStartDump.efi from a
/// FAT directory, RAM a private copy of a pattern file, the hint in
/// fw_cfg and its text form in SMBIOS OEM strings (a comma doubled, QEMU's
/// escape). (Was the ESP as `if=none,id=esp,...,file=fat:DIR` and the RAM
/// backend's id ram0: other ids, the same devices.)
#[test]
fn qemu_firmware_test_boot() {
    let a = argv(
        r#"{"vmm":"qemu","binary":"q","cpus":2,
            "memory":{"backing":"file","size_mib":1024,"path":"/w/ram.img"},
            "firmware":"/fw/OVMF.fd","serial":{"file":"/w/serial.log"},
            "disks":[{"path":"/w/esp","readonly":true,"fat_dir":true,"cache":"writeback"}],
            "qemu":{"accel":"tcg","cpu":"max","no_reboot":true,"debugcon":"/w/debug.log",
              "fw_cfg":[{"name":"opt/org.zerostart/test/reboot","file":"/w/reboot.flag"},
                        {"name":"opt/org.zerostart/prezeroed","file":"/w/hint.bin"}],
              "oem_strings":["prezero.hint=AAA","a,b"]}}"#,
    );
    assert_eq!(
        a,
        words(
            "q -machine q35,memory-backend=ram -accel tcg,thread=multi -cpu max -smp 2 -m 1024M \
             -object memory-backend-file,id=ram,size=1024M,mem-path=/w/ram.img,share=off,prealloc=off \
             -bios /fw/OVMF.fd -nodefaults -no-user-config -display none -no-reboot \
             -serial file:/w/serial.log -debugcon file:/w/debug.log -global isa-debugcon.iobase=0x402 \
             -fw_cfg name=opt/org.zerostart/test/reboot,file=/w/reboot.flag \
             -fw_cfg name=opt/org.zerostart/prezeroed,file=/w/hint.bin \
             -smbios type=11,value=prezero.hint=AAA -smbios type=11,value=a,,b \
             -drive file=fat:/w/esp,format=raw,if=none,id=zs-disk0,cache=writeback,readonly=on \
             -device virtio-blk-pci,drive=zs-disk0"
        )
    );
}

/// The new QEMU options are refused where they cannot mean anything,
/// each with its fix.
#[test]
fn new_qemu_options_refused_where_meaningless() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"qemu":{"tcg_thread":"single"}}"#,
            "vmm qemu: `qemu.tcg_thread` does not apply; remove it (a thread mode is TCG's",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"qemu":{"log":"a","end_log":"b"}}"#,
            "vmm qemu: `qemu.end_log` does not apply; remove it (QEMU has one log file",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"disks":[{"path":"/esp","fat_dir":true}]}"#,
            "vmm qemu: `devices` --disk path=/esp: a FAT directory (vvfat) has no O_DIRECT; give it cache writeback",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"qemu":{"fw_cfg":[{"name":"opt/a,b","file":"f"}]}}"#,
            "vmm qemu: `qemu.fw_cfg` name=opt/a,b,file=f holds a comma",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"qemu":{"loaders":[{"file":"a,b","addr":0}]}}"#,
            "vmm qemu: `qemu.loaders` file=a,b holds a comma",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"kernel":"k","qemu":{"net_boot":{"tftp_dir":"/t","bootfile":"b"}}}"#,
            "vmm qemu: `qemu.net_boot` a network boot loads its kernel itself, and `kernel` is given too; leave out `kernel`",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"qemu":{"net_boot":{"tftp_dir":"/a,b","bootfile":"b"}}}"#,
            "vmm qemu: `qemu.net_boot` tftp=/a,b,bootfile=b holds a comma",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"qemu":{"loaders":[{"file":"a","addr":-1}]}}"#,
            "invalid value: integer `-1`",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"file","size_mib":1,"path":"a,b"}}"#,
            "vmm qemu: `memory.path` 'a,b' holds a comma",
        ),
        (
            r#"{"vmm":"zerostart-run","binary":"z","memory":{"backing":"zerostart","value":"size=1G"},"disks":[{"path":"d","snapshot":true}]}"#,
            "vmm zerostart-run: `disks[].snapshot/cache/fat_dir` does not apply",
        ),
        (
            r#"{"vmm":"cloud-hypervisor","binary":"c","memory":{"backing":"anonymous","size_mib":1},"disks":[{"path":"d","cache":"writeback"}]}"#,
            "vmm cloud-hypervisor: `disks[].snapshot/cache/fat_dir` does not apply",
        ),
        (
            r#"{"vmm":"cloud-hypervisor","binary":"c","memory":{"backing":"file","size_mib":1,"path":"f"}}"#,
            "vmm cloud-hypervisor: `memory` backing file is not one this VMM takes",
        ),
        (
            r#"{"vmm":"qemu","binary":"q","memory":{"backing":"anonymous","size_mib":1},"qemu":{"monitor":"tty"}}"#,
            "unknown variant `tty`",
        ),
    ];
    for (json, want) in cases {
        let e = err(json);
        assert!(e.contains(want), "{json}\n  got: {e}\n want: {want}");
        assert!(!e.contains('\n'), "{e}");
    }
}
