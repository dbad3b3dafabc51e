//! Mapping one region of guest RAM through vm-memory, with the per-4K
//! dirty bitmap that catches writes nobody marked.

use std::fs::File;
use std::io;
use std::num::NonZeroUsize;
use std::sync::Arc;

use vm_memory::bitmap::AtomicBitmap;
use vm_memory::mmap::MmapRegionBuilder;
use vm_memory::{FileOffset, GuestAddress, MmapRegion};
use zerohint::PAGE_SIZE;

use crate::{Backing, Error, GuestRegion, MemoryConfig};

pub(super) fn map_region(
    cfg: &MemoryConfig,
    gpa: GuestAddress,
    len: u64,
    file: Option<(&Arc<File>, u64)>,
) -> Result<GuestRegion, Error> {
    let size = usize::try_from(len).map_err(|_| Error::BadRegions("region too large".into()))?;
    let bitmap = AtomicBitmap::new(
        size,
        NonZeroUsize::new(PAGE_SIZE as usize).unwrap_or(NonZeroUsize::MIN),
    );
    let mut b = MmapRegionBuilder::new_with_bitmap(size, bitmap)
        .with_mmap_prot(libc::PROT_READ | libc::PROT_WRITE);
    b = match file {
        // Shared and *without* MAP_NORESERVE: hugetlb pages are reserved at
        // mmap time, so a shortage fails here, not as a SIGBUS on fault.
        Some((f, off)) => b
            .with_mmap_flags(libc::MAP_SHARED)
            .with_file_offset(FileOffset::from_arc(f.clone(), off))
            .with_hugetlbfs(cfg.backing.page_bytes() > PAGE_SIZE),
        None => b.with_mmap_flags(libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE),
    };
    let region: MmapRegion<AtomicBitmap> = b.build().map_err(|e| Error::Mmap {
        backing: format!("{:?}", cfg.backing),
        size_mib: len >> 20,
        source: match e {
            vm_memory::mmap::MmapRegionError::Mmap(io) => io,
            other => io::Error::other(other.to_string()),
        },
    })?;
    if let Backing::Anonymous { thp } = cfg.backing {
        let advice = if thp {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: advice on our own fresh mapping; it changes no content.
        // Failure (THP compiled out) only costs speed, so it is not fatal.
        unsafe { libc::madvise(region.as_ptr().cast(), size, advice) };
    }
    GuestRegion::new(region, gpa)
        .ok_or_else(|| Error::BadRegions(format!("region {:#x}+{len:#x} overflows", gpa.0)))
}
