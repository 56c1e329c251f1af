//! The session handshake (docs/PROTOCOL.md, "Sessions"): how a worker
//! makes sure that the rounds it is about to take for its own are not an
//! earlier session's.
//!
//! A job's slots keep their state between sessions: an earlier session's
//! complete results, and, when it stopped part-way, its workers' bits and
//! partial sums. A new session's workers start their round counters again,
//! so their packet ids can equal the old ones, and a contribution from a
//! worker whose bit an old round left set is taken for a retransmission:
//! the switch answers it with the old result, or sums the old values in its
//! place. Nothing in the switch tells two sessions apart, so the workers
//! do, by themselves, once per slot and session:
//!
//! - **Handshake rounds.** A slot's first round in a session is a handshake:
//!   count field 2 (it weighs 2 in the result's count) and, in its payload,
//!   this session's random token in this worker's own field. The result is
//!   the worker's only if its count is 2n (every contribution a handshake)
//!   and its own field holds its own token (its contribution is in the sum:
//!   a contribution taken for a retransmission is not). Float all-reduces
//!   make the exponent round (round 0, which carries no values) the
//!   handshake, so they pay nothing; int32 all-reduces pay one round per
//!   slot per session.
//! - **Moving on.** Any other result for the set a handshake went to is an
//!   earlier session's (or a round it spoiled): the worker leaves that set
//!   and tries again in the other one. Contributing there clears its bit in
//!   the set it left, which is how old state drains.
//! - **Voided rounds.** Workers whose handshake succeeded go on to their
//!   first data round while a worker whose handshake failed tries again in
//!   that same set: the round then mixes a handshake with data. Its count
//!   shows it (between n and 2n), every worker sees the same result, and
//!   all of them go back to a handshake in the other set, the data round
//!   rolled back.
//! - **Packet ids.** Every result a worker leaves a set on sets its epoch to
//!   the one in the result's packet id, plus one: workers that left on the
//!   same result agree on their ids from then on, whatever each had counted.
//!   Joining adds an even number of epochs derived from the session's check
//!   key, so that a session's data ids are its own ([`SlotSession::join`]).
//! - **Members a round apart.** A handshake's field also carries the
//!   slot's position (data results taken, mod 4); members whose positions
//!   differ by one run a catch-up round next, in which a member ahead hands
//!   the round the others lost to them ([`Standing`]).

use std::hash::{BuildHasher, Hasher};

use super::check::{mix, CheckKey};

/// The count field of a handshake contribution: what it weighs in a
/// result's count, so that a round of handshakes counts 2n, a round of data
/// n, and a round that mixes them something in between.
pub const HANDSHAKE_WEIGHT: u16 = 2;

/// A slot's standing in this worker's session, kept across all-reduces.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SlotSession {
    /// Rounds the slot has moved through: its shadow set is `epoch & 1`,
    /// its packet ids `epoch << 16 | slot`.
    pub epoch: u32,
    /// Whether the slot's handshake has succeeded in this session.
    pub joined: bool,
    /// Handshakes the slot has sent (each attempt carries its own token).
    pub attempt: u32,
    /// The session's check key, from the handshake's result
    /// ([`super::check`]).
    pub key: CheckKey,
    /// The packet id of the result the slot last moved on from (a spoiled
    /// round, another session's): a copy of it that comes later
    /// (duplicated, held back) is not a new reason to leave
    /// ([`super::accept`], spoiled rounds).
    pub left: Option<u32>,
    /// Handshakes the slot has sent again at a newer id in the same set,
    /// shut out of a round another session left there ([`Self::jump`]).
    pub jumps: u32,
    /// The packet id and round of the data round whose contribution the
    /// switch seemed to refuse, when the slot went to a handshake in the
    /// same set on it ([`super::recovery::refused`]): that round's own
    /// result, should it come after all, is still taken, as that round's
    /// (the handshake may have rolled the slot back a round).
    pub refused: Option<(u32, u32)>,
    /// Data results the slot has taken in this session, across
    /// all-reduces: its position, which its handshakes carry
    /// ([`Token::write`]).
    pub position: u32,
    /// Set when the slot's last handshake found its members a round
    /// apart: the slot's next round is the catch-up round, and this is
    /// the worker's part in it ([`Standing`]).
    pub catch_up: Option<Standing>,
    /// Per set, the digest of the last handshake round's result the slot
    /// left because its token was not in it: a result with the same
    /// payload later is the same round, which cannot hold an attempt made
    /// since, should a narrow token field say so by chance
    /// ([`super::accept`]).
    pub strangers: [Option<CheckKey>; 2],
}

