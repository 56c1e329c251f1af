//! The WAN overlays NetStorm runs on: the paper's 9-DC Internet2-like
//! backbone, and generated backbones of any size for the 5-15 DC scaling
//! experiment (Fig. 19b).

use inagg_sched::netstorm::{self as ns, Edge, Graph};
use rand::Rng;

use crate::dist::SimRng;

/// Seattle 0, Los Angeles 1, Salt Lake City 2, Denver 3, Kansas City 4,
/// Houston 5, Chicago 6, Atlanta 7, New York 8 (a simplified Internet2
/// backbone; the seed lost the paper's figure).
const INTERNET2: [(usize, usize); 12] = [
    (0, 1),
    (0, 2),
    (1, 2),
    (1, 5),
    (2, 3),
    (3, 4),
    (4, 5),
    (4, 6),
    (5, 7),
    (6, 7),
    (6, 8),
    (7, 8),
];

/// Links per node in the Internet2 stand-in (12 / 9), kept by the
/// generator so that larger overlays are as sparse.
const LINKS_PER_NODE: f64 = 12.0 / 9.0;
/// The generator's cap on a node's links (Internet2's busiest have 3-4).
const MAX_DEGREE: usize = 4;

/// Data centres and the overlay links between them (undirected; link `e`
/// is directed link `2e` from `.0` to `.1` and `2e + 1` back).
#[derive(Debug, Clone, PartialEq)]
pub struct Topology {
    pub nodes: usize,
    pub links: Vec<(usize, usize)>,
}

impl Topology {
    /// The paper's 9-DC setup (stand-in).
    pub fn internet2() -> Topology {
        Topology {
            nodes: 9,
            links: INTERNET2.to_vec(),
        }
    }

    /// A backbone of `nodes` data centres placed at random on a 2:1
    /// continent: the minimum spanning tree of their distances, then for
    /// every node with one link its shortest spare one, then the shortest
    /// spare links between nodes with fewer than four links, up to
    /// Internet2's 4/3 links per node. Connected by construction.
    pub fn generate(nodes: usize, rng: &mut SimRng) -> Topology {
        let at: Vec<(f64, f64)> = (0..nodes)
            .map(|_| (rng.random::<f64>() * 2.0, rng.random::<f64>()))
            .collect();
        let dist = |a: usize, b: usize| (at[a].0 - at[b].0).hypot(at[a].1 - at[b].1);
        let mut links = spanning_tree(nodes, &dist);
        let mut degree = vec![0; nodes];
        for &(a, b) in &links {
            degree[a] += 1;
            degree[b] += 1;
        }
        let mut spare: Vec<(usize, usize)> = (0..nodes)
            .flat_map(|a| (a + 1..nodes).map(move |b| (a, b)))
            .filter(|p| !links.contains(p))
            .collect();
        spare.sort_by(|x, y| dist(x.0, x.1).total_cmp(&dist(y.0, y.1)));
        let target = (nodes as f64 * LINKS_PER_NODE).round() as usize;
        // First every node gets a second link (no DC hangs off one link,
        // as none does in Internet2), then the shortest spare links.
        let mut add =
            |links: &mut Vec<(usize, usize)>, (a, b): (usize, usize), only_leaves: bool| {
                let wanted = !only_leaves || degree[a] < 2 || degree[b] < 2;
                let room = degree[a] < MAX_DEGREE && degree[b] < MAX_DEGREE;
                if wanted && room && !links.contains(&(a, b)) {
                    links.push((a, b));
                    degree[a] += 1;
                    degree[b] += 1;
                }
            };
        for &pair in &spare {
            add(&mut links, pair, true);
        }
        for &pair in &spare {
            if links.len() >= target {
                break;
            }
            add(&mut links, pair, false);
        }
        Topology { nodes, links }
    }

