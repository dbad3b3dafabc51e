//! The zerostart probe guest: a minimal 64-bit bare-metal program that a
//! VMM boots exactly like Linux (bzImage, 64-bit boot protocol) to check
//! what it was handed — boot_params, e820, setup_data, the pre-zeroed hint —
//! and that every hinted byte really reads as zero. It prints one verdict
//! line on COM1 and resets through the i8042.
//!
//! The decisions live in `probe-check` (host-tested); this crate is the
//! hardware side: entry stub, serial, markers, page tables, exceptions.
//! All Rust code runs in ring 3; `entry.rs` explains why.
#![no_std]
#![no_main]

mod cpu;
mod entry;
mod paging;
mod serial;

use core::cell::Cell;
use core::fmt;
use core::panic::PanicInfo;
use core::ptr::addr_of;

use boottimer::marker::TEST_DONE;
use probe_check::cmdline::Fault;
use probe_check::{Failure, Image, Platform, Verdict};

use paging::{Paging, DIRECT_MAP};

extern "C" {
    static __image_start: u8;
    static __image_end: u8;
}

/// Mapped before boot_params is read: the boot protocol lets a VMM put
/// boot_params and the command line anywhere it identity-maps, which in
/// practice is below 4 GiB.
const INITIAL_MAP: u64 = 4 << 30;

/// The probe's [`Platform`]: reads guest-physical memory through its own
/// direct map.
struct Guest {
    paging: Paging,
    /// End of the probe's own mapping.
    mapped_end: Cell<u64>,
}

impl Guest {
    fn new() -> Guest {
        let paging = Paging::detect();
        let g = Guest {
            paging,
            mapped_end: Cell::new(0),
        };
        let initial = INITIAL_MAP.min(paging.limit);
        if let Err(f) = paging.map(initial) {
            finish(&Verdict::Fail(f));
        }
        g.mapped_end.set(initial);
        g
    }
}

impl Platform for Guest {
    fn phys(&self, gpa: u64, len: u64) -> Option<&[u8]> {
        let end = gpa.checked_add(len)?;
        if end > self.mapped_end.get() {
            return None;
        }
        let len = usize::try_from(len).ok()?;
        // SAFETY: the span is mapped in the direct map (never at address 0,
        // so never null), and nothing writes it while the probe reads: the
        // probe is the only CPU and writes only its own bss.
        Some(unsafe { core::slice::from_raw_parts((DIRECT_MAP + gpa) as *const u8, len) })
    }

    fn log(&self, args: fmt::Arguments<'_>) {
        serial::line(args);
    }

    fn marker(&self, id: u16) {
        cpu::marker(id);
    }

    fn map_limit(&self) -> u64 {
        self.paging.limit
    }

    fn map_ram(&self, end: u64) -> Result<(), Failure> {
        let end = end.max(self.mapped_end.get());
        self.paging.map(end)?;
        self.mapped_end.set(end);
        serial::line(format_args!("paging pages=2m map_end={end:#x}"));
        Ok(())
    }

    fn inject_fault(&self, fault: Fault) {
        match fault {
            // SAFETY: ud2 raises #UD, which ring 0 turns into a verdict.
            Fault::InvalidOpcode => unsafe { core::arch::asm!("ud2", options(nomem, nostack)) },
            Fault::PageFault => {
                // PML4 slot 254 is never mapped.
                let p = 0x7f00_0000_0000 as *const u8;
                // SAFETY: the read faults (#PF) and never returns a value;
                // ring 0 turns the fault into a verdict.
                unsafe { core::ptr::read_volatile(p) };
            }
        }
    }
}

/// Rust entry, in ring 3, called by `user_entry` with the boot_params
/// address, on the probe's own stack, bss cleared, SSE enabled.
#[no_mangle]
extern "C" fn probe_main(boot_params: u64) -> ! {
    serial::line(format_args!("start"));
    let guest = Guest::new();
    let image = Image {
        start: addr_of!(__image_start) as u64,
        end: addr_of!(__image_end) as u64,
    };
    let verdict = probe_check::run(&guest, boot_params, image);
    finish(&verdict)
}

/// Writes `test_done`, prints the verdict line and resets. Every path out
/// of the probe (verdict, exception, panic) goes through here, so a run
/// prints exactly one verdict line.
fn finish(v: &Verdict) -> ! {
    cpu::marker(TEST_DONE);
    serial::raw_line(format_args!("{v}"));
    cpu::reset()
}

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    if let Some(l) = info.location() {
        serial::line(format_args!("panic at {}:{}", l.file(), l.line()));
    }
    finish(&Verdict::Fail(Failure::Panic))
}
