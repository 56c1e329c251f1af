//! The switch's vocabulary, shared by every switch and every control plane:
//! what a job is and the checks it must pass ([`job`]), why a switch
//! refuses one ([`error`]), auxiliary paths and relays ([`detour`]), egress queues ([`queues`]), counters and drop
//! reasons ([`counters`]), the emulator's faults ([`faults`]), and the
//! emulator's control messages ([`control`]).
//!
//! It depends on nothing of inagg's but `inagg-wire`, so the control plane
//! (and its bmv2 target) reaches a switch's types without the software
//! switch.

pub mod control;
pub mod counters;
pub mod detour;
pub mod error;
pub mod faults;
pub mod job;
pub mod queues;

pub use control::*;
pub use counters::*;
pub use detour::*;
pub use error::*;
pub use faults::*;
pub use job::*;
pub use queues::*;
