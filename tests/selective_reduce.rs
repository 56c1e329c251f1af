//! Selective reduce live: a coordinator running the policy launches each
//! group as a job of its own on an emulator that drops 2% of packets each
//! way; six workers (three declaring 10 Gbit/s, three 1 Gbit/s) compute
//! for uneven times and synchronise through it. Every launch is checked:
//! its members hold the same bits afterwards, equal to the mean of their
//! models before (within a stated bound), and the groups follow the policy
//! (size, the periodic full all-reduce, partial reduce's arrival order).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use inagg_emu::FaultConfig;
use inagg_host_agent::AgentConfig;
use inagg_policy::selective_reduce::{
    Assignment, Coordinator, CoordinatorConfig, GroupWorker, Policy, Report,
};
use inagg_sched::selective_reduce::{Params, Progress};
use inagg_switch_api::counters::DropReason;
use inagg_switch_control::target::Target;
use inagg_switch_control::EmuTarget;
use inagg_testbed::local::LocalCluster;

const N: usize = 6;
const LEN: usize = 700;
const ROUNDS: usize = 6;
const SLOTS: u32 = 8;
const K: u16 = 64;
const GBIT: f64 = 1e9 / 8.0;
/// |model - exact mean| allowed per element. One averaging quantizes
/// models of magnitude below 2 with a step of at most n 2^(E + c - 31),
/// c = ceil(log2 n) (4.5e-8 for n = 6) and rounds to f32 (1.2e-7 near 1); a member left out
/// or a wrong divisor is off by 1e-3 or more.
const BOUND: f64 = 1e-5;

fn bandwidth(w: usize) -> f64 {
    if w < 3 {
        10.0 * GBIT
    } else {
        GBIT
    }
}

/// Worker `w`'s compute time in round `r`: the slow-link workers also
/// compute longer, so groups form at uneven times.
fn compute(w: usize, r: usize) -> Duration {
    let jitter = ((w * 7 + r * 3) % 5) as u64;
    Duration::from_millis(if w < 3 { 2 + jitter } else { 8 + 2 * jitter })
}

fn step(w: usize, r: usize, i: usize) -> f32 {
    (((w * 131 + r * 17 + i * 7) % 23) as f32 / 23.0 - 0.5) * 0.02
}

fn initial(w: usize) -> Vec<f32> {
    (0..LEN)
        .map(|i| ((i + w * 11) as f32 * 0.01).sin())
        .collect()
}

fn config(policy: Policy) -> CoordinatorConfig {
    CoordinatorConfig {
        workers: N,
        policy,
        first_job: 100,
        pool_base: 0,
        slots: SLOTS,
        sub_pools: 4,
        elements: K,
        tick: Duration::from_millis(10),
    }
}

fn selective() -> Params {
    Params {
        p: 2,
        eta: 0.3,
        theta: 1.0,
        dt: 0.01,
        volume: 50e6,
        c: 4,
        progress: Progress::Paper,
    }
}

fn lossy() -> FaultConfig {
    FaultConfig {
        drop_ingress: 0.02,
        drop_egress: 0.02,
        seed: 7,
        ..FaultConfig::default()
    }
}

fn agent(switch: SocketAddr) -> AgentConfig {
    let mut c = AgentConfig::new(switch, 0, 0, 1, SLOTS, K);
    c.bind = SocketAddr::from(([127, 0, 0, 1], 0));
    c
}

/// One sync as a worker saw it: the group, its model before and after.
struct Sync {
    worker: usize,
    group: Assignment,
    before: Vec<f32>,
    after: Vec<f32>,
}

