//! A switch that lost its state mid all-reduce (a restart): the workers
//! of a slot may be a round apart, those that had round r's result
//! waiting in round r + 1 for those that lost it, who resend round r into
//! a set the restart emptied. Neither round can complete. A worker keeps
//! each slot's last result ([`LastRound`]); when the switch has held its
//! round r + 1 a while, it asks about round r (a query naming that round's
//! set and packet id), and if the switch says that set's round is not
//! complete, it announces the result it holds. A nudge about a round whose
//! result it holds (a member that lost it asks about it, and the set
//! lacks this worker) says the same, and is answered the same way, also
//! by a worker whose slot has no round left in this all-reduce (kind 7, docs/PROTOCOL.md,
//! "A switch that lost its state"). The set takes it for the members that
//! have not moved on, whose resends then bring it back as a stored
//! result.
//!
//! Nothing here is trusted more than a contribution: an announcement is
//! admitted from the member's endpoint only, and a set whose round is
//! complete, or that sums another round, ignores it.

use inagg_wire::{Kind, Repr};

use super::slot::Slot;
use super::Lane;

/// Held answers about a round after which the worker asks about the
/// previous round (and its query asks for nudges): the 3rd, then every
/// 4th, each member of the round at its own count (`after`: its place in
/// the turns after the member whose turn it is to speak for the round,
/// [`super::recovery::speaker`]), so that, of the members a round keeps
/// waiting, about one asks at a time. Any one member that has the
/// previous round's result can announce it, and a round held this long
/// is usually held by a slow member, not a restart: with every member
/// asking at the 2nd answer, a descheduled member's rounds cost each
/// member waiting on it a query and a status more (`inagg sim protocol
/// --faults starve`, 500 seeds: 17,266 queries and statuses, 13,345
/// with the turns). At heavy loss a query, its nudge or the announcement is often
/// lost, so again and again while the round stays held (held answers come
/// at most every few round trips, each later than the last).
pub(super) fn probes_previous(held: u32, after: u16) -> bool {
    held >= 3 && (held - 3) % 4 == u32::from(after % 4)
}

/// A slot's last completed round: its set, packet id, exponent, weight
/// and the result's payload (K big-endian int32s, as the switch sent it);
/// and, when that round was a handshake, the last data round's payload and
/// exponent, which a catch-up round hands to the members that lost it
/// ([`super::session::Standing`]).
#[derive(Debug, Clone, Default)]
pub struct LastRound {
    pub(crate) set: u8,
    pub(crate) packet_id: u32,
    pub(crate) exponent: u8,
    pub(crate) weight: u16,
    pub(crate) payload: Vec<u8>,
    pub(crate) valid: bool,
    /// Whether `payload` is a data round's (else a handshake's).
    data: bool,
    /// The last data round's payload and exponent while `payload` holds a
    /// handshake's: moved here, not copied, when a handshake's result is
    /// kept (data results, one per packet, cost no copy more).
    stashed: Option<(Vec<u8>, u8)>,
}

/// A kept result's set, packet id, exponent and weight.
type Head = (u8, u32, u8, u16);

impl LastRound {
    /// Keeps a data round's result.
    pub(super) fn keep(
        &mut self,
        set: u8,
        packet_id: u32,
        exponent: u8,
        weight: u16,
        payload: &[u8],
    ) {
        self.set = set;
        self.packet_id = packet_id;
        self.exponent = exponent;
        self.weight = weight;
        self.payload.clear();
        self.payload.extend_from_slice(payload);
        self.valid = true;
        self.data = true;
    }

    /// Keeps a handshake's result (its set, packet id, exponent and
    /// weight, and its payload), the last data round's aside.
    pub(super) fn keep_handshake(&mut self, (set, id, exponent, weight): Head, payload: &[u8]) {
        if self.data {
            let old = std::mem::take(&mut self.payload);
            self.stashed = Some((old, self.exponent));
        }
        self.keep(set, id, exponent, weight, payload);
        self.data = false;
    }

    /// The last data round's result (payload, exponent), if the slot took
    /// one in this session.
    pub(super) fn data_round(&self) -> Option<(&[u8], u8)> {
        if self.valid && self.data {
            Some((&self.payload, self.exponent))
        } else {
            self.stashed.as_ref().map(|(p, e)| (p.as_slice(), *e))
        }
    }

    /// Whether this is the round before `slot`'s round in flight: in the
    /// other set (a slot alternates sets round by round).
    pub(super) fn precedes<B>(&self, slot: &Slot<B>) -> bool {
        self.valid && self.set != slot.set && slot.in_flight
    }

    /// Whether `status` is about this round, and not about `slot`'s round
    /// in flight: a status the switch sent about a round whose result this
    /// worker holds.
    pub(super) fn is_of<B>(&self, status: &Repr, slot: &Slot<B>) -> bool {
        self.valid
            && (status.set, status.packet_id) == (self.set, self.packet_id)
            && !(slot.in_flight && slot.packet_id == status.packet_id)
    }
}

impl Lane<'_> {
    /// The header of slot `s`'s query about its previous round.
    pub(super) fn previous_query(&self, s: usize) -> Repr {
        let last = &self.last[s];
        self.query(s, last.set, last.packet_id, 0)
    }

    /// The header of slot `s`'s announcement of its previous round.
    pub(super) fn announcement(&self, s: usize) -> Repr {
        let last = &self.last[s];
        Repr {
            kind: Kind::Announce,
            exponent: last.exponent,
            count: last.weight,
            ..self.previous_query(s)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::probes_previous;

    /// Each member of a held round asks about the previous round every 4th
    /// held answer from its 3rd, at a count of its own: 4 members, one at
    /// each count; 6 members, at most two.
    #[test]
    fn members_take_turns_to_ask_about_the_previous_round() {
        let askers = |held: u32, n: u16| (0..n).filter(|&a| probes_previous(held, a)).count();
        for held in 0..3 {
            assert_eq!(askers(held, 4), 0, "held {held}: too early");
        }
        for held in 3..40 {
            assert_eq!(askers(held, 4), 1, "held {held}");
            assert!(askers(held, 6) <= 2, "held {held}");
        }
        let speaker: Vec<u32> = (0..20).filter(|&h| probes_previous(h, 0)).collect();
        assert_eq!(speaker, [3, 7, 11, 15, 19]);
        assert!(probes_previous(4, 1) && probes_previous(8, 1) && !probes_previous(7, 1));
    }
}
