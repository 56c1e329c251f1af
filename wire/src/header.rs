//! The inagg aggregation header: a zero-copy [`Packet`] view and a plain [`Repr`].
//!
//! Byte layout (all multi-byte fields big-endian; docs/PROTOCOL.md is the
//! contract, this module its executable form):
//!
//! ```text
//!  0       1       2       3       4               6               8
//! +-------+-------+-------+-------+---------------+---------------+
//! |version| kind  | flags |priority|    job id     |     slot      |
//! +-------+-------+-------+-------+---------------+---------------+
//! |   worker id   |  generation   |expont.|rsvd(0)|  contributors |
//! +---------------+---------------+-------+-------+---------------+
//! |   elements    |  reserved (0) |          packet id            |
//! +---------------+---------------+-------------------------------+
//! 24: payload, `elements` x int32 big-endian
//! ```
//!
//! Use [`Packet::new_checked`] for anything read off the network: it checks
//! that the buffer holds the whole header and the payload the header
//! announces, so no accessor can panic afterwards. [`Packet::new_unchecked`]
//! is for buffers this process built itself.

use core::fmt;

use crate::{Error, Result};

/// The protocol version this crate speaks.
pub const VERSION: u8 = 1;

/// Bytes of one payload element (an int32).
pub const ELEMENT_LEN: usize = 4;

/// The largest element count a header can describe that still fits one UDP
/// datagram over IPv4 (65507 bytes of payload): (65507 - 24) / 4.
pub const MAX_ELEMENTS: usize = (65_507 - HEADER_LEN) / ELEMENT_LEN;

mod field {
    use core::ops::Range;
    pub const VERSION: usize = 0;
    pub const KIND: usize = 1;
    pub const FLAGS: usize = 2;
    pub const PRIORITY: usize = 3;
    pub const JOB: Range<usize> = 4..6;
    pub const SLOT: Range<usize> = 6..8;
    pub const WORKER: Range<usize> = 8..10;
    pub const GENERATION: Range<usize> = 10..12;
    pub const EXPONENT: usize = 12;
    pub const RESERVED0: usize = 13;
    pub const COUNT: Range<usize> = 14..16;
    pub const ELEMENTS: Range<usize> = 16..18;
    pub const RESERVED1: Range<usize> = 18..20;
    pub const PACKET_ID: Range<usize> = 20..24;
    pub const PAYLOAD: usize = PACKET_ID.end;
}

/// Length of the inagg header in bytes.
pub const HEADER_LEN: usize = field::PAYLOAD;

/// Bit 0 of `flags`: which of the slot's two shadow sets the packet addresses.
const FLAG_SET: u8 = 0x01;

