//! Loopback ports for a test to hand to another process or to bind later
//! (a worker registers its endpoint before it binds it).
//!
//! A port found free by binding port 0 and letting go is one the kernel
//! may hand to the next socket bound to port 0, or to the next outgoing
//! connection, before the test uses it: with tests in parallel (and a
//! flood test opening thousands of connections) that happened, and a
//! worker failed with "Address already in use". These ports come from
//! below the kernel's ephemeral range instead, which no socket bound to
//! port 0 and no outgoing connection takes, and one process never picks
//! the same one twice. (Test binaries run one after another; where two
//! run at once, each starts at a place of its own in the range.)

use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::sync::atomic::{AtomicU32, Ordering};

/// The first port picked from.
const LOW: u32 = 10_000;

/// Picks so far in this process.
static PICKED: AtomicU32 = AtomicU32::new(0);

/// A loopback UDP port nobody holds, outside the ephemeral range.
pub fn udp() -> SocketAddr {
    pick(|a| UdpSocket::bind(a).is_ok())
}

/// A loopback TCP port nobody holds, outside the ephemeral range.
pub fn tcp() -> SocketAddr {
    pick(|a| TcpListener::bind(a).is_ok())
}

fn pick(free: impl Fn(SocketAddr) -> bool) -> SocketAddr {
    let span = ephemeral_low().saturating_sub(LOW).max(1);
    let start = std::process::id().wrapping_mul(7919) % span;
    for _ in 0..span {
        let n = PICKED.fetch_add(1, Ordering::Relaxed);
        let port = LOW + (start + n) % span;
        let addr = SocketAddr::from(([127, 0, 0, 1], port as u16));
        if free(addr) {
            return addr;
        }
    }
    panic!("no free loopback port between {LOW} and the ephemeral range");
}

/// The lowest ephemeral port (net.ipv4.ip_local_port_range; Linux's
/// default where it cannot be read).
fn ephemeral_low() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_free_distinct_and_below_the_ephemeral_range() {
        let picks: Vec<SocketAddr> = (0..50)
            .map(|i| if i % 2 == 0 { udp() } else { tcp() })
            .collect();
        let mut ports: Vec<u16> = picks.iter().map(|a| a.port()).collect();
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), 50);
        assert!(ports
            .iter()
            .all(|&p| u32::from(p) >= LOW && u32::from(p) < ephemeral_low()));
        UdpSocket::bind(udp()).unwrap();
        TcpListener::bind(tcp()).unwrap();
    }
}
