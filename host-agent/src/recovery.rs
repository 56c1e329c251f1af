//! Loss recovery in about a round trip (docs/PROTOCOL.md, "Loss
//! recovery"): when to suspect a slot's round is lost, and what the
//! switch's answer to a query says to do.
//!
//! A timeout is the wrong tool for a lossy path. It must stay above the
//! round trip's worst case (20 ms by default, on paths whose round trip is
//! a millisecond), and when it fires, every worker of the round resends
//! its whole contribution though only one was lost: n - 1 of n copies are
//! spurious. So a worker first *suspects* a loss, from evidence a round
//! trip gives it, and then *asks* the switch with a query, the header
//! alone, which changes nothing there. The switch's status says whose
//! contributions the set holds, and the worker resends only what is
//! missing of its own: its contribution, or (the set complete with it) its
//! result, which the resend brings back from the set's stored copy. A
//! worker whose contribution is held waits for the members the status
//! names, and keeps asking at its timeout, never resending data the switch
//! has.
//!
//! The evidence is RACK's (RFC 8985, time-based loss detection): a result
//! for a packet this worker sent *after* the slot's, once the slot has had
//! that packet's round trip and a reordering window more; and, because the
//! workers of a job agree on an order of their packets but not always on
//! when they send them, only a packet later in that order ([`Place`],
//! [`crate::engine`]) counts: a round that completed after the slot in
//! both the order and this worker's sending means the slot had every
//! contribution it was going to get. With nothing sent later to compare
//! with (the last slots of an all-reduce), a probe timer of about two
//! round trips stands in (RFC 8985's tail loss probe).

use inagg_wire::status::Status;

use crate::path::Nanos;

/// A packet's place in the order the workers of a job share: the slot's
/// packet count in this all-reduce, then the slot ([`crate::engine`]).
pub(crate) type Place = (usize, usize);

/// The loss evidence the answers so far give, and how wide the reordering
/// window is.
///
/// An answered packet judges a slot only when this worker sent it after
/// the slot *and* it comes later in the shared order ([`Place`]); two
/// such packets are kept, the latest-sent first copy (RACK's rule) and
/// the first copy furthest in the order, and one resend, the one furthest
/// in the order. Both conditions, because the workers of a job send the
/// same slots in different orders: one whose congestion window is full
/// sends its ready slots lowest in the order first, one with room sends
/// each as its previous round lands, and rounds land out of the order
/// (one that lost a packet lands late). A round this worker sent later
/// but that comes earlier in the order may be one another member sent
/// first, so its completing says nothing of the slot: judged by send time
/// alone, each such suspicion cost a query and a status, a nudge to a
/// member whose packet had just left and its own query, and the other
/// members' queries after their turn; judged by both, at K = 64 and 1%
/// loss (4 workers, 1M floats) the nudges fell from 1,291-1,447 to
/// 502-615 per all-reduce (seeds 1-3) and the queries from 5,198 to 3,112
/// (medians of 12 seeds; docs/PERFORMANCE.md, "Goodput under loss"). A round later in the order that this worker
/// sent before the slot says nothing either (a member may have sent the
/// slot after it). A resend of a round earlier in the order than slots
/// sent shortly before it says nothing of them (taken as evidence, it made
/// each look lost the moment it was answered). Resends do count: at 30%
/// loss most rounds need one, and first copies alone left whole windows
/// to their timeouts.
///
/// Even so a round can complete after one that judges it though nothing
/// was lost (a member's copy of the round before was lost, and it sent
/// this one late). As RFC 8985 (6.2) widens its window on a DSACK, a
/// suspicion the switch shows was spurious (the query brought back a copy
/// of a result already on its way when asked) widens the window by one
/// more unit, up to [`MAX_REORDER_UNITS`] and never past the smoothed round
/// trip; 16 losses recovered since the last such suspicion narrow it again.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rack {
    /// The latest-sent first copy answered.
    first: Option<Answer>,
    /// The first copy furthest in the order answered.
    ahead: Option<Answer>,
    /// The resend furthest in the order answered.
    resend: Option<Answer>,
    /// The reordering window in units of [`reorder_window`].
    units: u32,
    /// Losses recovered since the window last widened.
    recovered: u32,
}

