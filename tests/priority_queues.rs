//! The emulator's paced ports: a line rate and strict-priority egress queues
//! per port, over real UDP on loopback. What is checked here is behaviour
//! that does not depend on timing: which queue each job's packets use, that
//! tail drops are counted and recovered, that the sums stay exact. How much
//! priority helps is a benchmark's business, not a test's.

use inagg_emu::egress::{ClassQueue, LinkConfig};
use inagg_emu::{DropReason, EmulatorConfig};
use inagg_switch_control::target::Target;
use inagg_switch_control::EmuTarget;
use inagg_testbed::local::{allreduce_i32_side_by_side, run_all, JobParams, LocalCluster};
use inagg_testbed::verify::check_i32;

fn paced(rate_bps: u64, queue_bytes: usize) -> LocalCluster {
    LocalCluster::paced(rate_bps, queue_bytes, inagg_emu::FaultConfig::default()).unwrap()
}

fn inputs(workers: usize, len: usize, seed: i32) -> Vec<Vec<i32>> {
    (0..workers)
        .map(|w| {
            (0..len)
                .map(|i| (i as i32).wrapping_mul(31) ^ (seed + w as i32 * 7))
                .collect()
        })
        .collect()
}

#[test]
fn each_class_leaves_by_its_queue_and_both_jobs_stay_exact() {
    let cluster = paced(500_000_000, 1 << 20);
    let mut t = EmuTarget::connect(cluster.control_addr()).unwrap();
    t.set_priority_queue(5, 7).unwrap();
    let urgent = JobParams {
        id: 1,
        workers: 2,
        pool_base: 0,
        pool_size: 16,
        elements: 64,
    };
    let bulk = JobParams {
        id: 2,
        workers: 2,
        pool_base: 16,
        pool_size: 32,
        elements: 256,
    };
    let mut a = cluster.job(urgent, |c| c.priority = 5).unwrap();
    let mut b = cluster.job(bulk, |_| {}).unwrap();
    let (ia, ib) = (inputs(2, 20_000, 1), inputs(2, 60_000, 2));
    allreduce_i32_side_by_side(&mut a, &ia, &mut b, &ib).unwrap();

    let report = t.queues().unwrap();
    assert_eq!(
        report.map,
        [inagg_switch_api::queues::ClassQueue { class: 5, queue: 7 }]
    );
    assert_eq!(report.link.map(|l| l.rate_bps), Some(500_000_000));
    let port = |w: &inagg_host_agent::Worker| {
        report
            .ports
            .iter()
            .find(|p| p.port == w.local_addr())
            .unwrap_or_else(|| panic!("no port for {}", w.local_addr()))
    };
    for w in &a {
        let q = &port(w).queues;
        assert!(q[7].tx_packets >= 20_000u64.div_ceil(64), "{q:?}");
        assert_eq!(q[0].tx_packets, 0, "urgent results left by queue 0: {q:?}");
    }
    for w in &b {
        let q = &port(w).queues;
        assert!(q[0].tx_packets >= 60_000u64.div_ceil(256), "{q:?}");
        assert_eq!(q[7].tx_packets, 0, "bulk results left by queue 7: {q:?}");
    }
}

