//! A slot's progress in an all-reduce: its round, the packet in flight and
//! when it left, and what loss recovery has asked and heard about it.

use super::check::CheckKey;
use super::recovery::{Asked, Place};
use super::time::Nanos;

/// Per-slot progress.
#[derive(Debug)]
pub(crate) struct Slot<B> {
    pub(crate) round: usize,
    pub(crate) rounds: usize,
    /// The most rounds the slot has completed (a rollback takes `round`
    /// back, not this): progress is a slot reaching further.
    pub(crate) reached: usize,
    /// When `reached` last grew (or the all-reduce began): a worker gives
    /// up once any slot with rounds left has gone without progress for
    /// its give-up time ([`super::Core::on_idle`]).
    pub(crate) progress_at: Nanos,
    pub(crate) packet_id: u32,
    pub(crate) set: u8,
    /// Times in nanoseconds since the all-reduce started ([`Nanos`]):
    /// `Instant` arithmetic normalises seconds and nanoseconds on every
    /// add and subtract, which showed in profiles of the per-packet path.
    pub(crate) sent_at: Nanos,
    pub(crate) deadline: Nanos,
    pub(crate) rto: Nanos,
    /// Copies of the current round sent after the first.
    pub(crate) resends: u32,
    /// Moves to a new handshake within a timeout of the one before, in a
    /// row, and when the last was ([`Slot::quick_moves`]).
    pub(crate) moves: (u32, Nanos),
    /// When the last of them was sent.
    pub(crate) resent_at: Nanos,
    /// Sent and not yet answered (a slot between rounds waits in
    /// [`Flight`] for room in the window).
    pub(crate) in_flight: bool,
    /// The packet in flight's place in the shared order ([`Flight`]).
    pub(crate) place: Place,
    /// Between a handshake and the first data round after it, the codec
    /// round to go back to should that data round be spoiled.
    pub(crate) rollback: Option<usize>,
    /// What the switch was asked about the round in flight, and said.
    pub(crate) asked: Asked,
    /// The members the switch last said the round waits for (bitmap; 0
    /// when it has not said), kept past resends for a give-up message.
    pub(crate) waits_for: u64,
    /// Queries sent for the round in flight (each waits twice as long).
    pub(crate) queries: u32,
    /// Statuses that said the switch holds the round in flight's
    /// contribution ([`HELD_ANSWERS`]).
    pub(crate) held: u32,
    /// The packet in flight, kept for retransmission.
    pub(crate) packet: B,
    /// The slot's query, made when it first asks.
    pub(crate) query: Option<B>,
    /// Its query about its previous round, and its announcement of that
    /// round's result, made when first needed
    /// ([`crate::protocol::announce`]).
    pub(crate) previous_query: Option<B>,
    pub(crate) announcement: Option<B>,
    /// When the last query went out.
    pub(crate) asked_at: Nanos,
    /// When the packet in flight (its first copy or its latest resend)
    /// left in a send call. [`Slot::last_sent`] is stamped when the slot is
    /// queued, at the start of a batch's processing; the send comes after
    /// the rest of the batch, and a worker descheduled in between (eight
    /// workers on one core) sends a scheduling quantum later than stamped.
    pub(crate) left_at: Nanos,
    /// The packet id of the slot's last round when its result came while
    /// a query was out and was already on its way when asked
    /// ([`on_its_way`]): a second copy of it means the query was not
    /// needed ([`crate::recovery::Rack::on_spurious`]).
    pub(crate) answered_asking: Option<u32>,
    /// Results for the round's set with another round's packet id seen
    /// since the round was sent ([`FOREIGN_COPIES`]).
    pub(crate) foreign: u32,
    /// When a scan first found the packet in flight suspect while it was
    /// not this worker's turn to ask, keyed by the packet's send time (a
    /// new send starts afresh): a member whose turn it is not waits from
    /// then ([`crate::protocol::recovery`], turns).
    pub(crate) suspected: Option<(Nanos, Nanos)>,
    /// A nudge said a round of set 0 lacks this worker (that round's
    /// packet id, and when the first such nudge came), while the slot's
    /// round is in set 1 and held there, or set 0's round is its next.
    /// Should the switch answer a query sent since with a status that
    /// holds the slot's round and waits for members, the slot joins set
    /// 0's round as a handshake ([`super::recovery::gone`]).
    pub(crate) ahead: Option<(u32, Nanos)>,
    /// The keys and packet ids the slot's round has been sealed with: a
    /// catch-up round's result is taken as this round's only if it passes
    /// one of their checks ([`super::session::Standing`]).
    pub(crate) seals: Seals,
}

