//! Egress ports with a line rate and strict-priority queues, so that
//! priorities matter in the emulator as they do on a switch.
//!
//! Without a line rate the emulator sends every copy as soon as the
//! pipeline makes it (a port faster than anything feeding it: queues never
//! build, and priorities cannot show). With one, each output port (each
//! destination address: one worker's link) serialises its packets at the
//! rate, and packets waiting for the link sit in one of [`QUEUES`] queues
//! chosen by the packet's priority class through the switch's class-to-queue
//! map (the P4 programs' `priority_to_queue`).
//!
//! - **Strict priority**: when the link is free, the head of the highest
//!   non-empty queue goes next (queue 7 first, as on bmv2 and Tofino).
//! - **Work-conserving**: a lower queue sends whenever every higher one is
//!   empty; the link is never idle while anything waits.
//! - **Tail drop**: each queue holds at most `queue_bytes`; a packet that
//!   does not fit is dropped and counted (`queue_full`), and the agents
//!   recover it by retransmission like any loss.
//!
//! Time is passed in (`now`), never read here, so the scheduler is a pure
//! function of its inputs and its tests need no clock.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub use inagg_switch_api::queues::{
    check_rate, describe_map, ClassQueue, LinkConfig, PortRate, PortStats, QueueStats, QUEUES,
    TRAIN_LATENESS,
};

/// The rate of the port `port`: its own, else the line rate. (A function
/// of the two fields rather than a method, so that `Shaper::release` can
/// call it while it holds the ports mutably.)
fn rate_of(rates: &HashMap<SocketAddr, u64>, config: &LinkConfig, port: &SocketAddr) -> u64 {
    rates.get(port).copied().unwrap_or(config.rate_bps)
}

/// Time `bytes` take on a link of `rate_bps`.
fn serialisation(bytes: usize, rate_bps: u64) -> Duration {
    let nanos = (bytes as u128 * 8 * 1_000_000_000).div_ceil(u128::from(rate_bps.max(1)));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// A packet waiting for its port.
#[derive(Debug)]
struct Waiting {
    bytes: Vec<u8>,
    arrived: Instant,
    /// Its destination (a host's port serves several).
    to: SocketAddr,
}

/// One output port.
#[derive(Debug, Default)]
struct Port {
    queues: [VecDeque<Waiting>; QUEUES],
    stats: [QueueStats; QUEUES],
    /// When the link finishes sending what it has started.
    free_at: Option<Instant>,
    /// When (real time) the last packet left.
    last_departure: Option<Instant>,
    /// See [`PortStats::train_bytes`] and [`PortStats::train_ns`].
    train_bytes: u64,
    train_ns: u64,
}

impl Port {
    fn is_empty(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty)
    }

    /// The highest non-empty queue.
    fn next_queue(&self) -> Option<usize> {
        (0..QUEUES).rev().find(|&q| !self.queues[q].is_empty())
    }

    /// Counts a departure at `now` in the throughput probe when the packet
    /// `waited` behind the one before and left on time, `late` after the
    /// link could start it.
    ///
    /// A train's time telescopes to its schedule plus how much later its
    /// last packet left than its first, so one late wake-up of a loaded
    /// machine could make a fast link read slower than any other (CI saw a
    /// 100 Mbit/s port read below a 2 Mbit/s one). A packet later than
    /// [`TRAIN_LATENESS`] breaks the train: it is not counted, nor is the
    /// gap to the next. Every counted gap is then within that bound of the
    /// link's own time, and a port the emulator cannot keep on time gives
    /// no reading rather than a wrong one.
    fn time_train(&mut self, waited: bool, late: Duration, now: Instant, bytes: usize) {
        let on_time = late <= TRAIN_LATENESS;
        if let (true, true, Some(last)) = (waited, on_time, self.last_departure) {
            self.train_bytes += bytes as u64;
            self.train_ns += now.saturating_duration_since(last).as_nanos() as u64;
        }
        self.last_departure = on_time.then_some(now);
    }

    /// When the head of queue `q` can start: once it has arrived and the
    /// link has finished the packet before it. A link that falls behind
    /// (the emulator woke late) catches up, so the long-run rate is exact.
    fn start_of(&self, q: usize) -> Option<Instant> {
        let arrived = self.queues[q].front()?.arrived;
        Some(self.free_at.map_or(arrived, |t| t.max(arrived)))
    }
}

/// Why a packet was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Its queue is full (tail drop).
    QueueFull,
    /// No such queue.
    NoQueue,
}

