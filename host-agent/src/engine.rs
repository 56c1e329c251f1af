//! The self-clocking window: at most one outstanding packet per slot of the
//! job's pool, the next round of a slot due when its result arrives (into
//! the slot's other shadow set), and per-slot retransmission on timeout.
//! How many slots are in flight at once is the congestion window's
//! ([`crate::path`]): due slots wait in [`Flight`] for room, and leave it
//! in an order every worker shares.
//!
//! A lost packet is found in about a round trip and recovered by asking
//! the switch first ([`crate::recovery`]): a slot suspected lost sends a
//! query, and only the status that comes back decides whether its
//! contribution goes again. The timeout below is the last resort: for a
//! switch that does not answer queries, and for a set that holds this
//! worker's contribution and never completes.
//!
//! Timers cost nothing per packet: sending stores a deadline in the slot's
//! entry, and the loop scans the (small) slot table for expired deadlines
//! and suspected losses once per scan interval, not once per packet. The
//! round-trip estimate
//! (Jacobson/Karels, Karn's rule with the exception in [`answered`], and a
//! backoff for what is sent after a timeout: [`crate::path`]) sets each
//! slot's timeout; a slot that times out again doubles its own timeout, up
//! to the configured maximum.
//!
//! A slot's first round in a worker's session is a handshake
//! ([`crate::session`]): the engine sends it, judges its result and, when
//! the set held an earlier session's state, moves the slot on.
//!
//! What goes into each packet, and what to do with each result, is the
//! [`Codec`]'s business: the same engine runs int32 and float all-reduces.
//! Where packets go is the [`Link`]'s: the same engine runs over kernel
//! sockets and over DPDK.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use inagg_wire::status::{Status, QUERY_NUDGE};
use inagg_wire::{Kind, Packet, Repr, HEADER_LEN};

use crate::link::{Link, SlotBuf};
use crate::path::{nanos, Nanos, Path};
use crate::recovery::{self, Asked, Place, Said};
use crate::session::{Found, SlotSession, Token, HANDSHAKE_WEIGHT};
use crate::stats::Stats;
use crate::{AgentConfig, Error};

/// What a slot's rounds carry. Round `r` of slot `s` is the `r`-th packet the
/// slot sends in this all-reduce.
pub(crate) trait Codec {
    /// How many rounds slot `slot` runs when `window` slots are in use.
    fn rounds(&self, slot: usize, window: usize) -> usize;
    /// Writes round `round`'s payload (all of it, padding included).
    fn encode(&mut self, slot: usize, round: usize, window: usize, payload: &mut [u8]) -> Encoded;
    /// Takes round `round`'s result.
    fn decode(&mut self, slot: usize, round: usize, window: usize, payload: &[u8], exponent: u8);
    /// Whether round `round` carries values. One that does not (a float
    /// all-reduce's exponent round) can be the slot's handshake; before
    /// one that does, the handshake is a round of its own.
    fn carries_values(&self, _slot: usize, _round: usize, _window: usize) -> bool {
        true
    }
    /// The priority class round `round` is tagged with, when the codec's
    /// chunks carry their own (else the worker's).
    fn class(&self, _slot: usize, _round: usize, _window: usize) -> Option<u8> {
        None
    }
}

/// What [`Codec::encode`] wrote.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Encoded {
    /// The exponent to send.
    pub exponent: u8,
    /// The payload's [`inagg_wire::frame::ones_sum_native`] sum, taken
    /// while writing it: a raw-Ethernet link's UDP checksum then never
    /// reads the payload back.
    pub sum: u64,
}

/// What a received datagram means to the window.
enum Verdict<'d> {
    /// The result slot `slot` waits for.
    Current {
        slot: usize,
        payload: &'d [u8],
        exponent: u8,
    },
    /// The result of the slot's handshake, with this worker's token in it:
    /// the slot has joined the session.
    Joined {
        slot: usize,
        payload: &'d [u8],
        exponent: u8,
        packet_id: u32,
    },
    /// A result that sends the slot to a handshake in the other set: one
    /// for its handshake that is not its own (an earlier session's state),
    /// or its first data round spoiled by another worker's handshake.
    /// `own_weight`: the result held this worker's own token but weighed
    /// other than 2n (kept to explain a timeout: a wrong worker count).
    MoveOn {
        slot: usize,
        packet_id: u32,
        own_weight: Option<u16>,
    },
    /// The switch's answer to this slot's query.
    Status { slot: usize, status: Status },
    /// The status of another member's query about this slot's round (its
    /// worker field names the asker): the switch sends it to the members
    /// the round waits for.
    Nudge { slot: usize, status: Status },
    /// A second copy of the result of a round the slot asked about: the
    /// result had not been lost.
    Spurious { slot: usize },
    /// Anything else.
    Ignore,
}

