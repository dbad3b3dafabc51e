//! Splitting a zeroing job into granule-aligned chunks and deciding which
//! worker (and which NUMA node) takes each one.
//!
//! Pure logic with the machine described by [`Topology`], so it can be
//! tested with made-up NUMA layouts on a one-node machine.

/// One contiguous piece of a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Start address.
    pub addr: usize,
    /// Length in bytes.
    pub len: usize,
}

/// A NUMA node: its id and the CPUs the process may run on there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub id: usize,
    pub cpus: Vec<usize>,
}

impl From<&hostmem::numa::Node> for Node {
    fn from(n: &hostmem::numa::Node) -> Node {
        Node {
            id: n.id,
            cpus: n.cpus.clone(),
        }
    }
}

/// The NUMA layout seen by the process. Fewer than two nodes means
/// NUMA placement is a no-op.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Topology {
    pub nodes: Vec<Node>,
}

impl Topology {
    /// Whether placement by node can matter.
    pub fn is_numa(&self) -> bool {
        self.nodes.len() > 1
    }
}

/// One worker thread of a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Worker {
    /// Queue index it serves first (a node queue, or the shared queue).
    pub home: usize,
    /// CPUs to pin to; `None` leaves the scheduler free.
    pub cpus: Option<Vec<usize>>,
}

/// A complete schedule: work queues and the workers that drain them.
///
/// Queues `0..n` hold the chunks whose memory lives on node `n`'s index
/// in the topology; the last queue holds chunks with no known node
/// (not faulted in yet, or a one-node machine). A worker drains its home
/// queue, then the shared queue, then steals from the others, so no
/// worker idles while work remains.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    pub queues: Vec<Vec<Chunk>>,
    pub workers: Vec<Worker>,
}

impl Plan {
    /// Index of the shared queue.
    pub fn shared(&self) -> usize {
        self.queues.len() - 1
    }

    /// Total bytes in the plan.
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.queues.iter().flatten().map(|c| c.len as u64).sum()
    }
}

/// Below this many bytes per worker, an extra thread costs more (spawn,
/// page-walk warm-up) than it saves.
pub(crate) const MIN_PER_WORKER: usize = 2 << 20;
/// Chunks are no smaller than this (unless the span is) ...
const MIN_CHUNK: usize = 2 << 20;
/// ... and no larger, so progress is reported often and work balances.
pub(crate) const MAX_CHUNK: usize = 64 << 20;

/// Number of workers worth using for `total` bytes with at most `threads`.
pub(crate) fn worker_count(total: usize, threads: usize) -> usize {
    threads.max(1).min((total / MIN_PER_WORKER).max(1))
}

/// Chunk size for `total` bytes over `workers`: about four chunks per
/// worker for balance, clamped, and a multiple of the granule.
pub(crate) fn chunk_size(total: usize, workers: usize, granule: usize) -> usize {
    let want = (total / (workers * 4)).clamp(MIN_CHUNK, MAX_CHUNK);
    want.div_ceil(granule).max(1) * granule
}

/// Cuts every span at multiples of `step` (a multiple of the granule), so
/// no granule-sized page is ever shared by two chunks.
pub(crate) fn split_spans(spans: &[(usize, usize)], step: usize) -> Vec<Chunk> {
    let mut out = Vec::new();
    for &(addr, len) in spans {
        let end = addr + len;
        let mut cur = addr;
        while cur < end {
            let next = (cur / step + 1).saturating_mul(step).min(end);
            out.push(Chunk {
                addr: cur,
                len: next - cur,
            });
            cur = next;
        }
    }
    out
}

