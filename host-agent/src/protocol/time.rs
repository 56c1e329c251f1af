//! The protocol's clock: nanoseconds since an all-reduce started, read by
//! whoever drives the protocol (a real clock on sockets and DPDK, a
//! virtual one in the simulator) and handed to it with every event.

use std::time::Duration;

/// Nanoseconds since an all-reduce started. Plain integers, not
/// `Instant`: `Instant` arithmetic normalises seconds and nanoseconds on
/// every add and subtract, which showed in profiles of the per-packet path,
/// and the protocol must run on a clock it does not own.
pub type Nanos = u64;

/// A duration in [`Nanos`] (saturating: a configured timeout of centuries
/// is "never").
pub fn nanos(d: Duration) -> Nanos {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 4)
}
