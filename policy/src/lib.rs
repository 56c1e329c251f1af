//! The source papers' policies live on the stack: managers that run each
//! paper's pure policy (`inagg_sched`) over real workers, switches and
//! sockets. One module per paper, named as in `inagg_sched`, the
//! simulator's scenarios and the tests (docs/PAPERS.md says what each takes
//! from its paper):
//!
//! - [`selective_reduce`]: partial aggregation groups chosen by a
//!   coordinator from the workers' progress reports;
//! - [`selmcast`] and [`selmcast_ssp`]: multicast receiver selection, in
//!   rounds (BSP) and online (SSP);
//! - [`dsyncps`]: two-tier synchronisation over switches that join and
//!   leave;
//! - [`netstorm`]: aggregation forests over a WAN overlay, with link
//!   awareness, auxiliary paths and policy consistency.
//!
//! The priority scheduling policy lives in the agent itself
//! (`inagg_host_agent::priority`). [`lines`] is the JSON-lines transport the
//! managers speak to their workers; [`report`] prints an error as one line.

pub mod dsyncps;
pub mod lines;
pub mod netstorm;
pub mod report;
pub mod selective_reduce;
pub mod selmcast;
pub mod selmcast_ssp;