/// The (key, packet id) pairs one round of a slot was sealed with, the
/// last [`Seals::KEPT`] of them: a round is sealed anew each time the slot
/// sends it after a handshake (new key) or at a new epoch (new id).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Seals {
    round: usize,
    kept: [(CheckKey, u32); Seals::KEPT],
    len: usize,
}

impl Seals {
    const KEPT: usize = 8;

    /// Round `round` was sealed with `key` and `packet_id`.
    pub(crate) fn record(&mut self, round: usize, key: CheckKey, packet_id: u32) {
        if round != self.round {
            *self = Seals {
                round,
                ..Seals::default()
            };
        }
        if self.kept[..self.len.min(Self::KEPT)].contains(&(key, packet_id)) {
            return;
        }
        self.kept[self.len % Self::KEPT] = (key, packet_id);
        self.len += 1;
    }

    /// The round sealed last, if `payload` is the sum of that round of
    /// this session's members, as one of its seals says. (A float slot
    /// that went back to a handshake after its first data round may have
    /// gone back a round further, to its exponent round: the round it
    /// lost is still the one it sealed last.)
    pub(crate) fn verify(&self, payload: &[u8]) -> Option<usize> {
        let round = self.round;
        self.kept[..self.len.min(Self::KEPT)]
            .iter()
            .any(|&(key, id)| key.verify((id, round as u32), payload))
            .then_some(round)
    }
}

/// Results of another round that come back to a slot in its round's set
/// before it leaves the set for a handshake in the other one. A late copy
/// of an earlier round comes once or twice (a duplicate); a round the set
/// holds that this session did not make (an earlier session's, with this
/// worker's bit still set; one that a late copy started after every member
/// had left) comes back with every resend, for good.
pub(super) const FOREIGN_COPIES: u32 = 4;

/// Moves on from a slot's handshake that a result answers at once, in a
/// row, before the next waits for the slot's timer. A result that moves a
/// slot on is answered by a new handshake at once, which is what lets
/// sessions start in a round trip; but results that keep coming (a forger,
/// a peer out of step, a bug) would make every one of them a packet, as
/// fast as they arrive. Past this many moves within a timeout of each
/// other, the handshake waits for its timer: a slot that cannot make
/// progress costs a packet per timeout, not a storm.
pub(super) const QUICK_MOVES: u32 = 4;

impl<B> Slot<B> {
    /// Whether `wait` has passed since a scan first suspected the packet
    /// sent at `sent` (a member waiting for its turn,
    /// [`crate::protocol::recovery`]); the first call starts the wait.
    pub(crate) fn waited(&mut self, sent: Nanos, now: Nanos, wait: Nanos) -> bool {
        let since = match self.suspected {
            Some((at, since)) if at == sent => since,
            _ => self.suspected.insert((sent, now)).1,
        };
        now >= since + wait
    }

    /// Slot `s` before its first round, with `rounds` to run, `rto` as
    /// its timeout and `packet` as its buffer.
    pub(crate) fn new(s: usize, rounds: usize, rto: Nanos, packet: B) -> Self {
        Slot {
            round: 0,
            rounds,
            reached: 0,
            progress_at: 0,
            packet_id: 0,
            set: 0,
            sent_at: 0,
            deadline: 0,
            rto,
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
            previous_query: None,
            announcement: None,
            answered_asking: None,
            suspected: None,
            ahead: None,
            foreign: 0,
            asked_at: 0,
            left_at: 0,
            seals: Seals::default(),
        }
    }

    /// When the packet in flight last went out (its first copy, or its
    /// latest resend).
    pub(crate) fn last_sent(&self) -> Nanos {
        if self.resends > 0 {
            self.resent_at
        } else {
            self.sent_at
        }
    }

    /// Counts a move on at `now`: the moves in a row, each within the
    /// slot's timeout of the one before.
    pub(crate) fn quick_moves(&mut self, now: Nanos) -> u32 {
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const MS: Nanos = 1_000_000;

    /// A slot in flight, sent at `sent_at` and resent `resends` times, the
    /// last at `resent_at`.
    pub(crate) fn slot(sent_at: Nanos, resends: u32, resent_at: Nanos) -> Slot<()> {
        Slot {
            in_flight: true,
            resends,
            resent_at,
            sent_at,
            left_at: sent_at.max(resent_at),
            ..Slot::new(0, 1, 0, ())
        }
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
