//! The worker's protocol core, without I/O or clocks (as quinn-proto is
//! for QUIC): one all-reduce as a state machine that takes events (a
//! datagram received at a time, the path drained at a time) and returns
//! actions (packets and queries to send, the next time it wants to be
//! woken, a finished tensor or an error). The kernel socket path and the
//! DPDK path drive it with a real clock ([`crate::engine`]); the protocol
//! simulator (`inagg-protosim`) drives it in virtual time, against the
//! emulator's switch, with seeded faults.
//!
//! What it holds, module by module:
//!
//! - [`Core`] (here): the self-clocking window, at most one outstanding
//!   packet per slot of the job's pool, the next round of a slot due when
//!   its result arrives (into the slot's other shadow set); what each
//!   event does to it.
//! - [`flight`]: the order every worker of a job sends its ready slots in
//!   ([`flight::Flight`]), and how many may be in flight.
//! - [`path`]: the round-trip estimate and the congestion window, which
//!   persist across all-reduces.
//! - [`recovery`]: every rule of loss recovery: when a slot is suspected
//!   lost, queries, statuses, nudges, resends, timeouts.
//! - [`session`]: the session handshake and its token.
//! - [`check`]: the check lane, the last element of every data packet,
//!   which proves a result is the sum of this session's contributions.
//! - [`accept`]: what a received datagram means to the all-reduce.
//! - [`slot`]: one slot's state.
//! - [`time`]: the protocol's clock, nanoseconds handed in with each event.
//!
//! Timers cost nothing per packet: sending stores a deadline in the slot's
//! entry, and the slot table is scanned for expired deadlines and
//! suspected losses once per scan interval ([`Core::next_wakeup`]), not
//! once per packet. What goes into each packet, and what to do with each
//! result, is the [`Codec`]'s business: the same core runs int32 and float
//! all-reduces. The packet buffers are the driver's ([`SlotBuf`]): over
//! DPDK an mbuf the NIC sends from, in the simulator a `Vec<u8>`.

mod accept;
mod agent;
pub(crate) mod announce;
pub(crate) mod check;
pub(crate) mod flight;
pub(crate) mod path;
pub(crate) mod recovery;
pub(crate) mod session;
mod slot;
pub mod time;

use inagg_wire::{Kind, Repr, HEADER_LEN};

pub use self::agent::{Agent, AllReduce};

use self::accept::Verdict;
use self::announce::{probes_previous, LastRound};
use self::flight::{spares_in_use, Flight};
use self::path::Path;
use self::recovery::{answered, asks_nudges, gone, on_its_way, refused, shut_out, Asked, Pending};
use self::session::{SlotSession, Standing, Token, HANDSHAKE_WEIGHT};
use self::slot::{Slot, QUICK_MOVES};
use self::time::{nanos, Nanos};
use crate::link::SlotBuf;
use crate::stats::Stats;
use crate::{AgentConfig, Error};

/// What a slot's rounds carry. Round `r` of slot `s` is the `r`-th packet the
/// slot sends in this all-reduce.
pub trait Codec {
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
pub struct Encoded {
    /// The exponent to send.
    pub exponent: u8,
    /// The payload's [`inagg_wire::frame::ones_sum_native`] sum, taken
    /// while writing it: a raw-Ethernet link's UDP checksum then never
    /// reads the payload back.
    pub sum: u64,
}

impl<C: Codec + ?Sized> Codec for &mut C {
    fn rounds(&self, slot: usize, window: usize) -> usize {
        (**self).rounds(slot, window)
    }
    fn encode(&mut self, slot: usize, round: usize, window: usize, payload: &mut [u8]) -> Encoded {
        (**self).encode(slot, round, window, payload)
    }
    fn decode(&mut self, slot: usize, round: usize, window: usize, payload: &[u8], exponent: u8) {
        (**self).decode(slot, round, window, payload, exponent)
    }
    fn carries_values(&self, slot: usize, round: usize, window: usize) -> bool {
        (**self).carries_values(slot, round, window)
    }
    fn class(&self, slot: usize, round: usize, window: usize) -> Option<u8> {
        (**self).class(slot, round, window)
    }
}

/// Bytes of a data packet's payload that carry its check, not values: the
/// last element ([`check`]).
pub(crate) const CHECK_LANE: usize = 4;

/// The shortest scan interval.
const SCAN_FLOOR: Nanos = 200_000;

/// What one lane of a worker brings to an all-reduce: its configuration,
/// and the state that persists from one all-reduce to the next (each
/// slot's session, the token, the path).
pub(crate) struct Lane<'a> {
    pub config: &'a AgentConfig,
    /// Per-slot round counters and handshake state that persist across
    /// all-reduces, so that a slot keeps alternating shadow sets, packet ids
    /// stay fresh and a slot shakes hands once per session.
    pub sessions: &'a mut [SlotSession],
    /// This worker's session token.
    pub token: Token,
    /// The round-trip estimate and the congestion window.
    pub path: &'a mut Path,
    /// Each slot's last result, kept to announce to a switch that lost it
    /// ([`announce`]).
    pub last: &'a mut [LastRound],
    /// (this lane, lanes): a multi-queue worker runs one core per lane,
    /// each with the slots `s` where `s % lanes == lane`; 1 lane has them all.
    pub lane: (usize, usize),
}