/// An answered packet kept as loss evidence ([`Rack`]).
#[derive(Debug, Clone, Copy)]
struct Answer {
    /// Its place in the shared order.
    place: Place,
    /// When it was last sent.
    sent: Nanos,
    /// Its round trip.
    rtt: Nanos,
}

impl Answer {
    /// Whether it shows the packet at `place`, sent at `sent`, lost by
    /// `now`: it comes later in the order, was sent later, and the packet
    /// has had its round trip and `reorder` more.
    fn judges(&self, place: Place, sent: Nanos, now: Nanos, reorder: Nanos) -> bool {
        self.place > place && self.sent > sent && now >= sent + self.rtt + reorder
    }
}

impl Default for Rack {
    fn default() -> Self {
        Rack {
            first: None,
            ahead: None,
            resend: None,
            units: 1,
            recovered: 0,
        }
    }
}

/// The widest reordering window, in units of [`reorder_window`].
const MAX_REORDER_UNITS: u32 = 16;
/// Losses recovered with no spurious suspicion before the window narrows
/// back to one unit (RFC 8985's reo_wnd_persist).
const REORDER_PERSIST: u32 = 16;

impl Rack {
    /// A result answered the packet at `place`, last sent at `sent` (a
    /// resend if `resent`), at `now`.
    pub(crate) fn on_answer(&mut self, place: Place, sent: Nanos, resent: bool, now: Nanos) {
        let answer = Answer {
            place,
            sent,
            rtt: now.saturating_sub(sent),
        };
        let furthest = if resent {
            &mut self.resend
        } else {
            if self.first.is_none_or(|f| sent >= f.sent) {
                self.first = Some(answer);
            }
            &mut self.ahead
        };
        if furthest.is_none_or(|f| place > f.place) {
            *furthest = Some(answer);
        }
    }

    /// Whether the packet at `place`, sent at `sent` and not answered by
    /// `now`, is lost: a packet sent after it and later in the order was
    /// answered, and it has had that packet's round trip and `reorder`
    /// more.
    pub(crate) fn lost(&self, place: Place, sent: Nanos, now: Nanos, reorder: Nanos) -> bool {
        [self.first, self.ahead, self.resend]
            .iter()
            .flatten()
            .any(|a| a.judges(place, sent, now, reorder))
    }

    /// Whether a first copy sent after `sent` has been answered: the
    /// switch took this worker's packets in the order sent, so one sent at
    /// `sent` and not answered was lost (or its result was, or the round
    /// waits for another member), not merely behind a queue.
    pub(crate) fn answered_after(&self, sent: Nanos) -> bool {
        self.first.is_some_and(|f| f.sent > sent)
    }

    /// A suspicion of loss was spurious: the window widens.
    pub(crate) fn on_spurious(&mut self) {
        self.units = (self.units + 1).min(MAX_REORDER_UNITS);
        self.recovered = 0;
    }

    /// A loss was recovered (the switch said to resend): after enough of
    /// them the window narrows back.
    pub(crate) fn on_recovered(&mut self) {
        self.recovered += 1;
        if self.recovered >= REORDER_PERSIST {
            self.units = 1;
            self.recovered = 0;
        }
    }

    /// The reordering window: [`reorder_window`] times the units it has
    /// widened to, at most `srtt` (once there is one).
    pub(crate) fn reorder(
        &self,
        base_rtt: Option<Nanos>,
        floor: Nanos,
        srtt: Option<Nanos>,
    ) -> Nanos {
        let wide = reorder_window(base_rtt, floor).saturating_mul(Nanos::from(self.units));
        srtt.map_or(wide, |s| wide.min(s.max(floor)))
    }

    /// A new all-reduce: its clock starts at zero again (the window's
    /// width is the path's, and stays).
    pub(crate) fn restart_clock(&mut self) {
        self.first = None;
        self.ahead = None;
        self.resend = None;
    }
}

/// What a slot waiting on its round knows from the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// Nothing asked since the packet in flight was sent.
    Not,
    /// A query is out; no status yet. If none comes by the slot's
    /// deadline, the contribution is sent again (the query, its status or
    /// the switch's support for queries is missing).
    Out,
    /// The switch holds this worker's contribution to the round, which
    /// waits for other members; the worker asks again at its deadline and
    /// resends nothing.
    Held,
}