impl SlotSession {
    /// Leaves set `set`, whose result has packet id `packet_id`, for the
    /// other one, in step with every worker that left on the same result:
    /// the epoch after the result's, or the one after that when the
    /// result's epoch does not match its set (a packet id no worker of the
    /// session wrote, forged or foreign; docs/PROTOCOL.md, "Sessions").
    pub fn move_past(&mut self, packet_id: u32, set: u8) {
        let mut epoch = (packet_id >> 16).wrapping_add(1);
        if epoch & 1 == u32::from(set) {
            epoch = epoch.wrapping_add(1);
        }
        self.epoch = epoch;
    }

    /// Goes past a round of unknown packet id that another session left
    /// complete in the slot's set, in the same set: a handshake whose id
    /// is newer than the round's takes it over (docs/PROTOCOL.md, "Slot
    /// state machine"), one that is not is dropped. The status does not
    /// say the round's id, so each jump is twice the one before (2, 4, ...
    /// up to 2^14 epochs): the ids tried come within 2^15 epochs ahead of
    /// any id (newer in serial-number order) in at most 16 jumps, and no
    /// jump is so long that it passes over that range.
    pub fn jump(&mut self) {
        let step = 2u32 << self.jumps.min(MAX_JUMP_DOUBLINGS);
        self.epoch = self.epoch.wrapping_add(step);
        self.jumps = self.jumps.saturating_add(1);
    }

    /// Joins the session on the handshake result with packet id
    /// `packet_id` in set `set`, whose check key is `key`: the data rounds
    /// go on at an epoch every member derives from the key, after the
    /// handshake's by 1 to 2^14 - 1 (odd: the other set; less than 2^15:
    /// newer in serial-number order). A new session's handshake ids start
    /// at epoch 0 again; its data ids are its own, so that an earlier
    /// session's round left in a set with the same id is rare, and the
    /// switch may drop a data copy of a set's last round once every member
    /// left it (docs/PROTOCOL.md, "Sessions", packet ids).
    pub fn join(&mut self, packet_id: u32, set: u8, key: CheckKey, standing: Option<Standing>) {
        self.move_past(packet_id, set);
        self.catch_up = standing;
        self.epoch = self.epoch.wrapping_add(2 * (key.spread() % 8192));
        self.joined = true;
        self.jumps = 0;
        self.refused = None;
        self.key = key;
    }
}

/// A jump ([`SlotSession::jump`]) is at most 2 << 13 = 2^14 epochs: the
/// ids newer than a round's span 2^15 - 1 epochs, which no jump passes.
const MAX_JUMP_DOUBLINGS: u32 = 13;

/// How many of a slot's earlier handshake attempts a result is checked
/// against: a late copy of one of them is ignored, not taken for an
/// earlier session's state.
const REMEMBERED_ATTEMPTS: u32 = 8;

/// Where a worker's field is in a handshake's payload: element `rank mod
/// K`, bits `(rank / K) * b` up, `b = 32 / ceil(n / K)` (workers beyond K
/// share elements, each with bits of its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    /// The element (lane) of the payload.
    lane: usize,
    /// The field's position and width in the element.
    shift: u32,
    bits: u32,
}

