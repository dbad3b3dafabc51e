//! Walking the boot protocol's `setup_data` list without trusting it: the
//! list lives in guest memory the VMM wrote, so every pointer is checked
//! before it is read, nodes may not overlap (which also catches loops) and
//! the walk stops after [`MAX_NODES`].

use crate::bootparams::{le32, le64};
use crate::verdict::Failure;

/// Most nodes followed; a longer list is reported, not walked.
pub const MAX_NODES: usize = 64;
/// `struct setup_data` header: `next` (u64), `type` (u32), `len` (u32).
pub const HEADER_SIZE: u64 = 16;
/// `SETUP_INDIRECT`: the node's data describes another blob elsewhere.
pub const SETUP_INDIRECT: u32 = 1 << 31;

/// One node's header and where it lies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Node {
    /// Position in the list, from 0.
    pub index: usize,
    /// Address of the header.
    pub addr: u64,
    /// `type`.
    pub kind: u32,
    /// `len`: bytes of data after the header.
    pub len: u32,
}

impl Node {
    /// Address of the data.
    pub fn data(&self) -> u64 {
        self.addr + HEADER_SIZE
    }

    /// Exclusive end of the data.
    pub fn end(&self) -> u64 {
        self.data() + u64::from(self.len)
    }
}

/// Walks the list starting at `first` (0 = empty list). `mem(addr, len)`
/// returns the bytes of a span the caller deems readable, or `None`.
/// `visit` sees each node after its whole extent was found readable and
/// disjoint from the nodes before it; its error ends the walk. Returns the
/// number of nodes.
pub fn walk<'m>(
    first: u64,
    mem: impl Fn(u64, u64) -> Option<&'m [u8]>,
    mut visit: impl FnMut(&Node) -> Result<(), Failure>,
) -> Result<usize, Failure> {
    let mut seen = [(0u64, 0u64); MAX_NODES];
    let mut n = 0;
    let mut addr = first;
    while addr != 0 {
        if n == MAX_NODES {
            return Err(Failure::SetupDataTooMany { max: MAX_NODES });
        }
        let hdr = mem(addr, HEADER_SIZE).ok_or(Failure::SetupDataBadPointer { index: n, addr })?;
        let next = le64(hdr, 0);
        let kind = le32(hdr, 8);
        let len = le32(hdr, 12);
        let total = HEADER_SIZE + u64::from(len);
        if mem(addr, total).is_none() {
            return Err(Failure::SetupDataBadLength {
                index: n,
                addr,
                len,
            });
        }
        let end = addr.saturating_add(total);
        if let Some(&(s, _)) = seen[..n].iter().find(|&&(s, e)| s < end && addr < e) {
            return Err(if s == addr {
                Failure::SetupDataLoop { index: n, addr }
            } else {
                Failure::SetupDataOverlap { index: n, addr }
            });
        }
        seen[n] = (addr, end);
        visit(&Node {
            index: n,
            addr,
            kind,
            len,
        })?;
        n += 1;
        addr = next;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fake guest memory: `size` bytes at guest-physical 0.
    struct Mem(Vec<u8>);

    impl Mem {
        fn node(&mut self, addr: u64, next: u64, kind: u32, data: &[u8]) {
            let a = addr as usize;
            self.0[a..a + 8].copy_from_slice(&next.to_le_bytes());
            self.0[a + 8..a + 12].copy_from_slice(&kind.to_le_bytes());
            self.0[a + 12..a + 16].copy_from_slice(&(data.len() as u32).to_le_bytes());
            self.0[a + 16..a + 16 + data.len()].copy_from_slice(data);
        }

        fn get(&self, addr: u64, len: u64) -> Option<&[u8]> {
            let end = addr.checked_add(len)?;
            self.0
                .get(usize::try_from(addr).ok()?..usize::try_from(end).ok()?)
        }
    }

    fn collect(m: &Mem, first: u64) -> Result<Vec<Node>, Failure> {
        let mut v = Vec::new();
        walk(
            first,
            |a, l| m.get(a, l),
            |n| {
                v.push(*n);
                Ok(())
            },
        )?;
        Ok(v)
    }

    #[test]
    fn empty_list() {
        let m = Mem(vec![0; 0x1000]);
        assert_eq!(collect(&m, 0).unwrap(), vec![]);
    }

    #[test]
    fn walks_in_order() {
        let mut m = Mem(vec![0; 0x10000]);
        m.node(0x1000, 0x3000, 7, b"abc");
        m.node(0x3000, 0x2000, 0x5a48_0001, &[1; 56]);
        m.node(0x2000, 0, 1, b"");
        let v = collect(&m, 0x1000).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!((v[0].addr, v[0].kind, v[0].len), (0x1000, 7, 3));
        assert_eq!(
            (v[1].addr, v[1].kind, v[1].len, v[1].index),
            (0x3000, 0x5a48_0001, 56, 1)
        );
        assert_eq!(v[1].data(), 0x3010);
        assert_eq!(v[1].end(), 0x3048);
        assert_eq!(v[2].addr, 0x2000);
    }

    #[test]
    fn loops_are_caught() {
        let mut m = Mem(vec![0; 0x10000]);
        m.node(0x1000, 0x2000, 1, b"x");
        m.node(0x2000, 0x1000, 1, b"y");
        assert_eq!(
            collect(&m, 0x1000).unwrap_err(),
            Failure::SetupDataLoop {
                index: 2,
                addr: 0x1000
            }
        );
        m.node(0x3000, 0x3000, 1, b"self");
        assert_eq!(
            collect(&m, 0x3000).unwrap_err(),
            Failure::SetupDataLoop {
                index: 1,
                addr: 0x3000
            }
        );
    }

    #[test]
    fn overlapping_nodes_are_caught() {
        let mut m = Mem(vec![0; 0x10000]);
        m.node(0x1000, 0x1008, 1, &[0; 32]);
        // 0x1008 is inside the first node's data; its header is whatever
        // bytes are there: make it a terminating node.
        assert_eq!(
            collect(&m, 0x1000).unwrap_err(),
            Failure::SetupDataOverlap {
                index: 1,
                addr: 0x1008
            }
        );
    }

    #[test]
    fn bad_pointers_and_lengths_are_caught() {
        let mut m = Mem(vec![0; 0x10000]);
        m.node(0x1000, 0x20_0000, 1, b"x");
        assert_eq!(
            collect(&m, 0x1000).unwrap_err(),
            Failure::SetupDataBadPointer {
                index: 1,
                addr: 0x20_0000
            }
        );
        assert_eq!(
            collect(&m, 0xfff8).unwrap_err(),
            Failure::SetupDataBadPointer {
                index: 0,
                addr: 0xfff8
            }
        );
        m.node(0xff00, 0, 1, b"");
        m.0[0xff0c..0xff10].copy_from_slice(&0xffff_ffffu32.to_le_bytes());
        assert_eq!(
            collect(&m, 0xff00).unwrap_err(),
            Failure::SetupDataBadLength {
                index: 0,
                addr: 0xff00,
                len: 0xffff_ffff
            }
        );
    }

    #[test]
    fn too_many_nodes() {
        let mut m = Mem(vec![0; 0x10000]);
        for i in 0..=MAX_NODES as u64 {
            m.node(0x100 * (i + 1), 0x100 * (i + 2), 1, b"");
        }
        assert_eq!(
            collect(&m, 0x100).unwrap_err(),
            Failure::SetupDataTooMany { max: MAX_NODES }
        );
        // Exactly MAX_NODES is fine.
        m.node(0x100 * MAX_NODES as u64, 0, 1, b"");
        assert_eq!(collect(&m, 0x100).unwrap().len(), MAX_NODES);
    }

    #[test]
    fn visit_error_stops_the_walk() {
        let mut m = Mem(vec![0; 0x10000]);
        m.node(0x1000, 0x2000, 1, b"");
        m.node(0x2000, 0, 2, b"");
        let mut seen = 0;
        let r = walk(
            0x1000,
            |a, l| m.get(a, l),
            |_| {
                seen += 1;
                Err(Failure::MultipleHints {
                    first: 0,
                    second: 0,
                })
            },
        );
        assert!(r.is_err());
        assert_eq!(seen, 1);
    }
}
