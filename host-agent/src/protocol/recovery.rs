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

//!
//! This module holds every rule of recovery, as one reader's page: the
//! evidence ([`Rack`]), the turns ([`speaker`]), what a status and a nudge
//! say ([`judge`], [`on_nudge`]), and what a worker does at a scan and on
//! each answer (the [`Lane`] methods below: [`Lane::recover`],
//! [`Lane::ask`], [`Lane::heed`], [`Lane::resend`], [`Lane::time_out`]).
//! None of it reads a clock or touches a socket: the time comes with each
//! event ([`super::Core`]), so the simulator drives these rules exactly
//! as the socket and DPDK paths do.

use inagg_wire::status::Status;

use super::announce::probes_previous;
use super::path::Path;
use super::slot::Slot;
use super::time::{nanos, Nanos};
use super::Lane;
use crate::link::SlotBuf;
use crate::stats::Stats;

/// A packet's place in the order the workers of a job share: the slot's
/// round in this all-reduce, then the slot ([`super::flight::Flight`]).
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
/// members' queries after their turn. A round later in the order that this worker
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
/// resend remains for what they do not. The one exception is a status
/// flagged `answered`: the round is complete and its result went for two
/// earlier queries of this worker's, and was lost again; the switch sends
/// it for at most two queries per round (docs/PROTOCOL.md, "The
/// amplification bound"), and for a resend of the contribution every time.
pub(crate) fn judge(status: &Status, worker: u16) -> Said {
    if status.holds(worker) && !status.answered {
        Said::Held {
            missing: status.member_mask() & !status.bitmap,
        }
    } else {
        Said::Resend
    }
}

/// Resends of a data round after which a status that still finds the set
/// without this worker's contribution means that the switch refuses it
/// ([`refused`]). Three losses of the same contribution in a
/// row at 10% loss: one round in a thousand moves on for nothing (and
/// completes after a handshake).
pub(crate) const REFUSED_AFTER: u32 = 3;

/// Whether `status`, the answer to this worker's query about a data round
/// it has resent [`REFUSED_AFTER`] times, still shows the set without its
/// contribution. The switch drops a data contribution that meets another
/// round's id in its set, or the id of the set's last round after every
/// member left it (docs/PROTOCOL.md, "Slot state machine", the data
/// rules): members that moved on from different results (replays of an
/// earlier session) disagree on the round's id, or an earlier session's
/// round had the same id, and each side would wait for the other for
/// good. A handshake is never dropped so: sent to the same set, it spoils
/// that round (or starts one of handshakes), and every member leaves it on
/// the same result, agreeing again ("Sessions").
pub(crate) fn refused(status: &Status, worker: u16, resends: u32) -> bool {
    resends >= REFUSED_AFTER && !status.holds(worker)
}

/// Whether `status`, the answer to this worker's query about its
/// handshake, shows the set holding a complete round (`count`, its
/// distinct contributors, is every member) without this worker. No round
/// of this worker's session completes without it, so the round is another
/// session's (replayed, or left by an earlier one), and the switch drops
/// the handshake there as a late copy unless its packet id is newer than
/// the round's (docs/PROTOCOL.md, "Slot state machine", rounds taken
/// over). Resent as it is, it is dropped for good: the slot jumps to a
/// newer id in the same set ([`super::session::SlotSession::jump`]).
pub(crate) fn shut_out(status: &Status, count: u16, worker: u16) -> bool {
    count >= status.members && !status.holds(worker)
}

