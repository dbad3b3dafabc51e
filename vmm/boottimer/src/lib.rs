//! The boot-timer port ABI, shared by the guest side (the probe guest,
//! guest init programs, anything that reports a boot milestone) and the
//! VMM's `devices::BootTimer`, which timestamps each write.
//!
//! A guest reports milestone `id` with one 32-bit `outl(TIMER_MAGIC | id,
//! TIMER_PORT)`; [`marker`] names the ids. Why a crate of its own: the
//! port is a device ABI between guest and VMM with nothing to do with the
//! pre-zeroed hint (it used to live in `zerohint`, the hint ABI crate), and
//! the guest side cannot depend on the VMM's device crate (`no_std`, no
//! KVM). The C side (`tests/guest-init/zshint.h`) spells the same values;
//! `tests/vectors` checks the hint, this crate's tests the port values.

#![no_std]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod marker;

/// I/O port guests write boot milestones to (`outl`).
pub const TIMER_PORT: u16 = 0x440;
/// High half of a boot-timer value: the value written is `TIMER_MAGIC | id`.
pub const TIMER_MAGIC: u32 = 0x5a53_0000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_abi_values() {
        // Fixed by the guest side (probe guest assembly, zshint.h).
        assert_eq!(TIMER_PORT, 0x440);
        assert_eq!(marker::port_value(marker::KERNEL_STARTED), 0x5a53_0001);
    }
}
