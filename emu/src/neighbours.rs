//! The raw-Ethernet (DPDK) backend's neighbour table: on which port, at
//! which Ethernet address, each IPv4 address is reachable.
//!
//! The emulator has no routing: it learns where a worker is from the
//! frames the worker sends (its UDP datagrams, its ARP) and asks, with an
//! ARP request on every port, for the addresses a result must reach but
//! that have sent nothing yet. Both tables are bounded, because every
//! frame on the wire teaches an address: a flood of frames from spoofed
//! sources must neither grow memory without end nor push out the workers.
//! When the table is full, only an address the switch has asked for (one
//! it must send to) is learned, in place of one it has not asked for; any
//! other is refused and counted (`Counters::neighbours_refused`).

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

/// Addresses the table holds by default: far more than the workers of
/// every job a switch can hold at once, far fewer than a flood could teach.
pub const MAX_NEIGHBOURS: usize = 4096;

/// The least time between two ARP requests for one address.
pub const ASK_INTERVAL: Duration = Duration::from_millis(100);

/// Where a neighbour is: (port index, Ethernet address).
pub type Place = (usize, [u8; 6]);

/// The bounded neighbour table.
#[derive(Debug)]
pub struct Neighbours {
    known: HashMap<Ipv4Addr, Place>,
    /// When each address the switch needed was last asked for.
    asked: HashMap<Ipv4Addr, Instant>,
    capacity: usize,
}

impl Neighbours {
    /// An empty table that holds at most `capacity` addresses (at least 1).
    pub fn new(capacity: usize) -> Neighbours {
        Neighbours {
            known: HashMap::new(),
            asked: HashMap::new(),
            capacity: capacity.max(1),
        }
    }

    /// Where `ip` is, if it is known.
    pub fn get(&self, ip: Ipv4Addr) -> Option<Place> {
        self.known.get(&ip).copied()
    }

    /// Addresses known.
    pub fn len(&self) -> usize {
        self.known.len()
    }

    /// Whether no address is known.
    pub fn is_empty(&self) -> bool {
        self.known.is_empty()
    }

    /// Learns (or moves) `ip` to `place`. Returns false when the table is
    /// full and the switch has not asked for `ip`: it is not learned.
    pub fn learn(&mut self, ip: Ipv4Addr, place: Place) -> bool {
        if ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast() {
            return true;
        }
        if let Some(known) = self.known.get_mut(&ip) {
            *known = place;
            return true;
        }
        if self.known.len() >= self.capacity {
            if !self.asked.contains_key(&ip) {
                return false;
            }
            self.make_room();
        }
        self.known.insert(ip, place);
        true
    }

    /// Forgets one address, one the switch has not asked for if any.
    fn make_room(&mut self) {
        let victim = self
            .known
            .keys()
            .find(|ip| !self.asked.contains_key(ip))
            .or_else(|| self.known.keys().next())
            .copied();
        if let Some(ip) = victim {
            self.known.remove(&ip);
        }
    }

    /// Whether to send an ARP request for `ip` at `now`: it is unknown and
    /// was not asked for in the last [`ASK_INTERVAL`]. Records the request.
    /// The record is bounded like the table: when it is full, requests
    /// older than a second are forgotten first.
    pub fn should_ask(&mut self, ip: Ipv4Addr, now: Instant) -> bool {
        if self.known.contains_key(&ip) {
            return false;
        }
        if let Some(&last) = self.asked.get(&ip) {
            if now.saturating_duration_since(last) < ASK_INTERVAL {
                return false;
            }
        } else if self.asked.len() >= self.capacity {
            self.asked
                .retain(|_, t| now.saturating_duration_since(*t) < Duration::from_secs(1));
            if self.asked.len() >= self.capacity {
                return false;
            }
        }
        self.asked.insert(ip, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(n: u32) -> Ipv4Addr {
        Ipv4Addr::from(0x0a00_0000 + n)
    }

    #[test]
    fn a_full_table_refuses_strangers_but_learns_what_it_asked_for() {
        let mut t = Neighbours::new(3);
        let t0 = Instant::now();
        for n in 1..=3 {
            assert!(t.learn(ip(n), (0, [n as u8; 6])));
        }
        // A known address may move; a stranger is refused.
        assert!(t.learn(ip(2), (1, [9; 6])));
        assert_eq!(t.get(ip(2)), Some((1, [9; 6])));
        assert!(!t.learn(ip(4), (0, [4; 6])));
        assert_eq!((t.get(ip(4)), t.len()), (None, 3));
        // The switch needs ip 5 and asks for it: its answer is learned in
        // place of an address not asked for.
        assert!(t.should_ask(ip(5), t0));
        assert!(t.learn(ip(5), (0, [5; 6])));
        assert_eq!((t.get(ip(5)), t.len()), (Some((0, [5; 6])), 3));
        // Nothing more to ask for a known address.
        assert!(!t.should_ask(ip(5), t0 + Duration::from_secs(1)));
        // Broadcast and unspecified sources teach nothing.
        assert!(t.learn(Ipv4Addr::UNSPECIFIED, (0, [0; 6])));
        assert!(t.learn(Ipv4Addr::BROADCAST, (0, [0; 6])));
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn a_flood_of_spoofed_sources_neither_grows_the_table_nor_evicts() {
        let mut t = Neighbours::new(MAX_NEIGHBOURS);
        let worker = ip(1);
        assert!(t.learn(worker, (0, [1; 6])));
        let refused = (2..100_000)
            .filter(|&n| !t.learn(ip(n), (0, [2; 6])))
            .count();
        assert_eq!(t.len(), MAX_NEIGHBOURS);
        assert_eq!(refused, 100_000 - 1 - MAX_NEIGHBOURS);
        assert_eq!(t.get(worker), Some((0, [1; 6])));
    }

    #[test]
    fn requests_are_paced_and_their_record_is_bounded() {
        let mut t = Neighbours::new(2);
        let t0 = Instant::now();
        assert!(t.should_ask(ip(1), t0));
        assert!(!t.should_ask(ip(1), t0 + Duration::from_millis(99)));
        assert!(t.should_ask(ip(1), t0 + ASK_INTERVAL));
        assert!(t.should_ask(ip(2), t0));
        // The record is full of recent requests: a third address waits.
        assert!(!t.should_ask(ip(3), t0 + Duration::from_millis(500)));
        // A second on, the old requests are forgotten to make room.
        assert!(t.should_ask(ip(3), t0 + Duration::from_secs(2)));
    }
}
