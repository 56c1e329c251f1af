//! The check lane (docs/PROTOCOL.md, "The check lane"): how a worker knows
//! that a result is the sum of its session's contributions and nothing
//! else, before it hands the result to its user.
//!
//! The switch sums every element of a payload alike, wrapping at 32 bits.
//! A worker spends the last element of each data packet on a *check*: a
//! keyed linear combination of the packet's values, `c = Σ a_j · x_j`
//! (mod 2^32), whose coefficients derive from a key only the session's
//! members hold, the round's packet id and the slot's round
//! ([`CheckKey::check`] says how). Sums of checks are checks of sums, so
//! an honest round's result carries in its last element
//! `Σ_i c_i = Σ_j a_j · S_j`, which every member can recompute from the
//! values it got. A contribution the round should not hold (replayed from
//! an earlier session, whose key differs; from an earlier round, whose
//! coefficients differ; forged by someone without the key; a late copy
//! summed into another round) breaks the equation but with probability
//! about 2^-(32 - v), where 2^v divides every change it makes to the sum.
//!
//! Each member also adds a mask of its own, `g(rank) - g(rank + 1 mod n)`
//! with `g` keyed as the coefficients are: the masks of all n members
//! cancel, those of any other multiset of members do not. So a round
//! verifies only with every member's contribution once: not with one
//! member's contribution summed twice (a copy sent from another member's
//! endpoint), which the linear part alone would let through.
//!
//! Member 0 adds one more term, the round's *offset* (odd, so never zero):
//! an honest round's check is `Σ_j a_j · S_j` plus the offset. Without it
//! a payload of zeros, lane included, would verify in every round under
//! every key, and zeros are what an emptied set, a round without values
//! or a catch-up round with nothing in it sums to.
//!
//! The key is the session's: the whole payload of the slot's handshake
//! result, which holds a fresh random token of every member and which only
//! the members receive (docs/PROTOCOL.md, "Sessions").

/// Mixes `x` into 64 well-spread bits (splitmix64's finaliser).
pub(super) fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Values per block of the check: a block shares its outer coefficient.
const BLOCK: usize = 64;

/// `Σ u_i x_i` (mod 2^32) over one block's big-endian values.
#[inline(always)]
fn block_sum(u: &[u32; BLOCK], block: &[u8]) -> u32 {
    block.chunks_exact(4).zip(u).fold(0u32, |acc, (x, u)| {
        let x = u32::from_be_bytes(x.try_into().expect("4 bytes"));
        acc.wrapping_add(u.wrapping_mul(x))
    })
}

/// [`block_sum`], compiled for AVX2 (the same code, vectorized 8 wide).
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn block_sum_avx2(u: &[u32; BLOCK], block: &[u8]) -> u32 {
    block_sum(u, block)
}

/// The fastest [`block_sum`] this CPU runs.
fn block_sum_fn() -> fn(&[u32; BLOCK], &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if inagg_wire::simd::available() {
        // SAFETY: the CPU has AVX2.
        return |u, block| unsafe { block_sum_avx2(u, block) };
    }
    block_sum
}

/// A slot's check key for one session: all members derive the same one
/// from the same handshake result.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CheckKey(u64);

impl CheckKey {
    /// The key of a session whose handshake result had `payload` (every
    /// member's token in its own field).
    pub fn from_handshake(payload: &[u8]) -> CheckKey {
        let mut h = 0x6a09_e667_f3bc_c908u64;
        for word in payload.chunks(8) {
            let mut b = [0u8; 8];
            b[..word.len()].copy_from_slice(word);
            h = mix(h ^ u64::from_be_bytes(b)).wrapping_add(0x9e37_79b9_7f4a_7c15);
        }
        CheckKey(h)
    }

    /// A number every member of the session derives from the key, apart
    /// from the check's own streams: where its data rounds' epochs start
    /// ([`super::session::SlotSession::join`]).
    pub fn spread(&self) -> u32 {
        (mix(self.0 ^ 0x5bd1_e995_0000_0001) >> 40) as u32
    }

    /// The stream of coefficients and masks of the round with packet id
    /// `packet_id` that is the slot's round `round` of its all-reduce.
    fn round(&self, (packet_id, round): (u32, u32)) -> u64 {
        let id = u64::from(packet_id) << 32 | u64::from(round);
        mix(self.0 ^ id.wrapping_mul(0xd6e8_feb8_6659_fd93))
    }

    /// Member `rank`'s share of the masks of the round `round`.
    fn mask(round: u64, rank: u32) -> u32 {
        mix(round
            ^ u64::from(rank)
                .wrapping_mul(0xa076_1d64_78bd_642f)
                .wrapping_add(1)) as u32
    }