/// Per-slot progress.
#[derive(Debug)]
struct Slot<B> {
    round: usize,
    rounds: usize,
    packet_id: u32,
    set: u8,
    /// Times in nanoseconds since the all-reduce started ([`Nanos`]):
    /// `Instant` arithmetic normalises seconds and nanoseconds on every
    /// add and subtract, which showed in profiles of the per-packet path.
    sent_at: Nanos,
    deadline: Nanos,
    rto: Nanos,
    /// Copies of the current round sent after the first.
    resends: u32,
    /// Moves to a new handshake within a timeout of the one before, in a
    /// row, and when the last was ([`Slot::quick_moves`]).
    moves: (u32, Nanos),
    /// When the last of them was sent.
    resent_at: Nanos,
    /// Sent and not yet answered (a slot between rounds waits in
    /// [`Flight`] for room in the window).
    in_flight: bool,
    /// The packet in flight's place in the shared order ([`Flight`]).
    place: Place,
    /// Between a handshake and the first data round after it, the codec
    /// round to go back to should that data round be spoiled.
    rollback: Option<usize>,
    /// What the switch was asked about the round in flight, and said.
    asked: Asked,
    /// The members the switch last said the round waits for (bitmap; 0
    /// when it has not said), kept past resends for a give-up message.
    waits_for: u64,
    /// Queries sent for the round in flight (each waits twice as long).
    queries: u32,
    /// Statuses that said the switch holds the round in flight's
    /// contribution ([`HELD_ANSWERS`]).
    held: u32,
    /// The packet in flight, kept for retransmission.
    packet: B,
    /// The slot's query, made when it first asks.
    query: Option<B>,
    /// When the last query went out.
    asked_at: Nanos,
    /// When the packet in flight (its first copy or its latest resend)
    /// left in a send call. [`Slot::last_sent`] is stamped when the slot is
    /// queued, at the start of a batch's processing; the send comes after
    /// the rest of the batch, and a worker descheduled in between (eight
    /// workers on one core) sends a scheduling quantum later than stamped.
    left_at: Nanos,
    /// The packet id of the slot's last round when its result came while
    /// a query was out and was already on its way when asked
    /// ([`on_its_way`]): a second copy of it means the query was not
    /// needed ([`crate::recovery::Rack::on_spurious`]).
    answered_asking: Option<u32>,
}

/// Moves on from a slot's handshake that a result answers at once, in a
/// row, before the next waits for the slot's timer. A result that moves a
/// slot on is answered by a new handshake at once, which is what lets
/// sessions start in a round trip; but results that keep coming (a forger,
/// a peer out of step, a bug) would make every one of them a packet, as
/// fast as they arrive. Past this many moves within a timeout of each
/// other, the handshake waits for its timer: a slot that cannot make
/// progress costs a packet per timeout, not a storm.
const QUICK_MOVES: u32 = 4;

/// The shortest scan interval.
const SCAN_FLOOR: Nanos = 200_000;
/// The shortest reordering window: scheduling noise on a busy host.
const REORDER_FLOOR: Nanos = 250_000;
/// The shortest wait before a slot with nothing sent after it is probed.
const PROBE_FLOOR: Nanos = 1_000_000;
/// Queries about one round that may go unanswered before its contribution
/// is sent again at its timeout, at a switch that has not answered a query
/// yet (the P4 programs do not). At one that has, an unanswered query is a
/// lost query or status, and is asked again.
const QUERY_TRIES: u32 = 4;
/// Queries answered "held" about one round before its contribution is
/// sent again anyway (each waits twice as long as the one before, up to
/// the timeout), no sooner than [`Engine::stop_asking`] allows. Answers,
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
/// against 2.70 Gbit/s). With hundreds, only the first query of the member
/// whose turn it is asks for them ([`TURN_WAIT`]): every member's queries
/// asking, the copies (to members only behind, mostly) cost the switch
/// and the workers more than they saved (K = 64, 512 slots, 4 workers at
/// 5%: 0.097 against 0.108 Gbit/s).
const NUDGE_WINDOW: usize = 32;
/// With more than [`NUDGE_WINDOW`] slots in flight, the members of a job
/// take turns to speak for a round ([`Engine::speaks_for`]): the one whose
/// turn it is asks as soon as it suspects the round, and asks for nudges;
/// the others wait this many smoothed round trips more. Every member of a
/// round stalled by one lost contribution sees the same evidence at about
/// the same moment, and n queries where the speaker's suffices (the
/// nudged member resends, [`on_nudge`]) cost the switch n - 1 queries
/// and statuses more: at K = 64, 8 workers and 5% loss, 3.7 queries per datum lost, half the packets a
/// data round costs. Waiting costs a member whose own result copy was lost
/// two round trips more, which hundreds of slots in flight cover (8
/// workers at 5%: 0.76 against 0.72 of lossless, 2.4 queries per datum
/// lost). Three round trips instead: fewer queries, goodput within the
/// spread (K = 64, 4M floats, 10 seeds).
const TURN_WAIT: u64 = 2;

/// What a nudge makes a worker do ([`on_nudge`]).
enum Nudged {
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
/// nudges, and the worker asks at once rather than at its own
/// suspicion, a round trip or more later; it resends only on its own
/// answer: the other member asked when it did, and this worker's copy
/// may have arrived since (resending on the nudge itself sent spurious
/// copies when a 64 KB contribution was merely behind a queue: 8
/// workers, lossless, about 4 per run).
///
/// With many, a nudge comes only from the speaker's first query
/// ([`TURN_WAIT`]), asked once later rounds have completed without this
/// one, and the worker resends (once the path is drained,
/// [`Engine::resend_nudged`]) if its packet left at least a smoothed
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
fn on_nudge<B>(
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
    Some(if !few && long_gone && later_answered {
        Nudged::Resend
    } else {
        Nudged::Ask
    })
}

/// A resend a nudge asked for, waiting for the path to drain
/// ([`Engine::resend_nudged`]): the slot, and its round's packet id and
/// resends when the nudge came.
struct Pending {
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

impl<B> Slot<B> {
    /// When the packet in flight last went out (its first copy, or its
    /// latest resend).
    fn last_sent(&self) -> Nanos {
        if self.resends > 0 {
            self.resent_at
        } else {
            self.sent_at
        }
    }

