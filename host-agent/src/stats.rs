//! What an all-reduce did: packets, retransmissions, timeouts, bytes, time.

use std::time::Duration;

use inagg_netio::metrics::Exposition;
use serde::Serialize;

/// Statistics of one all-reduce on one worker.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Stats {
    /// Packets sent, retransmissions included.
    pub packets_sent: u64,
    /// Datagrams received.
    pub packets_received: u64,
    /// Contributions sent again: after the switch's status said the set
    /// lacked them (or held the round complete, its result lost here), or
    /// after a query went unanswered past the slot's timeout.
    pub retransmissions: u64,
    /// Of those, the ones a status asked for (docs/PROTOCOL.md, "Loss
    /// recovery"): recovered in about a round trip, not a timeout.
    pub fast_retransmissions: u64,
    /// Queries sent about slots suspected lost.
    pub queries: u64,
    /// Statuses the switch answered them with.
    pub statuses: u64,
    /// Statuses of other members' queries: the switch sends a status to
    /// the members the round waits for too, and each that lacks its
    /// contribution asks at once (docs/PROTOCOL.md, "Loss recovery").
    pub nudges: u64,
    /// Contributions resent on a nudge without a query of this worker's
    /// own: with many slots in flight, a nudge about a packet that left a
    /// smoothed round trip ago, with a packet sent after it answered
    /// (docs/PROTOCOL.md, "Loss recovery").
    /// Counted in `retransmissions` and `fast_retransmissions` too.
    pub nudge_resends: u64,
    /// Rounds' results announced to a switch that had lost them
    /// (docs/PROTOCOL.md, "A switch that lost its state").
    pub announcements: u64,
    /// Slot timeouts that fired: queries a switch never answered, or a set
    /// that held this worker's contribution too long.
    pub timeouts: u64,
    /// Times a timeout halved the congestion window (once per flight).
    pub window_cuts: u64,
    /// Rounds sent into one of the pool's spare slots: past the window, in
    /// place of a round being recovered
    /// ([`crate::AgentConfig::spare_slots`]). A send that the shared order
    /// forces while a spare slot is open counts too; without spare slots,
    /// none does.
    pub spare_sends: u64,
    /// Slots the congestion window allowed in flight at the end (the
    /// largest of a multi-lane worker's).
    pub window: u64,
    /// Results that were not the one awaited (duplicates, late copies).
    pub stale_results: u64,
    /// Results that failed their check lane (docs/PROTOCOL.md, "The check
    /// lane"): sums holding a contribution that is not this session's
    /// (replayed, forged, or a late copy summed into another round), or
    /// forged results. Never handed to the user.
    pub rejected: u64,
    /// Handshakes that left set 1 for the round of set 0 of a slot whose
    /// members were split between its sets (docs/PROTOCOL.md, "Sessions").
    pub split_joins: u64,
    /// Handshakes that found the slot's members a round apart, each
    /// followed by a catch-up round (docs/PROTOCOL.md, "Sessions").
    pub catch_ups: u64,
    /// Slots whose session handshake succeeded (docs/PROTOCOL.md,
    /// "Sessions"): once per slot per session.
    pub handshakes: u64,
    /// Handshakes sent again in a slot's other set: the set held an earlier
    /// session's state, or another worker's handshake spoiled the round.
    pub handshake_retries: u64,
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
        self.announcements += o.announcements;
        self.fast_retransmissions += o.fast_retransmissions;
        self.queries += o.queries;
        self.statuses += o.statuses;
        self.nudges += o.nudges;
        self.nudge_resends += o.nudge_resends;
        self.timeouts += o.timeouts;
        self.window_cuts += o.window_cuts;
        self.spare_sends += o.spare_sends;
        self.window = self.window.max(o.window);
        self.stale_results += o.stale_results;
        self.handshakes += o.handshakes;
        self.handshake_retries += o.handshake_retries;
        self.rejected += o.rejected;
        self.split_joins += o.split_joins;
        self.catch_ups += o.catch_ups;
        self.malformed += o.malformed;
        self.foreign += o.foreign;
        self.send_errors += o.send_errors;
        self.bytes_sent += o.bytes_sent;
        self.bytes_received += o.bytes_received;
        self.payload_bytes = self.payload_bytes.max(o.payload_bytes);
        self.elapsed = self.elapsed.max(o.elapsed);
    }
}

/// A worker's statistics readable while it runs (`inagg agent --metrics`):
/// each lane publishes its counts at every retransmission scan (a few ms
/// apart, never per packet), and a finished all-reduce adds its totals.
#[derive(Debug, Default)]
pub struct Live {
    inner: std::sync::Mutex<LiveInner>,
}

#[derive(Debug, Default)]
struct LiveInner {
    /// Totals of the finished all-reduces.
    done: Stats,
    /// All-reduces finished.
    allreduces: u64,
    /// The running all-reduce, per lane.
    running: Vec<Stats>,
}

