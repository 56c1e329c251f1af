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

use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

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
        }
    }
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
}

/// Where the datagram `i` of a receive burst is.
#[derive(Debug, Clone, Copy)]
enum Held {
    /// In mbuf `index` of the burst, at `off..off + len`.
    Mbuf { index: u16, off: u16, len: u16 },
    /// In the loopback scratch buffer, at `off..off + len`.
    Scratch { off: u32, len: u32 },
}

/// A worker's DPDK port, one receive and one transmit queue.
#[derive(Debug)]
pub struct DpdkLink {
    port: Port,
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

    fn seal(&mut self) {
        if let Some(frame) = self.mbuf.data_mut() {
            frame::seal(frame);
        }
    }
}

impl DpdkLink {
    /// Initialises the EAL (once per process), starts the port and learns
    /// the switch's MAC.
    pub(crate) fn open(config: &AgentConfig, options: &DpdkOptions) -> Result<DpdkLink> {
        let SocketAddr::V4(switch) = config.switch else {
            return Err(Error::Config(format!(
                "the DPDK data path speaks IPv4; the switch address {} is not",
                config.switch
            )));
        };
        let eal = Eal::init_str(&options.eal).map_err(dpdk_err)?;
        let frame_len = UdpFlow::frame_len(config.datagram_len());
        let data_room = (frame_len + usize::from(HEADROOM)).max(2048 + usize::from(HEADROOM));
        let data_room = u16::try_from(data_room).map_err(|_| {
            Error::Config(format!(
                "K = {} makes {frame_len}-byte frames, larger than an mbuf can hold; use fewer elements",
                config.elements
            ))
        })?;
        let pool_count = (config.pool_size + 4096).next_power_of_two() - 1;
        let pool = Mempool::new(eal, pool_count, 256, data_room).map_err(dpdk_err)?;
        let port_name = match &options.port {
            Some(p) => p.clone(),
            None => Port::names(eal).into_iter().next().ok_or_else(|| {
                Error::Dpdk("no DPDK port: add one to the EAL arguments, e.g. --vdev net_af_packet0,iface=eth1".into())
            })?,
        };
        let (port, mut rx, mut tx) =
            Port::start(eal, &port_name, &PortConfig::default(), pool).map_err(dpdk_err)?;
        let (rx, tx) = (rx.remove(0), tx.remove(0));
        check_mtu(&port, frame_len, config.elements)?;
        let mac = port.mac().map_err(dpdk_err)?;
        let mut link = DpdkLink {
            flow: UdpFlow {
                src: Endpoint {
                    mac,
                    addr: options.local,
                },
                dst: Endpoint {
                    mac: options.switch_mac.unwrap_or([0; 6]),
                    addr: switch,
                },
            },
            port,
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
        };
        if options.switch_mac.is_none() && !options.loopback {
            link.resolve_switch(options.arp_timeout)?;
        }
        Ok(link)
    }

    /// This worker's address on the link.
    pub fn local(&self) -> SocketAddrV4 {
        self.flow.src.addr
    }

    /// The port in use.
    pub fn port(&self) -> &Port {
        &self.port
    }

    /// The switch's MAC (configured or learned).
    pub fn switch_mac(&self) -> [u8; 6] {
        self.flow.dst.mac
    }

    /// Frame counters.
    pub fn counters(&self) -> LinkCounters {
        self.counters
    }

    /// Sends ARP requests for the switch's address until a reply names its
    /// MAC, answering requests for ours meanwhile.
    fn resolve_switch(&mut self, timeout: Duration) -> Result<()> {
        let start = Instant::now();
        let target = *self.flow.dst.addr.ip();
        let mut next_request = start;
        while self.flow.dst.mac == [0; 6] {
            let now = Instant::now();
            if now.duration_since(start) > timeout {
                return Err(Error::Dpdk(format!(
                    "no ARP reply for the switch {target} on port {} within {timeout:?}: is the switch \
                     up and on this link? Or give its MAC (--switch-mac)",
                    self.port.name()
                )));
            }
            if now >= next_request {
                let us = (*self.flow.src.addr.ip(), self.flow.src.mac);
                self.send_control(|f| frame::arp_request(us, target, f))?;
                next_request = now + Duration::from_millis(100);
            }
            self.poll();
            self.flush_out();
            std::thread::yield_now();
        }
        Ok(())
    }

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

    fn classify(&mut self, i: usize) {
        let data = self.batch.data(i);
        let us = self.flow.src;
        match frame::parse(data) {
            Frame::Udp { src, dst, payload } => {
                let off = payload.as_ptr() as usize - data.as_ptr() as usize;
                if dst.addr == us.addr && src.addr.ip() == self.flow.dst.addr.ip() {
                    self.held.push(Held::Mbuf {
                        index: i as u16,
                        off: off as u16,
                        len: payload.len() as u16,
                    });
                } else if self.loopback && src.addr == us.addr {
                    reflect(&mut self.scratch, &mut self.held, payload);
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
    if let Ok(mut p) = Packet::new_checked(&mut scratch[off..]) {
        p.set_kind(Kind::Result);
        p.set_count(1);
    }
    held.push(Held::Scratch {
        off: off as u32,
        len: datagram.len() as u32,
    });
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
        Ok(MbufSlot {
            mbuf,
            pool: self.pool,
            datagram,
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
        }
    }

    fn batch(&self) -> usize {
        inagg_dpdk::BURST
    }

    fn spare(&mut self) -> &mut Vec<MbufSlot> {
        &mut self.spare
    }
}
