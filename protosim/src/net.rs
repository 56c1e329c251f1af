//! The virtual network: an event queue in virtual time, links that delay,
//! lose, duplicate and reorder datagrams with a seeded RNG, and the
//! emulator's own switch pipeline at its centre.
//!
//! Everything runs in one thread and in one order: events are taken by
//! (time, sequence number), and every random draw comes from one ChaCha
//! stream seeded by the run's seed, so a seed replays a run exactly.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;

use inagg_emu::pipeline::{Egress, Pipeline, State};
use inagg_emu::Switch;
use inagg_wire::Kind;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use crate::trace::{Trace, Who};

/// Virtual nanoseconds since the run began.
pub type Nanos = u64;

/// One-way propagation delay of every link.
pub const PROPAGATION: Nanos = 5_000;
/// Link serialization, picoseconds per byte (25 Gbit/s).
const PS_PER_BYTE: u64 = 320;
/// The switch's cost per packet, and per byte of it (a software switch
/// on a core: what makes windows and queues matter).
const SWITCH_NS: Nanos = 600;
const SWITCH_PS_PER_BYTE: u64 = 150;

/// Where a datagram is going.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Node {
    /// The switch.
    Switch,
    /// Host `i` (worker `i`'s endpoint).
    Host(usize),
}

/// Something that happens at a time.
#[derive(Debug)]
pub enum Event {
    /// A datagram reaches `to`, sent from `from`.
    Arrive {
        to: Node,
        from: SocketAddr,
        bytes: Vec<u8>,
    },
    /// Host `host` runs its agent (if `generation` is still its latest wake).
    Wake { host: usize, generation: u64 },
    /// The run's scripted faults' moments (forgery, restart, crash...):
    /// the run decides what each means.
    Script(u32),
}

/// What the network's links do to a datagram.
#[derive(Debug, Clone, Copy, Default)]
pub struct LinkFaults {
    /// Loss probability towards the switch.
    pub loss_up: f64,
    /// Loss probability towards the hosts (each copy).
    pub loss_down: f64,
    /// Duplication probability.
    pub duplicate: f64,
    /// Probability of a datagram being held back past later ones.
    pub reorder: f64,
    /// Extra delay, uniform in [0, jitter].
    pub jitter: Nanos,
}

/// Counts of what the network did.
#[derive(Debug, Clone, Copy, Default)]
pub struct NetCounts {
    /// Datagrams handed to the network.
    pub sent: u64,
    /// Datagrams delivered, to the switch or a host (the simulator's
    /// packets).
    pub delivered: u64,
    /// Contributions and results the links lost: data, whose loss the
    /// protocol must recover.
    pub lost_data: u64,
    /// Queries, statuses and other control datagrams the links lost.
    pub lost_control: u64,
    /// Duplicates made.
    pub duplicated: u64,
}

/// The switch, the links and the clock.
pub struct Net {
    pub now: Nanos,
    /// (time, sequence, index into `events`): small entries for the heap
    /// to move, the events themselves in a slab.
    queue: BinaryHeap<Reverse<(Nanos, u64, u32)>>,
    events: Vec<Option<Event>>,
    free: Vec<u32>,
    seq: u64,
    pub rng: ChaCha8Rng,
    pub state: State,
    pipeline: Pipeline,
    pub switch_addr: SocketAddr,
    pub hosts: Vec<SocketAddr>,
    /// When each link is free again: up (host to switch) and down.
    up_free: Vec<Nanos>,
    down_free: Vec<Nanos>,
    /// The latest arrival each link has scheduled, up and down: jitter
    /// varies the delay but a link (a queue) keeps its order; only the
    /// reorder fault passes packets.
    up_last: Vec<Nanos>,
    down_last: Vec<Nanos>,
    switch_free: Nanos,
    pub faults: LinkFaults,
    /// The switch's time per packet (before its time per byte).
    pub switch_ns: Nanos,
    pub counts: NetCounts,
    pub trace: Trace,
}

/// What the switch sent for one datagram.
#[derive(Debug, Clone, Copy, Default)]
pub struct Served {
    /// Copies that are results.
    pub results: u32,
}

/// The switch's output for one packet: every copy, with its destination.
#[derive(Default)]
struct Collect {
    copies: Vec<(SocketAddr, Vec<u8>)>,
    staged: Vec<Vec<u8>>,
}

impl Egress for Collect {
    type Staged = usize;
    fn stage(&mut self, payload: &[u8]) -> usize {
        self.staged.push(payload.to_vec());
        self.staged.len() - 1
    }
    fn staged(&self, staged: &usize) -> &[u8] {
        &self.staged[*staged]
    }
    fn push_parts(&mut self, head: &[u8], payload: &usize, to: SocketAddr) -> bool {
        let mut bytes = head.to_vec();
        bytes.extend_from_slice(&self.staged[*payload]);
        self.copies.push((to, bytes));
        true
    }
    fn push(&mut self, bytes: &[u8], to: SocketAddr) -> bool {
        self.copies.push((to, bytes.to_vec()));
        true
    }
}

