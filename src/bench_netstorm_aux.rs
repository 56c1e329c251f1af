//! `inagg bench --netstorm --aux`: what NetStorm's auxiliary paths buy on
//! the stack, measured (not a test: the figures depend on the machine).
//!
//! The sites, links and tensor of [`crate::bench_netstorm`]: four
//! emulators over paced 100 Mbit/s ports with link 1-3 at 10 Mbit/s each
//! way. The forest is the scheduler's first guess (every link nominal),
//! whose two trees both cross the slow link, and it stays: this measures
//! the detours alone, not awareness. Iterations alternate between the
//! forest without auxiliary paths and with them (each tree edge's fastest
//! path that avoids it, at the given PRIMARY_BUSY_BOUND and
//! AUXILIARY_QUEUE_LENGTH), so both see the same machine; each iteration
//! is one int32 all-reduce on every worker, checked exact.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use serde::Serialize;

use crate::bench_netstorm::{
    connect, exact_sum, iterate, knobs, start_sites, CONFIG, LINE_BPS, LINKS, SLOW, WORKERS,
};
use crate::netstorm::awareness::{Awareness, Scheduler};
use crate::netstorm::{bind_workers, site_endpoints, Deployment, Detours, Forest, Site};

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
pub fn run(iterations: usize, busy_bound: u16, queue_length: u16, json: bool) -> Result<()> {
    ensure!(iterations >= 1, "--repeat must be at least 1");
    let report = measure(iterations, busy_bound, queue_length)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    println!(
        "NetStorm auxiliary paths: 4 sites, links {} Mbit/s, {}-{} slow; the first-guess forest \
         (both trees cross it); {} tree edges with a path; bounds {}/{}",
        LINE_BPS / 1_000_000,
        SLOW.0,
        SLOW.1,
        report.paths,
        busy_bound,
        queue_length
    );
    for (name, arm) in [("without", &report.without), ("with", &report.with)] {
        println!(
            "{name:>8}: median {:8.1} ms over {} iterations, {} detours",
            arm.median_ms,
            arm.ms.len(),
            arm.detours_sent
        );
    }
    println!("gain (without / with - 1): {:+.2}", report.gain);
    Ok(())
}

fn measure(iterations: usize, busy_bound: u16, queue_length: u16) -> Result<AuxReport> {
    let clusters = start_sites()?;
    let mut sites = connect(&clusters)?;
    let links: Vec<(usize, usize, f64)> = LINKS.iter().map(|&(a, b)| (a, b, 0.0)).collect();
    let awareness = Awareness::new(WORKERS.len(), &links, LINE_BPS as f64, knobs())?;
    let sched = Scheduler::new(awareness, 2, Instant::now())?;
    let forest: Forest = sched.forest().clone();
    let detours = Detours::plan(
        &sched.awareness().graph(),
        &forest,
        busy_bound,
        queue_length,
    );
    let mut config = CONFIG;
    let mut workers = bind_workers(&sites, &WORKERS, &forest, &config, |_| {})?;
    let eps = site_endpoints(&workers, &WORKERS);
    let want = exact_sum(workers.len());
    let mut arms = [Vec::new(), Vec::new()];
    let mut sent = [0u64; 2];
    for _ in 0..iterations {
        for (arm, plan) in [Detours::none(), detours.clone()].iter().enumerate() {
            config.generation = config.generation.wrapping_add(1);
            let deployment = Deployment::install_with(&mut sites, &forest, plan, &config, &eps)?;
            for w in &mut workers {
                w.retarget(&forest, config.generation)?;
            }
            let took = iterate(&mut workers, &want)?;
            sent[arm] += detours_sent(&mut sites, &forest, &config)?;
            deployment.remove(&mut sites)?;
            arms[arm].push(took);
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

/// Detours sent by every site's tree jobs (read before they go).
fn detours_sent(
    sites: &mut [Site],
    forest: &Forest,
    config: &crate::netstorm::ForestConfig,
) -> Result<u64> {
    let mut sum = 0;
    for site in sites.iter_mut() {
        for t in 0..forest.trees.len() {
            sum += site.target.job(config.job(t)?)?.counters.detours_sent;
        }
    }
    Ok(sum)
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
