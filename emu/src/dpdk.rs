//! The emulator's data plane on DPDK ports (`inagg emu --backend dpdk`):
//! the same pipeline as the socket data plane, fed with raw Ethernet frames
//! polled from every port, so a server with a NIC (or a veth through
//! net_af_packet, or memif) acts as a software aggregation switch.
//!
//! The emulator owns one IPv4 address (the data address) on all its ports.
//! It answers ARP for it, and learns each worker's port and MAC from the
//! frames the worker sends (ARP or data). A copy for a worker it has not
//! learned yet is dropped and counted (`undeliverable`) while it asks for that
//! address with ARP on every port; the worker's retransmission recovers it.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inagg_dpdk::{Eal, Mbuf, Mempool, Port, PortConfig, RxBatch, RxQueue, TxQueue, HEADROOM};
use inagg_wire::frame::{self, Endpoint, Frame, UdpFlow};
use inagg_wire::{HEADER_LEN, MAX_ELEMENTS};

use crate::neighbours::{Neighbours, MAX_NEIGHBOURS};
use crate::pipeline::{Egress, Pipeline};
use crate::server::{lock, validate, Emulator, EmulatorConfig, State};
use inagg_switch_api::counters::DropReason;

/// Which DPDK ports to serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpdkPorts {
    /// EAL arguments, e.g. `--no-huge -m 512 --no-pci --vdev
    /// net_af_packet0,iface=veth1 --vdev net_af_packet1,iface=veth2`.
    pub eal: String,
    /// Port names or ids; every port DPDK has when empty.
    pub ports: Vec<String>,
}

fn dpdk_err(what: &str, e: inagg_dpdk::Error) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

impl Emulator {
    /// Starts the emulator with its data plane on DPDK ports; the data
    /// address (IPv4) is the switch's address on those links. The control
    /// endpoint is the usual TCP one.
    pub fn start_dpdk(config: EmulatorConfig, dpdk: &DpdkPorts) -> io::Result<Emulator> {
        validate(&config)?;
        if config.link.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a line rate (paced priority queues) is built for the socket data plane only; \
                 a DPDK port sends at its own rate",
            ));
        }
        let SocketAddr::V4(us) = config.data_addr else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the DPDK data plane speaks IPv4; {} is not",
                    config.data_addr
                ),
            ));
        };
        if us.port() == 0 || us.ip().is_unspecified() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the DPDK data plane needs a concrete IPv4 address and port, not {us}"),
            ));
        }
        let plane = DpdkPlane::open(us, dpdk, usize::from(config.switch.max_elements))?;
        Emulator::launch(config, SocketAddr::V4(us), move |state, stop| {
            plane.run(state, &stop)
        })
    }
}

/// One served port.
struct Served {
    port: Port,
    rx: RxQueue,
    tx: TxQueue,
}

/// The DPDK data-plane loop.
struct DpdkPlane {
    ports: Vec<Served>,
    egress: FrameEgress,
    pipeline: Pipeline,
    batch: RxBatch,
}

