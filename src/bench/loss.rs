//! `inagg bench --loss`: goodput under loss, side by side with lossless, in
//! one run: workers all-reduce a float tensor through the emulator at 0-30%
//! loss per direction, for the default packets (K = 16370, pool 8) and a
//! Tofino job's (K = 64, pool 512), with 4 workers and with 8, and with
//! duplication and reordering on top of 1% loss.
//!
//! Each row is the median of three runs (a run of the default packets takes
//! tens of milliseconds, and one descheduled worker moves it by a third).
//! Spurious retransmissions are the retransmissions beyond the data the
//! emulator dropped (every drop of a contribution or of a result's copy
//! needs one retransmission; any beyond that was sent for a packet not
//! lost; a dropped query or status needs none), summed over the runs.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use crate::args::{PoolArgs, WindowArgs};
use crate::cmd::demo::{DemoArgs, DemoReport, FloatFormat};

/// Runs per row; the row's goodput is their median.
const RUNS: usize = 3;

/// One row: a configuration at one fault setting.
#[derive(Debug, Serialize)]
struct Row {
    workers: u16,
    k: u16,
    pool: u32,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    goodput_gbps: f64,
    of_lossless: f64,
    lost_data: u64,
    retransmissions: u64,
    spurious: u64,
    queries: u64,
    timeouts: u64,
    verified: bool,
}

/// A series of rows sharing a lossless baseline.
struct Series {
    workers: u16,
    k: u16,
    pool: u32,
    /// (loss, duplicate and reorder) per row; the first is lossless.
    faults: &'static [(f64, f64)],
}

const SERIES: [Series; 4] = [
    Series {
        workers: 4,
        k: 16370,
        pool: 8,
        faults: &[
            (0.0, 0.0),
            (0.01, 0.0),
            (0.05, 0.0),
            (0.1, 0.0),
            (0.2, 0.0),
            (0.3, 0.0),
            (0.01, 0.05),
        ],
    },
    Series {
        workers: 8,
        k: 16370,
        pool: 8,
        faults: &[(0.0, 0.0), (0.01, 0.0), (0.05, 0.0), (0.1, 0.0)],
    },
    Series {
        workers: 4,
        k: 64,
        pool: 512,
        faults: &[
            (0.0, 0.0),
            (0.01, 0.0),
            (0.05, 0.0),
            (0.1, 0.0),
            (0.01, 0.05),
        ],
    },
    Series {
        workers: 8,
        k: 64,
        pool: 512,
        faults: &[(0.0, 0.0), (0.01, 0.0), (0.05, 0.0), (0.1, 0.0)],
    },
];

/// Runs the table; `elements` floats per tensor for K = 16370, a quarter
/// of that for K = 64 (whose packets carry 256 times fewer values: a run
/// of 4M floats would take a minute).
pub fn run(elements: usize, json: bool, out: &mut dyn Write) -> Result<()> {
    let mut rows = Vec::new();
    for series in &SERIES {
        let elements = if series.k < 1024 {
            elements / 4
        } else {
            elements
        }
        .max(1);
        let mut lossless = None;
        for &(loss, noise) in series.faults {
            let reports = (0..RUNS)
                .map(|run| demo(series, elements, loss, noise, run as u64 + 1))
                .collect::<Result<Vec<_>>>()?;
            let goodput = median(reports.iter().map(|r| r.goodput_gbps).collect());
            let base = *lossless.get_or_insert(goodput);
            let sum = |f: fn(&DemoReport) -> u64| reports.iter().map(f).sum::<u64>();
            let (retransmissions, lost_data) = (sum(|r| r.retransmissions), sum(|r| r.lost_data));
            rows.push(Row {
                workers: series.workers,
                k: series.k,
                pool: series.pool,
                loss,
                duplicate: noise,
                reorder: noise,
                goodput_gbps: goodput,
                of_lossless: goodput / base,
                lost_data,
                retransmissions,
                spurious: retransmissions.saturating_sub(lost_data),
                queries: sum(|r| r.stats.queries),
                timeouts: sum(|r| r.stats.timeouts),
                verified: reports.iter().all(|r| r.verified),
            });
        }
    }
    if json {
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    print_table(&rows, out)
}

/// One all-reduce through the demo's cluster.
fn demo(series: &Series, elements: usize, loss: f64, noise: f64, seed: u64) -> Result<DemoReport> {
    crate::cmd::demo::run(&DemoArgs {
        workers: series.workers,
        elements,
        dtype: FloatFormat::F32,
        pool: PoolArgs {
            k: series.k,
            window: series.pool,
            congestion: WindowArgs {
                initial_window: 16,
                fixed_window: false,
            },
        },
        loss,
        duplicate: noise,
        reorder: noise,
        seed,
        json: true,
        no_progress: true,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn print_table(rows: &[Row], out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "inagg bench --loss: float all-reduce through the emulator, loss per direction, \
         median of {RUNS} runs (counts summed over them)"
    )?;
    writeln!(
        out,
        "{:>3} {:>6} {:>5} {:>5} {:>8} {:>9} {:>7} {:>7} {:>10} {:>8} {:>8} {:>8} {:>8}",
        "n",
        "K",
        "pool",
        "loss",
        "dup/reo",
        "Gbit/s",
        "of 0%",
        "lost",
        "retransmit",
        "spurious",
        "queries",
        "timeouts",
        "verified"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:>3} {:>6} {:>5} {:>4.0}% {:>7.0}% {:>9.3} {:>6.2}x {:>7} {:>10} {:>8} {:>8} {:>8} {:>8}",
            r.workers,
            r.k,
            r.pool,
            r.loss * 100.0,
            r.duplicate * 100.0,
            r.goodput_gbps,
            r.of_lossless,
            r.lost_data,
            r.retransmissions,
            r.spurious,
            r.queries,
            r.timeouts,
            r.verified
        )?;
    }
    Ok(())
}
