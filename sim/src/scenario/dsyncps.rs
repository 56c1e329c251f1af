//! dSyncPS (docs/PAPERS.md, "dSyncPS"; the paper's Section V, which has no
//! baseline): three parameter servers, workers joining two at a time, global
//! sync every T local rounds through shared storage, a server joining
//! mid-training, and worker-initiated load balancing from a 1/1/8 placement.
//!
//! The paper trains LeNet on Fashion-MNIST; the simulator trains a stand-in
//! with the same structure and a measurable convergence: each worker takes
//! a noisy gradient step on a quadratic (d = 20, gradient noise sigma = 1),
//! its primary server averages its workers every round (BSP), the servers
//! average every T rounds. Times: compute log-normal 200 ms (CV 0.2), a
//! 240 KB model over 1 Gbit/s server NICs with 1 ms RTT, global sync 50 ms
//! of shared-storage lock, write and read plus 5 ms per server.

use inagg_sched::dsyncps::{should_switch, GlobalSync};

use crate::dist::{self, Compute, SimRng};
use crate::report::{self, Claim, Report, Row};
use crate::svg::{Figure, Series};
use crate::Options;

const DIM: usize = 20;
const LR: f64 = 0.1;
const NOISE: f64 = 1.0;
const COMPUTE: Compute = Compute {
    name: "LeNet stand-in",
    mean: 0.2,
    cv: 0.2,
    tail_share: 0.0,
    tail_factor: 1.0,
};
const MODEL_BYTES: f64 = 240e3;
const RTT: f64 = 0.001;

/// Seconds of one local aggregation at a server with `workers` workers
/// (BSP: the slowest compute, then every worker's push and the server's
/// replies through its NIC).
fn local_round(workers: usize, rng: &mut SimRng) -> f64 {
    let slowest = (0..workers)
        .map(|_| COMPUTE.sample(rng))
        .fold(0.0, f64::max);
    slowest + 2.0 * workers as f64 * MODEL_BYTES / dist::gbps(1.0) + RTT
}

fn global_sync_time(servers: usize) -> f64 {
    0.050 + 0.005 * servers as f64
}

/// The loss of parameters `x` (the optimum is 0).
fn loss(x: &[f64]) -> f64 {
    0.5 * x.iter().map(|v| v * v).sum::<f64>()
}

/// Trains until the worst server's loss, averaged over the last 10 rounds,
/// is below `target`, with `t` and `per_server` workers; returns the
/// wall-clock seconds it took (the slowest server's clock) and the number
/// of global syncs. (A moving average: a single lucky round right after a
/// global sync is not convergence.)
pub fn converge(t: u32, per_server: &[usize], target: f64, rng: &mut SimRng) -> (f64, u64) {
    let servers = per_server.len();
    let mut params = vec![vec![5.0; DIM]; servers];
    let mut sync = GlobalSync::new(t, 0..servers as u32);
    let mut clock = 0.0;
    let mut recent: std::collections::VecDeque<f64> = std::collections::VecDeque::new();
    for _ in 0..100_000 {
        let mut round = 0.0f64;
        for (s, &w) in per_server.iter().enumerate() {
            // Local BSP: the server's workers step from its parameters.
            let mut avg = vec![0.0; DIM];
            for _ in 0..w {
                for (a, x) in avg.iter_mut().zip(&params[s]) {
                    *a += (x - LR * (x + NOISE * dist::normal(rng))) / w as f64;
                }
            }
            params[s] = avg;
            round = round.max(local_round(w, rng));
            sync.local_done(s as u32);
        }
        clock += round;
        if sync.all_ready() {
            let mean: Vec<f64> = (0..DIM)
                .map(|d| params.iter().map(|p| p[d]).sum::<f64>() / servers as f64)
                .collect();
            params.iter_mut().for_each(|p| p.clone_from(&mean));
            clock += global_sync_time(servers);
            sync.finish();
        }
        recent.push_back(params.iter().map(|p| loss(p)).fold(0.0, f64::max));
        if recent.len() > 10 {
            recent.pop_front();
        }
        if recent.len() == 10 && report::mean(recent.make_contiguous()) < target {
            break;
        }
    }
    (clock, sync.done)
}

