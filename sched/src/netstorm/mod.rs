//! NetStorm: aggregation trees over a WAN overlay (docs/PAPERS.md,
//! "NetStorm", which rebuilds from the prose the algorithm boxes the
//! paper's text lacks).
//!
//! The overlay is an undirected graph of data centres; an edge's weight is
//! the delay of one chunk over that link (chunk bytes / measured throughput,
//! plus its latency). A tree's delay is its slowest leaf-to-root path
//! (Theorem 1), so the fastest aggregation path tree rooted at r (FAPT_r)
//! is the shortest-path tree toward r ([`fapt`], Dijkstra). Roots are the
//! top-k nodes by quality q_r = 1 / D(FAPT_r) ([`select_roots`]), and the
//! model's chunks ([`slice_tensors`]) are shared among them in proportion
//! to quality ([`chunk_quota`] by count, [`assign_chunks`] by parameters as
//! the authors' code does). [`auxiliary_paths`] is Algorithm 3: shortest paths
//! again and again with the used edges removed; [`dispatch_chunks`] is the
//! sender's rule that spills chunks onto them.
//!
//! Readings (the boxes are rebuilt from prose): q_r = 1 / D(FAPT_r);
//! Dijkstra instead of the code's exhaustive path search; quotas by largest
//! remainder so they sum to the chunk count exactly; a chunk is in flight
//! on a path from its dispatch until it arrives, and a phase's chunks are
//! dispatched together.
//!
//! Baselines: [`star`] (MXNet's parameter server), [`kway_tree`] (MLNet's
//! balanced tree, blind to the network), [`max_throughput_tree`]
//! (TSEngine's maximum-throughput spanning tree).
//!
//! The edge weights come from passive throughput estimation
//! ([`awareness::LinkRates`]), which the simulator and the live scheduler
//! feed with what their links carried.

pub mod awareness;

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// An undirected overlay edge.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Edge {
    pub a: usize,
    pub b: usize,
    /// Delay of one chunk over it, seconds (> 0).
    pub weight: f64,
}

/// The overlay.
#[derive(Debug, Clone, PartialEq)]
pub struct Graph {
    pub nodes: usize,
    pub edges: Vec<Edge>,
}

/// A rooted tree: `parent[v]` is v's next hop toward the root (None for the
/// root, and for nodes the tree does not reach).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    pub root: usize,
    pub parent: Vec<Option<usize>>,
}

impl Tree {
    /// v's children.
    pub fn children(&self, v: usize) -> Vec<usize> {
        (0..self.parent.len())
            .filter(|&c| self.parent[c] == Some(v))
            .collect()
    }

    /// Every node reaches the root.
    pub fn spans(&self) -> bool {
        (0..self.parent.len()).all(|v| self.path(v).is_some())
    }

    /// The nodes from v up to the root (None: v does not reach it).
    pub fn path(&self, v: usize) -> Option<Vec<usize>> {
        let mut out = vec![v];
        let mut at = v;
        while at != self.root {
            at = self.parent.get(at).copied().flatten()?;
            if out.len() > self.parent.len() {
                return None; // a cycle
            }
            out.push(at);
        }
        Some(out)
    }
}

impl Graph {
    /// A graph of `nodes` nodes and the undirected edges `(a, b, weight)`.
    pub fn new(nodes: usize, edges: &[(usize, usize, f64)]) -> Graph {
        Graph {
            nodes,
            edges: edges
                .iter()
                .map(|&(a, b, weight)| Edge { a, b, weight })
                .collect(),
        }
    }

    /// Neighbours of v with the edge weight.
    fn neighbours(&self, v: usize) -> impl Iterator<Item = (usize, f64)> + '_ {
        self.edges.iter().filter_map(move |e| match () {
            _ if e.a == v => Some((e.b, e.weight)),
            _ if e.b == v => Some((e.a, e.weight)),
            _ => None,
        })
    }

    /// The weight of edge {a, b}, if it exists.
    pub fn weight(&self, a: usize, b: usize) -> Option<f64> {
        self.edges
            .iter()
            .find(|e| (e.a == a && e.b == b) || (e.a == b && e.b == a))
            .map(|e| e.weight)
    }
}

#[derive(PartialEq)]
struct Item(f64, usize);
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        o.0.total_cmp(&self.0).then_with(|| o.1.cmp(&self.1))
    }
}

