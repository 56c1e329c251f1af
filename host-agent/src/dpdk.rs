//! The DPDK data path: the worker's packets as raw Ethernet/IPv4/UDP frames
//! on a DPDK port, sent and received in bursts by polling, with no system
//! call on the fast path.
//!
//! - Each slot's packet is an mbuf holding the whole frame: the codec
//!   quantizes straight into it, and a retransmission sends the same mbuf
//!   again (its reference count is raised, so the driver frees only its own
//!   reference). If the driver still holds the previous round when the slot
//!   is rewritten, the slot takes a fresh mbuf instead of writing under it.
//! - Frames carry correct IPv4 and UDP checksums, so a kernel socket at the
//!   other end (the emulator's socket backend, a kernel-socket worker's
//!   switch) accepts them.
//! - The switch's MAC is configured or learned with ARP; the link answers
//!   ARP for its own address (nothing else on the port does: the kernel has
//!   no address there).
//! - A large tensor can use several queue pairs, one core each
//!   ([`DpdkOptions::queues`]): lane `l` of `n` owns the slots `s` with
//!   `s % n == l` (the wire protocol does not change). A NIC's RSS or
//!   af_packet's fanout puts all of the switch's results (one flow) on one
//!   receive queue, so a lane hands a result for another lane's slot over
//!   to that lane through a lock-free queue.

use std::net::{SocketAddr, SocketAddrV4};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use inagg_dpdk::{Eal, Mbuf, Mempool, Port, PortConfig, RxBatch, RxQueue, TxQueue, HEADROOM};
use inagg_wire::frame::{self, Endpoint, Frame, UdpFlow};
use inagg_wire::{Kind, Packet};

use crate::link::{Link, SlotBuf};
use crate::{AgentConfig, Error, Result};

/// How a worker reaches the switch over DPDK.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkOptions {
    /// EAL arguments, e.g. `--no-huge -m 512 --no-pci --vdev
    /// net_af_packet0,iface=eth1`.
    pub eal: String,
    /// The DPDK port (name such as `net_af_packet0`, or id); the first
    /// port when `None`.
    pub port: Option<String>,
    /// This worker's IPv4 address and UDP port on that link: the endpoint
    /// installed in the job.
    pub local: SocketAddrV4,
    /// The switch's MAC; learned with ARP when `None`.
    pub switch_mac: Option<[u8; 6]>,
    /// How long to wait for the switch's ARP reply.
    pub arp_timeout: Duration,
    /// Test and benchmark mode: the port loops frames back (net_ring), and
    /// the link turns each of its own contributions into the result a
    /// one-worker switch would send, so the agent's own cost can be measured
    /// with no switch in the loop.
    pub loopback: bool,
    /// Queue pairs, one lane (thread, core) each. More than 1 needs a port
    /// with that many queues (af_packet: `qpairs=N` in its `--vdev`).
    pub queues: u16,
}

impl DpdkOptions {
    /// Options with the defaults: first port, ARP for the switch's MAC
    /// within 3 s.
    pub fn new(eal: impl Into<String>, local: SocketAddrV4) -> DpdkOptions {
        DpdkOptions {
            eal: eal.into(),
            port: None,
            local,
            switch_mac: None,
            arp_timeout: Duration::from_secs(3),
            loopback: false,
            queues: 1,
        }
    }
}

/// Runs `f` with this thread an EAL lcore, registering it for the call if
/// it is not one already (a lane's thread, or a thread of the async API's
/// blocking pool): an lcore frees the received mbufs and allocates through
/// the pool's per-core cache instead of its shared ring. A thread that
/// cannot register runs `f` all the same, only slower.
pub(crate) fn on_lcore<T>(f: impl FnOnce() -> T) -> T {
    let _guard = Eal::get()
        .and_then(Eal::register_thread)
        .inspect_err(|e| tracing::warn!("DPDK lane without a mempool cache: {e}"))
        .ok();
    f()
}

fn dpdk_err(e: inagg_dpdk::Error) -> Error {
    Error::Dpdk(e.to_string())
}

