//! inagg's software aggregation switch.
//!
//! The emulator implements docs/PROTOCOL.md exactly as the P4 programs do,
//! over real UDP datagrams, so the whole stack runs without a switch: in CI,
//! on a laptop, in benchmarks.
//!
//! The switch's vocabulary (job specs and their checks, counters, relays,
//! queues, the control messages) is `inagg_switch_api`'s; here:
//!
//! - [`switch`]: the job table, aggregator memory and slot state machine
//!   (pure, no I/O);
//! - [`faults`]: seeded loss, duplication and reordering;
//! - [`egress`]: paced ports with strict-priority queues;
//! - [`pipeline`]: what happens to each datagram, whatever the ports are
//!   (the socket, DPDK and simulated data planes all run it);
//! - [`server`]: the running emulator (UDP data plane, TCP control endpoint);
//! - [`shm`]: shared-memory channels for workers on the same host, beside
//!   the UDP socket;
//! - `dpdk` (cargo feature `dpdk`): the same data plane on DPDK ports.

pub mod affinity;
pub mod arbitration;
pub mod conformance;
#[cfg(feature = "dpdk")]
pub mod dpdk;
pub mod egress;
pub mod faults;
pub mod neighbours;
pub mod pipeline;
pub mod server;
pub mod shm;
pub mod switch;

pub use inagg_switch_api::{DropReason, FaultConfig, JobError, JobSpec};
pub use server::{Emulator, EmulatorConfig};
pub use switch::{Switch, SwitchConfig};
