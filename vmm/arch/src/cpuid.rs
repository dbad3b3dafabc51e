//! CPUID for the guest: what KVM supports, with the topology, APIC ids and
//! hypervisor identification a VMM must fill in itself.

use kvm_bindings::{kvm_cpuid_entry2, CpuId};

/// Leaf 1 ECX bit 31: running under a hypervisor.
const LEAF1_ECX_HYPERVISOR: u32 = 1 << 31;
/// Leaf 1 EDX bit 28: HTT (more than one logical processor per package).
const LEAF1_EDX_HTT: u32 = 1 << 28;
/// KVM's paravirt signature leaf.
pub const KVM_CPUID_SIGNATURE: u32 = 0x4000_0000;
/// KVM's paravirt feature leaf.
pub const KVM_CPUID_FEATURES: u32 = 0x4000_0001;
/// "KVMKVMKVM\0\0\0" as EBX, ECX, EDX.
const KVM_SIGNATURE: [u32; 3] = [0x4b4d_564b, 0x564b_4d56, 0x0000_004d];

/// Errors filtering CPUID.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Adding a leaf overflowed the entry array.
    #[error("too many CPUID entries")]
    TooManyEntries,
}

/// Number of bits needed to hold ids `0..n`.
fn bits_for(n: u32) -> u32 {
    if n <= 1 {
        0
    } else {
        32 - (n - 1).leading_zeros()
    }
}

