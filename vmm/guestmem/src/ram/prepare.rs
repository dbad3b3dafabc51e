//! Prefaulting guest RAM before boot (the `prezero` engine or
//! `MADV_POPULATE_WRITE`), and the facts of what that did and cost.

use std::time::{Duration, Instant};

use vm_memory::{GuestMemoryBackend, GuestMemoryRegion};

use super::GuestRam;
use crate::prefault::{self, Span};
use crate::{BackingKind, Error, PrefaultMethod, Prezero};

/// How guest RAM came to be zero (or whether it is promised to be).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PrepMethod {
    /// Leased from a pool that zeroed and populated it beforehand.
    PoolLease,
    /// No prefault and no hint: nothing is promised.
    Nothing,
    /// No prefault, hint on: the kernel clears each page as the guest
    /// first touches it.
    KernelFaultOnDemand,
    /// Prefaulted with `MADV_POPULATE_WRITE` (the kernel cleared every page).
    PopulateWrite,
    /// Prefaulted by writing zeros with the `prezero` engine.
    NtEngine,
}

/// What preparing guest RAM did and cost: plain facts, no report format.
/// The VMM turns them into its boot timeline (zerostart's
/// `timeline::PrezeroReport`); guestmem knows nothing of that JSON.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefaultStats {
    /// How the memory was made ready.
    pub method: PrepMethod,
    /// The zeroing engine's backend when it ran ([`PrepMethod::NtEngine`]).
    pub backend: Option<&'static str>,
    /// The backing class.
    pub backing: BackingKind,
    /// Bytes prefaulted (0 without prefault).
    pub bytes: u64,
    /// Wall time of the prefault (zero without prefault).
    pub duration: Duration,
    /// Worker threads used for the prefault (0 without prefault).
    pub threads: usize,
}

impl PrefaultStats {
    /// Prefault throughput in GiB/s (0 when nothing was timed).
    pub fn gib_per_s(&self) -> f64 {
        let secs = self.duration.as_secs_f64();
        if secs > 0.0 {
            self.bytes as f64 / (1u64 << 30) as f64 / secs
        } else {
            0.0
        }
    }
}

impl GuestRam {
    pub(super) fn spans(&self) -> Vec<Span> {
        self.memory
            .iter()
            .map(|r| Span {
                gpa: r.start_addr().0,
                host: r.as_ptr() as usize,
                len: r.len() as usize,
            })
            .collect()
    }

    pub(super) fn prefault(
        &mut self,
        progress: Option<&(dyn Fn(u64, u64) + Sync)>,
    ) -> Result<(), Error> {
        let method = prefault::resolve(self.cfg.backing.kind(), self.cfg.prefault_method);
        let threads = prefault::worker_count(self.cfg.threads);
        let align = 1usize << self.cfg.backing.page_shift();
        let spans = self.spans();
        let t0 = Instant::now();
        let (used_threads, backend) = match method {
            PrefaultMethod::Nt => {
                let choice = match self.cfg.prezero {
                    Prezero::Engine(c) => c,
                    Prezero::Off => prezero::Choice::Auto,
                };
                let granule = hostmem::PageSize::from_shift(self.cfg.backing.page_shift())
                    .unwrap_or(hostmem::PageSize::Size4K);
                let z = prezero::Zeroer::new(choice)?
                    .threads(threads)
                    .granule(granule);
                let ranges: Vec<(*mut u8, usize)> =
                    spans.iter().map(|s| (s.host as *mut u8, s.len)).collect();
                let total = self.cfg.size;
                let p = progress.map(|p| move |d: u64| p(d, total));
                // SAFETY: the ranges are our own live mappings and nothing
                // else runs in guest memory yet (no vCPU exists). The `try_`
                // form faults each chunk in first, so memory the kernel
                // cannot supply (a hugetlb cgroup limit hit at fault time,
                // say) is an error here, never a SIGBUS in a worker.
                let st = unsafe {
                    z.try_zero_ranges(&ranges, p.as_ref().map(|f| f as &(dyn Fn(u64) + Sync)))?
                };
                (st.threads, Some(st.backend.name()))
            }
            _ => {
                let chunks = prefault::chunks(&spans, align, 64 << 20);
                prefault::parallel(&chunks, threads, progress, prefault::populate_write)?;
                (threads.min(chunks.len()), None)
            }
        };
        let s = &mut self.stats;
        s.duration = t0.elapsed();
        s.method = match method {
            PrefaultMethod::Nt => PrepMethod::NtEngine,
            _ => PrepMethod::PopulateWrite,
        };
        s.backend = backend;
        s.bytes = self.cfg.size;
        s.threads = used_threads;
        Ok(())
    }

    /// What preparing guest RAM did and cost.
    pub fn prefault_stats(&self) -> &PrefaultStats {
        &self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::*;
    use crate::{BackingKind, PrefaultMethod};

    #[test]
    fn stats_name_method() {
        assert_eq!(
            ram(|_| {}).prefault_stats().method,
            PrepMethod::KernelFaultOnDemand
        );
        let r = ram(|c| {
            c.prefault = true;
            c.prefault_method = PrefaultMethod::Nt;
        });
        let st = r.prefault_stats();
        assert_eq!(st.method, PrepMethod::NtEngine);
        assert!(st.backend.is_some() && st.bytes == 32 * M && st.threads >= 1);
        // The timeline's JSON of these facts is zerostart's (its
        // timeline::PrezeroReport test checks `method`, `backing`, rate).
        assert_eq!(st.backing, BackingKind::AnonThp);
        assert!(st.gib_per_s() > 0.0);
        let r = ram(|c| {
            c.prefault = true;
            c.prefault_method = PrefaultMethod::Populate;
        });
        assert_eq!(r.prefault_stats().method, PrepMethod::PopulateWrite);
        assert_eq!(r.prefault_stats().backend, None);
    }

    #[test]
    fn prefault_progress_reaches_total() {
        let cfg = cfg(|c| {
            c.prefault = true;
            c.threads = 2;
        });
        let last = std::sync::Mutex::new((0u64, 0u64));
        let p = |d: u64, t: u64| *last.lock().unwrap() = (d, t);
        GuestRam::create(&cfg, &regions(), Some(&p)).unwrap();
        assert_eq!(*last.lock().unwrap(), (32 * M, 32 * M));
    }
}
