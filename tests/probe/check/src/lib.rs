//! The probe guest's decisions, kept apart from the hardware it runs on.
//!
//! The probe is a bare-metal guest that boots like Linux and checks what a
//! VMM handed it: `boot_params`, the e820 map, the `setup_data` list and the
//! zerostart pre-zeroed hint, and finally that every hinted byte reads as
//! zero. Everything that decides a verdict lives here, behind the
//! [`Platform`] trait, so host unit tests can drive it over a fake memory
//! image; the guest binary only supplies serial output, port I/O markers and
//! page tables.
#![cfg_attr(not(test), no_std)]
#![deny(missing_docs)]

pub mod bootparams;
pub mod cmdline;
pub mod e820;
pub mod ranges;
mod run;
pub mod scan;
pub mod setup_data;
pub mod verdict;

pub use run::{run, Image, Platform};
pub use verdict::{Failure, Verdict};

/// Prefix of every line the probe prints; a verdict line continues with
/// `PASS ` or `FAIL `, every other line with a lower-case word.
pub const LINE_PREFIX: &str = "ZSPROBE: ";

/// Custom boot-timer marker the probe writes once `boot_params` passed its
/// checks (between `kernel_started` and `init_started`).
pub const MARKER_BOOT_PARAMS_OK: u16 = boottimer::marker::CUSTOM_FIRST;
