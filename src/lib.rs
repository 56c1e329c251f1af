//! The `inagg` command and the pieces it shares with the benchmarks and the
//! end-to-end tests.
//!
//! The stack lives in its own crates: `inagg-wire` (the protocol),
//! `inagg-emu` (the software switch), `inagg-host-agent` (workers),
//! `inagg-switch-control` (control plane). This crate puts them together:
//! [`local`] runs a whole cluster in one process, [`verify`] checks results,
//! [`dsync`], [`selective`], [`selmcast`] and [`netstorm`] run the papers'
//! policies live on the stack, and there is one module per subcommand.

pub mod agent_cmd;
pub mod backend;
pub mod bench;
#[cfg(feature = "dpdk")]
pub mod bench_dpdk;
pub mod bench_loss;
pub mod bench_netstorm;
pub mod bench_netstorm_aux;
pub mod bench_priority;
pub mod bench_torch;
pub mod conformance_cmd;
pub mod controller_cmd;
pub mod demo;
pub mod dsync;
pub mod emu_cmd;
pub mod limits;
pub mod lines;
pub mod local;
pub mod netstorm;
pub mod report;
pub mod ring;
pub mod schedule;
pub mod selective;
pub mod selmcast;
pub mod sim_cmd;
pub mod verify;