/// Adjusts `cpuid` (from `KVM_GET_SUPPORTED_CPUID`) for vCPU `cpu_index` of
/// `cpu_count`: one package, one thread per core, APIC id = index.
///
/// - leaf 0x1: initial APIC id, logical processor count, HTT, hypervisor bit;
/// - leaf 0x4: cores per package (Intel);
/// - leaves 0xb/0x1f: x2APIC topology (SMT level, core level);
/// - leaf 0x8000_0008: core count (AMD); 0x8000_001e: extended APIC id;
/// - leaves 0x4000_0000/1: KVM signature and paravirt features (added with
///   no feature bits if KVM did not report them).
pub fn filter_cpuid(cpuid: &mut CpuId, cpu_index: u8, cpu_count: u8) -> Result<(), Error> {
    let id = u32::from(cpu_index);
    let n = u32::from(cpu_count).max(1);
    let core_bits = bits_for(n);
    let mut have_sig = false;
    let mut have_features = false;
    for e in cpuid.as_mut_slice() {
        match e.function {
            0x1 => {
                e.ebx = (e.ebx & 0x0000_ffff) | (id << 24) | (n.min(255) << 16);
                e.ecx |= LEAF1_ECX_HYPERVISOR;
                if n > 1 {
                    e.edx |= LEAF1_EDX_HTT;
                } else {
                    e.edx &= !LEAF1_EDX_HTT;
                }
            }
            0x4 if e.eax & 0x1f != 0 => {
                // EAX[31:26] = cores per package - 1; EAX[25:14] = logical
                // processors sharing this cache - 1 (share L3 only).
                let level = (e.eax >> 5) & 0x7;
                let sharing = if level >= 3 { n - 1 } else { 0 };
                e.eax = (e.eax & 0x3fff) | ((n - 1) << 26) | (sharing << 14);
            }
            0xb | 0x1f => {
                e.edx = id;
                match e.index {
                    0 => {
                        e.eax = 0;
                        e.ebx = 1;
                        e.ecx = 1 << 8;
                    }
                    1 => {
                        e.eax = core_bits;
                        e.ebx = n;
                        e.ecx = (2 << 8) | 1;
                    }
                    i => {
                        e.eax = 0;
                        e.ebx = 0;
                        e.ecx = i;
                    }
                }
            }
            0x8000_0008 => {
                // ECX[15:12] APIC id size, ECX[7:0] cores - 1.
                e.ecx = (e.ecx & !0xf0ff) | (core_bits << 12) | (n - 1);
            }
            0x8000_001e => {
                e.eax = id;
                // One thread per core, one node.
                e.ebx = (e.ebx & !0xff_ff) | id;
                e.ecx &= !0x7ff;
            }
            KVM_CPUID_SIGNATURE => {
                have_sig = true;
                e.eax = e.eax.max(KVM_CPUID_FEATURES);
                [e.ebx, e.ecx, e.edx] = KVM_SIGNATURE;
            }
            KVM_CPUID_FEATURES => have_features = true,
            _ => {}
        }
    }
    if !have_sig {
        cpuid
            .push(kvm_cpuid_entry2 {
                function: KVM_CPUID_SIGNATURE,
                eax: KVM_CPUID_FEATURES,
                ebx: KVM_SIGNATURE[0],
                ecx: KVM_SIGNATURE[1],
                edx: KVM_SIGNATURE[2],
                ..Default::default()
            })
            .map_err(|_| Error::TooManyEntries)?;
    }
    if !have_features {
        cpuid
            .push(kvm_cpuid_entry2 {
                function: KVM_CPUID_FEATURES,
                ..Default::default()
            })
            .map_err(|_| Error::TooManyEntries)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvm_bindings::KVM_CPUID_FLAG_SIGNIFCANT_INDEX;

    fn entry(function: u32, index: u32) -> kvm_cpuid_entry2 {
        kvm_cpuid_entry2 {
            function,
            index,
            flags: if function == 0xb {
                KVM_CPUID_FLAG_SIGNIFCANT_INDEX
            } else {
                0
            },
            eax: 0xffff_ffff,
            ebx: 0x0000_0800,
            ecx: 0,
            edx: LEAF1_EDX_HTT,
            ..Default::default()
        }
    }

    fn find(c: &CpuId, f: u32, i: u32) -> kvm_cpuid_entry2 {
        *c.as_slice()
            .iter()
            .find(|e| e.function == f && e.index == i)
            .unwrap()
    }

    #[test]
    fn apic_ids_topology_and_signature() {
        let mut c = CpuId::from_entries(&[
            entry(1, 0),
            entry(0xb, 0),
            entry(0xb, 1),
            entry(0xb, 2),
            entry(0x8000_0008, 0),
        ])
        .unwrap();
        filter_cpuid(&mut c, 2, 4).unwrap();
        let l1 = find(&c, 1, 0);
        assert_eq!(l1.ebx >> 24, 2);
        assert_eq!((l1.ebx >> 16) & 0xff, 4);
        assert_eq!(l1.ebx & 0xffff, 0x0800, "CLFLUSH size kept");
        assert_ne!(l1.ecx & LEAF1_ECX_HYPERVISOR, 0);
        assert_ne!(l1.edx & LEAF1_EDX_HTT, 0);
        let b0 = find(&c, 0xb, 0);
        let b1 = find(&c, 0xb, 1);
        let b2 = find(&c, 0xb, 2);
        assert_eq!((b0.ebx, b0.ecx, b0.edx), (1, 0x100, 2));
        assert_eq!((b1.eax, b1.ebx, b1.ecx, b1.edx), (2, 4, 0x201, 2));
        assert_eq!((b2.eax, b2.ebx, b2.ecx), (0, 0, 2));
        assert_eq!(find(&c, 0x8000_0008, 0).ecx & 0xff, 3);
        let sig = find(&c, KVM_CPUID_SIGNATURE, 0);
        let mut s = Vec::new();
        for r in [sig.ebx, sig.ecx, sig.edx] {
            s.extend_from_slice(&r.to_le_bytes());
        }
        assert_eq!(&s, b"KVMKVMKVM\0\0\0");
        assert_eq!(sig.eax, KVM_CPUID_FEATURES);
        find(&c, KVM_CPUID_FEATURES, 0);
    }

    #[test]
    fn single_cpu_clears_htt() {
        let mut c = CpuId::from_entries(&[entry(1, 0)]).unwrap();
        filter_cpuid(&mut c, 0, 1).unwrap();
        let l1 = find(&c, 1, 0);
        assert_eq!(l1.edx & LEAF1_EDX_HTT, 0);
        assert_eq!(l1.ebx >> 24, 0);
    }

    #[test]
    fn existing_kvm_leaves_are_kept() {
        let mut sig = entry(KVM_CPUID_SIGNATURE, 0);
        sig.eax = 0x4000_0001;
        let mut feat = entry(KVM_CPUID_FEATURES, 0);
        feat.eax = 0x1234;
        let mut c = CpuId::from_entries(&[sig, feat]).unwrap();
        filter_cpuid(&mut c, 0, 1).unwrap();
        assert_eq!(c.as_slice().len(), 2);
        assert_eq!(find(&c, KVM_CPUID_FEATURES, 0).eax, 0x1234);
    }

    #[test]
    fn bits() {
        assert_eq!(
            (
                bits_for(1),
                bits_for(2),
                bits_for(3),
                bits_for(4),
                bits_for(5)
            ),
            (0, 1, 2, 2, 3)
        );
    }
}
