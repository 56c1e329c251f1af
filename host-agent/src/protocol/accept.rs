//! What a received datagram means to an all-reduce: the result a slot
//! waits for, a handshake's, a status or a nudge, or something to count
//! and ignore.

use inagg_wire::status::Status;
use inagg_wire::{Kind, Packet, Repr, HEADER_LEN};

use super::check::CheckKey;
use super::recovery::Asked;
use super::session::{Found, Standing};
use super::slot::{Slot, FOREIGN_COPIES};
use super::Lane;
use crate::stats::Stats;

/// What a received datagram means to the window.
pub(super) enum Verdict<'d> {
    /// The result slot `slot` waits for.
    Current {
        slot: usize,
        payload: &'d [u8],
        exponent: u8,
    },
    /// The result of the slot's handshake, with this worker's token in it:
    /// the slot has joined the session, whose check key is `key` (the
    /// payload's digest, made once here).
    Joined {
        slot: usize,
        payload: &'d [u8],
        exponent: u8,
        packet_id: u32,
        key: CheckKey,
    },
    /// A result that sends the slot to a handshake in the other set: one
    /// for its handshake that is not its own (an earlier session's state),
    /// or its first data round spoiled by another worker's handshake.
    /// `own_weight`: the result held this worker's own token but weighed
    /// other than 2n (kept to explain a timeout: a wrong worker count).
    /// `stranger`: the digest of a handshake round's result without this
    /// worker's token, which the slot remembers for its set
    /// ([`super::session::SlotSession::strangers`]).
    MoveOn {
        slot: usize,
        packet_id: u32,
        own_weight: Option<u16>,
        stranger: Option<CheckKey>,
    },
    /// The switch's answer to this slot's query; `count`, the set's
    /// contributor count (distinct members).
    Status {
        slot: usize,
        status: Status,
        count: u16,
    },
    /// A status about a round whose result this worker holds (the answer
    /// to its query about its previous round, or another member's query
    /// about it, a nudge): the set's contributor count
    /// ([`super::announce`]).
    Previous { slot: usize, count: u16 },
    /// The status of another member's query about this slot's round (its
    /// worker field names the asker): the switch sends it to the members
    /// the round waits for.
    Nudge { slot: usize, status: Status },
    /// A second copy of the result of a round the slot asked about: the
    /// result had not been lost.
    Spurious { slot: usize },
    /// A nudge from set 0 of this slot, whose round lacks this worker,
    /// while its own round is held in set 1: the slot's members may be
    /// split between its sets ([`split`]). It asks about its round, and
    /// goes to the round of set 0, as a handshake with that round's packet
    /// id, should the answer say its round is still held
    /// ([`super::recovery::gone`]).
    Join { slot: usize, packet_id: u32 },
    /// Another round's result in the set this slot's round went to
    /// (counted: [`super::slot::FOREIGN_COPIES`]).
    Foreign { slot: usize },
    /// A nudge about the round after the slot's, which lacks this worker:
    /// the other members have this round's result and went on, and this
    /// worker's copy of it was lost. It asks at once (the stored result
    /// comes back) rather than at its turn ([`behind`]). `ahead`: the
    /// round's packet id, when it is in set 0 and the slot's in set 1
    /// (should the switch answer that it holds the slot's round and waits,
    /// the slot joins it: [`super::slot::Slot::ahead`]).
    Behind { slot: usize, ahead: Option<u32> },
    /// The result of a catch-up round, to a member behind: the round
    /// `round` it lost (the round it sealed last), checked as it sealed it.
    Handed {
        slot: usize,
        payload: &'d [u8],
        exponent: u8,
        round: usize,
    },
    /// The result of a catch-up round, to a member ahead: the round it
    /// gave, summed with zeros, as it took it (every member behind has it
    /// now).
    CaughtUp {
        slot: usize,
        payload: &'d [u8],
        exponent: u8,
    },
    /// Anything else.
    Ignore,
}

