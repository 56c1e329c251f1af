//! inagg's own bindings to DPDK 22.11 (Debian's libdpdk-dev), found with
//! pkg-config: `sys` is bindgen's output for the control path plus a small C
//! shim for the static-inline fast path (rx/tx burst, mbuf alloc, free,
//! append and data pointer, reference counts, `rte_errno`). The crates.io
//! crate named dpdk-sys binds DPDK 17 and no longer builds.
//!
//! The safe layer: [`Eal`] (once per process), [`Mempool`], [`Port`] with its
//! [`RxQueue`]s and [`TxQueue`]s, [`Mbuf`] and [`RxBatch`]. Every failure is
//! an [`Error`] carrying DPDK's own message.

mod eal;
mod error;
mod mbuf;
mod mempool;
mod port;
pub mod sys;

pub use eal::{Eal, LcoreThread};
pub use error::{errno, strerror, Error};
pub use mbuf::{Mbuf, RxBatch, BURST};
pub use mempool::{Mempool, HEADROOM};
pub use port::{Port, PortConfig, PortStats, RxQueue, TxQueue};
