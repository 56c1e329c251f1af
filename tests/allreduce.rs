//! End-to-end all-reduce through the emulator over real UDP on loopback:
//!
//! ```text
//!   worker 0 ──┐                       ┌── result multicast ──> every worker
//!   worker 1 ──┼── UDP ──> emulator ───┤
//!   worker N ──┘   (faults injected)   └── unicast resend on retransmission
//! ```
//!
//! Int32 sums must be exact; float sums within host-agent's documented bound.

use std::net::UdpSocket;
use std::time::Duration;

use inagg_emu::{DropReason, FaultConfig};
use inagg_host_agent::float::Float;
use inagg_host_agent::{bf16, f16, AsyncWorker, Error, Window, Worker};
use inagg_testbed::local::{allreduce_i32_side_by_side, run_all, JobParams, LocalCluster};
use inagg_testbed::verify::{check_f32, check_float, check_i32, gradient};

fn job(id: u16, workers: u16, pool_base: u32, pool_size: u32, elements: u16) -> JobParams {
    JobParams {
        id,
        workers,
        pool_base,
        pool_size,
        elements,
    }
}

fn int_inputs(workers: usize, len: usize, seed: i32) -> Vec<Vec<i32>> {
    (0..workers)
        .map(|w| {
            (0..len)
                .map(|i| {
                    (i as i32)
                        .wrapping_mul(7919)
                        .wrapping_add(seed * 31 + w as i32 * 1_000_003)
                })
                .collect()
        })
        .collect()
}

fn allreduce_ints(cluster: &LocalCluster, p: JobParams, len: usize) {
    let mut workers = cluster.job(p, |_| {}).unwrap();
    let inputs = int_inputs(p.workers.into(), len, p.id.into());
    let mut data = inputs.clone();
    run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
    check_i32(&inputs, &data).unwrap();
}

fn allreduce_floats(cluster: &LocalCluster, p: JobParams, len: usize, seed: u64) {
    let mut workers = cluster.job(p, |_| {}).unwrap();
    let inputs: Vec<Vec<f32>> = (0..p.workers.into())
        .map(|w| gradient(seed, w, len))
        .collect();
    let mut data = inputs.clone();
    run_all(&mut workers, &mut data, |w, d| w.allreduce_f32(d)).unwrap();
    let check = check_f32(&inputs, &data, p.elements.into());
    assert!(check.verified, "{check:?}");
}

#[test]
fn int_sums_are_exact_for_2_4_and_8_workers() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    for (id, n) in [(1, 2), (2, 4), (3, 8)] {
        // Wrapping sums included: the inputs overflow int32 when added.
        allreduce_ints(
            &cluster,
            job(id, n, u32::from(id) * 100, 64, 64),
            40_000 + usize::from(n),
        );
    }
}

#[test]
fn float_sums_are_within_the_bound_under_1_percent_loss() {
    let cluster = LocalCluster::start(FaultConfig::loss(0.01, 11)).unwrap();
    for (id, n) in [(1, 2), (2, 4), (3, 8)] {
        allreduce_floats(
            &cluster,
            job(id, n, u32::from(id) * 100, 64, 256),
            100_000,
            u64::from(id),
        );
    }
    let c = cluster.emu.state().switch.counters().clone();
    assert!(
        c.dropped(DropReason::InjectedIngress) > 0 && c.dropped(DropReason::InjectedEgress) > 0,
        "{c:?}"
    );
}

#[test]
fn ten_percent_loss_with_duplication_and_reordering() {
    let faults = FaultConfig {
        drop_ingress: 0.1,
        drop_egress: 0.1,
        duplicate: 0.05,
        reorder: 0.05,
        seed: 3,
    };
    let cluster = LocalCluster::start(faults).unwrap();
    allreduce_ints(&cluster, job(1, 4, 0, 64, 64), 20_000);
    allreduce_floats(&cluster, job(2, 4, 64, 64, 64), 20_000, 5);
    let c = cluster.emu.state().switch.counters().clone();
    assert!(
        c.injected_duplicates > 0 && c.injected_reorders > 0,
        "{c:?}"
    );
    let resent: u64 = cluster
        .emu
        .state()
        .switch
        .jobs()
        .iter()
        .map(|j| j.counters.resent_results)
        .sum();
    assert!(
        resent > 0,
        "lost results must have been recovered by unicast resends"
    );
}

