//! Temporarily reserving 2 MiB hugetlb pages for the hugetlb populate
//! measurement, and always giving them back.
//!
//! The pool size is global machine state (`nr_hugepages`). The guard
//! removes exactly the pages it added (current count minus those), so a
//! concurrent change by someone else survives, and it does so on drop
//! (normal end, errors, panics) and from a Ctrl-C / SIGTERM handler.

use std::path::PathBuf;
use std::sync::Mutex;

/// sysfs directory of the 2 MiB pool (independent of the default size).
const POOL: &str = "/sys/kernel/mm/hugepages/hugepages-2048kB";

/// Pages this process added and must remove, for the signal handler.
static ADDED: Mutex<Option<(PathBuf, u64)>> = Mutex::new(None);

fn read_u64(path: &PathBuf) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Removes `added` pages from the pool at `nr`.
fn give_back(nr: &PathBuf, added: u64) {
    if let Some(cur) = read_u64(nr) {
        let _ = std::fs::write(nr, cur.saturating_sub(added).to_string());
    }
}

/// Installs (once) a Ctrl-C / SIGTERM handler that gives reserved pages
/// back and exits 130. If the host program already owns those signals, the
/// drop guard still covers every other path.
fn install_handler() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = ctrlc::set_handler(|| {
            if let Some((nr, added)) = ADDED.lock().ok().and_then(|g| g.clone()) {
                give_back(&nr, added);
                eprintln!("zerobench: interrupted; gave back {added} reserved hugepages");
            }
            std::process::exit(130);
        });
    });
}

/// Enough free 2 MiB hugepages for one mapping, reserved for as long as
/// it lives.
#[derive(Debug)]
pub(crate) struct Reservation {
    nr: PathBuf,
    added: u64,
}

impl Reservation {
    /// Makes `pages` free 2 MiB pages available. Uses free pages if there
    /// are enough; otherwise, when `may_grow`, grows the pool by the
    /// shortfall (needs root). Returns why not when it cannot.
    pub(crate) fn acquire(pages: u64, may_grow: bool) -> Result<Reservation, String> {
        Self::acquire_in(PathBuf::from(POOL), pages, may_grow)
    }

    fn acquire_in(pool: PathBuf, pages: u64, may_grow: bool) -> Result<Reservation, String> {
        let nr = pool.join("nr_hugepages");
        // Free pages include those promised to existing mappings
        // (resv_hugepages): only the rest can back a new mapping.
        let unclaimed = || {
            let free = read_u64(&pool.join("free_hugepages"))?;
            let resv = read_u64(&pool.join("resv_hugepages")).unwrap_or(0);
            Some(free.saturating_sub(resv))
        };
        let (Some(old), Some(free)) = (read_u64(&nr), unclaimed()) else {
            return Err(format!("no 2 MiB hugepage pool at {}", pool.display()));
        };
        if free >= pages {
            return Ok(Reservation { nr, added: 0 });
        }
        if !may_grow {
            return Err(format!(
                "{free} free 2 MiB hugepages, {pages} needed (not reserving: --no-hugepage-reserve)"
            ));
        }
        let want = old + (pages - free);
        install_handler();
        // Record the intent before writing, so a signal in between still
        // restores; fixed up with the real count below.
        let mut guard = ADDED.lock().unwrap_or_else(|e| e.into_inner());
        *guard = Some((nr.clone(), 0));
        if let Err(e) = std::fs::write(&nr, want.to_string()) {
            *guard = None;
            return Err(format!(
                "cannot grow the hugepage pool ({}: {e}); run as root or reserve {pages} pages first",
                nr.display()
            ));
        }
        let now = read_u64(&nr).unwrap_or(old);
        let added = now.saturating_sub(old);
        *guard = Some((nr.clone(), added));
        drop(guard);
        let res = Reservation { nr, added };
        let free = unclaimed().unwrap_or(0);
        if free < pages {
            // Dropping `res` gives back what was added.
            return Err(format!(
                "only {free} of {pages} 2 MiB hugepages could be reserved (memory fragmented?)"
            ));
        }
        Ok(res)
    }

    /// Pages added to the pool (0 when enough were free already).
    pub(crate) fn added(&self) -> u64 {
        self.added
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.added > 0 {
            give_back(&self.nr, self.added);
            let mut guard = ADDED.lock().unwrap_or_else(|e| e.into_inner());
            *guard = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_pool(nr: u64, free: u64) -> PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let d = std::env::temp_dir().join(format!(
            "zerobench-pool-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("nr_hugepages"), format!("{nr}\n")).unwrap();
        std::fs::write(d.join("free_hugepages"), format!("{free}\n")).unwrap();
        std::fs::write(d.join("resv_hugepages"), "0\n").unwrap();
        d
    }

    #[test]
    fn enough_free_pages_changes_nothing() {
        let d = fake_pool(10, 10);
        let r = Reservation::acquire_in(d.clone(), 8, true).unwrap();
        assert_eq!(r.added(), 0);
        drop(r);
        assert_eq!(read_u64(&d.join("nr_hugepages")), Some(10));
    }

    #[test]
    fn grows_and_restores_keeping_others_changes() {
        // A fake pool: the "kernel" here does not update free_hugepages,
        // so acquiring reports the shortfall, and must still restore.
        let d = fake_pool(4, 1);
        let e = Reservation::acquire_in(d.clone(), 3, true).unwrap_err();
        assert!(e.contains("only 1 of 3"), "{e}");
        assert_eq!(read_u64(&d.join("nr_hugepages")), Some(4));

        // Dropping gives back only our pages: others' later changes survive.
        let nr = d.join("nr_hugepages");
        let r = Reservation {
            nr: nr.clone(),
            added: 2,
        };
        std::fs::write(&nr, "11").unwrap(); // 4 + our 2 + their 5
        drop(r);
        assert_eq!(read_u64(&nr), Some(9), "their 5 pages survive");
    }

    #[test]
    fn pages_promised_to_others_do_not_count() {
        let d = fake_pool(10, 10);
        std::fs::write(d.join("resv_hugepages"), "6").unwrap();
        let e = Reservation::acquire_in(d.clone(), 8, false).unwrap_err();
        assert!(e.contains("4 free"), "{e}");
        assert!(Reservation::acquire_in(d, 4, false).is_ok());
    }

    #[test]
    fn refusal_and_missing_pool_are_reasons() {
        let d = fake_pool(0, 0);
        let e = Reservation::acquire_in(d, 2, false).unwrap_err();
        assert!(e.contains("--no-hugepage-reserve"), "{e}");
        let e = Reservation::acquire_in(PathBuf::from("/nonexistent"), 2, true).unwrap_err();
        assert!(e.contains("no 2 MiB hugepage pool"), "{e}");
    }
}
