//! NetStorm vs the star, the balanced tree and TSEngine's tree over a WAN
//! (seed 003, Section VI): nine data centres on an Internet2-like overlay,
//! 30 ms per link, 0.02% loss, 20-155 Mbit/s per link (redrawn every three
//! minutes in the dynamic scenario), AlexNet (61M parameters, 244 MB) cut
//! into 1M-parameter chunks.
//!
//! An iteration is compute, then push (each node sends its share of every
//! tree's chunks to its parent, which aggregates), then pull (the reverse).
//! Chunks are pipelined, so a phase lasts as long as its concurrent flows
//! take in the max-min flow network (a tree edge whose nodes are not
//! neighbours crosses the underlay's fewest-hop path, sharing its links),
//! plus one chunk's trip down the slowest path (the pipeline's fill).
//!
//! Network awareness is passive: after each iteration the scheduler knows
//! the true rate of every link that carried traffic (the avalanche effect:
//! links never used stay at the first guess, the mean nominal rate). It
//! rebuilds the trees at most every UPDATE_TIME, behind the
//! policy-consistency barrier ([`run`]).
//!
//! [`topology`] holds the overlays (the paper's and generated ones),
//! [`reproduce`] the experiments.

use inagg_switch_control::sched::netstorm::{self as ns, Graph, Tree};

use crate::dist::{self, SimRng};
use crate::flow::FlowNet;

mod reproduce;
pub mod topology;

pub use reproduce::reproduce;
pub use topology::Topology;

const LATENCY: f64 = 0.030;
const LOSS: f64 = 0.0002;
/// AlexNet's tensors in parameters (conv1-5, fc6-8, weights with biases):
/// 61M parameters, 244 MB as float32. Its fully connected layers hold 96%.
const ALEXNET: [u64; 8] = [
    34_944, 307_456, 885_120, 663_936, 442_624, 37_752_832, 16_781_312, 4_097_000,
];
const COMPUTE: f64 = 2.0;
const REDRAW: f64 = 180.0;
/// The first guess of every link's rate: the middle of 20-155 Mbit/s.
const NOMINAL: f64 = 87.5e6 / 8.0;

/// The topology policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// MXNet: one parameter server, every node its child.
    Star,
    /// MLNet: a balanced 3-way tree by node index.
    KWay,
    /// TSEngine: the maximum-throughput spanning tree on the first rates.
    TsEngine,
    /// NetStorm: FAPTs toward `roots` roots.
    Fapt,
}

/// One configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    pub kind: Kind,
    /// Roots (FAPT only).
    pub roots: usize,
    /// Measure link rates and rebuild the trees every iteration.
    pub aware: bool,
    /// Send a share of chunks over auxiliary paths.
    pub aux: bool,
}

impl Scheme {
    pub const fn baseline(kind: Kind) -> Scheme {
        Scheme {
            kind,
            roots: 1,
            aware: false,
            aux: false,
        }
    }
    pub const fn fapt(roots: usize, aware: bool, aux: bool) -> Scheme {
        Scheme {
            kind: Kind::Fapt,
            roots,
            aware,
            aux,
        }
    }
}

/// One experiment: the overlay and the knobs the sensitivity sweeps vary
/// (Table II's defaults in [`Setup::paper`]).
#[derive(Debug, Clone)]
pub struct Setup {
    pub topo: Topology,
    /// CHUNK_SIZE: the most parameters in one chunk.
    pub chunk_params: u64,
    /// UPDATE_TIME: the least time between two policy updates (aware
    /// schemes), seconds.
    pub update_time: f64,
    /// Redraw every link's rate every three minutes.
    pub dynamic: bool,
    /// Seconds of training.
    pub horizon: f64,
}

impl Setup {
    /// The paper's: 9 DCs, 1M-parameter chunks, updates every 5 s, 20
    /// minutes static or an hour dynamic.
    pub fn paper(dynamic: bool) -> Setup {
        Setup {
            topo: Topology::internet2(),
            chunk_params: 1_000_000,
            update_time: 5.0,
            dynamic,
            horizon: if dynamic { 3600.0 } else { 1200.0 },
        }
    }

    /// The model's chunks, in parameters.
    fn chunks(&self) -> Vec<u64> {
        ns::slice_tensors(&ALEXNET, self.chunk_params)
    }

    /// Bytes of the largest chunk (the pipeline's unit).
    fn chunk_bytes(&self) -> f64 {
        self.chunks().into_iter().max().unwrap_or(0) as f64 * 4.0
    }

    fn graph(&self, rates: &[f64]) -> Graph {
        self.topo.graph(rates, self.chunk_bytes(), LATENCY)
    }

