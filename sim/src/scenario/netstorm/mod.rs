//! NetStorm vs the star, the balanced tree and TSEngine's tree over a WAN
//! (docs/PAPERS.md, "NetStorm"; Section VI): nine data centres on an Internet2-like overlay,
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
//! With auxiliary paths, the sender's rule (`dispatch_chunks`, Table II's
//! bounds by default) sends some of a tree edge's chunks over an
//! edge-disjoint detour; each path's chunks run back to back as one flow.
//!
//! Network awareness is passive, with the policy's own estimator
//! (`sched::netstorm::awareness::LinkRates`, the code the live scheduler
//! runs): after each iteration every direction of a link gives a sample,
//! the bytes it carried back to back (while its flows filled it, as the
//! live stack's train counters count them) over the time they took, and
//! an estimate once PROBE_CHUNK_SIZE x PROBE_CHUNK_NUM has crossed it; an
//! estimate within REPORT_RATE of the known rate is not reported. An
//! estimate is an average over the iteration, so after a redraw it lags.
//! Links never filled stay at the first guess, the mean nominal rate (the
//! avalanche effect). The scheduler rebuilds the trees at most every
//! UPDATE_TIME, behind the policy-consistency barrier ([`run`]).
//!
//! [`topology`] holds the overlays (the paper's and generated ones),
//! [`reproduce`] the experiments.

use inagg_sched::netstorm::awareness::{LinkRates, Probing};
use inagg_sched::netstorm::{self as ns, Graph, Tree};

use rand::Rng;

use crate::dist::{self, SimRng};
use crate::flow::{FlowId, FlowNet, LinkUsage};

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
/// Passive estimation's knobs: PROBE_CHUNK_SIZE (2M parameters, 8 MB) x
/// PROBE_CHUNK_NUM (4) of probe per estimate (Table II), and REPORT_RATE,
/// which the paper does not give (inagg's choice, the live stack's
/// default: 10%).
const PROBING: Probing = Probing {
    probe_bits: 2e6 * 4.0 * 4.0 * 8.0,
    report_rate: 0.1,
};

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

/// How a tree edge's chunks are split between its primary path and its
/// auxiliary paths. The paper words the sender's rule eagerly (a chunk
/// goes to the primary unless it is busy, then to an auxiliary path with
/// room, else to the primary anyway), which commits chunks to a detour as
/// soon as they are ready; `Pool` is the reading that matches the paper's
/// gains: the sender holds chunks until a path has room.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AuxRule {
    /// One pool for all paths: chunks start split by each path's slowest
    /// known link, and when a path runs dry while more than a chunk is
    /// left, the rest is split again by the paths' current rates (a
    /// work-conserving sender at chunk granularity, in fluid form).
    Pool,
    /// `dispatch_chunks` with PRIMARY_BUSY_BOUND and
    /// AUXILIARY_QUEUE_LENGTH, all of a phase's chunks at its start.
    Eager {
        primary_busy_bound: usize,
        aux_queue_length: usize,
    },
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
    /// How a tree edge's chunks share its paths (auxiliary schemes).
    pub aux_rule: AuxRule,
    /// Redraw every link's rate every three minutes.
    pub dynamic: bool,
    /// Seconds of training.
    pub horizon: f64,
    /// Where the star's parameter server runs.
    pub server: Server,
}

/// Where MXNet's parameter server runs (the star's centre).
///
/// The paper does not say. MXNet itself does not choose: the server runs
/// wherever it is launched. Picking a communication-cost-effective DC for
/// it is the improvement of Li et al., which the paper cites as related
/// work (its \[8\]), not part of MXNet. So the paper's baseline is a star
/// around some DC, not necessarily the best-connected one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Server {
    /// At a DC drawn uniformly at random in each run: MXNet as launched.
    /// (The reproduction runs the star at every DC instead and pools the
    /// runs, so its figure does not hang on a few draws.)
    Random,
    /// At the hub, the DC of fewest hops to the farthest one: the star's
    /// best case on these overlays.
    Hub,
    /// At this DC (an index into the overlay's nodes).
    At(usize),
}

