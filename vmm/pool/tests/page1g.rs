//! `--page 1G`: a pool of 1 GiB hugetlb pages, leased, filled, returned,
//! replaced and leased again, every byte scanned. Needs root to reserve one
//! 1 GiB page (put back afterwards, also on failure); prints SKIP and why
//! where the page cannot be had (not root, or memory too fragmented for
//! the kernel to find 1 GiB contiguous).

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use pool::memory::first_nonzero;
use pool::PageSize;

const NR: &str = "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages";
const FREE: &str = "/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages";

fn read(p: &str) -> Option<u64> {
    std::fs::read_to_string(p).ok()?.trim().parse().ok()
}

/// Puts `nr_hugepages` back to what it was.
struct Restore(u64);

impl Drop for Restore {
    fn drop(&mut self) {
        let _ = std::fs::write(NR, self.0.to_string());
    }
}

/// One free 1 GiB page, or the reason there is none.
fn reserve_one() -> Result<Option<Restore>, String> {
    let (Some(nr), Some(free)) = (read(NR), read(FREE)) else {
        return Err("this kernel has no 1 GiB hugepage pool (hugepages-1048576kB)".into());
    };
    if free >= 1 {
        return Ok(None);
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("no free 1 GiB page and reserving one needs root".into());
    }
    let restore = Restore(nr);
    std::fs::write(NR, (nr + 1).to_string()).map_err(|e| format!("writing {NR}: {e}"))?;
    if read(FREE).unwrap_or(0) < 1 {
        // Once more after the kernel compacts memory (1 GiB contiguous is
        // rare on a long-running host).
        let _ = std::fs::write("/proc/sys/vm/compact_memory", "1");
        let _ = std::fs::write(NR, (nr + 1).to_string());
    }
    if read(FREE).unwrap_or(0) < 1 {
        return Err(format!(
            "the kernel could not allocate a 1 GiB page at run time (nr_hugepages {nr} -> {}): memory too fragmented even after compaction; boot with hugepagesz=1G hugepages=1",
            read(NR).unwrap_or(0)
        ));
    }
    Ok(Some(restore))
}

fn lease_and_scan(socket: &Path, fill: u8) {
    let l = pool::client::lease(socket, 1 << 30, PageSize::Size1G).expect("a 1G lease");
    let mut m = l.map(false).unwrap();
    assert_eq!(m.as_slice().len(), 1 << 30);
    if let Some(off) = first_nonzero(m.as_slice(), 0) {
        panic!("1G lease: byte {:#x} at {off:#x}", m.as_slice()[off]);
    }
    m.as_mut_slice().fill(fill);
}

#[test]
fn a_1g_page_pool_leases_zeroed_memory_and_replaces_it() {
    let _restore = match reserve_one() {
        Ok(r) => r,
        Err(why) => {
            testsupport::skip("HUGEPAGE_1G", format!("--page 1G: {why}"));
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("pool.sock");
    let mut child = Command::new(common::bin())
        .args(["serve", "--socket"])
        .arg(&socket)
        .args([
            "--size",
            "1G",
            "--region-size",
            "1G",
            "--page",
            "1G",
            "--verify",
        ])
        .env_remove("ZEROSTART_POOL_FAULT")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut clean = |n: u64| {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Ok(s) = pool::client::status(&socket) {
                if s.clean_bytes == 1 << 30 && s.scrubbed_bytes >= n << 30 {
                    assert_eq!(s.page, PageSize::Size1G);
                    return;
                }
            }
            if let Some(st) = child.try_wait().unwrap() {
                panic!("the 1G daemon exited: {st}");
            }
            assert!(Instant::now() < deadline, "the 1G pool never became clean");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    clean(1);
    lease_and_scan(&socket, 0xe1);
    // The returned 1 GiB page is punched and a new one populated: only
    // possible because the old one went back first (one page reserved).
    clean(2);
    lease_and_scan(&socket, 0xe2);
    let _ = child.kill();
    let _ = child.wait();
}
