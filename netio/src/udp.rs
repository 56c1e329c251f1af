//! Batched UDP datagram I/O over a kernel socket: `recvmmsg` and `sendmmsg`.
//!
//! One system call moves a whole batch, which is what lets the kernel-socket
//! data path keep up with small aggregation packets. The socket is put in
//! non-blocking mode; [`BatchSocket::recv_batch`] waits with `poll` for at
//! most the given timeout, so no caller can hang on a silent peer.

use std::io;
use std::mem::{size_of, zeroed, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A UDP socket with batched receive and send.
#[derive(Debug)]
pub struct BatchSocket {
    socket: UdpSocket,
    /// `ECONNREFUSED` errors seen: on a connected socket, each is an ICMP
    /// port unreachable, so nothing listened at the peer's address.
    refusals: AtomicU64,
}

/// Receive buffers for one batch: `capacity` datagrams of up to `mtu` bytes.
#[derive(Debug)]
pub struct RecvBatch {
    data: Vec<u8>,
    mtu: usize,
    lens: Vec<usize>,
    addrs: Vec<libc::sockaddr_storage>,
    received: usize,
}

/// Datagrams queued for one `sendmmsg`, each with an optional destination
/// (none on a connected socket).
///
/// A datagram is one or two byte ranges of the batch's buffer, sent as one
/// gather list: a multicast result is staged once and sent to every receiver
/// behind its own small header ([`SendBatch::push_parts`]), so the payload is
/// not copied once per receiver in user space.
#[derive(Debug, Default)]
pub struct SendBatch {
    data: Vec<u8>,
    msgs: Vec<Queued>,
}

/// One queued datagram: `head` then `tail` (possibly empty), as offsets into
/// the batch's buffer.
#[derive(Debug, Clone)]
struct Queued {
    head: std::ops::Range<usize>,
    tail: std::ops::Range<usize>,
    to: Option<SocketAddr>,
}

/// Bytes staged in a [`SendBatch`] to be shared by several datagrams.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged(std::ops::Range<usize>);

/// What one flush of a [`SendBatch`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SendReport {
    /// Datagrams the kernel accepted.
    pub sent: usize,
    /// Datagrams refused with a per-datagram error (for example
    /// `ECONNREFUSED` after an ICMP port unreachable); they are skipped.
    pub failed: usize,
}

impl BatchSocket {
    /// Binds a socket at `addr` and makes it non-blocking, with large kernel
    /// buffers so that a burst of a whole window is not dropped by the host.
    pub fn bind(addr: SocketAddr) -> io::Result<BatchSocket> {
        let socket = UdpSocket::bind(addr)?;
        Self::from_socket(socket)
    }

    /// Wraps an existing socket (made non-blocking here).
    pub fn from_socket(socket: UdpSocket) -> io::Result<BatchSocket> {
        socket.set_nonblocking(true)?;
        let s = BatchSocket {
            socket,
            refusals: AtomicU64::new(0),
        };
        // Best effort: the kernel caps these at net.core.[rw]mem_max.
        s.set_buffer(libc::SO_RCVBUF, 8 << 20);
        s.set_buffer(libc::SO_SNDBUF, 8 << 20);
        Ok(s)
    }

