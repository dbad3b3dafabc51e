//! End-to-end: boot the real probe bzImage on /dev/kvm and provoke every
//! verdict on purpose. Needs the image (make probe builds it;
//! `PROBE_BZIMAGE` overrides the path) and /dev/kvm.

use std::path::PathBuf;
use std::time::Duration;

use boottimer::marker::{INIT_STARTED, KERNEL_STARTED, TEST_DONE};
use probe_runner::{layout, Boot, Exit, Hint, Outcome};
use zerohint::Entry;

const MIB: u64 = 1 << 20;

fn kernel() -> PathBuf {
    let path = std::env::var_os("PROBE_BZIMAGE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../target/probe/probe.bzImage")
        });
    assert!(
        path.exists(),
        "{} missing: build the probe first with make probe",
        path.display()
    );
    path
}

/// Runs `b` and checks what every run must show: exactly one verdict line,
/// an i8042 reset, `kernel_started` first and `test_done` last.
fn run(b: &Boot) -> Outcome {
    let o = b.run(&kernel()).expect("runner setup");
    assert_eq!(o.exit, Exit::Reset, "serial:\n{}", o.serial);
    assert!(
        o.verdict().is_some(),
        "not exactly one verdict:\n{}",
        o.serial
    );
    assert_eq!(
        o.markers.first().map(|m| m.0),
        Some(KERNEL_STARTED),
        "{:?}",
        o.markers
    );
    assert_eq!(
        o.markers.last().map(|m| m.0),
        Some(TEST_DONE),
        "{:?}",
        o.markers
    );
    o
}

fn verdict(b: &Boot) -> String {
    run(b).verdict().unwrap().to_string()
}

fn small() -> Boot {
    Boot::new(64 * MIB)
}

#[test]
fn correct_hint_passes_and_every_byte_is_counted() {
    let o = run(&small());
    let total: u64 = o.hint_entries.iter().map(|e| e.length).sum();
    assert_eq!(o.hint_entries.len(), 2);
    assert_eq!(
        o.verdict().unwrap(),
        format!("ZSPROBE: PASS hint=valid ranges=2 hinted_bytes={total} zero_bytes={total} nonzero_bytes=0 e820=4")
    );
    let ids: Vec<u16> = o.markers.iter().map(|m| m.0).collect();
    assert_eq!(ids, vec![KERNEL_STARTED, 0x100, INIT_STARTED, TEST_DONE]);
    assert!(o.serial.starts_with("ZSPROBE: start\n"), "{}", o.serial);
    assert!(o.serial.contains("ZSPROBE: cmdline=console=ttyS0\n"));
}

#[test]
fn absent_hint_passes_and_expectations_are_checked() {
    let mut b = small();
    b.hint = Hint::Absent;
    assert_eq!(verdict(&b), "ZSPROBE: PASS hint=absent e820=4");
    b.cmdline = "console=ttyS0 zsprobe.expect=valid".into();
    assert_eq!(
        verdict(&b),
        "ZSPROBE: FAIL reason=expect_mismatch expected=valid found=absent"
    );
    let mut b = small();
    b.cmdline = "zsprobe.expect=absent".into();
    assert_eq!(
        verdict(&b),
        "ZSPROBE: FAIL reason=expect_mismatch expected=absent found=valid"
    );
    b.cmdline = "zsprobe.expect=valid".into();
    assert!(verdict(&b).starts_with("ZSPROBE: PASS hint=valid"));
}

#[test]
fn corrupted_hint_is_rejected_by_name() {
    let mut b = small();
    b.corrupt_checksum = true;
    assert_eq!(verdict(&b), "ZSPROBE: FAIL hint=invalid error=BadChecksum");
    let mut b = small();
    b.hint = Hint::Raw(b"ZSHINT01 but nothing else".to_vec());
    assert_eq!(verdict(&b), "ZSPROBE: FAIL hint=invalid error=Truncated");
}

