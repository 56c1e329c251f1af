//! `inagg bench --loss`: goodput under loss, side by side with lossless, in
//! one run: 4 workers all-reduce a float tensor through the emulator at
//! 0-30% loss per direction, for the default packets (K = 16370, pool 8)
//! and a Tofino job's (K = 64, pool 512). Spurious retransmissions are
//! estimated as the retransmissions beyond the emulator's injected drops
//! (every drop, of a contribution or of a result's copy, needs one
//! retransmission; any beyond that was sent for a packet not lost).

use std::io::Write;

use anyhow::Result;
use serde::Serialize;

use crate::args::{PoolArgs, WindowArgs};
use crate::cmd::demo::{DemoArgs, FloatFormat};

/// One all-reduce at one loss rate.
#[derive(Debug, Serialize)]
struct Row {
    k: u16,
    window: u32,
    loss: f64,
    goodput_gbps: f64,
    of_lossless: f64,
    retransmissions: u64,
    injected_drops: u64,
    spurious: u64,
    verified: bool,
}

/// The loss rates per configuration (K = 64 collapses past 10%: one run at
/// 20% would take minutes).
const CONFIGS: [(u16, u32, &[f64]); 2] = [
    (16370, 8, &[0.0, 0.01, 0.05, 0.1, 0.2, 0.3]),
    (64, 512, &[0.0, 0.01, 0.05, 0.1]),
];

/// Runs the table; `elements` floats per tensor, at most 1M (the K = 64
/// rows a sixteenth of that: at 10% loss they run at a thousandth of the
/// lossless speed today, and a run should take minutes, not hours).
pub fn run(elements: usize, json: bool, out: &mut dyn Write) -> Result<()> {
    let mut rows = Vec::new();
    for (k, window, losses) in CONFIGS {
        let elements = elements.min(1 << 20);
        let elements = if k < 1024 { elements / 16 } else { elements }.max(1);
        let mut lossless = None;
        for &loss in losses {
            let report = crate::cmd::demo::run(&DemoArgs {
                workers: 4,
                elements,
                dtype: FloatFormat::F32,
                pool: PoolArgs {
                    k,
                    window,
                    congestion: WindowArgs {
                        initial_window: 16,
                        fixed_window: false,
                    },
                },
                loss,
                duplicate: 0.0,
                reorder: 0.0,
                seed: 1,
                json: true,
                no_progress: true,
            })?;
            let base = *lossless.get_or_insert(report.goodput_gbps);
            rows.push(Row {
                k,
                window,
                loss,
                goodput_gbps: report.goodput_gbps,
                of_lossless: report.goodput_gbps / base,
                retransmissions: report.retransmissions,
                injected_drops: report.injected_drops,
                spurious: report.retransmissions.saturating_sub(report.injected_drops),
                verified: report.verified,
            });
        }
    }
    if json {
        serde_json::to_writer_pretty(&mut *out, &rows)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "inagg bench --loss: 4 workers, float all-reduce through the emulator, loss per direction"
    )?;
    writeln!(
        out,
        "{:>6} {:>6} {:>6} {:>10} {:>8} {:>10} {:>9} {:>9} {:>8}",
        "K", "pool", "loss", "Gbit/s", "of 0%", "retransmit", "drops", "spurious", "verified"
    )?;
    for r in &rows {
        writeln!(
            out,
            "{:>6} {:>6} {:>5.0}% {:>10.3} {:>7.2}x {:>10} {:>9} {:>9} {:>8}",
            r.k,
            r.window,
            r.loss * 100.0,
            r.goodput_gbps,
            r.of_lossless,
            r.retransmissions,
            r.injected_drops,
            r.spurious,
            r.verified
        )?;
    }
    Ok(())
}