    /// Counts a move on at `now`: the moves in a row, each within the
    /// slot's timeout of the one before.
    fn quick_moves(&mut self, now: Nanos) -> u32 {
        let (n, last) = self.moves;
        let n = if now.saturating_sub(last) <= self.rto {
            n + 1
        } else {
            1
        };
        self.moves = (n, now);
        n
    }
}

/// Everything one all-reduce needs from its worker.
pub(crate) struct Engine<'a, L: Link> {
    pub config: &'a AgentConfig,
    pub link: &'a mut L,
    /// Per-slot round counters and handshake state that persist across
    /// all-reduces, so that a slot keeps alternating shadow sets, packet ids
    /// stay fresh and a slot shakes hands once per session.
    pub sessions: &'a mut [SlotSession],
    /// This worker's session token.
    pub token: Token,
    /// The round-trip estimate and the congestion window.
    pub path: &'a mut Path,
    pub switch: SocketAddr,
    /// Incremented once per result received, for progress displays.
    pub progress: Option<&'a AtomicU64>,
    /// Where the counts are published at every scan, when someone reads them.
    pub live: Option<&'a crate::stats::Live>,
    /// (this lane, lanes): a multi-queue worker runs one engine per lane,
    /// each with the slots `s` where `s % lanes == lane`; 1 lane has them all.
    pub lane: (usize, usize),
}

impl<L: Link> Engine<'_, L> {
    /// Runs `chunks` chunks through the pool with `codec`; returns statistics.
    pub fn run<C: Codec>(
        &mut self,
        codec: &mut C,
        chunks: usize,
        payload_bytes: u64,
    ) -> Result<Stats, Error> {
        let start = Instant::now();
        let window = chunks.min(self.config.pool_size as usize);
        let mut slots = self.start_slots(codec, window)?;
        let result = self.run_slots(codec, &mut slots, window, start, payload_bytes);
        // Kept for the next call: fresh buffers cost page faults (a window
        // of 64 KiB packets is megabytes) or mbuf allocations.
        *self.link.spare() = slots.into_iter().map(|s| s.packet).collect();
        result
    }

    fn run_slots<C: Codec>(
        &mut self,
        codec: &mut C,
        slots: &mut [Slot<L::Buf>],
        window: usize,
        start: Instant,
        payload_bytes: u64,
    ) -> Result<Stats, Error> {
        let mut stats = Stats {
            payload_bytes,
            ..Stats::default()
        };
        self.path.restart_clock();
        // Slots whose packet is due: sent from the slots' own buffers (kept
        // for retransmission), so nothing is copied on the way out.
        let mut tx: Vec<usize> = Vec::with_capacity(window);
        // Slots whose query is due.
        let mut queries: Vec<usize> = Vec::new();
        // Slots a nudge would have resent, once the path is drained.
        let mut nudged: Vec<Pending> = Vec::new();
        let mut flight = Flight::new(slots);
        self.release(codec, slots, &mut flight, window, 0, &mut tx, &mut stats)?;
        let mut active = slots.iter().filter(|s| s.rounds > 0).count();
        let mut next_scan = self.scan_interval();
        let mut last_progress = 0;
        // Port unreachables seen so far, and when the count last grew: a
        // switch that stops refusing came back (docs/PROTOCOL.md,
        // "Retransmission").
        let mut refusals: (u64, Nanos) = (self.link.refusals(), 0);
        let mut bad_weight = None;
        let clock = || nanos(start.elapsed());
        while active > 0 {
            self.flush(slots, &mut tx, &mut stats, clock)?;
            self.flush_queries(slots, &mut queries, &mut stats)?;
            let wait = Duration::from_nanos(next_scan.saturating_sub(clock()));
            let n = self.link.recv(wait)?;
            let now = clock();
            for i in 0..n {
                let data = self.link.received(i);
                stats.packets_received += 1;
                stats.bytes_received += data.len() as u64;
                // `joined`: the result is a handshake's that was also the
                // codec's round (it moved the slot's epoch already).
                let (s, payload, exponent, joined) =
                    match self.accept(data, window, slots, &mut stats) {
                        Verdict::Current {
                            slot,
                            payload,
                            exponent,
                        } => (slot, payload, exponent, false),
                        Verdict::Ignore => continue,
                        Verdict::Spurious { slot } => {
                            slots[slot].answered_asking = None;
                            self.path.rack.on_spurious();
                            continue;
                        }
                        Verdict::Nudge { slot, status } => {
                            stats.nudges += 1;
                            let few = self.few_in_flight(slots.len());
                            let lacks_mine =
                                recovery::judge(&status, self.config.worker) == Said::Resend;
                            let entry = &mut slots[slot];
                            let srtt = self.path.rtt.srtt();
                            let later = self.path.rack.answered_after(entry.last_sent());
                            match on_nudge(entry, lacks_mine, srtt, later, now, few) {
                                // At most one per slot: bounded by the pool.
                                Some(Nudged::Resend)
                                    if !nudged.iter().any(|n: &Pending| n.slot == slot) =>
                                {
                                    nudged.push(Pending::of(entry, slot))
                                }
                                Some(Nudged::Ask) => {
                                    self.ask(entry, slot, now, &mut queries, &mut stats)
                                }
                                Some(Nudged::Resend) | None => {}
                            }
                            continue;
                        }
                        Verdict::Status { slot, status } => {
                            stats.statuses += 1;
                            self.path.switch_answers = true;
                            if slots[slot].asked == Asked::Not {
                                // An answer to a query before a resend
                                // that has been acted on already.
                                stats.stale_results += 1;
                                continue;
                            }
                            let said = recovery::judge(&status, self.config.worker);
                            self.heed(&mut slots[slot], slot, said, now, &mut tx, &mut stats);
                            continue;
                        }
                        Verdict::Joined {
                            slot,
                            payload,
                            exponent,
                            packet_id,
                        } => {
                            stats.handshakes += 1;
                            bad_weight = None;
                            let session = &mut self.sessions[slot];
                            session.move_past(packet_id, slots[slot].set);
                            session.joined = true;
                            let entry = &mut slots[slot];
                            entry.rollback = Some(entry.round);
                            if codec.carries_values(slot, entry.round, window) {
                                // A round of its own: the first data round is
                                // next, in its turn like any round. (Sent at
                                // once, it went before slots that other
                                // workers sent first: their rounds then waited
                                // on this worker's, and read as lost.)
                                answered(self.path, entry, now);
                                last_progress = now;
                                flight.land(entry, slot);
                                continue;
                            }
                            // The handshake was the codec's round (a float
                            // all-reduce's exponent round): taken as that below.
                            (slot, payload, exponent, true)
                        }
                        Verdict::MoveOn {
                            slot,
                            packet_id,
                            own_weight,
                        } => {
                            bad_weight = own_weight.or(bad_weight);
                            stats.handshake_retries += 1;
                            let session = &mut self.sessions[slot];
                            session.move_past(packet_id, slots[slot].set);
                            session.joined = false;
                            session.attempt = session.attempt.wrapping_add(1);
                            let entry = &mut slots[slot];
                            if let Some(round) = entry.rollback.take() {
                                entry.round = round;
                            }
                            self.send(codec, entry, slot, window, now, &mut tx, &mut stats)?;
                            if entry.quick_moves(now) > QUICK_MOVES {
                                // Sent by its timer instead: see QUICK_MOVES.
                                tx.pop();
                                stats.packets_sent -= 1;
                                stats.bytes_sent -= entry.packet.wire_len() as u64;
                            }
                            continue;
                        }
                    };
                let entry = &mut slots[s];
                answered(self.path, entry, now);
                entry.answered_asking =
                    on_its_way(self.path, entry, now).then_some(entry.packet_id);
                codec.decode(s, entry.round, window, payload, exponent);
                if !joined {
                    let session = &mut self.sessions[s];
                    session.epoch = session.epoch.wrapping_add(1);
                    entry.rollback = None;
                }
                entry.round += 1;
                last_progress = now;
                if let Some(p) = self.progress {
                    p.fetch_add(1, Ordering::Relaxed);
                }
                flight.land(entry, s);
                if entry.round >= entry.rounds {
                    active -= 1;
                }
            }
            if n < self.link.batch() {
                self.resend_nudged(slots, &mut nudged, now, &mut tx, &mut stats);
            }
            self.release(codec, slots, &mut flight, window, now, &mut tx, &mut stats)?;
            // Scan only once the path is drained: results already queued
            // in it (a worker descheduled for a while) are not losses.
            if n < self.link.batch() && now >= next_scan {
                let refused = self.link.refusals();
                if refused > refusals.0 {
                    refusals = (refused, now);
                }
                let waited = Duration::from_nanos(now - last_progress);
                if waited > self.config.give_up_after {
                    return Err(self.give_up(slots, waited, refusals, now, bad_weight, &stats));
                }
                if let Some(live) = self.live {
                    stats.elapsed = start.elapsed();
                    live.update(self.lane.0, self.lane.1, &stats);
                }
                let before = stats.retransmissions;
                self.recover(slots, now, &mut tx, &mut queries, &mut stats);
                if stats.retransmissions > before {
                    tracing::debug!(
                        job = self.config.job,
                        resent = stats.retransmissions - before,
                        total = stats.retransmissions,
                        window = self.path.window.limit(),
                        "slots timed out; retransmitted"
                    );
                }
                next_scan = now + self.scan_interval();
            }
        }
        self.flush(slots, &mut tx, &mut stats, clock)?;
        self.flush_queries(slots, &mut queries, &mut stats)?;
        stats.elapsed = start.elapsed();
        stats.window = self.path.window.limit() as u64;
        Ok(stats)
    }

