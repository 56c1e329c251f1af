//! `inagg bench --netstorm`: what NetStorm's network awareness buys on the
//! stack, measured (not a test: the figures depend on the machine).
//!
//! Four sites, each an emulator with its workers (2, 1, 2, 1), on the
//! overlay of `tests/netstorm.rs` (a ring 0-1-2-3 with chords 0-3 and 1-3).
//! Every port runs at 100 Mbit/s but link 1-3, a 10 Mbit/s WAN link each
//! way. The scheduler starts from the first guess (every link nominal),
//! whose two trees both cross 1-3; before every iteration it reads the
//! switches' probes and plans again (UPDATE_TIME 0), and a changed forest
//! is rolled out with the next generation. Each iteration is one int32
//! all-reduce of the tensor on every worker, checked exact; the report
//! gives each iteration's time and forest, and what was measured.
//!
//! `--ablation` runs the paper's stages (Fig. 18) on the same setup, one
//! after another on fresh sites: the first guess kept ([`Stage::Lite`]),
//! re-planned before every iteration ([`Stage::Std`]), and re-planned with
//! auxiliary paths ([`Stage::Pro`]).

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use inagg_emu::egress::LinkConfig;
use inagg_emu::{EmulatorConfig, FaultConfig};
use inagg_switch_control::EmuTarget;
use serde::Serialize;

use inagg_policy::netstorm::awareness::{Awareness, AwarenessConfig, Scheduler};
use inagg_policy::netstorm::{
    bind_workers, detours_sent, site_endpoints, Deployment, ForestConfig, ForestWorker, Site,
};
use inagg_testbed::local::LocalCluster;

pub(crate) const WORKERS: [u16; 4] = [2, 1, 2, 1];
pub(crate) const LINKS: [(usize, usize); 5] = [(0, 1), (1, 2), (2, 3), (0, 3), (1, 3)];
pub(crate) const SLOW: (usize, usize) = (1, 3);
pub(crate) const LINE_BPS: u64 = 100_000_000;
const SLOW_BPS: u64 = 10_000_000;
/// Elements per worker: 1 MB of int32.
const LEN: usize = 1 << 18;
pub(crate) const CONFIG: ForestConfig = ForestConfig {
    first_job: 1,
    pool_base: 0,
    pool_size: 16,
    elements: 256,
    generation: 0,
};

/// One iteration.
#[derive(Debug, Serialize)]
pub struct Iteration {
    /// The all-reduce's time, ms (the slowest worker's).
    pub ms: f64,
    /// The forest's generation.
    pub generation: u16,
    /// Whether some tree crossed the slow link.
    pub crosses_slow_link: bool,
    /// Partial sums sent round an auxiliary path in this iteration.
    pub detours_sent: u64,
}

/// One direction of a link, as the scheduler knows it at the end.
#[derive(Debug, Serialize)]
pub struct Known {
    /// Sending site.
    pub from: usize,
    /// Receiving site.
    pub to: usize,
    /// Its rate, Mbit/s (the first guess where nothing was measured).
    pub mbps: f64,
    /// The port's configured rate, Mbit/s.
    pub true_mbps: f64,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct NetstormReport {
    /// Per iteration, in order.
    pub iterations: Vec<Iteration>,
    /// Every link direction at the end.
    pub known: Vec<Known>,
    /// Plans made (one per iteration after the first).
    pub plans: u64,
}

/// Runs `iterations` iterations and prints the report.
pub fn run(iterations: usize, json: bool, out: &mut dyn Write) -> Result<()> {
    ensure!(
        iterations >= 2,
        "--repeat must be at least 2: blind, then aware"
    );
    let report = measure(iterations, Stage::Std)?;
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "NetStorm awareness: 4 sites, {} workers, {} MB each; links {} Mbit/s, {}-{} {} Mbit/s",
        WORKERS.iter().sum::<u16>(),
        LEN * 4 / 1_000_000,
        LINE_BPS / 1_000_000,
        SLOW.0,
        SLOW.1,
        SLOW_BPS / 1_000_000
    )?;
    for (i, it) in report.iterations.iter().enumerate() {
        writeln!(
            out,
            "iteration {i}: {:8.1} ms  generation {}{}",
            it.ms,
            it.generation,
            if it.crosses_slow_link {
                "  (crosses the slow link)"
            } else {
                ""
            }
        )?;
    }
    writeln!(
        out,
        "known rates at the end (Mbit/s, measured or first guess / configured):"
    )?;
    for k in &report.known {
        writeln!(
            out,
            "  {} -> {}: {:7.2} / {:.0}",
            k.from, k.to, k.mbps, k.true_mbps
        )?;
    }
    Ok(())
}