/// Workers whose windows differ (fixed at one, two and three slots of
/// eight; adaptive from one; the whole pool) finish together under loss:
/// due slots leave in the order every worker shares, and a slot ahead of
/// one in flight is sent whatever the window says (host-agent's engine,
/// `Flight`). Without that, a full window waits on a slot another worker
/// holds back behind its own full window, and the job stops until the
/// workers give up.
#[test]
fn workers_with_different_windows_finish_together_under_loss() {
    let faults = FaultConfig {
        drop_ingress: 0.05,
        drop_egress: 0.05,
        duplicate: 0.02,
        reorder: 0.02,
        seed: 11,
    };
    let cluster = LocalCluster::start(faults).unwrap();
    let p = job(1, 5, 0, 8, 64);
    let mut workers = cluster
        .job(p, |c| {
            c.window = match c.worker {
                0..=2 => Window::Fixed {
                    slots: u32::from(c.worker) + 1,
                },
                3 => Window::Adaptive { initial: 1 },
                _ => Window::POOL,
            };
            c.give_up_after = Duration::from_secs(5);
        })
        .unwrap();
    for call in 0..3 {
        let inputs = int_inputs(5, 64 * 8 * 12 + 17, call);
        let mut data = inputs.clone();
        let stats = run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
        check_i32(&inputs, &data).unwrap();
        let windows: Vec<u64> = stats.iter().map(|s| s.window).collect();
        assert_eq!(windows[..3], [1, 2, 3], "fixed windows stay put");
        assert_eq!(windows[4], 8, "the whole pool");
        assert!((1..=8).contains(&windows[3]), "{windows:?}");
    }
}

/// Each worker's gradient in format `T` (rounded from [`gradient`]).
fn gradients_as<T: Float>(
    workers: usize,
    len: usize,
    seed: u64,
    from: fn(f32) -> T,
) -> Vec<Vec<T>> {
    let single: Vec<Vec<f32>> = (0..workers).map(|w| gradient(seed, w, len)).collect();
    converted(&single, from)
}

fn converted<T>(inputs: &[Vec<f32>], from: fn(f32) -> T) -> Vec<Vec<T>> {
    inputs
        .iter()
        .map(|x| x.iter().map(|&v| from(v)).collect())
        .collect()
}

#[test]
fn binary16_and_bfloat16_sums_are_within_their_bounds_under_loss() {
    let faults = FaultConfig {
        drop_ingress: 0.02,
        drop_egress: 0.02,
        duplicate: 0.01,
        reorder: 0.01,
        seed: 21,
    };
    let cluster = LocalCluster::start(faults).unwrap();
    let (n, len, k) = (3usize, 30_000, 256u16);
    let mut workers = cluster.job(job(1, n as u16, 0, 32, k), |_| {}).unwrap();
    let mut halves = gradients_as(n, len, 7, f16::from_f32);
    // One chunk sums past binary16's range (3 x 30000): infinite everywhere.
    for h in &mut halves {
        h[..256].fill(f16::from_f32(30_000.0));
    }
    let mut data = halves.clone();
    run_all(&mut workers, &mut data, |w, d| w.allreduce_f16(d)).unwrap();
    let check = check_float(&halves, &data, k.into());
    assert!(check.verified, "{check:?}");
    assert!(data
        .iter()
        .all(|d| d[..256].iter().all(|x| x.to_f32() == f32::INFINITY)));
    assert!(data.iter().all(|d| d[256..].iter().all(|x| x.is_finite())));

    let brains = gradients_as(n, len, 8, bf16::from_f32);
    let mut data = brains.clone();
    let stats = run_all(&mut workers, &mut data, |w, d| w.allreduce_bf16(d)).unwrap();
    let check = check_float(&brains, &data, k.into());
    assert!(check.verified, "{check:?}");
    assert!(check.max_abs_error > 0.0, "bfloat16 rounding shows");
    assert!(stats.iter().map(|s| s.retransmissions).sum::<u64>() > 0);
    // The tensor counted in the goodput is two bytes per element.
    assert_eq!(stats[0].payload_bytes, len as u64 * 2);
}