impl DpdkPlane {
    fn open(us: SocketAddrV4, dpdk: &DpdkPorts, max_elements: usize) -> io::Result<DpdkPlane> {
        let eal = Eal::init_str(&dpdk.eal).map_err(|e| dpdk_err("start DPDK", e))?;
        let names = if dpdk.ports.is_empty() {
            Port::names(eal)
        } else {
            dpdk.ports.clone()
        };
        if names.is_empty() {
            return Err(io::Error::other(
                "no DPDK port: add them to the EAL arguments, e.g. --vdev net_af_packet0,iface=eth1",
            ));
        }
        let count = (names.len() as u32 * 2048 + 8192).next_power_of_two() - 1;
        let data_room = data_room(max_elements);
        let pool = Mempool::new(eal, count, 256, data_room)
            .map_err(|e| dpdk_err("create the mbuf pool", e))?;
        let mut ports = Vec::new();
        for name in &names {
            let (port, mut rx, mut tx) = Port::start(eal, name, &PortConfig::default(), pool)
                .map_err(|e| dpdk_err(&format!("start port {name}"), e))?;
            ports.push(Served {
                port,
                rx: rx.remove(0),
                tx: tx.remove(0),
            });
        }
        let macs = ports
            .iter()
            .map(|p| p.port.mac())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| dpdk_err("read a port's MAC", e))?;
        let n = ports.len();
        Ok(DpdkPlane {
            ports,
            egress: FrameEgress {
                pool,
                us,
                macs,
                neighbours: Neighbours::new(MAX_NEIGHBOURS),
                staged: Vec::new(),
                out: (0..n).map(|_| Vec::new()).collect(),
                unresolved: Vec::new(),
            },
            pipeline: Pipeline::default(),
            batch: RxBatch::new(),
        })
    }

    /// Polls every port until stopped.
    fn run(mut self, state: Arc<Mutex<State>>, stop: &AtomicBool) {
        // This thread allocates an mbuf per result and the port frees what
        // it sent: as an lcore, both go through the pool's per-core cache.
        let _lcore = Eal::get()
            .and_then(Eal::register_thread)
            .inspect_err(|e| tracing::warn!("data plane without a mempool cache: {e}"))
            .ok();
        let mut idle_since = Instant::now();
        let mut spins = 0u32;
        while !stop.load(Ordering::Relaxed) {
            let got = {
                let mut state = lock(&state);
                let got = self.poll_all(&mut state);
                if got == 0 {
                    self.pipeline.idle(&mut state, &mut self.egress);
                }
                got
            };
            self.flush();
            if got > 0 {
                idle_since = Instant::now();
                spins = 0;
            } else {
                backoff(&mut spins, idle_since);
            }
        }
    }

    /// One burst from each port through the pipeline; returns frames seen.
    fn poll_all(&mut self, state: &mut State) -> usize {
        let mut got = 0;
        for p in 0..self.ports.len() {
            let n = self.ports[p].rx.burst(&mut self.batch);
            got += n;
            for i in 0..n {
                self.frame(state, p, i);
            }
        }
        got
    }

    /// One received frame.
    fn frame(&mut self, state: &mut State, port: usize, i: usize) {
        let us = self.egress.us;
        match frame::parse(self.batch.data(i)) {
            Frame::Udp { src, dst, payload } if dst.addr == us => {
                self.egress.learn(state, *src.addr.ip(), port, src.mac);
                self.pipeline
                    .serve(state, payload, SocketAddr::V4(src.addr), &mut self.egress);
            }
            Frame::ArpRequest { sender, target } => {
                self.egress.learn(state, sender.0, port, sender.1);
                if target == *us.ip() {
                    self.egress
                        .arp(port, |f, mac| frame::arp_reply((*us.ip(), mac), sender, f));
                }
            }
            Frame::ArpReply { sender } => self.egress.learn(state, sender.0, port, sender.1),
            // A broken frame on the data port: counted like a broken datagram.
            Frame::Bad(_) => state.switch.counters_mut().drop(DropReason::Malformed),
            // Not for the aggregation switch (it has no forwarding table).
            _ => {}
        }
    }

    /// Sends what the burst produced, and ARP for unresolved workers.
    fn flush(&mut self) {
        self.egress.ask_unresolved();
        for (p, served) in self.ports.iter_mut().enumerate() {
            if !self.egress.out[p].is_empty() {
                served.tx.send_all(&mut self.egress.out[p], 64);
            }
        }
        self.egress.staged.clear();
    }
}

/// Mbuf size: the largest frame a job may need, but no more than a jumbo
/// frame (9000-byte MTU) because no Ethernet port carries more; a result
/// too big for its port is counted `undeliverable`.
fn data_room(max_elements: usize) -> u16 {
    let largest = UdpFlow::frame_len(HEADER_LEN + max_elements.min(MAX_ELEMENTS) * 4);
    let jumbo = 9000 + frame::ETHERNET_LEN;
    (largest.min(jumbo) + usize::from(HEADROOM)).max(2048 + usize::from(HEADROOM)) as u16
}