/// The egress ports of an emulator with a line rate.
#[derive(Debug)]
pub struct Shaper {
    config: LinkConfig,
    ports: HashMap<SocketAddr, Port>,
    /// Ports with a rate of their own ([`Shaper::set_port_rate`]).
    rates: HashMap<SocketAddr, u64>,
}

impl Shaper {
    /// Ports at `config`'s rate, created as destinations appear.
    pub fn new(config: LinkConfig) -> Shaper {
        Shaper {
            config,
            ports: HashMap::new(),
            rates: HashMap::new(),
        }
    }

    /// Gives the port to `to` a rate of its own (`None`: the line rate
    /// again), from its next packet on. Returns the port (the host's, with
    /// per-host ports). The port is listed in [`Shaper::stats`] from now on.
    pub fn set_port_rate(
        &mut self,
        to: SocketAddr,
        rate_bps: Option<u64>,
    ) -> Result<SocketAddr, String> {
        let port = self.config.port_of(to);
        match rate_bps {
            Some(rate) => {
                check_rate(rate)?;
                self.rates.insert(port, rate);
            }
            None => {
                self.rates.remove(&port);
            }
        }
        self.ports.entry(port).or_default();
        Ok(port)
    }

    /// The configuration.
    pub fn config(&self) -> LinkConfig {
        self.config
    }

    /// Queues `bytes`, arrived at `now`, for `to` on `queue` (taken by
    /// value: the packet waits here, and the caller built it for that).
    pub fn enqueue(
        &mut self,
        now: Instant,
        to: SocketAddr,
        queue: u8,
        bytes: Vec<u8>,
    ) -> Result<(), Refused> {
        let q = usize::from(queue);
        if q >= QUEUES {
            return Err(Refused::NoQueue);
        }
        let limit = self.config.queue_bytes;
        let port = self.ports.entry(self.config.port_of(to)).or_default();
        let stats = &mut port.stats[q];
        if stats.depth_bytes + bytes.len() > limit {
            stats.drops += 1;
            return Err(Refused::QueueFull);
        }
        stats.depth_bytes += bytes.len();
        stats.max_depth_bytes = stats.max_depth_bytes.max(stats.depth_bytes);
        port.queues[q].push_back(Waiting {
            bytes,
            arrived: now,
            to,
        });
        Ok(())
    }

    /// Sends, through `send`, every packet whose turn on its link has come
    /// by `now`: on each port, highest queue first, each packet starting
    /// when the previous one has left.
    pub fn release(&mut self, now: Instant, mut send: impl FnMut(&[u8], SocketAddr)) {
        for (addr, port) in &mut self.ports {
            let rate = rate_of(&self.rates, &self.config, addr);
            while let Some(q) = port.next_queue() {
                let Some(start) = port.start_of(q).filter(|&t| t <= now) else {
                    break;
                };
                let Some(p) = port.queues[q].pop_front() else {
                    break;
                };
                let stats = &mut port.stats[q];
                stats.depth_bytes -= p.bytes.len();
                stats.tx_packets += 1;
                stats.tx_bytes += p.bytes.len() as u64;
                let late = now.saturating_duration_since(start);
                port.time_train(start > p.arrived, late, now, p.bytes.len());
                port.free_at = Some(start + serialisation(p.bytes.len(), rate));
                send(&p.bytes, p.to);
            }
        }
    }

    /// Packets waiting on the port that leads to `to`, every queue.
    pub fn waiting(&self, to: SocketAddr) -> usize {
        self.ports
            .get(&self.config.port_of(to))
            .map_or(0, |p| p.queues.iter().map(VecDeque::len).sum())
    }

    /// When the next waiting packet can go (`None`: nothing waits).
    pub fn next_departure(&self) -> Option<Instant> {
        self.ports
            .values()
            .filter_map(|p| p.start_of(p.next_queue()?))
            .min()
    }

    /// Whether anything waits.
    pub fn is_empty(&self) -> bool {
        self.ports.values().all(Port::is_empty)
    }

    /// Counters of every port, sorted by address.
    pub fn stats(&self) -> Vec<PortStats> {
        let mut ports: Vec<PortStats> = self
            .ports
            .iter()
            .map(|(&port, p)| PortStats {
                port,
                rate_bps: rate_of(&self.rates, &self.config, &port),
                queues: p.stats.to_vec(),
                train_bytes: p.train_bytes,
                train_ns: p.train_ns,
            })
            .collect();
        ports.sort_by_key(|p| p.port);
        ports
    }

