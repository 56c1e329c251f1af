//! What a worker knows of its path to the switch: the round-trip estimate
//! that sets its timeouts, and the congestion window that says how many of
//! its slots may be in flight at once.
//!
//! Both persist across all-reduces (a [`crate::Worker`] keeps one
//! [`Path`]), so a second all-reduce starts at the rate the first found.
//!
//! Why a window below the pool's size: the pool bounds what the switch can
//! hold, not what it can process. A software switch (bmv2 above all) runs
//! the pipeline at a few thousand packets a second; a worker that keeps its
//! whole pool in flight only builds a queue in front of it, every result
//! comes back late, and each late result that outlives the timeout becomes
//! a retransmission the switch must also process. The window grows while
//! results come back before their timeout and is halved, at most once per
//! round trip, when one does not: ATP's AIMD, TCP Reno's arithmetic.
//! docs/PROTOCOL.md ("Congestion window") is the contract; the engine
//! ([`super::Core`]) sends a worker's ready slots in one order that every
//! worker of the job shares, which keeps windows of different sizes from
//! waiting on one another.

use super::recovery::Rack;
use super::time::{nanos, Nanos};
use crate::AgentConfig;

/// The round-trip estimate and the congestion window of one worker (or one
/// lane of a multi-queue worker).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Path {
    pub rtt: RttEstimator,
    pub window: CongestionWindow,
    /// The latest-sent packet answered: loss detection's evidence
    /// ([`super::recovery`]).
    pub rack: Rack,
    /// The switch has answered a query with a status: it speaks loss
    /// recovery, so an unanswered query was lost, not ignored.
    pub switch_answers: bool,
    /// When a status last said the switch holds this worker's contribution
    /// and waits for other members: the path delivers, and the rounds in
    /// flight wait for a slow member, so the tail probe waits again from
    /// then ([`super::recovery`]).
    pub held_at: Option<super::time::Nanos>,
}

impl Path {
    pub(crate) fn new(config: &AgentConfig) -> Self {
        Path {
            rtt: RttEstimator::new(),
            window: CongestionWindow::new(config),
            rack: Rack::default(),
            switch_answers: false,
            held_at: None,
        }
    }

    /// A new all-reduce: its clock starts at zero again.
    pub(crate) fn restart_clock(&mut self) {
        self.window.restart_clock();
        self.rtt.restart_clock();
        self.rack.restart_clock();
        self.held_at = None;
    }
}

/// Round-trip estimate (RFC 6298 arithmetic), in nanoseconds: it is
/// updated once per result, and `Duration`'s multiply and divide cost
/// 64-bit divisions there, where the shifts below cost nothing.
///
/// A timeout also backs the timeout off for what is sent next (RFC 6298,
/// 5.5 and 5.7), until a result of a packet sent once gives a sample again.
/// Without it, a round trip that jumps above the timeout (a software switch
/// whose queue grows) makes every packet time out; Karn's rule then drops
/// every sample, the estimate never learns the new round trip, and every
/// packet is sent twice for as long as it lasts.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RttEstimator {
    /// Smoothed RTT, ns (None before the first sample): how long a round
    /// takes, waits for other members' recoveries included.
    srtt: Option<u64>,
    /// RTT variation, ns.
    rttvar: u64,
    /// The smoothed RTT and its variation of the samples no later packet
    /// overtook ([`RttEstimator::sample`]): the path's, which the timeout
    /// is made of.
    path: Option<(u64, u64)>,
    /// The timeout is doubled this many times.
    backoff: u32,
    /// A timeout backs off again only for packets sent at or after this
    /// time: the timeouts of one flight are one event.
    backed_off_at: Nanos,
    /// The quickest sample of the previous epoch of [`EPOCH`] samples, of
    /// this one, and this one's samples so far: [`RttEstimator::recent_min`].
    recent: (Nanos, Nanos, u32),
}