/// One stage of the ablation.
#[derive(Debug, Serialize)]
pub struct StageReport {
    pub stage: Stage,
    /// Iteration times, ms, in order (the first on the first guess).
    pub ms: Vec<f64>,
    /// The median after the first iteration.
    pub median_ms: f64,
    /// Partial sums sent round an auxiliary path, per iteration.
    pub detours_sent: Vec<u64>,
}

/// NetStorm's ablation (Fig. 18), live: the stages one after another, each
/// on fresh sites, `iterations` iterations each, then the stages' medians
/// after the first iteration (which every stage runs on the first guess).
pub fn run_ablation(iterations: usize, json: bool, out: &mut dyn Write) -> Result<()> {
    ensure!(
        iterations >= 2,
        "--repeat must be at least 2: the first guess, then the stage's plan"
    );
    let mut stages = Vec::new();
    for stage in [Stage::Lite, Stage::Std, Stage::Pro] {
        let report = measure(iterations, stage)?;
        let ms: Vec<f64> = report.iterations.iter().map(|i| i.ms).collect();
        let mut later = ms[1..].to_vec();
        later.sort_by(f64::total_cmp);
        stages.push(StageReport {
            stage,
            median_ms: later[later.len() / 2],
            ms,
            detours_sent: report.iterations.iter().map(|i| i.detours_sent).collect(),
        });
    }
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&stages)?)?;
        return Ok(());
    }
    writeln!(
        out,
        "NetStorm's stages (Fig. 18): 4 sites, links {} Mbit/s, {}-{} {} Mbit/s; {} iterations each",
        LINE_BPS / 1_000_000,
        SLOW.0,
        SLOW.1,
        SLOW_BPS / 1_000_000,
        iterations
    )?;
    let lite = stages[0].median_ms;
    for s in &stages {
        writeln!(
            out,
            "{:>5}: median {:8.1} ms after the first iteration ({:8.1} ms first), {:.2}x lite, \
             detours {} first, {} after",
            format!("{:?}", s.stage),
            s.median_ms,
            s.ms[0],
            lite / s.median_ms,
            s.detours_sent[0],
            s.detours_sent[1..].iter().sum::<u64>()
        )?;
    }
    writeln!(
        out,
        "awareness gain (std / lite): {:+.2}; auxiliary-path gain (pro / std): {:+.2}",
        lite / stages[1].median_ms - 1.0,
        stages[1].median_ms / stages[2].median_ms - 1.0
    )?;
    Ok(())
}

/// Which of NetStorm's stages run (the paper's Fig. 18 names them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Stage {
    /// Multi-root FAPT on the first guess, never re-planned.
    Lite,
    /// With network awareness: re-planned before every iteration.
    Std,
    /// With auxiliary paths too (Table II's bounds, 2 and 1).
    Pro,
}

fn measure(iterations: usize, stage: Stage) -> Result<NetstormReport> {
    let clusters = start_sites()?;
    let mut sites = connect(&clusters)?;
    let links: Vec<(usize, usize, f64)> = LINKS.iter().map(|&(a, b)| (a, b, 0.0)).collect();
    let awareness = Awareness::new(WORKERS.len(), &links, LINE_BPS as f64, knobs())?;
    let mut sched = Scheduler::new(awareness, 2, Instant::now())?;
    if stage == Stage::Pro {
        sched = sched.with_auxiliary_paths(2, 1);
    }
    let mut config = CONFIG;
    let first = sched.policy();
    let mut workers = bind_workers(&sites, &WORKERS, &first.forest, &config, |_| {})?;
    let eps = site_endpoints(&workers, &WORKERS);
    let mut deployment =
        Deployment::install_with(&mut sites, &first.forest, &first.detours, &config, &eps)?;
    let want = exact_sum(workers.len());
    let mut out = Vec::new();
    // Detours the jobs in force had sent at the last reading (their
    // counters go with them).
    let mut seen = 0;
    for i in 0..iterations {
        if i > 0 && stage != Stage::Lite {
            let (_, plan) = sched.before_push(&mut sites, Instant::now())?;
            if let Some(policy) = plan {
                seen = 0;
                config.generation = config.generation.wrapping_add(1);
                deployment = deployment.replace_with(
                    &mut sites,
                    &policy.forest,
                    &policy.detours,
                    &config,
                    &eps,
                )?;
                for w in &mut workers {
                    w.retarget(&policy.forest, config.generation)?;
                }
            }
        }
        let ms = iterate(&mut workers, &want)?.as_secs_f64() * 1e3;
        let sent = detours_sent(&mut sites, sched.forest(), &config)?;
        out.push(Iteration {
            ms,
            generation: config.generation,
            crosses_slow_link: sched.forest().uses(SLOW),
            detours_sent: sent - seen,
        });
        seen = sent;
    }
    deployment.remove(&mut sites)?;
    Ok(NetstormReport {
        iterations: out,
        known: known(&sched),
        plans: sched.plans(),
    })
}