    /// One round of the policy-consistency protocol: every node's topology
    /// request reaches the scheduler (at the hub) and the reply comes back,
    /// so the farthest node's round trip.
    fn consistency_round(&self) -> f64 {
        let ecc = self.topo.eccentricities();
        2.0 * LATENCY * ecc[self.topo.hub()]
    }
}

/// The WAN: per-link true rates (bytes/s, both directions) and the
/// scheduler's knowledge of them.
struct Wan {
    rate: Vec<f64>,
    known: Vec<f64>,
}

fn draw_rates(links: usize, rng: &mut SimRng) -> Vec<f64> {
    (0..links)
        .map(|_| dist::mbps(dist::uniform(rng, 20.0, 155.0)) * (1.0 - LOSS))
        .collect()
}

/// The trees (with their share of the model's bytes) a scheme uses now.
fn plan(s: Scheme, setup: &Setup, wan: &Wan, roots: &[usize], hub: usize) -> Vec<(Tree, f64)> {
    let nodes = setup.topo.nodes;
    match s.kind {
        Kind::Star => vec![(ns::star(nodes, hub), 1.0)],
        Kind::KWay => vec![(ns::kway_tree(nodes, 3, hub), 1.0)],
        Kind::TsEngine => {
            let g = setup.graph(&wan.known);
            vec![(ns::max_throughput_tree(&g, &wan.known, hub), 1.0)]
        }
        Kind::Fapt => {
            let g = setup.graph(&wan.known);
            let q: Vec<f64> = roots
                .iter()
                .map(|&r| 1.0 / ns::tree_delay(&g, &ns::fapt(&g, r)))
                .collect();
            let chunks = setup.chunks();
            let owner = ns::assign_chunks(&chunks, &q);
            let total: u64 = chunks.iter().sum();
            let mut owned = vec![0u64; roots.len()];
            chunks.iter().zip(&owner).for_each(|(c, &r)| owned[r] += c);
            roots
                .iter()
                .zip(owned)
                .filter(|(_, p)| *p > 0)
                .map(|(&r, p)| (ns::fapt(&g, r), p as f64 / total as f64))
                .collect()
        }
    }
}

/// One transfer of a phase: its bytes over the primary path and, with
/// auxiliary paths, the share sent over the auxiliary path.
struct Transfer {
    primary: Vec<usize>,
    aux: Option<(Vec<usize>, f64)>,
    bytes: f64,
}

/// One phase's transfers.
fn phase_flows(
    trees: &[(Tree, f64)],
    s: Scheme,
    setup: &Setup,
    wan: &Wan,
    up: bool,
) -> Vec<Transfer> {
    let topo = &setup.topo;
    let hops = topo.hops();
    let known = setup.graph(&wan.known);
    let model_bytes = ALEXNET.iter().sum::<u64>() as f64 * 4.0;
    let mut flows = Vec::new();
    for (tree, share) in trees {
        let bytes = share * model_bytes;
        for v in 0..topo.nodes {
            let Some(parent) = tree.parent[v] else {
                continue;
            };
            let (from, to) = if up { (v, parent) } else { (parent, v) };
            let primary = ns::shortest_path(&hops, from, to).unwrap_or_default();
            let aux = if s.aux {
                ns::auxiliary_paths(&known, from, to, 2)
                    .into_iter()
                    .find(|p| *p != primary)
            } else {
                None
            };
            // Chunks start split in proportion to what each path can carry
            // (its slowest known link); see `transfer` for the rebalancing.
            let cap = |p: &[usize]| {
                topo.links_of(p)
                    .iter()
                    .map(|l| wan.known[l / 2])
                    .fold(f64::INFINITY, f64::min)
            };
            let aux = aux.map(|p| {
                let (a, b) = (cap(&primary), cap(&p));
                (topo.links_of(&p), b / (a + b))
            });
            flows.push(Transfer {
                primary: topo.links_of(&primary),
                aux,
                bytes,
            });
        }
    }
    flows
}