/// Makes a `u8` code enum with an `Unknown(n)` variant, so that a new code
/// parses into something printable instead of failing inside the view.
macro_rules! code_enum {
    ($(#[$attr:meta])* pub enum $name:ident { $($(#[$vattr:meta])* $variant:ident = $value:expr),+ $(,)? }) => {
        $(#[$attr])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vattr])* $variant,)+
            /// A code this version does not know.
            Unknown(u8),
        }
        impl From<u8> for $name {
            fn from(v: u8) -> Self {
                match v { $($value => $name::$variant,)+ other => $name::Unknown(other) }
            }
        }
        impl From<$name> for u8 {
            fn from(v: $name) -> u8 {
                match v { $($name::$variant => $value,)+ $name::Unknown(other) => other }
            }
        }
    };
}

code_enum! {
    /// What a packet is.
    pub enum Kind {
        /// A worker's contribution to a slot, worker -> switch.
        Contribution = 1,
        /// An aggregated result, switch -> worker(s).
        Result = 2,
        /// A group datagram: not aggregated, copied by the switch to every
        /// other member of the multicast group named in the job field
        /// (peer-to-peer parameter multicast, as SELMCAST sends).
        Multicast = 3,
        /// A contribution on an auxiliary path (NetStorm's IS_AUX): a child
        /// switch's partial sum sent to its parent the long way round. A
        /// switch on the way forwards it unchanged by its relay table; the
        /// parent takes it as a contribution from the member it names when
        /// it arrives from a relay the parent's job lists.
        Detour = 4,
        /// A worker's question about a slot it waits on, worker -> switch:
        /// the header alone, no payload ("Loss recovery" in
        /// docs/PROTOCOL.md). It changes nothing in the switch.
        Query = 5,
        /// The switch's answer to a query, switch -> worker: the header and
        /// a [`crate::status`] payload saying who has contributed to the set.
        Status = 6,
        /// A round's result re-announced by a worker that holds it, worker
        /// -> switch, to a switch that lost it (a restart): K int32s, the
        /// result's packet id, exponent and weight (in count). Taken only
        /// by a set whose round is not complete ("A switch that lost its
        /// state" in docs/PROTOCOL.md).
        Announce = 7,
    }
}

impl Kind {
    /// Payload bytes a packet of this kind carries when its header says
    /// `elements`: K int32s, except a query (none) and a status (the
    /// [`crate::status`] block). A query still names K, which the switch
    /// admits against its job's as for a contribution.
    pub fn payload_len(self, elements: u16) -> usize {
        match self {
            Kind::Query => 0,
            Kind::Status => crate::status::STATUS_LEN,
            _ => usize::from(elements) * ELEMENT_LEN,
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Kind::Contribution => write!(f, "contribution"),
            Kind::Result => write!(f, "result"),
            Kind::Multicast => write!(f, "multicast"),
            Kind::Detour => write!(f, "detour"),
            Kind::Query => write!(f, "query"),
            Kind::Status => write!(f, "status"),
            Kind::Announce => write!(f, "announce"),
            Kind::Unknown(n) => write!(f, "kind({n})"),
        }
    }
}

/// A read/write view of an inagg header and payload over a byte buffer.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without checking its length; accessors may panic on a
    /// short buffer. For buffers this process built itself.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after checking it holds the header and exactly the
    /// payload the header announces. For anything read off the network.
    pub fn new_checked(buffer: T) -> Result<Packet<T>> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Checks the length rules: a whole header, then the payload its kind
    /// and `elements` announce ([`Kind::payload_len`]), and nothing after.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated { len });
        }
        let expected = HEADER_LEN + self.kind().payload_len(self.elements());
        if len != expected {
            return Err(Error::LengthMismatch { len, expected });
        }
        Ok(())
    }

    /// Gives back the underlying buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    #[inline]
    fn u16_at(&self, r: core::ops::Range<usize>) -> u16 {
        let b = &self.buffer.as_ref()[r];
        u16::from_be_bytes([b[0], b[1]])
    }

    /// Protocol version (1).
    #[inline]
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    /// Packet kind.
    #[inline]
    pub fn kind(&self) -> Kind {
        Kind::from(self.buffer.as_ref()[field::KIND])
    }
    /// The raw flags byte.
    #[inline]
    pub fn flags(&self) -> u8 {
        self.buffer.as_ref()[field::FLAGS]
    }
    /// Shadow set addressed (0 or 1): bit 0 of flags.
    #[inline]
    pub fn set(&self) -> u8 {
        self.flags() & FLAG_SET
    }
    /// Priority class (0 = lowest).
    #[inline]
    pub fn priority(&self) -> u8 {
        self.buffer.as_ref()[field::PRIORITY]
    }
    /// Job id.
    #[inline]
    pub fn job(&self) -> u16 {
        self.u16_at(field::JOB)
    }
    /// Slot index within the job's pool (0-based, not the switch address).
    #[inline]
    pub fn slot(&self) -> u16 {
        self.u16_at(field::SLOT)
    }
    /// Worker id within the job (0-based).
    #[inline]
    pub fn worker(&self) -> u16 {
        self.u16_at(field::WORKER)
    }
    /// Membership generation of the job the sender believes in.
    #[inline]
    pub fn generation(&self) -> u16 {
        self.u16_at(field::GENERATION)
    }
    /// Block exponent: IEEE-754 binary32 biased exponent, max-reduced.
    #[inline]
    pub fn exponent(&self) -> u8 {
        self.buffer.as_ref()[field::EXPONENT]
    }
    /// The reserved byte at offset 13 (must be zero).
    #[inline]
    pub fn reserved0(&self) -> u8 {
        self.buffer.as_ref()[field::RESERVED0]
    }
    /// In a result: how many workers contributed. Zero in a contribution.
    #[inline]
    pub fn count(&self) -> u16 {
        self.u16_at(field::COUNT)
    }
    /// Number of int32 payload elements.
    #[inline]
    pub fn elements(&self) -> u16 {
        self.u16_at(field::ELEMENTS)
    }
    /// The reserved 16 bits at offset 18 (must be zero).
    #[inline]
    pub fn reserved1(&self) -> u16 {
        self.u16_at(field::RESERVED1)
    }
    /// Packet id, chosen by the worker and echoed by the switch.
    #[inline]
    pub fn packet_id(&self) -> u32 {
        let b = &self.buffer.as_ref()[field::PACKET_ID];
        u32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
    /// The payload bytes (the int32 elements, big-endian).
    #[inline]
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[field::PAYLOAD..]
    }
    /// Element `i` of the payload.
    #[inline]
    pub fn element(&self, i: usize) -> i32 {
        let at = field::PAYLOAD + i * ELEMENT_LEN;
        let b = &self.buffer.as_ref()[at..at + ELEMENT_LEN];
        i32::from_be_bytes([b[0], b[1], b[2], b[3]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    #[inline]
    fn set_u16_at(&mut self, r: core::ops::Range<usize>, v: u16) {
        self.buffer.as_mut()[r].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the version byte.
    #[inline]
    pub fn set_version(&mut self, v: u8) {
        self.buffer.as_mut()[field::VERSION] = v;
    }
    /// Sets the kind.
    #[inline]
    pub fn set_kind(&mut self, v: Kind) {
        self.buffer.as_mut()[field::KIND] = v.into();
    }
    /// Sets the whole flags byte.
    #[inline]
    pub fn set_flags(&mut self, v: u8) {
        self.buffer.as_mut()[field::FLAGS] = v;
    }
    /// Sets the shadow-set bit, leaving the other flags alone.
    #[inline]
    pub fn set_set(&mut self, set: u8) {
        let flags = (self.flags() & !FLAG_SET) | (set & FLAG_SET);
        self.set_flags(flags);
    }
    /// Sets the priority class.
    #[inline]
    pub fn set_priority(&mut self, v: u8) {
        self.buffer.as_mut()[field::PRIORITY] = v;
    }
    /// Sets the job id.
    #[inline]
    pub fn set_job(&mut self, v: u16) {
        self.set_u16_at(field::JOB, v)
    }
    /// Sets the slot index.
    #[inline]
    pub fn set_slot(&mut self, v: u16) {
        self.set_u16_at(field::SLOT, v)
    }
    /// Sets the worker id.
    #[inline]
    pub fn set_worker(&mut self, v: u16) {
        self.set_u16_at(field::WORKER, v)
    }
    /// Sets the membership generation.
    #[inline]
    pub fn set_generation(&mut self, v: u16) {
        self.set_u16_at(field::GENERATION, v)
    }
    /// Sets the block exponent.
    #[inline]
    pub fn set_exponent(&mut self, v: u8) {
        self.buffer.as_mut()[field::EXPONENT] = v;
    }
    /// Sets the reserved byte (senders write zero).
    #[inline]
    pub fn set_reserved0(&mut self, v: u8) {
        self.buffer.as_mut()[field::RESERVED0] = v;
    }
    /// Sets the contributor count.
    #[inline]
    pub fn set_count(&mut self, v: u16) {
        self.set_u16_at(field::COUNT, v)
    }
    /// Sets the element count.
    #[inline]
    pub fn set_elements(&mut self, v: u16) {
        self.set_u16_at(field::ELEMENTS, v)
    }
    /// Sets the reserved 16 bits (senders write zero).
    #[inline]
    pub fn set_reserved1(&mut self, v: u16) {
        self.set_u16_at(field::RESERVED1, v)
    }
    /// Sets the packet id.
    #[inline]
    pub fn set_packet_id(&mut self, v: u32) {
        self.buffer.as_mut()[field::PACKET_ID].copy_from_slice(&v.to_be_bytes());
    }
    /// The payload bytes, writable.
    #[inline]
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.buffer.as_mut()[field::PAYLOAD..]
    }
    /// Writes element `i` of the payload.
    #[inline]
    pub fn set_element(&mut self, i: usize, v: i32) {
        let at = field::PAYLOAD + i * ELEMENT_LEN;
        self.buffer.as_mut()[at..at + ELEMENT_LEN].copy_from_slice(&v.to_be_bytes());
    }
}

impl<T: AsRef<[u8]>> fmt::Display for Packet<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match Repr::parse(self) {
            Ok(repr) => write!(f, "{repr}"),
            Err(err) => write!(f, "inagg ({err})"),
        }
    }
}

