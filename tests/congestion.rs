//! The congestion window against a switch that cannot keep up: the
//! emulator with paced ports (`LinkConfig`), whose results wait in an
//! egress queue as a software switch's packets wait for its pipeline.
//!
//! ```text
//!   workers ──UDP──> emulator ──> paced port queue (5 Mbit/s) ──> each worker
//! ```
//!
//! With the whole pool in flight, every result queues behind the pool; the
//! adaptive window keeps the queue short, so results come back before their
//! timeout and retransmissions stay few. Sums stay exact throughout.

use std::time::Duration;

use inagg_emu::FaultConfig;
use inagg_host_agent::Window;
use inagg_testbed::local::{run_all, JobParams, LocalCluster};
use inagg_testbed::verify::check_i32;

fn paced(rate_bps: u64, faults: FaultConfig) -> LocalCluster {
    LocalCluster::paced(rate_bps, 4 << 20, faults).unwrap()
}

fn inputs(workers: usize, len: usize, seed: i32) -> Vec<Vec<i32>> {
    (0..workers)
        .map(|w| {
            (0..len)
                .map(|i| (i as i32).wrapping_mul(7919) ^ (seed * 131 + w as i32))
                .collect()
        })
        .collect()
}

/// A pool of 256 slots behind a 5 Mbit/s port: 256 results of K = 64 take
/// 0.12 s to leave, longer than the 50 ms first timeout: every sum stays
/// exact while the window adapts.
#[test]
fn a_slow_switch_gets_a_window_it_can_serve_and_few_retransmissions() {
    let cluster = paced(5_000_000, FaultConfig::default());
    let p = JobParams {
        id: 1,
        workers: 4,
        pool_base: 0,
        pool_size: 256,
        elements: 64,
    };
    let mut workers = cluster.job(p, |_| {}).unwrap();
    let len = 64 * 1024;
    let inputs = inputs(4, len, 1);
    let mut data = inputs.clone();
    run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
    check_i32(&inputs, &data).unwrap();
    // How far the window shrinks, and that the late results cost no
    // retransmission, depend on the machine's load here: they are
    // checked in virtual time (protosim/tests/recovery.rs,
    // the_window_shrinks_behind_a_slow_switch). Here, the sums (above).
}

/// Windows that shrink while slots are in flight, under loss, with workers
/// of different windows: every worker still sends the lowest (round, slot)
/// some worker waits on (host-agent's engine, `Flight`). Were the window
/// obeyed to the letter, a worker whose window shrank below its flight
/// would hold back a slot that another worker's full window waits on,
/// while that worker holds back the slots the first one waits on; the job
/// would stop until the workers give up.
#[test]
fn shrinking_windows_under_loss_never_stop_a_job() {
    let faults = FaultConfig {
        drop_ingress: 0.03,
        drop_egress: 0.03,
        duplicate: 0.0,
        reorder: 0.02,
        seed: 5,
    };
    let cluster = paced(20_000_000, faults);
    let p = JobParams {
        id: 1,
        workers: 4,
        pool_base: 0,
        pool_size: 64,
        elements: 64,
    };
    let mut workers = cluster
        .job(p, |c| {
            c.window = match c.worker {
                0 => Window::Fixed { slots: 2 },
                1 => Window::Adaptive { initial: 1 },
                2 => Window::Adaptive { initial: 64 },
                _ => Window::default(),
            };
            c.give_up_after = Duration::from_secs(5);
        })
        .unwrap();
    for call in 0..3 {
        let inputs = inputs(4, 64 * 64 * 8 + 5, call);
        let mut data = inputs.clone();
        let stats = run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
        check_i32(&inputs, &data).unwrap();
        assert_eq!(stats[0].window, 2, "a fixed window stays put");
    }
}
