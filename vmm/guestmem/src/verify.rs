//! Re-reading hinted memory: proof, not promise, for the `verify` mode and
//! the tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::prefault::{chunks, parallel, Span};
use crate::Error;

/// First non-zero byte in `[ptr, ptr + len)`, as an offset and value
/// (the workspace's zero-scan, `hostmem::first_nonzero`: a vectorised
/// OR over 4 KiB blocks, then a byte search in the first dirty block).
///
/// # Safety
/// The range must be mapped, readable and not written concurrently.
unsafe fn first_nonzero(ptr: *const u8, len: usize) -> Option<(usize, u8)> {
    // SAFETY: forwarded contract.
    let bytes = unsafe { std::slice::from_raw_parts(ptr, len) };
    hostmem::first_nonzero(bytes).map(|i| (i, bytes[i]))
}

/// Checks every byte of `spans` reads zero using `threads` workers; the
/// error names the lowest non-zero guest-physical address found.
///
/// # Safety
/// Every span must be a live, readable host mapping of guest RAM with
/// 4 KiB-aligned start and length, not written while this runs (call it
/// while no vCPU runs).
pub(crate) unsafe fn verify_spans(spans: &[Span], threads: usize) -> Result<u64, Error> {
    let work = chunks(spans, 4096, 64 << 20);
    let lowest = AtomicU64::new(u64::MAX);
    let value = Mutex::new(0u8);
    parallel(&work, threads, None, |c| {
        // Chunks are handed out in address order: nothing after an already
        // found byte can be lower.
        if c.gpa > lowest.load(Ordering::Relaxed) {
            return Ok(());
        }
        // SAFETY: forwarded contract.
        if let Some((off, v)) = unsafe { first_nonzero(c.host as *const u8, c.len) } {
            let gpa = c.gpa + off as u64;
            let mut val = value.lock().unwrap_or_else(|p| p.into_inner());
            if gpa < lowest.load(Ordering::Relaxed) {
                lowest.store(gpa, Ordering::Relaxed);
                *val = v;
            }
        }
        Ok(())
    })?;
    match lowest.into_inner() {
        u64::MAX => Ok(spans.iter().map(|s| s.len as u64).sum()),
        gpa => Err(Error::NotZero {
            gpa,
            value: value.into_inner().unwrap_or_else(|p| p.into_inner()),
        }),
    }
}