/// Dijkstra from `root`: each node's distance and its next hop toward root.
pub fn dijkstra(g: &Graph, root: usize) -> (Vec<f64>, Vec<Option<usize>>) {
    let mut dist = vec![f64::INFINITY; g.nodes];
    let mut next = vec![None; g.nodes];
    let mut heap = BinaryHeap::new();
    dist[root] = 0.0;
    heap.push(Item(0.0, root));
    while let Some(Item(d, v)) = heap.pop() {
        if d > dist[v] {
            continue;
        }
        for (u, w) in g.neighbours(v) {
            if d + w < dist[u] {
                dist[u] = d + w;
                next[u] = Some(v);
                heap.push(Item(d + w, u));
            }
        }
    }
    (dist, next)
}

/// FAPT_r: the shortest-path tree toward `root`.
pub fn fapt(g: &Graph, root: usize) -> Tree {
    Tree {
        root,
        parent: dijkstra(g, root).1,
    }
}

/// D(T): the slowest leaf-to-root path, summing edge weights (infinite if
/// a tree edge is not in the graph or a node is not reached).
pub fn tree_delay(g: &Graph, t: &Tree) -> f64 {
    (0..g.nodes)
        .map(|v| match t.path(v) {
            Some(p) => p
                .windows(2)
                .map(|h| g.weight(h[0], h[1]).unwrap_or(f64::INFINITY))
                .sum(),
            None => f64::INFINITY,
        })
        .fold(0.0, f64::max)
}

/// q_r = 1 / D(FAPT_r) for every node.
pub fn qualities(g: &Graph) -> Vec<f64> {
    (0..g.nodes)
        .map(|r| 1.0 / tree_delay(g, &fapt(g, r)))
        .collect()
}

/// The k best roots by quality (ties: the lower index).
pub fn select_roots(g: &Graph, k: usize) -> Vec<usize> {
    let q = qualities(g);
    let mut order: Vec<usize> = (0..g.nodes).collect();
    order.sort_by(|&a, &b| q[b].total_cmp(&q[a]).then(a.cmp(&b)));
    order.truncate(k.clamp(1, g.nodes.max(1)));
    order
}

/// Chunks per root in proportion to `quality` (largest remainder: the
/// quotas sum to `chunks`).
pub fn chunk_quota(chunks: usize, quality: &[f64]) -> Vec<usize> {
    let total: f64 = quality.iter().sum();
    if quality.is_empty() || total <= 0.0 || !total.is_finite() {
        let mut q = vec![0; quality.len()];
        if let Some(first) = q.first_mut() {
            *first = chunks;
        }
        return q;
    }
    let exact: Vec<f64> = quality.iter().map(|q| q / total * chunks as f64).collect();
    let mut quota: Vec<usize> = exact.iter().map(|x| x.floor() as usize).collect();
    let mut order: Vec<usize> = (0..quality.len()).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    let left = chunks - quota.iter().sum::<usize>();
    for &i in order.iter().take(left) {
        quota[i] += 1;
    }
    quota
}

/// The model cut into chunks: each tensor in slices of at most `chunk`
/// parameters (equal slices; a tensor no larger than `chunk` stays whole).
/// Sizes in parameters, in the model's order.
pub fn slice_tensors(tensors: &[u64], chunk: u64) -> Vec<u64> {
    let chunk = chunk.max(1);
    tensors
        .iter()
        .filter(|&&t| t > 0)
        .flat_map(|&t| {
            let n = t.div_ceil(chunk);
            (0..n).map(move |i| t / n + u64::from(i < t % n))
        })
        .collect()
}

/// The root (an index into `quality`) of every chunk, the way NetStorm's
/// code assigns them: each root's quota is ceil(q_r / sum q * parameters),
/// and the chunks go round-robin over the roots, skipping a root whose
/// quota is full. Coarse chunks therefore load roots unevenly, and with
/// fewer chunks than roots some roots get none (the paper's reason (c)
/// for small CHUNK_SIZE).
pub fn assign_chunks(chunks: &[u64], quality: &[f64]) -> Vec<usize> {
    let total: f64 = quality.iter().filter(|q| q.is_finite()).sum();
    if quality.is_empty() || total <= 0.0 {
        return vec![0; if quality.is_empty() { 0 } else { chunks.len() }];
    }
    let params: u64 = chunks.iter().sum();
    let quota: Vec<u64> = quality
        .iter()
        .map(|&q| {
            let q = if q.is_finite() { q.max(0.0) } else { 0.0 };
            (q / total * params as f64).ceil() as u64
        })
        .collect();
    let mut load = vec![0u64; quality.len()];
    let mut next = 0;
    chunks
        .iter()
        .map(|&c| {
            // The quotas' ceilings sum to at least `params`, so some root
            // always has room; the fallback only guards rounding.
            let r = (0..quality.len())
                .map(|i| (next + i) % quality.len())
                .find(|&r| load[r] < quota[r])
                .unwrap_or(next % quality.len());
            load[r] += c;
            next = r + 1;
            r
        })
        .collect()
}

