//! dSyncPS's two-tier aggregation across switches, end to end: two rack
//! switches and a spine switch (three emulators, each dropping 2% of
//! packets each way), racks of 3 and 2 workers, a global sync every T = 3
//! rounds. Each worker takes its own deterministic step every round; the
//! test replays the same training in f64 and checks every worker's model
//! against it, and checks which workers hold the same bits when.

use inagg_emu::FaultConfig;
use inagg_host_agent::Worker;
use inagg_policy::dsyncps::{RoundKind, TwoTier};
use inagg_switch_api::counters::DropReason;
use inagg_testbed::local::{JobParams, LocalCluster};

const LEN: usize = 1000;
const T: u32 = 3;
const ROUNDS: usize = 8;
const RACKS: [u16; 2] = [3, 2];
/// |model - exact| allowed per element. Each round quantizes the deltas
/// (a step of at most n 2^(E + c - 31), c = ceil(log2 n), about 1e-8 here: the deltas
/// stay below 1) and rounds to f32 (6e-8 relative on weights near 1); over
/// 8 rounds that stays below 1e-6. A wrong divisor or a lost rack is off by
/// 1e-3 or more.
const BOUND: f64 = 1e-5;

fn lossy(seed: u64) -> FaultConfig {
    FaultConfig {
        drop_ingress: 0.02,
        drop_egress: 0.02,
        seed,
        ..FaultConfig::default()
    }
}

fn params(id: u16, workers: u16) -> JobParams {
    JobParams {
        id,
        workers,
        pool_base: u32::from(id) * 8,
        pool_size: 8,
        elements: 64,
    }
}

/// Worker `w`'s (global index) step in round `r`: deterministic, different
/// for every worker, round and element, of size up to 0.01.
fn step(w: usize, r: usize, i: usize) -> f32 {
    (((w * 131 + r * 17 + i * 7) % 23) as f32 / 23.0 - 0.5) * 0.02
}

fn initial() -> Vec<f32> {
    (0..LEN).map(|i| (i as f32 * 0.01).sin()).collect()
}

/// The same training in f64: local means every round, the mean over all
/// workers every T rounds. Returns each worker's model after each round.
fn replay() -> Vec<Vec<Vec<f64>>> {
    let n: usize = RACKS.iter().map(|&r| usize::from(r)).sum();
    let racks: Vec<Vec<usize>> = {
        let mut first = 0;
        RACKS
            .iter()
            .map(|&r| {
                let ws = (first..first + usize::from(r)).collect();
                first += usize::from(r);
                ws
            })
            .collect()
    };
    let mut models: Vec<Vec<f64>> = vec![initial().iter().map(|&x| f64::from(x)).collect(); n];
    let mut history = Vec::new();
    for r in 0..ROUNDS {
        for (w, m) in models.iter_mut().enumerate() {
            for (i, x) in m.iter_mut().enumerate() {
                *x += f64::from(step(w, r, i));
            }
        }
        let groups = if (r + 1) % T as usize == 0 {
            vec![(0..n).collect::<Vec<_>>()]
        } else {
            racks.clone()
        };
        for g in groups {
            let mean: Vec<f64> = (0..LEN)
                .map(|i| g.iter().map(|&w| models[w][i]).sum::<f64>() / g.len() as f64)
                .collect();
            for &w in &g {
                models[w].clone_from(&mean);
            }
        }
        history.push(models.clone());
    }
    history
}

/// Each worker's (kind, model) after each round.
type Trace = Vec<(RoundKind, Vec<f32>)>;