    /// The round's offset: an odd number (never zero) that member 0 adds
    /// to its check, so that an honest sum's check is its linear part
    /// plus the offset. Without it a payload of zeros (the values and the
    /// lane) would pass every round of every key: the linear part of
    /// zeros is zero and the masks cancel. Zeros are what a set emptied
    /// by a restart, a round without values (a float all-reduce's
    /// exponent round) or a catch-up round whose giver had nothing to
    /// give hold, and the check must tell them from a round's sum.
    fn offset(round: u64) -> u32 {
        Self::mask(round, u32::MAX) | 1
    }

    /// What member `rank` of `workers` adds to its check in round `round`:
    /// the masks of all members sum to zero, and member 0 adds the offset.
    fn share(round: u64, rank: u16, workers: u16) -> u32 {
        let next = (u32::from(rank) + 1) % u32::from(workers.max(1));
        let masks = Self::mask(round, u32::from(rank)).wrapping_sub(Self::mask(round, next));
        if rank == 0 {
            masks.wrapping_add(Self::offset(round))
        } else {
            masks
        }
    }

    /// The keyed linear part of the check of `values` (big-endian int32
    /// elements, the payload without its check lane) in `round`: a packet
    /// id and the slot's round of its all-reduce, so that members out of
    /// step (one resending a round the others have taken, under the same
    /// packet id) cannot pass for a round.
    ///
    /// The coefficient of value `j` is `u[j mod 64] · v[j / 64]`, both
    /// vectors drawn from the round's stream: a blind change `d` passes
    /// only if every block's `Σ u_i d_i` and then `Σ v_b (...)` vanish,
    /// each as unlikely as for independent coefficients, and the inner
    /// sums are a multiply-add per value that the compiler vectorizes
    /// (drawing a coefficient per value cost a quarter of a worker's
    /// throughput at K = 16370).
    pub fn check(&self, round: (u32, u32), values: &[u8]) -> u32 {
        linear(self.round(round), values)
    }

    /// Writes member `rank`'s (of `workers`) check of `payload`'s values
    /// in `round` into its last element.
    pub fn seal(&self, round: (u32, u32), (rank, workers): (u16, u16), payload: &mut [u8]) {
        let Some(at) = payload.len().checked_sub(4) else {
            return;
        };
        let stream = self.round(round);
        let check = linear(stream, &payload[..at]).wrapping_add(Self::share(stream, rank, workers));
        payload[at..].copy_from_slice(&check.to_be_bytes());
    }

    /// Whether `payload`'s last element is the check of its values: a sum
    /// of every member's contribution to `round`, sealed with this key.
    pub fn verify(&self, round: (u32, u32), payload: &[u8]) -> bool {
        let Some(at) = payload.len().checked_sub(4) else {
            return false;
        };
        let lane = u32::from_be_bytes(payload[at..].try_into().expect("4 bytes"));
        let offset = Self::offset(self.round(round));
        lane == self.check(round, &payload[..at]).wrapping_add(offset)
    }
}