/// Received-frame and ARP counts of the link (frames that never reach the
/// window engine).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkCounters {
    /// ARP requests for our address answered.
    pub arp_replies: u64,
    /// Frames not for this worker (other addresses, other protocols).
    pub ignored: u64,
    /// Broken frames (bad IPv4 checksum, truncated, fragments, multi-segment).
    pub bad: u64,
    /// Frames the transmit queue would not take (dropped, retransmitted later).
    pub tx_full: u64,
    /// Results handed to the lane that owns their slot.
    pub handed_over: u64,
    /// Results dropped because the owning lane's hand-off queue was full
    /// (recovered by retransmission like any loss).
    pub handoff_full: u64,
}

impl LinkCounters {
    fn add(&mut self, o: &LinkCounters) {
        self.arp_replies += o.arp_replies;
        self.ignored += o.ignored;
        self.bad += o.bad;
        self.tx_full += o.tx_full;
        self.handed_over += o.handed_over;
        self.handoff_full += o.handoff_full;
    }
}

/// A result on its way from the lane that received it to the lane that
/// owns its slot: the mbuf and where the datagram is in it.
struct Handoff {
    mbuf: Mbuf,
    off: u16,
    len: u16,
}

/// Results in flight between lanes, per lane: sized so that a full window
/// of results fits many times over.
const HANDOFF_CAPACITY: usize = 1024;

/// Where the datagram `i` of a receive burst is.
#[derive(Debug, Clone, Copy)]
enum Held {
    /// In mbuf `index` of the burst, at `off..off + len`.
    Mbuf { index: u16, off: u16, len: u16 },
    /// In the loopback scratch buffer, at `off..off + len`.
    Scratch { off: u32, len: u32 },
    /// Handed over by another lane: `inbound[index]`.
    Inbound { index: u16 },
}

/// A worker's DPDK port and its lanes.
#[derive(Debug)]
pub struct DpdkPort {
    port: Port,
    lanes: Vec<DpdkLink>,
}

/// One lane of a worker's DPDK port: one receive and one transmit queue,
/// driven by one thread.
pub struct DpdkLink {
    lane: usize,
    lanes: usize,
    /// Every lane's hand-off queue (index: the receiving lane).
    handoff: Arc<Vec<ArrayQueue<Handoff>>>,
    inbound: Vec<Handoff>,
    rx: RxQueue,
    tx: TxQueue,
    pool: &'static Mempool,
    flow: UdpFlow,
    batch: RxBatch,
    held: Vec<Held>,
    scratch: Vec<u8>,
    /// Loopback mode: burst entries reflected into `scratch`, released
    /// together at the end of the burst.
    reflected: Vec<u16>,
    out: Vec<Mbuf>,
    spare: Vec<MbufSlot>,
    loopback: bool,
    counters: LinkCounters,
}

/// A slot's frame in an mbuf.
#[derive(Debug)]
pub struct MbufSlot {
    mbuf: Mbuf,
    pool: &'static Mempool,
    datagram: usize,
    /// The UDP checksum's sum over the headers, fixed for the buffer's
    /// life ([`frame::seal_base`]): sealing a round sums the datagram only.
    seal_base: u64,
}

impl SlotBuf for MbufSlot {
    fn datagram_mut(&mut self) -> Result<&mut [u8]> {
        if self.mbuf.refcnt() != 1 {
            // The driver still holds the last round (a NIC whose transmit
            // completion is pending): write the next one elsewhere.
            let mut fresh = Mbuf::alloc(self.pool).map_err(dpdk_err)?;
            let len = self.mbuf.data().len();
            fresh
                .append(len)
                .map_err(dpdk_err)?
                .copy_from_slice(self.mbuf.data());
            self.mbuf = fresh;
        }
        let frame = self.mbuf.data_mut().expect("sole reference");
        Ok(frame::datagram_mut(frame, self.datagram))
    }

    fn wire_len(&self) -> usize {
        self.mbuf.data().len()
    }

    fn seal(&mut self, datagram_sum: u64) {
        if let Some(frame) = self.mbuf.data_mut() {
            frame::seal_summed(frame, self.seal_base, datagram_sum);
        }
    }
}

