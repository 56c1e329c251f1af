//! Complete Ethernet/IPv4/UDP frames around inagg datagrams, and ARP, for
//! the raw-Ethernet data paths (DPDK agents and the emulator's DPDK ports).
//!
//! The header views are smoltcp's `wire` module. A frame is built once per
//! packet buffer ([`UdpFlow::emit`]: every header field, the IPv4 checksum)
//! and sealed after each rewrite of its datagram ([`seal`]: the UDP
//! checksum, so a kernel socket at the other end accepts it).
//!
//! Parsing ([`parse`]) checks the IPv4 header checksum but not the UDP one:
//! a kernel sender on a veth leaves the UDP checksum to an offload that an
//! AF_PACKET reader (DPDK's net_af_packet) sees unfinished, and the
//! Ethernet FCS already covers the wire.

use std::net::{Ipv4Addr, SocketAddrV4};

use smoltcp::wire::{
    ArpOperation, ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol, IpProtocol,
    Ipv4Packet, UdpPacket,
};

/// Ethernet header bytes.
pub const ETHERNET_LEN: usize = 14;
/// IPv4 header bytes (no options).
pub const IPV4_LEN: usize = 20;
/// UDP header bytes.
pub const UDP_LEN: usize = 8;
/// Bytes in front of the datagram in a frame.
pub const OVERHEAD: usize = ETHERNET_LEN + IPV4_LEN + UDP_LEN;
/// Length of an ARP frame for IPv4 over Ethernet (without padding).
pub const ARP_FRAME_LEN: usize = ETHERNET_LEN + 28;
/// The smallest Ethernet frame (without FCS): shorter ones are padded.
pub const MIN_FRAME: usize = 60;
/// The broadcast MAC.
pub const BROADCAST: [u8; 6] = [0xff; 6];

/// One end of a UDP flow on an Ethernet link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// MAC address.
    pub mac: [u8; 6],
    /// IPv4 address and UDP port.
    pub addr: SocketAddrV4,
}

/// The headers of frames from `src` to `dst`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpFlow {
    /// Sender.
    pub src: Endpoint,
    /// Receiver.
    pub dst: Endpoint,
}

impl UdpFlow {
    /// Frame length for a datagram of `datagram` bytes.
    pub fn frame_len(datagram: usize) -> usize {
        (OVERHEAD + datagram).max(MIN_FRAME)
    }

    /// Writes the Ethernet, IPv4 and UDP headers in front of a datagram of
    /// `datagram` bytes at `frame[OVERHEAD..]`, with the IPv4 checksum. The
    /// UDP checksum is left to [`seal`], after the datagram is written.
    /// `frame` must be [`UdpFlow::frame_len`] bytes.
    pub fn emit(&self, frame: &mut [u8], datagram: usize) {
        assert_eq!(frame.len(), Self::frame_len(datagram), "frame length");
        frame[OVERHEAD + datagram..].fill(0); // padding of tiny frames
        let mut eth = EthernetFrame::new_unchecked(&mut frame[..]);
        eth.set_dst_addr(EthernetAddress(self.dst.mac));
        eth.set_src_addr(EthernetAddress(self.src.mac));
        eth.set_ethertype(EthernetProtocol::Ipv4);
        let ip_len = IPV4_LEN + UDP_LEN + datagram;
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[ETHERNET_LEN..ETHERNET_LEN + ip_len]);
        ip.set_version(4);
        ip.set_header_len(IPV4_LEN as u8);
        ip.set_dscp(0);
        ip.set_ecn(0);
        ip.set_total_len(ip_len as u16);
        ip.set_ident(0);
        ip.clear_flags();
        ip.set_dont_frag(true);
        ip.set_frag_offset(0);
        ip.set_hop_limit(64);
        ip.set_next_header(IpProtocol::Udp);
        ip.set_src_addr(*self.src.addr.ip());
        ip.set_dst_addr(*self.dst.addr.ip());
        ip.fill_checksum();
        let mut udp = UdpPacket::new_unchecked(ip.payload_mut());
        udp.set_src_port(self.src.addr.port());
        udp.set_dst_port(self.dst.addr.port());
        udp.set_len((UDP_LEN + datagram) as u16);
        udp.set_checksum(0);
    }
}

/// The datagram of a frame built by [`UdpFlow::emit`].
pub fn datagram_mut(frame: &mut [u8], datagram: usize) -> &mut [u8] {
    &mut frame[OVERHEAD..OVERHEAD + datagram]
}