impl Field {
    /// The field of the worker of rank `rank` out of `workers`, K =
    /// `elements`. `None` when there are more than 32 workers per element.
    fn of(rank: u16, workers: u16, elements: u16) -> Option<Field> {
        let k = usize::from(elements.max(1));
        let per_lane = usize::from(workers).div_ceil(k).max(1);
        let bits = u32::try_from(32 / per_lane).ok().filter(|&b| b > 0)?;
        let rank = usize::from(rank);
        Some(Field {
            lane: rank % k,
            shift: (rank / k) as u32 * bits,
            bits,
        })
    }

    fn mask(&self) -> u32 {
        u32::MAX >> (32 - self.bits)
    }

    /// The field's value in `payload` (big-endian int32 elements).
    fn read(&self, payload: &[u8]) -> Option<u32> {
        let at = self.lane * 4;
        let bytes = payload.get(at..at + 4)?;
        let element = u32::from_be_bytes(bytes.try_into().expect("4 bytes"));
        Some((element >> self.shift) & self.mask())
    }

    /// Writes `value` into the field, the rest of the element as it is.
    fn write(&self, payload: &mut [u8], value: u32) {
        let at = self.lane * 4;
        let Some(bytes) = payload.get_mut(at..at + 4) else {
            return;
        };
        let old = u32::from_be_bytes(bytes.try_into().expect("4 bytes"));
        let mask = self.mask() << self.shift;
        let new = (old & !mask) | ((value << self.shift) & mask);
        bytes.copy_from_slice(&new.to_be_bytes());
    }

    /// Whether the field has room for a position ([`POSITION_BITS`] at its
    /// top) beside a token of at least 14 bits.
    fn has_position(&self) -> bool {
        self.bits >= 16
    }

    /// The bits of the field that hold the token.
    fn token_mask(&self) -> u32 {
        if self.has_position() {
            self.mask() >> POSITION_BITS
        } else {
            self.mask()
        }
    }
}

/// Bits at the top of a handshake field that carry the slot's position
/// (the data results it has taken in the session, modulo 4): members a
/// round apart see it in the handshake's result ([`Standing`]). At the
/// top, so that old values summed with a token (small integers, often)
/// change the token's bits and do not pass for it.
const POSITION_BITS: u32 = 2;

/// Where a worker's token goes in a handshake's payload, and what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Token {
    /// The session's random key: attempt `a` carries a hash of it and `a`.
    base: u32,
    field: Field,
}

impl Token {
    /// A fresh token for the worker of rank `rank` out of `workers`, with
    /// K = `elements` elements per packet. `None` when there are more than
    /// 32 workers per element (no room for a field of one bit each).
    pub fn new(rank: u16, workers: u16, elements: u16) -> Option<Token> {
        Self::with_seed(rank, workers, elements, u64::from(random_u32()))
    }

    /// A token whose random key derives from `seed` (the simulator's, so
    /// that one seed replays one run).
    pub fn with_seed(rank: u16, workers: u16, elements: u16, seed: u64) -> Option<Token> {
        Some(Token {
            base: (seed ^ (seed >> 32)) as u32,
            field: Field::of(rank, workers, elements)?,
        })
    }

    /// Bits in the token: how unlikely (2^-bits) it is that an earlier
    /// session's values pass for this worker's token.
    #[cfg(test)]
    pub fn bits(&self) -> u32 {
        self.field.token_mask().count_ones()
    }

    /// The token in attempt `attempt`: a hash, not `base + attempt`, so
    /// that old values summed with a token (small integers, often) do not
    /// turn it into another attempt's.
    fn value(&self, attempt: u32) -> u32 {
        let x = mix(u64::from(self.base) << 32 | u64::from(attempt));
        (x as u32) & self.field.token_mask()
    }