impl std::fmt::Debug for DpdkLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DpdkLink")
            .field("lane", &self.lane)
            .field("lanes", &self.lanes)
            .field("flow", &self.flow)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl DpdkPort {
    /// Initialises the EAL (once per process), starts the port with one
    /// queue pair per lane and learns the switch's MAC.
    pub(crate) fn open(config: &AgentConfig, options: &DpdkOptions) -> Result<DpdkPort> {
        let SocketAddr::V4(switch) = config.switch else {
            return Err(Error::Config(format!(
                "the DPDK data path speaks IPv4; the switch address {} is not",
                config.switch
            )));
        };
        check_local(options.local)?;
        let eal = Eal::init_str(&options.eal).map_err(dpdk_err)?;
        let frame_len = UdpFlow::frame_len(config.datagram_len());
        let data_room = (frame_len + usize::from(HEADROOM)).max(2048 + usize::from(HEADROOM));
        let data_room = u16::try_from(data_room).map_err(|_| {
            Error::Config(format!(
                "K = {} makes {frame_len}-byte frames, larger than an mbuf can hold; use fewer elements",
                config.elements
            ))
        })?;
        if options.queues == 0 {
            return Err(Error::Config("queues must be at least 1".into()));
        }
        let port_name = match &options.port {
            Some(p) => p.clone(),
            None => Port::names(eal).into_iter().next().ok_or_else(|| {
                Error::Dpdk("no DPDK port: add one to the EAL arguments, e.g. --vdev net_af_packet0,iface=eth1".into())
            })?,
        };
        let queues = PortConfig {
            rx_queues: options.queues,
            tx_queues: options.queues,
            ..PortConfig::default()
        };
        Port::check_queues(eal, &port_name, &queues).map_err(dpdk_err)?;
        let lanes = usize::from(options.queues);
        // Each lane keeps a buffer per slot of the window, and one more per
        // slot that has queried the switch; its queues' descriptors,
        // bursts and hand-offs in flight hold more.
        let per_lane = 2 * config.pool_size as usize
            + usize::from(queues.rx_desc + queues.tx_desc)
            + HANDOFF_CAPACITY
            + 4 * inagg_dpdk::BURST;
        let pool_count =
            u32::try_from((per_lane * lanes).next_power_of_two() - 1).map_err(|_| {
                Error::Config(format!("{lanes} queues of {per_lane} mbufs are too many"))
            })?;
        let pool = Mempool::new(eal, pool_count, 256, data_room).map_err(dpdk_err)?;
        let (port, rx, tx) = Port::start(eal, &port_name, &queues, pool).map_err(dpdk_err)?;
        check_mtu(&port, frame_len, config.elements)?;
        let mac = port.mac().map_err(dpdk_err)?;
        let flow = UdpFlow {
            src: Endpoint {
                mac,
                addr: options.local,
            },
            dst: Endpoint {
                mac: options.switch_mac.unwrap_or([0; 6]),
                addr: switch,
            },
        };
        let handoff = Arc::new(
            (0..lanes)
                .map(|_| ArrayQueue::new(HANDOFF_CAPACITY))
                .collect::<Vec<_>>(),
        );
        let lanes: Vec<DpdkLink> = rx
            .into_iter()
            .zip(tx)
            .enumerate()
            .map(|(lane, (rx, tx))| DpdkLink {
                lane,
                lanes,
                handoff: handoff.clone(),
                inbound: Vec::with_capacity(inagg_dpdk::BURST),
                flow,
                rx,
                tx,
                pool,
                batch: RxBatch::new(),
                held: Vec::with_capacity(inagg_dpdk::BURST),
                scratch: Vec::new(),
                reflected: Vec::with_capacity(inagg_dpdk::BURST),
                out: Vec::with_capacity(inagg_dpdk::BURST * 4),
                spare: Vec::new(),
                loopback: options.loopback,
                counters: LinkCounters::default(),
            })
            .collect();
        let mut dpdk = DpdkPort { port, lanes };
        if options.switch_mac.is_none() && !options.loopback {
            dpdk.resolve_switch(options.arp_timeout)?;
        }
        Ok(dpdk)
    }

    /// This worker's address on the link.
    pub fn local(&self) -> SocketAddrV4 {
        self.lanes[0].flow.src.addr
    }

    /// The port in use.
    pub fn port(&self) -> &Port {
        &self.port
    }

    /// The switch's MAC (configured or learned).
    pub fn switch_mac(&self) -> [u8; 6] {
        self.lanes[0].flow.dst.mac
    }

    /// Frame counters, all lanes together.
    pub fn counters(&self) -> LinkCounters {
        let mut total = LinkCounters::default();
        for lane in &self.lanes {
            total.add(&lane.counters);
        }
        total
    }

    /// Lanes (queue pairs, threads).
    pub fn lane_count(&self) -> usize {
        self.lanes.len()
    }

    pub(crate) fn lanes_mut(&mut self) -> &mut [DpdkLink] {
        &mut self.lanes
    }

    /// Sends ARP requests for the switch's address until a reply names its
    /// MAC, answering requests for ours meanwhile. The reply may come in on
    /// any queue: every lane is polled.
    fn resolve_switch(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let flow = self.lanes[0].flow;
        let target = *flow.dst.addr.ip();
        let mut next_request = start;
        loop {
            if let Some(mac) = self
                .lanes
                .iter()
                .map(|l| l.flow.dst.mac)
                .find(|m| *m != [0; 6])
            {
                for lane in &mut self.lanes {
                    lane.flow.dst.mac = mac;
                }
                return Ok(());
            }
            let now = Instant::now();
            if now.duration_since(start) > timeout {
                return Err(Error::Dpdk(format!(
                    "no ARP reply for the switch {target} on port {} within {timeout:?}: is the switch \
                     up and on this link? Or give its MAC (--switch-mac)",
                    self.port.name()
                )));
            }
            if now >= next_request {
                let us = (*flow.src.addr.ip(), flow.src.mac);
                self.lanes[0].send_control(|f| frame::arp_request(us, target, f))?;
                next_request = now + Duration::from_millis(100);
            }
            for lane in &mut self.lanes {
                lane.poll();
                lane.flush_out();
            }
            std::thread::yield_now();
        }
    }
}