#[test]
fn workers_of_one_job_may_hold_f32_f16_and_bf16_tensors() {
    let cluster = LocalCluster::start(FaultConfig::loss(0.02, 5)).unwrap();
    let mut workers = cluster.job(job(1, 3, 0, 16, 64), |_| {}).unwrap();
    // Values with 8 significant bits in binary16's normal range: exactly
    // representable in all three formats, so every worker adds the same.
    let inputs: Vec<Vec<f32>> = (0..3)
        .map(|w| {
            gradient(3, w, 5000)
                .into_iter()
                .map(|x| bf16::from_f32(x.clamp(-60_000.0, 60_000.0)).to_f32())
                .map(|x| if x.abs() < 1e-4 { 0.0 } else { x })
                .collect()
        })
        .collect();
    let mut single = inputs[0].clone();
    let mut half: Vec<f16> = inputs[1].iter().map(|&x| f16::from_f32(x)).collect();
    let mut brain: Vec<bf16> = inputs[2].iter().map(|&x| bf16::from_f32(x)).collect();
    assert!(half.iter().zip(&inputs[1]).all(|(h, x)| h.to_f32() == *x));
    let [w0, w1, w2] = &mut workers[..] else {
        unreachable!()
    };
    std::thread::scope(|s| {
        let a = s.spawn(|| w0.allreduce_f32(&mut single));
        let b = s.spawn(|| w1.allreduce_f16(&mut half));
        let c = s.spawn(|| w2.allreduce_bf16(&mut brain));
        for h in [a, b, c] {
            h.join().unwrap().unwrap();
        }
    });
    // Each result is the one binary32 sum, rounded to the worker's format.
    let c32 = check_f32(&inputs, std::slice::from_ref(&single), 64);
    let c16 = check_float(&converted(&inputs, f16::from_f32), &[half.clone()], 64);
    let cb16 = check_float(&converted(&inputs, bf16::from_f32), &[brain.clone()], 64);
    assert!(
        c32.verified && c16.verified && cb16.verified,
        "{c32:?} {c16:?} {cb16:?}"
    );
    for i in 0..single.len() {
        assert_eq!(f16::from_f32(single[i]), half[i], "element {i}");
        assert_eq!(bf16::from_f32(single[i]), brain[i], "element {i}");
    }
}

#[test]
fn k_1024_and_a_window_smaller_than_the_pool() {
    let cluster = LocalCluster::start(FaultConfig::loss(0.01, 2)).unwrap();
    // 3 chunks of 1024 through a pool of 512 slots: only 3 slots are used.
    allreduce_floats(&cluster, job(1, 3, 0, 512, 1024), 3000, 9);
    allreduce_ints(&cluster, job(2, 3, 512, 8, 1024), 100_000);
}

#[test]
fn two_jobs_at_once_with_disjoint_pools_are_independent() {
    let cluster = LocalCluster::start(FaultConfig::loss(0.01, 4)).unwrap();
    let mut a = cluster.job(job(1, 3, 0, 32, 64), |_| {}).unwrap();
    let mut b = cluster.job(job(2, 2, 32, 16, 128), |_| {}).unwrap();
    let (ia, ib) = (int_inputs(3, 30_000, 1), int_inputs(2, 25_000, 2));
    allreduce_i32_side_by_side(&mut a, &ia, &mut b, &ib).unwrap();
    let jobs = cluster.emu.state().switch.jobs();
    // One slot round per chunk (K - 1 values), and the session handshake
    // of each slot in the window (an int32 all-reduce's round of its own;
    // on a fresh job it succeeds the first time).
    assert_eq!(
        jobs[0].counters.results,
        30_000u64.div_ceil(63) + 32,
        "job 1 completes one slot round per chunk and one handshake per slot"
    );
    assert_eq!(jobs[1].counters.results, 25_000u64.div_ceil(127) + 16);
}

#[test]
fn repeated_allreduces_reuse_the_pool_across_calls() {
    let cluster = LocalCluster::start(FaultConfig::loss(0.02, 8)).unwrap();
    let mut workers = cluster.job(job(1, 3, 0, 16, 64), |_| {}).unwrap();
    // Lengths that use all 16 slots, then 1, then an odd number of rounds.
    for (round, len) in [5000usize, 10, 64 * 16 * 3 + 5, 700]
        .into_iter()
        .enumerate()
    {
        let inputs = int_inputs(3, len, round as i32);
        let mut data = inputs.clone();
        run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
        check_i32(&inputs, &data).unwrap_or_else(|e| panic!("call {round}: {e}"));
        let floats: Vec<Vec<f32>> = (0..3).map(|w| gradient(round as u64, w, len)).collect();
        let mut fdata = floats.clone();
        run_all(&mut workers, &mut fdata, |w, d| w.allreduce_f32(d)).unwrap();
        assert!(check_f32(&floats, &fdata, 64).verified, "call {round}");
    }
}

