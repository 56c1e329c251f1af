//! One module per subcommand of `inagg` (but `bench`, in `crate::bench`,
//! and `ctl`, which is the control plane's).

pub mod agent;
pub mod conformance;
pub mod controller;
pub mod demo;
pub mod emu;
pub mod sim;
