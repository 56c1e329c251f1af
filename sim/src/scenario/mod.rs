//! One module per paper: its setup, its runs, and its reproduction report.

pub mod dsyncps;
pub mod netstorm;
pub mod priority;
pub mod selective_reduce;
pub mod selmcast;
pub mod selmcast_ssp;

use crate::report::Report;
use crate::Options;

/// SELMCAST's reproduction: its BSP rounds ([`selmcast`]) and its SSP
/// training ([`selmcast_ssp`]), one report.
pub fn selmcast_paper(opts: &Options) -> Report {
    let (mut rows, mut figures) = selmcast::reproduce_bsp(opts);
    let (ssp_rows, ssp_figures) = selmcast_ssp::reproduce(opts);
    rows.extend(ssp_rows);
    figures.extend(ssp_figures);
    Report {
        paper: "selmcast".into(),
        setup: format!(
            "BSP: n = 100, b = 40 Gbit/s, lambda = 0.5, 200 MB per sender, p = 0.3n, k = 4, 10 rounds per trial; ideal = port-load bound. SSP: n = 50, L3, ssp = 4, eta = 0.75, {} s of training (sweeps: Transformer, 200 s, up to 3 trials). {} trials (medians)",
            if opts.quick { 60 } else { 600 },
            opts.trials
        ),
        rows,
        figures,
        notes: Vec::new(),
    }
}
