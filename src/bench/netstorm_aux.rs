//! `inagg bench --netstorm --aux`: what NetStorm's auxiliary paths buy on
//! the stack, measured (not a test: the figures depend on the machine).
//!
//! The sites, links and tensor of [`crate::bench::netstorm`]: four
//! emulators over paced 100 Mbit/s ports with link 1-3 at 10 Mbit/s each
//! way. The forest is the scheduler's first guess (every link nominal),
//! whose two trees both cross the slow link, and it stays: this measures
//! the detours alone, not awareness. Iterations alternate between the
//! forest without auxiliary paths and with them (each tree edge's fastest
//! path that avoids it, at the given PRIMARY_BUSY_BOUND and
//! AUXILIARY_QUEUE_LENGTH), so both see the same machine; each iteration
//! is one int32 all-reduce on every worker, checked exact.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use serde::Serialize;

use crate::bench::netstorm::{
    connect, exact_sum, iterate, knobs, start_sites, CONFIG, LINE_BPS, LINKS, SLOW, WORKERS,
};
use inagg_policy::netstorm::awareness::{Awareness, Scheduler};
use inagg_policy::netstorm::{
    bind_workers, detours_sent, site_endpoints, Deployment, Detours, Forest, ForestConfig,
    ForestWorker, Site,
};
use inagg_sched::netstorm::Graph;

/// One arm of the comparison.
#[derive(Debug, Serialize)]
pub struct Arm {
    /// Iteration times, ms, in order.
    pub ms: Vec<f64>,
    /// Their median.
    pub median_ms: f64,
    /// Partial sums sent round an auxiliary path, over every site.
    pub detours_sent: u64,
}

/// The report.
#[derive(Debug, Serialize)]
pub struct AuxReport {
    /// PRIMARY_BUSY_BOUND.
    pub busy_bound: u16,
    /// AUXILIARY_QUEUE_LENGTH.
    pub queue_length: u16,
    /// Tree edges given an auxiliary path.
    pub paths: usize,
    /// The forest alone.
    pub without: Arm,
    /// The forest with its auxiliary paths.
    pub with: Arm,
    /// Gain: median without over median with, minus one (NetStorm's Eq. 18).
    pub gain: f64,
}

/// Runs `iterations` iterations of each arm and prints the report.
pub fn run(
    iterations: usize,
    busy_bound: u16,
    queue_length: u16,
    json: bool,
    out: &mut dyn Write,
) -> Result<()> {
    ensure!(iterations >= 1, "--repeat must be at least 1");
    let report = Bench::start()?.compare(iterations, busy_bound, queue_length)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    print_setup(report.paths, out)?;
    writeln!(out, "bounds {busy_bound}/{queue_length}")?;
    for (name, arm) in [("without", &report.without), ("with", &report.with)] {
        writeln!(
            out,
            "{name:>8}: median {:8.1} ms over {} iterations, {} detours",
            arm.median_ms,
            arm.ms.len(),
            arm.detours_sent
        )?;
    }
    writeln!(out, "gain (without / with - 1): {:+.2}", report.gain)?;
    Ok(())
}

/// The paper's grid search (Fig. 17), live: every PRIMARY_BUSY_BOUND in
/// 1-4 by every AUXILIARY_QUEUE_LENGTH in 1-5, `iterations` of each arm at
/// each point, on one set of sites.
pub fn run_grid(iterations: usize, json: bool, out: &mut dyn Write) -> Result<()> {
    ensure!(iterations >= 1, "--repeat must be at least 1");
    let mut bench = Bench::start()?;
    let mut reports = Vec::new();
    for busy_bound in 1..=4 {
        for queue_length in 1..=5 {
            reports.push(bench.compare(iterations, busy_bound, queue_length)?);
        }
    }
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&reports)?)?;
        return Ok(());
    }
    print_setup(reports[0].paths, out)?;
    writeln!(out, "gain (without / with - 1), and detours sent, by PRIMARY_BUSY_BOUND (rows) and AUXILIARY_QUEUE_LENGTH (columns):")?;
    writeln!(
        out,
        "bound {}",
        (1..=5).map(|q| format!("{q:>14}")).collect::<String>()
    )?;
    for row in reports.chunks(5) {
        let cells: String = row
            .iter()
            .map(|r| format!("{:>+7.2} ({:>4})", r.gain, r.with.detours_sent))
            .collect();
        writeln!(out, "{:>5} {cells}", row[0].busy_bound)?;
    }
    let gains = reports.iter().map(|r| r.gain);
    let (low, high) = gains.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), g| {
        (l.min(g), h.max(g))
    });
    writeln!(
        out,
        "gain over the grid: {low:+.2} to {high:+.2} (the paper's: +0.30 to +0.65)"
    )?;
    Ok(())
}