impl Setup {
    /// The paper's (Table II): 9 DCs, 1M-parameter chunks, updates every
    /// 5 s; 20 minutes static or an hour dynamic. Auxiliary paths share
    /// one pool of chunks with the primary.
    pub fn paper(dynamic: bool) -> Setup {
        Setup {
            topo: Topology::internet2(),
            chunk_params: 1_000_000,
            update_time: 5.0,
            aux_rule: AuxRule::Pool,
            dynamic,
            horizon: if dynamic { 3600.0 } else { 1200.0 },
            server: Server::Random,
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
        // The hub is the node of least eccentricity.
        let farthest = self
            .topo
            .eccentricities()
            .into_iter()
            .fold(f64::INFINITY, f64::min);
        2.0 * LATENCY * farthest
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

/// A tree and the chunks (bytes) it aggregates.
type Plan = Vec<(Tree, Vec<f64>)>;

/// The trees a scheme uses now, each with its chunks; the star, the
/// balanced tree and TSEngine's tree are rooted at `centre`.
fn plan(s: Scheme, setup: &Setup, wan: &Wan, roots: &[usize], centre: usize) -> Plan {
    let nodes = setup.topo.nodes;
    let chunks = setup.chunks();
    let bytes = |c: &[u64]| c.iter().map(|&p| p as f64 * 4.0).collect::<Vec<f64>>();
    match s.kind {
        Kind::Star => vec![(ns::star(nodes, centre), bytes(&chunks))],
        Kind::KWay => vec![(ns::kway_tree(nodes, 3, centre), bytes(&chunks))],
        Kind::TsEngine => {
            let g = setup.graph(&wan.known);
            let tree = ns::max_throughput_tree(&g, &wan.known, centre);
            vec![(tree, bytes(&chunks))]
        }
        Kind::Fapt => {
            let g = setup.graph(&wan.known);
            let q: Vec<f64> = roots
                .iter()
                .map(|&r| 1.0 / ns::tree_delay(&g, &ns::fapt(&g, r)))
                .collect();
            let owner = ns::assign_chunks(&chunks, &q);
            roots
                .iter()
                .enumerate()
                .map(|(i, &r)| {
                    let mine: Vec<u64> = (chunks.iter().zip(&owner))
                        .filter(|(_, &o)| o == i)
                        .map(|(&c, _)| c)
                        .collect();
                    (ns::fapt(&g, r), bytes(&mine))
                })
                .filter(|(_, c)| !c.is_empty())
                .collect()
        }
    }
}

/// Auxiliary paths per transfer, besides the primary: Algorithm 3's next
/// edge-disjoint path. (With this set to 2, `inagg sim reproduce netstorm`
/// put full NetStorm at 3.87x the star instead of 4.06x: the detours share
/// links with other trees' primaries.)
const AUX_PATHS: usize = 1;

/// One transfer of a phase, parent to child or back: the bytes each of its
/// paths starts with (the primary first).
struct Transfer {
    paths: Vec<(Vec<usize>, f64)>,
}

/// The bytes each path (directed links, primary first) starts with.
fn split(rule: AuxRule, chunks: &[f64], paths: &[Vec<usize>], wan: &Wan) -> Vec<f64> {
    let total: f64 = chunks.iter().sum();
    match rule {
        AuxRule::Pool => {
            let cap: Vec<f64> = paths
                .iter()
                .map(|p| {
                    p.iter()
                        .map(|l| wan.known[l / 2])
                        .fold(f64::INFINITY, f64::min)
                })
                .collect();
            let sum: f64 = cap.iter().sum();
            cap.iter().map(|c| total * c / sum).collect()
        }
        AuxRule::Eager {
            primary_busy_bound,
            aux_queue_length,
        } => {
            let to = ns::dispatch_chunks(
                chunks.len(),
                paths.len() - 1,
                primary_busy_bound,
                aux_queue_length,
            );
            let mut bytes = vec![0.0; paths.len()];
            to.iter().zip(chunks).for_each(|(&p, c)| bytes[p] += c);
            bytes
        }
    }
}

/// One phase's transfers: every tree edge moves its tree's chunks; with
/// auxiliary paths, the sender's rule spills some onto them.
fn phase_flows(trees: &Plan, s: Scheme, setup: &Setup, wan: &Wan, up: bool) -> Vec<Transfer> {
    let topo = &setup.topo;
    let hops = topo.hops();
    let known = setup.graph(&wan.known);
    let mut flows = Vec::new();
    for (tree, chunks) in trees {
        for v in 0..topo.nodes {
            let Some(parent) = tree.parent[v] else {
                continue;
            };
            let (from, to) = if up { (v, parent) } else { (parent, v) };
            let primary = ns::shortest_path(&hops, from, to).unwrap_or_default();
            let aux = if s.aux {
                ns::auxiliary_paths(&known, from, to, 1 + AUX_PATHS)
            } else {
                Vec::new()
            };
            let detours = aux.into_iter().filter(|p| *p != primary).take(AUX_PATHS);
            let paths: Vec<Vec<usize>> = std::iter::once(primary.clone()).chain(detours).collect();
            let links: Vec<Vec<usize>> = paths.iter().map(|p| topo.links_of(p)).collect();
            let bytes = split(setup.aux_rule, chunks, &links, wan);
            flows.push(Transfer {
                paths: links.into_iter().zip(bytes).collect(),
            });
        }
    }
    flows
}

/// Runs the transfers from `now`, redrawing rates at multiples of REDRAW
/// when `dynamic`; returns the end time and marks the links used. Each
/// path of a transfer is one flow (its chunks back to back); pooled paths
/// are rebalanced as they run dry ([`rebalance`]).
fn transfer(
    flows: &[Transfer],
    setup: &Setup,
    wan: &mut Wan,
    now: f64,
    usage: &mut [LinkUsage],
    rng: &mut SimRng,
) -> f64 {
    let mut net = FlowNet::tracking_usage();
    for &r in &wan.rate {
        net.add_link(r);
        net.add_link(r);
    }
    net.advance_to(now);
    let mut live: Vec<Vec<Option<FlowId>>> =
        flows.iter().map(|t| vec![None; t.paths.len()]).collect();
    for (i, t) in flows.iter().enumerate() {
        for (p, (links, bytes)) in t.paths.iter().enumerate() {
            if *bytes > 0.0 {
                live[i][p] = Some(net.start(links, *bytes, 0, tag(i, p)));
            }
        }
    }
    let chunk = setup.chunk_bytes();
    let pooled = setup.aux_rule == AuxRule::Pool;
    loop {
        let next_redraw = if setup.dynamic {
            ((net.now() / REDRAW).floor() + 1.0) * REDRAW
        } else {
            f64::INFINITY
        };
        match net.next_finish() {
            _ if net.active() == 0 => {
                for (l, u) in usage.iter_mut().enumerate() {
                    *u += net.usage(l);
                }
                return net.now();
            }
            Some(t) if t <= next_redraw => {
                let rates: Vec<Vec<f64>> = live
                    .iter()
                    .map(|l| {
                        l.iter()
                            .map(|f| f.and_then(|f| net.rate(f)).unwrap_or(0.0))
                            .collect()
                    })
                    .collect();
                for done in net.advance_to(t) {
                    let (i, p) = untag(done.tag);
                    live[i][p] = None;
                    if pooled {
                        rebalance(&mut net, i, &flows[i], &mut live[i], &rates[i], chunk);
                    }
                }
            }
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

/// The scheduler's estimator over `topo`, every direction first guessed
/// at the nominal rate.
fn link_rates(topo: &Topology) -> LinkRates {
    let links: Vec<(usize, usize, f64)> =
        topo.links.iter().map(|&(a, b)| (a, b, LATENCY)).collect();
    LinkRates::new(topo.nodes, &links, NOMINAL * 8.0, PROBING)
        .expect("the overlays' links join two of their nodes")
}

/// Passive awareness after an iteration: each direction that carried
/// chunks back to back (full: the live stack's train counters) is a
/// sample; an edge is known at its slower direction.
fn measure(estimator: &mut LinkRates, topo: &Topology, usage: &[LinkUsage], wan: &mut Wan) {
    for (e, &(a, b)) in topo.links.iter().enumerate() {
        for (from, to, u) in [(a, b, usage[2 * e]), (b, a, usage[2 * e + 1])] {
            estimator.sample(from, to, u.train_bytes * 8.0, u.train);
        }
        let slower = estimator.rate(a, b).zip(estimator.rate(b, a));
        if let Some((ab, ba)) = slower {
            wan.known[e] = ab.min(ba) / 8.0;
        }
    }
}

fn tag(transfer: usize, path: usize) -> u64 {
    (transfer * (1 + AUX_PATHS) + path) as u64
}

fn untag(tag: u64) -> (usize, usize) {
    let t = tag as usize;
    (t / (1 + AUX_PATHS), t % (1 + AUX_PATHS))
}

/// A pooled path of transfer `i` ran dry: unless at most a chunk is left,
/// the rest is split again over its paths by the rates they ran at just
/// before (`rates`; the dry path's included).
fn rebalance(
    net: &mut FlowNet,
    i: usize,
    t: &Transfer,
    live: &mut [Option<FlowId>],
    rates: &[f64],
    chunk: f64,
) {
    let rest: f64 = live
        .iter()
        .flatten()
        .map(|&f| net.remaining(f).unwrap_or(0.0))
        .sum();
    let rate: f64 = rates.iter().sum();
    if rest <= chunk || rate <= 0.0 {
        return;
    }
    for (p, flow) in live.iter_mut().enumerate() {
        if let Some(f) = flow.take() {
            net.cancel(f);
        }
        let bytes = rest * rates[p] / rate;
        if bytes > 0.0 {
            *flow = Some(net.start(&t.paths[p].0, bytes, 0, tag(i, p)));
        }
    }
}

/// The pipeline's fill: one chunk down the slowest leaf-to-root path.
fn fill(trees: &Plan, setup: &Setup, wan: &Wan) -> f64 {
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
    let mut estimator = link_rates(&setup.topo);
    // TSEngine measures every link (actively) before it builds its tree.
    if s.kind == Kind::TsEngine {
        wan.known = wan.rate.clone();
    }
    let hub = setup.topo.hub();
    // The star's centre; the other schemes' trees and the scheduler are at
    // the hub. Drawn by every scheme, so all of a trial's schemes see the
    // same rates and the same redraws.
    let drawn = rng.random_range(0..setup.topo.nodes);
    let centre = match (s.kind, setup.server) {
        (Kind::Star, Server::Random) => drawn,
        (Kind::Star, Server::At(dc)) => dc,
        _ => hub,
    };
    let round = setup.consistency_round();
    // NetStorm fixes its roots after the first run (shards never migrate).
    let roots = ns::select_roots(&setup.graph(&wan.known), s.roots);
    let mut trees = plan(s, setup, &wan, &roots, centre);
    let (mut now, mut last_update, mut updates) = (0.0, 0.0, 0u64);
    let mut iterations = 0u64;
    let mut last_end = 0.0;
    while now < setup.horizon {
        let mut usage = vec![LinkUsage::default(); 2 * setup.topo.links.len()];
        let mut start = now + COMPUTE;
        if s.aware {
            start += round;
            if start - last_update >= setup.update_time {
                trees = plan(s, setup, &wan, &roots, centre);
                start += round;
                last_update = start;
                updates += 1;
            }
        }
        let phase = |wan: &Wan, up| phase_flows(&trees, s, setup, wan, up);
        let pushed = transfer(&phase(&wan, true), setup, &mut wan, start, &mut usage, rng);
        let pulled = transfer(
            &phase(&wan, false),
            setup,
            &mut wan,
            pushed,
            &mut usage,
            rng,
        );
        now = pulled + 2.0 * fill(&trees, setup, &wan);
        if now <= setup.horizon {
            iterations += 1;
            last_end = now;
        }
        if s.aware {
            measure(&mut estimator, &setup.topo, &usage, &mut wan);
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

/// What one phase (push or pull) asks of the network at its busiest
/// points, on the rates `rng` draws (the same draw [`run`] starts from).
#[derive(Debug, Clone, Copy)]
pub struct PhaseLoad {
    /// The busiest directed link under multi-root FAPT's trees (as many
    /// roots as DCs, built on the true rates, primaries only): its bytes
    /// over its rate, in seconds. FAPT builds each tree on delays that ignore the
    /// other trees' load, so trees pile onto the same fast links.
    pub busiest_link: f64,
    /// The bytes that link carries, over the model's.
    pub busiest_share: f64,
    /// The slowest DC's own links: (1 - 1/n) of the model over their
    /// total rate, in seconds, which no scheme with equal shares can beat
    /// ([`access_bound`]).
    pub slowest_dc: f64,
}

/// Measures [`PhaseLoad`] (the scaling gap in REPRODUCTION.md).
pub fn phase_load(setup: &Setup, rng: &mut SimRng) -> PhaseLoad {
    let rate = draw_rates(setup.topo.links.len(), rng);
    let wan = Wan {
        known: rate.clone(),
        rate,
    };
    let s = Scheme::fapt(setup.topo.nodes, true, false);
    let roots = ns::select_roots(&setup.graph(&wan.known), s.roots);
    let trees = plan(s, setup, &wan, &roots, setup.topo.hub());
    // Directed links: 2e and 2e + 1 are link e's two directions.
    let mut load = vec![0.0; 2 * wan.rate.len()];
    for t in phase_flows(&trees, s, setup, &wan, true) {
        for (links, bytes) in &t.paths {
            links.iter().for_each(|&l| load[l] += bytes);
        }
    }
    let (busiest_link, bytes) = load
        .iter()
        .enumerate()
        .map(|(l, &bytes)| (bytes / wan.rate[l / 2], bytes))
        .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a });
    PhaseLoad {
        busiest_link,
        busiest_share: bytes / model_bytes(),
        slowest_dc: access_phase(setup, &wan.rate),
    }
}

fn model_bytes() -> f64 {
    ALEXNET.iter().sum::<u64>() as f64 * 4.0
}

/// Seconds for the slowest DC to send (1 - 1/n) of the model over its
/// own links at `rates`.
fn access_phase(setup: &Setup, rates: &[f64]) -> f64 {
    let n = setup.topo.nodes as f64;
    let slowest = (0..setup.topo.nodes)
        .map(|v| {
            let links = setup.topo.links.iter().zip(rates);
            links
                .filter(|((a, b), _)| *a == v || *b == v)
                .map(|(_, r)| r)
                .sum::<f64>()
        })
        .fold(f64::INFINITY, f64::min);
    model_bytes() * (1.0 - 1.0 / n) / slowest
}

/// Iterations per hour no scheme with equal shares can beat on `setup`'s
/// overlay with the rates `rng` draws (the same draw [`run`] starts from):
/// in the push every DC sends (1 - 1/n) of the model over its own links,
/// in the pull it receives as much, so an iteration takes at least the
/// compute plus twice that volume over the slowest DC's total link rate.
pub fn access_bound(setup: &Setup, rng: &mut SimRng) -> f64 {
    let rates = draw_rates(setup.topo.links.len(), rng);
    3600.0 / (COMPUTE + 2.0 * access_phase(setup, &rates))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Passive estimation through the policy's estimator: after one
    /// iteration of single-hop tree edges (FAPT, no detours, static), every
    /// link the trees crossed both ways is known at its true rate, and the
    /// others still at the first guess.
    #[test]
    fn a_static_iteration_teaches_the_trees_links_their_true_rates() {
        let setup = Setup::paper(false);
        let s = Scheme::fapt(9, true, false);
        let mut rng = dist::rng(5, 0);
        let rate = draw_rates(setup.topo.links.len(), &mut rng);
        let mut wan = Wan {
            known: vec![NOMINAL; rate.len()],
            rate,
        };
        let roots = ns::select_roots(&setup.graph(&wan.known), s.roots);
        let trees = plan(s, &setup, &wan, &roots, setup.topo.hub());
        let mut usage = vec![LinkUsage::default(); 2 * setup.topo.links.len()];
        let up = phase_flows(&trees, s, &setup, &wan, true);
        let pushed = transfer(&up, &setup, &mut wan, 0.0, &mut usage, &mut rng);
        let down = phase_flows(&trees, s, &setup, &wan, false);
        transfer(&down, &setup, &mut wan, pushed, &mut usage, &mut rng);
        let mut estimator = link_rates(&setup.topo);
        measure(&mut estimator, &setup.topo, &usage, &mut wan);
        let mut learnt = 0;
        for e in 0..setup.topo.links.len() {
            let both = usage[2 * e].bytes > 0.0 && usage[2 * e + 1].bytes > 0.0;
            if both {
                learnt += 1;
                let error = (wan.known[e] - wan.rate[e]).abs() / wan.rate[e];
                assert!(
                    error < 1e-9,
                    "link {e}: {} vs {}",
                    wan.known[e],
                    wan.rate[e]
                );
            } else if usage[2 * e].bytes + usage[2 * e + 1].bytes == 0.0 {
                assert_eq!(wan.known[e], NOMINAL, "link {e} carried nothing");
            }
        }
        assert!(
            learnt >= 8,
            "nine trees over nine DCs use most links: {learnt}"
        );
    }

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