/// Samples per epoch of the recent minimum.
const EPOCH: u32 = 32;

/// At most 2^6 times the estimate (and never past `max_rto`).
const MAX_BACKOFF: u32 = 6;

impl RttEstimator {
    pub(crate) fn new() -> Self {
        RttEstimator {
            srtt: None,
            rttvar: 0,
            path: None,
            backoff: 0,
            backed_off_at: 0,
            recent: (Nanos::MAX, Nanos::MAX, 0),
        }
    }

    /// A round trip of `rtt`; `overtaken` when a packet sent after it was
    /// answered first. Such a round waited for something other than the
    /// path, under heavy loss another member's recovery: with 8 workers at
    /// 30% loss nearly every round does, and timeouts made of those
    /// samples grew to the 1 s cap, every round held up by a loss waited
    /// that long, and slots went past the give-up time without a result
    /// (`inagg sim protocol --elements 1048576 --loss 0.3 --workers 8 -k
    /// 64 --pool 512 --int`: 10.9 s of virtual time per seed, against 2.2
    /// s with the timeout made of the others). The smoothed estimate still
    /// takes them: it times the members' turns to ask, which wait for
    /// exactly such recoveries.
    pub(crate) fn sample(&mut self, rtt: Nanos, overtaken: bool) {
        let rtt = rtt.min(u64::MAX / 8);
        if !overtaken {
            self.path = Some(match self.path {
                None => (rtt, rtt / 2),
                Some((srtt, var)) => smooth(srtt, var, rtt),
            });
        }
        self.backoff = 0;
        let (before, now, n) = self.recent;
        self.recent = if n + 1 >= EPOCH {
            (now.min(rtt), Nanos::MAX, 0)
        } else {
            (before, now.min(rtt), n + 1)
        };
        match self.srtt {
            None => {
                self.srtt = Some(rtt);
                self.rttvar = rtt / 2;
            }
            Some(srtt) => {
                let (srtt, rttvar) = smooth(srtt, self.rttvar, rtt);
                self.srtt = Some(srtt);
                self.rttvar = rttvar;
            }
        }
    }

    /// The quickest round trip of the last 32 to 64 samples (None before
    /// the first): the path as it is now, which is what a loss's recovery
    /// is timed from. Not the smoothed estimate: under heavy loss many of
    /// its samples hold waits for other workers' recoveries, and a
    /// recovery timed from an estimate they inflate is slower and inflates
    /// it further. Under a standing queue every sample holds the queue,
    /// and so does this.
    pub(crate) fn recent_min(&self) -> Option<Nanos> {
        let m = self.recent.0.min(self.recent.1);
        (m != Nanos::MAX).then_some(m)
    }

    /// The smoothed round trip (None before the first sample).
    pub(crate) fn srtt(&self) -> Option<Nanos> {
        self.srtt
    }

    /// A packet sent at `sent_at` timed out at `now`.
    pub(crate) fn on_timeout(&mut self, sent_at: Nanos, now: Nanos) {
        if sent_at >= self.backed_off_at {
            self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
            self.backed_off_at = now;
        }
    }

    /// A new all-reduce: its clock starts at zero again.
    pub(crate) fn restart_clock(&mut self) {
        self.backed_off_at = 0;
    }

    /// The retransmission timeout: RFC 6298's, of the path's samples
    /// ([`RttEstimator::sample`]), backed off.
    pub(crate) fn rto(&self, config: &AgentConfig) -> Nanos {
        let path = self.path.or(self.srtt.map(|s| (s, self.rttvar)));
        let base = match path {
            None => nanos(config.initial_rto),
            Some((srtt, rttvar)) => srtt
                .saturating_add(rttvar.saturating_mul(4))
                .max(nanos(config.min_rto)),
        };
        base.saturating_mul(1 << self.backoff)
            .min(nanos(config.max_rto))
    }
}

