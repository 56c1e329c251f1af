//! FIFO vs P3 vs ByteScheduler vs Geryon over in-network aggregation
//! (survey section 4.4): one worker's port (the switch sums, so the worker
//! count does not change the traffic), VGG-19's layers, wait-free
//! back-propagation handing gradients over last layer first, and the next
//! forward pass waiting for each layer's sum.
//!
//! A slice is serialised on the port at the link rate and its sum is back
//! one RTT after it leaves; at most `credit` slices are in flight. P3's
//! stop-and-wait (credit 1) pays one RTT per slice, so the reproduction
//! also sweeps the RTT: at RTT 0 what is left is the ordering alone. Geryon's
//! packets are coarsened to 64 KB for speed (the preemption delay they add,
//! 64 KB at 10 Gbit/s = 52 us, is far below a layer's time).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use inagg_sched::priority::{Policy, Slice};

use crate::dist;
use crate::report::{Claim, Report, Row};
use crate::svg::{Figure, Series};
use crate::Options;

/// VGG-19's parameter counts, first layer first (16 conv, 3 fully connected).
pub const VGG19: [f64; 19] = [
    1728.0,
    36864.0,
    73728.0,
    147456.0,
    294912.0,
    589824.0,
    589824.0,
    589824.0,
    1179648.0,
    2359296.0,
    2359296.0,
    2359296.0,
    2359296.0,
    2359296.0,
    2359296.0,
    2359296.0,
    102760448.0,
    16777216.0,
    4096000.0,
];
/// Stand-in compute per iteration on one V100 (batch 32): forward 40 ms,
/// backward 80 ms, spread evenly over the 16 conv layers, the fully
/// connected ones taking 1 ms each.
const FORWARD: f64 = 0.040;
const BACKWARD: f64 = 0.080;
/// The headline round trip: a kernel-socket host through one switch.
const RTT: f64 = 50e-6;
/// The RTT sweep (seconds), from an ideal network to the headline's.
const RTTS: [f64; 7] = [0.0, 2e-6, 5e-6, 10e-6, 20e-6, 30e-6, 50e-6];
const ITERATIONS: usize = 12;
/// The compute stand-in's multiples tried in the notes.
const COMPUTE_SCALES: [f64; 5] = [1.0, 1.5, 2.0, 2.5, 3.0];

fn layer_times(total: f64) -> Vec<f64> {
    VGG19
        .iter()
        .enumerate()
        .map(|(l, _)| {
            if l >= 16 {
                0.001
            } else {
                (total - 0.003) / 16.0
            }
        })
        .collect()
}

/// The policies compared, with the knobs from the papers (P3's best slice
/// of 50 000 parameters; ByteScheduler's credit 4; Geryon's threshold 0.6).
pub fn policies() -> [(&'static str, Policy); 4] {
    [
        ("FIFO", Policy::Fifo),
        ("P3", Policy::P3 { slice: 200e3 }),
        (
            "ByteScheduler",
            Policy::ByteScheduler {
                slice: 200e3,
                credit: 4,
            },
        ),
        (
            "Geryon",
            Policy::Geryon {
                packet: 64e3,
                thresholds: vec![0.6],
            },
        ),
    ]
}

/// One iteration's communication: slices become ready at `produced[l]`;
/// returns when each layer's last sum is back.
fn communicate(policy: &Policy, produced: &[f64], rate: f64, rtt: f64) -> Vec<f64> {
    let layers = produced.len();
    let mut arrivals: Vec<(f64, Slice)> = Vec::new();
    let mut seq = 0;
    // Production order: last layer first.
    for l in (0..layers).rev() {
        for bytes in policy.cut(VGG19[l] * 4.0) {
            arrivals.push((
                produced[l],
                Slice {
                    layer: l,
                    seq,
                    bytes,
                },
            ));
            seq += 1;
        }
    }
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.seq.cmp(&b.1.seq)));
    let mut left: Vec<usize> = vec![0; layers];
    arrivals.iter().for_each(|(_, s)| left[s.layer] += 1);
    let mut done = vec![0.0f64; layers];
    // Pending slices by the policy's key (a heap: Geryon has thousands).
    let mut pending: BinaryHeap<Reverse<((u64, u64), usize)>> = BinaryHeap::new();
    let mut in_flight: VecDeque<f64> = VecDeque::new(); // sums' return times, in order
    let (mut now, mut link_free, mut next) = (0.0f64, 0.0f64, 0usize);
    let credit = policy.credit();
    while next < arrivals.len() || !pending.is_empty() {
        while next < arrivals.len() && arrivals[next].0 <= now {
            pending.push(Reverse((policy.key(&arrivals[next].1, layers), next)));
            next += 1;
        }
        while in_flight.front().is_some_and(|&t| t <= now) {
            in_flight.pop_front();
        }
        let can_send = link_free <= now && in_flight.len() < credit;
        if let (true, Some(&Reverse((_, i)))) = (can_send, pending.peek()) {
            pending.pop();
            let s = arrivals[i].1;
            link_free = now + s.bytes / rate;
            let back = link_free + rtt;
            in_flight.push_back(back);
            done[s.layer] = done[s.layer].max(back);
            continue;
        }
        // Wait for the next thing that can unblock a send.
        let mut wake = f64::INFINITY;
        if next < arrivals.len() {
            wake = wake.min(arrivals[next].0);
        }
        if link_free > now {
            wake = wake.min(link_free);
        }
        if in_flight.len() >= credit {
            wake = wake.min(in_flight.front().copied().unwrap_or(f64::INFINITY));
        }
        if !wake.is_finite() {
            break;
        }
        now = wake.max(now);
    }
    done
}

