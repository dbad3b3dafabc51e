//! The counters of a hugetlb pool in sysfs, and growing it for a while.
//!
//! `nr_hugepages` is global machine state: whoever grows it must give
//! back exactly what they added (the current count minus their pages, so
//! someone else's concurrent change survives) on every path.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::PageSize;

/// The sysfs directory of the pool of `page`-sized hugepages
/// (`/sys/kernel/mm/hugepages/hugepages-<kB>kB`).
pub fn dir(page: PageSize) -> PathBuf {
    PathBuf::from(format!(
        "/sys/kernel/mm/hugepages/hugepages-{}kB",
        page.bytes() >> 10
    ))
}

/// One pool's counters, in pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    /// `nr_hugepages`: the pool's size.
    pub total: u64,
    /// `free_hugepages`: not in use, including those promised to
    /// existing mappings.
    pub free: u64,
    /// `resv_hugepages`: promised to existing mappings, not yet faulted.
    pub reserved: u64,
}

impl Counters {
    /// Pages a new mapping can get: free minus promised.
    pub fn unclaimed(&self) -> u64 {
        self.free.saturating_sub(self.reserved)
    }
}

fn read_u64(path: &Path) -> io::Result<u64> {
    std::fs::read_to_string(path)?.trim().parse().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {e}", path.display()),
        )
    })
}

/// The counters of the pool at `dir` (a real or fake sysfs directory).
/// An error names the file that could not be read.
pub fn counters_in(dir: &Path) -> Result<Counters, (PathBuf, io::Error)> {
    let rd = |name: &str| {
        let p = dir.join(name);
        read_u64(&p).map_err(|e| (p, e))
    };
    Ok(Counters {
        total: rd("nr_hugepages")?,
        free: rd("free_hugepages")?,
        reserved: rd("resv_hugepages")?,
    })
}

/// The counters of the `page` pool of this machine; `None` for 4K or a
/// kernel without that pool.
pub fn counters(page: PageSize) -> Option<Counters> {
    if !page.is_huge() {
        return None;
    }
    counters_in(&dir(page)).ok()
}

/// Free `page` hugepages now (0 if unknown).
pub fn free(page: PageSize) -> u64 {
    counters(page).map_or(0, |c| c.free)
}

/// Configured `page` hugepages (0 if unknown).
pub fn total(page: PageSize) -> u64 {
    counters(page).map_or(0, |c| c.total)
}

/// Pages added by live [`Reservation`]s: `(nr_hugepages path, pages)`,
/// for a signal handler that must give them back before exiting.
static ADDED: Mutex<Vec<(PathBuf, u64)>> = Mutex::new(Vec::new());

/// Removes `added` pages from the pool whose `nr_hugepages` is `nr`.
fn give_back(nr: &Path, added: u64) {
    if let Ok(cur) = read_u64(nr) {
        let _ = std::fs::write(nr, cur.saturating_sub(added).to_string());
    }
}

/// Gives back every page live reservations added (for a Ctrl-C or
/// SIGTERM handler that exits next); returns how many.
pub fn give_back_all() -> u64 {
    let mut added = ADDED.lock().unwrap_or_else(|p| p.into_inner());
    let n = added.iter().map(|a| a.1).sum();
    for (nr, pages) in added.drain(..) {
        give_back(&nr, pages);
    }
    n
}

/// Enough unclaimed hugepages for one mapping, for as long as it lives:
/// the pool is grown by the shortfall if needed (and allowed), and exactly
/// that many pages are given back on drop.
#[derive(Debug)]
pub struct Reservation {
    nr: PathBuf,
    added: u64,
}

impl Reservation {
    /// Makes `pages` unclaimed `page` hugepages available: uses those
    /// there are if enough; otherwise, when `may_grow`, grows the pool by
    /// the shortfall (needs root). Returns why not when it cannot.
    pub fn acquire(page: PageSize, pages: u64, may_grow: bool) -> Result<Reservation, String> {
        Self::acquire_in(&dir(page), page, pages, may_grow)
    }

    /// [`Reservation::acquire`] on the pool at `dir` (tests use a fake one).
    pub fn acquire_in(
        dir: &Path,
        page: PageSize,
        pages: u64,
        may_grow: bool,
    ) -> Result<Reservation, String> {
        let size = crate::human(page.bytes());
        let nr = dir.join("nr_hugepages");
        // Free pages include those promised to existing mappings
        // (resv_hugepages): only the rest can back a new mapping.
        let Ok(c) = counters_in(dir) else {
            return Err(format!("no {size} hugepage pool at {}", dir.display()));
        };
        let (old, free) = (c.total, c.unclaimed());
        if free >= pages {
            return Ok(Reservation { nr, added: 0 });
        }
        if !may_grow {
            return Err(format!(
                "{free} free {size} hugepages, {pages} needed (not reserving: --no-hugepage-reserve)"
            ));
        }
        let want = old + (pages - free);
        // Record the intent before writing, so a signal in between still
        // restores; fixed up with the real count below.
        let mut added = ADDED.lock().unwrap_or_else(|p| p.into_inner());
        added.push((nr.clone(), 0));
        let slot = added.len() - 1;
        if let Err(e) = std::fs::write(&nr, want.to_string()) {
            added.pop();
            return Err(format!(
                "cannot grow the hugepage pool ({}: {e}); run as root or reserve {pages} pages first",
                nr.display()
            ));
        }
        let got = read_u64(&nr).unwrap_or(old).saturating_sub(old);
        added[slot].1 = got;
        drop(added);
        let res = Reservation { nr, added: got };
        let free = counters_in(dir).map_or(0, |c| c.unclaimed());
        if free < pages {
            // Dropping `res` gives back what was added.
            return Err(format!(
                "only {free} of {pages} {size} hugepages could be reserved (memory fragmented?)"
            ));
        }
        Ok(res)
    }

