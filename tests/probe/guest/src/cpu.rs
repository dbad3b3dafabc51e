//! Ring-3 access to the privileged operations, through the `int3` system
//! call in `entry.rs`, and the ring-3 side of exception reporting.

use core::arch::asm;

use probe_check::{Failure, Verdict};

use crate::entry::sys;

/// One system call. Ring 0 clobbers rax, rdx, rsi, rdi, r8 and r9.
fn syscall(nr: u64, a: u64, b: u64) {
    // SAFETY: the entry only performs the operation `nr` names; memory
    // arguments (SERIAL_WRITE) are read, never written.
    unsafe {
        asm!(
            "int3",
            inout("rdi") nr => _,
            inout("rsi") a => _,
            inout("rdx") b => _,
            lateout("rax") _,
            lateout("r8") _,
            lateout("r9") _,
            options(nostack, readonly),
        );
    }
}

/// Writes bytes to COM1.
pub fn serial_write(bytes: &[u8]) {
    syscall(sys::SERIAL_WRITE, bytes.as_ptr() as u64, bytes.len() as u64);
}

/// Writes boot-timer marker `id` (hint ABI, "Boot-timer port").
pub fn marker(id: u16) {
    syscall(
        sys::OUTL,
        u64::from(boottimer::TIMER_PORT),
        u64::from(boottimer::marker::port_value(id)),
    );
}

/// Ends the run: the i8042 reset command (a VMM treats it as a clean
/// exit); the entry halts forever if nothing listens.
pub fn reset() -> ! {
    syscall(sys::RESET, 0, 0);
    // The entry never returns from RESET; spin if it somehow did.
    #[allow(clippy::empty_loop)]
    loop {}
}

/// Loads a new page-table root.
///
/// # Safety
/// `pml4` must be the physical address of a PML4 that maps all code, data
/// and stacks of the probe (ring 0 and ring 3) at their current addresses,
/// user-accessible.
pub unsafe fn load_cr3(pml4: u64) {
    syscall(sys::LOAD_CR3, pml4, 0);
}

/// Where ring 0 sends a ring-3 fault, on a fresh stack: prints the verdict
/// and resets. A fault in here is caught by ring 0, which resets.
#[no_mangle]
extern "C" fn probe_exception(vector: u64, error_code: u64, rip: u64, cr2: u64) -> ! {
    crate::finish(&Verdict::Fail(Failure::Exception {
        vector,
        rip,
        error_code,
        cr2,
    }))
}