    /// Zeroes the counters (what waits stays, and so does its depth).
    pub fn reset_stats(&mut self) {
        for port in self.ports.values_mut() {
            (port.train_bytes, port.train_ns) = (0, 0);
            for s in &mut port.stats {
                *s = QueueStats {
                    depth_bytes: s.depth_bytes,
                    max_depth_bytes: s.depth_bytes,
                    ..QueueStats::default()
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "10.0.0.1:40000";
    const B: &str = "10.0.0.2:40000";

    /// 8 Mbit/s: one byte per microsecond.
    fn shaper(queue_bytes: usize) -> Shaper {
        Shaper::new(LinkConfig {
            rate_bps: 8_000_000,
            queue_bytes,
            per_host: false,
        })
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// Releases at `t0 + us` and returns (first byte, destination) of what left.
    fn release_at(s: &mut Shaper, t0: Instant, us: u64) -> Vec<(u8, SocketAddr)> {
        let mut out = Vec::new();
        s.release(t0 + Duration::from_micros(us), |b, to| out.push((b[0], to)));
        out
    }

    #[test]
    fn the_highest_queue_goes_first_and_lower_ones_fill_idle_time() {
        let mut s = shaper(10_000);
        let t0 = Instant::now();
        // Low-priority packets 1, 2 queued first, then urgent 9.
        s.enqueue(t0, addr(A), 0, vec![1; 100]).unwrap();
        s.enqueue(t0, addr(A), 0, vec![2; 100]).unwrap();
        s.enqueue(t0, addr(A), 7, vec![9; 100]).unwrap();
        // The link is idle: the urgent one starts at once and takes 100 us.
        assert_eq!(release_at(&mut s, t0, 0), [(9, addr(A))]);
        assert_eq!(release_at(&mut s, t0, 99), []);
        // Then the low queue, work-conserving, one packet per 100 us.
        assert_eq!(release_at(&mut s, t0, 100), [(1, addr(A))]);
        s.enqueue(t0 + Duration::from_micros(150), addr(A), 7, vec![8; 100])
            .unwrap();
        // Another urgent packet overtakes the low one still waiting.
        assert_eq!(release_at(&mut s, t0, 200), [(8, addr(A))]);
        assert_eq!(release_at(&mut s, t0, 300), [(2, addr(A))]);
        assert!(s.is_empty());
        let q = &s.stats()[0].queues;
        assert_eq!((q[7].tx_packets, q[0].tx_packets), (2, 2));
        assert_eq!((q[7].tx_bytes, q[0].max_depth_bytes), (200, 200));
    }

    #[test]
    fn a_link_paces_at_its_rate_and_catches_up_after_a_late_release() {
        let mut s = shaper(100_000);
        let t0 = Instant::now();
        for i in 0..5 {
            s.enqueue(t0, addr(A), 3, vec![i; 250]).unwrap();
        }
        assert_eq!(release_at(&mut s, t0, 0).len(), 1);
        assert_eq!(s.next_departure(), Some(t0 + Duration::from_micros(250)));
        // Released late (at 800 us): the packets due at 250, 500 and 750
        // go now, the one due at 1000 waits.
        assert_eq!(release_at(&mut s, t0, 800).len(), 3);
        assert_eq!(s.next_departure(), Some(t0 + Duration::from_micros(1000)));
        assert_eq!(release_at(&mut s, t0, 1000).len(), 1);
        assert_eq!(s.next_departure(), None);
    }

    #[test]
    fn the_throughput_probe_times_back_to_back_departures_only() {
        let mut s = shaper(100_000);
        let t0 = Instant::now();
        assert_eq!(s.stats().first().map(|p| p.train_rate_bps()), None);
        // Alone on an idle link: it measures nothing.
        s.enqueue(t0, addr(A), 0, vec![0; 250]).unwrap();
        release_at(&mut s, t0, 0);
        assert_eq!(s.stats()[0].train_rate_bps(), None);
        // Three packets at once at 1000 us: the first finds the link idle,
        // the other two wait. The emulator wakes late for the second (at
        // 1300 us, due at 1250) and catches up; the train still spans
        // 2 x 250 us for 500 bytes: 8 Mbit/s, the port's rate.
        for i in 1..4 {
            s.enqueue(t0 + Duration::from_micros(1000), addr(A), 0, vec![i; 250])
                .unwrap();
        }
        assert_eq!(release_at(&mut s, t0, 1000).len(), 1);
        assert_eq!(release_at(&mut s, t0, 1300).len(), 1);
        assert_eq!(release_at(&mut s, t0, 1500).len(), 1);
        let port = &s.stats()[0];
        assert_eq!((port.train_bytes, port.train_ns), (500, 500_000));
        assert_eq!(port.train_rate_bps(), Some(8_000_000.0));
        // Long after the link went idle, a packet starts a new train.
        s.enqueue(t0 + Duration::from_micros(5000), addr(A), 0, vec![5; 250])
            .unwrap();
        release_at(&mut s, t0, 5000);
        assert_eq!(s.stats()[0].train_bytes, 500);
        s.reset_stats();
        assert_eq!((s.stats()[0].train_bytes, s.stats()[0].train_ns), (0, 0));
    }

    #[test]
    fn a_departure_that_leaves_late_breaks_the_train() {
        let mut s = shaper(100_000);
        let t0 = Instant::now();
        for i in 0..5 {
            s.enqueue(t0, addr(A), 0, vec![i; 250]).unwrap();
        }
        // Due at 0, 250, 500, 750 and 1000 us. The one due at 250 leaves
        // on time; the emulator then sleeps until 3000 (2.5 ms late for
        // the one due at 500): the three still queued go at once.
        assert_eq!(release_at(&mut s, t0, 0).len(), 1);
        assert_eq!(release_at(&mut s, t0, 250).len(), 1);
        assert_eq!(release_at(&mut s, t0, 3000).len(), 3);
        // Counted: only the packet due at 250, 250 us after the first. The
        // late three (and the gaps to them) would have read 1000 bytes in
        // 3 ms: 2.7 Mbit/s on an 8 Mbit/s link.
        let port = &s.stats()[0];
        assert_eq!((port.train_bytes, port.train_ns), (250, 250_000));
        assert_eq!(port.train_rate_bps(), Some(8_000_000.0));
        // The train starts again from the next packet that leaves on time.
        for i in 5..7 {
            s.enqueue(t0 + Duration::from_micros(4000), addr(A), 0, vec![i; 250])
                .unwrap();
        }
        assert_eq!(release_at(&mut s, t0, 4000).len(), 1);
        assert_eq!(release_at(&mut s, t0, 4300).len(), 1);
        let port = &s.stats()[0];
        assert_eq!((port.train_bytes, port.train_ns), (500, 550_000));
    }

    #[test]
    fn a_port_with_a_rate_of_its_own_paces_at_it() {
        let mut s = shaper(100_000);
        let t0 = Instant::now();
        // B at 1 Mbit/s: 8 us per byte; A stays at the line rate, 1 us.
        assert_eq!(s.set_port_rate(addr(B), Some(1_000_000)), Ok(addr(B)));
        for i in 0..2 {
            s.enqueue(t0, addr(A), 0, vec![i; 100]).unwrap();
            s.enqueue(t0, addr(B), 0, vec![10 + i; 100]).unwrap();
        }
        let mut first = release_at(&mut s, t0, 0);
        first.sort();
        assert_eq!(first, [(0, addr(A)), (10, addr(B))]);
        assert_eq!(release_at(&mut s, t0, 100), [(1, addr(A))]);
        assert_eq!(s.next_departure(), Some(t0 + Duration::from_micros(800)));
        assert_eq!(release_at(&mut s, t0, 799), []);
        assert_eq!(release_at(&mut s, t0, 800), [(11, addr(B))]);
        let rates: Vec<(SocketAddr, u64)> =
            s.stats().iter().map(|p| (p.port, p.rate_bps)).collect();
        assert_eq!(rates, [(addr(A), 8_000_000), (addr(B), 1_000_000)]);
        // Back to the line rate; a rate too low to pace with is refused.
        s.set_port_rate(addr(B), None).unwrap();
        assert_eq!(s.stats()[1].rate_bps, 8_000_000);
        let err = s.set_port_rate(addr(B), Some(10)).unwrap_err();
        assert!(err.contains("too low"), "{err}");
    }

    #[test]
    fn port_rates_parse_from_the_command_line_form() {
        let r: PortRate = "127.0.0.1:47001=0.05".parse().unwrap();
        assert_eq!((r.port, r.rate_bps), (addr("127.0.0.1:47001"), 50_000_000));
        for bad in [
            "127.0.0.1:47001",
            "x=1",
            "127.0.0.1:47001=-1",
            "127.0.0.1:1=1e-9",
        ] {
            assert!(bad.parse::<PortRate>().is_err(), "{bad}");
        }
    }

    #[test]
    fn ports_are_independent() {
        let mut s = shaper(100_000);
        let t0 = Instant::now();
        s.enqueue(t0, addr(A), 0, vec![1; 1000]).unwrap();
        s.enqueue(t0, addr(A), 0, vec![2; 1000]).unwrap();
        s.enqueue(t0, addr(B), 0, vec![3; 10]).unwrap();
        let mut first = release_at(&mut s, t0, 0);
        first.sort();
        assert_eq!(first, [(1, addr(A)), (3, addr(B))]);
        s.enqueue(t0 + Duration::from_micros(5), addr(B), 0, vec![4; 10])
            .unwrap();
        // B's link is free after 10 us; A's after 1000 us.
        assert_eq!(release_at(&mut s, t0, 10), [(4, addr(B))]);
        assert_eq!(release_at(&mut s, t0, 1000), [(2, addr(A))]);
    }

    #[test]
    fn an_idle_link_earns_no_credit() {
        let mut s = shaper(100_000);
        let t0 = Instant::now();
        s.enqueue(t0, addr(A), 0, vec![1; 100]).unwrap();
        assert_eq!(release_at(&mut s, t0, 0).len(), 1);
        // Idle from 100 us to 1000 us; two packets arrive at 1000 us: the
        // second still waits its 100 us.
        let t1 = t0 + Duration::from_micros(1000);
        s.enqueue(t1, addr(A), 0, vec![2; 100]).unwrap();
        s.enqueue(t1, addr(A), 0, vec![3; 100]).unwrap();
        assert_eq!(release_at(&mut s, t0, 1000), [(2, addr(A))]);
        assert_eq!(s.next_departure(), Some(t0 + Duration::from_micros(1100)));
    }

    #[test]
    fn a_full_queue_drops_the_tail_and_counts_it() {
        let mut s = shaper(250);
        let t0 = Instant::now();
        s.enqueue(t0, addr(A), 1, vec![1; 100]).unwrap();
        s.enqueue(t0, addr(A), 1, vec![2; 100]).unwrap();
        assert_eq!(
            s.enqueue(t0, addr(A), 1, vec![3; 100]),
            Err(Refused::QueueFull)
        );
        // Other queues have their own room.
        s.enqueue(t0, addr(A), 2, vec![4; 100]).unwrap();
        assert_eq!(
            s.enqueue(t0, addr(A), 8, vec![5; 10]),
            Err(Refused::NoQueue)
        );
        let q = &s.stats()[0].queues;
        assert_eq!(
            (q[1].drops, q[1].depth_bytes, q[2].depth_bytes),
            (1, 200, 100)
        );
    }

    #[test]
    fn per_host_ports_share_one_link_between_a_hosts_endpoints() {
        let mut s = Shaper::new(LinkConfig {
            per_host: true,
            ..shaper(10_000).config()
        });
        let t0 = Instant::now();
        let (a1, a2) = (addr("10.0.0.1:1"), addr("10.0.0.1:2"));
        // Two jobs' workers on host 10.0.0.1: the bulk one's copy first,
        // then the urgent one's; the urgent one still goes first, and each
        // reaches its own endpoint.
        s.enqueue(t0 + Duration::from_micros(1), a1, 0, vec![1; 100])
            .unwrap();
        s.enqueue(t0 + Duration::from_micros(1), a1, 0, vec![2; 100])
            .unwrap();
        s.enqueue(t0 + Duration::from_micros(2), a2, 7, vec![9; 100])
            .unwrap();
        s.enqueue(t0, addr(B), 0, vec![5; 100]).unwrap();
        assert_eq!(release_at(&mut s, t0, 0), [(5, addr(B))], "B's own link");
        assert_eq!(release_at(&mut s, t0, 2), [(9, a2)]);
        assert_eq!(release_at(&mut s, t0, 101), []);
        assert_eq!(release_at(&mut s, t0, 102), [(1, a1)]);
        let ports: Vec<SocketAddr> = s.stats().iter().map(|p| p.port).collect();
        assert_eq!(ports, [addr("10.0.0.1:0"), addr("10.0.0.2:0")]);
    }

    #[test]
    fn bad_configurations_are_refused_with_the_reason() {
        let low = LinkConfig {
            rate_bps: 10,
            queue_bytes: 1 << 20,
            per_host: false,
        };
        assert!(low.validate().unwrap_err().contains("too low"));
        let tiny = LinkConfig {
            rate_bps: 1_000_000_000,
            queue_bytes: 4,
            per_host: false,
        };
        assert!(tiny
            .validate()
            .unwrap_err()
            .contains("cannot hold a packet"));
    }
}