/// Fills in the UDP checksum of a frame built by [`UdpFlow::emit`] once its
/// datagram is final.
///
/// This runs once per packet on the DPDK fast path, so the sum is
/// [`ones_sum`] (32 bytes per step) rather than smoltcp's 16-bit loop;
/// the tests check the two agree. A buffer sealed once per round keeps its
/// [`seal_base`] and calls [`seal_with`], which reads only the datagram.
pub fn seal(frame: &mut [u8]) {
    let base = seal_base(frame);
    seal_with(frame, base);
}

/// The part of the UDP checksum sum that the datagram does not change: the
/// pseudo-header (addresses, protocol, UDP length) and the UDP header's
/// ports and length, unfolded. Constant for a buffer's life, since
/// [`UdpFlow::emit`] writes those fields once.
pub fn seal_base(frame: &[u8]) -> u64 {
    let udp_start = ETHERNET_LEN + IPV4_LEN;
    let addrs = ones_sum(&frame[ETHERNET_LEN + 12..ETHERNET_LEN + 20]);
    let ports_and_len = ones_sum(&frame[udp_start..udp_start + 6]);
    let udp_len = u64::from(u16::from_be_bytes([
        frame[udp_start + 4],
        frame[udp_start + 5],
    ]));
    addrs + u64::from(u8::from(IpProtocol::Udp)) + udp_len + ports_and_len
}

/// [`seal`] with the constant part of the sum given: sums the datagram
/// only (never the checksum field, so it need not be cleared first).
pub fn seal_with(frame: &mut [u8], base: u64) {
    let udp_start = ETHERNET_LEN + IPV4_LEN;
    let udp_len = usize::from(u16::from_be_bytes([
        frame[udp_start + 4],
        frame[udp_start + 5],
    ]));
    let datagram = &frame[OVERHEAD..udp_start + udp_len];
    // The inagg header and the payload are summed apart so that the loads
    // over the payload start where the quantizer's 32-byte stores did: a
    // load straddling two recent stores cannot be forwarded from them and
    // waits for both to reach the cache (HEADER_LEN is even, so the split
    // keeps the 16-bit words whole).
    let (header, payload) = datagram.split_at(crate::HEADER_LEN.min(datagram.len()));
    write_udp_checksum(frame, fold(base + ones_sum(header) + ones_sum(payload)));
}

/// [`seal_with`] for a writer that summed the datagram while writing it:
/// `datagram_sum` is [`ones_sum_native`] of the whole datagram (header and
/// payload), so nothing is read back. The agent's codecs sum the payload
/// in the same pass that quantizes or byte-swaps it, and the header from
/// its registers ([`crate::Repr::to_bytes`]).
pub fn seal_summed(frame: &mut [u8], base: u64, datagram_sum: u64) {
    write_udp_checksum(frame, fold(base + from_native(datagram_sum)));
}

/// Stores the one's complement of the folded sum as the UDP checksum.
fn write_udp_checksum(frame: &mut [u8], sum: u16) {
    let udp_start = ETHERNET_LEN + IPV4_LEN;
    // 0 means "no checksum" in UDP over IPv4: a computed 0 is sent as 0xffff.
    let checksum = match !sum {
        0 => 0xffff,
        c => c,
    };
    frame[udp_start + 6..udp_start + 8].copy_from_slice(&checksum.to_be_bytes());
}

/// The Internet checksum's one's-complement sum of `data` (RFC 1071) as
/// big-endian 16-bit words (an odd last byte padded with a zero), in 64
/// bits: [`fold`] reduces it to 16 bits.
///
/// The sum does not depend on how the words are grouped or on byte order
/// (RFC 1071 section 2): the data is read as native-endian 32-bit halves of
/// 64-bit words, added into 64-bit accumulators (32-byte blocks with AVX2
/// where the CPU has it, else four scalar accumulators; no byte shuffles,
/// no carry chain between steps), and the folded total is byte-swapped
/// once at the end on a little-endian machine. This is the
/// per-packet cost of sealing a frame, so it matters at small K.
pub fn ones_sum(data: &[u8]) -> u64 {
    from_native(ones_sum_native(data))
}

