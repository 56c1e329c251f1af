//! Egress queues as a switch's control plane sees them: the priority class
//! -> queue map, a port's line rate and queue size, per-queue statistics.
//! The emulator's paced ports (emu's `egress`) and the P4 programs'
//! `priority_to_queue` implement them.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::JobError;

/// Strict-priority egress queues per port, as on bmv2 (`--priority-queues
/// 8`) and Tofino: queue 7 is served first.
pub const EGRESS_QUEUES: u8 = 8;

/// Refuses an egress queue the ports do not have (shared with the
/// controller, which checks a priority map before storing it).
pub fn check_queue(queue: u8) -> Result<(), JobError> {
    if queue >= EGRESS_QUEUES {
        return Err(JobError::BadQueue {
            queue,
            queues: EGRESS_QUEUES,
        });
    }
    Ok(())
}

/// Egress queues per port.
pub const QUEUES: usize = EGRESS_QUEUES as usize;

/// How late after its due time a departure may leave and still be timed by
/// the throughput probe ([`PortStats::train_rate_bps`]): well above the
/// wake-up jitter of an idle machine, below a scheduler slice of a loaded
/// one.
pub const TRAIN_LATENESS: Duration = Duration::from_millis(1);

/// How the emulator's ports send.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkConfig {
    /// Line rate of every port, bits per second (frame bytes as the
    /// emulator sends them: the inagg datagram).
    pub rate_bps: u64,
    /// Bytes each queue of a port may hold before tail drop.
    pub queue_bytes: usize,
    /// One port per host (destination IP address) rather than per worker
    /// endpoint: workers of several jobs on one host then share its link,
    /// as they share a server's NIC, and compete for it.
    #[serde(default)]
    pub per_host: bool,
}

/// A rate for one port other than the line rate: a slower (or faster)
/// link to one destination, such as the WAN link to a parent switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortRate {
    /// The destination (with per-host ports, any endpoint on the host).
    pub port: SocketAddr,
    /// Bits per second.
    pub rate_bps: u64,
}

impl std::str::FromStr for PortRate {
    type Err = String;

    /// `ADDR=GBPS`, as the CLI takes it: `127.0.0.1:47001=0.05` paces the
    /// port to 127.0.0.1:47001 at 50 Mbit/s.
    fn from_str(s: &str) -> Result<PortRate, String> {
        let bad = || format!("{s:?} is not ADDR=GBPS (for example 127.0.0.1:47001=0.05)");
        let (addr, gbps) = s.split_once('=').ok_or_else(bad)?;
        let port = addr.trim().parse().map_err(|_| bad())?;
        let gbps: f64 = gbps.trim().parse().map_err(|_| bad())?;
        if !(gbps.is_finite() && gbps > 0.0) {
            return Err(format!(
                "{s:?}: the rate must be a positive number of Gbit/s"
            ));
        }
        let rate = PortRate {
            port,
            rate_bps: (gbps * 1e9) as u64,
        };
        check_rate(rate.rate_bps)?;
        Ok(rate)
    }
}

/// Refuses rates too low to pace with.
pub fn check_rate(rate_bps: u64) -> Result<(), String> {
    if rate_bps < 1_000 {
        return Err(format!(
            "rate {rate_bps} bit/s is too low: give at least 1000 bit/s"
        ));
    }
    Ok(())
}

impl LinkConfig {
    /// Checks the values; the message says what is wrong.
    pub fn validate(&self) -> Result<(), String> {
        check_rate(self.rate_bps).map_err(|e| format!("line {e}"))?;
        if self.queue_bytes < inagg_wire::HEADER_LEN {
            return Err(format!(
                "queue size {} bytes cannot hold a packet: give at least {} bytes",
                self.queue_bytes,
                inagg_wire::HEADER_LEN
            ));
        }
        Ok(())
    }

    /// The port a copy for `to` leaves by: the endpoint's own, or its
    /// host's (`ip:0`) when ports are per host.
    pub fn port_of(&self, to: SocketAddr) -> SocketAddr {
        if self.per_host {
            SocketAddr::new(to.ip(), 0)
        } else {
            to
        }
    }
}

/// One entry of the priority class -> egress queue map.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClassQueue {
    /// The priority class (the header's priority field).
    pub class: u8,
    /// Its egress queue.
    pub queue: u8,
}

/// A class -> queue map in words: `class 1 -> queue 7, class 2 -> queue 3`.
pub fn describe_map(map: &[ClassQueue]) -> String {
    let entries: Vec<String> = map
        .iter()
        .map(|cq| format!("class {} -> queue {}", cq.class, cq.queue))
        .collect();
    entries.join(", ")
}

impl std::str::FromStr for ClassQueue {
    type Err = String;

    /// `CLASS=QUEUE`, as the CLI takes it: `5=7` sends class 5 by queue 7.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not CLASS=QUEUE (for example 5=7)");
        let (class, queue) = s.split_once('=').ok_or_else(bad)?;
        Ok(ClassQueue {
            class: class.trim().parse().map_err(|_| bad())?,
            queue: queue.trim().parse().map_err(|_| bad())?,
        })
    }
}

/// One queue's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    /// Packets sent from the queue.
    pub tx_packets: u64,
    /// Bytes sent from the queue.
    pub tx_bytes: u64,
    /// Packets tail-dropped because the queue was full.
    pub drops: u64,
    /// Bytes waiting now.
    pub depth_bytes: usize,
    /// The most bytes that ever waited.
    pub max_depth_bytes: usize,
}

/// One output port's counters, by queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PortStats {
    /// The destination the port leads to.
    pub port: SocketAddr,
    /// Its rate, bits per second: the line rate or the port's own.
    #[serde(default)]
    pub rate_bps: u64,
    /// Per queue, index = queue number.
    pub queues: Vec<QueueStats>,
    /// Bytes of the packets that found the link busy (they waited behind
    /// another packet, so they left back to back): the passive throughput
    /// probe, with [`PortStats::train_ns`].
    #[serde(default)]
    pub train_bytes: u64,
    /// The real time from each such packet's previous departure on this
    /// port to its own, summed, in nanoseconds.
    #[serde(default)]
    pub train_ns: u64,
}

impl PortStats {
    /// The throughput the port delivered while it had a backlog, bits per
    /// second (`None`: no packet has waited yet). Measured on real
    /// departure times, so it is what the traffic got, wake-up delays of up
    /// to [`TRAIN_LATENESS`] and all, not the configured rate read back;
    /// it needs no idle link and no clock shared with the receiver.
    pub fn train_rate_bps(&self) -> Option<f64> {
        (self.train_ns > 0).then(|| self.train_bytes as f64 * 8e9 / self.train_ns as f64)
    }
}
