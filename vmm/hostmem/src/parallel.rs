//! The chunked parallel driver.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

/// A piece of a range: `offset` from its start, `len` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// Offset from the start of the range.
    pub offset: usize,
    /// Length in bytes.
    pub len: usize,
}

impl Chunk {
    /// `len` bytes cut into chunks of about `target` bytes, each a multiple
    /// of `align` (the backing page size, so no page is touched by two
    /// workers) except possibly the last.
    pub fn split(len: usize, align: usize, target: usize) -> Vec<Chunk> {
        let step = target.div_ceil(align.max(1)).max(1) * align.max(1);
        (0..len)
            .step_by(step)
            .map(|offset| Chunk {
                offset,
                len: step.min(len - offset),
            })
            .collect()
    }
}

/// Runs `work` on every item from `threads` workers (the caller is one of
/// them; at most one worker per item). Workers take items in order from a
/// shared counter, so a slow CPU or a preempted worker takes fewer. The
/// first error stops every worker before its next item and is returned;
/// items after it may not have run.
pub fn parallel<T, E, F>(items: &[T], threads: usize, work: F) -> Result<(), E>
where
    T: Sync,
    E: Send,
    F: Fn(&T) -> Result<(), E> + Sync,
{
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let failed: Mutex<Option<E>> = Mutex::new(None);
    let threads = threads.clamp(1, items.len().max(1));
    let worker = || loop {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        let Some(item) = items.get(next.fetch_add(1, Ordering::Relaxed)) else {
            return;
        };
        if let Err(e) = work(item) {
            stop.store(true, Ordering::Relaxed);
            let mut f = failed.lock().unwrap_or_else(|p| p.into_inner());
            f.get_or_insert(e);
            return;
        }
    };
    std::thread::scope(|s| {
        for _ in 1..threads {
            s.spawn(worker);
        }
        worker();
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_exactly_and_aligned() {
        let c = Chunk::split(5 << 21, 2 << 20, 3 << 20);
        assert!(c.iter().all(|c| c.len == 4 << 20 || c == c));
        assert_eq!(c.iter().map(|c| c.len).sum::<usize>(), 5 << 21);
        assert!(c.iter().all(|c| c.offset % (2 << 20) == 0));
        assert_eq!(c[1].offset, 4 << 20);
        assert!(Chunk::split(0, 4096, 1 << 20).is_empty());
        assert_eq!(
            Chunk::split(10, 0, 0),
            (0..10)
                .map(|o| Chunk { offset: o, len: 1 })
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn every_item_once_and_first_error_stops() {
        let items: Vec<usize> = (0..1000).collect();
        let seen = Mutex::new(Vec::new());
        parallel(&items, 4, |&i| {
            seen.lock().unwrap().push(i);
            Ok::<(), ()>(())
        })
        .unwrap();
        let mut seen = seen.into_inner().unwrap();
        seen.sort_unstable();
        assert_eq!(seen, items);

        let ran = AtomicUsize::new(0);
        let e = parallel(&items, 3, |&i| {
            ran.fetch_add(1, Ordering::Relaxed);
            if i == 5 {
                Err(i)
            } else {
                Ok(())
            }
        });
        assert_eq!(e, Err(5));
        assert!(
            ran.load(Ordering::Relaxed) < 1000,
            "the error stopped the workers"
        );
        assert_eq!(parallel(&[] as &[u8], 8, |_| Err::<(), ()>(())), Ok(()));
    }
}