/// The meaning of an inagg header, without the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Contribution or result.
    pub kind: Kind,
    /// Shadow set, 0 or 1.
    pub set: u8,
    /// Priority class.
    pub priority: u8,
    /// Job id.
    pub job: u16,
    /// Slot index within the job's pool.
    pub slot: u16,
    /// Worker id within the job.
    pub worker: u16,
    /// Membership generation.
    pub generation: u16,
    /// Block exponent (binary32 biased exponent; 255 = non-finite).
    pub exponent: u8,
    /// Contributors (results only; zero in contributions).
    pub count: u16,
    /// Number of int32 payload elements.
    pub elements: u16,
    /// Packet id, echoed by the switch.
    pub packet_id: u32,
}

impl Repr {
    /// Parses a checked packet, refusing what this version cannot interpret:
    /// another version, an unknown kind, reserved bits set.
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr> {
        packet.check_len()?;
        if packet.version() != VERSION {
            return Err(Error::BadVersion(packet.version()));
        }
        if let Kind::Unknown(code) = packet.kind() {
            return Err(Error::UnknownKind(code));
        }
        if packet.flags() & !FLAG_SET != 0 || packet.reserved0() != 0 || packet.reserved1() != 0 {
            return Err(Error::ReservedBits);
        }
        Ok(Repr {
            kind: packet.kind(),
            set: packet.set(),
            priority: packet.priority(),
            job: packet.job(),
            slot: packet.slot(),
            worker: packet.worker(),
            generation: packet.generation(),
            exponent: packet.exponent(),
            count: packet.count(),
            elements: packet.elements(),
            packet_id: packet.packet_id(),
        })
    }

