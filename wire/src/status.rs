//! The status block: what a switch answers a worker's query with
//! (docs/PROTOCOL.md, "Loss recovery").
//!
//! ```text
//!  0                               8               10              12
//! +-------------------------------+---------------+---------------+
//! |  bitmap: members in the set   | members (n)   | flags         |
//! +-------------------------------+---------------+---------------+
//! ```
//!
//! It follows the 24-byte header of a status packet (kind 6), whose
//! `count` is the set's contributor count and whose packet id echoes the
//! query's. With both, a worker tells the three cases apart: its bit clear
//! (its contribution was lost: send it again), its bit set and the round
//! complete (count = n: its result was lost: send again, and the stored
//! result comes back), its bit set and the round still summing (wait for
//! the members whose bits are clear).
//!
//! Flags: bit 0 is [`ANSWERED`]; the others are zero.

use crate::{Error, Result};

/// Bytes of the status block.
pub const STATUS_LEN: usize = 12;

/// A query's count field: 1 asks the switch to send its status to the
/// members the round waits for as well, when the set holds the asker's
/// contribution (a nudge); 0 asks for the asker alone. A switch that does
/// not nudge answers the asker alone either way.
pub const QUERY_NUDGE: u16 = 1;

/// Status flag: the round is complete with the asker in it, and the switch
/// has already answered two of the asker's queries about this round with
/// the stored result (docs/PROTOCOL.md, "The amplification bound"). It
/// sends the result for at most two queries per member and round; after
/// that, the asker gets it back by resending its contribution, which is as
/// large as the result, so that a flood of forged queries brings back
/// statuses, not results.
pub const ANSWERED: u16 = 1;

/// A status block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The set's worker bitmap: bit w is set while member w's contribution
    /// to the set's round is held (a member that moved on to the slot's
    /// other set has its bit cleared here).
    pub bitmap: u64,
    /// The job's member count at this switch, n.
    pub members: u16,
    /// Whether the stored result was sent for one of the asker's queries
    /// about this round already ([`ANSWERED`]).
    pub answered: bool,
}

impl Status {
    /// Reads a status block (a status packet's payload).
    pub fn parse(payload: &[u8]) -> Result<Status> {
        let Ok(block) = <&[u8; STATUS_LEN]>::try_from(payload) else {
            return Err(Error::LengthMismatch {
                len: crate::HEADER_LEN + payload.len(),
                expected: crate::HEADER_LEN + STATUS_LEN,
            });
        };
        let flags = u16::from_be_bytes([block[10], block[11]]);
        if flags & !ANSWERED != 0 {
            return Err(Error::ReservedBits);
        }
        let bitmap = u64::from_be_bytes(block[0..8].try_into().expect("8 bytes"));
        let members = u16::from_be_bytes([block[8], block[9]]);
        Ok(Status {
            bitmap,
            members,
            answered: flags & ANSWERED != 0,
        })
    }

    /// Writes the block into `payload` (its first [`STATUS_LEN`] bytes).
    pub fn emit(&self, payload: &mut [u8]) {
        payload[0..8].copy_from_slice(&self.bitmap.to_be_bytes());
        payload[8..10].copy_from_slice(&self.members.to_be_bytes());
        let flags = if self.answered { ANSWERED } else { 0 };
        payload[10..12].copy_from_slice(&flags.to_be_bytes());
    }

    /// Every member's bit: the low `members` bits.
    pub fn member_mask(&self) -> u64 {
        match self.members {
            0 => 0,
            n if n >= 64 => u64::MAX,
            n => (1u64 << n) - 1,
        }
    }

    /// Whether member `worker`'s contribution is held.
    pub fn holds(&self, worker: u16) -> bool {
        worker < 64 && self.bitmap & (1u64 << worker) != 0
    }

    /// The members whose contribution the set does not hold, as ids.
    pub fn missing(&self) -> impl Iterator<Item = u16> {
        members(self.member_mask() & !self.bitmap)
    }
}

/// The member ids whose bits are set in `bitmap`, in order.
pub fn members(bitmap: u64) -> impl Iterator<Item = u16> {
    (0..64u16).filter(move |&w| bitmap & (1u64 << w) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Members 0, 2 and 3 of 5 held.
    static BLOCK: [u8; STATUS_LEN] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0d, // bitmap
        0x00, 0x05, 0x00, 0x00, // members, flags
    ];

    /// Members 0 to 3 of 4 held, the asker's query answered already.
    static ANSWERED_BLOCK: [u8; STATUS_LEN] = [
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0f, // bitmap
        0x00, 0x04, 0x00, 0x01, // members, flags: ANSWERED
    ];

    #[test]
    fn parse_and_emit_the_fixture() {
        let s = Status::parse(&BLOCK).unwrap();
        assert_eq!(
            s,
            Status {
                bitmap: 0b1101,
                members: 5,
                answered: false,
            }
        );
        let mut out = [0xffu8; STATUS_LEN];
        s.emit(&mut out);
        assert_eq!(out, BLOCK);
        assert!(s.holds(0) && !s.holds(1) && s.holds(3) && !s.holds(64));
        assert_eq!(s.missing().collect::<Vec<_>>(), [1, 4]);
        assert_eq!(members(0b10100).collect::<Vec<_>>(), [2, 4]);
    }

    #[test]
    fn the_answered_flag_round_trips() {
        let s = Status::parse(&ANSWERED_BLOCK).unwrap();
        assert!(s.answered && s.holds(3) && s.missing().count() == 0);
        let mut out = [0u8; STATUS_LEN];
        s.emit(&mut out);
        assert_eq!(out, ANSWERED_BLOCK);
    }

    #[test]
    fn bad_blocks_are_refused() {
        assert!(matches!(
            Status::parse(&BLOCK[..11]),
            Err(Error::LengthMismatch { len: 35, .. })
        ));
        let mut b = BLOCK;
        b[11] = 2;
        assert_eq!(Status::parse(&b), Err(Error::ReservedBits));
        b[10] = 0x80;
        b[11] = 1;
        assert_eq!(Status::parse(&b), Err(Error::ReservedBits));
    }

    #[test]
    fn the_member_mask_covers_64_members() {
        let all = Status {
            bitmap: 0,
            members: 64,
            answered: false,
        };
        assert_eq!(all.member_mask(), u64::MAX);
        assert_eq!(all.missing().count(), 64);
    }
}
