//! NetStorm's network awareness and its scheduler (Algorithm 2) on the
//! stack (docs/PAPERS.md, "NetStorm: network awareness").
//!
//! The paper measures each in-tree link passively, with the model's own
//! chunks as probes, and rebuilds the trees every UPDATE_TIME from what it
//! measured. On inagg the WAN links between sites are the switches' egress
//! ports (an emulated WAN link is a port with a rate of its own), and the
//! probe is the port's train counter: the bytes of the packets that left
//! back to back, over the real time they took ([`PortStats::train_rate_bps`]).
//!
//! The estimation itself is the policy's
//! ([`inagg_sched::netstorm::awareness`], with its readings),
//! the same code the simulator runs. Readings, where the paper does not fit
//! a switch:
//! - The paper's receiver computes B = sum s_i / sum (t_recv - t_send),
//!   one-way, which needs clocks synchronised by NTP. The sending switch
//!   times its own departures instead: the same quantity (the rate the
//!   traffic got while there was traffic to send) on one clock. Each
//!   reading of a port's train counters is one sample.
//! - PROBE_CHUNK_NUM chunks of PROBE_CHUNK_SIZE become a byte count,
//!   `probe_bytes`.
//! - Roots are chosen once, from the first guess, and kept (parameter
//!   shards never migrate); their trees and shares follow the estimates.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use inagg_sched::netstorm::awareness::{LinkRates, Probing};
use inagg_sched::netstorm::{self, Graph};
use inagg_switch_api::queues::PortStats;

pub use inagg_sched::netstorm::awareness::Estimate;

use super::{Detours, Forest, Site};

/// The awareness knobs (Table II's names where the paper has them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AwarenessConfig {
    /// One chunk, bytes: an edge's weight is the time a chunk takes on it.
    pub chunk_bytes: u64,
    /// Bytes a port must send back to back since its last estimate before
    /// it gives a new one (PROBE_CHUNK_SIZE x PROBE_CHUNK_NUM).
    pub probe_bytes: u64,
    /// REPORT_RATE: the relative change an estimate must show to replace
    /// the known rate.
    pub report_rate: f64,
    /// UPDATE_TIME: the least time between two plans.
    pub update_time: Duration,
}

impl Default for AwarenessConfig {
    /// Chunks of 64 Ki int32 elements, 64 KiB of probe, 10%, 5 s.
    fn default() -> Self {
        AwarenessConfig {
            chunk_bytes: 256 * 1024,
            probe_bytes: 64 * 1024,
            report_rate: 0.1,
            update_time: Duration::from_secs(5),
        }
    }
}

/// The links' known rates, renewed from the switches' probes: the policy's
/// passive estimation ([`LinkRates`]) fed with the ports' train counters.
#[derive(Debug, Clone)]
pub struct Awareness {
    config: AwarenessConfig,
    rates: LinkRates,
    /// The train counters each (site, port) showed at its last reading.
    seen: HashMap<(usize, SocketAddr), (u64, u64)>,
}

impl Awareness {
    /// An overlay of `nodes` sites and its links `(a, b, latency s)`, every
    /// direction first guessed at `nominal_bps`.
    pub fn new(
        nodes: usize,
        links: &[(usize, usize, f64)],
        nominal_bps: f64,
        config: AwarenessConfig,
    ) -> Result<Awareness> {
        ensure!(
            config.chunk_bytes > 0 && config.probe_bytes > 0,
            "chunk and probe sizes must be at least one byte"
        );
        let probing = Probing {
            probe_bits: config.probe_bytes as f64 * 8.0,
            report_rate: config.report_rate,
        };
        let rates =
            LinkRates::new(nodes, links, nominal_bps, probing).map_err(anyhow::Error::msg)?;
        Ok(Awareness {
            config,
            rates,
            seen: HashMap::new(),
        })
    }

    /// The knobs.
    pub fn config(&self) -> AwarenessConfig {
        self.config
    }

    /// The known rate from `from` to `to`, bit/s (`None`: no such link).
    pub fn rate(&self, from: usize, to: usize) -> Option<f64> {
        self.rates.rate(from, to)
    }

    /// Reads site `site`'s port counters: a port toward another site's
    /// data endpoint (`datas`) over an overlay link is that link's
    /// direction. Returns the estimates that changed a known rate.
    pub fn observe(
        &mut self,
        site: usize,
        ports: &[PortStats],
        datas: &[SocketAddr],
    ) -> Vec<Estimate> {
        let mut out = Vec::new();
        for port in ports {
            let Some(to) = datas.iter().position(|d| *d == port.port) else {
                continue;
            };
            if self.rates.rate(site, to).is_none() {
                continue;
            }
            let (bytes, ns) = self.train_since_last(site, port);
            out.extend(
                self.rates
                    .sample(site, to, bytes as f64 * 8.0, ns as f64 * 1e-9),
            );
        }
        out
    }