    /// The error of a worker that made no progress for `give_up_after`:
    /// what it saw, for the operator (lib.rs, `Error::Timeout`): the slot
    /// it waited on (one the switch said waits on other members, if any,
    /// and those members), whether the switch refused or answered.
    fn give_up(
        &self,
        slots: &[Slot<L::Buf>],
        waited: Duration,
        refusals: (u64, Nanos),
        now: Nanos,
        bad_weight: Option<u16>,
        stats: &Stats,
    ) -> Error {
        let stuck = slots
            .iter()
            .position(|s| s.waits_for != 0)
            .or_else(|| slots.iter().position(|s| s.round < s.rounds))
            .unwrap_or(0);
        tracing::warn!(
            job = self.config.job,
            slot = stuck,
            "no progress; giving up"
        );
        Error::Timeout {
            switch: self.switch,
            job: self.config.job,
            slot: stuck,
            waited,
            retransmissions: stats.retransmissions,
            refusals: refusals.0,
            refused_last: Duration::from_nanos(now - refusals.1),
            handshake_weight: bad_weight.map(|w| (w, 2 * u32::from(self.config.workers))),
            missing: slots[stuck].waits_for,
            queries: (
                u32::try_from(stats.queries).unwrap_or(u32::MAX),
                u32::try_from(stats.statuses).unwrap_or(u32::MAX),
            ),
        }
    }

    /// Sends ready slots, first in the shared order, while the window has room.
    ///
    /// A slot in recovery counts in the window unless the pool has spare
    /// slots ([`crate::AgentConfig::spare_slots`]): up to that many rounds
    /// being recovered each let another slot in. A round that lost a
    /// packet waits for a query's and a resend's round trips, not for the
    /// switch's pace, and held its share of the window for them (with 8
    /// slots at K = 16370, a few percent of the goodput at 1% loss and
    /// more at 5%: docs/PERFORMANCE.md, "Goodput under loss").
    /// Left out of the window without a bound (RFC 6675's pipe), slots in
    /// recovery let more slots in behind them than a switch on 2 cores
    /// kept up with; its queue grew, the round trips with it, and the
    /// rounds that waited on a late worker were queried as lost: a
    /// lossless run at K = 64 went from 0.064 to 0.038 Gbit/s.
    #[allow(clippy::too_many_arguments)]
    fn release<C: Codec>(
        &self,
        codec: &mut C,
        slots: &mut [Slot<L::Buf>],
        flight: &mut Flight,
        window: usize,
        now: Nanos,
        tx: &mut Vec<usize>,
        stats: &mut Stats,
    ) -> Result<(), Error> {
        let window_limit = self.path.window.limit();
        let limit = window_limit + spares_in_use(slots, self.config.spare_slots);
        while let Some((packets, s)) = flight.take(limit) {
            if (window_limit..limit).contains(&(flight.flying.len() - 1)) {
                stats.spare_sends += 1;
            }
            slots[s].in_flight = true;
            slots[s].place = (packets, s);
            self.send(codec, &mut slots[s], s, window, now, tx, stats)?;
        }
        Ok(())
    }

