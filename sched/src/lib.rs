//! Scheduling policies from the source papers, pure (no I/O) so that the
//! simulator and the live policies (`inagg_policy`) call the same code.
//! Each erratum reading is named where it is followed.
//!
//! - [`selmcast`]: multicast receiver selection (SELMCAST, BSP) with its
//!   baselines (Orpheus, the exact optimum for small n).
//! - [`selmcast_ssp`]: SELMCAST online for SSP training (Algorithm 2) and
//!   the random baseline.
//! - [`selective_reduce`]: partial aggregation groups (BAG, BPAWR, the
//!   controller loop) and the partial-reduce baseline.
//! - [`netstorm`]: aggregation trees over a WAN overlay (FAPT, roots by
//!   quality, chunk quotas, auxiliary paths) and the baseline trees.
//! - [`dsyncps`]: two-tier synchronisation with servers joining and
//!   leaving (the status table, the advance/defer rule, eviction, load
//!   balancing).
//! - [`priority`]: slice orders (FIFO, P3, ByteScheduler, Geryon classes).

pub mod dsyncps;
pub mod netstorm;
pub mod priority;
pub mod selective_reduce;
pub mod selmcast;
pub mod selmcast_ssp;
