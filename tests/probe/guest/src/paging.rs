//! The probe's own page tables, built in ring 3: all RAM identity-mapped
//! (so code, data and stacks keep working across the CR3 switch) and mapped
//! again at [`DIRECT_MAP`], through which the probe reads guest-physical
//! memory. The second view exists because guest-physical address 0 is a
//! valid place for a hint range, but a null pointer is never a valid Rust
//! reference. Every entry is user-accessible: the probe runs in ring 3 (see
//! `entry.rs` for why).
//!
//! Always 2 MiB pages, and the second view in the lower half: on the
//! software KVM this project runs on, a guest using 1 GiB pages
//! triple-faulted on the CR3 load, and upper-half (kernel-half) addresses
//! are not reachable from ring 3. Both choices work on every KVM.

use core::arch::x86_64::__cpuid;

use probe_check::Failure;

use crate::cpu;
use crate::entry::{boot_pd, boot_pdpt, boot_pml4};

/// Virtual address of guest-physical 0 in the probe's direct map: PML4
/// slot 1, 512 GiB.
pub const DIRECT_MAP: u64 = 1 << 39;

const GIB: u64 = 1 << 30;
/// With 2 MiB pages each GiB needs a page directory: the boot one for the
/// first, this many more in bss.
const EXTRA_PDS: usize = 63;
/// Present, writable, user.
const TABLE: u64 = 0b111;
/// A large page: present, writable, user, PS.
const LEAF: u64 = 0b1000_0111;

#[repr(C, align(4096))]
struct Pd([u64; 512]);

// Written by `map` only, then read by the MMU.
static mut PDS: [Pd; EXTRA_PDS] = [const { Pd([0; 512]) }; EXTRA_PDS];

/// How much the probe can map on this CPU.
#[derive(Debug, Clone, Copy)]
pub struct Paging {
    /// Highest address (exclusive) that can be mapped: 64 GiB (the page
    /// directories in bss), never above the CPU's physical address width.
    pub limit: u64,
}

impl Paging {
    /// Asks CPUID for the physical address width.
    pub fn detect() -> Paging {
        let max_ext = __cpuid(0x8000_0000).eax;
        let phys_bits = if max_ext >= 0x8000_0008 {
            __cpuid(0x8000_0008).eax & 0xff
        } else {
            36
        };
        Paging {
            limit: ((EXTRA_PDS as u64 + 1) * GIB).min(1u64 << phys_bits.clamp(32, 52)),
        }
    }

    /// Maps `[0, end)` (rounded up to a GiB) twice and loads CR3.
    pub fn map(&self, end: u64) -> Result<(), Failure> {
        if end > self.limit {
            return Err(Failure::RamBeyondMap {
                ram_end: end,
                limit: self.limit,
            });
        }
        let gibs = end.div_ceil(GIB).max(1) as usize;
        // SAFETY: single CPU; the entries written map every address to
        // itself (or into the direct map, which nothing executes from), so
        // the probe's code, data and stacks stay where they are, and the
        // boot mapping of the first 2 MiB is a subset of the new one.
        unsafe {
            let pml4 = &raw mut boot_pml4;
            let pdpt = &raw mut boot_pdpt;
            for g in 0..gibs {
                let base = g as u64 * GIB;
                let pd: *mut [u64; 512] = if g == 0 {
                    &raw mut boot_pd
                } else {
                    &raw mut PDS[g - 1].0
                };
                for (j, e) in (*pd).iter_mut().enumerate() {
                    *e = (base + ((j as u64) << 21)) | LEAF;
                }
                (*pdpt)[g] = pd as u64 | TABLE;
            }
            (*pml4)[0] = pdpt as u64 | TABLE;
            (*pml4)[((DIRECT_MAP >> 39) & 511) as usize] = pdpt as u64 | TABLE;
            cpu::load_cr3(pml4 as u64);
        }
        Ok(())
    }
}
