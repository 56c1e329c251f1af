//! What a received datagram means to an all-reduce: the result a slot
//! waits for, a handshake's, a status or a nudge, or something to count
//! and ignore.

use inagg_wire::status::Status;
use inagg_wire::{Kind, Packet, Repr, HEADER_LEN};

use super::session::Found;
use super::slot::Slot;
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
            return Verdict::Previous {
                slot: s,
                count: repr.count,
            };
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
}
