//! `inagg bench --priority`: what priorities buy, measured through the
//! emulator with paced ports (not a test: the figures depend on the machine).
//!
//! **Between jobs** (Geryon's classes in the network). Two hosts
//! (127.0.0.2 and 127.0.0.3) each run one worker of an urgent job and one of
//! a bulk job; the emulator's ports are per host, so both jobs' results
//! share each host's link. The urgent job's all-reduce time is measured
//! alone, next to a bulk job that saturates the links with priorities on
//! (the urgent job's own class map sends its results by queue 7) and with
//! them off (both jobs on queue 0). Target: with priorities on, within 1.2x
//! of alone.
//!
//! **Within one job** (P3 and ByteScheduler in the agent). Each worker hands
//! its scheduler a bulk tensor (the last layer) and, a little later, a small
//! urgent one (the first layer); the urgent tensor's latency from
//! submission to sum, and the time for both, per policy.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use inagg_emu::egress::{ClassQueue, LinkConfig};
use inagg_emu::{EmulatorConfig, FaultConfig};
use inagg_host_agent::priority::{Policy, Priority, Tensor};
use inagg_host_agent::{AgentConfig, Worker};
use serde::Serialize;

use inagg_testbed::local::{run_all, JobParams, LocalCluster};
use inagg_testbed::priority::{self, Arrival};
use inagg_testbed::verify::check_i32;

/// Line rate of the shared links.
const RATE_BPS: u64 = 1_000_000_000;
/// Elements of the urgent job's tensor.
const URGENT_LEN: usize = 1 << 20;

/// The whole report.
#[derive(Debug, Serialize)]
pub struct PriorityReport {
    /// Line rate of each host's link, Gbit/s.
    pub rate_gbps: f64,
    /// The urgent job's all-reduce time, median, ms.
    pub alone_ms: f64,
    /// Next to the bulk job, priorities on, ms.
    pub with_priority_ms: f64,
    /// Next to the bulk job, priorities off, ms.
    pub without_priority_ms: f64,
    /// with_priority / alone (target <= 1.2).
    pub ratio_on: f64,
    /// without_priority / alone.
    pub ratio_off: f64,
    /// Within one job, per policy.
    pub policies: Vec<PolicyRow>,
}

/// One scheduling policy within a job.
#[derive(Debug, Serialize)]
pub struct PolicyRow {
    /// The policy.
    pub policy: String,
    /// Urgent tensor: submission to sum, ms (median over workers and runs).
    pub urgent_ms: f64,
    /// Both tensors done, from the first submission, ms.
    pub total_ms: f64,
    /// Epochs per run.
    pub epochs: u64,
}

/// Runs both measurements and prints them.
pub fn run(repeat: usize, json: bool, out: &mut dyn Write) -> Result<()> {
    let (alone, on, off) = between_jobs(repeat)?;
    let policies = within_a_job(repeat)?;
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let report = PriorityReport {
        rate_gbps: RATE_BPS as f64 / 1e9,
        alone_ms: ms(alone),
        with_priority_ms: ms(on),
        without_priority_ms: ms(off),
        ratio_on: on.as_secs_f64() / alone.as_secs_f64(),
        ratio_off: off.as_secs_f64() / alone.as_secs_f64(),
        policies,
    };
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print(&report, repeat, out)?;
    }
    Ok(())
}

fn print(r: &PriorityReport, repeat: usize, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "inagg bench --priority: {} Gbit/s per host link, {repeat} runs (medians)",
        r.rate_gbps
    )?;
    writeln!(
        out,
        "between jobs: urgent job (2 workers, {URGENT_LEN} int32) next to a bulk job"
    )?;
    writeln!(out, "  alone                    {:8.2} ms", r.alone_ms)?;
    writeln!(
        out,
        "  bulk, priorities on      {:8.2} ms   {:.2}x alone (target <= 1.2x)",
        r.with_priority_ms, r.ratio_on
    )?;
    writeln!(
        out,
        "  bulk, priorities off     {:8.2} ms   {:.2}x alone",
        r.without_priority_ms, r.ratio_off
    )?;
    writeln!(
        out,
        "within a job: a bulk tensor, then an urgent one 2 ms later"
    )?;
    writeln!(
        out,
        "  policy                 urgent (ms)   both (ms)   epochs"
    )?;
    for p in &r.policies {
        writeln!(
            out,
            "  {:<22} {:>11.2} {:>11.2} {:>8}",
            p.policy, p.urgent_ms, p.total_ms, p.epochs
        )?;
    }
    Ok(())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// A paced emulator with one port per host.
fn paced() -> Result<LocalCluster> {
    LocalCluster::start_config(EmulatorConfig {
        link: Some(LinkConfig {
            rate_bps: RATE_BPS,
            queue_bytes: 4 << 20,
            per_host: true,
        }),
        faults: FaultConfig::default(),
        ..EmulatorConfig::ephemeral()
    })
}

/// The urgent job, in both measurements: 2 workers, K = 1024, 32 slots.
const URGENT: JobParams = JobParams {
    id: 1,
    workers: 2,
    pool_base: 0,
    pool_size: 32,
    elements: 1024,
};
/// Worker `w` of a job binds on host 127.0.0.(2 + w).
fn on_host(c: &mut AgentConfig) {
    c.bind = std::net::SocketAddr::from(([127, 0, 0, 2 + c.worker as u8], 0));
}