/// One all-reduce of one lane, as a state machine.
///
/// The driver's loop: send what [`Core::packets`] and [`Core::queries`]
/// hold (then [`Core::sent`]), wait for datagrams until
/// [`Core::next_wakeup`], hand each to [`Core::on_datagram`], then call
/// [`Core::on_idle`]; until [`Core::is_done`] or an error.
pub(crate) struct Core<'a, B, C> {
    lane: Lane<'a>,
    codec: C,
    window: usize,
    slots: Vec<Slot<B>>,
    flight: Flight,
    /// Slots whose packet is due: sent from the slots' own buffers (kept
    /// for retransmission), so nothing is copied on the way out.
    tx: Vec<usize>,
    /// Slots whose query is due.
    queries: Vec<usize>,
    /// Slots a nudge would have resent, once the path is drained.
    nudged: Vec<Pending>,
    /// Slots whose previous round is to be asked about, and announced
    /// ([`announce`]).
    previous: Vec<usize>,
    announce: Vec<usize>,
    /// Slots with rounds still to run.
    active: usize,
    /// When recovery last scanned the slots: the next scan is a scan
    /// interval later, an interval recomputed at every call (the first
    /// round trip measured shortens the first one, which without a sample
    /// is a quarter of the minimum timeout).
    last_scan: Nanos,
    /// Port unreachables seen so far, and when the count last grew: a
    /// switch that stops refusing came back (docs/PROTOCOL.md,
    /// "Retransmission").
    refusals: (u64, Nanos),
    /// The weight of a handshake result that held this worker's token but
    /// weighed other than 2n (kept to explain a timeout).
    bad_weight: Option<u16>,
    stats: Stats,
    /// Results taken so far, for progress displays.
    landed: u64,
}

impl<'a, B: SlotBuf, C: Codec> Core<'a, B, C> {
    /// Starts running `chunks` chunks through the pool with `codec`: every
    /// slot's first packet is queued. Slot buffers come from `kept` (those
    /// of the last all-reduce), then from `alloc`.
    pub fn new(
        lane: Lane<'a>,
        codec: C,
        chunks: usize,
        payload_bytes: u64,
        kept: Vec<B>,
        mut alloc: impl FnMut(usize) -> Result<B, Error>,
    ) -> Result<Self, Error> {
        let window = chunks.min(lane.config.pool_size as usize);
        let len = HEADER_LEN + usize::from(lane.config.elements) * 4;
        let mut kept = kept.into_iter();
        let mut bufs = Vec::with_capacity(window);
        for _ in 0..window {
            bufs.push(match kept.next() {
                Some(b) => b,
                None => alloc(len)?,
            });
        }
        lane.path.restart_clock();
        let slots = lane.start_slots(&codec, window, bufs);
        let mut core = Core {
            flight: Flight::new(&slots),
            active: slots.iter().filter(|s| s.rounds > 0).count(),
            last_scan: 0,
            lane,
            codec,
            window,
            slots,
            tx: Vec::with_capacity(window),
            queries: Vec::new(),
            nudged: Vec::new(),
            previous: Vec::new(),
            announce: Vec::new(),
            refusals: (0, 0),
            bad_weight: None,
            stats: Stats {
                payload_bytes,
                ..Stats::default()
            },
            landed: 0,
        };
        core.release(0)?;
        Ok(core)
    }