/// The keyed linear part of a check ([`CheckKey::check`]), from the
/// round's stream `state`.
fn linear(mut state: u64, values: &[u8]) -> u32 {
    let mut next = || {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(state)
    };
    let mut u = [0u32; BLOCK];
    for pair in u.chunks_exact_mut(2) {
        let r = next();
        pair[0] = r as u32;
        pair[1] = (r >> 32) as u32;
    }
    let inner = block_sum_fn();
    values.chunks(BLOCK * 4).fold(0u32, |sum, block| {
        let v = next() as u32;
        sum.wrapping_add(v.wrapping_mul(inner(&u, block)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(values: &[i32]) -> Vec<u8> {
        let mut p: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        p.extend_from_slice(&[0; 4]);
        p
    }

    /// Element-wise wrapping sums, as the switch makes them.
    fn sum(payloads: &[Vec<u8>]) -> Vec<u8> {
        let mut out = vec![0u8; payloads[0].len()];
        for p in payloads {
            for (o, e) in out.chunks_exact_mut(4).zip(p.chunks_exact(4)) {
                let s = u32::from_be_bytes(o[..].try_into().unwrap())
                    .wrapping_add(u32::from_be_bytes(e.try_into().unwrap()));
                o.copy_from_slice(&s.to_be_bytes());
            }
        }
        out
    }

    fn key(seed: u8) -> CheckKey {
        CheckKey::from_handshake(&[seed, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
    }

    #[test]
    fn a_sum_of_sealed_contributions_verifies() {
        let k = key(1);
        let mut parts = vec![
            payload(&[1, -2, i32::MAX, 7, 0]),
            payload(&[5, 6, 1, i32::MIN, 3]),
            payload(&[-9, 0, 0, -1, 11]),
        ];
        for (rank, p) in parts.iter_mut().enumerate() {
            k.seal((0x0003_0002, 5), (rank as u16, 3), p);
        }
        assert!(
            k.verify((0x0003_0002, 5), &sum(&parts)),
            "wrapping sums too"
        );
    }

    #[test]
    fn a_contribution_sealed_otherwise_breaks_the_sum() {
        let (k, id) = (key(1), (0x0003_0002, 5));
        let seal = |k: CheckKey, id: (u32, u32), rank: u16, values: &[i32]| {
            let mut p = payload(values);
            k.seal(id, (rank, 2), &mut p);
            p
        };
        let honest = [seal(k, id, 0, &[1, 2, 3]), seal(k, id, 1, &[4, 5, 6])];
        assert!(k.verify(id, &sum(&honest)));
        let cases = [
            ("an earlier session's key", seal(key(2), id, 1, &[4, 5, 6])),
            (
                "an earlier round's id",
                seal(k, (0x0001_0002, 5), 1, &[4, 5, 6]),
            ),
            (
                "another slot's id",
                seal(k, (0x0003_0003, 5), 1, &[4, 5, 6]),
            ),
            (
                "another round, the same id",
                seal(k, (0x0003_0002, 4), 1, &[4, 5, 6]),
            ),
            ("member 0's copy in member 1's place", honest[0].clone()),
            ("a forger's guess", payload(&[4, 5, 6])),
        ];
        for (what, other) in cases {
            let mixed = sum(&[honest[0].clone(), other]);
            assert!(!k.verify(id, &mixed), "{what}");
        }
        // And one contribution more or less than the round had.
        let three = [honest[0].clone(), honest[1].clone(), honest[1].clone()];
        assert!(!k.verify(id, &sum(&three)));
        assert!(!k.verify(id, &honest[1]));
    }

    #[test]
    fn keys_differ_with_every_token() {
        let a = CheckKey::from_handshake(&[0, 0, 0, 1, 0, 0, 0, 2]);
        let b = CheckKey::from_handshake(&[0, 0, 0, 1, 0, 0, 0, 3]);
        let c = CheckKey::from_handshake(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0]);
        assert_ne!(a, b);
        assert_ne!(a, c, "a zero lane more is another payload");
    }

    #[test]
    fn a_lone_member_needs_no_mask_and_a_payload_without_values_never_verifies() {
        let mut p = payload(&[3, 0, 9]);
        key(1).seal((7, 0), (0, 1), &mut p);
        assert!(key(1).verify((7, 0), &p));
        assert!(!key(1).verify((7, 0), &[]));
    }

    /// The vectorized sum is the scalar one, whole blocks and a tail.
    #[test]
    fn every_block_sum_agrees() {
        let mut u = [0u32; BLOCK];
        for (i, c) in u.iter_mut().enumerate() {
            *c = mix(i as u64) as u32;
        }
        let values: Vec<u8> = (0..(BLOCK * 4 + 37) as u32)
            .flat_map(|i| (i.wrapping_mul(0x9e37_79b9) ^ 0xdead_beef).to_be_bytes())
            .collect();
        for block in values.chunks(BLOCK * 4) {
            assert_eq!(block_sum_fn()(&u, block), block_sum(&u, block));
        }
    }

    /// Zeros, lane included, are no round's sum (an emptied set, a round
    /// without values, a catch-up round whose giver had nothing), while an
    /// honest round of zeros verifies.
    #[test]
    fn a_payload_of_zeros_is_no_rounds_sum() {
        for (id, workers) in [((0x0001_0000, 0), 1), ((0x8a6_0000, 1), 5), ((7, 3), 2)] {
            let zeros = payload(&[0, 0, 0, 0]);
            assert!(!key(1).verify(id, &zeros), "{id:?}");
            let parts: Vec<Vec<u8>> = (0..workers)
                .map(|rank| {
                    let mut p = zeros.clone();
                    key(1).seal(id, (rank, workers), &mut p);
                    p
                })
                .collect();
            assert!(key(1).verify(id, &sum(&parts)), "{id:?}");
        }
    }

    /// Byte fixture: the check is part of the wire contract (the lane a
    /// worker of another implementation must fill in the same way).
    #[test]
    fn the_check_of_a_fixed_payload_is_stable() {
        let k = CheckKey::from_handshake(&[0, 0, 0, 1, 0, 0, 0, 2]);
        let mut p = payload(&[1, 2, 3]);
        k.seal((0x0001_0000, 2), (1, 4), &mut p);
        assert_eq!(p[12..], FIXTURE.to_be_bytes());
        let mut p = payload(&[1, 2, 3]);
        k.seal((0x0001_0000, 2), (0, 4), &mut p);
        assert_eq!(p[12..], FIXTURE_MEMBER_0.to_be_bytes(), "with the offset");
    }
    const FIXTURE: u32 = 0x70a3_b214;
    const FIXTURE_MEMBER_0: u32 = 0x8287_93e0;
}