/// The urgent job's median all-reduce time: alone, next to the bulk job
/// with priorities on, and with them off.
fn between_jobs(repeat: usize) -> Result<(Duration, Duration, Duration)> {
    let cluster = paced()?;
    let urgent = URGENT;
    let bulk = JobParams {
        id: 2,
        workers: 2,
        pool_base: 64,
        pool_size: 64,
        elements: 2048,
    };
    let map = vec![ClassQueue { class: 1, queue: 7 }];
    let mut on = cluster.job_with_queues(urgent, map, |c| {
        on_host(c);
        c.priority = 1;
    })?;
    let mut off = cluster.job(
        JobParams {
            id: 3,
            pool_base: 32,
            ..urgent
        },
        |c| {
            on_host(c);
            c.priority = 1; // same class, but job 3 has no map: queue 0
        },
    )?;
    let mut bulk = cluster.job(bulk, on_host)?;
    let alone = urgent_times(&mut on, repeat)?;
    let mut with = |urgent: &mut Vec<Worker>| -> Result<Vec<Duration>> {
        let stop = AtomicBool::new(false);
        std::thread::scope(|s| {
            let b = s.spawn(|| saturate(&mut bulk, &stop));
            std::thread::sleep(Duration::from_millis(100));
            let t = urgent_times(urgent, repeat);
            stop.store(true, Ordering::Relaxed);
            b.join()
                .map_err(|_| anyhow::anyhow!("bulk job panicked"))??;
            t
        })
    };
    let on_times = with(&mut on)?;
    let off_times = with(&mut off)?;
    Ok((median(alone), median(on_times), median(off_times)))
}

/// `repeat` all-reduces of the urgent tensor, each timed and checked.
fn urgent_times(workers: &mut [Worker], repeat: usize) -> Result<Vec<Duration>> {
    let want: Vec<Vec<i32>> = (0..2)
        .map(|w| (0..URGENT_LEN as i32).map(|i| i ^ (w * 7)).collect())
        .collect();
    (0..repeat)
        .map(|_| {
            let mut data = want.clone();
            let t = Instant::now();
            run_all(workers, &mut data, |w, d| w.allreduce_i32(d))?;
            let took = t.elapsed();
            check_i32(&want, &data).map_err(anyhow::Error::msg)?;
            Ok(took)
        })
        .collect()
}

/// Keeps the bulk job's all-reduces going until `stop`. Its workers agree
/// when to stop through the all-reduce itself (the last element carries
/// each one's vote), so both run the same number of rounds.
fn saturate(workers: &mut [Worker], stop: &AtomicBool) -> Result<()> {
    let len = 1 << 20;
    loop {
        let mut data: Vec<Vec<i32>> = (0..workers.len()).map(|_| vec![1; len]).collect();
        let vote = i32::from(stop.load(Ordering::Relaxed));
        for d in &mut data {
            d[len - 1] = vote;
        }
        run_all(workers, &mut data, |w, d| w.allreduce_i32(d)).context("bulk job")?;
        if data[0][len - 1] > 0 {
            return Ok(());
        }
    }
}

/// The scheduler's policies on one job: the urgent tensor's latency and
/// the time for both.
fn within_a_job(repeat: usize) -> Result<Vec<PolicyRow>> {
    let cluster = paced()?;
    let job = URGENT;
    let mut workers = cluster.job(job, on_host)?;
    let slice = 32 * 1024;
    let policies = [
        ("FIFO (credit 4)", Policy::fifo(slice, 4)),
        ("P3", Policy::p3(slice)),
        ("ByteScheduler (credit 2)", Policy::bytescheduler(slice, 2)),
        ("ByteScheduler (credit 4)", Policy::bytescheduler(slice, 4)),
    ];
    let mut rows = Vec::new();
    for (name, policy) in policies {
        let (mut urgent, mut total, mut epochs) = (Vec::new(), Vec::new(), 0);
        for _ in 0..repeat {
            let plans = (0..2).map(|_| plan()).collect();
            let start = Instant::now();
            let runs = priority::run(&mut workers, plans, policy)?;
            total.push(start.elapsed());
            for r in &runs {
                let u = r
                    .done
                    .iter()
                    .find(|c| c.seq == 1)
                    .context("urgent tensor")?;
                urgent.push(u.finished.duration_since(u.submitted));
                epochs = r.stats.epochs;
            }
        }
        rows.push(PolicyRow {
            policy: name.into(),
            urgent_ms: median(urgent).as_secs_f64() * 1e3,
            total_ms: median(total).as_secs_f64() * 1e3,
            epochs,
        });
    }
    Ok(rows)
}

/// A bulk tensor of 4M int32 (the last layer) at once, the urgent 64K (the
/// first layer) 2 ms later.
fn plan() -> Vec<Arrival<i32>> {
    vec![
        Arrival {
            after: Duration::ZERO,
            tensor: Tensor {
                data: vec![1; 4 << 20],
                priority: Priority::geryon(9, 10, &[0.6]),
            },
        },
        Arrival {
            after: Duration::from_millis(2),
            tensor: Tensor {
                data: vec![2; 64 << 10],
                priority: Priority::geryon(0, 10, &[0.6]),
            },
        },
    ]
}
