//! The host's NUMA topology and the syscalls that use it: the sysfs node
//! walk, cpulists, CPU pinning, the node of a page and binding a mapping
//! to a node.
//!
//! Both the engine (`prezero`: a chunk runs on its memory's node) and the
//! pool (a region is filled by its node's CPUs) read the same tree; a
//! fake tree (any directory laid out like `/sys/devices/system/node`)
//! tests the placement logic on a one-node machine.

use std::path::Path;
use std::sync::OnceLock;

/// Where the kernel describes the nodes.
pub const SYSFS_NODES: &str = "/sys/devices/system/node";

/// One NUMA node with CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Node id.
    pub id: usize,
    /// Its CPUs, ascending.
    pub cpus: Vec<usize>,
}

/// Parses a sysfs CPU list such as `0-3,8,10-11` (an empty list is
/// empty); `None` if malformed.
pub fn parse_cpulist(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if b < a {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// The nodes with CPUs under `root` (a `/sys/devices/system/node` tree),
/// sorted by id; empty when there is no such tree. Memory-only nodes
/// (CXL, PMEM) have no CPU to run a worker on and are left out.
pub fn read_nodes(root: &Path) -> Vec<Node> {
    let mut nodes: Vec<Node> = std::fs::read_dir(root)
        .into_iter()
        .flatten()
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
        .filter(|n| !n.cpus.is_empty())
        .collect();
    nodes.sort_by_key(|n| n.id);
    nodes
}

/// This machine's nodes ([`read_nodes`] of [`SYSFS_NODES`]), read once
/// per process.
pub fn system_nodes() -> &'static [Node] {
    static NODES: OnceLock<Vec<Node>> = OnceLock::new();
    NODES.get_or_init(|| read_nodes(Path::new(SYSFS_NODES)))
}

/// Whether `node` is a node of this machine (a fake topology may name
/// nodes that are not).
pub fn node_exists(node: usize) -> bool {
    Path::new(SYSFS_NODES).join(format!("node{node}")).exists()
}

/// CPUs this process may run on (respects taskset and cgroups); empty if
/// the kernel will not say.
pub fn allowed_cpus() -> Vec<usize> {
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

/// Pins the calling thread to `cpus`. Best effort: an empty list leaves
/// it where it is, and a CPU that went offline or a cgroup that forbids
/// it only costs locality, never correctness, so errors are ignored.
pub fn pin_current_thread(cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET's index is bounds-checked.
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
/// `move_pages(2)` with a null `nodes` array only reports: it moves
/// nothing and, unlike `get_mempolicy(MPOL_F_ADDR)`, does not fault the
/// page in.
pub fn node_of(addr: usize) -> Option<usize> {
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

/// Binds `[ptr, ptr + len)` to `node` (`mbind(MPOL_BIND)`): pages
/// allocated for it from now on come from that node; for a shared file
/// mapping this sets the file's policy, which `fallocate` follows.
///
/// # Safety
/// `[ptr, ptr + len)` must be a mapping the caller owns (mbind changes its
/// policy; it never touches the bytes).
pub unsafe fn bind(ptr: *mut u8, len: usize, node: usize) -> std::io::Result<()> {
    let bits = 8 * std::mem::size_of::<libc::c_ulong>();
    let mut mask = vec![0 as libc::c_ulong; node / bits + 1];
    mask[node / bits] |= 1 << (node % bits);
    const MPOL_BIND: libc::c_int = 2;
    // SAFETY: the caller's mapping; the mask holds maxnode bits.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mbind,
            ptr,
            len,
            MPOL_BIND,
            mask.as_ptr(),
            (mask.len() * bits) as libc::c_ulong,
            0 as libc::c_uint,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpulists_parse() {
        assert_eq!(
            parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpulist("\n"), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("x"), None);
        assert_eq!(parse_cpulist("1-"), None);
    }

    #[test]
    fn a_fake_tree() {
        let dir = std::env::temp_dir().join(format!("hostmem-topo-{}", std::process::id()));
        for (n, list) in [("node1", "2-3\n"), ("node0", "0-1\n"), ("node2", "\n")] {
            std::fs::create_dir_all(dir.join(n)).unwrap();
            std::fs::write(dir.join(n).join("cpulist"), list).unwrap();
        }
        std::fs::create_dir_all(dir.join("power")).unwrap();
        let nodes = read_nodes(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(
            nodes,
            vec![
                Node {
                    id: 0,
                    cpus: vec![0, 1]
                },
                Node {
                    id: 1,
                    cpus: vec![2, 3]
                }
            ]
        );
        assert!(read_nodes(Path::new("/nonexistent")).is_empty());
    }

    #[test]
    fn this_machine() {
        if Path::new(SYSFS_NODES).join("node0").exists() {
            assert!(!system_nodes().is_empty());
            assert!(node_exists(0));
            let v = vec![1u8; 1 << 16];
            assert!(node_of(v.as_ptr() as usize).is_some());
        } else {
            testsupport::skip("NUMA", format!("the node checks: no {SYSFS_NODES}/node0"));
        }
        assert!(!node_exists(1 << 20));
        // An address nobody mapped has no node.
        assert_eq!(node_of(4096), None);
        assert!(!allowed_cpus().is_empty());
        pin_current_thread(&[]);
    }
}