    /// How many times the kernel reported `ECONNREFUSED`: on a connected
    /// socket, an ICMP port unreachable from the peer's host (nothing
    /// listens there). Such errors are otherwise absorbed, since a peer
    /// that restarts is reached again by the next send.
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Relaxed)
    }

    fn set_buffer(&self, opt: libc::c_int, bytes: libc::c_int) {
        // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a valid pointer.
        unsafe {
            libc::setsockopt(
                self.socket.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&bytes as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }

    /// The underlying socket (for `connect`, `local_addr`, ...).
    pub fn socket(&self) -> &UdpSocket {
        &self.socket
    }

    /// The bound address.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Waits up to `timeout` for the socket to become readable (or writable
    /// with `write`). Returns whether it did.
    pub fn wait(&self, timeout: Duration, write: bool) -> io::Result<bool> {
        wait(&self.socket, timeout, write)
    }

    /// Receives up to a batch of datagrams, waiting at most `timeout` for the
    /// first. Returns how many arrived (0 on timeout). Datagrams longer than
    /// the batch's `mtu` are truncated and reported with their full length,
    /// so the caller's length check refuses them.
    pub fn recv_batch(&self, batch: &mut RecvBatch, timeout: Duration) -> io::Result<usize> {
        batch.received = 0;
        let n = self.recv_now(batch)?;
        if n > 0 || timeout.is_zero() {
            return Ok(n);
        }
        if !self.wait(timeout, false)? {
            return Ok(0);
        }
        self.recv_now(batch)
    }

    fn recv_now(&self, batch: &mut RecvBatch) -> io::Result<usize> {
        let cap = batch.lens.len();
        let mut iovs: Vec<libc::iovec> = batch
            .data
            .chunks_exact_mut(batch.mtu)
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        // SAFETY: mmsghdr is plain data; every pointer set below outlives the call.
        let mut msgs: Vec<libc::mmsghdr> = (0..cap).map(|_| unsafe { zeroed() }).collect();
        for (i, m) in msgs.iter_mut().enumerate() {
            m.msg_hdr.msg_iov = &mut iovs[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_name = (&mut batch.addrs[i] as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        }
        // SAFETY: msgs/iovs/addrs are valid for `cap` entries during the call.
        let rc = unsafe {
            libc::recvmmsg(
                self.socket.as_raw_fd(),
                msgs.as_mut_ptr(),
                cap as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                // A previous send drew an ICMP error; the socket is fine.
                io::ErrorKind::ConnectionRefused => {
                    self.refusals.fetch_add(1, Ordering::Relaxed);
                    Ok(0)
                }
                _ => Err(err),
            };
        }
        let n = rc as usize;
        for (i, m) in msgs.iter().take(n).enumerate() {
            batch.lens[i] = m.msg_len as usize;
        }
        batch.received = n;
        Ok(n)
    }

    /// Sends every queued datagram, waiting for socket space when the kernel
    /// buffer is full, and clears the batch.
    pub fn send_batch(&self, batch: &mut SendBatch) -> io::Result<SendReport> {
        let data = &batch.data;
        let report = self.send_all(batch.msgs.len(), |i| {
            let m = &batch.msgs[i];
            ([&data[m.head.clone()], &data[m.tail.clone()]], m.to)
        });
        batch.clear();
        report
    }

    /// Sends each slice as one datagram to the connected peer, straight from
    /// the caller's buffers (no copy in user space): the agent sends its
    /// slots' packets this way, keeping them for retransmission.
    pub fn send_slices(&self, datagrams: &[&[u8]]) -> io::Result<SendReport> {
        self.send_all(datagrams.len(), |i| ([datagrams[i], &[]], None))
    }

    /// Sends datagrams `0..total`, each given by `msg` as up to two parts and
    /// a destination, in as few `sendmmsg` calls as the kernel allows.
    fn send_all<'a>(
        &self,
        total: usize,
        msg: impl Fn(usize) -> ([&'a [u8]; 2], Option<SocketAddr>),
    ) -> io::Result<SendReport> {
        let mut report = SendReport::default();
        let mut start = 0;
        while start < total {
            match self.send_from(start..total, &msg) {
                Ok(n) => {
                    report.sent += n;
                    start += n;
                }
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => {
                    self.wait(Duration::from_millis(100), true)?;
                }
                Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
                Err(err) if is_per_datagram(&err) => {
                    if err.kind() == io::ErrorKind::ConnectionRefused {
                        self.refusals.fetch_add(1, Ordering::Relaxed);
                    }
                    report.failed += 1;
                    start += 1;
                }
                Err(err) => return Err(err),
            }
        }
        Ok(report)
    }

    fn send_from<'a>(
        &self,
        range: std::ops::Range<usize>,
        msg: &impl Fn(usize) -> ([&'a [u8]; 2], Option<SocketAddr>),
    ) -> io::Result<usize> {
        let count = range.len().min(MAX_SEND);
        // Only the first `count` entries are written and passed to the
        // kernel: no per-call initialisation of the whole arrays (about
        // 13 KiB), which a flush of one small datagram would otherwise pay.
        let mut names = [const { MaybeUninit::<(libc::sockaddr_storage, libc::socklen_t)>::uninit() };
            MAX_SEND];
        let mut iovs = [const { MaybeUninit::<[libc::iovec; 2]>::uninit() }; MAX_SEND];
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_SEND];
        for (k, i) in range.take(count).enumerate() {
            let (parts, to) = msg(i);
            let iov = iovs[k].write([EMPTY_IOV; 2]);
            let mut len = 0;
            for part in parts.iter().filter(|p| !p.is_empty()) {
                iov[len] = libc::iovec {
                    iov_base: part.as_ptr() as *mut libc::c_void,
                    iov_len: part.len(),
                };
                len += 1;
            }
            // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
            let m = &mut msgs[k].write(unsafe { zeroed() }).msg_hdr;
            m.msg_iov = iov.as_mut_ptr();
            m.msg_iovlen = len;
            if let Some(a) = to {
                let name = names[k].write(to_sockaddr(a));
                m.msg_name = (&mut name.0 as *mut libc::sockaddr_storage).cast();
                m.msg_namelen = name.1;
            }
        }
        // SAFETY: msgs and everything they point to are valid for `count` entries.
        let rc = unsafe {
            libc::sendmmsg(
                self.socket.as_raw_fd(),
                msgs.as_mut_ptr().cast::<libc::mmsghdr>(),
                count as libc::c_uint,
                0,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(rc as usize)
        }
    }
}

/// Datagrams per `sendmmsg` (the kernel's UIO_MAXIOV caps it at 1024); the
/// headers live on the stack, so sending allocates nothing.
const MAX_SEND: usize = 64;

const EMPTY_IOV: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

/// Errors that concern one datagram's destination, not the socket.
fn is_per_datagram(err: &io::Error) -> bool {
    matches!(
        err.raw_os_error(),
        Some(
            libc::ECONNREFUSED
                | libc::EHOSTUNREACH
                | libc::ENETUNREACH
                | libc::EMSGSIZE
                | libc::EPERM
                | libc::EACCES
        )
    )
}

impl RecvBatch {
    /// Buffers for `capacity` datagrams of up to `mtu` bytes each.
    pub fn new(capacity: usize, mtu: usize) -> RecvBatch {
        assert!(capacity > 0 && mtu > 0);
        RecvBatch {
            data: vec![0; capacity * mtu],
            mtu,
            lens: vec![0; capacity],
            // SAFETY: an all-zero sockaddr_storage is valid plain data.
            addrs: (0..capacity).map(|_| unsafe { zeroed() }).collect(),
            received: 0,
        }
    }

    /// Datagrams in the last receive.
    pub fn len(&self) -> usize {
        self.received
    }

    /// Whether the last receive got nothing.
    pub fn is_empty(&self) -> bool {
        self.received == 0
    }

    /// Datagram `i` of the last receive. A datagram that did not fit the
    /// buffer is returned cut to `mtu` bytes with `truncated` set.
    pub fn get(&self, i: usize) -> Received<'_> {
        assert!(i < self.received);
        let full = self.lens[i];
        let len = full.min(self.mtu);
        Received {
            data: &self.data[i * self.mtu..i * self.mtu + len],
            truncated: full > self.mtu,
            from: from_sockaddr(&self.addrs[i]),
        }
    }
}

/// One received datagram.
#[derive(Debug)]
pub struct Received<'a> {
    /// Its bytes (cut to the buffer size when `truncated`).
    pub data: &'a [u8],
    /// Whether the datagram was longer than the receive buffer.
    pub truncated: bool,
    /// Its source, when the address family is one we know.
    pub from: Option<SocketAddr>,
}

impl SendBatch {
    /// An empty batch.
    pub fn new() -> SendBatch {
        SendBatch::default()
    }

    /// Queues a datagram built in place by `fill`, which gets a zeroed buffer
    /// of `len` bytes.
    pub fn push_with(&mut self, len: usize, to: Option<SocketAddr>, fill: impl FnOnce(&mut [u8])) {
        let from = self.data.len();
        self.data.resize(from + len, 0);
        fill(&mut self.data[from..]);
        self.msgs.push(Queued {
            head: from..from + len,
            tail: 0..0,
            to,
        });
    }

    /// Queues a copy of `bytes`.
    pub fn push(&mut self, bytes: &[u8], to: Option<SocketAddr>) {
        self.push_with(bytes.len(), to, |b| b.copy_from_slice(bytes));
    }

    /// Copies `bytes` into the batch without queueing a datagram, for
    /// several datagrams to share with [`SendBatch::push_parts`].
    pub fn stage(&mut self, bytes: &[u8]) -> Staged {
        let from = self.data.len();
        self.data.extend_from_slice(bytes);
        Staged(from..self.data.len())
    }

    /// The bytes of a staged range (empty if it is not from this batch
    /// since the last clear).
    pub fn staged(&self, staged: &Staged) -> &[u8] {
        self.data.get(staged.0.clone()).unwrap_or(&[])
    }

    /// Queues the datagram `head` followed by the staged `tail`.
    pub fn push_parts(&mut self, head: &[u8], tail: &Staged, to: Option<SocketAddr>) {
        let from = self.data.len();
        self.data.extend_from_slice(head);
        let tail = if tail.0.end <= from {
            tail.0.clone()
        } else {
            0..0
        };
        self.msgs.push(Queued {
            head: from..self.data.len(),
            tail,
            to,
        });
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.msgs.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.msgs.is_empty()
    }

    /// Drops everything queued.
    pub fn clear(&mut self) {
        self.data.clear();
        self.msgs.clear();
    }
}

fn to_sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: an all-zero sockaddr_storage is valid; we write a smaller
    // sockaddr_in/in6 at its start, which it is sized and aligned to hold.
    unsafe {
        let mut storage: libc::sockaddr_storage = zeroed();
        match addr {
            SocketAddr::V4(a) => {
                let sin =
                    &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                sin.sin_family = libc::AF_INET as libc::sa_family_t;
                sin.sin_port = a.port().to_be();
                sin.sin_addr = libc::in_addr {
                    s_addr: u32::from(*a.ip()).to_be(),
                };
                (storage, size_of::<libc::sockaddr_in>() as libc::socklen_t)
            }
            SocketAddr::V6(a) => {
                let sin6 = &mut *(&mut storage as *mut libc::sockaddr_storage)
                    .cast::<libc::sockaddr_in6>();
                sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
                sin6.sin6_port = a.port().to_be();
                sin6.sin6_addr = libc::in6_addr {
                    s6_addr: a.ip().octets(),
                };
                sin6.sin6_flowinfo = a.flowinfo();
                sin6.sin6_scope_id = a.scope_id();
                (storage, size_of::<libc::sockaddr_in6>() as libc::socklen_t)
            }
        }
    }
}

fn from_sockaddr(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    // SAFETY: the family tag says which sockaddr variant the kernel wrote.
    unsafe {
        match i32::from(storage.ss_family) {
            libc::AF_INET => {
                let sin = &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>();
                let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
                Some(SocketAddr::V4(SocketAddrV4::new(
                    ip,
                    u16::from_be(sin.sin_port),
                )))
            }
            libc::AF_INET6 => {
                let sin6 =
                    &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>();
                let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
                Some(SocketAddr::V6(SocketAddrV6::new(
                    ip,
                    u16::from_be(sin6.sin6_port),
                    sin6.sin6_flowinfo,
                    sin6.sin6_scope_id,
                )))
            }
            _ => None,
        }
    }
}

/// Waits up to `timeout` for `socket` to become readable (or writable with
/// `write`); returns whether it did. To the nanosecond, where a socket's
/// own receive timeout (SO_RCVTIMEO) is rounded up to the kernel's tick
/// (4 ms at 250 Hz): the emulator's paced ports and the paced SELMCAST
/// senders wait for instants microseconds apart. Any socket will do: a
/// listening TCP socket is readable when a client waits to be accepted.
pub fn wait(socket: &impl AsRawFd, timeout: Duration, write: bool) -> io::Result<bool> {
    let mut pfd = libc::pollfd {
        fd: socket.as_raw_fd(),
        events: if write { libc::POLLOUT } else { libc::POLLIN },
        revents: 0,
    };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask.
    let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    match rc {
        -1 => {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(err)
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loopback() -> BatchSocket {
        BatchSocket::bind("127.0.0.1:0".parse().unwrap()).unwrap()
    }

    #[test]
    fn batch_round_trip_over_loopback() {
        let a = loopback();
        let b = loopback();
        let to = b.local_addr().unwrap();
        let mut out = SendBatch::new();
        for i in 0..10u8 {
            out.push_with(3, Some(to), |buf| buf.copy_from_slice(&[i, i, i]));
        }
        let report = a.send_batch(&mut out).unwrap();
        assert_eq!(
            report,
            SendReport {
                sent: 10,
                failed: 0
            }
        );
        assert!(out.is_empty());
        let mut inb = RecvBatch::new(16, 64);
        let mut got = Vec::new();
        while got.len() < 10 {
            let n = b.recv_batch(&mut inb, Duration::from_secs(2)).unwrap();
            assert!(n > 0, "timed out after {} datagrams", got.len());
            for i in 0..n {
                let d = inb.get(i);
                assert_eq!(d.from, Some(a.local_addr().unwrap()));
                got.push(d.data.to_vec());
            }
        }
        assert_eq!(got[9], vec![9, 9, 9]);
    }

    #[test]
    fn oversized_datagram_is_flagged_truncated() {
        let a = loopback();
        let b = loopback();
        let mut out = SendBatch::new();
        out.push(&[7u8; 100], Some(b.local_addr().unwrap()));
        a.send_batch(&mut out).unwrap();
        let mut inb = RecvBatch::new(1, 32);
        assert_eq!(b.recv_batch(&mut inb, Duration::from_secs(2)).unwrap(), 1);
        let d = inb.get(0);
        assert!(d.truncated);
        assert_eq!(d.data.len(), 32);
    }

    fn recv_all(b: &BatchSocket, want: usize) -> Vec<Vec<u8>> {
        let mut inb = RecvBatch::new(16, 256);
        let mut got = Vec::new();
        while got.len() < want {
            let n = b.recv_batch(&mut inb, Duration::from_secs(2)).unwrap();
            assert!(n > 0, "timed out after {} datagrams", got.len());
            got.extend((0..n).map(|i| inb.get(i).data.to_vec()));
        }
        got
    }

    #[test]
    fn staged_payload_is_shared_by_several_datagrams() {
        let (a, b) = (loopback(), loopback());
        let to = b.local_addr().unwrap();
        let mut out = SendBatch::new();
        let payload = out.stage(&[9, 8, 7]);
        out.push_parts(&[1], &payload, Some(to));
        out.push_parts(&[2, 2], &payload, Some(to));
        assert_eq!(out.staged(&payload), &[9, 8, 7]);
        assert_eq!(out.len(), 2);
        assert_eq!(a.send_batch(&mut out).unwrap().sent, 2);
        assert_eq!(recv_all(&b, 2), vec![vec![1, 9, 8, 7], vec![2, 2, 9, 8, 7]]);
    }

    #[test]
    fn more_datagrams_than_one_call_sends_and_slices_go_uncopied() {
        let (a, b) = (loopback(), loopback());
        a.socket().connect(b.local_addr().unwrap()).unwrap();
        let bufs: Vec<Vec<u8>> = (0..150u8).map(|i| vec![i; 5]).collect();
        let slices: Vec<&[u8]> = bufs.iter().map(|v| &v[..]).collect();
        assert_eq!(a.send_slices(&slices).unwrap().sent, 150);
        assert_eq!(recv_all(&b, 150), bufs);
    }

    #[test]
    fn recv_times_out_with_nothing() {
        let a = loopback();
        let mut inb = RecvBatch::new(4, 64);
        assert_eq!(
            a.recv_batch(&mut inb, Duration::from_millis(20)).unwrap(),
            0
        );
        assert!(inb.is_empty());
    }
}