impl DpdkLink {
    /// A control frame (ARP) of at most 60 bytes, queued for sending.
    fn send_control(&mut self, build: impl FnOnce(&mut [u8]) -> usize) -> Result<()> {
        let mut m = Mbuf::alloc(self.pool).map_err(dpdk_err)?;
        let buf = m.append(frame::MIN_FRAME).map_err(dpdk_err)?;
        let n = build(buf);
        debug_assert_eq!(n, frame::MIN_FRAME);
        self.out.push(m);
        Ok(())
    }

    fn flush_out(&mut self) {
        if !self.out.is_empty() {
            let (_, dropped) = self.tx.send_all(&mut self.out, 64);
            self.counters.tx_full += dropped as u64;
        }
    }

    /// One receive burst: datagrams for us are noted in `held`, ARP is
    /// answered or learned from, the rest is counted. Returns the burst size.
    fn poll(&mut self) -> usize {
        self.held.clear();
        self.scratch.clear();
        self.inbound.clear();
        if self.lanes > 1 {
            self.take_handoffs();
        }
        let n = self.rx.burst(&mut self.batch);
        for i in 0..n {
            self.classify(i);
        }
        if !self.reflected.is_empty() {
            // The looped mbufs are the slots' own: let go of them now so
            // the slots can rewrite them in place for their next rounds.
            self.batch.free_some(&self.reflected);
            self.reflected.clear();
        }
        n
    }

    /// Results other lanes received for this lane's slots (a burst at most).
    fn take_handoffs(&mut self) {
        while self.inbound.len() < inagg_dpdk::BURST {
            let Some(h) = self.handoff[self.lane].pop() else {
                break;
            };
            self.held.push(Held::Inbound {
                index: self.inbound.len() as u16,
            });
            self.inbound.push(h);
        }
    }