/// Mean iteration time (after the first) of `policy` at `rate` bytes/s
/// with round trip `rtt` seconds.
pub fn iteration_time(policy: &Policy, rate: f64, rtt: f64) -> f64 {
    iteration_time_scaled(policy, rate, rtt, 1.0)
}

/// [`iteration_time`] with the compute stand-in (forward and backward)
/// multiplied by `compute`: the stand-in is a guess at a V100's, and the
/// gain of ordering depends on how much of the communication
/// back-propagation hides.
pub fn iteration_time_scaled(policy: &Policy, rate: f64, rtt: f64, compute: f64) -> f64 {
    let fwd = layer_times(FORWARD * compute);
    let bwd = layer_times(BACKWARD * compute);
    let mut ready = vec![0.0f64; VGG19.len()]; // sums of the previous iteration
    let mut starts = Vec::new();
    let mut t = 0.0f64;
    for _ in 0..ITERATIONS {
        // Forward: layer l waits for its sum.
        for (l, f) in fwd.iter().enumerate() {
            if l == 0 {
                starts.push(t.max(ready[0]));
            }
            t = t.max(ready[l]) + f;
        }
        // Backward: last layer first; each gradient is handed over at once.
        let mut produced = vec![0.0; VGG19.len()];
        for l in (0..VGG19.len()).rev() {
            t += bwd[l];
            produced[l] = t;
        }
        ready = communicate(policy, &produced, rate, rtt);
    }
    (starts[starts.len() - 1] - starts[1]) / (starts.len() - 2) as f64
}