/// RFC 6298's smoothing: the estimate and its variation after `rtt`.
fn smooth(srtt: u64, rttvar: u64, rtt: u64) -> (u64, u64) {
    let delta = srtt.abs_diff(rtt);
    ((srtt * 7 + rtt) / 8, (rttvar * 3 + delta) / 4)
}

/// Window arithmetic in 1/65536ths of a slot: additive increase adds
/// 1/window per result, which whole slots cannot hold.
const ONE: u64 = 65_536;

/// How many slots may be in flight.
///
/// Once per flight (a window of results, and at least [`MIN_FLIGHT`]) the
/// quickest of them is judged: later than twice the lowest round trip
/// seen plus a slack, and a queue is building in front of the switch, so
/// the window shrinks by an eighth and slow start ends. The quickest, not
/// the mean, and no single result: a round also waits for the slowest
/// worker's contribution, so one worker's loss makes the others' samples
/// of that round late too, while a queue makes every sample late. While
/// the last flight judged saw no queue, every result grows the window: a
/// slot per result up to the slow-start threshold (initially the pool), a
/// slot per window of results above. Past half the pool a late result
/// ends slow start too: growing to the pool that fast bought nothing at
/// low loss and cost control traffic (8 workers, K = 64, 512 slots at
/// 5%: 4.5 queries and statuses per datum lost against 3.5; more rounds
/// in flight, more of them wait on a member that lost its copy). A timeout halves the window, once
/// per flight, only while the last flight saw a queue; a timeout on a path
/// without one is a loss, not congestion, and costs the window nothing:
/// random loss must not starve a job whose switch keeps up.
///
/// Why no single late result counts: with 8 workers at 25% loss, 9 in 10
/// rounds wait for some member's recovery, so nearly every result is
/// late. Had each ended slow start and grown nothing, the windows would
/// stay at a few slots, each round would wait for the slowest member's,
/// and the all-reduce would crawl past the give-up time (`inagg sim
/// protocol --elements 1048576 --loss 0.25 --workers 8 -k 64 --pool 512
/// --int --seeds 4`: 3 of 4 seeds, that way).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CongestionWindow {
    /// The window, in 1/65536ths of a slot.
    cwnd: u64,
    /// Slow start ends here (1/65536ths).
    ssthresh: u64,
    /// A timeout cuts only for packets sent at or after this time: the
    /// timeouts of one flight are one congestion event.
    recover_from: Nanos,
    /// The lowest round trip seen: the path without a queue.
    base_rtt: Option<Nanos>,
    /// The quickest result of the flight being judged, and how many of its
    /// results have come back.
    flight_min: Nanos,
    flight_results: usize,
    /// Results that make up the flight being judged: the window when it
    /// began (a window that grows as it goes would never be judged).
    flight_len: usize,
    /// The last judged flight was late.
    queue: bool,
    /// The window never grows past this (the pool less its spare slots),
    /// nor when it is fixed.
    ceiling: u64,
    fixed: bool,
}

/// Slack over twice the base round trip before a result counts as late:
/// scheduling noise on a busy host (a descheduled worker thread) must not
/// read as a queue.
const SLACK: Nanos = 2_000_000;

/// The fewest results a flight is judged on. Under heavy loss few rounds
/// complete without a recovery somewhere (8 workers at 25%: 1 in 13): a
/// flight of a small window's few results then often holds no quick one,
/// and read as a queue it shrank the window further, to one slot. 32
/// results hold a quick one but for 8% of flights at that loss.
const MIN_FLIGHT: usize = 32;