    /// The lane that owns the slot a datagram is for.
    fn owner(&self, datagram: &[u8]) -> usize {
        if self.lanes == 1 {
            return self.lane;
        }
        Packet::new_checked(datagram).map_or(self.lane, |p| usize::from(p.slot()) % self.lanes)
    }

    /// Passes a result to the lane that owns its slot.
    fn hand_over(&mut self, owner: usize, h: Handoff) {
        match self.handoff[owner].push(h) {
            Ok(()) => self.counters.handed_over += 1,
            Err(_) => self.counters.handoff_full += 1,
        }
    }

    fn classify(&mut self, i: usize) {
        let data = self.batch.data(i);
        let us = self.flow.src;
        match frame::parse(data) {
            Frame::Udp { src, dst, payload } => {
                let off = payload.as_ptr() as usize - data.as_ptr() as usize;
                let (off, len) = (off as u16, payload.len() as u16);
                let owner = self.owner(payload);
                if dst.addr == us.addr && src.addr.ip() == self.flow.dst.addr.ip() {
                    if owner == self.lane {
                        self.held.push(Held::Mbuf {
                            index: i as u16,
                            off,
                            len,
                        });
                    } else if let Some(mbuf) = self.batch.take(i) {
                        self.hand_over(owner, Handoff { mbuf, off, len });
                    }
                } else if self.loopback && src.addr == us.addr {
                    if owner == self.lane {
                        reflect(&mut self.scratch, &mut self.held, payload);
                    } else if let Ok(mbuf) = reflected_copy(self.pool, payload) {
                        self.hand_over(owner, Handoff { mbuf, off: 0, len });
                    }
                    self.reflected.push(i as u16);
                } else {
                    self.counters.ignored += 1;
                }
            }
            Frame::ArpRequest { sender, target } if target == *us.addr.ip() => {
                let me = (*us.addr.ip(), us.mac);
                if self
                    .send_control(|f| frame::arp_reply(me, sender, f))
                    .is_ok()
                {
                    self.counters.arp_replies += 1;
                }
            }
            Frame::ArpReply { sender } if sender.0 == *self.flow.dst.addr.ip() => {
                self.flow.dst.mac = sender.1;
            }
            Frame::Bad(_) => self.counters.bad += 1,
            _ => self.counters.ignored += 1,
        }
    }
}

/// Loopback mode: our own contribution comes back as the result of a
/// one-worker job (a copy: the mbuf is still the slot's).
fn reflect(scratch: &mut Vec<u8>, held: &mut Vec<Held>, datagram: &[u8]) {
    let off = scratch.len();
    scratch.extend_from_slice(datagram);
    as_result(&mut scratch[off..]);
    held.push(Held::Scratch {
        off: off as u32,
        len: datagram.len() as u32,
    });
}

/// Loopback mode, for another lane's slot: the result in an mbuf of its own.
fn reflected_copy(pool: &Mempool, datagram: &[u8]) -> std::result::Result<Mbuf, inagg_dpdk::Error> {
    let mut m = Mbuf::alloc(pool)?;
    let buf = m.append(datagram.len())?;
    buf.copy_from_slice(datagram);
    as_result(buf);
    Ok(m)
}

/// Turns a contribution into the result a one-worker switch would send
/// (its count is the contribution's weight: 1, or 2 for a handshake).
fn as_result(datagram: &mut [u8]) {
    if let Ok(mut p) = Packet::new_checked(datagram) {
        let weight = p.count().max(1);
        p.set_kind(Kind::Result);
        p.set_count(weight);
    }
}

/// The worker's own address and port, which its frames carry and the
/// switch knows it by: on a DPDK port no kernel picks them, so an
/// unspecified one would send every packet from 0.0.0.0 or port 0, which
/// the switch drops as an unknown worker until the all-reduce times out.
fn check_local(local: SocketAddrV4) -> Result<()> {
    if local.ip().is_unspecified() || local.port() == 0 {
        return Err(Error::Config(format!(
            "local address {local}: the DPDK data path needs this worker's own IPv4 address \
             and UDP port (its frames carry them; no kernel picks them)"
        )));
    }
    Ok(())
}

