//! The DPDK data path on a net_ring port in loopback mode (the link answers
//! its own contributions as a one-worker switch would): the whole fast path
//! (quantize into mbufs, checksums, bursts, parsing, the window) with no
//! switch process. The multi-host tests with a real switch are in the
//! workspace's tests/dpdk.rs.

use std::net::SocketAddrV4;

use inagg_host_agent::dpdk::DpdkOptions;
use inagg_host_agent::{quant, AgentConfig, Worker};

const EAL: &str =
    "--no-huge -m 256 --no-pci --no-shconf --log-level=lib.eal:error --vdev net_ring0 --vdev net_ring1 --vdev net_ring2";

fn worker(elements: u16, pool: u32) -> Worker {
    let switch: SocketAddrV4 = "10.0.0.100:47000".parse().unwrap();
    let config = AgentConfig::new(switch.into(), 3, 0, 1, pool, elements);
    let mut options = DpdkOptions::new(EAL, "10.0.0.1:40000".parse().unwrap());
    options.port = Some("net_ring0".into());
    options.loopback = true;
    Worker::new_dpdk(config, &options).expect("DPDK worker on net_ring0")
}

#[test]
fn a_k_too_big_for_the_port_mtu_is_refused_with_the_k_that_fits() {
    let config = AgentConfig::new("10.0.0.100:47000".parse().unwrap(), 3, 0, 1, 4, 400);
    let mut options = DpdkOptions::new(EAL, "10.0.0.1:40000".parse().unwrap());
    options.port = Some("net_ring1".into());
    options.loopback = true;
    let err = Worker::new_dpdk(config, &options).unwrap_err().to_string();
    assert!(err.contains("K = 400") && err.contains("K <= 362"), "{err}");
}

#[test]
fn loopback_all_reduces_are_exact_and_reuse_their_mbufs() {
    let mut w = worker(64, 16);
    assert_eq!(w.backend_name(), "dpdk");
    let input: Vec<i32> = (0..100_003).map(|i| i * 7 - 350_000).collect();
    for round in 0..3 {
        let mut data = input.clone();
        let stats = w.allreduce_i32(&mut data).expect("all-reduce");
        assert_eq!(data, input, "round {round}: one worker's sum is its input");
        assert_eq!(stats.retransmissions, 0);
        // The first call also shakes hands on each of the 16 slots (an
        // int32 all-reduce's handshake is a round of its own).
        let handshakes = if round == 0 { 16 } else { 0 };
        assert_eq!(stats.handshakes, handshakes);
        // K = 64: 63 values and the check a packet.
        assert_eq!(stats.packets_sent, 100_003_u64.div_ceil(63) + handshakes);
    }
    let mut floats: Vec<f32> = (0..5000).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
    let want = floats.clone();
    w.allreduce_f32(&mut floats).expect("float all-reduce");
    // Every |x| < 4 = 2^(128 - 126): exponent 128 bounds every block.
    for (g, x) in floats.iter().zip(&want) {
        let bound = quant::error_bound(128, 1, f64::from(*x));
        assert!(
            f64::from((g - x).abs()) <= bound,
            "{g} vs {x} (bound {bound})"
        );
    }
}

#[test]
fn lanes_on_several_queues_split_the_slots_and_stay_exact() {
    // Three queue pairs, three threads; a window of 16 slots deals 6, 5
    // and 5 slots to the lanes. A second float call checks the per-slot
    // epochs came back from the lanes (a wrong one would stall a slot on
    // the wrong shadow set or the wrong packet id).
    let switch: SocketAddrV4 = "10.0.0.100:47000".parse().unwrap();
    let config = AgentConfig::new(switch.into(), 3, 0, 1, 16, 64);
    let mut options = DpdkOptions::new(EAL, "10.0.0.1:40000".parse().unwrap());
    options.port = Some("net_ring2".into());
    options.loopback = true;
    options.queues = 3;
    let mut w = Worker::new_dpdk(config, &options).expect("DPDK worker on 3 queues");
    assert_eq!(w.lanes(), 3);
    let input: Vec<i32> = (0..50_001).map(|i| i * 13 - 99_999).collect();
    let mut data = input.clone();
    let stats = w.allreduce_i32(&mut data).expect("all-reduce on 3 lanes");
    assert_eq!(data, input);
    assert_eq!(stats.handshakes, 16, "one per slot, over the lanes");
    assert_eq!(
        stats.packets_sent,
        50_001_u64.div_ceil(63) + 16,
        "63 values a packet"
    );
    assert_eq!(stats.retransmissions, 0);
    for call in 0..2 {
        let mut floats: Vec<f32> = (0..20_000).map(|i| (i as f32 * 0.11).cos() * 1.5).collect();
        let want = floats.clone();
        w.allreduce_f32(&mut floats)
            .expect("float all-reduce on 3 lanes");
        for (g, x) in floats.iter().zip(&want) {
            // |x| < 2 = 2^(127 - 126).
            let bound = quant::error_bound(127, 1, f64::from(*x));
            assert!(f64::from((g - x).abs()) <= bound, "call {call}: {g} vs {x}");
        }
    }
    let port = w.dpdk_port().expect("a DPDK worker");
    assert_eq!(port.counters().handoff_full, 0);
}

#[test]
fn more_queues_than_the_port_has_is_a_clear_error() {
    let config = AgentConfig::new("10.0.0.100:47000".parse().unwrap(), 3, 0, 1, 4, 64);
    let mut options = DpdkOptions::new(EAL, "10.0.0.1:40000".parse().unwrap());
    options.port = Some("net_ring1".into());
    options.loopback = true;
    options.queues = 64;
    let err = Worker::new_dpdk(config, &options).unwrap_err().to_string();
    assert!(
        err.contains("at most") && err.contains("asked for 64"),
        "{err}"
    );
}