impl CongestionWindow {
    pub(crate) fn new(config: &AgentConfig) -> Self {
        // The spare slots are recovery's ([`crate::AgentConfig::spare_slots`]).
        let ceiling = u64::from(config.pool_size.saturating_sub(config.spare_slots).max(1));
        let (cwnd, fixed) = match config.window {
            crate::Window::Adaptive { initial } => (u64::from(initial.max(1)).min(ceiling), false),
            crate::Window::Fixed { slots } => (u64::from(slots).min(ceiling), true),
        };
        CongestionWindow {
            cwnd: cwnd * ONE,
            ssthresh: ceiling * ONE,
            recover_from: 0,
            base_rtt: None,
            flight_min: Nanos::MAX,
            flight_results: 0,
            flight_len: (cwnd as usize).max(MIN_FLIGHT),
            queue: false,
            ceiling: ceiling * ONE,
            fixed,
        }
    }

    /// Slots that may be in flight now (at least one).
    pub(crate) fn limit(&self) -> usize {
        usize::try_from((self.cwnd / ONE).max(1)).unwrap_or(usize::MAX)
    }

    /// The quickest round trip seen (the path without a queue).
    pub(crate) fn base_rtt(&self) -> Option<Nanos> {
        self.base_rtt
    }

    /// Whether the last judged flight saw a queue.
    pub(crate) fn queued(&self) -> bool {
        self.queue
    }

    /// A new all-reduce: its clock starts at zero again.
    pub(crate) fn restart_clock(&mut self) {
        self.recover_from = 0;
    }

    /// Whether a round trip of `rtt` is late: a queue in front of the switch.
    fn late(&self, rtt: Nanos) -> bool {
        self.base_rtt
            .is_some_and(|base| rtt > base.saturating_mul(2).saturating_add(SLACK))
    }

    /// A packet, not retransmitted, was answered after `rtt`.
    pub(crate) fn on_result(&mut self, rtt: Nanos) {
        if self.fixed {
            return;
        }
        self.base_rtt = Some(self.base_rtt.map_or(rtt, |b| b.min(rtt)));
        self.flight_min = self.flight_min.min(rtt);
        self.flight_results += 1;
        if self.flight_results >= self.flight_len {
            self.queue = self.late(self.flight_min);
            if self.queue {
                self.cwnd = (self.cwnd - self.cwnd / 8).max(ONE);
                self.ssthresh = self.cwnd;
            }
            self.flight_min = Nanos::MAX;
            self.flight_results = 0;
            self.flight_len = self.limit().max(MIN_FLIGHT);
        }
        if self.queue {
            // A queue: slow start is over, and the window does not grow.
            self.ssthresh = self.ssthresh.min(self.cwnd);
            return;
        }
        if self.late(rtt) && self.cwnd >= self.ceiling / 2 {
            // Past half the pool a late result ends slow start, as any did
            // before: see the type's doc.
            self.ssthresh = self.ssthresh.min(self.cwnd);
        }
        let step = if self.cwnd < self.ssthresh {
            ONE
        } else {
            (ONE * ONE / self.cwnd.max(1)).max(1)
        };
        self.cwnd = (self.cwnd + step).min(self.ceiling);
    }