/// What a status means for the worker that asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Said {
    /// Send the contribution again: the set lacks it.
    Resend,
    /// The set holds it and waits for these members (bitmap; none when it
    /// waits for its tree's parent).
    Held { missing: u64 },
}

/// Reads a status for `worker`. A set that holds the worker's contribution
/// is waiting: for the members whose bits are clear, or, complete, for its
/// tree's parent to send the result down (a switch answers a query of a
/// complete round whose result it has with that result, not a status).
/// Either way a resend now would only add to what the switch has: the
/// missing members and the parent recover on their own, and the timeout's
/// resend remains for what they do not.
pub(crate) fn judge(status: &Status, worker: u16) -> Said {
    if status.holds(worker) {
        Said::Held {
            missing: status.member_mask() & !status.bitmap,
        }
    } else {
        Said::Resend
    }
}

/// The reordering window: a quarter of the quickest round trip (RFC 8985's
/// default), at least `floor`.
pub(crate) fn reorder_window(base_rtt: Option<Nanos>, floor: Nanos) -> Nanos {
    base_rtt.map_or(floor, |b| (b / 4).max(floor))
}

/// The rank of the worker whose turn it is to speak for the round at
/// `place`, of `workers` (ranks: one per worker under the sum,
/// in a tree as at one switch): the turns go round by the round's place,
/// so each round of a job has one speaker, and every worker speaks for
/// about as many rounds as every other.
pub(crate) fn speaker(place: Place, workers: u16) -> u16 {
    let (count, slot) = place;
    let n = usize::from(workers.max(1));
    // Below n, so it fits in a u16.
    ((count + slot) % n) as u16
}