#[test]
fn any_nonzero_hinted_byte_fails_with_its_address() {
    let last = 64 * MIB - 1;
    for gpa in [
        layout::LOW_WRITTEN_END,
        0x9_efff,
        0x20_0000,
        0x2a_bcde,
        last,
    ] {
        let mut b = small();
        b.pokes.push((gpa, vec![0x01]));
        let v = verdict(&b);
        assert!(
            v.starts_with(&format!(
                "ZSPROBE: FAIL hint=valid nonzero_bytes=1 first_nonzero={gpa:#x} "
            )),
            "{gpa:#x}: {v}"
        );
    }
    let mut b = small();
    b.pokes = vec![(0x30_0000, vec![1, 0, 2]), (0x28_0000, vec![0xff; 5])];
    let v = verdict(&b);
    assert!(
        v.starts_with("ZSPROBE: FAIL hint=valid nonzero_bytes=7 first_nonzero=0x280000 "),
        "{v}"
    );
}

#[test]
fn nonzero_bytes_outside_the_hint_do_not_matter() {
    let mut b = small();
    // Between the probe's init_size window and the 2 MiB-aligned hint start.
    b.pokes.push((0x1f_f000, vec![0xee; 16]));
    assert!(verdict(&b).starts_with("ZSPROBE: PASS hint=valid"));
}

#[test]
fn hint_over_memory_the_vmm_wrote_is_caught() {
    // The VMM's own page tables: the probe cannot know they were written,
    // but they are not zero.
    let mut b = small();
    b.hint = Hint::Entries(vec![Entry::zeroed(layout::PML4, 0x1000, 12)]);
    let v = verdict(&b);
    assert!(
        v.starts_with("ZSPROBE: FAIL hint=valid nonzero_bytes=")
            && v.contains(&format!("first_nonzero={:#x}", layout::PML4)),
        "{v}"
    );
    // Areas the probe knows about are refused before the scan.
    for (start, area) in [
        (layout::BOOT_PARAMS, "boot_params"),
        (layout::SETUP_DATA, "setup_data"),
        (layout::CMDLINE, "cmdline"),
        (0x10_0000, "probe_image"),
    ] {
        let mut b = small();
        b.hint = Hint::Entries(vec![Entry::zeroed(start, 0x1000, 12)]);
        assert_eq!(
            verdict(&b),
            format!("ZSPROBE: FAIL reason=hint_overlaps_written index=0 area={area} area_start={start:#x}")
        );
    }
}

#[test]
fn hint_over_the_probe_bss_is_caught() {
    // The bss and stacks lie past the loaded file but inside init_size.
    let o = run(&small());
    let last_page = o.load_addr + o.init_size - 0x1000;
    let mut b = small();
    b.hint = Hint::Entries(vec![Entry::zeroed(last_page, 0x1000, 12)]);
    assert_eq!(
        verdict(&b),
        format!(
            "ZSPROBE: FAIL reason=hint_overlaps_written index=0 area=probe_image area_start={:#x}",
            o.load_addr
        )
    );
}

#[test]
fn hint_outside_ram_is_invalid() {
    let mut b = small();
    b.hint = Hint::Entries(vec![
        Entry::zeroed(0x3_0000, 0x1000, 12),
        Entry::zeroed(0xa_0000, 0x1000, 12),
    ]);
    assert_eq!(
        verdict(&b),
        "ZSPROBE: FAIL hint=invalid error=OutOfRam index=1"
    );
    let mut b = small();
    b.hint = Hint::Entries(vec![Entry::zeroed(64 * MIB - 0x1000, 0x2000, 12)]);
    assert_eq!(
        verdict(&b),
        "ZSPROBE: FAIL hint=invalid error=OutOfRam index=0"
    );
}

#[test]
fn unsorted_hint_is_invalid() {
    let mut b = small();
    b.hint = Hint::Entries(vec![
        Entry::zeroed(0x40_0000, 0x1000, 12),
        Entry::zeroed(0x30_0000, 0x1000, 12),
    ]);
    assert_eq!(
        verdict(&b),
        "ZSPROBE: FAIL hint=invalid error=Unsorted index=1"
    );
}

