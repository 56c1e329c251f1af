//! inagg's control plane.
//!
//! - [`target`]: the [`Target`] trait every switch backend implements (the
//!   emulator now; bmv2 and Tofino later), in backend-neutral types;
//! - [`emu`]: the emulator target, a client of the emulator's JSON-lines
//!   control endpoint;
//! - [`cluster`]: declarative cluster files (`inagg ctl apply -f`), checked
//!   as a whole before anything touches the switch;
//! - [`cli`]: the operator CLI `inagg ctl`, one subcommand per noun.
//!
//! Jobs are checked here against the switch's memory and installed jobs
//! before they are sent, so a refused job never reaches the switch; the
//! emulator checks again, as hardware tables would refuse a bad entry.

pub mod cli;
pub mod cluster;
pub mod emu;
pub mod target;

pub use emu::EmuTarget;
pub use inagg_emu::api::{JobInfo, JobSpec, PoolMap, SwitchInfo};
pub use target::{ControlError, Target};
