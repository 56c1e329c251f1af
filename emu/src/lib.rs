//! inagg's software aggregation switch.
//!
//! The emulator implements docs/PROTOCOL.md exactly as the P4 programs do,
//! over real UDP datagrams, so the whole stack runs without a switch: in CI,
//! on a laptop, in benchmarks.
//!
//! - [`switch`]: the job table, aggregator memory and slot state machine
//!   (pure, no I/O);
//! - [`counters`]: what is counted, drops by reason;
//! - [`faults`]: seeded loss, duplication and reordering;
//! - [`detour`]: auxiliary paths (relay entries, detours, the sender's rule);
//! - [`api`]: job specs, their validation, and the control messages;
//! - `pipeline`: what happens to each datagram, whatever the ports are;
//! - [`server`]: the running emulator (UDP data plane, TCP control endpoint);
//! - `dpdk` (cargo feature `dpdk`): the same data plane on DPDK ports.

pub mod api;
pub mod arbitration;
pub mod conformance;
pub mod counters;
pub mod detour;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod egress;
pub mod faults;
pub mod neighbours;
mod pipeline;
pub mod server;
pub mod switch;

pub use api::{JobError, JobSpec};
pub use counters::DropReason;
pub use faults::FaultConfig;
pub use server::{Emulator, EmulatorConfig};
pub use switch::{Switch, SwitchConfig};
