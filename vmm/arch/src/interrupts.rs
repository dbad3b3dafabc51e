//! Local APIC LVT setup: LINT0 as ExtINT (the 8259 PIC's output) and LINT1
//! as NMI, what a BIOS leaves behind and what Linux expects in virtual wire
//! mode.

use kvm_bindings::kvm_lapic_state;
use kvm_ioctls::VcpuFd;

/// LVT LINT0 register offset.
pub const APIC_LVT0: usize = 0x350;
/// LVT LINT1 register offset.
pub const APIC_LVT1: usize = 0x360;
const APIC_MODE_NMI: u32 = 0x4;
const APIC_MODE_EXTINT: u32 = 0x7;

/// Errors programming the LAPIC.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// KVM_GET_LAPIC / KVM_SET_LAPIC failed.
    #[error("{0} failed: {1}")]
    Kvm(&'static str, kvm_ioctls::Error),
}

fn get_reg(s: &kvm_lapic_state, off: usize) -> u32 {
    let b: Vec<u8> = s.regs[off..off + 4].iter().map(|&x| x as u8).collect();
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

fn set_reg(s: &mut kvm_lapic_state, off: usize, v: u32) {
    for (i, b) in v.to_le_bytes().iter().enumerate() {
        s.regs[off + i] = *b as _;
    }
}

/// Sets the delivery mode (bits 8..10) of an LVT entry, keeping the rest.
fn with_delivery_mode(reg: u32, mode: u32) -> u32 {
    (reg & !0x700) | (mode << 8)
}

/// Applies LINT0 = ExtINT, LINT1 = NMI to a LAPIC state.
pub fn set_lint(s: &mut kvm_lapic_state) {
    let l0 = get_reg(s, APIC_LVT0);
    set_reg(s, APIC_LVT0, with_delivery_mode(l0, APIC_MODE_EXTINT));
    let l1 = get_reg(s, APIC_LVT1);
    set_reg(s, APIC_LVT1, with_delivery_mode(l1, APIC_MODE_NMI));
}

/// Programs LINT0/LINT1 on a vCPU (needs the in-kernel irqchip).
pub fn setup_lint(vcpu: &VcpuFd) -> Result<(), Error> {
    let mut s = vcpu
        .get_lapic()
        .map_err(|e| Error::Kvm("KVM_GET_LAPIC", e))?;
    set_lint(&mut s);
    vcpu.set_lapic(&s)
        .map_err(|e| Error::Kvm("KVM_SET_LAPIC", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lint_modes() {
        let mut s = kvm_lapic_state::default();
        set_reg(&mut s, APIC_LVT0, 0x0001_0000); // masked
        set_lint(&mut s);
        assert_eq!(get_reg(&s, APIC_LVT0), 0x0001_0700);
        assert_eq!(get_reg(&s, APIC_LVT1), 0x0000_0400);
    }
}
