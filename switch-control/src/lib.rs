//! inagg's switch targets: how the control plane reaches a switch.
//!
//! - [`target`]: the [`Target`] trait every switch backend implements, in
//!   backend-neutral types;
//! - [`registry`]: every target of this build by name, with its default
//!   endpoint and how it connects (adding a target: its module and one
//!   entry there);
//! - [`emu`]: the emulator target, a client of the emulator's JSON-lines
//!   control endpoint;
//! - `bmv2` (feature `bmv2`, on by default): the bmv2 target, a P4Runtime
//!   client for `simple_switch_grpc` running p4/v1model;
//! - `grpc` (feature `bmv2`): what the gRPC targets share;
//! - `tofino` (feature `tofino`, on by default): the Tofino target, a BF
//!   Runtime client for bf_switchd running p4/tna;
//! - [`cluster`]: declarative cluster files (`inagg ctl apply -f`),
//!   checked as a whole before anything touches the switch;
//! - [`metrics`]: a switch's counters for Prometheus;
//! - [`files`]: configuration files read with a bound.
//!
//! The controller daemon that drives these targets for many jobs is
//! `inagg-controller`.
//!
//! Jobs are checked here against the switch's memory and installed jobs
//! before they are sent, so a refused job never reaches the switch; the
//! emulator checks again, as hardware tables would refuse a bad entry, and
//! the bmv2 target checks against what it reads back from the switch.

#[cfg(feature = "bmv2")]
pub mod bmv2;
pub mod cluster;
pub mod emu;
pub mod files;
#[cfg(feature = "bmv2")]
pub mod grpc;
pub mod metrics;
pub mod registry;
pub mod target;
#[cfg(feature = "tofino")]
pub mod tofino;

#[cfg(feature = "bmv2")]
pub use bmv2::Bmv2Target;
pub use emu::EmuTarget;
pub use inagg_switch_api::{JobInfo, JobSpec, PoolMap, SwitchInfo};
pub use registry::{ConnectOptions, Registered, TARGETS};
pub use target::{ControlError, Target};