impl Lane<'_> {
    /// Classifies a datagram: the result a slot is waiting for, its
    /// handshake's, one that moves it on to the other set, or something to
    /// count and ignore (malformed, another job or generation, a stale or
    /// duplicate result).
    pub(super) fn accept<'d, B>(
        &self,
        data: &'d [u8],
        window: usize,
        slots: &[Slot<B>],
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
        if repr.kind == Kind::Status && s < window && self.last[s].is_of(&repr, &slots[s]) {
            // The answer to this worker's query about its previous round,
            // or another member's query about it (a nudge).
            if repr.worker == self.config.worker {
                stats.statuses += 1;
            } else {
                stats.nudges += 1;
            }
            return Verdict::Previous {
                slot: s,
                count: repr.count,
            };
        }
        if repr.kind == Kind::Status && s < window && split(&repr, data, &slots[s], self) {
            return Verdict::Join {
                slot: s,
                packet_id: repr.packet_id,
            };
        }
        if repr.kind == Kind::Status && s < window && behind(&repr, data, &slots[s], self) {
            let ahead = (repr.set == 0 && slots[s].set == 1).then_some(repr.packet_id);
            return Verdict::Behind { slot: s, ahead };
        }
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
                        Verdict::Status {
                            slot: s,
                            status,
                            count: repr.count,
                        }
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
            // The data round a handshake went after ([`super::recovery::refused`]):
            // its contribution was lost after all, not refused, and a resend
            // completed it. Its result is this worker's, checked with the
            // session's key; the handshake is then a copy the switch answers
            // as a retransmission.
            let id = repr.packet_id;
            if session
                .refused
                .is_some_and(|r| r.0 == id && count == n && session.key.verify(r, payload))
            {
                return Verdict::Current {
                    slot: s,
                    payload,
                    exponent: repr.exponent,
                };
            }
            // A result seen before without this slot's token is no round of
            // its current attempt, whatever its field says now: a token's
            // field can be as narrow as 14 bits (K = 4, 5 workers), and a
            // replayed earlier session's handshake round, brought back
            // with every resend of the attempts that followed, held one
            // attempt's token by chance (seed 996 of `inagg sim protocol
            // --faults all`): the worker joined that session and took its
            // stored data round, the earlier session's sum.
            let digest = CheckKey::from_handshake(payload);
            let seen = session.strangers[usize::from(repr.set & 1)] == Some(digest);
            let found = match self.token.find(payload, session.attempt) {
                Found::Current if seen => Found::Absent,
                found => found,
            };
            return match found {
                Found::Current if count == 2 * n => Verdict::Joined {
                    slot: s,
                    payload,
                    exponent: repr.exponent,
                    packet_id: repr.packet_id,
                    key: digest,
                },
                // A late copy of an earlier attempt's result (once or
                // twice), or an earlier attempt's round that the set still
                // holds with this worker's bit set: each resend of the
                // handshake is then taken for a retransmission of that
                // round and brings it back, and the handshake is never
                // summed there. The latter must leave the set: counted as
                // another round's result is.
                Found::Earlier => foreign(&slots[s], s, repr.packet_id, stats),
                found => Verdict::MoveOn {
                    slot: s,
                    packet_id: repr.packet_id,
                    own_weight: (found == Found::Current).then_some(repr.count),
                    stranger: (found == Found::Absent).then_some(digest),
                },
            };
        }
        let (id, slot) = (repr.packet_id, &slots[s]);
        if id == slot.packet_id {
            if let (true, Some(standing)) = (count == n, session.catch_up) {
                if let Some(verdict) = self.caught_up(s, slot, standing, &repr, payload) {
                    return verdict;
                }
            } else if count == n && session.key.verify((id, slot.round as u32), payload) {
                return Verdict::Current {
                    slot: s,
                    payload,
                    exponent: repr.exponent,
                };
            }
            // This round's set holds a sum that is not this round's: a
            // replayed, forged or misplaced contribution is in it, or a
            // handshake in the slot's first data round. Every member whose
            // contribution went there is answered with the same sum, and
            // each leaves the set on it, for a handshake in the other one,
            // in step ("Sessions", "The check lane").
            stats.rejected += 1;
            return Verdict::MoveOn {
                slot: s,
                packet_id: id,
                own_weight: None,
                stranger: None,
            };
        }
        // Handshakes in the slot's first data round (each weighs 2), under
        // the packet id of a worker whose handshake failed (its count of
        // rounds is its own until it joins): every worker sees the same.
        // Not a copy of the spoiled round the slot already left on, which
        // comes back to the same set after the handshake that followed
        // (duplicated, or held back): taken again, it rolled back a round
        // the other members went on with.
        if count > n && count < 2 * n && slot.rollback.is_some() && session.left != Some(id) {
            return Verdict::MoveOn {
                slot: s,
                packet_id: id,
                own_weight: None,
                stranger: None,
            };
        }
        // Another round's result in this set: a late copy of an earlier
        // one, or a round the set holds that this session did not make,
        // which comes back with every resend.
        foreign(slot, s, id, stats)
    }

    /// A catch-up round's result, to a member that stands `standing` in
    /// it: to a member behind, its round's result if it passes that
    /// round's check as the member sealed it; to a member ahead, the end
    /// of the catch-up if it is the round it holds. `None`: neither (a
    /// forged or mixed sum), which the slot leaves as a round that failed
    /// its check.
    fn caught_up<'d, B>(
        &self,
        s: usize,
        slot: &Slot<B>,
        standing: Standing,
        repr: &Repr,
        payload: &'d [u8],
    ) -> Option<Verdict<'d>> {
        let exponent = repr.exponent;
        match standing {
            Standing::Behind => slot.seals.verify(payload).map(|round| Verdict::Handed {
                slot: s,
                payload,
                exponent,
                round,
            }),
            Standing::Giver | Standing::Ahead => self.last[s]
                .data_round()
                .is_some_and(|(held, _)| held == payload)
                .then_some(Verdict::CaughtUp {
                    slot: s,
                    payload,
                    exponent,
                }),
        }
    }
}