#[test]
fn a_non_finite_chunk_is_nan_on_every_worker_and_the_rest_is_exact() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let mut workers = cluster.job(job(1, 3, 0, 8, 64), |_| {}).unwrap();
    let mut inputs: Vec<Vec<f32>> = (0..3).map(|w| gradient(1, w, 640)).collect();
    // K = 64: a packet carries 63 values and its check.
    inputs[1][130] = f32::INFINITY; // chunk 2: 126..189
    inputs[2][600] = f32::NAN; // chunk 9: 567..630
    let mut data = inputs.clone();
    run_all(&mut workers, &mut data, |w, d| w.allreduce_f32(d)).unwrap();
    for d in &data {
        assert!(d[126..189].iter().all(|x| x.is_nan()));
        assert!(d[567..630].iter().all(|x| x.is_nan()));
        let rest = d[..126].iter().chain(&d[189..567]).chain(&d[630..]);
        assert!(rest.copied().all(f32::is_finite));
    }
    assert!(check_f32(&inputs, &data, 64).verified);
}

#[test]
fn malformed_and_foreign_packets_are_counted_and_change_nothing() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let mut workers = cluster.job(job(1, 2, 0, 8, 64), |_| {}).unwrap();
    let intruder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = cluster.emu.data_addr();
    let mut good = vec![0u8; 24 + 64 * 4];
    let mut p = inagg_wire::Packet::new_unchecked(&mut good[..]);
    inagg_wire::Repr::contribution(1, 0, 0, 0, 64, 0).emit(&mut p);
    p.payload_mut().fill(0x11);
    let unknown_job = {
        let mut b = good.clone();
        b[5] = 99;
        b
    };
    // From a socket that is not worker 0: an impostor.
    let junk: Vec<Vec<u8>> = vec![
        vec![],
        vec![1, 2, 3],
        good[..30].to_vec(),
        vec![0xff; 300],
        unknown_job,
        good.clone(),
    ];
    for j in &junk {
        intruder.send_to(j, to).unwrap();
    }
    let inputs = int_inputs(2, 5000, 0);
    let mut data = inputs.clone();
    run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
    check_i32(&inputs, &data).unwrap();
    let c = cluster.emu.state().switch.counters().clone();
    assert_eq!(c.dropped(DropReason::Malformed), 4, "{c:?}");
    assert_eq!(c.dropped(DropReason::UnknownJob), 1);
    assert_eq!(c.dropped(DropReason::UnknownWorker), 1);
}