    /// What `port`'s train counters added since the last reading. Counters
    /// that went back (reset) start over from zero.
    fn train_since_last(&mut self, site: usize, port: &PortStats) -> (u64, u64) {
        let now = (port.train_bytes, port.train_ns);
        let last = self.seen.insert((site, port.port), now).unwrap_or((0, 0));
        if now.0 < last.0 || now.1 < last.1 {
            now
        } else {
            (now.0 - last.0, now.1 - last.1)
        }
    }

    /// The overlay as the policy sees it.
    pub fn graph(&self) -> Graph {
        self.rates.graph(self.config.chunk_bytes as f64 * 8.0)
    }
}

/// What the paper calls a policy: the synchronization topology and its
/// auxiliary paths, planned from the same knowledge and rolled out
/// together ([`super::Deployment::replace_with`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub forest: Forest,
    /// [`Detours::none`] unless the scheduler plans auxiliary paths.
    pub detours: Detours,
}

/// Algorithm 2 on the stack: before each push (the policy-consistency
/// barrier), read every site's probes; when UPDATE_TIME has passed since
/// the last plan, plan the fixed roots' trees again from what is known,
/// and with them their auxiliary paths (Algorithm 3) when asked to
/// ([`Scheduler::with_auxiliary_paths`]).
#[derive(Debug)]
pub struct Scheduler {
    awareness: Awareness,
    roots: Vec<usize>,
    forest: Forest,
    /// PRIMARY_BUSY_BOUND and AUXILIARY_QUEUE_LENGTH, when auxiliary paths
    /// are planned.
    bounds: Option<(u16, u16)>,
    detours: Detours,
    last_plan: Instant,
    plans: u64,
}

impl Scheduler {
    /// Chooses the `roots` best roots from the first guess (for good) and
    /// plans their trees; `now` starts the UPDATE_TIME clock.
    pub fn new(awareness: Awareness, roots: usize, now: Instant) -> Result<Scheduler> {
        let graph = awareness.graph();
        ensure!(
            (1..=graph.nodes).contains(&roots),
            "{roots} roots for {} sites",
            graph.nodes
        );
        let roots = netstorm::select_roots(&graph, roots);
        let forest = Forest::with_roots(&graph, &roots);
        forest
            .check(graph.nodes)
            .context("the overlay does not connect every site")?;
        Ok(Scheduler {
            awareness,
            roots,
            forest,
            bounds: None,
            detours: Detours::none(),
            last_plan: now,
            plans: 0,
        })
    }

    /// Plans auxiliary paths with every forest, from the same known rates,
    /// with the sender's bounds (Table II's are 2 and 1). Links that carry
    /// no tree are then measured too, once detours cross them: the paper's
    /// remedy for the avalanche effect.
    pub fn with_auxiliary_paths(mut self, busy_bound: u16, queue_length: u16) -> Scheduler {
        self.bounds = Some((busy_bound, queue_length));
        self.detours = self.plan_detours(&self.awareness.graph(), &self.forest);
        self
    }

    /// The forest in force.
    pub fn forest(&self) -> &Forest {
        &self.forest
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        Policy {
            forest: self.forest.clone(),
            detours: self.detours.clone(),
        }
    }

    fn plan_detours(&self, graph: &Graph, forest: &Forest) -> Detours {
        match self.bounds {
            Some((bound, queue)) => Detours::plan(graph, forest, bound, queue),
            None => Detours::none(),
        }
    }

    /// The fixed roots.
    pub fn roots(&self) -> &[usize] {
        &self.roots
    }

    /// What is known of the links.
    pub fn awareness(&self) -> &Awareness {
        &self.awareness
    }

    /// Plans made since the start (not counting the first).
    pub fn plans(&self) -> u64 {
        self.plans
    }

