//! What an all-reduce did: packets, retransmissions, timeouts, bytes, time.

use std::time::Duration;

use serde::Serialize;

/// Statistics of one all-reduce on one worker.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Packets sent, retransmissions included.
    pub packets_sent: u64,
    /// Datagrams received.
    pub packets_received: u64,
    /// Packets sent again after a timeout.
    pub retransmissions: u64,
    /// Slot timeouts that fired.
    pub timeouts: u64,
    /// Results that were not the one awaited (duplicates, late copies).
    pub stale_results: u64,
    /// Datagrams that did not parse.
    pub malformed: u64,
    /// Valid packets for another job or of the wrong kind.
    pub foreign: u64,
    /// Datagrams the kernel refused to send (retried by the timer).
    pub send_errors: u64,
    /// Bytes sent (inagg header and payload).
    pub bytes_sent: u64,
    /// Bytes received.
    pub bytes_received: u64,
    /// Bytes of the tensor reduced (elements x 4).
    pub payload_bytes: u64,
    /// Wall time of the all-reduce.
    #[serde(serialize_with = "seconds")]
    pub elapsed: Duration,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64())
}

impl Stats {
    /// Tensor bits reduced per second, in Gbit/s.
    pub fn goodput_gbps(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs == 0.0 {
            0.0
        } else {
            self.payload_bytes as f64 * 8.0 / secs / 1e9
        }
    }

    /// Adds another worker's (or another call's) counts; elapsed takes the max.
    pub fn merge(&mut self, o: &Stats) {
        self.packets_sent += o.packets_sent;
        self.packets_received += o.packets_received;
        self.retransmissions += o.retransmissions;
        self.timeouts += o.timeouts;
        self.stale_results += o.stale_results;
        self.malformed += o.malformed;
        self.foreign += o.foreign;
        self.send_errors += o.send_errors;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.payload_bytes = self.payload_bytes.max(o.payload_bytes);
        self.elapsed = self.elapsed.max(o.elapsed);
    }
}
