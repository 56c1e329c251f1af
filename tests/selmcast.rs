//! SELMCAST live: a manager picks each sender's receivers every BSP round
//! and installs them as multicast groups on an emulator that drops 3% of
//! packets each way; five peers multicast their updates through the groups
//! and repair losses on request. Every receiver must end each round with
//! exactly the updates of the senders that picked it, bit for bit, and the
//! selections must keep the policy's rules (at least p receivers, every
//! pair served once every k + 1 rounds).

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use inagg::local::LocalCluster;
use inagg::selmcast::{Exchange, Manager, ManagerConfig, Peer, PeerTimers, Report, Selector};
use inagg_emu::counters::DropReason;
use inagg_emu::FaultConfig;
use inagg_switch_control::target::Target;
use inagg_switch_control::EmuTarget;

const N: usize = 5;
const P: usize = 2;
const K: u32 = 2;
const ROUNDS: usize = 5;
const LEN: usize = 1000;
const GBIT: f64 = 1e9 / 8.0;

fn config(selector: Selector) -> ManagerConfig {
    ManagerConfig {
        workers: N,
        p: P,
        k: K,
        selector,
        first_group: 40,
        elements: 64,
    }
}

/// Uneven receive bandwidths, so SELMCAST has loads to balance.
fn downlink(w: usize) -> f64 {
    [1.0, 1.0, 2.0, 4.0, 8.0][w] * GBIT
}

fn update(w: usize, r: usize) -> Vec<f32> {
    (0..LEN)
        .map(|i| ((w * 1000 + r * 100 + i) as f32 * 0.37).sin() * (1 + w) as f32)
        .collect()
}