/// Spin while traffic is recent, then yield, then sleep: a busy switch
/// polls flat out, an idle one leaves the cores to others.
fn backoff(spins: &mut u32, idle_since: Instant) {
    *spins = spins.saturating_add(1);
    if *spins < 256 {
        std::hint::spin_loop();
    } else if idle_since.elapsed() < Duration::from_millis(20) {
        std::thread::yield_now();
    } else {
        std::thread::sleep(Duration::from_micros(100));
    }
}

/// Builds outgoing frames per port from the pipeline's datagrams.
struct FrameEgress {
    pool: &'static Mempool,
    us: SocketAddrV4,
    macs: Vec<[u8; 6]>,
    /// Worker address -> (port index, MAC), learned from received frames.
    neighbours: Neighbours,
    staged: Vec<u8>,
    out: Vec<Vec<Mbuf>>,
    unresolved: Vec<Ipv4Addr>,
}

impl FrameEgress {
    /// Learns where `ip` is; a refusal (the table is full) is counted.
    fn learn(&mut self, state: &mut State, ip: Ipv4Addr, port: usize, mac: [u8; 6]) {
        if !self.neighbours.learn(ip, (port, mac)) {
            state.switch.counters_mut().neighbours_refused += 1;
        }
    }

    /// Queues an ARP frame on `port`, built by `build(frame, our_mac)`.
    fn arp(&mut self, port: usize, build: impl FnOnce(&mut [u8], [u8; 6]) -> usize) {
        let Ok(mut m) = Mbuf::alloc(self.pool) else {
            return;
        };
        if let Ok(f) = m.append(frame::MIN_FRAME) {
            build(f, self.macs[port]);
            self.out[port].push(m);
        }
    }

    /// ARP requests, on every port, for addresses results could not reach
    /// (at most every [`ASK_INTERVAL`](crate::neighbours::ASK_INTERVAL) per
    /// address).
    fn ask_unresolved(&mut self) {
        let now = Instant::now();
        for ip in std::mem::take(&mut self.unresolved) {
            if !self.neighbours.should_ask(ip, now) {
                continue;
            }
            let us = *self.us.ip();
            for p in 0..self.macs.len() {
                self.arp(p, |f, mac| frame::arp_request((us, mac), ip, f));
            }
        }
    }

    /// A frame for `to` carrying `head` then `tail`; false if `to` is not
    /// reachable (unlearned, not IPv4) or no mbuf is free.
    fn frame(&mut self, head: &[u8], tail: Range<usize>, to: SocketAddr) -> bool {
        let SocketAddr::V4(to) = to else {
            return false;
        };
        let Some((port, mac)) = self.neighbours.get(*to.ip()) else {
            self.unresolved.push(*to.ip());
            return false;
        };
        let datagram = head.len() + tail.len();
        let Ok(mut m) = Mbuf::alloc(self.pool) else {
            return false;
        };
        let Ok(f) = m.append(UdpFlow::frame_len(datagram)) else {
            return false;
        };
        let flow = UdpFlow {
            src: Endpoint {
                mac: self.macs[port],
                addr: self.us,
            },
            dst: Endpoint { mac, addr: to },
        };
        flow.emit(f, datagram);
        let d = frame::datagram_mut(f, datagram);
        d[..head.len()].copy_from_slice(head);
        d[head.len()..].copy_from_slice(&self.staged[tail]);
        frame::seal(f);
        self.out[port].push(m);
        true
    }
}

impl Egress for FrameEgress {
    type Staged = Range<usize>;

    fn stage(&mut self, payload: &[u8]) -> Range<usize> {
        let start = self.staged.len();
        self.staged.extend_from_slice(payload);
        start..self.staged.len()
    }

    fn staged(&self, staged: &Range<usize>) -> &[u8] {
        &self.staged[staged.clone()]
    }

    fn push_parts(&mut self, head: &[u8], payload: &Range<usize>, to: SocketAddr) -> bool {
        self.frame(head, payload.clone(), to)
    }

    fn push(&mut self, bytes: &[u8], to: SocketAddr) -> bool {
        let tail = self.stage(bytes);
        self.frame(&[], tail, to)
    }
}
