//! Populating guest RAM before the guest runs, in parallel.

use std::sync::Mutex;

use crate::{BackingKind, Error, PrefaultMethod};

/// The prefault method used for `prefault_method=auto`, per backing.
///
/// Measured (docs/memory.md, "Prefault: NT engine vs MADV_POPULATE_WRITE";
/// `make bench-prefault PREFAULT_REPS=7`: 2 GiB fresh memory, 2 threads,
/// 2-core AMD EPYC dev host, Linux 6.18), median GiB per CPU-second NT vs
/// populate: anon 4K 1.75 vs 2.92, THP 6.60 vs 10.04, hugetlb 2M 8.24 vs
/// 10.85, hugetlb 1G 20.09 vs 28.61 (wall time agreed, but the shared host
/// made it noisy). Populating wins everywhere: on fresh memory the kernel
/// clears each page at fault time anyway, so the engine's stores are a
/// second full pass over the same memory.
pub const PREFAULT_TABLE: [(BackingKind, PrefaultMethod); 4] = [
    (BackingKind::Anon4K, PrefaultMethod::Populate),
    (BackingKind::AnonThp, PrefaultMethod::Populate),
    (BackingKind::Hugetlb2M, PrefaultMethod::Populate),
    (BackingKind::Hugetlb1G, PrefaultMethod::Populate),
];

/// The concrete method for `kind` when `requested` may be `Auto`.
pub(crate) fn resolve(kind: BackingKind, requested: PrefaultMethod) -> PrefaultMethod {
    match requested {
        PrefaultMethod::Auto => PREFAULT_TABLE
            .iter()
            .find(|(k, _)| *k == kind)
            .map_or(PrefaultMethod::Populate, |(_, m)| *m),
        m => m,
    }
}

/// A host span of guest RAM: guest-physical start, host address, length.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub gpa: u64,
    pub host: usize,
    pub len: usize,
}

/// Splits spans into chunks of about `target` bytes, each a multiple of
/// `align` (the backing page size) so no page is populated by two threads.
pub(crate) fn chunks(spans: &[Span], align: usize, target: usize) -> Vec<Span> {
    let step = target.div_ceil(align).max(1) * align;
    let mut out = Vec::new();
    for s in spans {
        let mut off = 0;
        while off < s.len {
            let len = step.min(s.len - off);
            out.push(Span {
                gpa: s.gpa + off as u64,
                host: s.host + off,
                len,
            });
            off += len;
        }
    }
    out
}

/// Runs `work` on every chunk from `threads` workers (chunks handed out in
/// address order; the driver is `hostmem::parallel`); stops at the first
/// error, which is returned. `progress` gets `(bytes done, total)` after
/// each chunk, monotonically.
pub(crate) fn parallel<F>(
    chunks: &[Span],
    threads: usize,
    progress: Option<&(dyn Fn(u64, u64) + Sync)>,
    work: F,
) -> Result<(), Error>
where
    F: Fn(&Span) -> Result<(), Error> + Sync,
{
    let total: u64 = chunks.iter().map(|c| c.len as u64).sum();
    // Counted and reported under one lock, so reports are monotonic.
    let done = Mutex::new(0u64);
    hostmem::parallel(chunks, threads, |c| {
        work(c)?;
        if let Some(p) = progress {
            let mut d = done.lock().unwrap_or_else(|e| e.into_inner());
            *d += c.len as u64;
            p(*d, total);
        }
        Ok(())
    })
}

/// `madvise(MADV_POPULATE_WRITE)` one chunk: faults every page in writable
/// (the kernel clears it) and reports failure as an error instead of the
/// SIGBUS/silent skip of touching or `MAP_POPULATE`.
pub(crate) fn populate_write(c: &Span) -> Result<(), Error> {
    // SAFETY: the span lies inside a live mapping owned by the caller;
    // MADV_POPULATE_WRITE does not change contents of present pages.
    unsafe { hostmem::populate_write(c.host as *mut u8, c.len) }
        .map_err(|source| Error::Prefault { gpa: c.gpa, source })
}

/// Number of workers for `threads` (0 = all CPUs).
pub(crate) fn worker_count(threads: usize) -> usize {
    if threads > 0 {
        threads
    } else {
        std::thread::available_parallelism().map_or(1, |n| n.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_resolves_from_table_and_explicit_wins() {
        for (k, m) in PREFAULT_TABLE {
            assert_eq!(resolve(k, PrefaultMethod::Auto), m);
            assert_eq!(resolve(k, PrefaultMethod::Nt), PrefaultMethod::Nt);
            assert_eq!(
                resolve(k, PrefaultMethod::Populate),
                PrefaultMethod::Populate
            );
        }
    }

    #[test]
    fn chunks_cover_exactly_and_stay_page_aligned() {
        let spans = [
            Span {
                gpa: 0,
                host: 0x1000_0000,
                len: 5 << 21,
            },
            Span {
                gpa: 1 << 32,
                host: 0x9000_0000,
                len: 3 << 21,
            },
        ];
        let c = chunks(&spans, 2 << 20, 3 << 20);
        assert!(c.iter().all(|c| c.len % (2 << 20) == 0 && c.len <= 4 << 20));
        assert_eq!(c.iter().map(|c| c.len).sum::<usize>(), 8 << 21);
        assert_eq!(c[0].gpa, 0);
        assert_eq!(
            c.last().unwrap().gpa + c.last().unwrap().len as u64,
            (1 << 32) + (3 << 21)
        );
    }

    #[test]
    fn parallel_reports_progress_and_first_error() {
        let spans: Vec<Span> = (0..64)
            .map(|i| Span {
                gpa: i << 12,
                host: 0,
                len: 4096,
            })
            .collect();
        let seen = Mutex::new(Vec::new());
        let p = |d: u64, t: u64| seen.lock().unwrap().push((d, t));
        parallel(&spans, 4, Some(&p), |_| Ok(())).unwrap();
        let seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 64);
        assert!(seen.windows(2).all(|w| w[0].0 < w[1].0));
        assert_eq!(*seen.last().unwrap(), (64 * 4096, 64 * 4096));

        let e = parallel(&spans, 3, None, |c| {
            if c.gpa == 5 << 12 {
                Err(Error::Prefault {
                    gpa: c.gpa,
                    source: std::io::Error::from_raw_os_error(libc::ENOMEM),
                })
            } else {
                Ok(())
            }
        })
        .unwrap_err();
        assert!(matches!(e, Error::Prefault { gpa: 0x5000, .. }));
    }

    #[test]
    fn populate_error_is_an_error_not_a_signal() {
        // A PROT_NONE mapping cannot be populated for write: EFAULT/ENOMEM,
        // never SIGSEGV/SIGBUS.
        let m = hostmem::Mapping::anonymous(1 << 20)
            .prot(hostmem::Prot::None)
            .map()
            .unwrap();
        let r = populate_write(&Span {
            gpa: 0x4000,
            host: m.as_ptr() as usize,
            len: 1 << 20,
        });
        drop(m);
        assert!(
            matches!(r, Err(Error::Prefault { gpa: 0x4000, .. })),
            "{r:?}"
        );
    }
}
