//! inagg's flow-level discrete-event simulator, and the reproduction of the
//! source papers' headline results with the policies of
//! `inagg_sched` (the same code the live policies of `inagg_policy` run).
//!
//! - [`flow`]: links and flows with max-min fair sharing, strict-priority
//!   classes, multicast at the slowest receiver's rate.
//! - [`events`]: the time-ordered event queue.
//! - [`cost`]: ring all-reduce and in-network aggregation cost models.
//! - [`dist`]: seeded draws (compute-time stand-ins, bandwidths).
//! - [`scenario`]: one module per paper.
//! - [`report`], [`svg`]: the tables and the plots.

pub mod cost;
pub mod dist;
pub mod events;
pub mod flow;
pub mod report;
pub mod scenario;
pub mod svg;

pub use report::Report;

/// How much of a reproduction to run.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Trials per setting (the papers use 10-20).
    pub trials: u64,
    /// The base seed.
    pub seed: u64,
    /// A smaller sweep (fewer settings), for tests and quick looks.
    pub quick: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            trials: 10,
            seed: 1,
            quick: false,
        }
    }
}

/// The reproductions by name.
pub const PAPERS: [&str; 5] = [
    "selective-reduce",
    "selmcast",
    "netstorm",
    "dsyncps",
    "priority",
];

/// Runs the reproduction `name` (one of [`PAPERS`]).
pub fn reproduce(name: &str, opts: &Options) -> Option<Report> {
    match name {
        "selective-reduce" => Some(scenario::selective_reduce::reproduce(opts)),
        "selmcast" => Some(scenario::selmcast_paper(opts)),
        "netstorm" => Some(scenario::netstorm::reproduce(opts)),
        "priority" => Some(scenario::priority::reproduce(opts)),
        "dsyncps" => Some(scenario::dsyncps::reproduce(opts)),
        _ => None,
    }
}
