//! The data paths a worker can send and receive on, behind one trait: the
//! window engine is written once and monomorphised for each.
//!
//! - [`SocketLink`]: a kernel UDP socket, batched with `recvmmsg` /
//!   `sendmmsg` (the fallback that runs anywhere).
//! - `DpdkLink` (cargo feature `dpdk`, in `crate::dpdk`): raw Ethernet
//!   frames on a DPDK port, no system call on the fast path.
//! - [`ShmLink`]: shared-memory rings to an emulator on the same host
//!   ([`inagg_netio::shm`]), no kernel copies.
//!
//! A slot's packet buffer ([`SlotBuf`]) belongs to the link: over DPDK it is
//! an mbuf that holds the whole frame, so quantization writes straight into
//! the memory the NIC sends from, and a retransmission sends the same mbuf
//! again (sharing it, not copying).

use std::net::SocketAddr;
use std::time::Duration;

use inagg_netio::shm::{Shape, WorkerChannel};
use inagg_netio::udp::{BatchSocket, RecvBatch};
use inagg_wire::HEADER_LEN;

use crate::{Error, Result};

/// Datagrams per receive call on the socket path.
pub(crate) const RECV_BATCH: usize = 64;

/// A slot's packet: written once per round, kept for retransmission.
pub(crate) trait SlotBuf {
    /// The datagram (inagg header and payload), writable. A link whose NIC
    /// may still hold the previous round swaps in a fresh buffer first.
    fn datagram_mut(&mut self) -> Result<&mut [u8]>;
    /// Bytes on the wire for this packet.
    fn wire_len(&self) -> usize;
    /// Called once the datagram is final (checksums), with its
    /// [`inagg_wire::frame::ones_sum_native`] sum.
    fn seal(&mut self, datagram_sum: u64);
}

/// One data path.
pub(crate) trait Link {
    /// A slot's packet buffer.
    type Buf: SlotBuf;
    /// A buffer for datagrams of `datagram` bytes.
    fn new_buf(&mut self, datagram: usize) -> Result<Self::Buf>;
    /// Sends the buffers (they stay with their slots); returns how many the
    /// path refused (recovered by retransmission like any loss).
    fn send<'b>(&mut self, bufs: impl ExactSizeIterator<Item = &'b Self::Buf>) -> Result<u64>
    where
        Self::Buf: 'b;
    /// Waits up to `wait` for datagrams addressed to this worker; returns
    /// how many [`Link::received`] now holds (0 on timeout).
    fn recv(&mut self, wait: Duration) -> Result<usize>;
    /// Datagram `i` of the last [`Link::recv`].
    fn received(&self, i: usize) -> &[u8];
    /// Most datagrams one `recv` returns: fewer means the path is drained.
    fn batch(&self) -> usize;
    /// Slot buffers kept between all-reduces (fresh ones cost page faults
    /// or mbuf allocations).
    fn spare(&mut self) -> &mut Vec<Self::Buf>;
    /// For a lane whose own slots are done while other lanes still run:
    /// receive once and pass on what belongs to them (results for its own
    /// slots are late copies and are dropped). Returns what was received.
    #[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
    fn forward(&mut self) -> usize {
        0
    }
    /// ICMP port unreachables seen from the switch's address (a kernel
    /// socket reports them; a raw Ethernet path does not).
    fn refusals(&self) -> u64 {
        0
    }
}

/// The kernel UDP socket path.
#[derive(Debug)]
pub(crate) struct SocketLink {
    socket: BatchSocket,
    rx: RecvBatch,
    spare: Vec<Vec<u8>>,
}

impl SocketLink {
    /// Binds `bind` and connects to `switch`.
    pub fn new(bind: SocketAddr, switch: SocketAddr, datagram: usize) -> Result<SocketLink> {
        let socket = BatchSocket::bind(bind).map_err(|e| Error::io("bind the worker socket", e))?;
        SocketLink::over(socket, bind, switch, datagram)
    }

    /// Connects `socket`, bound already, to `switch`.
    pub fn from_socket(
        socket: std::net::UdpSocket,
        switch: SocketAddr,
        datagram: usize,
    ) -> Result<SocketLink> {
        let bind = socket
            .local_addr()
            .map_err(|e| Error::io("read the worker socket's address", e))?;
        let socket = BatchSocket::from_socket(socket)
            .map_err(|e| Error::io("set up the worker socket", e))?;
        SocketLink::over(socket, bind, switch, datagram)
    }