fn check_mtu(port: &Port, frame_len: usize, elements: u16) -> Result<()> {
    let mtu = usize::from(port.mtu().map_err(dpdk_err)?);
    let max = mtu + frame::ETHERNET_LEN;
    if frame_len > max {
        let fit = mtu.saturating_sub(frame::IPV4_LEN + frame::UDP_LEN + inagg_wire::HEADER_LEN) / 4;
        return Err(Error::Config(format!(
            "K = {elements} makes {frame_len}-byte frames; port {} carries at most {max} (MTU {mtu}): \
             use K <= {fit} (--elements) or raise the MTU",
            port.name()
        )));
    }
    Ok(())
}

impl Link for DpdkLink {
    type Buf = MbufSlot;

    fn new_buf(&mut self, datagram: usize) -> Result<MbufSlot> {
        let mut mbuf = Mbuf::alloc(self.pool).map_err(dpdk_err)?;
        let frame = mbuf
            .append(UdpFlow::frame_len(datagram))
            .map_err(dpdk_err)?;
        self.flow.emit(frame, datagram);
        let seal_base = frame::seal_base(frame);
        Ok(MbufSlot {
            mbuf,
            pool: self.pool,
            datagram,
            seal_base,
        })
    }

    fn send<'b>(&mut self, bufs: impl ExactSizeIterator<Item = &'b MbufSlot>) -> Result<u64> {
        for b in bufs {
            self.out.push(b.mbuf.share());
        }
        let before = self.counters.tx_full;
        self.flush_out();
        Ok(self.counters.tx_full - before)
    }

    fn recv(&mut self, wait: Duration) -> Result<usize> {
        let start = Instant::now();
        let mut idle = 0u32;
        loop {
            let n = self.poll();
            self.flush_out();
            if !self.held.is_empty() {
                return Ok(self.held.len());
            }
            if n == 0 {
                // Poll hard for a while, then let other threads (and, on a
                // shared machine, other processes) run between polls. The
                // clock is read every 32 empty polls: it costs more than one.
                idle += 1;
                if idle.is_multiple_of(32) && start.elapsed() >= wait {
                    return Ok(0);
                }
                if idle < 256 {
                    std::hint::spin_loop();
                } else {
                    std::thread::yield_now();
                }
            }
        }
    }

    fn received(&self, i: usize) -> &[u8] {
        match self.held[i] {
            Held::Mbuf { index, off, len } => {
                let (off, len) = (usize::from(off), usize::from(len));
                &self.batch.data(usize::from(index))[off..off + len]
            }
            Held::Scratch { off, len } => &self.scratch[off as usize..(off + len) as usize],
            Held::Inbound { index } => {
                let h = &self.inbound[usize::from(index)];
                let (off, len) = (usize::from(h.off), usize::from(h.len));
                &h.mbuf.data()[off..off + len]
            }
        }
    }

    fn batch(&self) -> usize {
        inagg_dpdk::BURST
    }

    fn spare(&mut self) -> &mut Vec<MbufSlot> {
        &mut self.spare
    }

    fn forward(&mut self) -> usize {
        let n = self.poll();
        self.flush_out();
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refused before the EAL starts (its arguments here are not even
    /// valid), with the address in the message, from every entry point:
    /// the library, `inagg agent --backend dpdk` and the C API.
    #[test]
    fn an_unspecified_local_address_is_refused_before_the_eal_starts() {
        let config = AgentConfig::new("10.0.0.100:47000".parse().unwrap(), 1, 0, 2, 8, 64);
        for local in ["0.0.0.0:5000", "10.0.0.2:0"] {
            let options = DpdkOptions::new("--not-an-eal-flag", local.parse().unwrap());
            let err = DpdkPort::open(&config, &options).unwrap_err();
            let Error::Config(message) = &err else {
                panic!("{local}: {err}");
            };
            assert!(message.contains(local), "{message}");
            assert!(message.contains("own IPv4 address"), "{message}");
        }
    }
}
