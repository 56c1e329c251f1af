//! The order every worker of a job sends its ready slots in, and how many
//! may be in flight (docs/PROTOCOL.md, "Congestion window").

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use super::recovery::Place;
use super::slot::Slot;

/// How many of the pool's `spare` slots the rounds in recovery (asked
/// about or resent) open to the window now: one each, up to `spare`.
pub(crate) fn spares_in_use<B>(slots: &[Slot<B>], spare: u32) -> usize {
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
/// the order every worker of a job shares: by the slot's round in the
/// all-reduce, then by slot. (Not by the packets a slot has had answered:
/// a member whose handshake was answered more often than the others', or
/// that moved on from more sets, counted its rounds' places further on
/// than theirs, and a member whose window was full then waited for slots
/// the others had put after the one it held back: every member waited
/// for good, 1 seed in 40,000 of `loss,dup,jitter,starve,pause,crash`.
/// A slot's handshake takes the place of the round it comes before.)
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
pub(crate) struct Flight {
    ready: BinaryHeap<Reverse<Place>>,
    /// The place of each slot in flight.
    pub(crate) flying: BTreeSet<Place>,
}

impl Flight {
    /// Every slot with rounds to run, ready for its first.
    pub(crate) fn new<B>(slots: &[Slot<B>]) -> Self {
        Flight {
            ready: slots
                .iter()
                .enumerate()
                .filter(|(_, slot)| slot.rounds > 0)
                .map(|(s, _)| Reverse((0, s)))
                .collect(),
            flying: BTreeSet::new(),
        }
    }

    /// Slot `s`'s packet (at `slot.place`) was answered: it leaves the
    /// flight, and waits for its next round's turn if it has one.
    pub(crate) fn land<B>(&mut self, slot: &mut Slot<B>, s: usize) {
        slot.in_flight = false;
        self.flying.remove(&slot.place);
        if slot.round < slot.rounds {
            self.ready.push(Reverse((slot.round, s)));
        }
    }

    /// The next slot to send: when fewer than `limit` are in flight, or
    /// when it comes before one that is.
    pub(crate) fn take(&mut self, limit: usize) -> Option<Place> {
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
    use crate::protocol::slot::tests::slot;

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

    /// The next slot to send, as the core sends it: in flight at its place.
    fn take(f: &mut Flight, slots: &mut [Slot<()>], limit: usize) -> Option<Place> {
        let place = f.take(limit)?;
        slots[place.1].place = place;
        slots[place.1].in_flight = true;
        Some(place)
    }

    /// Slot `s`'s round was answered (`handshake`: a handshake's, which
    /// leaves the slot at its round).
    fn answer(f: &mut Flight, slots: &mut [Slot<()>], s: usize, handshake: bool) {
        if !handshake {
            slots[s].round += 1;
        }
        f.land(&mut slots[s], s);
    }

    #[test]
    fn the_flight_keeps_the_shared_order_by_round() {
        let mut slots = idle(3);
        let mut f = Flight::new(&slots);
        // A window of 2: slots 0 and 1 go, 2 waits.
        assert_eq!(take(&mut f, &mut slots, 2), Some((0, 0)));
        assert_eq!(take(&mut f, &mut slots, 2), Some((0, 1)));
        assert_eq!(take(&mut f, &mut slots, 2), None);
        // Slot 1's handshake is answered: its first data round keeps its
        // place, before slot 2's first.
        answer(&mut f, &mut slots, 1, true);
        assert_eq!(take(&mut f, &mut slots, 2), Some((0, 1)));
        assert_eq!(take(&mut f, &mut slots, 2), None, "the window is full");
        // Slot 0 lands: slot 2's first round, then the second rounds by slot.
        answer(&mut f, &mut slots, 0, false);
        assert_eq!(take(&mut f, &mut slots, 3), Some((0, 2)));
        assert_eq!(take(&mut f, &mut slots, 3), Some((1, 0)));
        answer(&mut f, &mut slots, 1, false);
        assert_eq!(take(&mut f, &mut slots, 3), Some((1, 1)));
    }

    /// Members that had a slot's handshake answered a different number of
    /// times put its rounds at the same places.
    #[test]
    fn handshakes_answered_again_do_not_move_a_slots_place() {
        let mut slots = idle(2);
        let mut f = Flight::new(&slots);
        assert_eq!(take(&mut f, &mut slots, 2), Some((0, 0)));
        for _ in 0..3 {
            answer(&mut f, &mut slots, 0, true);
            assert_eq!(take(&mut f, &mut slots, 2), Some((0, 0)));
        }
    }

    #[test]
    fn a_slot_ahead_of_the_flight_goes_whatever_the_window_says() {
        let mut slots = idle(3);
        let mut f = Flight::new(&slots);
        for s in 0..3 {
            assert_eq!(take(&mut f, &mut slots, 3), Some((0, s)));
        }
        answer(&mut f, &mut slots, 2, false);
        assert_eq!(take(&mut f, &mut slots, 3), Some((1, 2)));
        answer(&mut f, &mut slots, 1, false);
        answer(&mut f, &mut slots, 0, false);
        // The window shrank to 1 with (1, 2) in flight: (1, 0) and (1, 1)
        // come before it, and another worker may be waiting on them.
        assert_eq!(take(&mut f, &mut slots, 1), Some((1, 0)));
        assert_eq!(take(&mut f, &mut slots, 1), Some((1, 1)));
        assert_eq!(take(&mut f, &mut slots, 1), None, "nothing left");
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
}