    /// The overlay weighted for NetStorm: a chunk's delay over each link
    /// (`chunk_bytes / rate + latency`), rates per link in bytes/s.
    pub fn graph(&self, rates: &[f64], chunk_bytes: f64, latency: f64) -> Graph {
        Graph {
            nodes: self.nodes,
            edges: self
                .links
                .iter()
                .zip(rates)
                .map(|(&(a, b), &r)| Edge {
                    a,
                    b,
                    weight: chunk_bytes / r + latency,
                })
                .collect(),
        }
    }

    /// Every link one hop: the fewest-hop paths IP routing would take.
    pub fn hops(&self) -> Graph {
        self.graph(&vec![f64::INFINITY; self.links.len()], 0.0, 1.0)
    }

    /// The directed links along a node path (consecutive nodes must be
    /// neighbours; a pair that is not is skipped).
    pub fn links_of(&self, path: &[usize]) -> Vec<usize> {
        path.windows(2)
            .filter_map(|h| {
                self.links.iter().enumerate().find_map(|(e, &(a, b))| {
                    if (a, b) == (h[0], h[1]) {
                        Some(2 * e)
                    } else if (a, b) == (h[1], h[0]) {
                        Some(2 * e + 1)
                    } else {
                        None
                    }
                })
            })
            .collect()
    }

    /// The most central node by hops (the star's hub, a single tree's
    /// root, the scheduler's site); ties go to the lower index.
    pub fn hub(&self) -> usize {
        let ecc = self.eccentricities();
        (0..self.nodes)
            .min_by(|&a, &b| ecc[a].total_cmp(&ecc[b]).then(a.cmp(&b)))
            .unwrap_or(0)
    }

    /// Each node's hop count to its farthest node.
    pub fn eccentricities(&self) -> Vec<f64> {
        let hops = self.hops();
        (0..self.nodes)
            .map(|r| ns::dijkstra(&hops, r).0.into_iter().fold(0.0, f64::max))
            .collect()
    }
}

/// Prim's minimum spanning tree under `dist`, as links (a < b).
fn spanning_tree(nodes: usize, dist: &dyn Fn(usize, usize) -> f64) -> Vec<(usize, usize)> {
    let mut inside = vec![false; nodes];
    let mut links = Vec::new();
    if nodes == 0 {
        return links;
    }
    inside[0] = true;
    for _ in 1..nodes {
        let best = (0..nodes)
            .filter(|&a| inside[a])
            .flat_map(|a| (0..nodes).filter(|&b| !inside[b]).map(move |b| (a, b)))
            .min_by(|x, y| dist(x.0, x.1).total_cmp(&dist(y.0, y.1)));
        let Some((a, b)) = best else { break };
        inside[b] = true;
        links.push((a.min(b), a.max(b)));
    }
    links
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist;

    #[test]
    fn generated_backbones_are_connected_sparse_and_seeded() {
        for n in [5, 9, 15] {
            let t = Topology::generate(n, &mut dist::rng(7, n as u64));
            assert!(t.links.len() >= (n as f64 * 4.0 / 3.0).round() as usize);
            assert!(t.links.len() <= 2 * n);
            let (d, _) = ns::dijkstra(&t.hops(), 0);
            assert!(d.iter().all(|x| x.is_finite()), "{n} nodes: {t:?}");
            let mut deg = vec![0; n];
            t.links.iter().for_each(|&(a, b)| {
                deg[a] += 1;
                deg[b] += 1;
            });
            assert!(
                deg.iter().all(|&k| (2..=MAX_DEGREE).contains(&k)),
                "{deg:?}"
            );
            assert_eq!(t, Topology::generate(n, &mut dist::rng(7, n as u64)));
        }
    }

    #[test]
    fn paths_map_to_directed_links() {
        let t = Topology::internet2();
        // 0 -> 1 is link 0 forward, 1 -> 5 is link 3 forward, 5 -> 1 back.
        assert_eq!(t.links_of(&[0, 1, 5]), vec![0, 6]);
        assert_eq!(t.links_of(&[5, 1]), vec![7]);
        assert_eq!(t.eccentricities().len(), 9);
    }
}