/// Runs the transfers from `now`, redrawing rates at multiples of REDRAW
/// when `dynamic`; returns the end time and marks the links used.
///
/// A transfer with an auxiliary path is two flows drawing on one pool of
/// chunks: when one path runs dry while the other still holds more than a
/// chunk, the rest is split again between them by their last rates (the
/// sender's queue rule, at chunk granularity, in fluid form).
fn transfer(
    flows: &[Transfer],
    setup: &Setup,
    wan: &mut Wan,
    now: f64,
    used: &mut [bool],
    rng: &mut SimRng,
) -> f64 {
    let mut net = FlowNet::new();
    for &r in &wan.rate {
        net.add_link(r);
        net.add_link(r);
    }
    net.advance_to(now);
    // tag = transfer index * 2 + (0 primary, 1 auxiliary)
    let mut live: Vec<[Option<usize>; 2]> = vec![[None, None]; flows.len()];
    for (i, t) in flows.iter().enumerate() {
        let to_aux = t.aux.as_ref().map_or(0.0, |a| a.1);
        live[i][0] = Some(net.start(&t.primary, t.bytes * (1.0 - to_aux), 0, 2 * i as u64));
        if let Some((links, share)) = &t.aux {
            live[i][1] = Some(net.start(links, t.bytes * share, 0, 2 * i as u64 + 1));
            links.iter().for_each(|&l| used[l / 2] = true);
        }
        t.primary.iter().for_each(|&l| used[l / 2] = true);
    }
    let chunk = setup.chunk_bytes();
    loop {
        let next_redraw = if setup.dynamic {
            ((net.now() / REDRAW).floor() + 1.0) * REDRAW
        } else {
            f64::INFINITY
        };
        match net.next_finish() {
            Some(t) if t <= next_redraw => {
                let rates: Vec<[f64; 2]> = live
                    .iter()
                    .map(|l| l.map(|f| f.and_then(|f| net.rate(f)).unwrap_or(0.0)))
                    .collect();
                for done in net.advance_to(t) {
                    let (i, side) = ((done.tag / 2) as usize, (done.tag % 2) as usize);
                    live[i][side] = None;
                    let Some(other) = live[i][1 - side] else {
                        continue;
                    };
                    let rest = net.remaining(other).unwrap_or(0.0);
                    if rest <= chunk {
                        continue;
                    }
                    let (mine, theirs) = (rates[i][side], rates[i][1 - side]);
                    let mine_share = if mine + theirs > 0.0 {
                        mine / (mine + theirs)
                    } else {
                        0.0
                    };
                    net.cancel(other);
                    let path = |s: usize| {
                        if s == 0 {
                            flows[i].primary.clone()
                        } else {
                            flows[i]
                                .aux
                                .as_ref()
                                .map(|a| a.0.clone())
                                .unwrap_or_default()
                        }
                    };
                    live[i][1 - side] = Some(net.start(
                        &path(1 - side),
                        rest * (1.0 - mine_share),
                        0,
                        (2 * i + 1 - side) as u64,
                    ));
                    live[i][side] =
                        Some(net.start(&path(side), rest * mine_share, 0, (2 * i + side) as u64));
                }
                if net.active() == 0 {
                    return t;
                }
            }
            _ if net.active() == 0 => return net.now(),
            _ => {
                net.advance_to(next_redraw);
                wan.rate = draw_rates(wan.rate.len(), rng);
                for (e, &r) in wan.rate.iter().enumerate() {
                    net.set_capacity(2 * e, r);
                    net.set_capacity(2 * e + 1, r);
                }
            }
        }
    }
}

/// The pipeline's fill: one chunk down the slowest leaf-to-root path.
fn fill(trees: &[(Tree, f64)], setup: &Setup, wan: &Wan) -> f64 {
    let g = setup.graph(&wan.rate);
    let hops = setup.topo.hops();
    let hop_path = |a: usize, b: usize| ns::shortest_path(&hops, a, b).unwrap_or_default();
    let path_delay = |t: &Tree, v: usize| -> f64 {
        let Some(path) = t.path(v) else { return 0.0 };
        path.windows(2)
            .map(|h| {
                hop_path(h[0], h[1])
                    .windows(2)
                    .map(|x| g.weight(x[0], x[1]).unwrap_or(0.0))
                    .sum::<f64>()
            })
            .sum()
    };
    trees
        .iter()
        .flat_map(|(t, _)| (0..setup.topo.nodes).map(move |v| (t, v)))
        .map(|(t, v)| path_delay(t, v))
        .fold(0.0, f64::max)
}

/// One run's result.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Metrics {
    /// Iterations per hour.
    pub throughput: f64,
    /// Mean seconds per iteration.
    pub iteration: f64,
    /// Policy updates the scheduler made.
    pub updates: u64,
}

