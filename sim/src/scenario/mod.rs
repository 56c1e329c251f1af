//! One module per paper: its setup, its runs, and its reproduction report.

pub mod dsyncps;
pub mod netstorm;
pub mod priority;
pub mod selective_reduce;
pub mod selmcast;
pub mod selmcast_ssp;