#[test]
fn setup_data_loops_and_extra_nodes() {
    let mut b = small();
    b.extra_setup_data = vec![(1, b"e820 ext".to_vec()), (7, vec![0; 40])];
    assert!(verdict(&b).starts_with("ZSPROBE: PASS hint=valid"));
    b.setup_data_loop = true;
    assert_eq!(
        verdict(&b),
        format!(
            "ZSPROBE: FAIL reason=setup_data_loop index=3 addr={:#x}",
            layout::SETUP_DATA
        )
    );
}

#[test]
fn bad_e820_is_reported() {
    let mut b = small();
    let mut e = b.default_e820();
    e.swap(1, 2);
    b.e820 = Some(e);
    assert_eq!(verdict(&b), "ZSPROBE: FAIL reason=e820_unsorted index=2");
    let mut b = small();
    b.e820 = Some(vec![
        (0, 0x9_fc00, 1),
        (0x9_f000, 0x1000, 2),
        (0x10_0000, 63 * MIB, 1),
    ]);
    assert_eq!(verdict(&b), "ZSPROBE: FAIL reason=e820_overlap index=1");
}

#[test]
fn faults_become_verdicts() {
    let mut b = small();
    b.cmdline = "zsprobe.fault=ud".into();
    let v = verdict(&b);
    assert!(
        v.starts_with("ZSPROBE: FAIL reason=exception vector=6 rip=0x1"),
        "{v}"
    );
    b.cmdline = "zsprobe.fault=pf".into();
    let v = verdict(&b);
    assert!(
        v.starts_with("ZSPROBE: FAIL reason=exception vector=14 "),
        "{v}"
    );
    assert!(v.ends_with(" error_code=0x4 cr2=0x7f0000000000"), "{v}");
}

#[test]
fn wrong_load_address_is_reported_not_run() {
    let mut b = small();
    b.load_addr = Some(0x20_0000);
    let o = b.run(&kernel()).unwrap();
    assert_eq!(o.exit, Exit::Reset);
    assert_eq!(o.verdict(), Some("ZSPROBE: FAIL reason=wrong_load_address"));
}

#[test]
fn four_gib_scan_takes_seconds() {
    let mut b = Boot::new(4096 * MIB);
    b.timeout = Duration::from_secs(120);
    let o = run(&b);
    let v = o.verdict().unwrap();
    assert!(v.starts_with("ZSPROBE: PASS hint=valid ranges=2 "), "{v}");
    let scan = o.between(INIT_STARTED, TEST_DONE).unwrap();
    let bytes: u64 = o.hint_entries.iter().map(|e| e.length).sum();
    eprintln!(
        "4 GiB guest: scanned {bytes} bytes in {:.2} s ({:.2} GiB/s)",
        scan.as_secs_f64(),
        bytes as f64 / scan.as_secs_f64() / (1u64 << 30) as f64
    );
    assert!(bytes > 4000 * MIB);
    assert!(scan < Duration::from_secs(30), "scan took {scan:?}");
}

#[test]
fn second_hint_node_and_scrub_requests_are_refused() {
    let mut ok = vec![0; zerohint::encoded_size(1)];
    zerohint::encode_into(0, &[Entry::zeroed(0x40_0000, 0x1000, 12)], &mut ok).unwrap();
    let mut b = small();
    b.extra_setup_data = vec![(zerohint::SETUP_TYPE, ok)];
    assert_eq!(
        verdict(&b),
        format!(
            "ZSPROBE: FAIL reason=multiple_hints first={:#x} second={:#x}",
            layout::SETUP_DATA,
            layout::SETUP_DATA + 0x50
        )
    );
    let scrub = Entry {
        flags: 0,
        ..Entry::zeroed(0x40_0000, 0x1000, 12)
    };
    let mut raw = vec![0; zerohint::encoded_size(1)];
    zerohint::encode_into(zerohint::HDR_FLAG_SCRUB_REQUEST, &[scrub], &mut raw).unwrap();
    let mut b = small();
    b.hint = Hint::Raw(raw);
    assert_eq!(
        verdict(&b),
        "ZSPROBE: FAIL reason=scrub_request_in_setup_data"
    );
}
