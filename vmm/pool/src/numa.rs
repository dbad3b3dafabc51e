//! NUMA placement of regions: which node each region's memory lives on,
//! and which CPUs prepare it.
//!
//! Why: a VM pinned to one socket wants its RAM on that socket's node, and
//! zeroing memory from a far node's CPUs costs the interconnect twice.
//! Regions are dealt round-robin over the nodes that have CPUs; a lease may
//! ask for a node ([`crate::client::lease_on_node`]); the scrub worker of a
//! region runs on that node's CPUs and binds the region's file to the node
//! (`mbind(MPOL_BIND)` on the daemon's mapping sets the file's shared
//! policy, which the kernel's allocation in `fallocate` follows).
//!
//! The node layout comes from `/sys/devices/system/node`; tests point the
//! daemon at a fake tree with `ZEROSTART_POOL_NODES_SYSFS` (test switch
//! only), as prezero's `numa.rs` tests its reader.

use std::path::Path;

/// Environment variable naming a fake `/sys/devices/system/node` (tests;
/// needs `ZEROSTART_TEST_SWITCHES=1`).
pub const FAKE_SYSFS_ENV: &str = "ZEROSTART_POOL_NODES_SYSFS";

/// One NUMA node with CPUs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Node id.
    pub id: usize,
    /// Its CPUs.
    pub cpus: Vec<usize>,
}

/// Parses a sysfs cpulist (`0-3,8,10-11`); `None` if malformed.
pub fn parse_cpulist(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.parse().ok()?, b.parse().ok()?);
                if a > b {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    Some(out)
}

/// Nodes with CPUs under `root` (a `/sys/devices/system/node` tree),
/// sorted by id; one node 0 with no CPU list if there is no such tree.
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
        // Memory-only nodes (CXL, PMEM) have no CPUs to scrub from.
        .filter(|n| !n.cpus.is_empty())
        .collect();
    nodes.sort_by_key(|n| n.id);
    if nodes.is_empty() {
        nodes.push(Node {
            id: 0,
            cpus: Vec::new(),
        });
    }
    nodes
}

/// The node of region `index`: round-robin over `nodes`.
pub fn node_of_region(nodes: &[Node], index: usize) -> &Node {
    &nodes[index % nodes.len()]
}

/// Pins the calling thread to `cpus` (best effort: an empty list, or CPUs
/// the cgroup forbids, leave it where it is; locality, never safety).
pub fn pin_current_thread(cpus: &[usize]) {
    if cpus.is_empty() {
        return;
    }
    // SAFETY: cpu_set_t is plain data; CPU_SET is bounds-checked below.
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

/// Whether `node` is a node of this machine (a fake topology may name
/// nodes that are not).
pub fn node_exists(node: usize) -> bool {
    Path::new(&format!("/sys/devices/system/node/node{node}")).exists()
}

/// Binds `[ptr, ptr + len)` (a shared file mapping) to `node`: the file's
/// pages are allocated there from now on.
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
    }

    #[test]
    fn a_fake_tree_deals_regions_round_robin() {
        let dir = tempfile::tempdir().unwrap();
        for (n, list) in [("node1", "2-3\n"), ("node0", "0-1\n"), ("node2", "\n")] {
            std::fs::create_dir_all(dir.path().join(n)).unwrap();
            std::fs::write(dir.path().join(n).join("cpulist"), list).unwrap();
        }
        std::fs::create_dir_all(dir.path().join("power")).unwrap();
        let nodes = read_nodes(dir.path());
        // node2 has no CPUs (memory only): not used.
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
        let placed: Vec<usize> = (0..5).map(|i| node_of_region(&nodes, i).id).collect();
        assert_eq!(placed, vec![0, 1, 0, 1, 0]);
        assert_eq!(node_of_region(&nodes, 3).cpus, vec![2, 3]);
        // No tree at all: one node, no pinning.
        let none = read_nodes(&dir.path().join("missing"));
        assert_eq!(
            none,
            vec![Node {
                id: 0,
                cpus: vec![]
            }]
        );
    }

    #[test]
    fn this_machine_binds_to_node_0() {
        let nodes = read_nodes(Path::new("/sys/devices/system/node"));
        assert!(!nodes.is_empty());
        if !node_exists(0) {
            println!("SKIP: no /sys/devices/system/node/node0");
            return;
        }
        let m =
            crate::memory::RegionMemory::memfd("numa", 4 << 20, crate::PageSize::Size4K).unwrap();
        m.bind_node(0).unwrap();
        m.prepare_fresh(true, 0, false).unwrap();
    }
}
