//! The machine side of NUMA placement: the node layout from sysfs, the
//! node holding a page (move_pages in query mode) and CPU pinning.
//!
//! On a one-node machine (such as the 2-core development machine this was
//! written on) none of the node queries run: placement is a no-op.

//! The sysfs walk, pinning and the page query are `hostmem::numa`'s
//! (shared with the pool); this module turns them into the plan's
//! [`Topology`].

use std::path::Path;
use std::sync::OnceLock;

pub(crate) use hostmem::numa::{allowed_cpus, node_of, pin_current_thread};

use crate::plan::{Node, Topology};

/// This machine's topology, read once per process.
pub(crate) fn system_topology() -> &'static Topology {
    static TOPO: OnceLock<Topology> = OnceLock::new();
    TOPO.get_or_init(|| read_topology(hostmem::numa::SYSFS_NODES))
}

fn read_topology(root: &str) -> Topology {
    Topology {
        nodes: hostmem::numa::read_nodes(Path::new(root))
            .iter()
            .map(Node::from)
            .collect(),
    }
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
