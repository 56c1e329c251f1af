//! Loss recovery by query (docs/PROTOCOL.md, "Loss recovery") through the
//! emulator over real UDP on loopback: a worker that suspects a loss asks
//! the switch, and resends only what the switch lacks of its own.
//!
//! Here the sums are exact and the recovery's parts are seen at work
//! (queries answered, nudges, spare slots). The ratios of its rules (about
//! one retransmission per loss, found by a query rather than a timeout,
//! queries per loss) depend on how promptly each worker runs, which a busy
//! machine does not promise: they are asserted in virtual time, in
//! protosim/tests/recovery.rs.

use std::time::Duration;

use inagg_emu::{DropReason, FaultConfig};
use inagg_host_agent::{Error, Stats};
use inagg_testbed::local::{run_all, JobParams, LocalCluster};
use inagg_testbed::verify::check_i32;

fn inputs(workers: usize, len: usize) -> Vec<Vec<i32>> {
    (0..workers)
        .map(|w| {
            (0..len)
                .map(|i| (i as i32).wrapping_mul(48_271) ^ (w as i32 * 7_777_777))
                .collect()
        })
        .collect()
}

/// Runs an int32 all-reduce of `len` elements on `workers` workers (K = 64,
/// a pool of 64) through an emulator with `faults`, checks the sums, and
/// returns the workers' summed stats and the data the emulator dropped
/// (contributions and result copies; not queries or statuses).
fn run(faults: FaultConfig, workers: u16, len: usize) -> (Stats, u64) {
    run_pool(faults, workers, len, 64, 64)
}

/// [`run`] with a pool of `pool_size` slots of `elements` values each.
fn run_pool(
    faults: FaultConfig,
    workers: u16,
    len: usize,
    pool_size: u32,
    elements: u16,
) -> (Stats, u64) {
    run_spare(faults, workers, len, pool_size, elements, 0)
}