/// The sender's rule for auxiliary transmission: the path (0 = primary,
/// 1.. = the auxiliary paths by increasing delay) each of `chunks` ready
/// chunks goes to. A chunk takes the primary path unless the primary
/// already holds more than `primary_busy_bound` chunks in flight; then it
/// takes the first auxiliary path holding fewer than `aux_queue_length`,
/// and the primary again when every auxiliary path is full. Chunks are
/// dispatched as they become ready, all at once here (a phase's chunks
/// are ready together), so nothing completes between two decisions.
pub fn dispatch_chunks(
    chunks: usize,
    aux_paths: usize,
    primary_busy_bound: usize,
    aux_queue_length: usize,
) -> Vec<usize> {
    let mut in_flight = vec![0usize; 1 + aux_paths];
    (0..chunks)
        .map(|_| {
            let path = if in_flight[0] > primary_busy_bound {
                (1..=aux_paths)
                    .find(|&a| in_flight[a] < aux_queue_length)
                    .unwrap_or(0)
            } else {
                0
            };
            in_flight[path] += 1;
            path
        })
        .collect()
}

/// The shortest path from `u` to `v` as nodes (None: unreachable).
pub fn shortest_path(g: &Graph, u: usize, v: usize) -> Option<Vec<usize>> {
    let (dist, next) = dijkstra(g, v);
    if !dist[u].is_finite() {
        return None;
    }
    let mut p = vec![u];
    while *p.last()? != v {
        p.push(next[*p.last()?]?);
    }
    Some(p)
}

/// Algorithm 3: the primary path u -> v, then each next-fastest path with
/// every edge used so far removed, up to `max` paths.
pub fn auxiliary_paths(g: &Graph, u: usize, v: usize, max: usize) -> Vec<Vec<usize>> {
    let mut rest = g.clone();
    let mut out = Vec::new();
    while out.len() < max {
        let Some(p) = shortest_path(&rest, u, v) else {
            break;
        };
        rest.edges.retain(|e| {
            !p.windows(2)
                .any(|h| (e.a == h[0] && e.b == h[1]) || (e.a == h[1] && e.b == h[0]))
        });
        out.push(p);
    }
    out
}

/// MXNet's star: every node's parent is the hub (whether or not an overlay
/// edge joins them: the transfer then crosses the underlay).
pub fn star(nodes: usize, hub: usize) -> Tree {
    Tree {
        root: hub,
        parent: (0..nodes).map(|v| (v != hub).then_some(hub)).collect(),
    }
}

/// MLNet's balanced k-way tree over node indices, rooted at `root`: blind
/// to the network.
pub fn kway_tree(nodes: usize, k: usize, root: usize) -> Tree {
    // Position 0 is the root; the others fill in index order.
    let order: Vec<usize> = std::iter::once(root)
        .chain((0..nodes).filter(|&v| v != root))
        .collect();
    let mut parent = vec![None; nodes];
    for (pos, &v) in order.iter().enumerate().skip(1) {
        parent[v] = Some(order[(pos - 1) / k.max(1)]);
    }
    Tree { root, parent }
}