    /// Pages this reservation added to the pool (0 when enough were free
    /// already).
    pub fn added(&self) -> u64 {
        self.added
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.added == 0 {
            return;
        }
        let mut added = ADDED.lock().unwrap_or_else(|p| p.into_inner());
        // Unless a signal handler gave them back already.
        if let Some(i) = added
            .iter()
            .position(|a| a.0 == self.nr && a.1 == self.added)
        {
            added.remove(i);
            give_back(&self.nr, self.added);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for a hugepage size's sysfs directory, removed on drop.
    fn fake_pool(nr: u64, free: u64) -> tempfile::TempDir {
        let d = tempfile::Builder::new()
            .prefix("hostmem-pool-")
            .tempdir()
            .unwrap();
        std::fs::write(d.path().join("nr_hugepages"), format!("{nr}\n")).unwrap();
        std::fs::write(d.path().join("free_hugepages"), format!("{free}\n")).unwrap();
        std::fs::write(d.path().join("resv_hugepages"), "0\n").unwrap();
        d
    }

    const P: PageSize = PageSize::Size2M;
    /// Tests that touch the global list of added pages run one at a time.
    static SERIAL: Mutex<()> = Mutex::new(());

    #[test]
    fn counters_and_paths() {
        assert_eq!(
            dir(PageSize::Size1G),
            PathBuf::from("/sys/kernel/mm/hugepages/hugepages-1048576kB")
        );
        let pool = fake_pool(10, 7);
        let d = pool.path();
        std::fs::write(d.join("resv_hugepages"), "3").unwrap();
        let c = counters_in(d).unwrap();
        assert_eq!((c.total, c.free, c.reserved, c.unclaimed()), (10, 7, 3, 4));
        std::fs::remove_file(d.join("free_hugepages")).unwrap();
        let (path, _) = counters_in(d).unwrap_err();
        assert!(path.ends_with("free_hugepages"));
        assert_eq!(counters(PageSize::Size4K), None);
    }

    #[test]
    fn enough_free_pages_changes_nothing() {
        let pool = fake_pool(10, 10);
        let d = pool.path();
        let r = Reservation::acquire_in(d, P, 8, true).unwrap();
        assert_eq!(r.added(), 0);
        drop(r);
        assert_eq!(read_u64(&d.join("nr_hugepages")).ok(), Some(10));
    }

    #[test]
    fn grows_and_restores_keeping_others_changes() {
        let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        // A fake pool: the "kernel" here does not update free_hugepages,
        // so acquiring reports the shortfall, and must still restore.
        let pool = fake_pool(4, 1);
        let d = pool.path();
        let e = Reservation::acquire_in(d, P, 3, true).unwrap_err();
        assert!(e.contains("only 1 of 3"), "{e}");
        assert_eq!(read_u64(&d.join("nr_hugepages")).ok(), Some(4));

        // Dropping gives back only our pages: others' later changes survive.
        let nr = d.join("nr_hugepages");
        ADDED.lock().unwrap().push((nr.clone(), 2));
        let r = Reservation {
            nr: nr.clone(),
            added: 2,
        };
        std::fs::write(&nr, "11").unwrap(); // 4 + our 2 + their 5
        drop(r);
        assert_eq!(read_u64(&nr).ok(), Some(9), "their 5 pages survive");
    }

    #[test]
    fn a_signal_handler_gives_back_once() {
        let _s = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
        let pool = fake_pool(4, 1);
        let d = pool.path();
        let nr = d.join("nr_hugepages");
        ADDED.lock().unwrap().push((nr.clone(), 2));
        let r = Reservation {
            nr: nr.clone(),
            added: 2,
        };
        std::fs::write(&nr, "6").unwrap();
        assert!(give_back_all() >= 2);
        assert_eq!(read_u64(&nr).ok(), Some(4));
        drop(r);
        assert_eq!(read_u64(&nr).ok(), Some(4), "not given back twice");
    }

    #[test]
    fn pages_promised_to_others_do_not_count() {
        let pool = fake_pool(10, 10);
        let d = pool.path();
        std::fs::write(d.join("resv_hugepages"), "6").unwrap();
        let e = Reservation::acquire_in(d, P, 8, false).unwrap_err();
        assert!(e.contains("4 free"), "{e}");
        assert!(Reservation::acquire_in(d, P, 4, false).is_ok());
    }

    #[test]
    fn refusal_and_missing_pool_are_reasons() {
        let pool = fake_pool(0, 0);
        let d = pool.path();
        let e = Reservation::acquire_in(d, P, 2, false).unwrap_err();
        assert!(e.contains("--no-hugepage-reserve"), "{e}");
        let e = Reservation::acquire_in(Path::new("/nonexistent"), P, 2, true).unwrap_err();
        assert!(e.contains("no 2 MiB hugepage pool"), "{e}");
    }
}