/// Runs the N workers for ROUNDS rounds through a coordinator with
/// `policy`; returns every sync and the coordinator's report.
fn train(cluster: &LocalCluster, policy: Policy) -> (Vec<Sync>, Report) {
    let target = EmuTarget::connect(cluster.control_addr()).unwrap();
    let coordinator = Coordinator::start(
        Box::new(target),
        "127.0.0.1:0".parse().unwrap(),
        config(policy),
    )
    .unwrap();
    let switch = cluster.emu.data_addr();
    let syncs = std::thread::scope(|s| {
        let handles: Vec<_> = (0..N)
            .map(|w| {
                let addr = coordinator.addr();
                s.spawn(move || {
                    let mut me = GroupWorker::connect(
                        addr,
                        agent(switch),
                        w,
                        bandwidth(w),
                        Duration::from_secs(30),
                    )
                    .unwrap();
                    let mut model = initial(w);
                    let mut syncs = Vec::new();
                    for r in 0..ROUNDS {
                        std::thread::sleep(compute(w, r));
                        for (i, x) in model.iter_mut().enumerate() {
                            *x += step(w, r, i);
                        }
                        let before = model.clone();
                        let group = me.sync(&mut model).unwrap();
                        syncs.push(Sync {
                            worker: w,
                            group,
                            before,
                            after: model.clone(),
                        });
                    }
                    syncs
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect::<Vec<_>>()
    });
    let report = coordinator.finish().unwrap();
    (syncs, report)
}

/// Every launch: the members that synced are its members, each holds the
/// same bits, equal to the mean of their models before within BOUND. The
/// report lists exactly these launches, all finished and whole.
fn check_arithmetic(syncs: &[Sync], report: &Report) {
    let mut by_launch: BTreeMap<u64, Vec<&Sync>> = BTreeMap::new();
    for s in syncs {
        by_launch.entry(s.group.launch).or_default().push(s);
    }
    for (launch, members) in &by_launch {
        let group = &members[0].group;
        let mut seen: Vec<usize> = members.iter().map(|s| s.worker).collect();
        seen.sort_unstable();
        let mut want = group.members.clone();
        want.sort_unstable();
        assert_eq!(seen, want, "launch {launch}: who synced");
        for s in members {
            assert_eq!(s.group.members, group.members, "launch {launch}");
            assert_eq!(
                usize::from(s.group.rank),
                group.members.iter().position(|&w| w == s.worker).unwrap()
            );
            assert!(
                s.after == members[0].after,
                "launch {launch}: worker {} holds other bits than worker {}",
                s.worker,
                members[0].worker
            );
        }
        for i in 0..LEN {
            let mean =
                members.iter().map(|s| f64::from(s.before[i])).sum::<f64>() / members.len() as f64;
            let got = f64::from(members[0].after[i]);
            assert!(
                (got - mean).abs() <= BOUND,
                "launch {launch} element {i}: {got} vs mean {mean}"
            );
        }
    }
    assert_eq!(report.unfinished, 0);
    let launched: Vec<u64> = report.launches.iter().map(|l| l.launch).collect();
    assert_eq!(
        launched
            .iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        by_launch.keys().copied().collect(),
        "the report's launches are the synced ones"
    );
    for l in &report.launches {
        assert!(l.ok, "launch {} failed", l.launch);
        assert_eq!(&l.members, &by_launch[&l.launch][0].group.members);
    }
    assert_eq!(syncs.len(), N * ROUNDS);
}

fn check_cleanup_and_loss(cluster: &LocalCluster) {
    let mut target = EmuTarget::connect(cluster.control_addr()).unwrap();
    assert!(
        target.jobs().unwrap().is_empty(),
        "group jobs left installed"
    );
    let counters = target.counters().unwrap();
    assert!(
        counters.dropped(DropReason::InjectedIngress) > 0
            && counters.dropped(DropReason::InjectedEgress) > 0,
        "no loss was injected: {counters:?}"
    );
}

#[test]
fn selective_reduce_groups_average_exactly_under_loss() {
    let cluster = LocalCluster::start(lossy()).unwrap();
    let params = selective();
    let (syncs, report) = train(&cluster, Policy::Selective(params));
    check_arithmetic(&syncs, &report);
    let mut launches = report.launches.clone();
    launches.sort_by_key(|l| l.launch);
    // k = 0 is a full turn: the first launch waits for all n.
    assert_eq!(launches[0].members.len(), N, "{:?}", launches[0]);
    assert!(launches[0].full);
    for l in &launches {
        for w in &l.members {
            assert!(
                l.waiting.contains(w),
                "launch {}: {w} was not ready",
                l.launch
            );
        }
        // Every c-th step of the controller (k counts them) is the full
        // all-reduce while all n are live; any other holds at least p.
        // (Launch numbers are not steps: groups cut to the free
        // sub-pools, or launched when the controller chose nobody, part
        // them on a loaded machine.)
        if l.turn.is_some_and(|k| k % params.c == 0) && l.alive == N {
            assert_eq!(
                l.members.len(),
                N,
                "launch {} (step {:?}) is a full turn",
                l.launch,
                l.turn
            );
        } else if l.alive >= params.p {
            assert!(l.members.len() >= params.p, "launch {}: {:?}", l.launch, l);
        }
    }
    assert!(
        launches.iter().any(|l| !l.full),
        "no partial group ever launched"
    );
    check_cleanup_and_loss(&cluster);
}

#[test]
fn partial_reduce_takes_the_first_p_in_arrival_order() {
    let cluster = LocalCluster::start(lossy()).unwrap();
    let p = 3;
    let (syncs, report) = train(&cluster, Policy::Partial { p });
    check_arithmetic(&syncs, &report);
    for l in &report.launches {
        if l.alive >= p {
            assert_eq!(l.members, l.waiting[..p].to_vec(), "{l:?}");
        } else {
            // Fewer than p live: the ones left go together.
            assert_eq!(l.members.len(), l.alive, "{l:?}");
        }
    }
    check_cleanup_and_loss(&cluster);
}

#[test]
fn all_reduce_waits_for_every_live_worker() {
    let cluster = LocalCluster::start(lossy()).unwrap();
    let (syncs, report) = train(&cluster, Policy::AllReduce);
    check_arithmetic(&syncs, &report);
    assert_eq!(report.launches.len(), ROUNDS);
    for l in &report.launches {
        assert_eq!(l.members.len(), N, "{l:?}");
    }
    check_cleanup_and_loss(&cluster);
}

#[test]
fn bad_configs_and_bad_workers_are_refused() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let start = |c: CoordinatorConfig| {
        let target = EmuTarget::connect(cluster.control_addr()).unwrap();
        Coordinator::start(Box::new(target), "127.0.0.1:0".parse().unwrap(), c)
    };
    let err = |c| start(c).err().expect("refused").to_string();
    let too_many = CoordinatorConfig {
        slots: 1 << 24,
        ..config(Policy::AllReduce)
    };
    assert!(err(too_many).contains("beyond the switch's"));
    let big_p = config(Policy::Partial { p: N + 1 });
    assert!(err(big_p).contains("group size p = 7"));

    let coordinator = start(config(Policy::AllReduce)).unwrap();
    let switch = cluster.emu.data_addr();
    let refusal = |id: usize, a: AgentConfig| {
        let mut w =
            GroupWorker::connect(coordinator.addr(), a, id, GBIT, Duration::from_secs(5)).unwrap();
        let mut model = vec![0.0f32; 10];
        w.sync(&mut model).expect_err("refused").to_string()
    };
    let e = refusal(N, agent(switch));
    assert!(e.contains("this job has workers 0 to 5"), "{e}");
    let mut other_k = agent(switch);
    other_k.elements = 32;
    let e = refusal(0, other_k);
    assert!(e.contains("K = 32"), "{e}");
    drop(coordinator);
}

/// A worker that leaves and comes back counts again: the all-reduce after
/// its return waits for all n. Worker 2 reconnects and is ready first,
/// worker 0 100 ms later, worker 1 200 ms later; counting worker 2 as gone
/// would launch [2, 0] without worker 1.
#[test]
fn a_worker_that_comes_back_is_waited_for_again() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let target = EmuTarget::connect(cluster.control_addr()).unwrap();
    let coordinator = Coordinator::start(
        Box::new(target),
        "127.0.0.1:0".parse().unwrap(),
        CoordinatorConfig {
            workers: 3,
            ..config(Policy::AllReduce)
        },
    )
    .unwrap();
    let switch = cluster.emu.data_addr();
    let connect = |w| {
        GroupWorker::connect(
            coordinator.addr(),
            agent(switch),
            w,
            GBIT,
            Duration::from_secs(30),
        )
        .unwrap()
    };
    let mut workers: Vec<GroupWorker> = (0..3).map(connect).collect();
    std::thread::scope(|s| {
        for w in workers.iter_mut() {
            s.spawn(move || w.sync(&mut [1.0; 10]).unwrap());
        }
    });
    drop(workers.pop());
    std::thread::sleep(Duration::from_millis(100));
    let mut back = connect(2);
    let groups: Vec<Assignment> = std::thread::scope(|s| {
        let mut handles = vec![s.spawn(move || back.sync(&mut [1.0; 10]).unwrap())];
        for w in workers.iter_mut() {
            std::thread::sleep(Duration::from_millis(100));
            handles.push(s.spawn(move || w.sync(&mut [1.0; 10]).unwrap()));
        }
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for g in &groups {
        assert_eq!(g.members.len(), 3, "{g:?}");
    }
}