/// TSEngine's maximum-throughput spanning tree (Prim over the overlay by
/// throughput; `throughput[e]` for `g.edges[e]`), rooted at `root`.
pub fn max_throughput_tree(g: &Graph, throughput: &[f64], root: usize) -> Tree {
    let mut parent = vec![None; g.nodes];
    let mut inside = vec![false; g.nodes];
    inside[root] = true;
    for _ in 1..g.nodes {
        let best = g
            .edges
            .iter()
            .zip(throughput)
            .filter(|(e, _)| inside[e.a] != inside[e.b])
            .max_by(|x, y| x.1.total_cmp(y.1));
        let Some((e, _)) = best else { break };
        let (new, old) = if inside[e.a] { (e.b, e.a) } else { (e.a, e.b) };
        parent[new] = Some(old);
        inside[new] = true;
    }
    Tree { root, parent }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A square 0-1-2-3-0 with a slow edge 0-1 and a diagonal 1-3.
    fn square() -> Graph {
        Graph::new(
            4,
            &[
                (0, 1, 10.0),
                (1, 2, 1.0),
                (2, 3, 1.0),
                (3, 0, 1.0),
                (1, 3, 5.0),
            ],
        )
    }

    #[test]
    fn fapt_avoids_the_slow_edge_and_is_no_worse_than_any_tree() {
        let g = square();
        let t = fapt(&g, 0);
        assert_eq!(t.parent, vec![None, Some(2), Some(3), Some(0)]);
        assert_eq!(tree_delay(&g, &t), 3.0);
        // The star needs edges that do not exist (0-2): infinite here.
        assert_eq!(tree_delay(&g, &star(4, 0)), f64::INFINITY);
        // Every spanning tree rooted at 0 over the graph's edges is slower.
        let other = Tree {
            root: 0,
            parent: vec![None, Some(0), Some(1), Some(0)],
        };
        assert!(tree_delay(&g, &other) > tree_delay(&g, &t));
    }

    #[test]
    fn roots_by_quality_and_quotas_sum() {
        let g = square();
        let q = qualities(&g);
        // Node 2 and 3 are central (delay 2 to the farthest... 3 -> 1 costs 2).
        let roots = select_roots(&g, 2);
        assert!(q[roots[0]] >= q[roots[1]]);
        assert!(roots.iter().all(|&r| q[r] >= q[0]));
        let quota = chunk_quota(61, &[3.0, 2.0, 1.0]);
        assert_eq!(quota.iter().sum::<usize>(), 61);
        assert_eq!(quota, vec![31, 20, 10]);
        assert_eq!(chunk_quota(5, &[]), Vec::<usize>::new());
    }

    #[test]
    fn tensors_slice_evenly_and_small_ones_stay_whole() {
        assert_eq!(slice_tensors(&[10, 3, 0, 7], 4), vec![4, 3, 3, 3, 4, 3]);
        assert_eq!(slice_tensors(&[5], 0), vec![1; 5]);
        let alexnet = slice_tensors(&[37_752_832, 4_097_000], 1_000_000);
        assert_eq!(alexnet.len(), 38 + 5);
        assert_eq!(alexnet.iter().sum::<u64>(), 41_849_832);
        assert!(alexnet.iter().all(|&c| c <= 1_000_000));
    }

    #[test]
    fn chunks_follow_quality_and_coarse_chunks_leave_roots_idle() {
        // 12 equal chunks, qualities 2:1:1: quotas 6, 3, 3 chunks' worth.
        let roots = assign_chunks(&[1; 12], &[2.0, 1.0, 1.0]);
        let count = |r| roots.iter().filter(|&&x| x == r).count();
        assert_eq!((count(0), count(1), count(2)), (6, 3, 3));
        // Two chunks for three roots: the third root gets nothing.
        let coarse = assign_chunks(&[10, 10], &[1.0, 1.0, 1.0]);
        assert_eq!(coarse, vec![0, 1]);
        assert!(assign_chunks(&[1, 2], &[]).is_empty());
        assert_eq!(assign_chunks(&[1, 2], &[0.0, 0.0]), vec![0, 0]);
    }

    #[test]
    fn chunks_spill_to_auxiliary_paths_only_when_the_primary_is_busy() {
        // Bound 2: three chunks on the primary before it counts as busy,
        // then one per auxiliary path (queue 1), then the primary again.
        assert_eq!(dispatch_chunks(7, 2, 2, 1), vec![0, 0, 0, 1, 2, 0, 0]);
        // A longer auxiliary queue takes more.
        assert_eq!(dispatch_chunks(6, 1, 1, 3), vec![0, 0, 1, 1, 1, 0]);
        // No auxiliary path, or too few chunks to make the primary busy.
        assert_eq!(dispatch_chunks(4, 0, 0, 5), vec![0; 4]);
        assert_eq!(dispatch_chunks(3, 2, 2, 5), vec![0; 3]);
    }

    #[test]
    fn auxiliary_paths_are_edge_disjoint_and_slower() {
        let g = square();
        let paths = auxiliary_paths(&g, 1, 3, 5);
        assert_eq!(paths[0], vec![1, 2, 3]);
        assert_eq!(paths[1], vec![1, 3]);
        assert_eq!(paths[2], vec![1, 0, 3]);
        assert_eq!(paths.len(), 3);
    }

    #[test]
    fn baseline_trees_span() {
        let g = square();
        assert!(kway_tree(9, 2, 4).spans());
        assert_eq!(
            kway_tree(5, 2, 0).parent,
            vec![None, Some(0), Some(0), Some(1), Some(1)]
        );
        let t = max_throughput_tree(&g, &[1.0, 10.0, 10.0, 1.0, 10.0], 0);
        assert!(t.spans());
        // One slow edge (0-3) in, then the fast ones: never the slow 0-1.
        assert_ne!(t.parent[1], Some(0));
        assert_eq!((0..4).filter(|&v| t.parent[v] == Some(0)).count(), 1);
    }
}
