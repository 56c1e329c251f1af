//! A whole aggregation cluster in one process, for the demo, the
//! benchmarks and the end-to-end tests: an emulator on loopback, jobs
//! installed through the control plane, workers on their own threads and
//! sockets ([`local`]); checks of their results ([`verify`]); many tensors
//! through the agent's priority scheduler ([`priority`]); PyTorch runs on
//! this checkout ([`torch`]); what a test could not run here ([`skip`]);
//! certificates for tests of TLS ([`pki`]); a flood of strangers at a
//! control endpoint ([`flood`]); `inagg` child processes
//! ([`process`]); loopback ports to hand out ([`ports`]).
//! Real UDP and TCP all the way.

pub mod flood;
pub mod local;
pub mod pki;
pub mod ports;
pub mod priority;
pub mod process;
pub mod skip;
pub mod torch;
pub mod verify;
