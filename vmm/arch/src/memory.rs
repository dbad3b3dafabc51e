//! The single door through which boot structures reach guest memory.

use vm_memory::{Bytes, GuestAddress, GuestMemoryMmap};

/// Why a tracked write failed (the implementation's own error, boxed so
/// this crate does not depend on the guest-memory crate).
pub type WriteError = Box<dyn std::error::Error + Send + Sync>;

/// Wraps a [`WriteError`] so it can be a `thiserror` source.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct MemoryError(pub WriteError);

impl From<WriteError> for MemoryError {
    fn from(e: WriteError) -> Self {
        MemoryError(e)
    }
}

/// Guest memory that remembers what was written.
///
/// Implementations must record every range passed to
/// [`BootMemory::write_tracked`] so it is excluded from the zero hint. The
/// VMM implements it on top of `guestmem::GuestRam`; tests use
/// [`RecordingMemory`].
pub trait BootMemory {
    /// Writes `data` at `addr` and records `[addr, addr + data.len())` as
    /// written.
    fn write_tracked(&mut self, data: &[u8], addr: GuestAddress) -> Result<(), WriteError>;
}

/// A [`BootMemory`] over a plain `GuestMemoryMmap` that keeps the list of
/// written ranges; used by tests and by callers that build the hint
/// themselves.
#[derive(Debug)]
pub struct RecordingMemory {
    /// The guest memory written into.
    pub mem: GuestMemoryMmap,
    /// Every `(start, len)` written, in order.
    pub written: Vec<(u64, u64)>,
}

impl RecordingMemory {
    /// Wraps `mem` with an empty write log.
    pub fn new(mem: GuestMemoryMmap) -> Self {
        Self {
            mem,
            written: Vec::new(),
        }
    }

    /// True if `addr` lies in a recorded range.
    pub fn was_written(&self, addr: u64) -> bool {
        self.written.iter().any(|&(s, l)| addr >= s && addr - s < l)
    }
}

impl BootMemory for RecordingMemory {
    fn write_tracked(&mut self, data: &[u8], addr: GuestAddress) -> Result<(), WriteError> {
        // Record first: if the write fails half-way the partial bytes are
        // still excluded.
        self.written.push((addr.0, data.len() as u64));
        Ok(self.mem.write_slice(data, addr)?)
    }
}
