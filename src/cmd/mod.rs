//! One module per subcommand of `inagg` (but `bench`, in `crate::bench`).

pub mod agent;
pub mod conformance;
pub mod controller;
pub mod ctl;
pub mod demo;
pub mod emu;
pub mod protosim;
pub mod sim;
