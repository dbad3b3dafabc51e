//! Zeroing a whole guest memory.
//!
//! vm-memory 0.18 renamed the region-based trait (`GuestMemory` in earlier
//! releases) to `GuestMemoryBackend`; `GuestMemoryMmap` implements it.

use vm_memory::{GuestMemoryBackend, GuestMemoryRegion, MemoryRegionAddress};

use crate::{Error, Progress, ZeroStats, Zeroer};

impl Zeroer {
    /// Zeroes every region of `mem` as one parallel job.
    ///
    /// Meant for memory the guest is not running on yet (before the first
    /// `KVM_RUN`): the writes go through host pointers and do not mark a
    /// vm-memory dirty bitmap. Fails with [`Error::NoHostMapping`] (before
    /// writing anything) if a region has no host address, and with
    /// [`Error::Fault`] (instead of dying of SIGBUS) if the kernel cannot
    /// supply a page, e.g. an exhausted hugetlb pool; see
    /// [`Zeroer::try_zero_ranges`].
    pub fn zero_guest_memory<M: GuestMemoryBackend>(
        &self,
        mem: &M,
        progress: Progress<'_>,
    ) -> Result<ZeroStats, Error> {
        let mut ranges = Vec::new();
        for region in mem.iter() {
            let len = region.len() as usize;
            let host = region
                .get_host_address(MemoryRegionAddress(0))
                .map_err(|e| Error::NoHostMapping {
                    guest_addr: region.start_addr().0,
                    reason: e.to_string(),
                })?;
            ranges.push((host, len));
        }
        // SAFETY: each region's host mapping is valid for its length, and
        // regions of one GuestMemory do not overlap.
        unsafe { self.try_zero_ranges(&ranges, progress) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Choice;
    use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

    #[test]
    fn zeroes_every_region() {
        let mem = GuestMemoryMmap::<()>::from_ranges(&[
            (GuestAddress(0), 3 << 20),
            (GuestAddress(1 << 32), 5 << 20),
        ])
        .unwrap();
        for r in mem.iter() {
            mem.write_slice(&vec![0xeeu8; r.len() as usize], r.start_addr())
                .unwrap();
        }
        let z = Zeroer::new(Choice::Auto).unwrap().threads(2);
        let st = z.zero_guest_memory(&mem, None).unwrap();
        assert_eq!(st.bytes, 8 << 20);
        for r in mem.iter() {
            let mut back = vec![1u8; r.len() as usize];
            mem.read_slice(&mut back, r.start_addr()).unwrap();
            assert!(back.iter().all(|&b| b == 0));
        }
    }
}
