//! The agent's scheduler end to end: several tensors of one job, handed to
//! each worker at its own moment, through the emulator under loss. Checked:
//! every sum (exact for int32, within the quantization bound for floats),
//! the order in which tensors complete under each policy, and the priority
//! class each packet carried (by the egress queue its results left from).
//! Which policy is faster by how much is the benchmark's business.

use std::time::Duration;

use inagg_emu::egress::{ClassQueue, LinkConfig};
use inagg_emu::{EmulatorConfig, FaultConfig};
use inagg_host_agent::priority::{Policy, Priority, Tensor};
use inagg_switch_control::target::Target;
use inagg_switch_control::EmuTarget;
use inagg_testbed::local::{JobParams, LocalCluster};
use inagg_testbed::priority::{self, finish_rank, results, Arrival};
use inagg_testbed::verify::{check_f32, check_i32, gradient};

const BULK: usize = 0;
const URGENT: usize = 1;

fn lossy() -> FaultConfig {
    FaultConfig {
        drop_ingress: 0.01,
        drop_egress: 0.01,
        seed: 11,
        ..FaultConfig::default()
    }
}

fn job(workers: u16) -> JobParams {
    JobParams {
        id: 1,
        workers,
        pool_base: 0,
        pool_size: 16,
        elements: 64,
    }
}

/// Worker `w`'s plan: a bulk tensor (the last layer, rank 9) at once, then
/// an urgent one (the first layer, rank 0) a little later, later still on
/// higher ranks, then a small middle layer.
fn plan<T: Clone>(w: usize, bulk: Vec<T>, urgent: Vec<T>, middle: Vec<T>) -> Vec<Arrival<T>> {
    let layer = |l: usize| Priority::geryon(l, 10, &[0.6]);
    vec![
        Arrival {
            after: Duration::ZERO,
            tensor: Tensor {
                data: bulk,
                priority: layer(9),
            },
        },
        Arrival {
            after: Duration::from_millis(1 + 2 * w as u64),
            tensor: Tensor {
                data: urgent,
                priority: layer(0),
            },
        },
        Arrival {
            after: Duration::from_millis(1),
            tensor: Tensor {
                data: middle,
                priority: layer(5),
            },
        },
    ]
}

fn ints(len: usize, seed: i32) -> Vec<i32> {
    (0..len as i32)
        .map(|i| i.wrapping_mul(2_654_435) ^ seed)
        .collect()
}

#[test]
fn priority_order_lets_a_late_urgent_tensor_overtake_the_bulk_one_exactly() {
    let cluster = LocalCluster::start(lossy()).unwrap();
    let n = 3;
    let mut workers = cluster.job(job(n), |_| {}).unwrap();
    let inputs = |seq: usize, len: usize| -> Vec<Vec<i32>> {
        (0..n as i32)
            .map(|w| ints(len, w * 97 + seq as i32))
            .collect()
    };
    let (bulk, urgent, middle) = (inputs(0, 120_000), inputs(1, 5_000), inputs(2, 777));
    for policy in [Policy::bytescheduler(4096, 2), Policy::p3(4096)] {
        let plans = (0..usize::from(n))
            .map(|w| plan(w, bulk[w].clone(), urgent[w].clone(), middle[w].clone()))
            .collect();
        let runs = priority::run(&mut workers, plans, policy).unwrap();
        check_i32(&bulk, &results(&runs, 0)).unwrap();
        check_i32(&urgent, &results(&runs, 1)).unwrap();
        check_i32(&middle, &results(&runs, 2)).unwrap();
        for r in &runs {
            assert_eq!(
                finish_rank(r, URGENT),
                Some(0),
                "{policy:?}: the urgent tensor finishes first"
            );
            assert_eq!(finish_rank(r, BULK), Some(2), "{policy:?}: bulk last");
        }
    }
}

#[test]
fn fifo_keeps_the_submission_order() {
    let cluster = LocalCluster::start(lossy()).unwrap();
    let mut workers = cluster.job(job(2), |_| {}).unwrap();
    let inputs = |seq: usize, len: usize| -> Vec<Vec<i32>> {
        (0..2).map(|w| ints(len, w * 31 + seq as i32)).collect()
    };
    let (bulk, urgent, middle) = (inputs(0, 100_000), inputs(1, 3_000), inputs(2, 100));
    let plans = (0..2)
        .map(|w| plan(w, bulk[w].clone(), urgent[w].clone(), middle[w].clone()))
        .collect();
    let runs = priority::run(&mut workers, plans, Policy::fifo(4096, 2)).unwrap();
    check_i32(&urgent, &results(&runs, 1)).unwrap();
    for r in &runs {
        let order: Vec<usize> = r.done.iter().map(|c| c.seq).collect();
        assert_eq!(order, [0, 1, 2]);
    }
}

#[test]
fn float_tensors_are_summed_within_the_bound_and_tagged_by_class() {
    // Paced ports, so each result leaves by the queue of its class: the
    // urgent layer is Geryon class 1, mapped to queue 7 for this job.
    let cluster = LocalCluster::start_config(EmulatorConfig {
        faults: lossy(),
        link: Some(LinkConfig {
            rate_bps: 2_000_000_000,
            queue_bytes: 1 << 20,
            per_host: false,
        }),
        ..EmulatorConfig::ephemeral()
    })
    .unwrap();
    let map = vec![ClassQueue { class: 1, queue: 7 }];
    let mut workers = cluster.job_with_queues(job(2), map, |_| {}).unwrap();
    let inputs =
        |seq: u64, len: usize| -> Vec<Vec<f32>> { (0..2).map(|w| gradient(seq, w, len)).collect() };
    let (bulk, urgent, middle) = (inputs(0, 50_000), inputs(1, 6_400), inputs(2, 64));
    let plans = (0..2)
        .map(|w| plan(w, bulk[w].clone(), urgent[w].clone(), middle[w].clone()))
        .collect();
    let runs = priority::run(&mut workers, plans, Policy::bytescheduler(2048, 2)).unwrap();
    for (seq, want) in [&bulk, &urgent, &middle].into_iter().enumerate() {
        let check = check_f32(want, &results(&runs, seq), 64);
        assert!(check.verified, "tensor {seq}: {check:?}");
    }
    let report = EmuTarget::connect(cluster.control_addr())
        .unwrap()
        .queues()
        .unwrap();
    for w in &workers {
        let port = report
            .ports
            .iter()
            .find(|p| p.port == w.local_addr())
            .unwrap();
        let (q0, q7) = (port.queues[0].tx_packets, port.queues[7].tx_packets);
        // The urgent tensor's 100 chunks (plus exponent rounds) left by
        // queue 7; the bulk's 782 and the middle layer's by queue 0.
        assert!(q7 >= 100, "urgent results by queue 7: {q7}");
        assert!(q0 >= 782, "bulk results by queue 0: {q0}");
    }
}

#[test]
fn a_source_that_closes_early_is_an_error_not_a_hang() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let mut workers = cluster.job(job(1), |_| {}).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<Tensor<i32>>();
    tx.send(Tensor {
        data: vec![1; 10],
        priority: Priority { rank: 0, class: 0 },
    })
    .unwrap();
    drop(tx);
    let err = inagg_host_agent::priority::run(&mut workers[0], Policy::p3(64), 2, &rx, |_| {})
        .unwrap_err()
        .to_string();
    assert!(err.contains("closed after 1 of 2 tensors"), "{err}");
}