    /// A packet sent at `sent_at` timed out at `now`. Returns whether the
    /// window was cut.
    pub(crate) fn on_timeout(&mut self, sent_at: Nanos, now: Nanos) -> bool {
        if self.fixed || !self.queue || sent_at < self.recover_from {
            return false;
        }
        self.ssthresh = (self.cwnd / 2).max(ONE);
        self.cwnd = self.ssthresh;
        self.recover_from = now;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Window;
    use std::net::SocketAddr;
    use std::time::Duration;

    fn config(pool: u32, window: Window) -> AgentConfig {
        let mut c = AgentConfig::new(SocketAddr::from(([127, 0, 0, 1], 1)), 1, 0, 2, pool, 64);
        c.window = window;
        c
    }

    const MS: Nanos = 1_000_000;

    /// `n` results after `rtt` each.
    fn results(w: &mut CongestionWindow, n: usize, rtt: Nanos) {
        for _ in 0..n {
            w.on_result(rtt);
        }
    }

    #[test]
    fn a_timeout_backs_off_the_next_sends_until_a_clean_sample() {
        let c = config(64, Window::Adaptive { initial: 4 });
        let mut r = RttEstimator::new();
        for _ in 0..20 {
            r.sample(5 * MS, false);
        }
        let rto = r.rto(&c);
        assert_eq!(rto, 20 * MS, "min_rto");
        // A flight's timeouts are one event: the second (sent before the
        // first timed out) does not double again.
        r.on_timeout(0, 30 * MS);
        r.on_timeout(1, 31 * MS);
        assert_eq!(r.rto(&c), 40 * MS);
        // One sent after it does.
        r.on_timeout(32 * MS, 80 * MS);
        assert_eq!(r.rto(&c), 80 * MS);
        for t in 0..20 {
            r.on_timeout(100 * MS * (t + 1), 100 * MS * (t + 1));
        }
        assert_eq!(r.rto(&c), nanos(c.max_rto), "never past max_rto");
        // A clean sample ends the backoff; its round trip raises the estimate.
        r.sample(60 * MS, false);
        let after = r.rto(&c);
        assert!(after > 60 * MS && after < nanos(c.max_rto), "{after}");
    }

    #[test]
    fn slow_start_doubles_per_window_up_to_the_pool() {
        let mut w = CongestionWindow::new(&config(64, Window::Adaptive { initial: 4 }));
        assert_eq!(w.limit(), 4);
        results(&mut w, 4, MS);
        assert_eq!(w.limit(), 8);
        results(&mut w, 1000, MS);
        assert_eq!(w.limit(), 64, "never past the pool");
    }

    #[test]
    fn a_flight_of_late_results_shrinks_the_window_by_an_eighth() {
        let mut w = CongestionWindow::new(&config(64, Window::Adaptive { initial: 32 }));
        results(&mut w, 32, MS); // base 1 ms; the first flight (32) in time
        assert_eq!(w.limit(), 64);
        // 2 x 1 ms + 2 ms of slack: 4 ms is in time, 5 ms late. A whole
        // flight of late results (63: the window when it began) takes an
        // eighth off, and the window grows no more.
        results(&mut w, 62, 5 * MS);
        assert_eq!(w.limit(), 64);
        w.on_result(5 * MS);
        assert_eq!(w.limit(), 56);
        // One quick result in a flight: the others were waiting for a loss
        // elsewhere, not queued; growth resumes, a slot per window, late
        // results included.
        results(&mut w, 55, 5 * MS);
        w.on_result(MS);
        assert_eq!(w.limit(), 56);
        results(&mut w, 56, MS);
        assert_eq!(w.limit(), 57);
    }

    #[test]
    fn late_results_with_a_quick_one_in_their_flight_are_losses_not_a_queue() {
        let mut w = CongestionWindow::new(&config(256, Window::Adaptive { initial: 4 }));
        results(&mut w, 4, MS);
        assert_eq!(w.limit(), 8);
        // A late result alone is a round that waited for a recovery:
        // slow start goes on.
        w.on_result(10 * MS);
        assert_eq!(w.limit(), 9);
        // The flight ([`MIN_FLIGHT`] results: the window was smaller) held
        // quick ones: no queue, and every result grew the window.
        results(&mut w, MIN_FLIGHT - 5, 10 * MS);
        assert_eq!(w.limit(), 36);
        // A flight of 35 with none in time: a queue. An eighth off
        // (70 slots by then), slow start over, no growth.
        results(&mut w, 35, 10 * MS);
        assert_eq!(w.limit(), 61);
        results(&mut w, 10, MS);
        assert_eq!(w.limit(), 61);
        // The next flight (61) in time: linear growth, a slot per window.
        results(&mut w, 51, MS);
        w.on_result(MS);
        assert_eq!(w.limit(), 61);
        results(&mut w, 62, MS);
        assert_eq!(w.limit(), 62);
    }

    #[test]
    fn past_half_the_pool_a_late_result_ends_slow_start() {
        let mut w = CongestionWindow::new(&config(64, Window::Adaptive { initial: 32 }));
        w.on_result(MS);
        assert_eq!(w.limit(), 33);
        w.on_result(10 * MS);
        // Linear growth now: slow start would have made it 37.
        results(&mut w, 4, MS);
        assert_eq!(w.limit(), 33);
    }

    #[test]
    fn a_timeout_halves_only_behind_a_queue_and_once_per_flight() {
        let mut w = CongestionWindow::new(&config(64, Window::Adaptive { initial: 32 }));
        results(&mut w, 32, MS);
        assert!(!w.on_timeout(10, 100 * MS), "no queue: a loss");
        assert_eq!(w.limit(), 64);
        results(&mut w, 63, 10 * MS);
        assert_eq!(w.limit(), 56);
        assert!(w.on_timeout(10, 100 * MS));
        assert_eq!(w.limit(), 28);
        assert!(!w.on_timeout(50, 120 * MS), "the same flight");
        assert!(w.on_timeout(130 * MS, 300 * MS), "a later flight");
        assert_eq!(w.limit(), 14);
    }

    #[test]
    fn the_window_never_falls_below_one_slot() {
        let mut w = CongestionWindow::new(&config(8, Window::Adaptive { initial: 1 }));
        w.on_result(MS);
        // A flight with the quick one, then one without: a queue.
        results(&mut w, 2 * MIN_FLIGHT - 1, 50 * MS);
        for t in 1..10 {
            w.on_timeout(t * 100 * MS, t * 100 * MS + 5);
        }
        assert_eq!(w.limit(), 1);
    }

    #[test]
    fn a_fixed_window_is_the_pool_whatever_happens() {
        let mut w = CongestionWindow::new(&config(16, Window::POOL));
        assert_eq!(w.limit(), 16);
        w.on_result(MS);
        results(&mut w, 100, 100 * MS);
        assert!(!w.on_timeout(0, 10 * MS));
        assert_eq!(w.limit(), 16);
    }

    #[test]
    fn spare_slots_are_left_out_of_the_window_adaptive_or_fixed() {
        let mut c = config(12, Window::Adaptive { initial: 16 });
        c.spare_slots = 4;
        let mut w = CongestionWindow::new(&c);
        assert_eq!(w.limit(), 8);
        results(&mut w, 1000, MS);
        assert_eq!(w.limit(), 8, "never past the pool less its spare slots");
        c.window = Window::POOL;
        assert_eq!(CongestionWindow::new(&c).limit(), 8);
    }

    #[test]
    fn the_initial_window_is_at_most_the_pool() {
        let w = CongestionWindow::new(&config(4, Window::Adaptive { initial: 100 }));
        assert_eq!(w.limit(), 4);
    }

    #[test]
    fn the_recent_minimum_forgets_samples_older_than_two_epochs() {
        let mut r = RttEstimator::new();
        assert_eq!(r.recent_min(), None);
        r.sample(MS, false);
        for _ in 0..EPOCH {
            r.sample(9 * MS, false);
        }
        assert_eq!(r.recent_min(), Some(MS), "the epoch before still counts");
        for _ in 0..EPOCH {
            r.sample(9 * MS, false);
        }
        assert_eq!(r.recent_min(), Some(9 * MS));
    }

    #[test]
    fn rto_follows_the_samples_within_its_bounds() {
        let c = config(8, Window::POOL);
        let mut r = RttEstimator::new();
        assert_eq!(r.rto(&c), nanos(c.initial_rto));
        r.sample(1_000, false);
        assert_eq!(r.rto(&c), nanos(c.min_rto), "a microsecond path: the floor");
        for _ in 0..50 {
            r.sample(nanos(Duration::from_millis(300)), false);
        }
        let rto = r.rto(&c);
        assert!(rto >= nanos(Duration::from_millis(300)) && rto <= nanos(c.max_rto));
    }
}
