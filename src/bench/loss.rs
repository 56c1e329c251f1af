//! `inagg bench --loss`: goodput under loss, side by side with lossless, in
//! one run: workers all-reduce a float or int32 tensor through the emulator
//! at 0-30% loss per direction, for the default packets (K = 16370, window
//! 8, 4 spare slots) and a Tofino job's (K = 64, window 512), with 4
//! workers and with 8 (float and int32 each), and with duplication and
//! reordering on top of 1% loss.
//!
//! Each row is the median of interleaved runs ([`RUNS`]). Spurious
//! retransmissions are the retransmissions beyond the contributions the
//! emulator dropped, summed over the runs: a worker owes each dropped
//! contribution one retransmission, and a dropped result's copy none (it
//! asks for the stored result by query), so any beyond those was sent for
//! a contribution the switch already had, or for one the kernel dropped:
//! "kernel" counts the UDP datagrams dropped for a full receive buffer
//! during the runs (machine-wide, [`crate::kernel`]), losses no injector
//! made.

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use crate::args::{PoolArgs, WindowArgs};
use crate::cmd::demo::{DemoArgs, DemoReport, Dtype};

/// Runs per row. The runs of a series are interleaved (each repetition
/// runs every fault setting once, starting one setting further on each
/// time, so that with 7 runs each setting of the longest series takes each
/// place in the sequence once), and a row's "of 0%" is
/// the median of its runs' ratios to the lossless run of the same
/// repetition: a run of the default packets takes tens of milliseconds,
/// the machine's load drifts between repetitions, and a ratio of medians
/// taken minutes apart measured that drift as much as the loss.
const RUNS: usize = 7;

/// One row: a configuration at one fault setting.
#[derive(Debug, Serialize)]
struct Row {
    dtype: &'static str,
    workers: u16,
    k: u16,
    /// The window's ceiling and the pool's spare slots beyond it.
    window: u32,
    spare_slots: u32,
    loss: f64,
    duplicate: f64,
    reorder: f64,
    goodput_gbps: f64,
    of_lossless: f64,
    lost_data: u64,
    retransmissions: u64,
    spurious: u64,
    kernel_drops: u64,
    queries: u64,
    timeouts: u64,
    verified: bool,
    /// Where the runs' emulator data plane ran (`None`: unpinned), and
    /// their workers.
    switch_cpu: Option<usize>,
    worker_cpus: Vec<usize>,
}

/// A series of rows sharing a lossless baseline.
struct Series {
    dtype: Dtype,
    workers: u16,
    k: u16,
    /// The window's ceiling; the pool has the default spare slots more
    /// ([`PoolArgs::spare_slots`]).
    window: u32,
    /// (loss, duplicate and reorder) per row; the first is lossless.
    faults: &'static [(f64, f64)],
}

const TO_10: &[(f64, f64)] = &[(0.0, 0.0), (0.01, 0.0), (0.05, 0.0), (0.1, 0.0)];

const SERIES: [Series; 8] = [
    Series {
        dtype: Dtype::F32,
        workers: 4,
        k: 16370,
        window: 8,
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
        dtype: Dtype::F32,
        workers: 8,
        k: 16370,
        window: 8,
        faults: TO_10,
    },
    Series {
        dtype: Dtype::I32,
        workers: 4,
        k: 16370,
        window: 8,
        faults: TO_10,
    },
    Series {
        dtype: Dtype::I32,
        workers: 8,
        k: 16370,
        window: 8,
        faults: TO_10,
    },
    Series {
        dtype: Dtype::F32,
        workers: 4,
        k: 64,
        window: 512,
        faults: &[
            (0.0, 0.0),
            (0.01, 0.0),
            (0.05, 0.0),
            (0.1, 0.0),
            (0.01, 0.05),
        ],
    },
    Series {
        dtype: Dtype::F32,
        workers: 8,
        k: 64,
        window: 512,
        faults: TO_10,
    },
    Series {
        dtype: Dtype::I32,
        workers: 4,
        k: 64,
        window: 512,
        faults: TO_10,
    },
    Series {
        dtype: Dtype::I32,
        workers: 8,
        k: 64,
        window: 512,
        faults: TO_10,
    },
];