    /// Connects `socket`, bound to `bind` (as the configuration gave it,
    /// for the error), to `switch`.
    fn over(
        socket: BatchSocket,
        bind: SocketAddr,
        switch: SocketAddr,
        datagram: usize,
    ) -> Result<SocketLink> {
        socket.socket().connect(switch).map_err(|e| {
            // EINVAL: Linux's answer to a route off this host from a
            // loopback source.
            if e.kind() == std::io::ErrorKind::InvalidInput && bind.ip().is_loopback() {
                Error::Config(format!(
                    "a worker bound to {bind} cannot reach the switch at {switch}: a loopback \
                     address reaches only this host; bind an address on the switch's network \
                     (or 0.0.0.0:PORT)"
                ))
            } else {
                Error::io("connect to the switch", e)
            }
        })?;
        Ok(SocketLink {
            socket,
            rx: RecvBatch::new(RECV_BATCH, datagram.max(HEADER_LEN)),
            spare: Vec::new(),
        })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.socket
            .local_addr()
            .expect("bound socket has an address")
    }
}

impl SlotBuf for Vec<u8> {
    fn datagram_mut(&mut self) -> Result<&mut [u8]> {
        Ok(&mut self[..])
    }

    fn wire_len(&self) -> usize {
        self.len()
    }

    fn seal(&mut self, _datagram_sum: u64) {}
}

impl Link for SocketLink {
    type Buf = Vec<u8>;

    fn new_buf(&mut self, datagram: usize) -> Result<Vec<u8>> {
        Ok(vec![0; datagram])
    }

    fn send<'b>(&mut self, bufs: impl ExactSizeIterator<Item = &'b Vec<u8>>) -> Result<u64> {
        let slices: Vec<&[u8]> = bufs.map(|b| &b[..]).collect();
        let report = self
            .socket
            .send_slices(&slices)
            .map_err(|e| Error::io("send contributions", e))?;
        Ok(report.failed as u64)
    }

    fn recv(&mut self, wait: Duration) -> Result<usize> {
        self.socket
            .recv_batch(&mut self.rx, wait)
            .map_err(|e| Error::io("receive results", e))
    }

    fn received(&self, i: usize) -> &[u8] {
        self.rx.get(i).data
    }

    fn batch(&self) -> usize {
        RECV_BATCH
    }

    fn spare(&mut self) -> &mut Vec<Vec<u8>> {
        &mut self.spare
    }

    fn refusals(&self) -> u64 {
        self.socket.refusals()
    }
}

/// A worker's shared-memory channel at most: 16 MiB per ring, 128 slots
/// of the largest datagrams (64 KB), more than the windows those run at;
/// the emulator admits 4 GiB of channels in all.
pub(crate) const SHM_CHANNEL_BYTES: usize = 32 << 20;

/// The shared-memory path to an emulator on this host (`inagg emu --shm`).
#[derive(Debug)]
pub(crate) struct ShmLink {
    channel: WorkerChannel,
    endpoint: SocketAddr,
    spare: Vec<Vec<u8>>,
}

impl ShmLink {
    /// Attaches to the emulator's socket at `path` as `endpoint`, with
    /// rings of room for a `pool` of slots in flight and a receive batch,
    /// within [`SHM_CHANNEL_BYTES`].
    pub fn attach(
        path: &std::path::Path,
        endpoint: SocketAddr,
        datagram: usize,
        pool: u32,
    ) -> Result<ShmLink> {
        let wanted = pool as usize + RECV_BATCH;
        let slots = Shape::slots_within(datagram, wanted, SHM_CHANNEL_BYTES);
        let channel = WorkerChannel::attach(path, endpoint, datagram, slots)
            .map_err(|e| Error::io("attach to the emulator's shared memory", e))?;
        Ok(ShmLink {
            channel,
            endpoint,
            spare: Vec::new(),
        })
    }

    /// The endpoint the channel speaks for.
    pub fn local_addr(&self) -> SocketAddr {
        self.endpoint
    }
}

impl Link for ShmLink {
    type Buf = Vec<u8>;

    fn new_buf(&mut self, datagram: usize) -> Result<Vec<u8>> {
        Ok(vec![0; datagram])
    }

    fn send<'b>(&mut self, bufs: impl ExactSizeIterator<Item = &'b Vec<u8>>) -> Result<u64> {
        self.channel
            .send(bufs.map(|b| &b[..]))
            .map_err(|e| Error::io("send contributions", e))
    }

    fn recv(&mut self, wait: Duration) -> Result<usize> {
        self.channel
            .recv(wait, RECV_BATCH)
            .map_err(|e| Error::io("receive results", e))
    }

    fn received(&self, i: usize) -> &[u8] {
        self.channel.get(i)
    }

    fn batch(&self) -> usize {
        RECV_BATCH
    }

    fn spare(&mut self) -> &mut Vec<Vec<u8>> {
        &mut self.spare
    }
}