#[test]
fn async_workers_reduce_like_blocking_ones() {
    let cluster = LocalCluster::start(FaultConfig::loss(0.01, 5)).unwrap();
    let workers: Vec<AsyncWorker> = cluster
        .job(job(1, 3, 0, 32, 64), |_| {})
        .unwrap()
        .into_iter()
        .map(AsyncWorker::new)
        .collect();
    let inputs = int_inputs(3, 10_000, 5);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let outputs: Vec<Vec<i32>> = rt.block_on(async {
        let tasks: Vec<_> = workers
            .iter()
            .zip(&inputs)
            .map(|(w, d)| {
                let (w, d) = (w.clone(), d.clone());
                tokio::spawn(async move { w.allreduce_i32(d).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap().unwrap().0);
        }
        out
    });
    check_i32(&inputs, &outputs).unwrap();
    // And a 16-bit float tensor, on the same workers.
    let brains = gradients_as(3, 10_000, 6, bf16::from_f32);
    let outputs: Vec<Vec<bf16>> = rt.block_on(async {
        let tasks: Vec<_> = workers
            .iter()
            .zip(&brains)
            .map(|(w, d)| {
                let (w, d) = (w.clone(), d.clone());
                tokio::spawn(async move { w.allreduce_float(d).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap().unwrap().0);
        }
        out
    });
    let check = check_float(&brains, &outputs, 64);
    assert!(check.verified, "{check:?}");
}

#[test]
fn a_worker_whose_job_is_not_installed_fails_with_a_clear_error() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let mut config = inagg_host_agent::AgentConfig::new(cluster.emu.data_addr(), 42, 0, 2, 8, 64);
    config.give_up_after = Duration::from_millis(300);
    config.min_rto = Duration::from_millis(20);
    let mut worker = Worker::new(config).unwrap();
    let err = worker.allreduce_i32(&mut [1, 2, 3]).unwrap_err();
    assert!(matches!(err, Error::Timeout { job: 42, .. }), "{err}");
    assert!(
        err.to_string()
            .contains("the switch answered none of this worker's")
            && err.to_string().contains("check that the job is installed"),
        "{err}"
    );
    // Every packet the worker sent (its contribution, the queries about it
    // and the retransmissions) was refused as unknown_job; the last may
    // still be in the emulator's socket, so drain with a deadline.
    let sent = 1 + worker_retransmissions(&err) + worker_queries(&err);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while cluster
        .emu
        .state()
        .switch
        .counters()
        .dropped(DropReason::UnknownJob)
        < sent
        && std::time::Instant::now() < deadline
    {
        std::thread::yield_now();
    }
    assert_eq!(
        cluster
            .emu
            .state()
            .switch
            .counters()
            .dropped(DropReason::UnknownJob),
        sent
    );
}

#[test]
fn a_worker_whose_switch_address_has_no_listener_is_told_so() {
    // A port just freed: the host answers each datagram with ICMP port
    // unreachable, which the agent counts.
    let nobody = std::net::UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut config = inagg_host_agent::AgentConfig::new(nobody, 1, 0, 1, 8, 64);
    config.give_up_after = Duration::from_millis(300);
    config.min_rto = Duration::from_millis(20);
    let err = Worker::new(config)
        .unwrap()
        .allreduce_i32(&mut [1, 2, 3])
        .unwrap_err();
    let Error::Timeout { refusals, .. } = err else {
        panic!("{err}")
    };
    assert!(refusals > 0, "{err}");
    assert!(
        err.to_string().ends_with(&format!(
            "the host at {nobody} answered 'port unreachable' {refusals} times: nothing listens \
             there; is the switch running, at that address?"
        )),
        "{err}"
    );

    // A loopback worker and a switch off this host: said at once (on a
    // host with no default route, the kernel says so first).
    let mut config =
        inagg_host_agent::AgentConfig::new("198.51.100.1:47000".parse().unwrap(), 1, 0, 1, 8, 64);
    config.bind = "127.0.0.1:0".parse().unwrap();
    let err = Worker::new(config).unwrap_err().to_string();
    let routes = std::fs::read_to_string("/proc/net/route").unwrap_or_default();
    let default_route = routes
        .lines()
        .skip(1)
        .any(|l| l.split_whitespace().nth(1) == Some("00000000"));
    let want = if default_route {
        "a worker bound to 127.0.0.1:0 cannot reach the switch at 198.51.100.1:47000"
    } else {
        "connect to the switch: Network is unreachable"
    };
    assert!(err.contains(want), "{err}");
}

/// Workers told a larger worker count than the switch's job has: every
/// handshake result holds the worker's own token but weighs 2 x the job's
/// workers, and the timeout says so, with both counts.
#[test]
fn workers_told_the_wrong_worker_count_are_told_what_the_switch_counts() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let mut workers = cluster
        .job(job(7, 2, 0, 8, 64), |c| {
            c.workers = 3;
            c.give_up_after = Duration::from_millis(300);
        })
        .unwrap();
    let mut data = vec![vec![1i32; 1000]; 2];
    let err = run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap_err();
    let err = format!("{err:#}");
    assert!(
        err.contains("results of this worker's own handshakes weighed 4, not 6")
            && err.contains("looks like 2 workers where this worker was told 3"),
        "{err}"
    );
}

fn worker_queries(err: &Error) -> u64 {
    match err {
        Error::Timeout { queries, .. } => u64::from(queries.0),
        _ => 0,
    }
}

fn worker_retransmissions(err: &Error) -> u64 {
    match err {
        Error::Timeout {
            retransmissions, ..
        } => *retransmissions,
        _ => 0,
    }
}

#[test]
fn bad_agent_configurations_are_refused() {
    let addr = "127.0.0.1:9".parse().unwrap();
    let cases = [
        (
            inagg_host_agent::AgentConfig::new(addr, 1, 2, 2, 8, 64),
            "worker id 2 is not below the worker count 2",
        ),
        (
            inagg_host_agent::AgentConfig::new(addr, 1, 0, 2, 0, 64),
            "pool size 0",
        ),
        (
            inagg_host_agent::AgentConfig::new(addr, 1, 0, 2, 8, 0),
            "elements per packet 0",
        ),
        (
            inagg_host_agent::AgentConfig::new(addr, 1, 0, 0, 8, 64),
            "workers = 0",
        ),
        (
            inagg_host_agent::AgentConfig::new(addr, 1, 64, 65, 8, 64),
            "worker id 64 is beyond a switch job's 64 members",
        ),
        (
            inagg_host_agent::AgentConfig {
                rank: 3,
                ..inagg_host_agent::AgentConfig::new(addr, 1, 0, 3, 8, 64)
            },
            "rank 3 is not below the worker count 3",
        ),
        (
            // A tree of 100 workers with K = 2: 50 per element, no room
            // for a handshake field of one bit each.
            inagg_host_agent::AgentConfig::new(addr, 1, 0, 100, 8, 2),
            "100 workers with K = 2: a session handshake",
        ),
    ];
    for (config, want) in cases {
        let err = Worker::new(config).unwrap_err();
        assert!(err.to_string().contains(want), "{err} (wanted {want})");
    }
}

/// A result of the job's previous membership (another generation, as when a
/// job id is reused for a new group) is not this worker's, however complete
/// it looks: the worker ignores it and takes its own. Played against a
/// hand-driven switch so the order is fixed: the old-generation result comes
/// first. Were it taken for a previous session's left-over, the worker
/// would move to the other set alone and never finish.
#[test]
fn a_result_of_another_generation_is_not_taken() {
    use inagg_wire::{Kind, Packet, Repr, HEADER_LEN};
    let switch = UdpSocket::bind("127.0.0.1:0").unwrap();
    switch
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut config =
        inagg_host_agent::AgentConfig::new(switch.local_addr().unwrap(), 3, 0, 1, 1, 4);
    config.bind = "127.0.0.1:0".parse().unwrap();
    config.generation = 5;
    let mut worker = Worker::new(config).unwrap();
    let driver = std::thread::spawn(move || {
        let mut buf = [0u8; 64];
        let mut receive = || {
            let (len, from) = switch.recv_from(&mut buf).unwrap();
            let sent = Repr::parse(&Packet::new_checked(&buf[..len]).unwrap()).unwrap();
            (sent, buf[HEADER_LEN..len].to_vec(), from)
        };
        let answer = |sent: &Repr, payload: &[u8], generation: u16, packet_id: u32, to| {
            let repr = Repr {
                kind: Kind::Result,
                count: sent.count.max(1),
                generation,
                packet_id,
                ..*sent
            };
            let mut out = vec![0u8; repr.buffer_len()];
            repr.emit(&mut Packet::new_unchecked(&mut out[..]));
            out[HEADER_LEN..].copy_from_slice(payload);
            switch.send_to(&out, to).unwrap();
        };
        // The session handshake (count 2), answered as a one-worker switch
        // would; then the data round, answered first by the old generation.
        let (sent, payload, from) = receive();
        assert_eq!(sent.count, inagg_host_agent::HANDSHAKE_WEIGHT);
        answer(&sent, &payload, 5, sent.packet_id, from);
        let (sent, payload, from) = receive();
        assert_eq!(sent.count, 0, "a data round");
        answer(&sent, &payload, 4, 9, from);
        answer(&sent, &payload, 5, sent.packet_id, from);
    });
    // K = 4: one packet's 3 values (the fourth element is the check).
    let mut data = vec![1, -2, 3];
    let stats = worker.allreduce_i32(&mut data).unwrap();
    driver.join().unwrap();
    assert_eq!(data, [1, -2, 3]);
    assert_eq!(stats.foreign, 1, "{stats:?}");
    assert_eq!(stats.packets_sent, 2, "{stats:?}");
}
