//! What the emulator does with each received datagram, whatever the ports
//! are: ingress faults, the switch, multicast replication with the egress
//! rewrite, egress faults. The socket data plane ([`crate::server`]) and the
//! DPDK one (`crate::dpdk`) differ only in how bytes arrive and leave, which
//! is the [`Egress`] trait.

use std::net::SocketAddr;
use std::time::Instant;

use inagg_netio::udp::{SendBatch, Staged};
use inagg_wire::{Kind, Packet, HEADER_LEN};

use crate::arbitration::Arbitration;
use crate::egress::Shaper;
use crate::faults::{Direction, Fate, FaultInjector};
use crate::switch::{Action, Switch};
use inagg_switch_api::counters::DropReason;
use inagg_switch_api::detour::AuxPath;

/// Switch state shared by the data and control threads: what every
/// datagram goes through.
#[derive(Debug)]
pub struct State {
    /// The switch.
    pub switch: Switch,
    /// The fault injector.
    pub faults: FaultInjector,
    /// Paced egress ports with priority queues, when a line rate is set.
    pub shaper: Option<Shaper>,
    /// Which control connection is the primary controller.
    pub arbitration: Arbitration,
}

impl State {
    /// `switch` alone: no faults injected, no shaper, no controller yet
    /// (what a driver of its own, as the protocol simulator, starts from).
    pub fn new(switch: Switch) -> State {
        State {
            switch,
            faults: FaultInjector::new(Default::default()),
            shaper: None,
            arbitration: Arbitration::default(),
        }
    }
}

/// Where outgoing datagrams go.
pub trait Egress {
    /// A result payload stored once and shared by every copy.
    type Staged;
    /// Stores a payload for [`Egress::push_parts`].
    fn stage(&mut self, payload: &[u8]) -> Self::Staged;
    /// The bytes of a staged payload.
    fn staged(&self, staged: &Self::Staged) -> &[u8];
    /// Queues a datagram of `head` followed by the staged payload. Returns
    /// false when it cannot be delivered (counted by the caller).
    fn push_parts(&mut self, head: &[u8], payload: &Self::Staged, to: SocketAddr) -> bool;
    /// Queues a whole datagram; false as above.
    fn push(&mut self, bytes: &[u8], to: SocketAddr) -> bool;
}

impl Egress for SendBatch {
    type Staged = Staged;

    fn stage(&mut self, payload: &[u8]) -> Staged {
        SendBatch::stage(self, payload)
    }

    fn staged(&self, staged: &Staged) -> &[u8] {
        SendBatch::staged(self, staged)
    }

    fn push_parts(&mut self, head: &[u8], payload: &Staged, to: SocketAddr) -> bool {
        SendBatch::push_parts(self, head, payload, Some(to));
        true
    }

    fn push(&mut self, bytes: &[u8], to: SocketAddr) -> bool {
        SendBatch::push(self, bytes, Some(to));
        true
    }
}

/// A packet held back by the reorder fault.
#[derive(Debug)]
struct Held {
    bytes: Vec<u8>,
    addr: SocketAddr,
}

/// The per-datagram path and the packets the reorder fault holds back.
#[derive(Debug, Default)]
pub struct Pipeline {
    result: Vec<u8>,
    held_in: Option<Held>,
    held_out: Option<Held>,
}

impl Pipeline {
    /// Whether a reordered packet waits for a successor (poll briefly).
    pub fn holding(&self) -> bool {
        self.held_in.is_some() || self.held_out.is_some()
    }

    /// One received datagram through the ingress faults and the switch.
    pub fn serve<E: Egress>(
        &mut self,
        state: &mut State,
        bytes: &[u8],
        from: SocketAddr,
        out: &mut E,
    ) {
        match state.faults.decide(Direction::Ingress) {
            Fate::Drop => {
                let c = state.switch.counters_mut();
                c.drop(DropReason::InjectedIngress);
                let kind = kind_of(bytes);
                c.injected_query_drops += u64::from(kind == Kind::Query);
                c.injected_contribution_drops += u64::from(kind == Kind::Contribution);
            }
            Fate::Pass { duplicate, reorder } => {
                if reorder && self.held_in.is_none() {
                    state.switch.counters_mut().injected_reorders += 1;
                    self.held_in = Some(Held {
                        bytes: bytes.to_vec(),
                        addr: from,
                    });
                    return;
                }
                self.ingress(state, bytes, from, out);
                if duplicate {
                    state.switch.counters_mut().injected_duplicates += 1;
                    self.ingress(state, bytes, from, out);
                }
                if let Some(h) = self.held_in.take() {
                    self.ingress(state, &h.bytes, h.addr, out);
                }
            }
        }
    }

    /// Nothing arrived: nothing will overtake the held packets, release them.
    pub fn idle<E: Egress>(&mut self, state: &mut State, out: &mut E) {
        if let Some(h) = self.held_in.take() {
            self.ingress(state, &h.bytes, h.addr, out);
        }
        self.release_held_out(state, out);
    }