/// Builds the schedule.
///
/// * `threads`: the most workers to use.
/// * `granule`: chunk alignment in bytes (the backing page size).
/// * `pin`: pin each worker to one CPU of `allowed` (or of its node).
/// * `allowed`: CPUs the process may use (sched_getaffinity).
/// * `node_of`: NUMA node id owning an address, if known. Only called on
///   NUMA machines.
pub(crate) fn make_plan(
    spans: &[(usize, usize)],
    threads: usize,
    granule: usize,
    pin: bool,
    topo: &Topology,
    allowed: &[usize],
    node_of: &dyn Fn(usize) -> Option<usize>,
) -> Plan {
    let total: usize = spans.iter().map(|s| s.1).sum();
    let workers = worker_count(total, threads);
    let chunks = split_spans(spans, chunk_size(total, workers, granule));

    if !topo.is_numa() {
        let pin_to = |i: usize| -> Option<Vec<usize>> {
            (pin && !allowed.is_empty()).then(|| vec![allowed[i % allowed.len()]])
        };
        return Plan {
            queues: vec![chunks],
            workers: (0..workers)
                .map(|i| Worker {
                    home: 0,
                    cpus: pin_to(i),
                })
                .collect(),
        };
    }

    // One queue per node plus the shared one.
    let n = topo.nodes.len();
    let mut queues: Vec<Vec<Chunk>> = vec![Vec::new(); n + 1];
    for c in chunks {
        let q = node_of(c.addr)
            .and_then(|id| topo.nodes.iter().position(|nd| nd.id == id))
            .unwrap_or(n);
        queues[q].push(c);
    }

    // Workers per node in proportion to the bytes each node will hold:
    // its own, plus a CPU-proportional share of the unplaced bytes (first
    // touch puts those on the toucher's node). Every node with weight gets
    // at least one worker; the total never exceeds the budget; leftovers go
    // to the heaviest nodes first.
    let bytes: Vec<u128> = queues[..n]
        .iter()
        .map(|q| q.iter().map(|c| c.len as u128).sum())
        .collect();
    let unknown: u128 = queues[n].iter().map(|c| c.len as u128).sum();
    let all_cpus: u128 = topo.nodes.iter().map(|nd| nd.cpus.len() as u128).sum();
    let weight: Vec<u128> = (0..n)
        .map(|i| bytes[i] + unknown * topo.nodes[i].cpus.len() as u128 / all_cpus.max(1))
        .collect();
    let total_w: u128 = weight.iter().sum();
    let mut per_node = vec![0usize; n];
    for i in 0..n {
        if weight[i] > 0 {
            let share = (workers as u128 * weight[i]).checked_div(total_w);
            per_node[i] = (share.unwrap_or(0) as usize).max(1);
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(weight[i]));
    while per_node.iter().sum::<usize>() > workers {
        // Take from the lightest node that has a worker.
        let i = *order.iter().rev().find(|&&i| per_node[i] > 0).unwrap();
        per_node[i] -= 1;
    }
    let mut k = 0;
    while per_node.iter().sum::<usize>() < workers {
        per_node[order[k % n]] += 1;
        k += 1;
    }

    let mut ws = Vec::with_capacity(workers);
    for (i, node) in topo.nodes.iter().enumerate() {
        let cpus: Vec<usize> = node
            .cpus
            .iter()
            .copied()
            .filter(|c| allowed.is_empty() || allowed.contains(c))
            .collect();
        for j in 0..per_node[i] {
            let pinned = if cpus.is_empty() {
                None
            } else if pin {
                Some(vec![cpus[j % cpus.len()]])
            } else {
                Some(cpus.clone())
            };
            ws.push(Worker {
                home: i,
                cpus: pinned,
            });
        }
    }
    Plan {
        queues,
        workers: ws,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const M: usize = 1 << 20;
    const G: usize = 1 << 30;

    fn covered(plan: &Plan) -> Vec<(usize, usize)> {
        let mut cs: Vec<Chunk> = plan.queues.iter().flatten().copied().collect();
        cs.sort_by_key(|c| c.addr);
        // Merge adjacent chunks back into spans.
        let mut out: Vec<(usize, usize)> = Vec::new();
        for c in cs {
            match out.last_mut() {
                Some(last) if last.0 + last.1 == c.addr => last.1 += c.len,
                _ => out.push((c.addr, c.len)),
            }
        }
        out
    }

    fn two_nodes() -> Topology {
        Topology {
            nodes: vec![
                Node {
                    id: 0,
                    cpus: vec![0, 1],
                },
                Node {
                    id: 1,
                    cpus: vec![2, 3],
                },
            ],
        }
    }

    #[test]
    fn chunks_are_granule_aligned_and_exact() {
        let spans = [(3 * M + 4096 + 7, 40 * M + 5), (8 * G, 3 * M)];
        for granule in [4096, 2 * M] {
            let p = make_plan(
                &spans,
                4,
                granule,
                false,
                &Topology::default(),
                &[],
                &|_| None,
            );
            assert_eq!(covered(&p), spans.to_vec());
            for c in p.queues.iter().flatten() {
                // Interior boundaries are granule aligned.
                let end = c.addr + c.len;
                let is_span_end = spans.iter().any(|s| s.0 + s.1 == end);
                let is_span_start = spans.iter().any(|s| s.0 == c.addr);
                assert!(is_span_end || end % granule == 0, "{c:?}");
                assert!(is_span_start || c.addr % granule == 0, "{c:?}");
            }
        }
    }

    #[test]
    fn small_jobs_use_one_worker() {
        let p = make_plan(
            &[(4096, 4096)],
            8,
            4096,
            false,
            &Topology::default(),
            &[],
            &|_| None,
        );
        assert_eq!(p.workers.len(), 1);
        assert_eq!(
            p.queues[0],
            vec![Chunk {
                addr: 4096,
                len: 4096
            }]
        );
        assert_eq!(worker_count(3 * M, 8), 1);
        assert_eq!(worker_count(4 * M, 8), 2);
        assert_eq!(worker_count(G, 2), 2);
        assert_eq!(worker_count(G, 0), 1);
    }

    #[test]
    fn one_node_is_a_no_op() {
        let topo = Topology {
            nodes: vec![Node {
                id: 0,
                cpus: vec![0, 1],
            }],
        };
        let p = make_plan(&[(0, G)], 2, 2 * M, false, &topo, &[0, 1], &|_| {
            panic!("node lookup on a one-node machine")
        });
        assert_eq!(p.queues.len(), 1);
        assert!(p.workers.iter().all(|w| w.cpus.is_none()));
        let p = make_plan(&[(0, G)], 2, 2 * M, true, &topo, &[0, 1], &|_| None);
        assert_eq!(p.workers[0].cpus, Some(vec![0]));
        assert_eq!(p.workers[1].cpus, Some(vec![1]));
    }

    #[test]
    fn fake_two_node_topology_places_chunks_on_their_node() {
        let topo = two_nodes();
        // Lower 4 GiB on node 0, upper 4 GiB on node 1.
        let node_of = |a: usize| Some(usize::from(a >= 4 * G));
        let p = make_plan(
            &[(0, 8 * G)],
            4,
            2 * M,
            false,
            &topo,
            &[0, 1, 2, 3],
            &node_of,
        );
        assert_eq!(p.queues.len(), 3);
        assert!(p.queues[0].iter().all(|c| c.addr + c.len <= 4 * G));
        assert!(p.queues[1].iter().all(|c| c.addr >= 4 * G));
        assert!(p.queues[2].is_empty());
        assert_eq!(p.bytes(), 8 * G as u64);
        let homes: Vec<usize> = p.workers.iter().map(|w| w.home).collect();
        assert_eq!(homes, vec![0, 0, 1, 1]);
        assert_eq!(p.workers[0].cpus, Some(vec![0, 1]));
        assert_eq!(p.workers[3].cpus, Some(vec![2, 3]));

        // Pinned: one CPU each, within the node.
        let p = make_plan(
            &[(0, 8 * G)],
            4,
            2 * M,
            true,
            &topo,
            &[0, 1, 2, 3],
            &node_of,
        );
        let cpus: Vec<_> = p.workers.iter().map(|w| w.cpus.clone().unwrap()).collect();
        assert_eq!(cpus, vec![vec![0], vec![1], vec![2], vec![3]]);
    }

    #[test]
    fn lopsided_and_unknown_nodes() {
        let topo = two_nodes();
        // 1/8 on node 1, rest unknown (not faulted in yet).
        let node_of = |a: usize| (a >= 7 * G).then_some(1);
        let p = make_plan(&[(0, 8 * G)], 2, 2 * M, false, &topo, &[], &node_of);
        assert_eq!(p.workers.len(), 2);
        assert!(p.queues[0].is_empty());
        assert!(!p.queues[1].is_empty());
        assert!(!p.queues[2].is_empty());
        // Node 1 owns memory, node 0 will own the unplaced part: one each.
        let homes: Vec<usize> = p.workers.iter().map(|w| w.home).collect();
        assert_eq!(homes, vec![0, 1]);
        // A node id the topology does not know goes to the shared queue.
        let p = make_plan(&[(0, G)], 2, 2 * M, false, &topo, &[], &|_| Some(9));
        assert_eq!(p.queues[2].len(), p.queues.iter().flatten().count());
        assert_eq!(p.workers.len(), 2);
    }

    #[test]
    fn one_worker_many_nodes_never_exceeds_budget() {
        let topo = two_nodes();
        let node_of = |a: usize| Some(usize::from(a >= 4 * M));
        let p = make_plan(&[(0, 8 * M)], 1, 2 * M, false, &topo, &[], &node_of);
        assert_eq!(p.workers.len(), 1);
    }

    #[test]
    fn cpulist() {
        assert_eq!(
            hostmem::numa::parse_cpulist("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(hostmem::numa::parse_cpulist(""), Some(vec![]));
        assert_eq!(hostmem::numa::parse_cpulist("3-1"), None);
        assert_eq!(hostmem::numa::parse_cpulist("x"), None);
    }
}