/// [`ones_sum`] before its final fold and byte swap: the unfolded sum of
/// `data` read as native-endian 16-bit words (in any grouping: 32-bit
/// halves of 64-bit words here). Sums of this kind add up across pieces of
/// even length, which is what lets a writer sum what it writes as it
/// writes it ([`seal_summed`]).
pub fn ones_sum_native(data: &[u8]) -> u64 {
    let (mut total, rest) = ones_blocks(data);
    let mut longs = rest.chunks_exact(8);
    for w in &mut longs {
        total += halves(w);
    }
    let mut words = longs.remainder().chunks_exact(2);
    for w in &mut words {
        total += u64::from(u16::from_ne_bytes([w[0], w[1]]));
    }
    if let [last] = words.remainder() {
        total += u64::from(u16::from_ne_bytes([*last, 0]));
    }
    total
}

/// A [`ones_sum_native`] sum as [`ones_sum`] gives it: folded, in
/// big-endian word order.
pub fn from_native(sum: u64) -> u64 {
    u64::from(u16::from_be(fold(sum)))
}

/// [`ones_sum`]'s whole 32-byte blocks (with AVX2 where the CPU has it) and
/// the bytes left over.
fn ones_blocks(data: &[u8]) -> (u64, &[u8]) {
    #[cfg(target_arch = "x86_64")]
    if crate::simd::available() {
        // SAFETY: AVX2 is present.
        return unsafe { crate::simd::ones_blocks(data) };
    }
    ones_blocks_scalar(data)
}

fn ones_blocks_scalar(data: &[u8]) -> (u64, &[u8]) {
    let mut acc = [0u64; 4];
    let mut blocks = data.chunks_exact(32);
    for b in &mut blocks {
        for (a, w) in acc.iter_mut().zip(b.chunks_exact(8)) {
            *a += halves(w);
        }
    }
    (acc.iter().sum(), blocks.remainder())
}

/// The two native-endian 32-bit halves of an 8-byte word, added.
#[inline]
fn halves(word: &[u8]) -> u64 {
    let w = u64::from_ne_bytes(word.try_into().expect("8 bytes"));
    (w >> 32) + (w & 0xffff_ffff)
}

/// Folds an unfolded one's-complement sum to 16 bits (end-around carries).
pub fn fold(mut sum: u64) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    sum as u16
}

/// What a received frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A UDP datagram over IPv4.
    Udp {
        /// Sender (MAC from the Ethernet header).
        src: Endpoint,
        /// Receiver.
        dst: Endpoint,
        /// The UDP payload.
        payload: &'a [u8],
    },
    /// An ARP request: `sender` asks who has `target`.
    ArpRequest {
        /// The asking host.
        sender: (Ipv4Addr, [u8; 6]),
        /// The address asked about.
        target: Ipv4Addr,
    },
    /// An ARP reply: `sender` has that MAC.
    ArpReply {
        /// The answering host.
        sender: (Ipv4Addr, [u8; 6]),
    },
    /// Something else (IPv6, other IP protocols, ...): not for us.
    Other,
    /// A broken frame: the reason, for a counter or a log.
    Bad(&'static str),
}

/// Classifies a received frame.
pub fn parse(frame: &[u8]) -> Frame<'_> {
    plain_udp(frame).unwrap_or_else(|| parse_general(frame))
}

/// The fast path of [`parse`] for the frames a data path mostly carries:
/// IPv4 without options or fragments, a valid header checksum, a whole UDP
/// datagram. It reads the fixed offsets directly (smoltcp's views check
/// and re-read each field, about a tenth of the DPDK agent's per-packet
/// path); anything else is `None`, for [`parse_general`] to classify. On
/// every frame it accepts the two agree (tested on every truncation and
/// every single-byte change of a fixture).
fn plain_udp(frame: &[u8]) -> Option<Frame<'_>> {
    let ip = frame.get(ETHERNET_LEN..ETHERNET_LEN + IPV4_LEN)?;
    let be16 = |b: &[u8], at: usize| usize::from(u16::from_be_bytes([b[at], b[at + 1]]));
    let plain = frame[12..14] == [0x08, 0x00] // IPv4
        && ip[0] == 0x45 // version 4, no options
        && ip[6] & 0x3f == 0 && ip[7] == 0 // no more fragments, offset 0
        && ip[9] == u8::from(IpProtocol::Udp);
    let total = be16(ip, 2);
    if !plain || total < IPV4_LEN + UDP_LEN || ETHERNET_LEN + total > frame.len() {
        return None;
    }
    if fold(ones_sum_native(ip)) != 0xffff {
        return None;
    }
    let udp = &frame[ETHERNET_LEN + IPV4_LEN..ETHERNET_LEN + total];
    let udp_len = be16(udp, 4);
    if udp_len < UDP_LEN || udp_len > udp.len() {
        return None;
    }
    let endpoint = |mac: &[u8], addr: &[u8], port: &[u8]| Endpoint {
        mac: mac.try_into().expect("6 bytes"),
        addr: SocketAddrV4::new(
            Ipv4Addr::new(addr[0], addr[1], addr[2], addr[3]),
            u16::from_be_bytes([port[0], port[1]]),
        ),
    };
    Some(Frame::Udp {
        src: endpoint(&frame[6..12], &ip[12..16], &udp[0..2]),
        dst: endpoint(&frame[0..6], &ip[16..20], &udp[2..4]),
        payload: &udp[UDP_LEN..udp_len],
    })
}