    /// The barrier step: reads every site's port counters (`sites[v]`'s
    /// data endpoint is site v's), and when UPDATE_TIME has passed plans
    /// again. Returns the estimates applied and the new policy if it
    /// differs from the one in force (which it then replaces: the caller
    /// installs it with the next generation before anyone pushes).
    pub fn before_push(
        &mut self,
        sites: &mut [Site],
        now: Instant,
    ) -> Result<(Vec<Estimate>, Option<Policy>)> {
        let datas: Vec<SocketAddr> = sites.iter().map(|s| s.data).collect();
        let mut estimates = Vec::new();
        for (v, site) in sites.iter_mut().enumerate() {
            let report = site
                .target
                .queues()
                .with_context(|| format!("reading site {v}'s port counters"))?;
            estimates.extend(self.awareness.observe(v, &report.ports, &datas));
        }
        if now.saturating_duration_since(self.last_plan) < self.awareness.config.update_time {
            return Ok((estimates, None));
        }
        self.last_plan = now;
        self.plans += 1;
        let graph = self.awareness.graph();
        let forest = Forest::with_roots(&graph, &self.roots);
        let detours = self.plan_detours(&graph, &forest);
        if forest == self.forest && detours == self.detours {
            return Ok((estimates, None));
        }
        self.forest = forest;
        self.detours = detours;
        Ok((estimates, Some(self.policy())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBIT: f64 = 1e6;

    fn datas() -> Vec<SocketAddr> {
        (0..3)
            .map(|v| SocketAddr::from(([127, 0, 0, 1], 5000 + v)))
            .collect()
    }

    fn port(to: SocketAddr, train_bytes: u64, train_ns: u64) -> PortStats {
        PortStats {
            port: to,
            rate_bps: 0,
            queues: Vec::new(),
            train_bytes,
            train_ns,
        }
    }

    /// A path 0-1-2, 100 Mbit/s first guess, 1 KB probes.
    fn path() -> Awareness {
        let config = AwarenessConfig {
            chunk_bytes: 125_000,
            probe_bytes: 1000,
            report_rate: 0.1,
            update_time: Duration::ZERO,
        };
        Awareness::new(3, &[(0, 1, 0.0), (1, 2, 0.001)], 100.0 * MBIT, config).unwrap()
    }

    #[test]
    fn a_port_toward_a_neighbour_measures_that_direction_once_it_has_probed_enough() {
        let mut a = path();
        let d = datas();
        // 500 bytes in 400 us: not enough probe yet.
        assert_eq!(a.observe(0, &[port(d[1], 500, 400_000)], &d), []);
        // 2500 bytes in 2 ms: 10 Mbit/s, from 0 to 1 only.
        let got = a.observe(0, &[port(d[1], 2500, 2_000_000)], &d);
        assert_eq!(
            got,
            [Estimate {
                from: 0,
                to: 1,
                rate_bps: 10.0 * MBIT
            }]
        );
        assert_eq!(a.rate(0, 1), Some(10.0 * MBIT));
        assert_eq!(a.rate(1, 0), Some(100.0 * MBIT));
        // The next estimate counts only what came after: 1000 bytes in
        // 0.1 ms, 80 Mbit/s.
        a.observe(0, &[port(d[1], 3500, 2_100_000)], &d);
        assert_eq!(a.rate(0, 1), Some(80.0 * MBIT));
        // A change within REPORT_RATE (10%) is not reported.
        let within = a.observe(0, &[port(d[1], 4500, 2_208_000)], &d);
        assert_eq!((within, a.rate(0, 1)), (vec![], Some(80.0 * MBIT)));
    }

    #[test]
    fn ports_that_are_not_overlay_links_are_ignored_and_resets_start_over() {
        let mut a = path();
        let d = datas();
        let worker = SocketAddr::from(([127, 0, 0, 1], 9));
        // A worker's port, the site's own address, and 0-2 (no link).
        let ports = [
            port(worker, 9000, 1000),
            port(d[0], 9000, 1000),
            port(d[2], 9000, 1000),
        ];
        assert_eq!(a.observe(0, &ports, &d), []);
        assert_eq!(a.rate(0, 2), None);
        // Counters reset on the switch: the new reading counts from zero.
        a.observe(1, &[port(d[2], 10_000, 1_000_000)], &d);
        a.observe(1, &[port(d[2], 5000, 1_000_000)], &d);
        assert_eq!(a.rate(1, 2), Some(40.0 * MBIT));
    }

    #[test]
    fn an_edge_weighs_a_chunk_over_its_slower_direction_plus_latency() {
        let mut a = path();
        let d = datas();
        a.observe(2, &[port(d[1], 1250, 1_000_000)], &d);
        let g = a.graph();
        // 1 Mbit chunk: 0.01 s at 100 Mbit/s; 1-2 runs 10 Mbit/s one way.
        assert_eq!(g.weight(0, 1), Some(0.01));
        assert_eq!(g.weight(1, 2), Some(0.001 + 0.1));
    }

    #[test]
    fn bad_overlays_and_knobs_are_refused() {
        // The overlay and REPORT_RATE are the estimator's to check
        // (sched::netstorm::awareness has the cases); its words come
        // through. Chunk and probe sizes in bytes are this side's.
        let c = AwarenessConfig::default();
        let err = |r: Result<Awareness>| r.unwrap_err().to_string();
        assert!(err(Awareness::new(2, &[(0, 2, 0.0)], 1e6, c)).contains("0-2"));
        let no_probe = AwarenessConfig {
            probe_bytes: 0,
            ..c
        };
        let e = err(Awareness::new(2, &[(0, 1, 0.0)], 1e6, no_probe));
        assert!(e.contains("at least one byte"), "{e}");
    }
}