    /// Writes attempt `attempt`'s token into `payload` (big-endian int32
    /// elements, the rest of the element left as it is), with the slot's
    /// `position` (data results taken in the session) where the field has
    /// room for it.
    pub fn write(&self, payload: &mut [u8], attempt: u32, position: u32) {
        let mut value = self.value(attempt);
        if self.field.has_position() {
            value |= (position % 4) << (self.field.bits - POSITION_BITS);
        }
        self.field.write(payload, value);
    }

    /// What a result's `payload` says of this worker's contributions.
    pub fn find(&self, payload: &[u8], attempt: u32) -> Found {
        let Some(field) = self.field.read(payload) else {
            return Found::Absent;
        };
        let token = field & self.field.token_mask();
        let earlier = attempt.saturating_sub(REMEMBERED_ATTEMPTS)..attempt;
        if token == self.value(attempt) {
            Found::Current
        } else if earlier.into_iter().any(|a| token == self.value(a)) {
            Found::Earlier
        } else {
            Found::Absent
        }
    }

    /// Where the worker of rank `rank` stands against the other members
    /// of a handshake's round, from every member's position in `payload`
    /// (all `workers` of them): every member reads the same payload and
    /// comes to the same plan. `None` when the members are level (or the
    /// fields have no room for positions, or the positions are not two
    /// neighbours: nothing a catch-up round can mend).
    pub fn standing(
        &self,
        payload: &[u8],
        rank: u16,
        workers: u16,
        elements: u16,
    ) -> Option<Standing> {
        if !self.field.has_position() {
            return None;
        }
        let position = |r: u16| {
            let f = Field::of(r, workers, elements)?;
            Some(f.read(payload)? >> (f.bits - POSITION_BITS))
        };
        let all: Vec<u32> = (0..workers).map(position).collect::<Option<_>>()?;
        let mine = *all.get(usize::from(rank))?;
        let behind = if all.iter().all(|&p| p == mine || p == (mine + 1) % 4) {
            mine
        } else if all.iter().all(|&p| p == mine || p == (mine + 3) % 4) {
            (mine + 3) % 4
        } else {
            return None;
        };
        let ahead = (behind + 1) % 4;
        let giver = all.iter().position(|&p| p == ahead)?;
        Some(if mine == behind {
            Standing::Behind
        } else if giver == usize::from(rank) {
            Standing::Giver
        } else {
            Standing::Ahead
        })
    }
}

/// Where a member stands after a handshake that found the slot's members
/// a round apart: those that lost round r's result (which the switch no
/// longer holds) behind, those that took it ahead. The next round is a
/// catch-up round (docs/PROTOCOL.md, "Sessions", members a round apart):
/// the giver contributes round r's result as it took it, every other
/// member zeros, and the members behind take the sum as round r's result
/// once it passes the check of round r (the key and packet id they sealed
/// it with).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Lost round r's result: takes it from the catch-up round.
    Behind,
    /// The member ahead of lowest rank: contributes round r's result.
    Giver,
    /// Another member ahead: contributes zeros.
    Ahead,
}

/// Whose the token in a handshake result is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    /// This attempt's: the worker's handshake is in the sum.
    Current,
    /// An earlier attempt's of this session: a late copy of a round the
    /// worker has already left.
    Earlier,
    /// Neither: the sum is not of this session's handshake.
    Absent,
}