    /// A contribution to `slot`/`set` of `job` from `worker`, with priority,
    /// generation and exponent 0 (set the fields to change them).
    pub fn contribution(
        job: u16,
        slot: u16,
        set: u8,
        worker: u16,
        elements: u16,
        packet_id: u32,
    ) -> Repr {
        Repr {
            kind: Kind::Contribution,
            set,
            priority: 0,
            job,
            slot,
            worker,
            generation: 0,
            exponent: 0,
            count: 0,
            elements,
            packet_id,
        }
    }

    /// Total bytes of header plus payload this repr describes.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + self.kind.payload_len(self.elements)
    }

    /// Writes the header fields into a packet; the payload is left to the
    /// caller (it is usually written in place by the quantizer).
    ///
    /// The header is assembled in registers and stored as three 8-byte
    /// words: a checksum that reads the packet right after (the DPDK path's
    /// UDP checksum) then loads from wide stores, which the CPU forwards to
    /// the loads, instead of a dozen narrow field stores, which it cannot
    /// (a stall that cost a tenth of the DPDK agent's time per packet).
    #[inline]
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.buffer.as_mut()[..HEADER_LEN].copy_from_slice(&self.to_bytes());
    }

    /// Writes the header into `head` (its first [`HEADER_LEN`] bytes) and
    /// returns their [`crate::frame::ones_sum_native`] sum, computed from
    /// the registers the words were built in.
    ///
    /// Each word is stored whole, straight into `head`: going through a
    /// byte array ([`Repr::to_bytes`]) cost the DPDK agent a failed
    /// store-to-load forward per packet (the copy's 16-byte load spans two
    /// of the array's 8-byte stores), about a tenth of its int32 path.
    #[inline]
    pub fn emit_summed(&self, head: &mut [u8]) -> u64 {
        let mut sum = 0;
        for (out, word) in head[..HEADER_LEN].chunks_exact_mut(8).zip(self.words()) {
            let bytes = word.to_be_bytes();
            out.copy_from_slice(&bytes);
            let native = u64::from_ne_bytes(bytes);
            sum += (native >> 32) + (native & 0xffff_ffff);
        }
        sum
    }

    /// The header's bytes, assembled as three big-endian 64-bit words in
    /// registers (the field layout is the `field` module's; the fixtures
    /// below check the two agree).
    #[inline]
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let [w0, w1, w2] = self.words();
        let mut bytes = [0u8; HEADER_LEN];
        bytes[0..8].copy_from_slice(&w0.to_be_bytes());
        bytes[8..16].copy_from_slice(&w1.to_be_bytes());
        bytes[16..24].copy_from_slice(&w2.to_be_bytes());
        bytes
    }

    /// The header as three 64-bit words, in the order and byte order of
    /// the wire (most significant byte first).
    #[inline]
    fn words(&self) -> [u64; 3] {
        let w0 = u64::from(VERSION) << 56
            | u64::from(u8::from(self.kind)) << 48
            | u64::from(self.set & FLAG_SET) << 40
            | u64::from(self.priority) << 32
            | u64::from(self.job) << 16
            | u64::from(self.slot);
        let w1 = u64::from(self.worker) << 48
            | u64::from(self.generation) << 32
            | u64::from(self.exponent) << 24
            | u64::from(self.count);
        let w2 = u64::from(self.elements) << 48 | u64::from(self.packet_id);
        [w0, w1, w2]
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "inagg {} job={} slot={} set={} worker={} gen={} prio={} exp={} count={} k={} id={}",
            self.kind,
            self.job,
            self.slot,
            self.set,
            self.worker,
            self.generation,
            self.priority,
            self.exponent,
            self.count,
            self.elements,
            self.packet_id
        )
    }
}