    /// Whether every slot has run all its rounds: the tensor is reduced.
    pub fn is_done(&self) -> bool {
        self.active == 0
    }

    /// When the core next wants [`Core::on_idle`] called: its next scan.
    pub fn next_wakeup(&self) -> Nanos {
        self.last_scan + self.lane.scan_interval()
    }

    /// Results taken so far.
    pub fn landed(&self) -> u64 {
        self.landed
    }

    /// The counts so far.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The packets to send now, in order.
    pub fn packets(&self) -> impl ExactSizeIterator<Item = &B> {
        self.tx.iter().map(|&s| &self.slots[s].packet)
    }

    /// Builds the queries to send now, each in its slot's own small
    /// buffer (made by `alloc` when the slot first asks); [`Core::queries`]
    /// then holds them.
    pub fn build_queries(
        &mut self,
        mut alloc: impl FnMut(usize) -> Result<B, Error>,
    ) -> Result<(), Error> {
        let few = self.lane.few_in_flight(self.slots.len());
        for &s in &self.queries {
            let slot = &mut self.slots[s];
            let head = self.lane.query_header(slot, s, few);
            let buf = match &mut slot.query {
                Some(b) => b,
                None => slot.query.insert(alloc(HEADER_LEN)?),
            };
            let sum = head.emit_summed(buf.datagram_mut()?);
            buf.seal(sum);
            self.stats.packets_sent += 1;
            self.stats.bytes_sent += buf.wire_len() as u64;
        }
        for &s in &self.previous {
            let head = self.lane.previous_query(s);
            let slot = &mut self.slots[s];
            let buf = match &mut slot.previous_query {
                Some(b) => b,
                None => slot.previous_query.insert(alloc(HEADER_LEN)?),
            };
            let sum = head.emit_summed(buf.datagram_mut()?);
            buf.seal(sum);
            self.stats.queries += 1;
            self.stats.packets_sent += 1;
            self.stats.bytes_sent += buf.wire_len() as u64;
        }
        for &s in &self.announce {
            let head = self.lane.announcement(s);
            let payload = &self.lane.last[s].payload;
            let slot = &mut self.slots[s];
            let buf = match &mut slot.announcement {
                Some(b) => b,
                None => slot.announcement.insert(alloc(HEADER_LEN + payload.len())?),
            };
            let datagram = buf.datagram_mut()?;
            let (h, p) = datagram.split_at_mut(HEADER_LEN);
            p.copy_from_slice(payload);
            let sum = head.emit_summed(h) + inagg_wire::frame::ones_sum_native(p);
            buf.seal(sum);
            self.stats.announcements += 1;
            self.stats.packets_sent += 1;
            self.stats.bytes_sent += buf.wire_len() as u64;
        }
        Ok(())
    }

    /// The queries and announcements [`Core::build_queries`] built, in
    /// order.
    pub fn queries(&self) -> impl Iterator<Item = &B> {
        let slots = &self.slots;
        let queries = self.queries.iter().map(move |&s| &slots[s].query);
        let previous = self.previous.iter().map(move |&s| &slots[s].previous_query);
        let announce = self.announce.iter().map(move |&s| &slots[s].announcement);
        queries
            .chain(previous)
            .chain(announce)
            .map(|b| b.as_ref().expect("built first"))
    }

    /// Whether there is any query or announcement to send.
    pub fn has_queries(&self) -> bool {
        !(self.queries.is_empty() && self.previous.is_empty() && self.announce.is_empty())
    }

    /// What [`Core::packets`] and [`Core::queries`] held was handed to the
    /// path at `left` (`refused` of them refused, recovered by
    /// retransmission like any loss).
    pub fn sent(&mut self, left: Nanos, refused: u64) {
        self.stats.send_errors += refused;
        for &s in &self.tx {
            self.slots[s].left_at = left;
        }
        self.tx.clear();
        self.queries.clear();
        self.previous.clear();
        self.announce.clear();
    }