    fn start_slots<C: Codec>(
        &mut self,
        codec: &C,
        window: usize,
    ) -> Result<Vec<Slot<L::Buf>>, Error> {
        let len = HEADER_LEN + usize::from(self.config.elements) * 4;
        let mut kept = std::mem::take(self.link.spare()).into_iter();
        let mut slots = Vec::with_capacity(window);
        let (lane, lanes) = self.lane;
        for s in 0..window {
            let packet = match kept.next() {
                Some(p) => p,
                None => self.link.new_buf(len)?,
            };
            slots.push(Slot {
                round: 0,
                rounds: if s % lanes == lane {
                    codec.rounds(s, window)
                } else {
                    0
                },
                packet_id: 0,
                set: 0,
                sent_at: 0,
                deadline: 0,
                rto: self.path.rtt.rto(self.config),
                resends: 0,
                resent_at: 0,
                moves: (0, 0),
                in_flight: false,
                place: (0, s),
                rollback: None,
                asked: Asked::Not,
                waits_for: 0,
                queries: 0,
                held: 0,
                packet,
                query: None,
                answered_asking: None,
                asked_at: 0,
                left_at: 0,
            });
        }
        Ok(slots)
    }

    /// Builds the slot's current round and queues it.
    #[allow(clippy::too_many_arguments)]
    fn send<C: Codec>(
        &self,
        codec: &mut C,
        slot: &mut Slot<L::Buf>,
        s: usize,
        window: usize,
        now: Nanos,
        tx: &mut Vec<usize>,
        stats: &mut Stats,
    ) -> Result<(), Error> {
        let session = self.sessions[s];
        slot.set = (session.epoch & 1) as u8;
        // Unique per (epoch, slot) for 65536 epochs: a late result from an
        // earlier round of the slot cannot be mistaken for the current one.
        slot.packet_id = session.epoch.wrapping_shl(16) | s as u32;
        let (head, payload) = slot.packet.datagram_mut()?.split_at_mut(HEADER_LEN);
        let encoded = if session.joined {
            codec.encode(s, slot.round, window, payload)
        } else {
            self.encode_handshake(codec, s, slot.round, window, payload, session.attempt)
        };
        let priority = codec
            .class(s, slot.round, window)
            .unwrap_or(self.config.priority);
        let header_sum = Repr {
            kind: Kind::Contribution,
            set: slot.set,
            priority,
            job: self.config.job,
            slot: s as u16,
            worker: self.config.worker,
            generation: self.config.generation,
            exponent: encoded.exponent,
            count: if session.joined { 0 } else { HANDSHAKE_WEIGHT },
            elements: self.config.elements,
            packet_id: slot.packet_id,
        }
        .emit_summed(head);
        slot.packet.seal(header_sum + encoded.sum);
        slot.sent_at = now;
        slot.rto = self.path.rtt.rto(self.config);
        slot.deadline = now + slot.rto;
        slot.resends = 0;
        slot.asked = Asked::Not;
        slot.waits_for = 0;
        slot.queries = 0;
        slot.held = 0;
        tx.push(s);
        stats.packets_sent += 1;
        stats.bytes_sent += slot.packet.wire_len() as u64;
        Ok(())
    }

    /// Writes a handshake's payload: this worker's token, in round `round`
    /// when that round carries no values (with the round's exponent), else
    /// in zeros (exponent 0).
    fn encode_handshake<C: Codec>(
        &self,
        codec: &mut C,
        s: usize,
        round: usize,
        window: usize,
        payload: &mut [u8],
        attempt: u32,
    ) -> Encoded {
        let exponent = if codec.carries_values(s, round, window) {
            payload.fill(0);
            0
        } else {
            codec.encode(s, round, window, payload).exponent
        };
        self.token.write(payload, attempt);
        Encoded {
            exponent,
            sum: inagg_wire::frame::ones_sum_native(payload),
        }
    }

