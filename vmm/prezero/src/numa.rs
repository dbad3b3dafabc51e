//! The machine side of NUMA placement: the node layout from sysfs, the
//! node holding a page (move_pages in query mode) and CPU pinning.
//!
//! On a one-node machine (such as the 2-core development machine this was
//! written on) none of the node queries run: placement is a no-op.

use std::sync::OnceLock;

use crate::plan::{parse_cpulist, Node, Topology};

/// Reads `/sys/devices/system/node/node*/cpulist` once per process.
pub(crate) fn system_topology() -> &'static Topology {
    static TOPO: OnceLock<Topology> = OnceLock::new();
    TOPO.get_or_init(|| read_topology("/sys/devices/system/node"))
}

fn read_topology(root: &str) -> Topology {
    let Ok(dir) = std::fs::read_dir(root) else {
        return Topology::default();
    };
    let mut nodes: Vec<Node> = dir
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let id: usize = name.strip_prefix("node")?.parse().ok()?;
            let list = std::fs::read_to_string(e.path().join("cpulist")).ok()?;
            Some(Node {
                id,
                cpus: parse_cpulist(&list)?,
            })
        })
        // Memory-only nodes (CXL, PMEM) have no CPUs to run a worker on;
        // their chunks fall into the shared queue.
        .filter(|n| !n.cpus.is_empty())
        .collect();
    nodes.sort_by_key(|n| n.id);
    Topology { nodes }
}

/// CPUs this process may run on (respects taskset and cgroups).
pub(crate) fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Vec::new();
        }
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins the calling thread to `cpus`. Best effort: a CPU that went
/// offline or a cgroup that forbids it only costs locality, never
/// correctness, so errors are ignored.
pub(crate) fn pin_current_thread(cpus: &[usize]) {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks the index.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        let _ = libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// The node holding the page at `addr`, or `None` when it is not faulted
/// in (first touch will place it) or the query fails.
///
/// `move_pages(2)` with a null `nodes` array only reports, it moves
/// nothing and, unlike `get_mempolicy(MPOL_F_ADDR)`, does not fault the
/// page in.
pub(crate) fn node_of(addr: usize) -> Option<usize> {
    let page = (addr & !4095) as *mut libc::c_void;
    let mut pages = [page];
    let mut status: [libc::c_int; 1] = [-1];
    // SAFETY: one page pointer, one status slot, no nodes array: query mode.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0 as libc::pid_t,
            1 as libc::c_ulong,
            pages.as_mut_ptr(),
            std::ptr::null::<libc::c_int>(),
            status.as_mut_ptr(),
            0 as libc::c_int,
        )
    };
    (rc == 0 && status[0] >= 0).then_some(status[0] as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_machine() {
        let t = system_topology();
        // Every machine has at least one node with CPUs when sysfs is there.
        if std::path::Path::new("/sys/devices/system/node/node0").exists() {
            assert!(!t.nodes.is_empty());
            assert!(t.nodes.iter().all(|n| !n.cpus.is_empty()));
        }
        assert!(!allowed_cpus().is_empty());
    }

    #[test]
    fn fake_sysfs_tree() {
        let dir = std::env::temp_dir().join(format!("prezero-topo-{}", std::process::id()));
        for (n, list) in [("node1", "2-3\n"), ("node0", "0-1\n"), ("node2", "\n")] {
            std::fs::create_dir_all(dir.join(n)).unwrap();
            std::fs::write(dir.join(n).join("cpulist"), list).unwrap();
        }
        std::fs::create_dir_all(dir.join("power")).unwrap();
        let t = read_topology(dir.to_str().unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(t.nodes.len(), 2, "{t:?}");
        assert_eq!(
            t.nodes[0],
            Node {
                id: 0,
                cpus: vec![0, 1]
            }
        );
        assert_eq!(
            t.nodes[1],
            Node {
                id: 1,
                cpus: vec![2, 3]
            }
        );
        assert!(t.is_numa());
        assert_eq!(read_topology("/nonexistent"), Topology::default());
    }

    #[test]
    fn node_of_touched_and_untouched_pages() {
        let mut v = vec![1u8; 1 << 16];
        v[0] = 2;
        // A touched heap page is on some node (node 0 here) ...
        let n = node_of(v.as_ptr() as usize);
        // (move_pages exists only with CONFIG_NUMA, which also makes sysfs
        // node directories.)
        if std::path::Path::new("/sys/devices/system/node/node0").exists() {
            assert!(n.is_some());
        }
        // ... an address nobody mapped has none.
        assert_eq!(node_of(4096), None);
    }
}