/// Whether `status`, the answer to this worker's query about `slot`'s
/// round in set 1, says the slot is to join set 0: the query left after a
/// nudge said a round of set 0 lacks this worker ([`Slot::ahead`]), yet
/// the switch holds this worker's contribution and waits for members.
/// Either the slot's members are split between its sets (docs/PROTOCOL.md,
/// "Sessions", split slots), or the others went on to set 0's next round
/// from a result of this round that the set no longer holds (written
/// since by a member moving through it, after a spoiled round say, and
/// this worker's copy lost): they never come back, and they wait in set 0
/// for this worker. Without the second, a worker that lost a spoiled
/// round's result at 20% loss held its data round in set 1 alone while
/// the others waited for it in a handshake in set 0, until every worker
/// gave up (1 of 2 seeds of an 8-worker job with every slot of a 512-slot
/// pool in flight).
pub(crate) fn gone<B>(slot: &Slot<B>, status: &Status, worker: u16) -> bool {
    slot.ahead.is_some_and(|(_, at)| slot.asked_at >= at)
        && matches!(judge(status, worker), Said::Held { missing } if missing != 0)
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

/// The shortest reordering window: scheduling noise on a busy host.
pub(super) const REORDER_FLOOR: Nanos = 250_000;
/// The shortest wait before a slot with nothing sent after it is probed.
const PROBE_FLOOR: Nanos = 1_000_000;
/// Queries about one round that may go unanswered before its contribution
/// is sent again at its timeout, at a switch that has not answered a query
/// yet (the P4 programs do not). At one that has, an unanswered query is a
/// lost query or status, and is asked again.
const QUERY_TRIES: u32 = 4;
/// Queries answered "held" about one round before its contribution is
/// sent again anyway (each waits twice as long as the one before, up to
/// the timeout), no sooner than [`Lane::stop_asking`] allows. Answers,
/// not queries sent: at 30% loss half the queries or their statuses are
/// lost, and counting those sent a held contribution again while its
/// missing members were still recovering, a spurious resend and a timeout
/// each.
const HELD_ANSWERS: u32 = 16;
/// A slot held asks again at most 2^3 times later than its first probe:
/// its own copy of the result may be lost, and a timeout backed off to a
/// second must not be what it waits.
const HELD_DOUBLINGS: u32 = 3;
/// A slot the switch told to resend asks again at most 2^3 times later
/// than two round trips, however often the round was resent: the
/// interval grows for a switch that drops what it asked for, and stays
/// short enough that a lost resend at heavy loss does not wait a timeout.
const RESEND_DOUBLINGS: u32 = 3;
/// A worker's queries ask the switch to nudge the members a round waits
/// for (docs/PROTOCOL.md, "Loss recovery") while at most this many of its
/// slots may be in flight. With few, a member learns of its own loss late
/// (few later rounds complete to show it), and the nudge saves it a round
/// trip or more (K = 16370, pool 8, 4 workers, int32 at 10% loss: 3.07
/// against 2.70 Gbit/s). With hundreds, only the member whose turn it is
/// asks for them, until the switch says it holds the round ([`TURN_WAIT`]): every member's queries
/// asking, the copies (to members only behind, mostly) cost the switch
/// and the workers more than they saved (K = 64, 512 slots, 4 workers at
/// 5%: 0.097 against 0.108 Gbit/s).
const NUDGE_WINDOW: usize = 32;
/// With more than [`NUDGE_WINDOW`] slots in flight, the members of a job
/// take turns to speak for a round ([`Lane::speaks_for`]): the one whose
/// turn it is asks as soon as it suspects the round, and asks for nudges;
/// the others wait this many smoothed round trips more. Every member of a
/// round stalled by one lost contribution sees the same evidence at about
/// the same moment, and n queries where the speaker's suffices (the
/// nudged member resends, [`on_nudge`]) cost the switch n - 1 queries
/// and statuses more: at K = 64, 8 workers and 5% loss, 3.7 queries per datum lost, half the packets a
/// data round costs. Waiting costs a member whose own result copy was lost
/// three round trips more, which hundreds of slots in flight cover. Why
/// three: the speaker's recovery takes about two (its query and status,
/// then the nudged member's resend and the result), so members that waited
/// two asked just as it completed, each query bringing back a result copy
/// nobody needed. `inagg sim protocol --elements 1048576 -k 64 --pool 512
/// --int --seeds 3 --loss L --workers W`, queries and statuses per packet
/// lost and virtual time, two against three: 8 workers at 1% 5.31 and
/// 287.6 ms against 3.57 and 282.8 ms, at 5% 2.90 and 313.4 ms against
/// 2.71 and 319.3 ms, at 10% 2.50 against 2.43 (the same time); 4 workers
/// at 1% 3.72 against 3.07. Four cut 8 workers at 1% to 3.20 but cost 3-5%
/// of the time at 5% and 10%.
const TURN_WAIT: u64 = 3;

/// With at most [`NUDGE_WINDOW`] slots in flight, how long a member whose
/// turn it is not ([`speaker`]) waits per turn after the speaker's
/// ([`Lane::turns_after`]), from when it first suspects a round, before it
/// asks too: the member next after the speaker waits this long, the one
/// after it twice as long, and so on. Staggered, the members stop asking
/// as soon as the round completes: with one wait for all, every member
/// of a round held longer than it (a member that lost its copy of the
/// round before, and sends late) asked at once (`inagg sim protocol
/// --elements 4194304 --loss 0.05 --workers 8 -k 1024 --pool 12 --seeds
/// 4`, with [`FEW_TURN_PROBES`]: 44,462 queries and statuses against
/// 68,195, 2.58 per packet lost against 3.58, virtual time 472 ms against
/// 438; the staggering alone, 449 ms). The speaker's query
/// nudges the member the round lacks, which resends ([`on_nudge`]), and
/// the round completes in about two round trips and the scans between:
/// every member asking at the same scan cost n queries and statuses where
/// one suffices (the bound is asserted by protosim's
/// `control_traffic_stays_within_three_per_packet_lost`). A quarter of
/// [`PROBE_FLOOR`]: more than the scans (200 µs apart at the least) and a
/// loopback round trip or two. Counted from the suspicion,
/// not the send: where the evidence comes in a burst (a stalled window
/// answered at once), every member's send is long past by then.
const FEW_TURN_WAIT: Nanos = PROBE_FLOOR / 4;

/// With at most [`NUDGE_WINDOW`] slots in flight, a member whose turn it
/// is not probes the tail (a round with nothing sent after it to judge it
/// by) this many of its shortest probe waits later than the speaker does.
/// A tail that nothing judges is, more often than not, a round every slot
/// waits behind: a member descheduled or paused holds every round of the
/// job, and each waiting member's probe, and its held answers' probes
/// after it, cost a query and a status where the speaker's (which nudges
/// the slow member) suffices. `inagg sim protocol --faults starve --seeds
/// 500`: 2.66 queries and statuses per round held up with two waits,
/// against 3.22 with one and 4.56 with none. It costs a member whose own
/// copy of the result was lost with no later round to show it the
/// waits: 4 workers, K = 1024, a pool of 12, 4M elements at 10% loss,
/// virtual time 563 ms against 545 with one wait and 526 with none (at
/// 1%: 154 against 153 and 152; 8 workers at 5%: 471 against 472 with
/// one). Four waits (1.98 per round held up) cost 5-10% of the virtual
/// time at 5-10% loss. (Two waits once left members a round apart, 2
/// seeds in 40,000 of `loss,dup,jitter,starve,pause,crash`, and with the
/// catch-up round, 1 seed in 40,000 waiting on each other's windows: closed
/// by the catch-up round and by places counted in rounds, docs/PROTOCOL.md,
/// "Sessions" and "Congestion window"; 0 in 40,000 since.)
const FEW_TURN_PROBES: u64 = 2;

/// Whether a query asks the switch for nudges: every query with `few`
/// slots in flight ([`NUDGE_WINDOW`]); with more, the queries of the
/// member whose turn it is (`after` = 0 turns after the speaker,
/// [`Lane::turns_after`]) until the switch says it holds the round (`held`
/// statuses so far): it speaks for every member, and the switch nudges
/// only on a query whose sender's bit is set, so a query or status lost,
/// or an answer that the speaker's own contribution was lost, leaves the
/// speaking to its next query; and a round held a while asks again by
/// turns ([`super::announce::probes_previous`]: a restart may have taken
/// the round before from the members it waits for, and their nudges make
/// them announce it); and every query of a round held past
/// [`HELD_ANSWERS`]. Such a round resends at its timeout, a copy the switch
/// drops without an answer while it holds the round, so its held answers,
/// and with them the turns' nudges, came seconds apart: after a restart,
/// with the announcement of the member ahead lost two or three times, the
/// member behind gave up before it was nudged again (2 in 100,000 seeds of
/// `inagg sim protocol --faults loss,dup,jitter,starve,pause,restart`).
///
/// Asking on its first query only, a speaker whose query was lost or
/// whose own contribution was left the members the round lacked to their
/// own suspicion and turn, and every member asked: `inagg sim protocol
/// --elements 1048576 --workers 8 -k 64 --pool 512 --seeds 3`, queries and
/// statuses per packet lost at 1% / 5% / 10% loss 5.05 / 2.93 / 2.66
/// against 4.94 / 2.80 / 2.43 now, virtual time at 10% 371 ms against 363
/// (4 workers: 246 against 228).
pub(super) fn asks_nudges(few: bool, after: u16, held: u32) -> bool {
    few || (after == 0 && held == 0) || probes_previous(held, after) || held >= HELD_ANSWERS
}

/// What a nudge makes a worker do ([`on_nudge`]).
pub(super) enum Nudged {
    /// Ask the switch about the round at once.
    Ask,
    /// Resend the contribution at once.
    Resend,
}

/// What another member's status about `slot`'s round (a nudge) asks of
/// this worker: nothing unless the status lacks its contribution
/// (`lacks_mine`) and the slot has no recovery of its own under way (not
/// asked about, nor asked about before). `srtt` is the path's smoothed
/// round trip.
///
/// With few slots in flight (`few`), every member's queries ask for
/// nudges, and the worker resends if its packet left at least a smoothed
/// round trip before the nudge came: the status left the switch about
/// half a round trip ago, after the packet would have arrived. A packet
/// sent since (the worker was late: its own copy of the round before was
/// lost, and it sent this round as the others' queries went out) is on
/// its way, and the nudge is ignored: asking about it cost a query and a
/// status per such nudge, and the slot's own suspicion still covers a
/// packet that is lost after all.
///
/// With many, a nudge comes only from the speaker's queries
/// ([`TURN_WAIT`]), asked once later rounds have completed without this
/// one, and the worker resends (once the path is drained,
/// [`Lane::resend_nudged`]) if its packet left at least a smoothed
/// round trip ago and a packet it sent after this one has been answered
/// (`later_answered`): the switch takes a worker's packets in the order
/// sent, so this one was lost, not behind a queue, whatever the nudge's
/// age. Asking first cost a round trip, and its query and status, for
/// every contribution lost (K = 64, 4M floats, 10 seeds: queries at 1% loss 24-42% fewer, and 8 workers at
/// 5% 0.83 against 0.77 of lossless; no spurious copy). A packet sent
/// less than that ago may still be on its way (gated by half the
/// lowest round trip instead: 177 spurious copies per run at 1%, for
/// 685 lost), and the worker asks. When it left is its send call's time
/// ([`Slot::left_at`]), not its stamp: gated by the stamp, one lossless
/// run in 30 (8 workers) resent a packet sent later than stamped; gated
/// by the send's time alone, 2 in 40, the switch's queue holding the
/// packet longer than a smoothed round trip. The evidence of a later
/// packet answered makes that impossible without a loss (none in 80).
pub(super) fn on_nudge<B>(
    slot: &Slot<B>,
    lacks_mine: bool,
    srtt: Option<Nanos>,
    later_answered: bool,
    now: Nanos,
    few: bool,
) -> Option<Nudged> {
    if !lacks_mine || slot.asked != Asked::Not || slot.queries != 0 {
        return None;
    }
    let long_gone = srtt.is_some_and(|rtt| now >= slot.left_at + rtt);
    if few {
        return long_gone.then_some(Nudged::Resend);
    }
    Some(if long_gone && later_answered {
        Nudged::Resend
    } else {
        Nudged::Ask
    })
}

/// How long a packet may be on its way to the switch, as [`on_nudge`]
/// judges it: the smoothed round trip `srtt`, at most the minimum timeout
/// `min_rto`. Round-trip samples are round completion times, and a round
/// that waited for a slow member is a long one: after a member paused for
/// seconds at 29% loss, a smoothed round trip of 350 ms made a worker
/// take every nudge about its lost contribution for one about a packet
/// still on its way, for 400 ms of nudges, and the round failed (seed
/// 3869 of `inagg sim protocol`). No path this agent serves holds a packet
/// longer than the minimum timeout.
pub(super) fn on_its_way_for(srtt: Option<Nanos>, min_rto: Nanos) -> Option<Nanos> {
    srtt.map(|rtt| rtt.min(min_rto))
}

/// A resend a nudge asked for, waiting for the path to drain
/// ([`Lane::resend_nudged`]): the slot, and its round's packet id and
/// resends when the nudge came.
pub(super) struct Pending {
    slot: usize,
    packet_id: u32,
    resends: u32,
}

impl Pending {
    fn of<B>(slot: &Slot<B>, s: usize) -> Self {
        Pending {
            slot: s,
            packet_id: slot.packet_id,
            resends: slot.resends,
        }
    }

    /// Whether `slot` still waits for the round the nudge was about, with
    /// no recovery of its own begun since.
    fn still<B>(&self, slot: &Slot<B>) -> bool {
        slot.in_flight
            && slot.packet_id == self.packet_id
            && slot.resends == self.resends
            && slot.asked == Asked::Not
            && slot.queries == 0
    }
}

impl Lane<'_> {
    /// The switch answered slot `s`'s query with `status`.
    pub(super) fn on_status<B: SlotBuf>(
        &mut self,
        slot: &mut Slot<B>,
        s: usize,
        status: &Status,
        now: Nanos,
        tx: &mut Vec<usize>,
        stats: &mut Stats,
    ) {
        stats.statuses += 1;
        self.path.switch_answers = true;
        if slot.asked == Asked::Not {
            // An answer to a query before a resend that has been acted on
            // already.
            stats.stale_results += 1;
            return;
        }
        let said = judge(status, self.config.worker);
        self.heed(slot, s, said, now, tx, stats);
    }

    /// Another member's query about slot `s`'s round brought `status`
    /// here (a nudge): ask at once, resend once the path is drained
    /// (queued in `nudged`, at most one per slot: bounded by the pool), or
    /// nothing ([`on_nudge`]). `few`: at most [`NUDGE_WINDOW`] slots may
    /// be in flight.
    pub(super) fn on_nudge_status<B: SlotBuf>(
        &mut self,
        slot: &mut Slot<B>,
        s: usize,
        status: &Status,
        now: Nanos,
        few: bool,
        (queries, nudged, stats): (&mut Vec<usize>, &mut Vec<Pending>, &mut Stats),
    ) {
        stats.nudges += 1;
        let lacks_mine = judge(status, self.config.worker) == Said::Resend;
        let srtt = on_its_way_for(self.path.rtt.srtt(), nanos(self.config.min_rto));
        let later = self.path.rack.answered_after(slot.last_sent());
        match on_nudge(slot, lacks_mine, srtt, later, now, few) {
            Some(Nudged::Resend) if !nudged.iter().any(|n| n.slot == s) => {
                nudged.push(Pending::of(slot, s))
            }
            Some(Nudged::Ask) => self.ask(slot, s, now, queries, stats),
            Some(Nudged::Resend) | None => {}
        }
    }

    /// Loss recovery at a scan ([`self`]): a slot suspected lost
    /// (a later-sent one was answered, the tail has waited two recent
    /// round trips, or its timeout passed) queries the switch; a slot whose
    /// query went unanswered, or that the switch holds, asks again at its
    /// deadline, and resends at its timeout once it has asked enough.
    ///
    /// Resends behind a queue are at most a window per scan (the rest at
    /// the next): recovery must not itself flood a switch that cannot keep
    /// up. The first timeout of a flight behind a queue halves the window.
    pub(super) fn recover<B: SlotBuf>(
        &mut self,
        slots: &mut [Slot<B>],
        now: Nanos,
        tx: &mut Vec<usize>,
        queries: &mut Vec<usize>,
        stats: &mut Stats,
    ) {
        let mut budget = if self.path.window.queued() {
            self.path.window.limit()
        } else {
            usize::MAX
        };
        let reorder = self.path.rack.reorder(
            self.path.window.base_rtt(),
            REORDER_FLOOR,
            self.path.rtt.srtt(),
        );
        // The tail: the slot sent last of those not asked about. Only it is
        // probed by time; any earlier one is judged by the evidence its
        // successors bring when they are answered ([`Rack`]).
        // (Probed by time, a window that a switch serves one slot after
        // another would ask about its later slots before their results are
        // due, and each query of a complete round brings the result a
        // second time.) Once it is asked about, the next slot back is the
        // tail: where every slot of a window is stuck (30% loss), nothing
        // is answered to judge them by, and probing only the last left the
        // rest to their timeouts (4M floats: 0.9 s became 51 s).
        let tail = slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.in_flight && s.asked == Asked::Not)
            .max_by_key(|(s, slot)| (slot.last_sent(), *s))
            .map(|(s, _)| s);
        let few = self.few_in_flight(slots.len());
        let turn_wait = self.path.rtt.srtt().unwrap_or(0).saturating_mul(TURN_WAIT);
        for (s, slot) in slots.iter_mut().enumerate().filter(|(_, s)| s.in_flight) {
            match slot.asked {
                Asked::Not => {
                    let sent = slot.last_sent();
                    // Not this worker's turn to speak for the round: with
                    // many slots in flight it waits TURN_WAIT round trips
                    // more on loss evidence and the tail probe (not on
                    // its timeout: a round still stalled at its deadline
                    // holds the window back, and waiting two round trips
                    // more there costs goodput under heavy loss: the
                    // lossy rows of docs/PERFORMANCE.md); with few,
                    // FEW_TURN_WAIT per turn after the speaker's from
                    // when it first suspects the round, and its tail
                    // probe FEW_TURN_PROBES probe waits. Only in a data
                    // round of a joined session whose set has shown no
                    // other round: there each member's query brings back
                    // a copy of its own towards FOREIGN_COPIES, and turns
                    // made leaving such a set (a replayed session's) slow.
                    let other = slot.queries == 0
                        && !self.speaks_for(slot.place)
                        && self.sessions[s].joined
                        && slot.foreign == 0;
                    let wait = if other && !few { turn_wait } else { 0 };
                    let since = self.path.held_at.map_or(sent, |h| h.max(sent));
                    let probe_wait = if other && few {
                        self.probe_after(0).saturating_mul(FEW_TURN_PROBES)
                    } else {
                        wait
                    };
                    let probe = tail == Some(s)
                        && now >= since + self.probe_after(slot.queries) + probe_wait;
                    let suspect = now >= slot.deadline
                        || probe
                        || self.path.rack.lost(slot.place, sent, now, reorder + wait);
                    let turn =
                        FEW_TURN_WAIT.saturating_mul(u64::from(self.turns_after(slot.place)));
                    if suspect && (!other || !few || slot.waited(sent, now, turn)) {
                        self.ask(slot, s, now, queries, stats);
                    }
                }
                Asked::Out
                    if now >= slot.deadline
                        && slot.queries >= QUERY_TRIES
                        && !self.path.switch_answers =>
                {
                    self.stop_asking(slot, s, now, &mut budget, tx, stats)
                }
                Asked::Held
                    if now >= slot.deadline
                        && (slot.held >= HELD_ANSWERS || slot.waits_for == 0) =>
                {
                    // Held this long: whatever the set holds may never
                    // complete (a stopped session's partial round, a tree
                    // whose partial sum went missing above): the timeout's
                    // resend, as before queries, lets the switch act on it.
                    self.stop_asking(slot, s, now, &mut budget, tx, stats)
                }
                Asked::Out | Asked::Held if now >= slot.deadline => {
                    self.ask(slot, s, now, queries, stats)
                }
                Asked::Held | Asked::Out => {}
            }
        }
    }

    /// Whether at most [`NUDGE_WINDOW`] of the worker's `pool` slots may be
    /// in flight: every query then asks for nudges, and every member asks
    /// as soon as it suspects a round.
    pub(super) fn few_in_flight(&self, pool: usize) -> bool {
        pool.min(self.path.window.limit()) <= NUDGE_WINDOW
    }

    /// Whether it is this worker's turn to speak for the round at `place`
    /// ([`TURN_WAIT`], [`speaker`]).
    pub(super) fn speaks_for(&self, place: Place) -> bool {
        self.turns_after(place) == 0
    }

    /// This worker's place in the turns to speak for the round at `place`:
    /// 0 if it is its turn ([`speaker`]), 1 if it is next, and so on.
    pub(super) fn turns_after(&self, place: Place) -> u16 {
        let n = self.config.workers.max(1);
        (self.config.rank % n + n - speaker(place, n)) % n
    }

    /// How long a slot waits before it asks (again): about two of the
    /// path's recent round trips, twice as long for each of `queries`
    /// already answered about its round ([`probe_after`]).
    pub(super) fn probe_after(&self, queries: u32) -> Nanos {
        let rto = self.path.rtt.rto(self.config);
        // The timeout caps it, and is itself at most max_rto.
        probe_after(self.path.rtt.recent_min(), PROBE_FLOOR, rto, queries)
    }

    /// Slot `s` has asked enough: its contribution goes again at its
    /// timeout (not before: on a path with a queue the answers wait in it),
    /// at most `budget` more per scan.
    pub(super) fn stop_asking<B: SlotBuf>(
        &mut self,
        slot: &mut Slot<B>,
        s: usize,
        now: Nanos,
        budget: &mut usize,
        tx: &mut Vec<usize>,
        stats: &mut Stats,
    ) {
        // A slot held for members waits two timeouts, and at least the
        // longest timeout: they may be slow, not lost (at 30% loss one
        // member's recovery can take 150 ms, and a resend then only adds a
        // copy the switch drops). One held for its tree's parent (no member
        // missing) resends at its timeout, which sends the partial sum up
        // again.
        let wait = if slot.asked == Asked::Held && slot.waits_for != 0 {
            slot.rto.saturating_mul(2).max(nanos(self.config.max_rto))
        } else {
            slot.rto
        };
        let due = slot.last_sent() + wait;
        if now < due {
            slot.deadline = due;
        } else if *budget > 0 {
            *budget -= 1;
            self.time_out(slot, s, now, tx, stats);
        }
    }

    /// How many times the wait for a query's answer is doubled: on a path
    /// without a queue, never (an unanswered query was lost, and the next
    /// is as likely to arrive: at 30% loss half go unanswered); behind a
    /// queue, the answers wait in it and each query asked again waits twice
    /// as long. (A slot held asks again at doubling intervals whatever the
    /// path: the members it waits for may be slow, not lost.)
    pub(super) fn backoff<B: SlotBuf>(&self, slot: &Slot<B>) -> u32 {
        if self.path.window.queued() {
            slot.queries
        } else {
            0
        }
    }

    /// Queues slot `s`'s query; the slot waits for the answer about two
    /// recent round trips ([`Lane::backoff`]).
    pub(super) fn ask<B: SlotBuf>(
        &mut self,
        slot: &mut Slot<B>,
        s: usize,
        now: Nanos,
        queries: &mut Vec<usize>,
        stats: &mut Stats,
    ) {
        let wait = self.probe_after(self.backoff(slot));
        slot.asked = Asked::Out;
        slot.asked_at = now;
        slot.queries = slot.queries.saturating_add(1);
        slot.deadline = now + wait;
        queries.push(s);
        stats.queries += 1;
    }

    /// Resends the contributions that nudges asked for ([`on_nudge`]),
    /// once the path is drained and unless the round moved on since: a
    /// worker descheduled while a nudge and the round's result waited in
    /// its socket reads the result after the nudge. (Draining alone did
    /// not stop lossless resends, 2 runs in 40 with 8 workers; with
    /// [`on_nudge`]'s evidence of a later packet answered, none in 80, the
    /// measurements being of the two together.)
    pub(super) fn resend_nudged<B: SlotBuf>(
        &mut self,
        slots: &mut [Slot<B>],
        nudged: &mut Vec<Pending>,
        now: Nanos,
        tx: &mut Vec<usize>,
        stats: &mut Stats,
    ) {
        for n in nudged.drain(..) {
            let slot = &mut slots[n.slot];
            if n.still(slot) {
                stats.nudge_resends += 1;
                self.heed(slot, n.slot, Said::Resend, now, tx, stats);
            }
        }
    }

    /// Slot `s` timed out (its queries unanswered, or its set held too
    /// long): its contribution goes again, and its timeout doubles.
    pub(super) fn time_out<B: SlotBuf>(
        &mut self,
        slot: &mut Slot<B>,
        s: usize,
        now: Nanos,
        tx: &mut Vec<usize>,
        stats: &mut Stats,
    ) {
        if self.path.window.on_timeout(slot.sent_at, now) {
            stats.window_cuts += 1;
        }
        self.path.rtt.on_timeout(slot.sent_at, now);
        stats.timeouts += 1;
        slot.rto = slot.rto.saturating_mul(2).min(nanos(self.config.max_rto));
        self.resend(slot, s, now, tx, stats);
    }

    /// Acts on the switch's answer to slot `s`'s query: resend at once
    /// what the set lacks of this worker's, or wait for the members it
    /// names.
    pub(super) fn heed<B: SlotBuf>(
        &mut self,
        slot: &mut Slot<B>,
        s: usize,
        said: Said,
        now: Nanos,
        tx: &mut Vec<usize>,
        stats: &mut Stats,
    ) {
        match said {
            Said::Held { missing } => {
                if missing != 0 {
                    self.path.held_at = Some(now);
                }
                // Asked again in case this worker's copy of the result is
                // lost: the members it waits for recover on their own.
                slot.asked = Asked::Held;
                slot.held = slot.held.saturating_add(1);
                slot.waits_for = missing;
                slot.deadline = now + self.probe_after(slot.queries.min(HELD_DOUBLINGS));
            }
            Said::Resend => {
                self.path.rack.on_recovered();
                stats.fast_retransmissions += 1;
                self.resend(slot, s, now, tx, stats);
                // Asked again if no result comes in two round trips: the
                // resend or its result may be lost too, and the timeout (a
                // backed-off one at heavy loss) left the round, and every
                // member it holds, waiting for it. Twice as long for each
                // resend of the round before (up to 2^3): a switch that
                // keeps saying "resend" and dropping what comes (a set
                // stuck on another round) gets a packet per growing
                // interval, not one every two round trips.
                let resent = slot.resends.saturating_sub(1).min(RESEND_DOUBLINGS);
                slot.deadline = now + self.probe_after(self.backoff(slot).max(resent));
            }
        }
    }

    /// Queues slot `s`'s packet again.
    pub(super) fn resend<B: SlotBuf>(
        &mut self,
        slot: &mut Slot<B>,
        s: usize,
        now: Nanos,
        tx: &mut Vec<usize>,
        stats: &mut Stats,
    ) {
        stats.retransmissions += 1;
        slot.resends = slot.resends.saturating_add(1);
        slot.resent_at = now;
        slot.asked = Asked::Not;
        slot.deadline = now + slot.rto;
        tx.push(s);
        stats.packets_sent += 1;
        stats.bytes_sent += slot.packet.wire_len() as u64;
    }
}