#[test]
fn racks_average_every_round_and_the_spine_every_t_rounds_under_loss() {
    let racks: Vec<LocalCluster> = (0..RACKS.len())
        .map(|r| LocalCluster::start(lossy(10 + r as u64)).unwrap())
        .collect();
    let spine = LocalCluster::start(lossy(20)).unwrap();
    let mut leaders = spine
        .job(params(7, RACKS.len() as u16), |_| {})
        .unwrap()
        .into_iter();
    let total: u32 = RACKS.iter().map(|&r| u32::from(r)).sum();
    let mut agents: Vec<TwoTier> = Vec::new();
    for (cluster, &size) in racks.iter().zip(&RACKS) {
        for (w, local) in cluster
            .job(params(1, size), |_| {})
            .unwrap()
            .into_iter()
            .enumerate()
        {
            let global = if w == 0 { leaders.next() } else { None };
            agents.push(TwoTier::new(local, global, total, T, &initial()).unwrap());
        }
    }
    let traces: Vec<Trace> = std::thread::scope(|s| {
        let handles: Vec<_> = agents
            .iter_mut()
            .enumerate()
            .map(|(w, agent)| {
                s.spawn(move || {
                    let mut model = initial();
                    let mut trace = Vec::new();
                    for r in 0..ROUNDS {
                        for (i, x) in model.iter_mut().enumerate() {
                            *x += step(w, r, i);
                        }
                        let kind = agent.round(&mut model).unwrap();
                        trace.push((kind, model.clone()));
                    }
                    trace
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });

    let exact = replay();
    let rack_of = |w: usize| usize::from(w >= usize::from(RACKS[0]));
    for r in 0..ROUNDS {
        let global = (r + 1) % T as usize == 0;
        for (w, trace) in traces.iter().enumerate() {
            let (kind, model) = &trace[r];
            let want = if global {
                RoundKind::Global
            } else {
                RoundKind::Local
            };
            assert_eq!(*kind, want, "worker {w} round {r}");
            for (i, (&got, &x)) in model.iter().zip(&exact[r][w]).enumerate() {
                assert!(
                    (f64::from(got) - x).abs() <= BOUND,
                    "worker {w} round {r} element {i}: {got} vs exact {x}"
                );
            }
            // Every worker of a rack holds its rack's leader's bits; after a
            // global sync, every worker holds the first rack's.
            let leader = if global || rack_of(w) == 0 {
                0
            } else {
                usize::from(RACKS[0])
            };
            assert!(
                traces[leader][r].1 == *model,
                "round {r}: worker {w} differs from worker {leader}"
            );
        }
        if !global {
            assert!(
                traces[0][r].1 != traces[usize::from(RACKS[0])][r].1,
                "round {r}: the racks agree without a global sync"
            );
        }
    }
    for a in &agents {
        assert_eq!(a.syncs(), (ROUNDS / T as usize) as u64);
    }
    for c in racks.iter().chain([&spine]) {
        let counters = c.emu.state().switch.counters().clone();
        assert!(
            counters.dropped(DropReason::InjectedIngress) > 0
                || counters.dropped(DropReason::InjectedEgress) > 0,
            "no loss was injected: {counters:?}"
        );
    }
}

#[test]
fn misuse_is_an_error_not_a_hang() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let mut workers = cluster.job(params(1, 2), |_| {}).unwrap().into_iter();
    let spine = LocalCluster::start(FaultConfig::default()).unwrap();
    let mut spines = spine.job(params(2, 2), |_| {}).unwrap().into_iter();
    let leader = workers.next().unwrap();
    let other = workers.next().unwrap();
    let err = |r: anyhow::Result<TwoTier>| r.err().expect("an error").to_string();

    let e = err(TwoTier::new(other, spines.next(), 4, T, &[0.0; 4]));
    assert!(e.contains("worker 0 (the leader) only"), "{e}");
    let e = err(TwoTier::new(leader, None, 4, T, &[0.0; 4]));
    assert!(e.contains("worker 0 (the leader) only"), "{e}");

    let mut workers = cluster.job(params(3, 1), |_| {}).unwrap();
    let single: Worker = workers.remove(0);
    let e = err(TwoTier::new(single, spines.next(), 0, T, &[0.0; 4]));
    assert!(e.contains("fewer than this rack's 1"), "{e}");

    let mut workers = cluster.job(params(4, 1), |_| {}).unwrap();
    let mut spine1 = spine.job(params(5, 1), |_| {}).unwrap();
    let mut agent =
        TwoTier::new(workers.remove(0), Some(spine1.remove(0)), 1, T, &[0.0; 4]).unwrap();
    let e = agent.round(&mut [0.0; 5]).unwrap_err().to_string();
    assert!(
        e.contains("a model of 5 parameters; this job's has 4"),
        "{e}"
    );
    // A one-worker rack and spine: every round completes, the third global.
    let kinds: Vec<RoundKind> = (0..3)
        .map(|_| agent.round(&mut [1.0, 2.0, 3.0, 4.0]).unwrap())
        .collect();
    assert_eq!(
        kinds,
        [RoundKind::Local, RoundKind::Local, RoundKind::Global]
    );
}

/// One worker's round as it saw it: the kind, its model before the sync
/// (after its step) and after.
type Seen = (RoundKind, Vec<f32>, Vec<f32>);

/// Racks joining and leaving mid-training, paced by the spine manager:
/// racks 0 and 1 (2 workers each) from the start, rack 2 (1 worker,
/// starting from a model of its own) joining after rack 0's third round,
/// rack 1 leaving after its seventh; T = 2; every switch drops 2% each way.
/// Every local round must give the rack's mean, every sync the mean over
/// the racks the manager says were in it and not fresh, the same bits on
/// every worker in it.
#[test]
fn racks_join_and_leave_mid_training_through_the_spine_manager() {
    use inagg_host_agent::AgentConfig;
    use inagg_policy::dsyncps::spine::{SpineConfig, SpineLink, SpineManager};
    use inagg_switch_control::EmuTarget;
    use std::sync::mpsc;
    use std::time::Duration;

    const SIZES: [u16; 3] = [2, 2, 1];
    const ROUNDS: [usize; 3] = [10, 7, 6];
    let spine = LocalCluster::start(lossy(30)).unwrap();
    let racks: Vec<LocalCluster> = (0..3)
        .map(|r| LocalCluster::start(lossy(31 + r as u64)).unwrap())
        .collect();
    let manager = SpineManager::start(
        Box::new(EmuTarget::connect(spine.control_addr()).unwrap()),
        "127.0.0.1:0".parse().unwrap(),
        SpineConfig {
            t: 2,
            initial: vec![0, 1],
            job: 7,
            pool_base: 0,
            pool_size: 8,
            elements: 64,
        },
    )
    .unwrap();
    let start_of = |rack: usize| -> Vec<f32> {
        let shift = if rack == 2 { 0.5 } else { 0.0 };
        initial().iter().map(|x| x + shift).collect()
    };
    // Global worker index of rack r's worker w.
    let global = |r: usize, w: usize| SIZES[..r].iter().map(|&s| usize::from(s)).sum::<usize>() + w;
    let (joined_tx, joined_rx) = mpsc::channel::<()>();
    let joined_rx = std::sync::Mutex::new(Some(joined_rx));
    let joined_tx = std::sync::Mutex::new(Some(joined_tx));

    let traces: Vec<Vec<Vec<Seen>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..3)
            .map(|r| {
                let workers = racks[r].job(params(1, SIZES[r]), |_| {}).unwrap();
                let manager = manager.addr();
                let spine_data = spine.emu.data_addr();
                let joined_rx = (r == 2).then(|| joined_rx.lock().unwrap().take().unwrap());
                let joined_tx = (r == 0).then(|| joined_tx.lock().unwrap().take().unwrap());
                s.spawn(move || {
                    if let Some(rx) = joined_rx {
                        rx.recv().unwrap(); // rack 0 is three rounds in
                    }
                    let mut agents: Vec<TwoTier> = Vec::new();
                    for (w, local) in workers.into_iter().enumerate() {
                        let leader = (w == 0).then(|| {
                            let mut c = AgentConfig::new(spine_data, 7, 0, 1, 8, 64);
                            c.bind = "127.0.0.1:0".parse().unwrap();
                            let worker = inagg_host_agent::Worker::new(c).unwrap();
                            let (link, _) = SpineLink::join(
                                manager,
                                r as u32,
                                SIZES[r],
                                worker.local_addr(),
                                Duration::from_secs(60),
                            )
                            .unwrap();
                            (worker, link)
                        });
                        agents.push(TwoTier::managed(local, leader, &start_of(r)).unwrap());
                    }
                    let joined_tx = &joined_tx;
                    let seen: Vec<Vec<Seen>> = std::thread::scope(|s2| {
                        let hs: Vec<_> = agents
                            .iter_mut()
                            .enumerate()
                            .map(|(w, agent)| {
                                s2.spawn(move || {
                                    let mut model = start_of(r);
                                    let mut seen = Vec::new();
                                    for round in 0..ROUNDS[r] {
                                        for (i, x) in model.iter_mut().enumerate() {
                                            *x += step(global(r, w), round, i);
                                        }
                                        let before = model.clone();
                                        let kind = agent.round(&mut model).unwrap();
                                        seen.push((kind, before, model.clone()));
                                        if w == 0 && round == 2 {
                                            if let Some(tx) = joined_tx {
                                                tx.send(()).unwrap();
                                            }
                                        }
                                    }
                                    seen
                                })
                            })
                            .collect();
                        hs.into_iter().map(|h| h.join().unwrap()).collect()
                    });
                    for agent in agents {
                        agent.leave().unwrap();
                    }
                    seen
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let report = manager.finish().unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert_eq!(report.joins.len(), 1, "{report:?}");
    assert_eq!(report.joins[0].0, 2);

    let mean = |models: &[&Vec<f32>]| -> Vec<f64> {
        (0..LEN)
            .map(|i| models.iter().map(|m| f64::from(m[i])).sum::<f64>() / models.len() as f64)
            .collect()
    };
    let close = |got: &[f32], want: &[f64], what: &str| {
        for (i, (&g, &x)) in got.iter().zip(want).enumerate() {
            assert!(
                (f64::from(g) - x).abs() <= BOUND,
                "{what} element {i}: {g} vs {x}"
            );
        }
    };
    // Local rounds: the rack's mean.
    for (r, rack) in traces.iter().enumerate() {
        for round in 0..ROUNDS[r] {
            if rack[0][round].0 == RoundKind::Local {
                let before: Vec<&Vec<f32>> = rack.iter().map(|w| &w[round].1).collect();
                let want = mean(&before);
                for (w, t) in rack.iter().enumerate() {
                    assert_eq!(
                        t[round].0,
                        RoundKind::Local,
                        "rack {r} worker {w} round {round}"
                    );
                    close(
                        &t[round].2,
                        &want,
                        &format!("rack {r} worker {w} round {round}"),
                    );
                }
            }
        }
    }
    // Global rounds: rack r's k-th global round is the k-th sync listing r.
    let globals = |r: usize| -> Vec<usize> {
        (0..ROUNDS[r])
            .filter(|&round| traces[r][0][round].0 == RoundKind::Global)
            .collect()
    };
    let mut next = [0usize; 3];
    for sync in &report.syncs {
        let mut counted: Vec<&Vec<f32>> = Vec::new();
        let mut after: Vec<(usize, usize, &Vec<f32>)> = Vec::new();
        for &rack in &sync.racks {
            let r = rack as usize;
            let round = globals(r)[next[r]];
            next[r] += 1;
            for (w, t) in traces[r].iter().enumerate() {
                assert_eq!(
                    t[round].0,
                    RoundKind::Global,
                    "rack {r} worker {w} round {round}"
                );
                if !sync.fresh.contains(&rack) {
                    counted.push(&t[round].1);
                }
                after.push((r, w, &t[round].2));
            }
        }
        assert_eq!(counted.len() as u32, sync.total, "sync {}", sync.sync);
        let want = mean(&counted);
        for &(r, w, model) in &after {
            close(
                model,
                &want,
                &format!("sync {} rack {r} worker {w}", sync.sync),
            );
            assert!(
                model == after[0].2,
                "sync {}: rack {r} worker {w} differs",
                sync.sync
            );
        }
    }
    for (r, &listed) in next.iter().enumerate() {
        assert_eq!(
            listed,
            globals(r).len(),
            "rack {r}: global rounds the report does not list"
        );
    }
    // Rack 2's first sync was fresh; rack 1 is in none after it left; the
    // spine job changed generation with its racks.
    let first2 = report.syncs.iter().find(|s| s.racks.contains(&2)).unwrap();
    assert_eq!(first2.fresh, vec![2], "{report:?}");
    assert_eq!(report.leaves.iter().filter(|l| l.0 == 1).count(), 1);
    let last = report.syncs.last().unwrap();
    assert!(!last.racks.contains(&1), "{report:?}");
    for pair in report.syncs.windows(2) {
        let changed = pair[0].racks != pair[1].racks;
        assert_eq!(
            pair[1].generation != pair[0].generation,
            changed,
            "{:?} -> {:?}",
            pair[0],
            pair[1]
        );
    }
    assert!(report.syncs.len() >= 4, "{report:?}");
}