/// Whether `repr` is about the data round after the one `slot` waits for
/// (its packet id, one epoch on), which the other members may have reached
/// on a result this worker lost: only in a joined session, or in the
/// handshake a slot went to in the set of a data round that seemed to
/// refuse it (whose result it still takes). A handshake's next epoch is
/// no data round of its session's: a nudge there is another half of the
/// slot's members ([`split`]).
fn behind_by_one<B>(repr: &Repr, slot: &Slot<B>, lane: &Lane<'_>) -> bool {
    let session = &lane.sessions[usize::from(repr.slot)];
    (session.joined || session.refused.is_some_and(|r| r.0 == slot.packet_id))
        && repr.packet_id == slot.packet_id.wrapping_add(1 << 16)
}

/// Another round's result (packet id `id`) in the set slot `s`'s round
/// went to: counted, and past [`FOREIGN_COPIES`] of them since the round
/// was sent, the slot leaves the set for a handshake in the other one.
fn foreign<B>(slot: &Slot<B>, s: usize, id: u32, stats: &mut Stats) -> Verdict<'static> {
    stats.stale_results += 1;
    if slot.foreign + 1 >= FOREIGN_COPIES {
        stats.rejected += 1;
        return Verdict::MoveOn {
            slot: s,
            packet_id: id,
            own_weight: None,
            stranger: None,
        };
    }
    Verdict::Foreign { slot: s }
}

/// Whether a status is a nudge that finds a slot's members split between
/// its sets (docs/PROTOCOL.md, "Sessions", split slots): this worker's
/// round (a handshake, or a data round of its session) is held in set 1,
/// waiting for members, and another member's query about set 0 says the
/// round there lacks this worker. Each half would wait for the other for
/// good; the rule sends the set-1 half to set 0 (a fixed set, so that the
/// halves never cross each other), as a handshake with the packet id of
/// the round there (its epoch even, as set 0's is). Not a nudge about a
/// data round's next round, which the other members reached on a result
/// this worker lost ([`behind`]); one about its previous round never comes
/// here ([`LastRound`](super::announce::LastRound)).
fn split<B>(repr: &Repr, data: &[u8], slot: &Slot<B>, lane: &Lane<'_>) -> bool {
    if repr.set != 0
        || slot.set != 1
        || !slot.in_flight
        || slot.round >= slot.rounds
        || behind_by_one(repr, slot, lane)
        || !held(slot)
        || repr.worker == lane.config.worker
        || (repr.packet_id >> 16) & 1 != 0
    {
        return false;
    }
    Status::parse(&data[HEADER_LEN..]).is_ok_and(|status| !status.holds(lane.config.worker))
}

/// Whether the switch said it holds `slot`'s round and waits for members,
/// and no other answer came since (it may be asking again: the members
/// of a split slot ask at the same moments, and each one's query crossed
/// the others' nudges).
fn held<B>(slot: &Slot<B>) -> bool {
    slot.asked == Asked::Held || (slot.asked == Asked::Out && slot.held > 0)
}

/// Whether a status is a nudge about the round after the one `slot` waits
/// for, lacking this worker ([`Verdict::Behind`]): the next round's packet
/// id, in the other set. A worker whose copy of a result is lost is the
/// only one who can recover it, and without this it waited for its turn
/// as for any stalled round, while the others' next round, stalled on it,
/// brought their queries too.
fn behind<B>(repr: &Repr, data: &[u8], slot: &Slot<B>, lane: &Lane<'_>) -> bool {
    slot.in_flight
        && slot.round < slot.rounds
        && behind_by_one(repr, slot, lane)
        && repr.set != slot.set
        && repr.worker != lane.config.worker
        && Status::parse(&data[HEADER_LEN..]).is_ok_and(|status| !status.holds(lane.config.worker))
}
