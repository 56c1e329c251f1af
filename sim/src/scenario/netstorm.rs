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
//! links never used stay at the first guess, the mean nominal rate).

use inagg_switch_control::sched::netstorm::{self as ns, Edge, Graph, Tree};

use crate::dist::{self, SimRng};
use crate::flow::FlowNet;
use crate::report::{self, Claim, Report, Row};
use crate::svg::{Figure, Series};
use crate::Options;

/// The overlay: Seattle 0, Los Angeles 1, Salt Lake City 2, Denver 3,
/// Kansas City 4, Houston 5, Chicago 6, Atlanta 7, New York 8 (a simplified
/// Internet2 backbone; the seed lost the paper's figure).
pub const INTERNET2: [(usize, usize); 12] = [
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
const NODES: usize = 9;
const LATENCY: f64 = 0.030;
const LOSS: f64 = 0.0002;
const PARAMS: f64 = 61e6;
const CHUNK_PARAMS: f64 = 1e6;
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

/// The WAN: per-edge true rates (bytes/s, both directions) and the
/// scheduler's knowledge of them.
struct Wan {
    rate: Vec<f64>,
    known: Vec<f64>,
}

fn draw_rates(rng: &mut SimRng) -> Vec<f64> {
    INTERNET2
        .iter()
        .map(|_| dist::mbps(dist::uniform(rng, 20.0, 155.0)) * (1.0 - LOSS))
        .collect()
}

/// The overlay with weights from rates: a chunk's delay over each link.
fn graph(rates: &[f64]) -> Graph {
    let chunk = CHUNK_PARAMS * 4.0;
    Graph {
        nodes: NODES,
        edges: INTERNET2
            .iter()
            .zip(rates)
            .map(|(&(a, b), &r)| Edge {
                a,
                b,
                weight: chunk / r + LATENCY,
            })
            .collect(),
    }
}

/// Fewest hops, as IP routing would take (underlay).
fn hops_graph() -> Graph {
    let mut g = graph(&[f64::INFINITY; INTERNET2.len()]);
    g.edges.iter_mut().for_each(|e| e.weight = 1.0);
    g
}

/// The directed links (2e: a -> b, 2e + 1: b -> a) along a node path.
fn links_of(path: &[usize]) -> Vec<usize> {
    path.windows(2)
        .filter_map(|h| {
            INTERNET2
                .iter()
                .position(|&(a, b)| (a, b) == (h[0], h[1]) || (a, b) == (h[1], h[0]))
                .map(|e| {
                    if INTERNET2[e].0 == h[0] {
                        2 * e
                    } else {
                        2 * e + 1
                    }
                })
        })
        .collect()
}

/// The trees (with their share of the chunks) a scheme uses now.
fn plan(s: Scheme, wan: &Wan, roots: &[usize], hub: usize) -> Vec<(Tree, f64)> {
    let chunks = (PARAMS / CHUNK_PARAMS).ceil() as usize;
    match s.kind {
        Kind::Star => vec![(ns::star(NODES, hub), 1.0)],
        Kind::KWay => vec![(ns::kway_tree(NODES, 3, hub), 1.0)],
        Kind::TsEngine => {
            let g = graph(&wan.known);
            vec![(ns::max_throughput_tree(&g, &wan.known, hub), 1.0)]
        }
        Kind::Fapt => {
            let g = graph(&wan.known);
            let q: Vec<f64> = roots
                .iter()
                .map(|&r| 1.0 / ns::tree_delay(&g, &ns::fapt(&g, r)))
                .collect();
            let quota = ns::chunk_quota(chunks, &q);
            roots
                .iter()
                .zip(quota)
                .filter(|(_, c)| *c > 0)
                .map(|(&r, c)| (ns::fapt(&g, r), c as f64 / chunks as f64))
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
fn phase_flows(trees: &[(Tree, f64)], s: Scheme, wan: &Wan, up: bool) -> Vec<Transfer> {
    let hops = hops_graph();
    let known = graph(&wan.known);
    let mut flows = Vec::new();
    for (tree, share) in trees {
        let bytes = share * PARAMS * 4.0;
        for v in 0..NODES {
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
                links_of(p)
                    .iter()
                    .map(|l| wan.known[l / 2])
                    .fold(f64::INFINITY, f64::min)
            };
            let aux = aux.map(|p| {
                let (a, b) = (cap(&primary), cap(&p));
                (links_of(&p), b / (a + b))
            });
            flows.push(Transfer {
                primary: links_of(&primary),
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
    wan: &mut Wan,
    now: f64,
    dynamic: bool,
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
    let chunk = CHUNK_PARAMS * 4.0;
    loop {
        let next_redraw = if dynamic {
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
                wan.rate = draw_rates(rng);
                for (e, &r) in wan.rate.iter().enumerate() {
                    net.set_capacity(2 * e, r);
                    net.set_capacity(2 * e + 1, r);
                }
            }
        }
    }
}

/// The pipeline's fill: one chunk down the slowest leaf-to-root path.
fn fill(trees: &[(Tree, f64)], wan: &Wan) -> f64 {
    let g = graph(&wan.rate);
    let hops = hops_graph();
    trees
        .iter()
        .map(|(t, _)| {
            (0..NODES)
                .map(|v| {
                    let Some(path) = t.path(v) else { return 0.0 };
                    path.windows(2)
                        .flat_map(|h| {
                            ns::shortest_path(&hops, h[0], h[1])
                                .unwrap_or_default()
                                .windows(2)
                                .map(|x| (x[0], x[1]))
                                .collect::<Vec<_>>()
                        })
                        .map(|(a, b)| g.weight(a, b).unwrap_or(0.0))
                        .sum()
                })
                .fold(0.0, f64::max)
        })
        .fold(0.0, f64::max)
}

/// One run's result.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Metrics {
    /// Iterations per hour.
    pub throughput: f64,
    /// Mean seconds per iteration.
    pub iteration: f64,
}

/// Trains for `horizon` seconds under one scheme.
pub fn run(s: Scheme, dynamic: bool, horizon: f64, rng: &mut SimRng) -> Metrics {
    let rate = draw_rates(rng);
    let mut wan = Wan {
        known: vec![NOMINAL; rate.len()],
        rate,
    };
    // TSEngine measures every link (actively) before it builds its tree.
    if s.kind == Kind::TsEngine {
        wan.known = wan.rate.clone();
    }
    // The hub / root of single trees: the most central node by hops.
    let hops = hops_graph();
    let ecc: Vec<f64> = (0..NODES)
        .map(|r| ns::dijkstra(&hops, r).0.into_iter().fold(0.0, f64::max))
        .collect();
    let hub = (0..NODES)
        .min_by(|&a, &b| ecc[a].total_cmp(&ecc[b]).then(a.cmp(&b)))
        .unwrap_or(0);
    // NetStorm fixes its roots after the first run (shards never migrate).
    let roots = ns::select_roots(&graph(&wan.known), s.roots);
    let mut trees = plan(s, &wan, &roots, hub);
    let mut now = 0.0;
    let mut iterations = 0u64;
    let mut last_end = 0.0;
    while now < horizon {
        let mut used = vec![false; INTERNET2.len()];
        let start = now + COMPUTE;
        let pushed = transfer(
            &phase_flows(&trees, s, &wan, true),
            &mut wan,
            start,
            dynamic,
            &mut used,
            rng,
        );
        let pulled = transfer(
            &phase_flows(&trees, s, &wan, false),
            &mut wan,
            pushed,
            dynamic,
            &mut used,
            rng,
        );
        now = pulled + 2.0 * fill(&trees, &wan);
        if now <= horizon {
            iterations += 1;
            last_end = now;
        }
        if s.aware {
            for (e, u) in used.iter().enumerate() {
                if *u {
                    wan.known[e] = wan.rate[e];
                }
            }
            trees = plan(s, &wan, &roots, hub);
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
    }
}

fn throughput(opts: &Options, s: Scheme, dynamic: bool) -> f64 {
    let horizon = if dynamic { 3600.0 } else { 1200.0 };
    let xs: Vec<f64> = (0..opts.trials)
        .map(|t| run(s, dynamic, horizon, &mut dist::rng(opts.seed ^ 0xface, t)).throughput)
        .collect();
    report::median(&xs)
}

/// The reproduction: speed-ups over the star, the ablation, the roots sweep.
pub fn reproduce(opts: &Options) -> Report {
    let star_s = throughput(opts, Scheme::baseline(Kind::Star), false);
    let star_d = throughput(opts, Scheme::baseline(Kind::Star), true);
    let x = |s, dynamic| throughput(opts, s, dynamic) / if dynamic { star_d } else { star_s };
    let full = Scheme::fapt(NODES, true, true);
    let netstorm_s = x(full, false);
    let netstorm_d = x(full, true);
    let one_fapt = x(Scheme::fapt(1, true, false), false);
    let multi = x(Scheme::fapt(NODES, false, false), false);
    let multi_aware = x(Scheme::fapt(NODES, true, false), false);
    let kway_d = x(Scheme::baseline(Kind::KWay), true);
    let adaptive_d = x(Scheme::fapt(1, true, false), true);
    let roots: Vec<usize> = if opts.quick {
        vec![1, 3, 9]
    } else {
        (1..=NODES).collect()
    };
    let by_roots: Vec<(f64, f64)> = roots
        .iter()
        .map(|&k| (k as f64, x(Scheme::fapt(k, true, false), false)))
        .collect();
    let rows = vec![
        Row::new(
            "NetStorm / MXNet star, static",
            "9.2x",
            netstorm_s,
            Claim::Above(3.0),
        ),
        Row::new(
            "NetStorm / MXNet star, dynamic",
            "6.5x",
            netstorm_d,
            Claim::Above(2.0),
        ),
        Row::new(
            "single-root FAPT / star, static",
            "up to 6.7x",
            one_fapt,
            Claim::Above(1.5),
        ),
        Row::new(
            "multi-root FAPT, no awareness / star",
            "5.5x",
            multi,
            Claim::Above(1.5),
        ),
        Row::new(
            "awareness gain (multi-root)",
            "+20%",
            multi_aware / multi,
            Claim::Above(1.0),
        ),
        Row::new(
            "auxiliary paths on top / star",
            "7.5x",
            netstorm_s,
            Claim::Above(multi_aware * 0.95),
        ),
        Row::new(
            "adaptive FAPT / static balanced tree, dynamic",
            "1.7x",
            adaptive_d / kway_d,
            Claim::Above(1.0),
        ),
        Row::new(
            "roots 9 / roots 1 throughput",
            "2.8x (+180%)",
            by_roots.last().map_or(f64::NAN, |p| p.1) / by_roots[0].1,
            Claim::Above(1.0),
        ),
        Row::new(
            "MLNet balanced tree / star, static",
            "> 1",
            x(Scheme::baseline(Kind::KWay), false),
            Claim::Above(1.0),
        ),
        Row::new(
            "TSEngine tree / star, static",
            "> 1",
            x(Scheme::baseline(Kind::TsEngine), false),
            Claim::Above(1.0),
        ),
    ];
    Report {
        paper: "netstorm".into(),
        setup: format!(
            "9 DCs (Internet2-like, 12 links), 20-155 Mbit/s, 30 ms, 0.02% loss, AlexNet 244 MB in 1M-parameter chunks, {COMPUTE} s compute, static 20 min / dynamic 60 min (redraw every 3 min), {} trials (medians); speed-ups in iterations per hour over the star",
            opts.trials
        ),
        rows,
        figures: vec![Figure {
            file: "netstorm-roots.svg".into(),
            title: "NetStorm: throughput over the star vs number of roots".into(),
            x_label: "roots".into(),
            y_label: "throughput / MXNet star".into(),
            series: vec![Series { name: "multi-root FAPT + awareness".into(), points: by_roots }],
        }],
    }
}