/// Runs the table; 4 x `elements` per tensor for K = 16370 (a lossless
/// run of 4M floats takes 40 ms, which one descheduled worker thread moves
/// by a third) but `elements` at 20% loss and above (a run there takes
/// seconds), a quarter of `elements` for K = 64 (whose packets carry 256
/// times fewer values: a run of 4M floats would take a minute; a run of
/// 512K, a fifth of a second, moved by half between repetitions, its
/// 2,048 handshakes and its slow start a large part of it).
pub fn run(elements: usize, pin: bool, json: bool, out: &mut dyn Write) -> Result<()> {
    let mut rows = Vec::new();
    for series in &SERIES {
        let size = |loss: f64| {
            if series.k < 1024 {
                elements / 4
            } else if loss >= 0.2 {
                elements
            } else {
                elements.saturating_mul(4)
            }
            .max(1)
        };
        // reports[fault][run]
        let mut reports: Vec<Vec<DemoReport>> = series.faults.iter().map(|_| Vec::new()).collect();
        for run in 0..RUNS {
            // Each repetition starts at another fault setting: a run's
            // place in the sequence (the first after another series, or
            // after a lossy run) must not favour one setting.
            let n = series.faults.len();
            for f in (0..n).map(|i| (i + run) % n) {
                let (loss, noise) = series.faults[f];
                let seed = run as u64 + 1;
                reports[f].push(demo(series, size(loss), loss, noise, seed, pin)?);
            }
        }
        for (f, &(loss, noise)) in series.faults.iter().enumerate() {
            rows.push(row(series, loss, noise, &reports[f], &reports[0]));
        }
    }
    if json {
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    print_table(&rows, out)
}

/// A fault setting's row from its runs and the lossless runs beside them.
fn row(
    series: &Series,
    loss: f64,
    noise: f64,
    runs: &[DemoReport],
    lossless: &[DemoReport],
) -> Row {
    let goodput = median(runs.iter().map(|r| r.goodput_gbps).collect());
    let ratios = runs
        .iter()
        .zip(lossless)
        .map(|(r, base)| r.goodput_gbps / base.goodput_gbps)
        .collect();
    let sum = |f: fn(&DemoReport) -> u64| runs.iter().map(f).sum::<u64>();
    let retransmissions = sum(|r| r.retransmissions);
    Row {
        dtype: runs[0].dtype,
        workers: series.workers,
        k: series.k,
        window: series.window,
        spare_slots: runs[0].spare_slots,
        loss,
        duplicate: noise,
        reorder: noise,
        goodput_gbps: goodput,
        of_lossless: median(ratios),
        lost_data: sum(|r| r.lost_data),
        retransmissions,
        spurious: retransmissions.saturating_sub(sum(|r| r.lost_contributions)),
        kernel_drops: sum(|r| r.kernel_drops.unwrap_or(0)),
        queries: sum(|r| r.stats.queries),
        timeouts: sum(|r| r.stats.timeouts),
        verified: runs.iter().all(|r| r.verified),
        switch_cpu: runs.first().and_then(|r| r.switch_cpu),
        worker_cpus: runs
            .first()
            .map_or_else(Vec::new, |r| r.worker_cpus.clone()),
    }
}

/// One all-reduce through the demo's cluster.
fn demo(
    series: &Series,
    elements: usize,
    loss: f64,
    noise: f64,
    seed: u64,
    pin: bool,
) -> Result<DemoReport> {
    crate::cmd::demo::run(&DemoArgs {
        workers: series.workers,
        elements,
        dtype: series.dtype,
        pool: PoolArgs {
            k: series.k,
            window: series.window,
            spare_slots: None,
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
        no_pin: !pin,
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn print_table(rows: &[Row], out: &mut dyn Write) -> Result<()> {
    writeln!(
        out,
        "inagg bench --loss: float and int32 all-reduces through the emulator, loss per direction, \
         median of {RUNS} interleaved runs (counts summed over them)"
    )?;
    match rows.first().and_then(|r| r.switch_cpu) {
        Some(cpu) => writeln!(
            out,
            "placement: emulator data plane on CPU {cpu}, workers on CPUs {} (--no-pin: unpinned)",
            inagg_emu::affinity::List(&rows[0].worker_cpus)
        )?,
        None => writeln!(out, "placement: unpinned")?,
    }
    writeln!(
        out,
        "{:>5} {:>3} {:>6} {:>7} {:>5} {:>8} {:>9} {:>7} {:>7} {:>10} {:>8} {:>6} {:>8} {:>8} {:>8}",
        "dtype",
        "n",
        "K",
        "window",
        "loss",
        "dup/reo",
        "Gbit/s",
        "of 0%",
        "lost",
        "retransmit",
        "spurious",
        "kernel",
        "queries",
        "timeouts",
        "verified"
    )?;
    for r in rows {
        writeln!(
            out,
            "{:>5} {:>3} {:>6} {:>7} {:>4.0}% {:>7.0}% {:>9.3} {:>6.2}x {:>7} {:>10} {:>8} {:>6} {:>8} {:>8} {:>8}",
            r.dtype,
            r.workers,
            r.k,
            format!("{}+{}", r.window, r.spare_slots),
            r.loss * 100.0,
            r.duplicate * 100.0,
            r.goodput_gbps,
            r.of_lossless,
            r.lost_data,
            r.retransmissions,
            r.spurious,
            r.kernel_drops,
            r.queries,
            r.timeouts,
            r.verified
        )?;
    }
    Ok(())
}