    /// Classifies a datagram: the result a slot is waiting for, its
    /// handshake's, one that moves it on to the other set, or something to
    /// count and ignore (malformed, another job or generation, a stale or
    /// duplicate result).
    fn accept<'d>(
        &self,
        data: &'d [u8],
        window: usize,
        slots: &[Slot<L::Buf>],
        stats: &mut Stats,
    ) -> Verdict<'d> {
        let Ok(repr) = Packet::new_checked(data).and_then(|p| Repr::parse(&p)) else {
            stats.malformed += 1;
            return Verdict::Ignore;
        };
        if !matches!(repr.kind, Kind::Result | Kind::Status)
            || repr.job != self.config.job
            || repr.elements != self.config.elements
            || repr.generation != self.config.generation
        {
            stats.foreign += 1;
            return Verdict::Ignore;
        }
        let s = usize::from(repr.slot);
        let waiting = s < window
            && slots[s].in_flight
            && slots[s].round < slots[s].rounds
            && repr.set == slots[s].set;
        if !waiting {
            stats.stale_results += 1;
            if s < window
                && repr.kind == Kind::Result
                && slots[s].answered_asking == Some(repr.packet_id)
            {
                return Verdict::Spurious { slot: s };
            }
            return Verdict::Ignore;
        }
        let payload = &data[HEADER_LEN..];
        if repr.kind == Kind::Status {
            // The answer to this round's query: it echoes the round's id.
            return match Status::parse(payload) {
                Ok(status) if repr.packet_id == slots[s].packet_id => {
                    if repr.worker == self.config.worker {
                        Verdict::Status { slot: s, status }
                    } else {
                        Verdict::Nudge { slot: s, status }
                    }
                }
                Ok(_) => {
                    stats.stale_results += 1;
                    Verdict::Ignore
                }
                Err(_) => {
                    stats.malformed += 1;
                    Verdict::Ignore
                }
            };
        }
        let (n, count) = (u32::from(self.config.workers), u32::from(repr.count));
        let session = self.sessions[s];
        if !session.joined {
            return match self.token.find(payload, session.attempt) {
                Found::Current if count == 2 * n => Verdict::Joined {
                    slot: s,
                    payload,
                    exponent: repr.exponent,
                    packet_id: repr.packet_id,
                },
                Found::Earlier => {
                    stats.stale_results += 1;
                    Verdict::Ignore
                }
                found => Verdict::MoveOn {
                    slot: s,
                    packet_id: repr.packet_id,
                    own_weight: (found == Found::Current).then_some(repr.count),
                },
            };
        }
        if repr.packet_id == slots[s].packet_id && count == n {
            return Verdict::Current {
                slot: s,
                payload,
                exponent: repr.exponent,
            };
        }
        // Handshakes in the slot's first data round (each weighs 2): a
        // worker whose own handshake failed has come to this set, and every
        // worker in it sees the same result. Its packet id may be that
        // worker's (whose count of rounds is its own until it joins).
        if count > n && count < 2 * n && slots[s].rollback.is_some() {
            return Verdict::MoveOn {
                slot: s,
                packet_id: repr.packet_id,
                own_weight: None,
            };
        }
        stats.stale_results += 1;
        Verdict::Ignore
    }

    /// How often the slot table is scanned for expired deadlines and
    /// suspected losses: a quarter of the recent round trip, so that a
    /// loss is found within about a round trip, between 200 µs and a
    /// quarter of the minimum timeout.
    fn scan_interval(&self) -> Nanos {
        let ceiling = nanos(self.config.min_rto / 4).max(SCAN_FLOOR);
        self.path
            .rtt
            .recent_min()
            .map_or(ceiling, |rtt| (rtt / 4).clamp(SCAN_FLOOR, ceiling))
    }

    /// Loss recovery at a scan ([`crate::recovery`]): a slot suspected lost
    /// (a later-sent one was answered, the tail has waited two recent
    /// round trips, or its timeout passed) queries the switch; a slot whose
    /// query went unanswered, or that the switch holds, asks again at its
    /// deadline, and resends at its timeout once it has asked enough.
    ///
    /// Resends behind a queue are at most a window per scan (the rest at
    /// the next): recovery must not itself flood a switch that cannot keep
    /// up. The first timeout of a flight behind a queue halves the window.
    fn recover(
        &mut self,
        slots: &mut [Slot<L::Buf>],
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
        // successors bring when they are answered ([`recovery::Rack`]).
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
        let turn_wait = if self.few_in_flight(slots.len()) {
            0
        } else {
            self.path.rtt.srtt().unwrap_or(0).saturating_mul(TURN_WAIT)
        };
        for (s, slot) in slots.iter_mut().enumerate().filter(|(_, s)| s.in_flight) {
            match slot.asked {
                Asked::Not => {
                    let sent = slot.last_sent();
                    let probe = tail == Some(s) && now >= sent + self.probe_after(slot.queries);
                    let wait = if slot.queries == 0 && !self.speaks_for(slot.place) {
                        turn_wait
                    } else {
                        0
                    };
                    if now >= slot.deadline
                        || probe
                        || self.path.rack.lost(slot.place, sent, now, reorder + wait)
                    {
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
    fn few_in_flight(&self, pool: usize) -> bool {
        pool.min(self.path.window.limit()) <= NUDGE_WINDOW
    }

    /// Whether it is this worker's turn to speak for the round at `place`
    /// ([`TURN_WAIT`], [`recovery::speaker`]).
    fn speaks_for(&self, place: Place) -> bool {
        recovery::speaker(place, self.config.workers) == self.config.rank
    }

    /// How long a slot waits before it asks (again): about two of the
    /// path's recent round trips, twice as long for each of `queries`
    /// already answered about its round ([`recovery::probe_after`]).
    fn probe_after(&self, queries: u32) -> Nanos {
        let rto = self.path.rtt.rto(self.config);
        // The timeout caps it, and is itself at most max_rto.
        recovery::probe_after(self.path.rtt.recent_min(), PROBE_FLOOR, rto, queries)
    }

    /// Slot `s` has asked enough: its contribution goes again at its
    /// timeout (not before: on a path with a queue the answers wait in it),
    /// at most `budget` more per scan.
    fn stop_asking(
        &mut self,
        slot: &mut Slot<L::Buf>,
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
    fn backoff(&self, slot: &Slot<L::Buf>) -> u32 {
        if self.path.window.queued() {
            slot.queries
        } else {
            0
        }
    }

    /// Queues slot `s`'s query; the slot waits for the answer about two
    /// recent round trips ([`Engine::backoff`]).
    fn ask(
        &mut self,
        slot: &mut Slot<L::Buf>,
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
    fn resend_nudged(
        &mut self,
        slots: &mut [Slot<L::Buf>],
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
    fn time_out(
        &mut self,
        slot: &mut Slot<L::Buf>,
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
    fn heed(
        &mut self,
        slot: &mut Slot<L::Buf>,
        s: usize,
        said: Said,
        now: Nanos,
        tx: &mut Vec<usize>,
        stats: &mut Stats,
    ) {
        match said {
            Said::Held { missing } => {
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
    fn resend(
        &mut self,
        slot: &mut Slot<L::Buf>,
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

    /// Sends the queued queries, each from its slot's own small buffer.
    fn flush_queries(
        &mut self,
        slots: &mut [Slot<L::Buf>],
        queries: &mut Vec<usize>,
        stats: &mut Stats,
    ) -> Result<(), Error> {
        if queries.is_empty() {
            return Ok(());
        }
        let few = self.few_in_flight(slots.len());
        for &s in queries.iter() {
            let slot = &mut slots[s];
            // The member whose turn it is asks for nudges with its first
            // query about the round: it speaks for every member.
            let count = if few || (slot.queries == 1 && self.speaks_for(slot.place)) {
                QUERY_NUDGE
            } else {
                0
            };
            let buf = match &mut slot.query {
                Some(b) => b,
                None => slot.query.insert(self.link.new_buf(HEADER_LEN)?),
            };
            let head = buf.datagram_mut()?;
            let sum = Repr {
                kind: Kind::Query,
                set: slot.set,
                priority: self.config.priority,
                job: self.config.job,
                slot: s as u16,
                worker: self.config.worker,
                generation: self.config.generation,
                exponent: 0,
                count,
                elements: self.config.elements,
                packet_id: slot.packet_id,
            }
            .emit_summed(head);
            buf.seal(sum);
            stats.packets_sent += 1;
            stats.bytes_sent += buf.wire_len() as u64;
        }
        stats.send_errors += self.link.send(
            queries
                .iter()
                .map(|&s| slots[s].query.as_ref().expect("made above")),
        )?;
        queries.clear();
        Ok(())
    }

    /// Sends the queued packets, and stamps when they left
    /// ([`Slot::left_at`]) by `clock`.
    fn flush(
        &mut self,
        slots: &mut [Slot<L::Buf>],
        tx: &mut Vec<usize>,
        stats: &mut Stats,
        clock: impl Fn() -> Nanos,
    ) -> Result<(), Error> {
        if tx.is_empty() {
            return Ok(());
        }
        // A refused packet (no switch listening yet, a full queue) is
        // recovered by the retransmission timer like any loss.
        stats.send_errors += self.link.send(tx.iter().map(|&s| &slots[s].packet))?;
        let left = clock();
        for &s in tx.iter() {
            slots[s].left_at = left;
        }
        tx.clear();
        Ok(())
    }
}

/// Whether the result arriving at `now` for `slot`, whose query is out,
/// was already on its way when the query was sent: it came within half the
/// quickest round trip of the query. A second copy of it then shows that
/// the query was needless, the round merely late, and the reordering
/// window widens ([`recovery::Rack::on_spurious`]). A result that came
/// later left the switch after the query did: the round completed in the
/// meantime, usually on another member's resend (a contribution was lost,
/// and the suspicion was right), and the switch answers the query with a
/// second copy that says nothing of reordering. Counting those as
/// spurious kept the window at its widest at 1% loss: at K = 64, 1,389
/// widenings for 2,723 lost contributions; 50 when judged by time.
fn on_its_way<B>(path: &Path, slot: &Slot<B>, now: Nanos) -> bool {
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
/// Every answer is loss evidence ([`crate::recovery::Rack`]) for the slots
/// sent before it and before it in the shared order.
fn answered<B>(path: &mut Path, entry: &Slot<B>, now: Nanos) {
    path.rack
        .on_answer(entry.place, entry.last_sent(), entry.resends > 0, now);
    let first_copy = match entry.resends {
        // The switch said it held this worker's contribution and waited
        // for other members: the round trip measures their recovery, not
        // the path. (A round merely asked about still counts: on a switch
        // with a queue, bmv2, the late rounds that are asked about are the
        // queue's evidence, and without them the timeout and the window
        // missed it: 4 workers took 20-24 s with hundreds of timeouts
        // where they took 9 s.)
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
        path.rtt.sample(rtt);
        path.window.on_result(rtt);
    }
}

/// How many of the pool's `spare` slots the rounds in recovery (asked
/// about or resent) open to the window now: one each, up to `spare`.
fn spares_in_use<B>(slots: &[Slot<B>], spare: u32) -> usize {
    if spare == 0 {
        return 0;
    }
    let recovering = slots
        .iter()
        .filter(|s| s.in_flight && (s.queries > 0 || s.resends > 0))
        .count();
    recovering.min(spare as usize)
}

/// Which slots are in flight, and which wait for room in the window, in
/// the order every worker of a job shares: by the slot's packet count (its
/// rounds, and its session handshake where that is a round of its own),
/// then by slot.
///
/// The window alone could deadlock a job: worker A waits, window full, on
/// a slot that worker B has ready but cannot send because B's window is
/// full of slots that A has ready behind it (B got their earlier results
/// first, its results for A's slot were lost). So a ready slot that comes
/// before some slot already in flight is sent whatever the window says.
/// Then the lowest `(packet, slot)` some worker has not finished is sent by
/// every worker that has not: either it holds a later one in flight, or
/// nothing at all (everything earlier is finished), and then the window
/// has room. The excess is bounded by the pool.
struct Flight {
    ready: BinaryHeap<Reverse<Place>>,
    /// The place of each slot in flight.
    flying: BTreeSet<Place>,
    /// Each slot's packets answered so far in this all-reduce: its next
    /// packet's place in the order.
    packets: Vec<usize>,
}

impl Flight {
    /// Every slot with rounds to run, ready for its first.
    fn new<B>(slots: &[Slot<B>]) -> Self {
        Flight {
            ready: slots
                .iter()
                .enumerate()
                .filter(|(_, slot)| slot.rounds > 0)
                .map(|(s, _)| Reverse((0, s)))
                .collect(),
            flying: BTreeSet::new(),
            packets: vec![0; slots.len()],
        }
    }

    /// Slot `s`'s packet was answered: it leaves the flight, and waits for
    /// its next packet's turn if it has one.
    fn land<B>(&mut self, slot: &mut Slot<B>, s: usize) {
        slot.in_flight = false;
        self.flying.remove(&(self.packets[s], s));
        self.packets[s] += 1;
        if slot.round < slot.rounds {
            self.ready.push(Reverse((self.packets[s], s)));
        }
    }

    /// The next slot to send: when fewer than `limit` are in flight, or
    /// when it comes before one that is.
    fn take(&mut self, limit: usize) -> Option<Place> {
        let Reverse(next) = *self.ready.peek()?;
        let room = self.flying.len() < limit;
        if !room && self.flying.last().is_none_or(|last| next > *last) {
            return None;
        }
        self.ready.pop();
        self.flying.insert(next);
        Some(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::path::Path;
    use crate::{AgentConfig, Window};

    const MS: Nanos = 1_000_000;

    fn slot(sent_at: Nanos, resends: u32, resent_at: Nanos) -> Slot<()> {
        Slot {
            round: 0,
            rounds: 1,
            packet_id: 0,
            set: 0,
            sent_at,
            deadline: 0,
            rto: 0,
            resends,
            resent_at,
            moves: (0, 0),
            in_flight: true,
            place: (0, 0),
            rollback: None,
            asked: Asked::Not,
            waits_for: 0,
            queries: 0,
            held: 0,
            packet: (),
            query: None,
            answered_asking: None,
            asked_at: 0,
            left_at: sent_at.max(resent_at),
        }
    }

    /// `n` slots of two rounds each, none in flight.
    fn idle(n: usize) -> Vec<Slot<()>> {
        (0..n)
            .map(|_| Slot {
                rounds: 2,
                in_flight: false,
                ..slot(0, 0, 0)
            })
            .collect()
    }

    #[test]
    fn the_flight_keeps_the_shared_order_by_packet_count() {
        let mut slots = idle(3);
        let mut f = Flight::new(&slots);
        // A window of 2: slots 0 and 1 go, 2 waits.
        assert_eq!(f.take(2), Some((0, 0)));
        assert_eq!(f.take(2), Some((0, 1)));
        assert_eq!(f.take(2), None);
        // Slot 1's handshake is answered first: its first data round is
        // its second packet, and waits behind slot 2's first.
        f.land(&mut slots[1], 1);
        assert_eq!(f.take(2), Some((0, 2)));
        assert_eq!(f.take(2), None, "the window is full");
        // Slot 0 lands: second packets go by slot.
        f.land(&mut slots[0], 0);
        assert_eq!(f.take(3), Some((1, 0)));
        assert_eq!(f.take(3), Some((1, 1)));
    }

    #[test]
    fn a_slot_ahead_of_the_flight_goes_whatever_the_window_says() {
        let mut slots = idle(3);
        let mut f = Flight::new(&slots);
        for s in 0..3 {
            assert_eq!(f.take(3), Some((0, s)));
        }
        f.land(&mut slots[2], 2);
        assert_eq!(f.take(3), Some((1, 2)));
        f.land(&mut slots[1], 1);
        f.land(&mut slots[0], 0);
        // The window shrank to 1 with (1, 2) in flight: (1, 0) and (1, 1)
        // come before it, and another worker may be waiting on them.
        assert_eq!(f.take(1), Some((1, 0)));
        assert_eq!(f.take(1), Some((1, 1)));
        assert_eq!(f.take(1), None, "nothing left");
    }

    #[test]
    fn each_round_in_recovery_opens_one_spare_slot_up_to_the_spares() {
        let mut slots: Vec<Slot<()>> = (0..6).map(|_| slot(0, 0, 0)).collect();
        assert_eq!(spares_in_use(&slots, 2), 0, "nothing in recovery");
        slots[0].queries = 1;
        assert_eq!(spares_in_use(&slots, 2), 1, "asked about");
        assert_eq!(spares_in_use(&slots, 0), 0, "no spare slots");
        slots[1].resends = 1;
        slots[2].queries = 2;
        assert_eq!(spares_in_use(&slots, 2), 2, "at most the spares");
        slots[0].in_flight = false;
        slots[1].in_flight = false;
        assert_eq!(spares_in_use(&slots, 2), 1, "landed rounds free theirs");
    }

    /// A nudge makes a worker resend at once only with many slots in
    /// flight and its packet a smoothed round trip gone; otherwise it asks,
    /// and a slot with its own recovery under way ignores it.
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
        let few = on_nudge(&sent, true, srtt, true, 30 * MS, true);
        assert!(matches!(few, Some(Nudged::Ask)), "few in flight: asks");
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

    fn path() -> (AgentConfig, Path) {
        let mut c = AgentConfig::new(([127, 0, 0, 1], 1).into(), 1, 0, 2, 64, 64);
        c.window = Window::Adaptive { initial: 4 };
        let p = Path::new(&c);
        (c, p)
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

    /// Moves on within a timeout of each other are counted in a row; one
    /// after a quiet timeout starts the count again.
    #[test]
    fn quick_moves_count_in_a_row_within_a_timeout() {
        let mut s = slot(0, 0, 0);
        s.rto = 20 * MS;
        let counts: Vec<u32> = [1, 2, 3, 4, 5]
            .iter()
            .map(|&t| s.quick_moves(t * MS))
            .collect();
        assert_eq!(counts, [1, 2, 3, 4, 5]);
        assert_eq!(s.quick_moves(30 * MS), 1, "more than a timeout after");
        assert_eq!(s.quick_moves(31 * MS), 2);
    }
}