/// Whether the result arriving at `now` for `slot`, whose query is out,
/// was already on its way when the query was sent: it came within half the
/// quickest round trip of the query. A second copy of it then shows that
/// the query was needless, the round merely late, and the reordering
/// window widens ([`Rack::on_spurious`]). A result that came
/// later left the switch after the query did: the round completed in the
/// meantime, usually on another member's resend (a contribution was lost,
/// and the suspicion was right), and the switch answers the query with a
/// second copy that says nothing of reordering. Counting those as
/// spurious kept the window at its widest at 1% loss: at K = 64, 1,389
/// widenings for 2,723 lost contributions; 50 when judged by time.
pub(super) fn on_its_way<B>(path: &Path, slot: &Slot<B>, now: Nanos) -> bool {
    slot.asked == Asked::Out
        && path
            .window
            .base_rtt()
            .is_some_and(|base| now.saturating_sub(slot.asked_at) < base / 2)
}

/// A slot's packet was answered: a sample for the round-trip estimate and
/// growth for the window, unless the switch said the round held this
/// worker's contribution while it waited for other members (at 30% loss
/// nearly every round does, and their samples raised the timeout to
/// hundreds of milliseconds and read as a queue that doubled every query's
/// wait). After a retransmission, which copy was answered
/// is unknown (Karn's rule: no sample), except when the answer comes sooner
/// after the one resend than half the quickest round trip seen: then it
/// answers the first copy, whose round trip is a true sample, and a late
/// one. Without that exception a timeout shorter than the round trip drops
/// every sample, and neither the timeout nor the window learns of the
/// queue that made it fire.
///
/// Every answer is loss evidence ([`Rack`]) for the slots
/// sent before it and before it in the shared order.
pub(super) fn answered<B>(path: &mut Path, entry: &Slot<B>, now: Nanos) {
    let overtaken = path.rack.answered_after(entry.last_sent());
    path.rack
        .on_answer(entry.place, entry.last_sent(), entry.resends > 0, now);
    let first_copy = match entry.resends {
        // The switch said it held this worker's contribution and waited
        // for other members: the round trip measures their recovery, not
        // the path. (A round merely asked about still counts: on a switch
        // with a queue, bmv2, the late rounds that are asked about are the
        // queue's evidence, without which the timeout and the window miss
        // it.)
        _ if entry.held > 0 => false,
        0 => true,
        1 => path
            .window
            .base_rtt()
            .is_some_and(|base| now.saturating_sub(entry.resent_at) < base / 2),
        _ => false,
    };
    if first_copy {
        let rtt = now.saturating_sub(entry.sent_at);
        path.rtt.sample(rtt, overtaken);
        path.window.on_result(rtt);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::slot::tests::slot;
    use crate::{AgentConfig, Window};

    fn path() -> (AgentConfig, Path) {
        let mut c = AgentConfig::new(([127, 0, 0, 1], 1).into(), 1, 0, 2, 64, 64);
        c.window = Window::Adaptive { initial: 4 };
        let p = Path::new(&c);
        (c, p)
    }

    /// A nudge makes a worker resend once its packet is a smoothed round
    /// trip gone (with many slots in flight, once a later one was answered
    /// too); otherwise it asks, or with few in flight ignores it; a slot
    /// with its own recovery under way ignores it.
    #[test]
    fn a_nudge_resends_a_packet_long_gone_and_asks_about_one_just_sent() {
        let srtt = Some(4 * MS);
        let sent = slot(10 * MS, 0, 0);
        let many = |s: &Slot<()>, now| on_nudge(s, true, srtt, true, now, false);
        assert!(matches!(many(&sent, 14 * MS), Some(Nudged::Resend)));
        assert!(
            matches!(many(&sent, 13 * MS), Some(Nudged::Ask)),
            "may be on its way"
        );
        let unseen = on_nudge(&sent, true, srtt, false, 30 * MS, false);
        assert!(
            matches!(unseen, Some(Nudged::Ask)),
            "nothing sent after it answered"
        );
        let no_rtt = on_nudge(&sent, true, None, true, 30 * MS, false);
        assert!(matches!(no_rtt, Some(Nudged::Ask)));
        let few = |s: &Slot<()>, now| on_nudge(s, true, srtt, false, now, true);
        assert!(
            matches!(few(&sent, 14 * MS), Some(Nudged::Resend)),
            "few: gone"
        );
        assert!(few(&sent, 13 * MS).is_none(), "few: on its way, ignored");
        // A round trip inflated by rounds that waited for a paused member
        // counts for no more than the minimum timeout.
        let inflated = on_its_way_for(Some(350 * MS), 20 * MS);
        assert_eq!(inflated, Some(20 * MS));
        let late = |now| on_nudge(&sent, true, inflated, false, now, true);
        assert!(matches!(late(30 * MS), Some(Nudged::Resend)), "gone");
        assert!(late(29 * MS).is_none(), "within the minimum timeout");
        assert_eq!(on_its_way_for(srtt, 20 * MS), srtt);
        let holds = on_nudge(&sent, false, srtt, true, 30 * MS, false);
        assert!(holds.is_none(), "holds mine");
        // Resent at 20 ms: gone a round trip after that, not after the first send.
        let resent = slot(10 * MS, 1, 20 * MS);
        assert!(matches!(many(&resent, 22 * MS), Some(Nudged::Ask)));
        let mut asked = slot(10 * MS, 0, 0);
        asked.queries = 1;
        assert!(many(&asked, 30 * MS).is_none(), "recovery of its own");
        asked.queries = 0;
        asked.asked = Asked::Out;
        assert!(many(&asked, 30 * MS).is_none(), "asked already");
        // A nudge waiting for the path to drain lapses once the round moves on.
        let p = Pending::of(&sent, 3);
        assert!(p.still(&sent));
        let mut moved = slot(10 * MS, 0, 0);
        moved.packet_id = 9;
        assert!(!p.still(&moved), "another round");
        assert!(!p.still(&resent), "resent since");
    }

    /// The speaker asks for nudges until the switch says it holds the
    /// round, not on its first query only (a query lost, or a status that
    /// its own contribution was lost, sends no nudge); the others do not,
    /// but for a round held a while, by turns; with few slots, everyone.
    #[test]
    fn the_speaker_asks_for_nudges_until_the_round_is_held() {
        assert!(asks_nudges(false, 0, 0), "the speaker's queries, none held");
        assert!(!asks_nudges(false, 0, 1), "held: the nudges went");
        assert!(!asks_nudges(false, 1, 0), "not its turn");
        assert!(!asks_nudges(false, 3, 1));
        assert!(asks_nudges(false, 0, 3) && asks_nudges(false, 1, 4));
        assert!(!asks_nudges(false, 1, 3), "held a while: by turns");
        assert!(asks_nudges(true, 2, 5), "few slots: every query");
        assert!(
            asks_nudges(false, 1, HELD_ANSWERS) && asks_nudges(false, 2, HELD_ANSWERS + 2),
            "held past asking: every query"
        );
    }

    /// Karn's rule, and its exception: an answer too quick to be the
    /// resend's is the first copy's, and its round trip is learnt.
    #[test]
    fn an_answer_too_quick_for_the_resend_is_a_sample_of_the_first_copy() {
        let (c, mut p) = path();
        for _ in 0..8 {
            answered(&mut p, &slot(0, 0, 0), 4 * MS);
        }
        let before = p.rtt.rto(&c);
        // Resent at 30 ms, answered at 31 ms: 1 ms after the resend, under
        // half the quickest round trip (4 ms), so it answers the copy sent
        // at 0, 31 ms before.
        answered(&mut p, &slot(0, 1, 30 * MS), 31 * MS);
        assert!(p.rtt.rto(&c) > before, "{} {before}", p.rtt.rto(&c));
        // Answered 3 ms after the resend: either copy; no sample.
        let (_, mut q) = path();
        for _ in 0..8 {
            answered(&mut q, &slot(0, 0, 0), 4 * MS);
        }
        answered(&mut q, &slot(0, 1, 30 * MS), 33 * MS);
        assert_eq!(q.rtt.rto(&c), before);
        // Two resends: never.
        answered(&mut q, &slot(0, 2, 30 * MS), 30 * MS);
        assert_eq!(q.rtt.rto(&c), before);
        // Sent once, and held while other members recovered: no sample.
        let mut held = slot(0, 0, 0);
        held.queries = 1;
        held.held = 1;
        answered(&mut q, &held, 300 * MS);
        assert_eq!(q.rtt.rto(&c), before);
        // Asked about but never held (a late round behind a queue): a sample.
        let mut asked = slot(0, 0, 0);
        asked.queries = 1;
        answered(&mut q, &asked, 300 * MS);
        assert!(q.rtt.rto(&c) > before);
    }

    /// A second result copy widens the reordering window only when the
    /// first came too soon after the query to have left the switch after it.
    #[test]
    fn a_result_on_its_way_when_asked_is_told_from_one_sent_after() {
        let (_, mut p) = path();
        let mut s = slot(0, 0, 0);
        s.asked = Asked::Out;
        s.asked_at = 10 * MS;
        assert!(!on_its_way(&p, &s, 11 * MS), "no round trip known yet");
        answered(&mut p, &slot(0, 0, 0), 4 * MS);
        assert!(on_its_way(&p, &s, 11 * MS), "1 ms after: on its way");
        assert!(!on_its_way(&p, &s, 12 * MS), "half a round trip after");
        s.asked = Asked::Held;
        assert!(!on_its_way(&p, &s, 11 * MS), "the status came first");
    }

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
        let s = |bitmap| Status {
            bitmap,
            members: 4,
            answered: false,
        };
        assert_eq!(judge(&s(0b1010), 0), Said::Resend, "our bit clear");
        assert_eq!(
            judge(&s(0b1011), 0),
            Said::Held { missing: 0b0100 },
            "held, member 2 missing"
        );
        // Complete and held: the result is away at the tree's parent.
        assert_eq!(judge(&s(0b1111), 0), Said::Held { missing: 0 });
        // Complete, its result sent for an earlier query already: a
        // resend brings it back.
        let answered = Status {
            answered: true,
            ..s(0b1111)
        };
        assert_eq!(judge(&answered, 0), Said::Resend);
    }

    /// A round is gone only when a query sent after the nudge about set
    /// 0's next round finds it held, waiting for members: an answer to an
    /// earlier query may predate the round's completion, and a set
    /// without this worker's contribution, or one that waits for nobody,
    /// is another matter.
    #[test]
    fn a_round_is_gone_when_a_query_after_the_nudge_finds_it_held() {
        let s = |bitmap| Status {
            bitmap,
            members: 4,
            answered: false,
        };
        let mut held = slot(0, 0, 0);
        held.ahead = Some((0x0002_0005, 10 * MS));
        held.asked_at = 10 * MS;
        assert!(gone(&held, &s(0b0001), 0), "held alone, asked since");
        assert!(!gone(&held, &s(0b1110), 0), "its contribution lacking");
        assert!(!gone(&held, &s(0b1111), 0), "complete: waits for no member");
        held.asked_at = 9 * MS;
        assert!(!gone(&held, &s(0b0001), 0), "asked before the nudge");
        let mut no_nudge = slot(0, 0, 0);
        no_nudge.asked_at = 10 * MS;
        assert!(!gone(&no_nudge, &s(0b0001), 0), "no nudge");
    }

    /// A handshake is shut out only of a complete round it is not in: a
    /// round still summing takes it whatever its id, and one that holds it
    /// answers its resend with the result.
    #[test]
    fn a_handshake_is_shut_out_only_of_a_complete_round_without_it() {
        let s = |bitmap| Status {
            bitmap,
            members: 4,
            answered: false,
        };
        assert!(shut_out(&s(0b1110), 4, 0), "complete without worker 0");
        assert!(shut_out(&s(0b0110), 4, 0), "complete, members 0 and 3 left");
        assert!(!shut_out(&s(0b0110), 2, 0), "summing: it gets in");
        assert!(!shut_out(&s(0b1111), 4, 0), "complete with it");
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