/// [`parse`] for every kind of frame, through smoltcp's header views.
/// [`parse`] takes a fast path first; on every frame that path accepts the
/// two agree (public so that the fuzz target `frame` can hold them to it).
pub fn parse_general(frame: &[u8]) -> Frame<'_> {
    let Ok(eth) = EthernetFrame::new_checked(frame) else {
        return Frame::Bad("shorter than an Ethernet header");
    };
    match eth.ethertype() {
        EthernetProtocol::Arp => parse_arp(eth.payload()),
        EthernetProtocol::Ipv4 => parse_ipv4(eth.src_addr().0, eth.dst_addr().0, eth.payload()),
        _ => Frame::Other,
    }
}

fn parse_arp(bytes: &[u8]) -> Frame<'_> {
    let Ok(arp) = ArpPacket::new_checked(bytes) else {
        return Frame::Bad("truncated ARP");
    };
    match ArpRepr::parse(&arp) {
        Ok(ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr,
            source_protocol_addr,
            target_protocol_addr,
            ..
        }) => {
            let sender = (source_protocol_addr, source_hardware_addr.0);
            match operation {
                ArpOperation::Request => Frame::ArpRequest {
                    sender,
                    target: target_protocol_addr,
                },
                ArpOperation::Reply => Frame::ArpReply { sender },
                _ => Frame::Other,
            }
        }
        _ => Frame::Other,
    }
}

fn parse_ipv4<'a>(src_mac: [u8; 6], dst_mac: [u8; 6], bytes: &'a [u8]) -> Frame<'a> {
    let Ok(ip) = Ipv4Packet::new_checked(bytes) else {
        return Frame::Bad("truncated or inconsistent IPv4 header");
    };
    if !ip.verify_checksum() {
        return Frame::Bad("IPv4 header checksum");
    }
    if ip.next_header() != IpProtocol::Udp {
        return Frame::Other;
    }
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Frame::Bad("IPv4 fragment");
    }
    let (src_ip, dst_ip) = (ip.src_addr(), ip.dst_addr());
    let ip_payload = &bytes[usize::from(ip.header_len())..usize::from(ip.total_len())];
    let Ok(udp) = UdpPacket::new_checked(ip_payload) else {
        return Frame::Bad("truncated or inconsistent UDP header");
    };
    let payload = &ip_payload[UDP_LEN..usize::from(udp.len())];
    Frame::Udp {
        src: Endpoint {
            mac: src_mac,
            addr: SocketAddrV4::new(src_ip, udp.src_port()),
        },
        dst: Endpoint {
            mac: dst_mac,
            addr: SocketAddrV4::new(dst_ip, udp.dst_port()),
        },
        payload,
    }
}

/// Writes an ARP request from `us` for `target` (broadcast) into `frame`
/// ([`MIN_FRAME`] bytes) and returns its length.
pub fn arp_request(us: (Ipv4Addr, [u8; 6]), target: Ipv4Addr, frame: &mut [u8]) -> usize {
    arp(
        ArpOperation::Request,
        us,
        (target, [0; 6]),
        BROADCAST,
        frame,
    )
}

/// Writes the ARP reply from `us` to `asker` into `frame` ([`MIN_FRAME`]
/// bytes) and returns its length.
pub fn arp_reply(us: (Ipv4Addr, [u8; 6]), asker: (Ipv4Addr, [u8; 6]), frame: &mut [u8]) -> usize {
    arp(ArpOperation::Reply, us, asker, asker.1, frame)
}