impl Live {
    /// The counts so far (finished all-reduces and the running one) for
    /// Prometheus (`inagg agent --metrics`), labelled with the job and
    /// worker id.
    pub fn exposition(&self, job: u16, worker: u16) -> String {
        let (s, allreduces) = self.snapshot();
        let (job, worker) = (job.to_string(), worker.to_string());
        let labels = [("job", job.as_str()), ("worker", worker.as_str())];
        let mut e = Exposition::default();
        let rows: [(&'static str, &'static str, u64); 17] = [
            (
                "inagg_agent_allreduces_total",
                "All-reduces completed.",
                allreduces,
            ),
            (
                "inagg_agent_packets_sent_total",
                "Packets sent, retransmissions included.",
                s.packets_sent,
            ),
            (
                "inagg_agent_packets_received_total",
                "Datagrams received.",
                s.packets_received,
            ),
            (
                "inagg_agent_retransmissions_total",
                "Contributions sent again (after a status, or a timeout).",
                s.retransmissions,
            ),
            (
                "inagg_agent_fast_retransmissions_total",
                "Contributions sent again because the switch's status said it lacked them.",
                s.fast_retransmissions,
            ),
            (
                "inagg_agent_queries_total",
                "Queries sent about slots suspected lost.",
                s.queries,
            ),
            (
                "inagg_agent_timeouts_total",
                "Slot timeouts (queries unanswered, or a set held too long).",
                s.timeouts,
            ),
            (
                "inagg_agent_stale_results_total",
                "Results that were not the one awaited.",
                s.stale_results,
            ),
            (
                "inagg_agent_handshakes_total",
                "Slots whose session handshake succeeded.",
                s.handshakes,
            ),
            (
                "inagg_agent_handshake_retries_total",
                "Handshakes sent again in a slot's other set (an earlier session's state there).",
                s.handshake_retries,
            ),
            (
                "inagg_agent_rejected_total",
                "Results that failed their check lane (replayed or forged contributions in the sum).",
                s.rejected,
            ),
            (
                "inagg_agent_malformed_total",
                "Datagrams that did not parse.",
                s.malformed,
            ),
            (
                "inagg_agent_foreign_total",
                "Packets for another job or of the wrong kind.",
                s.foreign,
            ),
            (
                "inagg_agent_send_errors_total",
                "Sends the kernel or NIC refused (retried).",
                s.send_errors,
            ),
            (
                "inagg_agent_bytes_sent_total",
                "Bytes sent (inagg header and payload).",
                s.bytes_sent,
            ),
            (
                "inagg_agent_bytes_received_total",
                "Bytes received.",
                s.bytes_received,
            ),
            (
                "inagg_agent_payload_bytes_total",
                "Tensor bytes all-reduced.",
                s.payload_bytes,
            ),
        ];
        for (name, help, v) in rows {
            e.counter(name, help, &labels, v);
        }
        let help = "Time spent in all-reduces, milliseconds.";
        let ms = u64::try_from(s.elapsed.as_millis()).unwrap_or(u64::MAX);
        e.counter(
            "inagg_agent_allreduce_milliseconds_total",
            help,
            &labels,
            ms,
        );
        e.render()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LiveInner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Everything counted so far (finished all-reduces and the running
    /// one), and how many all-reduces have finished.
    pub fn snapshot(&self) -> (Stats, u64) {
        let inner = self.lock();
        let mut running = Stats::default();
        inner.running.iter().for_each(|s| running.merge(s));
        let mut total = inner.done.clone();
        accumulate(&mut total, &running);
        (total, inner.allreduces)
    }

    /// Lane `lane` of `lanes` has counted `stats` so far in this all-reduce.
    pub(crate) fn update(&self, lane: usize, lanes: usize, stats: &Stats) {
        let mut inner = self.lock();
        inner.running.resize(lanes, Stats::default());
        inner.running[lane] = stats.clone();
    }

    /// The running all-reduce ended: `Some(totals)` if it completed.
    pub(crate) fn finish(&self, completed: Option<&Stats>) {
        let mut inner = self.lock();
        let partial = std::mem::take(&mut inner.running);
        match completed {
            Some(s) => {
                accumulate(&mut inner.done, s);
                inner.allreduces += 1;
            }
            None => partial.iter().for_each(|s| accumulate(&mut inner.done, s)),
        }
    }
}

/// Adds one all-reduce's counts to running totals (payload and time add
/// up too, unlike [`Stats::merge`] across lanes of one all-reduce).
fn accumulate(total: &mut Stats, s: &Stats) {
    let (payload, elapsed) = (
        total.payload_bytes + s.payload_bytes,
        total.elapsed + s.elapsed,
    );
    total.merge(s);
    total.payload_bytes = payload;
    total.elapsed = elapsed;
}

#[cfg(test)]
mod live_tests {
    use super::*;

    fn sent(n: u64, payload: u64) -> Stats {
        Stats {
            packets_sent: n,
            payload_bytes: payload,
            elapsed: Duration::from_millis(n),
            ..Stats::default()
        }
    }

    #[test]
    fn live_counts_add_finished_and_running_all_reduces() {
        let live = Live::default();
        live.update(0, 2, &sent(3, 100));
        live.update(1, 2, &sent(4, 100));
        // Lanes of one all-reduce: counts add, the tensor counts once.
        assert_eq!(live.snapshot().0.packets_sent, 7);
        assert_eq!(live.snapshot().0.payload_bytes, 100);
        live.finish(Some(&sent(8, 100)));
        live.update(0, 1, &sent(2, 50));
        let (s, done) = live.snapshot();
        assert_eq!((s.packets_sent, s.payload_bytes, done), (10, 150, 1));
        // A failed all-reduce keeps what it sent, and does not count as done.
        live.finish(None);
        let (s, done) = live.snapshot();
        assert_eq!((s.packets_sent, done), (10, 1));
        assert_eq!(s.elapsed, Duration::from_millis(10));
    }
}