#[test]
fn a_jobs_own_map_overrides_the_switch_wide_one_for_that_job_only() {
    let cluster = paced(500_000_000, 1 << 20);
    let mut t = EmuTarget::connect(cluster.control_addr()).unwrap();
    // Both jobs tag class 5; switch-wide it goes to queue 3, but job 1
    // maps it to queue 6 for itself.
    t.set_priority_queue(5, 3).unwrap();
    let p = |id, pool_base| JobParams {
        id,
        workers: 2,
        pool_base,
        pool_size: 8,
        elements: 64,
    };
    let own = vec![ClassQueue { class: 5, queue: 6 }];
    let mut a = cluster
        .job_with_queues(p(1, 0), own.clone(), |c| c.priority = 5)
        .unwrap();
    let mut b = cluster.job(p(2, 8), |c| c.priority = 5).unwrap();
    let want = inputs(2, 4096, 4);
    let (mut da, mut db) = (want.clone(), want.clone());
    run_all(&mut a, &mut da, |w, d| w.allreduce_i32(d)).unwrap();
    run_all(&mut b, &mut db, |w, d| w.allreduce_i32(d)).unwrap();
    check_i32(&want, &da).unwrap();
    check_i32(&want, &db).unwrap();
    assert_eq!(t.job(1).unwrap().spec.queues, own, "the map is installed");
    let report = t.queues().unwrap();
    let queue_packets = |w: &inagg_host_agent::Worker| -> Vec<u64> {
        let port = report.ports.iter().find(|p| p.port == w.local_addr());
        port.unwrap().queues.iter().map(|q| q.tx_packets).collect()
    };
    for w in &a {
        let q = queue_packets(w);
        assert!(q[6] >= 4096 / 64, "job 1 by its own queue 6: {q:?}");
        assert_eq!(q.iter().sum::<u64>(), q[6], "{q:?}");
    }
    for w in &b {
        let q = queue_packets(w);
        assert!(q[3] >= 4096 / 64, "job 2 by the switch-wide queue 3: {q:?}");
        assert_eq!(q.iter().sum::<u64>(), q[3], "{q:?}");
    }
    // A bad map is refused before anything is installed.
    let bad = cluster
        .job_with_queues(p(3, 16), vec![ClassQueue { class: 1, queue: 9 }], |_| {})
        .unwrap_err();
    assert!(
        format!("{bad:#}").contains("queue 9 does not exist"),
        "{bad:#}"
    );
    let twice = vec![
        ClassQueue { class: 1, queue: 2 },
        ClassQueue { class: 1, queue: 3 },
    ];
    let bad = cluster
        .job_with_queues(p(3, 16), twice, |_| {})
        .unwrap_err();
    assert!(
        format!("{bad:#}").contains("priority class 1 is mapped twice"),
        "{bad:#}"
    );
}

#[test]
fn a_full_queue_drops_the_tail_and_the_workers_recover_exactly() {
    // 20 Mbit/s: a 284-byte result takes 114 us; a queue holds 14 of them,
    // and a window of 64 slots completes in bursts of up to 64.
    let cluster = paced(20_000_000, 4000);
    let p = JobParams {
        id: 1,
        workers: 2,
        pool_base: 0,
        pool_size: 64,
        elements: 64,
    };
    let mut workers = cluster.job(p, |_| {}).unwrap();
    let want = inputs(2, 64 * 64 * 2, 3);
    let mut data = want.clone();
    let stats = run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
    check_i32(&want, &data).unwrap();
    let mut t = EmuTarget::connect(cluster.control_addr()).unwrap();
    let report = t.queues().unwrap();
    let tail_drops: u64 = report
        .ports
        .iter()
        .flat_map(|p| &p.queues)
        .map(|q| q.drops)
        .sum();
    let counted = cluster
        .emu
        .state()
        .switch
        .counters()
        .dropped(DropReason::QueueFull);
    assert!(tail_drops > 0, "no queue overflowed: {report:?}");
    assert_eq!(counted, tail_drops, "every tail drop is counted once");
    // The dropped results came back as stored results, asked for by the
    // workers' queries (or their retransmissions).
    assert!(
        stats.iter().map(|s| s.queries).sum::<u64>() > 0,
        "{stats:?}"
    );
    let resent = cluster.emu.state().switch.jobs()[0].counters.resent_results;
    assert!(resent > 0, "no stored result was sent again");
    for q in report.ports.iter().flat_map(|p| &p.queues) {
        assert!(
            q.max_depth_bytes <= 4000,
            "a queue held more than its size: {q:?}"
        );
    }
}

#[test]
fn bad_queue_settings_are_refused_with_the_reason() {
    let cluster = paced(1_000_000_000, 1 << 16);
    let mut t = EmuTarget::connect(cluster.control_addr()).unwrap();
    let err = t.set_priority_queue(3, 8).unwrap_err().to_string();
    assert!(err.contains("queue 8 does not exist"), "{err}");
    let bad = inagg_emu::Emulator::start(EmulatorConfig {
        link: Some(LinkConfig {
            rate_bps: 5,
            queue_bytes: 1 << 16,
            per_host: false,
        }),
        ..EmulatorConfig::ephemeral()
    })
    .unwrap_err()
    .to_string();
    assert!(bad.contains("too low"), "{bad}");
}