    /// Ends the all-reduce: its statistics, and the slot buffers for the
    /// next one.
    pub fn finish(self) -> (Stats, Vec<B>) {
        let mut stats = self.stats;
        stats.window = self.lane.path.window.limit() as u64;
        (stats, self.slots.into_iter().map(|s| s.packet).collect())
    }

    /// A datagram arrived at `now`.
    pub fn on_datagram(&mut self, now: Nanos, data: &[u8]) -> Result<(), Error> {
        self.stats.packets_received += 1;
        self.stats.bytes_received += data.len() as u64;
        let verdict = self
            .lane
            .accept(data, self.window, &self.slots, &mut self.stats);
        // `joined`: the result is a handshake's that was also the codec's
        // round (it moved the slot's epoch already).
        let (s, payload, exponent, joined) = match verdict {
            Verdict::Current {
                slot,
                payload,
                exponent,
            } => {
                // Back in the session after a handshake sent on a seeming
                // refusal ([`Verdict::Current`] of that round's result).
                let session = &mut self.lane.sessions[slot];
                session.joined = true;
                if let Some((_, round)) = session.refused.take() {
                    self.slots[slot].round = round as usize;
                }
                (slot, payload, exponent, false)
            }
            Verdict::Handed {
                slot,
                payload,
                exponent,
                round,
            } => {
                self.slots[slot].round = round;
                (slot, payload, exponent, false)
            }
            Verdict::Ignore => return Ok(()),
            Verdict::Foreign { slot } => {
                self.slots[slot].foreign += 1;
                return Ok(());
            }
            Verdict::Spurious { slot } => {
                self.slots[slot].answered_asking = None;
                self.lane.path.rack.on_spurious();
                return Ok(());
            }
            Verdict::Nudge { slot, status } => {
                let few = self.lane.few_in_flight(self.slots.len());
                let entry = &mut self.slots[slot];
                let q = (&mut self.queries, &mut self.nudged, &mut self.stats);
                self.lane.on_nudge_status(entry, slot, &status, now, few, q);
                return Ok(());
            }
            Verdict::Behind { slot, ahead } => {
                if let Some(id) = ahead {
                    self.heard_ahead(slot, id, now);
                } else if self.slots[slot].asked == Asked::Not {
                    let entry = &mut self.slots[slot];
                    self.lane
                        .ask(entry, slot, now, &mut self.queries, &mut self.stats);
                }
                return Ok(());
            }
            Verdict::Status {
                slot,
                status,
                count,
            } => {
                let entry = &mut self.slots[slot];
                let worker = self.lane.config.worker;
                let session = &mut self.lane.sessions[slot];
                if !session.joined && shut_out(&status, count, worker) {
                    self.stats.statuses += 1;
                    self.stats.handshake_retries += 1;
                    session.jump();
                    return self.handshake_again(slot, now);
                }
                if session.joined && refused(&status, worker, entry.resends) {
                    self.stats.statuses += 1;
                    self.stats.handshake_retries += 1;
                    session.refused = Some((entry.packet_id, entry.round as u32));
                    entry.resends = 0;
                    return self.handshake_again(slot, now);
                }
                if gone(entry, &status, worker) {
                    self.stats.statuses += 1;
                    self.stats.split_joins += 1;
                    let (id, _) = entry.ahead.take().unwrap_or_default();
                    return self.join_split(slot, id, now);
                }
                let tx = &mut self.tx;
                self.lane
                    .on_status(entry, slot, &status, now, tx, &mut self.stats);
                let entry = &self.slots[slot];
                let last = &self.lane.last[slot];
                let after = self.lane.turns_after(entry.place);
                if entry.asked == Asked::Held
                    && probes_previous(entry.held, after)
                    && last.precedes(entry)
                {
                    self.previous.push(slot);
                }
                return Ok(());
            }
            Verdict::Previous { slot, count } => {
                // The switch lost the round before this one (its set's
                // round is not complete): announce the result held here.
                let n = self.lane.config.workers;
                if count < n && !self.announce.contains(&slot) {
                    self.announce.push(slot);
                }
                return Ok(());
            }
            Verdict::Joined {
                slot,
                payload,
                exponent,
                packet_id,
                key,
            } => {
                self.stats.handshakes += 1;
                self.bad_weight = None;
                let entry = &mut self.slots[slot];
                let config = self.lane.config;
                let weight = config.workers.saturating_mul(2);
                let last = &mut self.lane.last[slot];
                last.keep_handshake((entry.set, packet_id, exponent, weight), payload);
                let standing =
                    self.lane
                        .token
                        .standing(payload, config.rank, config.workers, config.elements);
                let session = &mut self.lane.sessions[slot];
                session.join(packet_id, entry.set, key, standing);
                if standing.is_some() {
                    self.stats.catch_ups += 1;
                }
                entry.rollback = Some(entry.round);
                // A catch-up round comes first (never the codec's round).
                if standing.is_some() || self.codec.carries_values(slot, entry.round, self.window) {
                    // A round of its own: the first data round is next, in
                    // its turn like any round. (Sent at once, it went before
                    // slots that other workers sent first: their rounds then
                    // waited on this worker's, and read as lost.)
                    // (Not progress: a handshake that succeeds again and
                    // again while no data round does is a livelock, which
                    // must end in the timeout's error, not a hang.)
                    answered(self.lane.path, entry, now);
                    self.flight.land(entry, slot);
                    return Ok(());
                }
                // The handshake was the codec's round (a float all-reduce's
                // exponent round): taken as that below.
                (slot, payload, exponent, true)
            }
            Verdict::MoveOn {
                slot,
                packet_id,
                own_weight,
                stranger,
            } => {
                if let Some(digest) = stranger {
                    let set = usize::from(self.slots[slot].set & 1);
                    self.lane.sessions[slot].strangers[set] = Some(digest);
                }
                return self.move_on(slot, packet_id, own_weight, now);
            }
            Verdict::Join { slot, packet_id } => {
                self.heard_ahead(slot, packet_id, now);
                return Ok(());
            }
            Verdict::CaughtUp {
                slot,
                payload,
                exponent,
            } => {
                // A member ahead: the members behind have the round it
                // gave; its own round goes on, at the next epoch.
                let entry = &mut self.slots[slot];
                let n = self.lane.config.workers;
                self.lane.last[slot].keep(entry.set, entry.packet_id, exponent, n, payload);
                let session = &mut self.lane.sessions[slot];
                session.catch_up = None;
                session.epoch = session.epoch.wrapping_add(1);
                entry.rollback = None;
                answered(self.lane.path, entry, now);
                self.flight.land(entry, slot);
                return Ok(());
            }
        };
        let entry = &mut self.slots[s];
        if !joined {
            let n = self.lane.config.workers;
            self.lane.last[s].keep(entry.set, entry.packet_id, exponent, n, payload);
        }
        answered(self.lane.path, entry, now);
        entry.answered_asking = on_its_way(self.lane.path, entry, now).then_some(entry.packet_id);
        let values = &payload[..payload.len() - CHECK_LANE];
        self.codec
            .decode(s, entry.round, self.window, values, exponent);
        if !joined {
            let session = &mut self.lane.sessions[s];
            session.epoch = session.epoch.wrapping_add(1);
            session.position = session.position.wrapping_add(1);
            session.catch_up = None;
            entry.rollback = None;
        }
        entry.round += 1;
        if entry.round > entry.reached {
            // A round taken again after a rollback is not progress.
            entry.reached = entry.round;
            entry.progress_at = now;
        }
        self.landed += 1;
        self.flight.land(entry, s);
        if entry.round >= entry.rounds {
            self.active -= 1;
        }
        Ok(())
    }