/// 32 random bits: the standard library's per-process random hash keys,
/// mixed with the time, so that two sessions of a job (two processes, or
/// two workers of one process) draw different tokens.
fn random_u32() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    let x = h.finish();
    (x ^ (x >> 32)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(k: usize) -> Vec<u8> {
        vec![0; k * 4]
    }

    #[test]
    fn with_k_at_least_n_each_worker_has_a_whole_element() {
        let t = Token::new(3, 8, 64).unwrap();
        assert_eq!((t.field.lane, t.field.shift, t.bits()), (3, 0, 30));
        let mut p = payload(64);
        t.write(&mut p, 0, 5);
        assert_eq!(t.find(&p, 0), Found::Current);
        assert_eq!(t.find(&p, 1), Found::Earlier);
        assert_eq!(t.find(&payload(64), 0), Found::Absent);
        // The token went into element 3 only.
        assert!(p.chunks(4).enumerate().all(|(i, e)| i == 3 || e == [0; 4]));
    }

    #[test]
    fn workers_beyond_k_share_elements_with_fields_of_their_own() {
        // 10 workers over K = 4: 3 per element, 10 bits each.
        let tokens: Vec<Token> = (0..10).map(|r| Token::new(r, 10, 4).unwrap()).collect();
        assert_eq!(tokens[9].bits(), 10);
        assert_eq!((tokens[9].field.lane, tokens[9].field.shift), (1, 20));
        // Summed as the switch sums them: each finds its own.
        let mut sum = [0i32; 4];
        for t in &tokens {
            let mut p = payload(4);
            t.write(&mut p, 2, 1);
            for (s, e) in sum.iter_mut().zip(p.chunks(4)) {
                *s = s.wrapping_add(i32::from_be_bytes(e.try_into().unwrap()));
            }
        }
        let bytes: Vec<u8> = sum.iter().flat_map(|v| v.to_be_bytes()).collect();
        assert!(tokens.iter().all(|t| t.find(&bytes, 2) == Found::Current));
    }

    #[test]
    fn old_values_summed_with_a_token_do_not_pass_for_another_attempt() {
        // A handshake added to an earlier session's data (-1 was the case
        // that once read as the previous attempt's token): the slot must
        // move on, not wait for a round that will not come.
        let t = Token::new(0, 3, 64).unwrap();
        for attempt in 1..20 {
            for old in [-2i32, -1, 1, 2] {
                let mut p = payload(64);
                t.write(&mut p, attempt, 0);
                let e = i32::from_be_bytes(p[..4].try_into().unwrap()).wrapping_add(old);
                p[..4].copy_from_slice(&e.to_be_bytes());
                assert_eq!(t.find(&p, attempt), Found::Absent, "{attempt} {old}");
            }
        }
    }

    /// Every member's handshake field, summed as the switch sums them,
    /// at the positions given.
    fn handshake(workers: u16, k: u16, positions: &[u32]) -> Vec<u8> {
        let mut sum = vec![0u32; usize::from(k)];
        for (r, &p) in positions.iter().enumerate() {
            let t = Token::with_seed(r as u16, workers, k, r as u64 * 77).unwrap();
            let mut bytes = payload(usize::from(k));
            t.write(&mut bytes, 0, p);
            for (s, e) in sum.iter_mut().zip(bytes.chunks(4)) {
                *s = s.wrapping_add(u32::from_be_bytes(e.try_into().unwrap()));
            }
        }
        sum.iter().flat_map(|v| v.to_be_bytes()).collect()
    }

    fn standings(workers: u16, k: u16, positions: &[u32]) -> Vec<Option<Standing>> {
        let p = handshake(workers, k, positions);
        let t = Token::with_seed(0, workers, k, 1).unwrap();
        (0..workers)
            .map(|r| t.standing(&p, r, workers, k))
            .collect()
    }

    /// Every member reads the same plan from the handshake's result: the
    /// members at p + 1 (mod 4) are ahead, the one of lowest rank gives,
    /// whatever the positions' wrap.
    #[test]
    fn members_a_round_apart_read_who_gives_and_who_takes() {
        use Standing::{Ahead, Behind, Giver};
        assert_eq!(standings(3, 64, &[7, 7, 7]), [None, None, None]);
        assert_eq!(standings(2, 64, &[4, 5]), [Some(Behind), Some(Giver)]);
        assert_eq!(
            standings(4, 64, &[3, 4, 4, 3]),
            [Some(Behind), Some(Giver), Some(Ahead), Some(Behind)]
        );
        // Fields shared within elements (10 workers over K = 8: 16 bits each).
        let ten = standings(10, 8, &[9, 9, 9, 9, 9, 9, 9, 9, 9, 10]);
        assert_eq!(ten[9], Some(Giver));
        assert!(ten[..9].iter().all(|s| *s == Some(Behind)));
        // Two rounds apart, or three positions: nothing a catch-up mends.
        assert_eq!(standings(2, 64, &[4, 6]), [None, None]);
        assert_eq!(standings(3, 64, &[4, 5, 6]), [None, None, None]);
        // No room for positions (fields of 10 bits): no plan.
        assert_eq!(standings(10, 4, &[1; 10]), [None; 10]);
    }

    /// The position does not change what a field says of its token.
    #[test]
    fn a_position_leaves_the_token_found() {
        let t = Token::new(0, 2, 64).unwrap();
        for position in 0..8 {
            let mut p = payload(64);
            t.write(&mut p, 3, position);
            assert_eq!(t.find(&p, 3), Found::Current);
            assert_eq!(t.find(&p, 4), Found::Earlier);
            assert_eq!(t.find(&p, 12), Found::Absent);
        }
    }

    #[test]
    fn too_many_workers_per_element_leave_no_field() {
        assert!(Token::new(0, 33, 1).is_none());
        assert_eq!(Token::new(31, 32, 1).unwrap().bits(), 1);
    }

    #[test]
    fn a_token_overwrites_only_its_own_field() {
        let t = Token::new(1, 2, 1).unwrap();
        let mut p = 0x1234_5678u32.to_be_bytes().to_vec();
        t.write(&mut p, 0, 0);
        let e = u32::from_be_bytes(p[..4].try_into().unwrap());
        assert_eq!(e & 0xffff, 0x5678, "worker 0's half is untouched");
        assert_eq!(e >> 16, t.value(0));
    }

    #[test]
    fn moving_past_a_result_takes_its_epoch_and_the_other_set() {
        let mut s = SlotSession::default();
        s.move_past(7 << 16 | 3, 1);
        assert_eq!(s.epoch, 8);
        s.move_past(u32::MAX, 1);
        assert_eq!(s.epoch, 0x1_0000);
        // A packet id of epoch 1 found in set 0 (written by no worker of
        // the session): epoch 2 would be set 0 again.
        s.move_past(1 << 16, 0);
        assert_eq!(s.epoch, 3);
        assert_eq!(s.epoch & 1, 1, "the other set");
    }

    /// Whatever the round's id, a slot shut out of it gets ahead of it (in
    /// serial-number order: newer by less than 2^31) within 16 jumps, in
    /// the same set, and joining starts the jumps over.
    #[test]
    fn jumps_get_ahead_of_any_round_in_the_same_set() {
        let slot = 5u32;
        for start in [0u32, 1, 0x7fff, 0xfffe] {
            for round_epoch in (0..0x1_0000u32).step_by(97) {
                let round = round_epoch << 16 | slot;
                let mut s = SlotSession {
                    epoch: start,
                    ..SlotSession::default()
                };
                let newer = (0..16).any(|_| {
                    s.jump();
                    assert_eq!(s.epoch & 1, start & 1, "the same set");
                    let id = s.epoch.wrapping_shl(16) | slot;
                    (id.wrapping_sub(round) as i32) > 0
                });
                assert!(newer, "from epoch {start:#x}: round {round:#x}");
            }
        }
        let mut s = SlotSession::default();
        s.jump();
        s.jump();
        assert_eq!((s.epoch, s.jumps), (6, 2));
        s.join(s.epoch << 16, 0, CheckKey::default(), None);
        assert_eq!(s.jumps, 0);
    }

    #[test]
    fn two_tokens_differ() {
        let a = Token::new(0, 1, 1).unwrap();
        let b = Token::new(0, 1, 1).unwrap();
        assert_ne!(a.base, b.base);
    }
}