    /// One packet through the switch; results go to egress. A result's
    /// payload is staged once and shared by every copy; only the 24-byte
    /// header is written per receiver.
    fn ingress<E: Egress>(
        &mut self,
        state: &mut State,
        bytes: &[u8],
        from: SocketAddr,
        out: &mut E,
    ) {
        let action = state.switch.process(bytes, from, &mut self.result);
        if matches!(action, Action::Absorbed | Action::Drop(_)) {
            return;
        }
        let Some(head) = self.result.get(..HEADER_LEN) else {
            return;
        };
        let mut head: [u8; HEADER_LEN] = head.try_into().expect("header length");
        let payload = out.stage(&self.result[HEADER_LEN..]);
        match action {
            Action::Unicast { to } | Action::Forward { to } => {
                self.egress(state, &head, &payload, to, out)
            }
            Action::Upstream { job, to, aux } => {
                let to = choose_path(state, job, to, aux, &mut head);
                self.egress(state, &head, &payload, to, out)
            }
            Action::Multicast { job } => {
                // Addresses are Copy: look each up rather than clone the list.
                for id in 0.. {
                    let Some(&addr) = state.switch.workers(job).and_then(|w| w.get(id)) else {
                        break;
                    };
                    // The egress rewrite: each copy names its receiver.
                    Packet::new_unchecked(&mut head[..]).set_worker(id as u16);
                    self.egress(state, &head, &payload, addr, out);
                }
            }
            Action::Nudge { job, members } => {
                // Unchanged copies: the worker field names the asker.
                for id in (0..64).filter(|id| members & (1u64 << id) != 0) {
                    let Some(&addr) = state.switch.workers(job).and_then(|w| w.get(id)) else {
                        break;
                    };
                    self.egress(state, &head, &payload, addr, out);
                }
            }
            Action::Replicate { group, sender } => {
                for id in 0.. {
                    let Some(&addr) = state.switch.members(group).and_then(|m| m.get(id)) else {
                        break;
                    };
                    if id != usize::from(sender) {
                        self.egress(state, &head, &payload, addr, out);
                    }
                }
            }
            Action::Absorbed | Action::Drop(_) => {}
        }
    }

    /// One outgoing copy through the egress faults.
    fn egress<E: Egress>(
        &mut self,
        state: &mut State,
        head: &[u8],
        payload: &E::Staged,
        to: SocketAddr,
        out: &mut E,
    ) {
        match state.faults.decide(Direction::Egress) {
            Fate::Drop => {
                let c = state.switch.counters_mut();
                c.drop(DropReason::InjectedEgress);
                c.injected_query_drops += u64::from(kind_of(head) == Kind::Status);
            }
            Fate::Pass { duplicate, reorder } => {
                if reorder && self.held_out.is_none() {
                    state.switch.counters_mut().injected_reorders += 1;
                    let mut bytes = head.to_vec();
                    bytes.extend_from_slice(out.staged(payload));
                    self.held_out = Some(Held { bytes, addr: to });
                    return;
                }
                queue(state, head, payload, to, out);
                if duplicate {
                    state.switch.counters_mut().injected_duplicates += 1;
                    queue(state, head, payload, to, out);
                }
                self.release_held_out(state, out);
            }
        }
    }

    /// Sends the packet held back by the egress reorder fault, if any.
    fn release_held_out<E: Egress>(&mut self, state: &mut State, out: &mut E) {
        if let Some(h) = self.held_out.take() {
            let c = state.switch.counters_mut();
            if out.push(&h.bytes, h.addr) {
                c.tx_packets += 1;
                c.tx_bytes += h.bytes.len() as u64;
            } else {
                c.drop(DropReason::Undeliverable);
            }
        }
    }
}

/// The kind byte of a datagram, unchecked (for counting only).
fn kind_of(datagram: &[u8]) -> Kind {
    datagram.get(1).map_or(Kind::Unknown(0), |&k| Kind::from(k))
}

/// NetStorm's sender rule at a child switch's egress (docs/PROTOCOL.md,
/// "Auxiliary paths"): the primary link to the parent unless more than
/// `busy_bound` packets wait on its port, then the auxiliary path if fewer
/// than `queue_length` wait on that one, rewriting the partial sum into a
/// detour (kind 4). Unpaced ports never queue, so they keep the primary.
fn choose_path(
    state: &mut State,
    job: u16,
    to: SocketAddr,
    aux: Option<AuxPath>,
    head: &mut [u8; HEADER_LEN],
) -> SocketAddr {
    let (Some(aux), Some(shaper)) = (aux, &state.shaper) else {
        return to;
    };
    let busy = shaper.waiting(to) > usize::from(aux.busy_bound);
    if !busy || shaper.waiting(aux.via) >= usize::from(aux.queue_length) {
        return to;
    }
    Packet::new_unchecked(&mut head[..]).set_kind(Kind::Detour);
    state.switch.count_detour(job);
    aux.via
}

fn queue<E: Egress>(
    state: &mut State,
    head: &[u8],
    payload: &E::Staged,
    to: SocketAddr,
    out: &mut E,
) {
    if state.shaper.is_some() {
        return queue_paced(state, head, out.staged(payload), to);
    }
    let len = (head.len() + out.staged(payload).len()) as u64;
    let c = state.switch.counters_mut();
    if out.push_parts(head, payload, to) {
        c.tx_packets += 1;
        c.tx_bytes += len;
    } else {
        c.drop(DropReason::Undeliverable);
    }
}

/// A copy for a paced port: into the egress queue of its priority class
/// (counted as sent when the port lets it go, or dropped when the queue is
/// full).
fn queue_paced(state: &mut State, head: &[u8], payload: &[u8], to: SocketAddr) {
    // `head` is the header alone (the payload is staged apart), so it is
    // read unchecked once its length is known to cover the header.
    let queue = if head.len() >= HEADER_LEN {
        let packet = Packet::new_unchecked(head);
        state.switch.queue_for(packet.job(), packet.priority())
    } else {
        state.switch.queue_of(0)
    };
    let mut bytes = Vec::with_capacity(head.len() + payload.len());
    bytes.extend_from_slice(head);
    bytes.extend_from_slice(payload);
    let Some(shaper) = &mut state.shaper else {
        return;
    };
    if shaper.enqueue(Instant::now(), to, queue, bytes).is_err() {
        state.switch.counters_mut().drop(DropReason::QueueFull);
    }
}