    /// A nudge said set 0's round `id` lacks slot `s`, whose round is in
    /// set 1 ([`Verdict::Join`], [`Verdict::Behind`]): the slot asks
    /// about its own round, unless it has since the first such nudge, and
    /// joins set 0 only if the answer says its round is held there, waiting
    /// ([`gone`]). Not at once: an earlier answer that it was held may
    /// predate its round's completion, whose result it then lost, and a
    /// handshake sent into the others' first data round would spoil it
    /// for every member (at 30% loss and with a starved worker, 8 workers
    /// handed a slot back and forth so until they gave up).
    fn heard_ahead(&mut self, s: usize, id: u32, now: Nanos) {
        let entry = &mut self.slots[s];
        let at = entry.ahead.map_or(now, |(_, at)| at);
        entry.ahead = Some((id, at));
        let asked_since = entry.asked != Asked::Not && entry.asked_at >= at && at < now;
        if !asked_since {
            self.lane
                .ask(entry, s, now, &mut self.queries, &mut self.stats);
        }
    }

    /// Slot `s`'s members are split between its sets: its handshake goes
    /// to the round of set 0 with that round's packet id
    /// ([`Verdict::Join`]).
    fn join_split(&mut self, s: usize, packet_id: u32, now: Nanos) -> Result<(), Error> {
        self.lane.sessions[s].epoch = packet_id >> 16;
        self.handshake_again(s, now)
    }