/// Trains for `setup.horizon` seconds under one scheme.
///
/// A scheme that adapts (`aware`) runs the policy-consistency protocol
/// before every push: each node asks the scheduler for the topology and
/// blocks until every node has asked (the authors' code: a per-iteration
/// barrier, one round trip to the farthest node). When UPDATE_TIME has
/// passed since the last update, the reply carries a new policy built
/// from the rates measured so far, which costs a second round (install,
/// acknowledge) before anyone pushes; every node then switches at once,
/// so no chunk ever meets a mix of old and new trees.
pub fn run(s: Scheme, setup: &Setup, rng: &mut SimRng) -> Metrics {
    let rate = draw_rates(setup.topo.links.len(), rng);
    let mut wan = Wan {
        known: vec![NOMINAL; rate.len()],
        rate,
    };
    // TSEngine measures every link (actively) before it builds its tree.
    if s.kind == Kind::TsEngine {
        wan.known = wan.rate.clone();
    }
    let hub = setup.topo.hub();
    let round = setup.consistency_round();
    // NetStorm fixes its roots after the first run (shards never migrate).
    let roots = ns::select_roots(&setup.graph(&wan.known), s.roots);
    let mut trees = plan(s, setup, &wan, &roots, hub);
    let (mut now, mut last_update, mut updates) = (0.0, 0.0, 0u64);
    let mut iterations = 0u64;
    let mut last_end = 0.0;
    while now < setup.horizon {
        let mut used = vec![false; setup.topo.links.len()];
        let mut start = now + COMPUTE;
        if s.aware {
            start += round;
            if start - last_update >= setup.update_time {
                trees = plan(s, setup, &wan, &roots, hub);
                start += round;
                last_update = start;
                updates += 1;
            }
        }
        let phase = |wan: &Wan, up| phase_flows(&trees, s, setup, wan, up);
        let pushed = transfer(&phase(&wan, true), setup, &mut wan, start, &mut used, rng);
        let pulled = transfer(&phase(&wan, false), setup, &mut wan, pushed, &mut used, rng);
        now = pulled + 2.0 * fill(&trees, setup, &wan);
        if now <= setup.horizon {
            iterations += 1;
            last_end = now;
        }
        // Passive awareness: the links that carried chunks are measured.
        if s.aware {
            for (e, _) in used.iter().enumerate().filter(|(_, u)| **u) {
                wan.known[e] = wan.rate[e];
            }
        }
    }
    // Per completed iteration (not per horizon: the last partial one would
    // round the figure to whole iterations).
    let iteration = if iterations > 0 {
        last_end / iterations as f64
    } else {
        f64::INFINITY
    };
    Metrics {
        throughput: 3600.0 / iteration,
        iteration,
        updates,
    }
}

/// Iterations per hour no scheme with equal shares can beat on `setup`'s
/// overlay with the rates `rng` draws (the same draw [`run`] starts from):
/// in the push every DC sends (1 - 1/n) of the model over its own links,
/// in the pull it receives as much, so an iteration takes at least the
/// compute plus twice that volume over the slowest DC's total link rate.
pub fn access_bound(setup: &Setup, rng: &mut SimRng) -> f64 {
    let rates = draw_rates(setup.topo.links.len(), rng);
    let n = setup.topo.nodes as f64;
    let volume = ALEXNET.iter().sum::<u64>() as f64 * 4.0 * (1.0 - 1.0 / n);
    let slowest = (0..setup.topo.nodes)
        .map(|v| {
            let links = setup.topo.links.iter().zip(&rates);
            links
                .filter(|((a, b), _)| *a == v || *b == v)
                .map(|(_, r)| r)
                .sum::<f64>()
        })
        .fold(f64::INFINITY, f64::min);
    3600.0 / (COMPUTE + 2.0 * volume / slowest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Updates follow UPDATE_TIME, each behind the consistency barrier.
    #[test]
    fn updates_follow_update_time() {
        let full = Scheme::fapt(9, true, true);
        let every = run(full, &Setup::paper(false), &mut dist::rng(3, 0));
        let iterations = (1200.0 / every.iteration).floor() as u64;
        // One per iteration (iterations last far longer than 5 s), plus
        // the one before the partial last iteration.
        assert!((iterations..=iterations + 1).contains(&every.updates));
        let never = Setup {
            update_time: f64::INFINITY,
            ..Setup::paper(false)
        };
        let frozen = run(full, &never, &mut dist::rng(3, 0));
        assert_eq!(frozen.updates, 0);
        // Blind to the network, the trees stay on the first guess.
        let blind = run(Scheme::fapt(9, false, true), &never, &mut dist::rng(3, 0));
        assert_eq!(blind.updates, 0);
        assert!(every.throughput > frozen.throughput);
        // The Internet2 stand-in's hub (Houston) is 2 hops from the farthest DC.
        assert!((Setup::paper(false).consistency_round() - 0.12).abs() < 1e-9);
    }
}
