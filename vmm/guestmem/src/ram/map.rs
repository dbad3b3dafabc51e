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

/// One guest RAM range of `len` bytes at `gpa` made of several leased
/// files (a lease of several pool regions): one host range, reserved
/// first, with each `(file, offset, len)` part mapped over its share of it
/// in order (`MAP_FIXED`, shared), so the range is one vm-memory region
/// (one KVM slot, one e820 entry) as with a single file. Returns the
/// region and the reservation, which owns the host range and must outlive
/// the region (vm-memory does not unmap a raw mapping).
pub(super) fn map_pieces(
    cfg: &MemoryConfig,
    gpa: GuestAddress,
    len: u64,
    parts: &[(&File, u64, u64)],
) -> Result<(GuestRegion, hostmem::Mapping), Error> {
    let size = usize::try_from(len).map_err(|_| Error::BadRegions("region too large".into()))?;
    let err = |source: io::Error| Error::Mmap {
        backing: format!("{:?}", cfg.backing),
        size_mib: len >> 20,
        source,
    };
    if parts.iter().map(|p| p.2).sum::<u64>() != len {
        return Err(Error::BadRegions(format!(
            "leased pieces do not cover the region {:#x}+{len:#x}",
            gpa.0
        )));
    }
    // Never accessible as itself: every byte is covered by a part below
    // before the region is built.
    let mut reserved = hostmem::Mapping::anonymous(size)
        .prot(hostmem::Prot::None)
        .noreserve()
        .align(cfg.backing.page_bytes() as usize)
        .map()
        .map_err(|e| err(e.into()))?;
    let mut at = 0usize;
    for &(file, off, n) in parts {
        // Shared and without MAP_NORESERVE, as `map_region` maps a file.
        reserved
            .map_file_over(at, std::os::fd::AsFd::as_fd(file), off, n as usize, false)
            .map_err(|e| err(e.into()))?;
        at += n as usize;
    }
    let bitmap = AtomicBitmap::new(
        size,
        NonZeroUsize::new(PAGE_SIZE as usize).unwrap_or(NonZeroUsize::MIN),
    );
    // SAFETY: `reserved` maps `size` bytes, all of them now the leased
    // files' pages, and the caller keeps it until the region is dropped.
    let region: MmapRegion<AtomicBitmap> = unsafe {
        MmapRegionBuilder::new_with_bitmap(size, bitmap)
            .with_raw_mmap_pointer(reserved.as_ptr())
            .with_mmap_prot(libc::PROT_READ | libc::PROT_WRITE)
            .with_mmap_flags(libc::MAP_SHARED)
    }
    .build()
    .map_err(|e| err(io::Error::other(e.to_string())))?;
    let region = GuestRegion::new(region, gpa)
        .ok_or_else(|| Error::BadRegions(format!("region {:#x}+{len:#x} overflows", gpa.0)))?;
    Ok((region, reserved))
}