    /// Slot `s` sends a new handshake (with a new token) at the epoch its
    /// session now holds, its data round rolled back if it had just begun.
    fn handshake_again(&mut self, s: usize, now: Nanos) -> Result<(), Error> {
        let entry = &mut self.slots[s];
        let session = &mut self.lane.sessions[s];
        session.joined = false;
        session.catch_up = None;
        session.attempt = session.attempt.wrapping_add(1);
        if let Some(round) = entry.rollback.take() {
            entry.round = round;
        }
        let (tx, stats) = (&mut self.tx, &mut self.stats);
        self.lane
            .send(&mut self.codec, entry, s, self.window, now, tx, stats)
    }

    /// A result sends slot `s` to a new handshake in its other set.
    fn move_on(
        &mut self,
        s: usize,
        packet_id: u32,
        own_weight: Option<u16>,
        now: Nanos,
    ) -> Result<(), Error> {
        self.bad_weight = own_weight.or(self.bad_weight);
        self.stats.handshake_retries += 1;
        let set = self.slots[s].set;
        self.lane.sessions[s].move_past(packet_id, set);
        self.lane.sessions[s].left = Some(packet_id);
        self.handshake_again(s, now)?;
        let entry = &mut self.slots[s];
        if entry.quick_moves(now) > QUICK_MOVES {
            // Sent by its timer instead: see QUICK_MOVES.
            self.tx.pop();
            self.stats.packets_sent -= 1;
            self.stats.bytes_sent -= entry.packet.wire_len() as u64;
        }
        Ok(())
    }

    /// The datagrams that arrived together have been handed in, at `now`;
    /// `drained` when the path holds no more (fewer than a batch came),
    /// `refusals` the ICMP port unreachables the path has seen so far.
    /// Releases due slots into the window and, once the path is drained
    /// and the scan is due, runs loss recovery (results already queued in
    /// the path, a worker descheduled for a while, are not losses).
    /// Returns whether it scanned, or the error of a worker that made no
    /// progress for `give_up_after`.
    pub fn on_idle(&mut self, now: Nanos, drained: bool, refusals: u64) -> Result<bool, Error> {
        if drained {
            let (tx, stats) = (&mut self.tx, &mut self.stats);
            self.lane
                .resend_nudged(&mut self.slots, &mut self.nudged, now, tx, stats);
        }
        self.release(now)?;
        if !drained || now < self.next_wakeup() {
            return Ok(false);
        }
        if refusals > self.refusals.0 {
            self.refusals = (refusals, now);
        }
        if let Some(stuck) = self.slowest() {
            let waited = std::time::Duration::from_nanos(now - self.slots[stuck].progress_at);
            if waited <= self.lane.config.give_up_after {
                return self.scan(now);
            }
            let e = self.lane.give_up(
                &self.slots,
                stuck,
                self.refusals,
                now,
                self.bad_weight,
                &self.stats,
            );
            return Err(e);
        }
        self.scan(now)
    }

