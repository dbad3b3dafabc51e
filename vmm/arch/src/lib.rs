//! x86_64 boot state for the zerostart VMM.
//!
//! One concept: turn "this much RAM, this kernel, these vCPUs" into the exact
//! guest state the Linux 64-bit boot protocol expects at the first
//! instruction — memory layout, e820, `boot_params`, setup_data, identity page
//! tables, GDT, registers, CPUID, MSRs, LAPIC and the MP table.
//!
//! Every byte this crate puts into guest memory goes through
//! [`BootMemory::write_tracked`], so the caller can exclude it from the
//! pre-zeroed hint. That is the security core: a missed write would make the
//! guest skip clearing memory that is not zero.
#![cfg(target_arch = "x86_64")]

pub mod acpi;
pub mod boot;
pub mod cpuid;
pub mod gdt;
pub mod interrupts;
pub mod layout;
pub mod memory;
pub mod mptable;
pub mod msr;
pub mod pvh;
pub mod regs;

pub use memory::{BootMemory, MemoryError, RecordingMemory, WriteError};