/// Whether packet id `a` is after `b` in serial-number order (RFC 1982):
/// `a - b` (mod 2^32) is neither 0 nor at least 2^31. The agents' ids of
/// one slot, `epoch << 16 | slot`, stay in that order for 2^15 epochs
/// (docs/PROTOCOL.md, "Superseded rounds").
pub fn newer_id(a: u32, b: u32) -> bool {
    let ahead = a.wrapping_sub(b);
    ahead != 0 && ahead < 1 << 31
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A contribution: job 7, slot 3, set 1, worker 2, generation 5,
    /// priority 4, exponent 0x85, 2 elements (1, -2), packet id 0x01020304.
    static CONTRIBUTION: [u8; 32] = [
        0x01, 0x01, 0x01, 0x04, // version, kind, flags (set 1), priority
        0x00, 0x07, 0x00, 0x03, // job, slot
        0x00, 0x02, 0x00, 0x05, // worker, generation
        0x85, 0x00, 0x00, 0x00, // exponent, reserved, count
        0x00, 0x02, 0x00, 0x00, // elements, reserved
        0x01, 0x02, 0x03, 0x04, // packet id
        0x00, 0x00, 0x00, 0x01, // element 0 = 1
        0xff, 0xff, 0xff, 0xfe, // element 1 = -2
    ];

    fn repr() -> Repr {
        Repr {
            kind: Kind::Contribution,
            set: 1,
            priority: 4,
            job: 7,
            slot: 3,
            worker: 2,
            generation: 5,
            exponent: 0x85,
            count: 0,
            elements: 2,
            packet_id: 0x0102_0304,
        }
    }

    #[test]
    fn deconstruct() {
        let p = Packet::new_checked(&CONTRIBUTION[..]).unwrap();
        assert_eq!(p.version(), 1);
        assert_eq!(p.kind(), Kind::Contribution);
        assert_eq!(p.set(), 1);
        assert_eq!(p.priority(), 4);
        assert_eq!(p.job(), 7);
        assert_eq!(p.slot(), 3);
        assert_eq!(p.worker(), 2);
        assert_eq!(p.generation(), 5);
        assert_eq!(p.exponent(), 0x85);
        assert_eq!(p.count(), 0);
        assert_eq!(p.elements(), 2);
        assert_eq!(p.packet_id(), 0x0102_0304);
        assert_eq!(p.element(0), 1);
        assert_eq!(p.element(1), -2);
    }

    #[test]
    fn construct() {
        let mut bytes = [0xa5u8; 32];
        let mut p = Packet::new_unchecked(&mut bytes[..]);
        repr().emit(&mut p);
        p.set_element(0, 1);
        p.set_element(1, -2);
        assert_eq!(bytes, CONTRIBUTION);
    }

    #[test]
    fn every_field_lands_where_the_view_reads_it() {
        let r = Repr {
            kind: Kind::Result,
            set: 1,
            priority: 0xfe,
            job: 0xa1b2,
            slot: 0xc3d4,
            worker: 0xe5f6,
            generation: 0x0718,
            exponent: 0x9a,
            count: 0xbcde,
            elements: 2,
            packet_id: 0xf1e2_d3c4,
        };
        let mut bytes = [0xffu8; 32];
        r.emit(&mut Packet::new_unchecked(&mut bytes[..]));
        assert_eq!(
            Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()),
            Ok(r)
        );
        assert_eq!(bytes[..HEADER_LEN], r.to_bytes());
        // The summed writer writes the same bytes and their checksum sum.
        let mut head = [0u8; HEADER_LEN];
        let sum = r.emit_summed(&mut head);
        assert_eq!(head, r.to_bytes());
        assert_eq!(sum, crate::frame::ones_sum_native(&head));
    }

    #[test]
    fn parse_and_emit_round_trip() {
        let p = Packet::new_checked(&CONTRIBUTION[..]).unwrap();
        assert_eq!(Repr::parse(&p).unwrap(), repr());
        assert_eq!(repr().buffer_len(), CONTRIBUTION.len());
    }

    #[test]
    fn result_fixture() {
        let mut bytes = CONTRIBUTION;
        bytes[1] = 2;
        bytes[14..16].copy_from_slice(&3u16.to_be_bytes());
        let r = Repr::parse(&Packet::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.kind, Kind::Result);
        assert_eq!(r.count, 3);
    }

    #[test]
    fn truncated_header_refused() {
        assert_eq!(
            Packet::new_checked(&CONTRIBUTION[..23]).unwrap_err(),
            Error::Truncated { len: 23 }
        );
    }

    #[test]
    fn payload_length_must_match_elements() {
        assert_eq!(
            Packet::new_checked(&CONTRIBUTION[..31]).unwrap_err(),
            Error::LengthMismatch {
                len: 31,
                expected: 32
            }
        );
        let mut longer = CONTRIBUTION.to_vec();
        longer.extend_from_slice(&[0, 0, 0, 0]);
        assert_eq!(
            Packet::new_checked(&longer[..]).unwrap_err(),
            Error::LengthMismatch {
                len: 36,
                expected: 32
            }
        );
    }

    #[test]
    fn unknown_version_kind_and_reserved_refused() {
        let mut b = CONTRIBUTION;
        b[0] = 2;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::BadVersion(2))
        );
        let mut b = CONTRIBUTION;
        b[1] = 9;
        assert_eq!(
            Repr::parse(&Packet::new_unchecked(&b[..])),
            Err(Error::UnknownKind(9))
        );
        assert_eq!(Packet::new_unchecked(&b[..]).kind(), Kind::Unknown(9));
        for at in [2usize, 13, 18, 19] {
            let mut b = CONTRIBUTION;
            b[at] |= 0x80;
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&b[..])),
                Err(Error::ReservedBits),
                "byte {at}"
            );
        }
    }

    #[test]
    fn a_detour_is_kind_4_and_otherwise_a_contribution() {
        let mut b = CONTRIBUTION;
        b[1] = 4;
        let repr = Repr::parse(&Packet::new_checked(&b[..]).unwrap()).unwrap();
        assert_eq!(repr.kind, Kind::Detour);
        let contribution = Repr::parse(&Packet::new_checked(&CONTRIBUTION[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            Repr {
                kind: Kind::Detour,
                ..contribution
            }
        );
        assert_eq!(repr.to_bytes()[..], b[..HEADER_LEN]);
    }

    /// A query is the header alone, naming K; a status is the header and
    /// the status block, whatever K the header names.
    #[test]
    fn a_query_has_no_payload_and_a_status_its_block() {
        let mut q = CONTRIBUTION;
        q[1] = 5;
        let repr = Repr::parse(&Packet::new_checked(&q[..HEADER_LEN]).unwrap()).unwrap();
        assert_eq!((repr.kind, repr.elements), (Kind::Query, 2));
        assert_eq!(repr.buffer_len(), HEADER_LEN);
        assert_eq!(
            Packet::new_checked(&q[..]).unwrap_err(),
            Error::LengthMismatch {
                len: 32,
                expected: 24
            }
        );
        let mut s = [0u8; HEADER_LEN + crate::status::STATUS_LEN];
        s[..HEADER_LEN].copy_from_slice(&q[..HEADER_LEN]);
        s[1] = 6;
        let repr = Repr::parse(&Packet::new_checked(&s[..]).unwrap()).unwrap();
        assert_eq!(repr.kind, Kind::Status);
        assert_eq!(repr.buffer_len(), s.len());
        assert!(Packet::new_checked(&s[..HEADER_LEN + 8]).is_err());
    }

    #[test]
    fn display_is_readable() {
        let p = Packet::new_checked(&CONTRIBUTION[..]).unwrap();
        assert_eq!(
            p.to_string(),
            "inagg contribution job=7 slot=3 set=1 worker=2 gen=5 prio=4 exp=133 count=0 k=2 id=16909060"
        );
    }

    #[test]
    fn header_len_and_max_elements() {
        assert_eq!(HEADER_LEN, 24);
        const { assert!(HEADER_LEN + MAX_ELEMENTS * ELEMENT_LEN <= 65_507) };
    }

    #[test]
    fn packet_ids_compare_as_serial_numbers() {
        assert!(newer_id(6 << 16, 2 << 16));
        assert!(!newer_id(2 << 16, 6 << 16));
        assert!(!newer_id(7, 7));
        assert!(newer_id(1 << 16, u32::MAX << 16), "across the wrap");
        assert!(!newer_id(u32::MAX << 16, 1 << 16));
    }
}