    /// The slot with rounds left that has gone longest without progress:
    /// one slot whose members never agree again (under replays, say)
    /// while the others move on makes the all-reduce fail after the
    /// give-up time, not crawl on.
    fn slowest(&self) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.round < s.rounds)
            .min_by_key(|(_, s)| s.progress_at)
            .map(|(i, _)| i)
    }

    /// Loss recovery's scan of the slots at `now`.
    fn scan(&mut self, now: Nanos) -> Result<bool, Error> {
        let before = self.stats.retransmissions;
        let (tx, queries, stats) = (&mut self.tx, &mut self.queries, &mut self.stats);
        self.lane.recover(&mut self.slots, now, tx, queries, stats);
        if self.stats.retransmissions > before {
            tracing::debug!(
                job = self.lane.config.job,
                resent = self.stats.retransmissions - before,
                total = self.stats.retransmissions,
                window = self.lane.path.window.limit(),
                "slots timed out; retransmitted"
            );
        }
        self.last_scan = now;
        Ok(true)
    }

    /// Sends ready slots, first in the shared order, while the window has room.
    ///
    /// A slot in recovery counts in the window unless the pool has spare
    /// slots ([`crate::AgentConfig::spare_slots`]): up to that many rounds
    /// being recovered each let another slot in. A round that lost a
    /// packet waits for a query's and a resend's round trips, not for the
    /// switch's pace, and held its share of the window for them
    /// (docs/PERFORMANCE.md, "Goodput under loss"). Left out of the window
    /// without a bound (RFC 6675's pipe), slots in recovery let more slots
    /// in behind them than a switch on 2 cores kept up with; its queue
    /// grew, the round trips with it, and the rounds that waited on a late
    /// worker were queried as lost.
    fn release(&mut self, now: Nanos) -> Result<(), Error> {
        let window_limit = self.lane.path.window.limit();
        let limit = window_limit + spares_in_use(&self.slots, self.lane.config.spare_slots);
        while let Some((packets, s)) = self.flight.take(limit) {
            if (window_limit..limit).contains(&(self.flight.flying.len() - 1)) {
                self.stats.spare_sends += 1;
            }
            let slot = &mut self.slots[s];
            slot.in_flight = true;
            slot.place = (packets, s);
            let (tx, stats) = (&mut self.tx, &mut self.stats);
            self.lane
                .send(&mut self.codec, slot, s, self.window, now, tx, stats)?;
        }
        Ok(())
    }
}