/// 256 KiB probes, REPORT_RATE 10%, UPDATE_TIME 0.
pub(crate) fn knobs() -> AwarenessConfig {
    AwarenessConfig {
        chunk_bytes: u64::from(CONFIG.elements - 1) * 4,
        probe_bytes: 256 * 1024,
        report_rate: 0.1,
        update_time: Duration::ZERO,
    }
}

/// The four emulators, 1% loss each way, ports paced.
pub(crate) fn start_sites() -> Result<Vec<LocalCluster>> {
    (0..WORKERS.len())
        .map(|v| {
            LocalCluster::start_config(EmulatorConfig {
                faults: FaultConfig::loss(0.01, 90 + v as u64),
                link: Some(LinkConfig {
                    rate_bps: LINE_BPS,
                    queue_bytes: 1 << 20,
                    per_host: false,
                }),
                ..EmulatorConfig::ephemeral()
            })
        })
        .collect()
}

/// Each site's control target; the slow link's two ports slowed.
pub(crate) fn connect(clusters: &[LocalCluster]) -> Result<Vec<Site>> {
    let mut sites = clusters
        .iter()
        .map(|c| {
            Ok(Site {
                target: Box::new(EmuTarget::connect(c.control_addr())?),
                data: c.emu.data_addr(),
            })
        })
        .collect::<Result<Vec<Site>>>()?;
    for (a, b) in [SLOW, (SLOW.1, SLOW.0)] {
        let to: SocketAddr = sites[b].data;
        sites[a].target.set_port_rate(to, Some(SLOW_BPS))?;
    }
    Ok(sites)
}

/// Worker g's tensor.
fn input(g: usize) -> Vec<i32> {
    (0..LEN)
        .map(|i| ((g * 31 + i) % 1001) as i32 - 500)
        .collect()
}

/// The exact sum of `workers` workers' [`input`].
pub(crate) fn exact_sum(workers: usize) -> Vec<i32> {
    let mut want = vec![0i32; LEN];
    for g in 0..workers {
        for (w, x) in want.iter_mut().zip(input(g)) {
            *w += x;
        }
    }
    want
}

/// One all-reduce on every worker at once, each result checked against
/// `want`; the slowest worker's time.
pub(crate) fn iterate(workers: &mut [ForestWorker], want: &[i32]) -> Result<Duration> {
    std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .iter_mut()
            .enumerate()
            .map(|(g, w)| {
                s.spawn(move || -> Result<Duration> {
                    let mut data = input(g);
                    let start = Instant::now();
                    w.allreduce_i32(&mut data)?;
                    let took = start.elapsed();
                    ensure!(data == want, "worker {g}: not the exact sum");
                    Ok(took)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("worker thread panicked"))
            .try_fold(Duration::ZERO, |m, t| t.map(|t| m.max(t)))
    })
    .context("an iteration's all-reduce")
}

fn known(sched: &Scheduler) -> Vec<Known> {
    LINKS
        .iter()
        .flat_map(|&(a, b)| [(a, b), (b, a)])
        .map(|(from, to)| {
            let slow = (from, to) == SLOW || (to, from) == SLOW;
            Known {
                from,
                to,
                mbps: sched.awareness().rate(from, to).unwrap_or(0.0) / 1e6,
                true_mbps: if slow { SLOW_BPS } else { LINE_BPS } as f64 / 1e6,
            }
        })
        .collect()
}