/// Workers per server after `rounds` rounds of the load balancing rule from
/// `placement` (one worker reconsiders per round; load = workers on the
/// server, RTT drawn per worker-server pair in 1-3 ms).
pub fn balance(placement: &[usize], rounds: usize, rng: &mut SimRng) -> Vec<usize> {
    let mut home: Vec<usize> = placement
        .iter()
        .enumerate()
        .flat_map(|(s, &n)| std::iter::repeat_n(s, n))
        .collect();
    let rtt: Vec<Vec<f64>> = home
        .iter()
        .map(|_| {
            (0..placement.len())
                .map(|_| dist::uniform(rng, 0.001, 0.003))
                .collect()
        })
        .collect();
    for r in 0..rounds {
        let w = r % home.len().max(1);
        let load = |s: usize| home.iter().filter(|&&h| h == s).count() as f64;
        let current = load(home[w]) * rtt[w][home[w]];
        let best = (0..placement.len())
            .filter(|&s| s != home[w])
            .min_by(|&a, &b| {
                ((load(a) + 1.0) * rtt[w][a]).total_cmp(&((load(b) + 1.0) * rtt[w][b]))
            });
        if let Some(s) = best {
            if should_switch(current, (load(s) + 1.0) * rtt[w][s]) {
                home[w] = s;
            }
        }
    }
    (0..placement.len())
        .map(|s| home.iter().filter(|&&h| h == s).count())
        .collect()
}

/// Global syncs completed in `rounds` local rounds when a fourth server
/// joins at round `at` (T = 3): the advance/defer rule must never stall.
pub fn join_mid_training(rounds: u32, at: u32) -> (u64, usize) {
    let mut sync = GlobalSync::new(3, 0..3);
    for r in 0..rounds {
        if r == at {
            sync.join(3);
        }
        for s in sync.servers() {
            sync.local_done(s);
        }
        if sync.all_ready() {
            sync.finish();
        }
    }
    (sync.done, sync.servers().len())
}

/// The reproduction.
pub fn reproduce(opts: &Options) -> Report {
    let trials = |f: &dyn Fn(&mut SimRng) -> f64| -> f64 {
        let xs: Vec<f64> = (0..opts.trials)
            .map(|t| f(&mut dist::rng(opts.seed ^ 0xd5, t)))
            .collect();
        report::median(&xs)
    };
    let target = 0.1;
    let t1 = trials(&|r| converge(1, &[4, 4, 4], target, r).0);
    let t3 = trials(&|r| converge(3, &[4, 4, 4], target, r).0);
    let sizes: Vec<usize> = (3..=13).step_by(2).collect();
    let local: Vec<(f64, f64)> = sizes
        .iter()
        .map(|&w| {
            (
                w as f64,
                trials(&|r| (0..50).map(|_| local_round(w.div_ceil(3), r)).sum::<f64>() / 50.0)
                    * 1e3,
            )
        })
        .collect();
    let global: Vec<(f64, f64)> = sizes
        .iter()
        .map(|&w| (w as f64, global_sync_time(3) * 1e3))
        .collect();
    let spread_after = trials(&|r| {
        let b = balance(&[1, 1, 8], 60, r);
        (*b.iter().max().unwrap_or(&0) - *b.iter().min().unwrap_or(&0)) as f64
    });
    let (syncs, servers) = join_mid_training(30, 4);
    let rows = vec![
        Row::new(
            "convergence time, T=1 / T=3",
            "~0.5",
            t1 / t3,
            Claim::Below(1.0),
        ),
        Row::new(
            "local aggregation time, 13 / 3 workers",
            "grows slightly",
            local[local.len() - 1].1 / local[0].1,
            Claim::Within(1.0, 1.5),
        ),
        Row::new(
            "workers per server, max - min, after 60 rounds from 1/1/8",
            "evens out (from 7)",
            spread_after,
            Claim::Below(3.0),
        ),
        Row::new(
            "global syncs in 30 rounds, a server joining at round 4 (T=3)",
            "no stall (>= 10)",
            syncs as f64,
            Claim::Above(9.0),
        ),
        Row::new(
            "servers in the table after the join",
            "4",
            servers as f64,
            Claim::Within(4.0, 4.0),
        ),
    ];
    Report {
        paper: "dsyncps".into(),
        setup: format!(
            "3 servers, quadratic stand-in for LeNet (d = 20, sigma = 1, lr 0.1, target loss {target}), compute 200 ms (CV 0.2), 240 KB over 1 Gbit/s, {} trials (medians)",
            opts.trials
        ),
        rows,
        figures: vec![Figure {
            file: "dsyncps-sync-times.svg".into(),
            title: "dSyncPS: sync times as workers join (3 servers)".into(),
            x_label: "workers".into(),
            y_label: "ms".into(),
            series: vec![
                Series { name: "local aggregation".into(), points: local },
                Series { name: "global sync".into(), points: global },
            ],
        }],
        notes: Vec::new(),
    }
}
