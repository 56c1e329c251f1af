//! Group datagrams: unaggregated multicast through the switch's group table
//! (docs/PROTOCOL.md, "Multicast groups").
//!
//! A member sends a block of int32 values to its group once; the switch
//! copies it to every other member. This is the transport of peer-to-peer
//! parameter multicast (SELMCAST's receivers are the members of a group the
//! controller made for the sender). Like IP multicast it is best effort: a
//! lost copy is not resent; the application numbers its datagrams (the
//! packet id) and decides what a gap means.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use inagg_wire::{payload, Kind, Packet, Repr, MAX_ELEMENTS};

/// One received group datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDatagram {
    /// The group it came through.
    pub group: u16,
    /// The sender's member id.
    pub sender: u16,
    /// The sender's packet id.
    pub packet_id: u32,
    /// Its priority class.
    pub priority: u8,
    /// The values.
    pub values: Vec<i32>,
}

/// A member's socket for one multicast group.
#[derive(Debug)]
pub struct GroupSocket {
    socket: UdpSocket,
    switch: SocketAddr,
    group: u16,
    member: u16,
    buf: Vec<u8>,
}

impl GroupSocket {
    /// Binds `bind` (the endpoint the group lists for `member`) and talks
    /// to the switch's data plane at `switch`.
    pub fn bind(bind: SocketAddr, switch: SocketAddr, group: u16, member: u16) -> io::Result<Self> {
        let socket = UdpSocket::bind(bind)?;
        Ok(GroupSocket {
            socket,
            switch,
            group,
            member,
            buf: vec![0; 65_536],
        })
    }

    /// Another handle on the same socket (one thread sends while another
    /// receives).
    pub fn try_clone(&self) -> io::Result<GroupSocket> {
        Ok(GroupSocket {
            socket: self.socket.try_clone()?,
            buf: vec![0; self.buf.len()],
            ..*self
        })
    }

    /// The bound endpoint.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Sends `values` to every other member. At most [`MAX_ELEMENTS`]
    /// values fit one datagram.
    pub fn send(&self, values: &[i32], packet_id: u32, priority: u8) -> io::Result<()> {
        let elements = u16::try_from(values.len())
            .ok()
            .filter(|&k| usize::from(k) <= MAX_ELEMENTS)
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} values do not fit one group datagram (at most {MAX_ELEMENTS})",
                        values.len()
                    ),
                )
            })?;
        let repr = Repr {
            kind: Kind::Multicast,
            priority,
            ..Repr::contribution(self.group, 0, 0, self.member, elements, packet_id)
        };
        let mut bytes = vec![0; repr.buffer_len()];
        let mut packet = Packet::new_unchecked(&mut bytes[..]);
        repr.emit(&mut packet);
        payload::write_i32s(packet.payload_mut(), values);
        self.socket.send_to(&bytes, self.switch)?;
        Ok(())
    }

    /// Sends as `member` of `group` from now on (one endpoint can be a
    /// member of many groups: a peer that multicasts to a different set of
    /// receivers every round sends through a different group each time).
    pub fn set_group(&mut self, group: u16, member: u16) {
        self.group = group;
        self.member = member;
    }

    /// The next datagram of this group from the switch, or `None` after
    /// `timeout` without one. Anything else arriving (other groups,
    /// malformed bytes, other senders) is skipped.
    pub fn recv(&mut self, timeout: Duration) -> io::Result<Option<GroupDatagram>> {
        self.recv_where(timeout, true)
    }

    /// The next group datagram of any group from the switch (a receiver in
    /// several senders' groups), or `None` after `timeout` without one.
    pub fn recv_any(&mut self, timeout: Duration) -> io::Result<Option<GroupDatagram>> {
        self.recv_where(timeout, false)
    }

    fn recv_where(&mut self, timeout: Duration, own: bool) -> io::Result<Option<GroupDatagram>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            // Wait precisely with ppoll; the read timeout only guards the
            // receive against another handle having taken the datagram.
            if !inagg_netio::udp::wait(&self.socket, left, false)? {
                return Ok(None);
            }
            self.socket.set_read_timeout(Some(left))?;
            let (n, from) = match self.socket.recv_from(&mut self.buf) {
                Ok(r) => r,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None)
                }
                Err(e) => return Err(e),
            };
            if from != self.switch {
                continue;
            }
            match parse(&self.buf[..n]) {
                Some(d) if !own || d.group == self.group => return Ok(Some(d)),
                _ => {}
            }
        }
    }
}

/// A group datagram, or `None` for anything else.
fn parse(bytes: &[u8]) -> Option<GroupDatagram> {
    let packet = Packet::new_checked(bytes).ok()?;
    let repr = Repr::parse(&packet).ok()?;
    if repr.kind != Kind::Multicast {
        return None;
    }
    let mut values = vec![0; usize::from(repr.elements)];
    payload::read_i32s(packet.payload(), &mut values);
    Some(GroupDatagram {
        group: repr.job,
        sender: repr.worker,
        packet_id: repr.packet_id,
        priority: repr.priority,
        values,
    })
}