/// When a slot with nothing sent after it is probed: two recent round
/// trips (`rtt`), at least `floor`, doubled for each query already sent about the
/// same round (a slot the switch keeps answering "resend" to costs a packet
/// per growing interval, never a stream), and never later than the
/// timeout `rto`.
pub(crate) fn probe_after(rtt: Option<Nanos>, floor: Nanos, rto: Nanos, queries: u32) -> Nanos {
    let base = rtt.map_or(rto, |r| r.saturating_mul(2).max(floor));
    base.saturating_mul(1 << queries.min(6)).min(rto)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;

    #[test]
    fn a_slot_is_lost_once_a_later_one_is_answered_and_its_round_trip_passed() {
        let mut r = Rack::default();
        assert!(!r.lost((0, 1), 0, 100 * MS, MS), "no evidence yet");
        // A first copy at (3, 5), sent at 10, answered at 12: round trip 2 ms.
        r.on_answer((3, 5), 10 * MS, false, 12 * MS);
        assert!(!r.lost((3, 5), 10 * MS, 50 * MS, MS), "not sent before it");
        assert!(
            !r.lost((3, 1), 9 * MS, 11 * MS + MS / 2, MS),
            "within 2 + 1"
        );
        assert!(r.lost((3, 1), 9 * MS, 12 * MS, MS));
        // An older first copy teaches nothing newer.
        r.on_answer((1, 0), 5 * MS, false, 40 * MS);
        assert!(r.lost((3, 1), 9 * MS, 12 * MS, MS));
    }

    #[test]
    fn a_first_copy_judges_only_what_it_follows_in_the_order_and_in_time() {
        let mut r = Rack::default();
        // (4, 2) sent at 10 and (4, 7) at 11, both answered at 13: the
        // latest sent is (4, 7), the furthest in the order too.
        r.on_answer((4, 2), 10 * MS, false, 13 * MS);
        r.on_answer((4, 7), 11 * MS, false, 13 * MS);
        assert!(r.lost((4, 5), 9 * MS, 20 * MS, MS));
        // Sent after (4, 7) but answered earlier in the order: a member may
        // have sent (4, 1) after the slot, so its answer says nothing of it.
        r.on_answer((4, 1), 12 * MS, false, 14 * MS);
        assert!(
            !r.lost((4, 3), 11 * MS + MS / 2, 50 * MS, MS),
            "(4, 1) comes before it; (4, 7) was sent before it"
        );
        // The furthest in the order still judges what was sent before it.
        assert!(r.lost((4, 5), 9 * MS, 20 * MS, MS));
        // Nothing answered comes after (4, 9) in the order.
        assert!(!r.lost((4, 9), 9 * MS, 50 * MS, MS));
        // A later round, sent later, answered: now it is.
        r.on_answer((5, 0), 13 * MS, false, 15 * MS);
        assert!(r.lost((4, 3), 11 * MS + MS / 2, 50 * MS, MS));
    }

    #[test]
    fn a_resend_judges_only_what_comes_before_it_in_the_order() {
        let mut r = Rack::default();
        // A resend of (2, 6), sent at 20, answered at 21.
        r.on_answer((2, 6), 20 * MS, true, 21 * MS);
        assert!(!r.lost((3, 2), 19 * MS, 50 * MS, MS), "later in the order");
        assert!(r.lost((2, 1), 19 * MS, 21 * MS, MS), "earlier, sent before");
        assert!(!r.lost((2, 1), 20 * MS, 50 * MS, MS), "not sent before it");
    }

    #[test]
    fn a_status_says_resend_unless_the_set_holds_our_contribution() {
        let s = |bitmap| Status { bitmap, members: 4 };
        assert_eq!(judge(&s(0b1010), 0), Said::Resend, "our bit clear");
        assert_eq!(
            judge(&s(0b1011), 0),
            Said::Held { missing: 0b0100 },
            "held, member 2 missing"
        );
        // Complete and held: the result is away at the tree's parent.
        assert_eq!(judge(&s(0b1111), 0), Said::Held { missing: 0 });
    }

    #[test]
    fn each_round_has_one_speaker_and_the_turns_go_round() {
        for workers in [1u16, 3, 8] {
            let mut turns = vec![0; usize::from(workers)];
            for count in 0..24 {
                for slot in 0..8 {
                    turns[usize::from(speaker((count, slot), workers))] += 1;
                }
            }
            let fair = 24 * 8 / usize::from(workers);
            assert!(turns.iter().all(|&t| t == fair), "{workers}: {turns:?}");
        }
        // The next round of a slot has the next worker speak for it.
        assert_eq!(speaker((4, 2), 4), 2);
        assert_eq!(speaker((5, 2), 4), 3);
        assert_eq!(speaker((6, 2), 4), 0);
    }

    #[test]
    fn probes_wait_two_round_trips_within_bounds_and_back_off() {
        assert_eq!(probe_after(None, MS, 20 * MS, 0), 20 * MS);
        assert_eq!(probe_after(Some(3 * MS), MS, 20 * MS, 0), 6 * MS);
        assert_eq!(probe_after(Some(MS / 10), MS, 20 * MS, 0), MS);
        assert_eq!(probe_after(Some(30 * MS), MS, 20 * MS, 0), 20 * MS);
        assert_eq!(probe_after(Some(3 * MS), MS, 20 * MS, 1), 12 * MS);
        assert_eq!(probe_after(Some(3 * MS), MS, 20 * MS, 2), 20 * MS);
        assert_eq!(reorder_window(Some(8 * MS), MS / 4), 2 * MS);
        assert_eq!(reorder_window(None, MS / 4), MS / 4);
    }

    #[test]
    fn spurious_suspicions_widen_the_reordering_window_and_recoveries_narrow_it() {
        let mut r = Rack::default();
        let (base, floor, srtt) = (Some(4 * MS), MS / 4, Some(10 * MS));
        assert_eq!(r.reorder(base, floor, srtt), MS);
        r.on_spurious();
        r.on_spurious();
        assert_eq!(r.reorder(base, floor, srtt), 3 * MS);
        for _ in 0..20 {
            r.on_spurious();
        }
        assert_eq!(
            r.reorder(base, floor, srtt),
            10 * MS,
            "never past the smoothed round trip"
        );
        assert_eq!(r.reorder(base, floor, None), 16 * MS);
        r.restart_clock();
        assert_eq!(
            r.reorder(base, floor, None),
            16 * MS,
            "kept across all-reduces"
        );
        for _ in 0..15 {
            r.on_recovered();
        }
        assert_eq!(r.reorder(base, floor, None), 16 * MS);
        r.on_recovered();
        assert_eq!(r.reorder(base, floor, None), MS);
    }
}