fn lossy() -> FaultConfig {
    FaultConfig {
        drop_ingress: 0.03,
        drop_egress: 0.03,
        seed: 11,
        ..FaultConfig::default()
    }
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn start(cluster: &LocalCluster, selector: Selector) -> Manager {
    let target = EmuTarget::connect(cluster.control_addr()).unwrap();
    Manager::start(Box::new(target), loopback(), config(selector)).unwrap()
}

fn peer(manager: &Manager, cluster: &LocalCluster, w: usize, timers: PeerTimers) -> Peer {
    Peer::connect(
        manager.addr(),
        cluster.emu.data_addr(),
        loopback(),
        (w, 2.0 * GBIT, downlink(w)),
        timers,
    )
    .unwrap()
}

/// Each peer's exchanges, by peer then round.
fn run(cluster: &LocalCluster, manager: &Manager) -> Vec<Vec<Exchange>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|w| {
                s.spawn(move || {
                    let mut me = peer(manager, cluster, w, PeerTimers::default());
                    (0..ROUNDS)
                        .map(|r| me.exchange(&update(w, r)).unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn check(exchanges: &[Vec<Exchange>], report: &Report) {
    assert_eq!(report.broken, None);
    assert_eq!(report.rounds.len(), ROUNDS);
    for r in 0..ROUNDS {
        let receivers: Vec<Vec<usize>> = (0..N)
            .map(|w| exchanges[w][r].plan.receivers.clone())
            .collect();
        assert_eq!(receivers, report.rounds[r].receivers, "round {r}");
        for (i, rs) in receivers.iter().enumerate() {
            assert!(rs.len() >= P, "round {r}: sender {i} reaches {rs:?}");
            assert!(!rs.contains(&i));
        }
        for (j, ex) in exchanges.iter().enumerate() {
            let ex = &ex[r];
            let want: BTreeSet<usize> = (0..N).filter(|&i| receivers[i].contains(&j)).collect();
            let got: BTreeSet<usize> = ex.received.keys().copied().collect();
            assert_eq!(got, want, "round {r}: what peer {j} received");
            for (&i, values) in &ex.received {
                let sent = update(i, r);
                assert!(
                    values
                        .iter()
                        .zip(&sent)
                        .all(|(a, b)| a.to_bits() == b.to_bits()),
                    "round {r}: peer {j} holds other bits than sender {i} sent"
                );
            }
        }
    }
    // Consistency: every pair served at least once in any k + 1 rounds.
    for i in 0..N {
        for j in (0..N).filter(|&j| j != i) {
            for start in 0..=ROUNDS - (K as usize + 1) {
                assert!(
                    (start..start + K as usize + 1)
                        .any(|r| report.rounds[r].receivers[i].contains(&j)),
                    "pair ({i}, {j}) unserved in rounds {start}..={}",
                    start + K as usize
                );
            }
        }
    }
}

fn check_repairs_and_cleanup(cluster: &LocalCluster, exchanges: &[Vec<Exchange>], report: &Report) {
    let repairs: u64 = report.rounds.iter().map(|r| r.repairs).sum();
    let resent: u64 = exchanges.iter().flatten().map(|e| e.resent).sum();
    assert!(
        repairs > 0 && resent > 0,
        "no loss repaired: {repairs} / {resent}"
    );
    let mut target = EmuTarget::connect(cluster.control_addr()).unwrap();
    assert!(target.groups().unwrap().is_empty(), "groups left installed");
    let c = target.counters().unwrap();
    assert!(
        c.dropped(DropReason::InjectedIngress) > 0 && c.dropped(DropReason::InjectedEgress) > 0
    );
}

#[test]
fn selmcast_delivers_every_selected_update_bit_for_bit_under_loss() {
    let cluster = LocalCluster::start(lossy()).unwrap();
    let manager = start(&cluster, Selector::Selmcast);
    let exchanges = run(&cluster, &manager);
    let report = manager.finish().unwrap();
    check(&exchanges, &report);
    check_repairs_and_cleanup(&cluster, &exchanges, &report);
}

#[test]
fn orpheus_runs_on_the_same_stack() {
    let cluster = LocalCluster::start(lossy()).unwrap();
    let manager = start(&cluster, Selector::Orpheus { seed: 3 });
    let exchanges = run(&cluster, &manager);
    let report = manager.finish().unwrap();
    check(&exchanges, &report);
    check_repairs_and_cleanup(&cluster, &exchanges, &report);
}

#[test]
fn a_peer_that_leaves_ends_the_run_with_an_error_for_the_others() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let manager = start(&cluster, Selector::Selmcast);
    let errors = std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|w| {
                let (manager, cluster) = (&manager, &cluster);
                s.spawn(move || {
                    let mut me = peer(manager, cluster, w, PeerTimers::default());
                    me.exchange(&update(w, 0)).unwrap();
                    if w == 4 {
                        return None; // leaves after round 0
                    }
                    Some(me.exchange(&update(w, 1)).unwrap_err().to_string())
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    assert_eq!(errors.len(), N - 1);
    for e in errors {
        assert!(e.contains("peer 4 left"), "{e}");
    }
    let report = manager.finish().unwrap();
    assert_eq!(report.rounds.len(), 1);
}

#[test]
fn bad_configs_and_bad_peers_are_refused() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let start_with = |c: ManagerConfig| {
        let target = EmuTarget::connect(cluster.control_addr()).unwrap();
        Manager::start(Box::new(target), loopback(), c)
    };
    let err = |c| start_with(c).err().expect("refused").to_string();
    assert!(err(ManagerConfig {
        p: N,
        ..config(Selector::Selmcast)
    })
    .contains("p = 5 receivers must be 1 to n - 1 = 4"));
    assert!(err(ManagerConfig {
        first_group: 0,
        ..config(Selector::Selmcast)
    })
    .contains("must be 1 to 65535"));

    let manager = start_with(config(Selector::Selmcast)).unwrap();
    let timers = PeerTimers {
        plan_wait: Duration::from_secs(2),
        ..PeerTimers::default()
    };
    let mut stranger = peer(&manager, &cluster, 0, timers);
    let mut bad = Peer::connect(
        manager.addr(),
        cluster.emu.data_addr(),
        loopback(),
        (N, GBIT, GBIT),
        timers,
    )
    .unwrap();
    let e = bad.exchange(&update(0, 0)).unwrap_err().to_string();
    assert!(e.contains("this run has peers 0..5"), "{e}");
    // Alone, peer 0 waits for the others and gives up with a clear error.
    let e = stranger.exchange(&update(0, 0)).unwrap_err().to_string();
    assert!(e.contains("no plan within"), "{e}");
}