/// The reproduction: speed-ups over FIFO, the bandwidth and RTT sweeps,
/// scaling efficiency (compute time over iteration time).
pub fn reproduce(_opts: &Options) -> Report {
    let p = policies();
    let time_at = |i: usize, gbps: f64, rtt: f64| iteration_time(&p[i].1, dist::gbps(gbps), rtt);
    let time = |i: usize, gbps: f64| time_at(i, gbps, RTT);
    // How much faster policy `i` iterates than policy `base`.
    let speed_up = |i: usize, base: usize, gbps: f64, rtt: f64| {
        time_at(base, gbps, rtt) / time_at(i, gbps, rtt)
    };
    let p3_over_fifo = |gbps: f64, rtt: f64| speed_up(1, 0, gbps, rtt);
    let compute = FORWARD + BACKWARD;
    let ordering_30 = p3_over_fifo(30.0, 0.0);
    let ordering_15 = p3_over_fifo(15.0, 0.0);
    let rows = vec![
        Row::new(
            "P3 / FIFO speed-up, 30 Gbit/s",
            "1.49x (VGG-19, PS)",
            p3_over_fifo(30.0, RTT),
            Claim::Above(1.0),
        ),
        Row::new(
            "P3 / FIFO speed-up, 15 Gbit/s",
            "1.66x",
            p3_over_fifo(15.0, RTT),
            Claim::Above(1.0),
        ),
        Row::new(
            "P3 / FIFO at RTT 0 (ordering alone), 30 Gbit/s",
            "1.49x",
            ordering_30,
            Claim::Above(1.0),
        ),
        Row::new(
            "P3 / FIFO at RTT 0 (ordering alone), 15 Gbit/s",
            "1.66x",
            ordering_15,
            Claim::Above(1.0),
        ),
        Row::new(
            "P3 / FIFO at RTT 0, 15 over 30 Gbit/s",
            "grows (1.66 / 1.49 = 1.11)",
            ordering_15 / ordering_30,
            Claim::Above(1.0),
        ),
        Row::new(
            "ByteScheduler / P3 speed-up, 15 Gbit/s",
            "up to 1.43x",
            speed_up(2, 1, 15.0, RTT),
            Claim::Above(1.0),
        ),
        Row::new(
            "Geryon / FIFO speed-up, 10 Gbit/s",
            "> 1",
            speed_up(3, 0, 10.0, RTT),
            Claim::Above(1.0),
        ),
        Row::new(
            "Geryon scaling efficiency, 10 Gbit/s",
            "0.95",
            compute / time(3, 10.0),
            Claim::Above(0.95 / 2.0),
        ),
        Row::new(
            "FIFO scaling efficiency, 10 Gbit/s",
            "< 0.40",
            compute / time(0, 10.0),
            Claim::Below(0.6),
        ),
    ];
    let rates = [5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 100.0];
    let series = p
        .iter()
        .enumerate()
        .map(|(i, (name, _))| Series {
            name: (*name).into(),
            points: rates.iter().map(|&g| (g, time(i, g) * 1e3)).collect(),
        })
        .collect();
    let rtt_series = [(1, 30.0), (1, 15.0), (2, 30.0), (2, 15.0)]
        .into_iter()
        .map(|(i, gbps)| Series {
            name: format!("{} / FIFO, {gbps} Gbit/s", p[i].0),
            points: RTTS
                .iter()
                .map(|&rtt| (rtt * 1e6, speed_up(i, 0, gbps, rtt)))
                .collect(),
        })
        .collect();
    Report {
        paper: "priority".into(),
        setup: format!(
            "VGG-19 (143.7M parameters), forward {} ms + backward {} ms, RTT {} us, in-network aggregation (one send, one sum per slice), P3 slice 50k parameters, ByteScheduler credit 4, Geryon threshold 0.6 (2 classes); deterministic",
            FORWARD * 1e3,
            BACKWARD * 1e3,
            RTT * 1e6
        ),
        rows,
        figures: vec![Figure {
            file: "priority-iteration-time.svg".into(),
            title: "VGG-19 iteration time by policy over INA".into(),
            x_label: "link rate (Gbit/s)".into(),
            y_label: "iteration time (ms)".into(),
            series,
        },
        Figure {
            file: "priority-p3-rtt.svg".into(),
            title: "Speed-up over FIFO against the round trip (VGG-19 over INA)".into(),
            x_label: "RTT (us)".into(),
            y_label: "speed-up over FIFO".into(),
            series: rtt_series,
        }],
        notes: compute_notes(&p[1].1, &p[0].1),
    }
}

/// The compute stand-in scaled by 1 to 3 at RTT 0 (ordering alone): P3's
/// gain over FIFO at 30 and 15 Gbit/s. Ordering can gain only while the
/// communication outlasts what back-propagation hides; the paper's
/// 1.49-1.66x came from a parameter server, whose per-key costs this
/// model does not have (REPRODUCTION.md).
fn compute_notes(p3: &Policy, fifo: &Policy) -> Vec<String> {
    COMPUTE_SCALES
        .iter()
        .map(|&k| {
            let gain = |gbps: f64| {
                let rate = dist::gbps(gbps);
                iteration_time_scaled(fifo, rate, 0.0, k) / iteration_time_scaled(p3, rate, 0.0, k)
            };
            format!(
                "compute x{k} ({:.0} ms), RTT 0: P3 / FIFO {:.3} at 30 Gbit/s, {:.3} at 15 Gbit/s",
                (FORWARD + BACKWARD) * k * 1e3,
                gain(30.0),
                gain(15.0)
            )
        })
        .collect()
}