fn arp(
    operation: ArpOperation,
    us: (Ipv4Addr, [u8; 6]),
    them: (Ipv4Addr, [u8; 6]),
    dst_mac: [u8; 6],
    frame: &mut [u8],
) -> usize {
    let frame = &mut frame[..MIN_FRAME];
    frame.fill(0);
    let mut eth = EthernetFrame::new_unchecked(&mut frame[..]);
    eth.set_dst_addr(EthernetAddress(dst_mac));
    eth.set_src_addr(EthernetAddress(us.1));
    eth.set_ethertype(EthernetProtocol::Arp);
    let repr = ArpRepr::EthernetIpv4 {
        operation,
        source_hardware_addr: EthernetAddress(us.1),
        source_protocol_addr: us.0,
        target_hardware_addr: EthernetAddress(them.1),
        target_protocol_addr: them.0,
    };
    repr.emit(&mut ArpPacket::new_unchecked(eth.payload_mut()));
    MIN_FRAME
}

/// Parses a MAC address written as six hex bytes (one or two digits each)
/// separated by `:` or `-`.
pub fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split([':', '-']);
    for byte in &mut mac {
        let part = parts.next()?;
        if part.is_empty() || part.len() > 2 {
            return None;
        }
        *byte = u8::from_str_radix(part, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Formats a MAC address as `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::IpAddress;

    const A: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
    const B: [u8; 6] = [0x02, 0, 0, 0, 0, 0x64];

    fn flow() -> UdpFlow {
        UdpFlow {
            src: Endpoint {
                mac: A,
                addr: "10.0.0.1:40001".parse().unwrap(),
            },
            dst: Endpoint {
                mac: B,
                addr: "10.0.0.100:47000".parse().unwrap(),
            },
        }
    }

    /// The frame `flow()` makes around the 4-byte datagram 01 02 03 04, as
    /// the kernel would send it. The checksums were computed independently
    /// (RFC 1071 sum in Python): IPv4 0x2669, UDP over the pseudo-header 0x9391.
    const FIXTURE: [u8; 60] = [
        // Ethernet: dst, src, type IPv4
        0x02, 0, 0, 0, 0, 0x64, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00,
        // IPv4: 45 00, total 32, id 0, DF, ttl 64, UDP, checksum, src, dst
        0x45, 0x00, 0x00, 0x20, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x26, 0x69, 10, 0, 0, 1, 10, 0,
        0, 100, // UDP: 40001 -> 47000, length 12, checksum
        0x9c, 0x41, 0xb7, 0x98, 0x00, 0x0c, 0x93, 0x91, // datagram
        1, 2, 3, 4, // padding to 60 bytes
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    ];

    #[test]
    fn emit_and_seal_match_the_fixture() {
        let mut frame = vec![0xaa; UdpFlow::frame_len(4)];
        flow().emit(&mut frame, 4);
        datagram_mut(&mut frame, 4).copy_from_slice(&[1, 2, 3, 4]);
        seal(&mut frame);
        assert_eq!(frame[..], FIXTURE[..]);
    }

    #[test]
    fn the_fixture_parses_back_with_valid_checksums() {
        let Frame::Udp { src, dst, payload } = parse(&FIXTURE) else {
            panic!("not UDP: {:?}", parse(&FIXTURE));
        };
        assert_eq!(
            (src, dst, payload),
            (flow().src, flow().dst, &[1u8, 2, 3, 4][..])
        );
        let ip = Ipv4Packet::new_checked(&FIXTURE[ETHERNET_LEN..]).unwrap();
        let udp = UdpPacket::new_checked(ip.payload()).unwrap();
        assert!(udp.verify_checksum(
            &IpAddress::Ipv4(ip.src_addr()),
            &IpAddress::Ipv4(ip.dst_addr())
        ));
    }

    #[test]
    fn seal_agrees_with_smoltcp_for_every_length_and_content() {
        // Odd and even lengths, words of all ones (carries), random bytes.
        let mut seed = 0x1234_5678u32;
        for datagram in (0..70).chain([283, 284, 1472]) {
            for fill in [None, Some(0xff), Some(0)] {
                let mut frame = vec![0; UdpFlow::frame_len(datagram)];
                flow().emit(&mut frame, datagram);
                // Sealed once already: the stale checksum must not count.
                let base = seal_base(&frame);
                datagram_mut(&mut frame, datagram).fill(0x5a);
                seal(&mut frame);
                for b in datagram_mut(&mut frame, datagram) {
                    seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    *b = fill.unwrap_or((seed >> 16) as u8);
                }
                seal_with(&mut frame, base);
                let ip = Ipv4Packet::new_checked(&frame[ETHERNET_LEN..]).unwrap();
                let udp = UdpPacket::new_checked(ip.payload()).unwrap();
                let (src, dst) = (
                    IpAddress::Ipv4(ip.src_addr()),
                    IpAddress::Ipv4(ip.dst_addr()),
                );
                assert!(
                    udp.verify_checksum(&src, &dst),
                    "length {datagram}, fill {fill:?}"
                );
                assert_ne!(udp.checksum(), 0, "0 would mean no checksum");
            }
        }
    }

    #[test]
    fn ones_sum_follows_rfc_1071() {
        // RFC 1071 section 3's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        assert_eq!(
            fold(ones_sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])),
            0xddf2
        );
        assert_eq!(fold(ones_sum(&[0xab])), 0xab00);
        assert_eq!(fold(ones_sum(&[0xff; 4096])), 0xffff);
        assert_eq!(fold(ones_sum(&[])), 0);
    }

    #[test]
    fn the_block_sums_agree_with_the_scalar_loop() {
        let mut seed = 7u32;
        let data: Vec<u8> = (0..1000)
            .map(|_| {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                (seed >> 16) as u8
            })
            .collect();
        for len in [0, 31, 32, 33, 256, 280, 999, 1000] {
            let (sum, rest) = ones_blocks(&data[..len]);
            let (scalar, scalar_rest) = ones_blocks_scalar(&data[..len]);
            assert_eq!(
                (fold(sum), rest),
                (fold(scalar), scalar_rest),
                "length {len}"
            );
        }
        assert_eq!(fold(ones_blocks(&[0xff; 4096]).0), 0xffff);
    }

    #[test]
    fn the_fast_path_agrees_with_the_general_parse() {
        let mut accepted = 0;
        let mut check = |frame: &[u8]| {
            if let Some(fast) = plain_udp(frame) {
                assert_eq!(fast, parse_general(frame), "{frame:02x?}");
                accepted += 1;
            }
        };
        for len in 0..=FIXTURE.len() {
            check(&FIXTURE[..len]);
        }
        // Every single-byte change of the headers, each to a few values.
        for at in 0..OVERHEAD {
            for v in [0u8, 1, 0x08, 0x11, 0x20, 0x45, 0x46, 0x80, 0xff] {
                let mut f = FIXTURE;
                f[at] = v;
                check(&f);
            }
        }
        // The fast path did the work: the whole fixture, and every change
        // of a MAC or port byte (the IPv4 checksum does not cover them).
        assert!(accepted > OVERHEAD, "{accepted} frames on the fast path");
    }

    #[test]
    fn a_corrupted_ip_header_or_truncation_is_bad_not_a_panic() {
        let mut bad = FIXTURE;
        bad[ETHERNET_LEN + 8] = 1; // TTL changes, checksum no longer matches
        assert_eq!(parse(&bad), Frame::Bad("IPv4 header checksum"));
        for len in 0..FIXTURE.len() {
            let _ = parse(&FIXTURE[..len]);
        }
        assert!(matches!(parse(&FIXTURE[..10]), Frame::Bad(_)));
        assert!(matches!(parse(&FIXTURE[..30]), Frame::Bad(_)));
    }

    #[test]
    fn arp_request_and_reply_round_trip() {
        let us = (Ipv4Addr::new(10, 0, 0, 1), A);
        let mut frame = [0u8; MIN_FRAME];
        let n = arp_request(us, Ipv4Addr::new(10, 0, 0, 100), &mut frame);
        assert_eq!(n, MIN_FRAME);
        assert_eq!(frame[..6], BROADCAST);
        assert_eq!(
            parse(&frame),
            Frame::ArpRequest {
                sender: us,
                target: Ipv4Addr::new(10, 0, 0, 100)
            }
        );
        let them = (Ipv4Addr::new(10, 0, 0, 100), B);
        arp_reply(them, us, &mut frame);
        assert_eq!(frame[..6], A);
        assert_eq!(parse(&frame), Frame::ArpReply { sender: them });
    }

    #[test]
    fn macs_parse_and_format() {
        assert_eq!(parse_mac("02:00:00:00:00:64"), Some(B));
        assert_eq!(parse_mac("02-00-00-00-00-64"), Some(B));
        assert_eq!(parse_mac("02:00:00:00:00"), None);
        assert_eq!(parse_mac("02:00:00:00:00:64:01"), None);
        assert_eq!(parse_mac("zz:00:00:00:00:64"), None);
        assert_eq!(format_mac(B), "02:00:00:00:00:64");
    }
}