/// [`run_pool`] with `spare_slots` of the pool left to rounds in recovery.
fn run_spare(
    faults: FaultConfig,
    workers: u16,
    len: usize,
    pool_size: u32,
    elements: u16,
    spare_slots: u32,
) -> (Stats, u64) {
    let cluster = LocalCluster::start(faults).unwrap();
    let p = JobParams {
        id: 1,
        workers,
        pool_base: 0,
        pool_size,
        elements,
    };
    let mut ws = cluster.job(p, |c| c.spare_slots = spare_slots).unwrap();
    let inputs = inputs(workers.into(), len);
    let mut data = inputs.clone();
    let stats = run_all(&mut ws, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
    check_i32(&inputs, &data).unwrap();
    let mut sum = Stats::default();
    stats.iter().for_each(|s| sum.merge(s));
    let c = cluster.emu.state().switch.counters().clone();
    let dropped = c.dropped(DropReason::InjectedIngress) + c.dropped(DropReason::InjectedEgress);
    (sum, dropped - c.injected_query_drops)
}

#[test]
fn losses_are_found_by_queries_and_resent_once() {
    for workers in [4, 8] {
        let (s, lost) = run(FaultConfig::loss(0.05, 21), workers, 40_000);
        assert!(lost > 50, "too few drops to judge: {lost}");
        assert!(s.statuses > 0 && s.statuses <= s.queries, "{s:?}");
    }
}

/// With few slots in flight (a pool of 8), workers ask for nudges: a held
/// member's status reaches the members the round waits for (counted apart
/// from the answers to a worker's own queries), and each that lacks its
/// contribution asks at once.
#[test]
fn few_slots_in_flight_ask_for_nudges() {
    let (s, lost) = run_pool(FaultConfig::loss(0.05, 5), 4, 400_000, 8, 1024);
    assert!(lost > 20, "too few drops to judge: {lost}");
    assert!(s.nudges > 0, "{s:?}");
    assert!(s.statuses <= s.queries, "{s:?}");
}

/// With spare slots (a pool of 12, a window of at most 8), a round being
/// recovered lets the next round due into a spare slot; still exact sums
/// (exact sums). Without spare slots the same run
/// counts no spare send (a send past the window that only keeps the
/// shared order is not one).
#[test]
fn rounds_in_recovery_hand_their_place_in_the_window_to_spare_slots() {
    let (s, lost) = run_spare(FaultConfig::loss(0.05, 5), 4, 400_000, 12, 1024, 4);
    assert!(lost > 20, "too few drops to judge: {lost}");
    assert!(s.spare_sends > 0, "{s:?}");
    let (s, _) = run_pool(FaultConfig::loss(0.05, 5), 4, 400_000, 12, 1024);
    assert_eq!(s.spare_sends, 0, "no spare slots: {s:?}");
}

/// With hundreds of slots in flight, the members of a round take turns to
/// speak for it: one asks at once (and asks for nudges), the others wait
/// two round trips more; the nudged members hear of their losses. (How
/// many queries that saves: protosim/tests/recovery.rs.)
#[test]
fn many_slots_in_flight_take_turns_to_ask() {
    let (s, lost) = run_pool(FaultConfig::loss(0.05, 13), 8, 400_000, 512, 64);
    assert!(lost > 500, "too few drops to judge: {lost}");
    assert!(s.nudges > 0, "{s:?}");
}

#[test]
fn a_lossless_path_resends_nothing() {
    let (s, lost) = run(FaultConfig::default(), 4, 40_000);
    assert_eq!(lost, 0, "{s:?}");
}

#[test]
fn duplication_and_reordering_on_top_of_loss_keep_the_retransmissions_to_the_losses() {
    let faults = FaultConfig {
        drop_ingress: 0.01,
        drop_egress: 0.01,
        duplicate: 0.05,
        reorder: 0.05,
        seed: 9,
    };
    let (s, lost) = run(faults, 4, 40_000);
    assert!(lost > 0 && s.retransmissions > 0, "{s:?}");
}

/// A worker whose peer never starts gives up naming it: the switch holds
/// the worker's contribution and told it which member the round waits for.
#[test]
fn a_worker_whose_peer_never_comes_names_it_when_it_gives_up() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let p = JobParams {
        id: 1,
        workers: 3,
        pool_base: 0,
        pool_size: 4,
        elements: 64,
    };
    let mut ws = cluster
        .job(p, |c| c.give_up_after = Duration::from_millis(400))
        .unwrap();
    let mut a = vec![1i32; 256];
    let mut b = vec![2i32; 256];
    let (w0, rest) = ws.split_at_mut(1);
    let (r0, r1) = std::thread::scope(|scope| {
        let t = scope.spawn(|| w0[0].allreduce_i32(&mut a));
        let r1 = rest[0].allreduce_i32(&mut b);
        (t.join().unwrap(), r1)
    });
    for err in [r0.unwrap_err(), r1.unwrap_err()] {
        let Error::Timeout { missing, .. } = &err else {
            panic!("{err}");
        };
        assert_eq!(*missing, 1 << 2, "{err}");
        assert!(err.to_string().contains("waits for members [2]"), "{err}");
    }
    let queries = cluster.emu.state().switch.jobs()[0].counters.queries;
    assert!(queries > 0);
}

/// At 30% loss per direction a round often waits a long time for one
/// member's recovery (its query, the status, its resend and the result
/// each lost a third of the time): the sums stay exact, recovered by
/// statuses. (That each retransmission is owed to a loss, with timeouts
/// rare: protosim/tests/recovery.rs.)
#[test]
fn heavy_loss_resends_no_contribution_the_switch_holds() {
    let (s, lost) = run_pool(FaultConfig::loss(0.3, 5), 4, 4_000_000, 8, 16370);
    assert!(lost > 500, "too few drops to judge: {lost}");
    assert!(s.statuses > 0 && s.retransmissions > 0, "{s:?}");
}
