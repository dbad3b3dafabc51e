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

pub use hostmem::numa::{bind, node_exists, parse_cpulist, pin_current_thread, Node};

/// Environment variable naming a fake `/sys/devices/system/node` (tests;
/// needs `ZEROSTART_TEST_SWITCHES=1`).
pub const FAKE_SYSFS_ENV: &str = "ZEROSTART_POOL_NODES_SYSFS";

/// Nodes with CPUs under `root` (a `/sys/devices/system/node` tree),
/// sorted by id; one node 0 with no CPU list if there is no such tree
/// (the pool always has somewhere to put a region).
pub fn read_nodes(root: &Path) -> Vec<Node> {
    let mut nodes = hostmem::numa::read_nodes(root);
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

#[cfg(test)]
mod tests {
    use super::*;

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
            testsupport::skip("NUMA", "no /sys/devices/system/node/node0");
            return;
        }
        let m =
            crate::memory::RegionMemory::memfd("numa", 4 << 20, crate::PageSize::Size4K).unwrap();
        m.bind_node(0).unwrap();
        m.prepare_fresh(true, 0, false).unwrap();
    }
}