impl Net {
    /// A network of `switch` at `switch_addr` and hosts at `hosts`.
    pub fn new(
        switch: Switch,
        switch_addr: SocketAddr,
        hosts: Vec<SocketAddr>,
        rng: ChaCha8Rng,
        readable: bool,
    ) -> Net {
        Net {
            now: 0,
            queue: BinaryHeap::new(),
            events: Vec::new(),
            free: Vec::new(),
            seq: 0,
            rng,
            state: State::new(switch),
            pipeline: Pipeline::default(),
            switch_addr,
            up_free: vec![0; hosts.len()],
            down_free: vec![0; hosts.len()],
            up_last: vec![0; hosts.len()],
            down_last: vec![0; hosts.len()],
            hosts,
            switch_free: 0,
            faults: LinkFaults::default(),
            switch_ns: SWITCH_NS,
            counts: NetCounts::default(),
            trace: Trace::new(readable),
        }
    }

    /// Schedules `event` at `at`.
    pub fn at(&mut self, at: Nanos, event: Event) {
        let seq = self.seq;
        self.seq += 1;
        let index = match self.free.pop() {
            Some(i) => {
                self.events[i as usize] = Some(event);
                i
            }
            None => {
                self.events.push(Some(event));
                (self.events.len() - 1) as u32
            }
        };
        self.queue.push(Reverse((at.max(self.now), seq, index)));
    }

    /// The next event, with the clock moved to it.
    pub fn next_event(&mut self) -> Option<Event> {
        let Reverse((at, _, index)) = self.queue.pop()?;
        self.now = at;
        self.free.push(index);
        self.events[index as usize].take()
    }

    /// Events still scheduled.
    pub fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Host `host` sends `bytes` to the switch now.
    pub fn send_up(&mut self, host: usize, bytes: &[u8]) {
        let from = self.hosts[host];
        let ser = bytes.len() as u64 * PS_PER_BYTE / 1000;
        let leave = self.now.max(self.up_free[host]) + ser;
        self.up_free[host] = leave;
        self.transmit(
            leave,
            (Node::Switch, host),
            from,
            bytes,
            self.faults.loss_up,
        );
    }

    /// A datagram from `from` (a forger's, spoofed or not) reaches the
    /// switch after the propagation delay, through the same faults.
    pub fn inject_up(&mut self, from: SocketAddr, bytes: &[u8]) {
        let at = self.now + PROPAGATION;
        self.counts.sent += 1;
        self.trace.event(self.now, "forged", Who::Addr(from), bytes);
        self.at(
            at,
            Event::Arrive {
                to: Node::Switch,
                from,
                bytes: bytes.to_vec(),
            },
        );
    }

    /// Puts a datagram on the wire at `leave` with its faults.
    /// `to` is the destination and the host whose link it crosses.
    fn transmit(
        &mut self,
        leave: Nanos,
        (to, host): (Node, usize),
        from: SocketAddr,
        bytes: &[u8],
        loss: f64,
    ) {
        self.counts.sent += 1;
        if loss > 0.0 && self.rng.random_bool(loss) {
            if is_data(bytes) {
                self.counts.lost_data += 1;
            } else {
                self.counts.lost_control += 1;
            }
            self.trace.event(self.now, "lost", Who::Addr(from), bytes);
            return;
        }
        let copies = if self.faults.duplicate > 0.0 && self.rng.random_bool(self.faults.duplicate) {
            self.counts.duplicated += 1;
            2
        } else {
            1
        };
        for _ in 0..copies {
            let mut at = leave + PROPAGATION;
            if self.faults.jitter > 0 {
                at += self.rng.random_range(0..=self.faults.jitter);
            }
            let last = match to {
                Node::Switch => &mut self.up_last[host],
                Node::Host(_) => &mut self.down_last[host],
            };
            at = at.max(*last);
            *last = at;
            if self.faults.reorder > 0.0 && self.rng.random_bool(self.faults.reorder) {
                // Held back past a few packets' worth of time.
                at += self.rng.random_range(2_000..40_000);
            }
            self.at(
                at,
                Event::Arrive {
                    to,
                    from,
                    bytes: bytes.to_vec(),
                },
            );
        }
    }

    /// A datagram reaches the switch now: through the emulator's pipeline
    /// (after the packets before it, at the switch's pace), and each copy
    /// it sends out on its host's link. Returns what it sent.
    pub fn switch_receives(&mut self, from: SocketAddr, bytes: &[u8]) -> Served {
        self.counts.delivered += 1;
        self.trace.event(self.now, "switch", Who::Addr(from), bytes);
        let cost = self.switch_ns + bytes.len() as u64 * SWITCH_PS_PER_BYTE / 1000;
        let done = self.now.max(self.switch_free) + cost;
        self.switch_free = done;
        let mut out = Collect::default();
        self.pipeline.serve(&mut self.state, bytes, from, &mut out);
        self.pipeline.idle(&mut self.state, &mut out);
        let mut served = Served::default();
        for (to, copy) in out.copies {
            if copy.get(1).map(|&k| Kind::from(k)) == Some(Kind::Result) {
                served.results += 1;
            }
            let Some(host) = self.hosts.iter().position(|&h| h == to) else {
                continue;
            };
            let ser = copy.len() as u64 * PS_PER_BYTE / 1000;
            let leave = done.max(self.down_free[host]) + ser;
            self.down_free[host] = leave;
            let loss = self.faults.loss_down;
            let switch = self.switch_addr;
            self.transmit(leave, (Node::Host(host), host), switch, &copy, loss);
        }
        served
    }
}

/// Whether a datagram is data (a contribution or a result), whose loss
/// recovery must make up for, rather than control (a query or a status).
fn is_data(bytes: &[u8]) -> bool {
    matches!(
        bytes.get(1).map(|&k| Kind::from(k)),
        Some(Kind::Contribution | Kind::Result)
    )
}