fn print_setup(paths: usize, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "NetStorm auxiliary paths: 4 sites, links {} Mbit/s, {}-{} slow; the first-guess forest \
         (both trees cross it); {paths} tree edges with a path",
        LINE_BPS / 1_000_000,
        SLOW.0,
        SLOW.1,
    )
}

/// The sites, the first-guess forest and its workers, kept across
/// comparisons.
struct Bench {
    _clusters: Vec<inagg_testbed::local::LocalCluster>,
    sites: Vec<Site>,
    graph: Graph,
    forest: Forest,
    config: ForestConfig,
    workers: Vec<ForestWorker>,
    eps: Vec<Vec<Vec<std::net::SocketAddr>>>,
    want: Vec<i32>,
}

impl Bench {
    fn start() -> Result<Bench> {
        let clusters = start_sites()?;
        let sites = connect(&clusters)?;
        let links: Vec<(usize, usize, f64)> = LINKS.iter().map(|&(a, b)| (a, b, 0.0)).collect();
        let awareness = Awareness::new(WORKERS.len(), &links, LINE_BPS as f64, knobs())?;
        let sched = Scheduler::new(awareness, 2, Instant::now())?;
        let forest: Forest = sched.forest().clone();
        let config = CONFIG;
        let workers = bind_workers(&sites, &WORKERS, &forest, &config, |_| {})?;
        let eps = site_endpoints(&workers, &WORKERS);
        Ok(Bench {
            _clusters: clusters,
            sites,
            graph: sched.awareness().graph(),
            forest,
            config,
            want: exact_sum(workers.len()),
            workers,
            eps,
        })
    }

    /// Alternates the forest without and with its auxiliary paths at the
    /// given bounds, `iterations` times each.
    fn compare(
        &mut self,
        iterations: usize,
        busy_bound: u16,
        queue_length: u16,
    ) -> Result<AuxReport> {
        let detours = Detours::plan(&self.graph, &self.forest, busy_bound, queue_length);
        let mut arms = [Vec::new(), Vec::new()];
        let mut sent = [0u64; 2];
        for _ in 0..iterations {
            for (arm, plan) in [Detours::none(), detours.clone()].iter().enumerate() {
                let (took, detours) = self.iteration(plan)?;
                arms[arm].push(took);
                sent[arm] += detours;
            }
        }
        let [without, with] = arms;
        let (without, with) = (arm(without, sent[0]), arm(with, sent[1]));
        Ok(AuxReport {
            busy_bound,
            queue_length,
            paths: detours.count(),
            gain: without.median_ms / with.median_ms - 1.0,
            without,
            with,
        })
    }

    /// One all-reduce on a fresh generation of the forest with `plan`:
    /// its time and the detours it sent.
    fn iteration(&mut self, plan: &Detours) -> Result<(Duration, u64)> {
        self.config.generation = self.config.generation.wrapping_add(1);
        let (sites, forest, config) = (&mut self.sites, &self.forest, &self.config);
        let deployment = Deployment::install_with(sites, forest, plan, config, &self.eps)?;
        for w in &mut self.workers {
            w.retarget(forest, config.generation)?;
        }
        let took = iterate(&mut self.workers, &self.want)?;
        let sent = detours_sent(sites, forest, config)?;
        deployment.remove(sites)?;
        Ok((took, sent))
    }
}

fn arm(times: Vec<Duration>, detours_sent: u64) -> Arm {
    let ms: Vec<f64> = times.iter().map(|t| t.as_secs_f64() * 1e3).collect();
    let mut sorted = ms.clone();
    sorted.sort_by(f64::total_cmp);
    let median_ms = sorted[sorted.len() / 2];
    Arm {
        ms,
        median_ms,
        detours_sent,
    }
}
