//! inagg's wire format, shared by the host agent, the emulator and the
//! control plane so that there is one definition of every byte.
//!
//! A tour of the layers:
//! - [`header`]: the aggregation header and its payload of big-endian int32
//!   elements, as a zero-copy [`Packet`] view (field accessors over any byte
//!   buffer) and a plain [`Repr`] that parses (with the semantic checks) and
//!   emits. docs/PROTOCOL.md is the contract; the tests beside the code hold
//!   byte-array fixtures of it.
//! - [`status`]: the block a switch answers a worker's query with (who
//!   has contributed to a set).
//! - [`payload`]: bulk conversion between int32 slices and payload bytes.
//! - [`frame`]: Ethernet/IPv4/UDP frames and ARP for the raw-Ethernet
//!   (DPDK) data paths.
//!
//! Bytes only: the sockets that carry them (batched UDP, the control
//! channels' JSON lines) are `inagg-netio`'s.
//!
//! Untrusted input enters through [`Packet::new_checked`] and [`Repr::parse`];
//! they return an [`Error`] rather than panic.

pub mod frame;
pub mod header;
pub mod payload;
#[cfg(target_arch = "x86_64")]
pub mod simd;
pub mod status;

pub use header::{Kind, Packet, Repr, ELEMENT_LEN, HEADER_LEN, MAX_ELEMENTS, VERSION};

/// Default UDP port of the switch's (or emulator's) data plane.
pub const DEFAULT_DATA_PORT: u16 = 47_000;
/// Default TCP port of the emulator's control endpoint.
pub const DEFAULT_CONTROL_PORT: u16 = 47_001;
/// Largest worker count a job may have: the width of the slot's worker bitmap.
pub const MAX_WORKERS: usize = 64;
/// Exponent value that marks a block holding NaN or an infinity. It is the
/// binary32 biased exponent of those values, so a max-reduce propagates it.
pub const EXPONENT_NON_FINITE: u8 = 0xff;

/// Why a buffer is not a valid inagg packet. Always the sender's fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Shorter than the fixed header.
    #[error("truncated: {len} bytes is shorter than the {HEADER_LEN}-byte header")]
    Truncated {
        /// Bytes received.
        len: usize,
    },
    /// The length disagrees with the header's element count.
    #[error("length {len} does not match the {expected} bytes the header announces")]
    LengthMismatch {
        /// Bytes received.
        len: usize,
        /// Header plus `elements` x 4.
        expected: usize,
    },
    /// A protocol version this build does not speak.
    #[error("unsupported protocol version {0}")]
    BadVersion(u8),
    /// A packet kind this build does not know.
    #[error("unknown packet kind {0}")]
    UnknownKind(u8),
    /// Reserved bits or bytes are not zero.
    #[error("reserved bits set")]
    ReservedBits,
}

/// Result with the wire [`Error`].
pub type Result<T> = core::result::Result<T, Error>;
