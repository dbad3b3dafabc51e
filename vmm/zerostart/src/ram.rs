//! Guest RAM as the VMM sees it: the memory, the written-range log and the
//! zero hint derived from them.
//!
//! Temporary adapter: fresh anonymous memory (which the host kernel hands
//! out zero-filled), until `guestmem` provides hugepage backings and the
//! parallel prefault engine.

use std::time::Instant;

use serde_json::json;
use vm_memory::{Bytes, GuestAddress, GuestMemoryError, GuestMemoryMmap};
use zerohint::Hint;

use crate::cli::{MemoryOpts, Prezero};

/// RAM errors.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// mmap failed.
    #[error("cannot allocate {size} bytes of guest memory: {err}; choose a smaller --memory size")]
    Alloc {
        /// Bytes.
        size: u64,
        /// Cause.
        err: String,
    },
    /// Backing not supported yet.
    #[error("hugepage backing is not available in this build; use --memory hugepages=off")]
    NoHugepages,
    /// Hint construction failed.
    #[error("building the zero hint: {0}")]
    Hint(zerohint::Error),
}

/// Guest RAM plus its write log.
#[derive(Debug)]
pub struct VmRam {
    mem: GuestMemoryMmap,
    regions: Vec<(GuestAddress, u64)>,
    written: Vec<(u64, u64)>,
    prezero: bool,
    size: u64,
    setup_ms: f64,
}

impl VmRam {
    /// Maps `opts.size` bytes laid out by `arch::layout::ram_regions`.
    pub fn create(opts: &MemoryOpts) -> Result<VmRam, Error> {
        if opts.hugepages {
            return Err(Error::NoHugepages);
        }
        let t = Instant::now();
        let regions = arch::layout::ram_regions(opts.size);
        let ranges: Vec<(GuestAddress, usize)> =
            regions.iter().map(|&(a, l)| (a, l as usize)).collect();
        let mem = GuestMemoryMmap::from_ranges(&ranges).map_err(|e| Error::Alloc {
            size: opts.size,
            err: e.to_string(),
        })?;
        Ok(VmRam {
            mem,
            regions,
            written: Vec::new(),
            prezero: opts.prezero != Prezero::Off,
            size: opts.size,
            setup_ms: t.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// The guest memory.
    pub fn memory(&self) -> &GuestMemoryMmap {
        &self.mem
    }

    /// Records `[addr, addr + len)` as written (or otherwise not provably
    /// zero).
    pub fn mark_written(&mut self, addr: GuestAddress, len: u64) {
        if len > 0 {
            self.written.push((addr.0, len));
        }
    }

    /// RAM minus everything written, or `None` with prezero=off.
    pub fn zero_hint(&self) -> Result<Option<Hint>, Error> {
        if !self.prezero {
            return Ok(None);
        }
        let ranges: Vec<(u64, u64)> = self.regions.iter().map(|&(a, l)| (a.0, l)).collect();
        let mut h = Hint::zeroed_from_ranges(&ranges, 12).map_err(Error::Hint)?;
        for &(s, l) in &self.written {
            h.subtract(s, l);
        }
        h.keep_largest(zerohint::MAX_ENTRIES);
        Ok(Some(h))
    }

    /// Writes `data` at `addr` without recording it. Only for the
    /// `--test-corrupt-hint=dirty` self-test.
    pub fn write_untracked(&self, data: &[u8], addr: GuestAddress) -> Result<(), GuestMemoryError> {
        self.mem.write_slice(data, addr)
    }

    /// The memory part of the timeline JSON.
    pub fn report(&self, hint: Option<&Hint>) -> serde_json::Value {
        json!({
            "mode": if self.prezero { "fresh-anonymous" } else { "off" },
            "backend": "kernel-zero-fill",
            "method": "anonymous mmap (host zero-fills on first touch)",
            "bytes": self.size,
            "ms": self.setup_ms,
            "gib_per_s": serde_json::Value::Null,
            "hint_ranges": hint.map(|h| h.entries.len()).unwrap_or(0),
            "hint_bytes": hint.map(|h| h.total_bytes()).unwrap_or(0),
        })
    }
}

impl arch::BootMemory for VmRam {
    fn write_tracked(&mut self, data: &[u8], addr: GuestAddress) -> Result<(), GuestMemoryError> {
        self.mark_written(addr, data.len() as u64);
        self.mem.write_slice(data, addr)
    }
}