impl Lane<'_> {
    /// Slot `s`'s first state, with `packet` as its buffer.
    fn start_slots<B, C: Codec>(&self, codec: &C, window: usize, bufs: Vec<B>) -> Vec<Slot<B>> {
        let (lane, lanes) = self.lane;
        let rto = self.path.rtt.rto(self.config);
        bufs.into_iter()
            .enumerate()
            .map(|(s, packet)| {
                let rounds = if s % lanes == lane {
                    codec.rounds(s, window)
                } else {
                    0
                };
                Slot::new(s, rounds, rto, packet)
            })
            .collect()
    }

    /// The error of a worker that made no progress for `give_up_after`:
    /// what it saw, for the operator (lib.rs, `Error::Timeout`): the slot
    /// it waited on (one the switch said waits on other members, if any,
    /// and those members), whether the switch refused or answered.
    fn give_up<B>(
        &self,
        slots: &[Slot<B>],
        stuck: usize,
        refusals: (u64, Nanos),
        now: Nanos,
        bad_weight: Option<u16>,
        stats: &Stats,
    ) -> Error {
        // Of the slots past their give-up time, one the switch said waits
        // for members names them in the error.
        let give_up = nanos(self.config.give_up_after);
        let late = |s: &Slot<B>| s.round < s.rounds && now - s.progress_at > give_up;
        let stuck = slots
            .iter()
            .position(|s| late(s) && s.waits_for != 0)
            .unwrap_or(stuck);
        let waited = std::time::Duration::from_nanos(now - slots[stuck].progress_at);
        tracing::warn!(
            job = self.config.job,
            slot = stuck,
            "no progress; giving up"
        );
        Error::Timeout {
            switch: self.config.switch,
            job: self.config.job,
            slot: stuck as u32,
            waited,
            retransmissions: stats.retransmissions,
            refusals: refusals.0,
            refused_last: std::time::Duration::from_nanos(now - refusals.1),
            handshake_weight: bad_weight.map(|w| (w, 2 * u32::from(self.config.workers))),
            missing: slots[stuck].waits_for,
            queries: (
                u32::try_from(stats.queries).unwrap_or(u32::MAX),
                u32::try_from(stats.statuses).unwrap_or(u32::MAX),
            ),
            rejected: u32::try_from(stats.rejected).unwrap_or(u32::MAX),
        }
    }

    /// Builds the slot's current round and queues it.
    #[allow(clippy::too_many_arguments)]
    fn send<B: SlotBuf, C: Codec>(
        &self,
        codec: &mut C,
        slot: &mut Slot<B>,
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
        // A catch-up round is set only on a join (and cleared on leaving).
        let encoded = if let Some(standing) = session.catch_up {
            self.encode_catch_up(s, standing, payload)
        } else if session.joined {
            let at = payload.len() - CHECK_LANE;
            let mut encoded = codec.encode(s, slot.round, window, &mut payload[..at]);
            let round = (slot.packet_id, slot.round as u32);
            let member = (self.config.rank, self.config.workers);
            session.key.seal(round, member, payload);
            slot.seals.record(slot.round, session.key, slot.packet_id);
            encoded.sum += inagg_wire::frame::ones_sum_native(&payload[at..]);
            encoded
        } else {
            let attempt = (session.attempt, session.position);
            self.encode_handshake(codec, s, slot.round, window, payload, attempt)
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
        slot.foreign = 0;
        slot.ahead = None;
        tx.push(s);
        stats.packets_sent += 1;
        stats.bytes_sent += slot.packet.wire_len() as u64;
        Ok(())
    }

    /// Writes slot `s`'s part in a catch-up round (docs/PROTOCOL.md,
    /// "Sessions", members a round apart): the giver's is the last data
    /// round's result as it took it (its check lane included: the members
    /// behind check it with the key and packet id they sealed that round
    /// with), with its exponent; every other member's is zeros.
    fn encode_catch_up(&self, s: usize, standing: Standing, payload: &mut [u8]) -> Encoded {
        let given = (standing == Standing::Giver)
            .then(|| self.last[s].data_round())
            .flatten()
            .filter(|(p, _)| p.len() == payload.len());
        let exponent = match given {
            Some((values, exponent)) => {
                payload.copy_from_slice(values);
                exponent
            }
            None => {
                payload.fill(0);
                0
            }
        };
        Encoded {
            exponent,
            sum: inagg_wire::frame::ones_sum_native(payload),
        }
    }

    /// Writes a handshake's payload: this worker's token and the slot's
    /// position (`attempt`: the attempt and the position), in round `round`
    /// when that round carries no values (with the round's exponent), else
    /// in zeros (exponent 0).
    fn encode_handshake<C: Codec>(
        &self,
        codec: &mut C,
        s: usize,
        round: usize,
        window: usize,
        payload: &mut [u8],
        (attempt, position): (u32, u32),
    ) -> Encoded {
        let exponent = if codec.carries_values(s, round, window) {
            payload.fill(0);
            0
        } else {
            codec.encode(s, round, window, payload).exponent
        };
        self.token.write(payload, attempt, position);
        Encoded {
            exponent,
            sum: inagg_wire::frame::ones_sum_native(payload),
        }
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

    /// Slot `s`'s query about its round in flight, asking for nudges or
    /// not ([`asks_nudges`]).
    fn query_header<B>(&self, slot: &Slot<B>, s: usize, few: bool) -> Repr {
        let after = self.turns_after(slot.place);
        let count = if asks_nudges(few, after, slot.held) {
            inagg_wire::status::QUERY_NUDGE
        } else {
            0
        };
        self.query(s, slot.set, slot.packet_id, count)
    }

    /// A query about slot `s`'s round of `packet_id` in `set`; `count` 1
    /// asks for nudges.
    pub(super) fn query(&self, s: usize, set: u8, packet_id: u32, count: u16) -> Repr {
        Repr {
            kind: Kind::Query,
            set,
            priority: self.config.priority,
            job: self.config.job,
            slot: s as u16,
            worker: self.config.worker,
            generation: self.config.generation,
            exponent: 0,
            count,
            elements: self.config.elements,
            packet_id,
        }
    }
}
