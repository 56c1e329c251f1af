//! SELMCAST vs Orpheus vs the exact optimum (docs/PAPERS.md, "SELMCAST"; the
//! paper's Section V, BSP): n workers behind one big switch, egress b (1 +
//! lambda x), ingress b mu (1 + lambda x), x ~ U[-1, 1], lambda = 0.5; p =
//! 0.3n; k = 4.
//!
//! Each round's selection is played out in the flow network: an L3
//! multicast is one flow over the sender's uplink and its receivers'
//! downlinks (it runs at its slowest receiver), L7 is one unicast flow per
//! pair; all share ports max-min fairly. A round's time is the last flow's
//! finish, normalised by [`selmcast::ideal_time`] (the port-load lower
//! bound, inagg's reading of the paper's undefined "ideal").

use std::time::Instant;

use inagg_sched::selmcast::{self, History, Multicast, Round, Selection};

use crate::dist::{self, SimRng};
use crate::flow::FlowNet;
use crate::report::{self, Claim, Row};
use crate::svg::{Figure, Series};
use crate::Options;

/// Who picks the receivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Selmcast,
    Orpheus,
}

/// One setting.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub n: usize,
    pub p: usize,
    /// Uplink = mu x downlink (before the per-port draw).
    pub mu: f64,
    pub mode: Multicast,
    /// Rounds played per trial.
    pub rounds: usize,
    /// The consistency window.
    pub k: u32,
    /// Play each round in the flow network too (the sweep needs only the
    /// model's time; at n = 200 under L7 a round is 12 000 flows).
    pub flows: bool,
}

impl Setup {
    /// The paper's defaults: p = 0.3n, mu = 1, k = 4.
    pub fn paper(n: usize, mode: Multicast) -> Setup {
        Setup {
            n,
            p: ((n as f64 * 0.3).round() as usize).max(1),
            mu: 1.0,
            mode,
            rounds: 10,
            k: 4,
            flows: true,
        }
    }
}

/// One trial's averages over its rounds.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Metrics {
    /// Round time in the flow network (max-min sharing) over the ideal.
    pub normalised: f64,
    /// The formulation's round time t (what an allocation of v_ij / t per
    /// flow achieves) over the ideal.
    pub model: f64,
    /// Receivers per sender over n.
    pub scale: f64,
    /// Seconds spent choosing, per round.
    pub select_seconds: f64,
}

/// Bytes every sender multicasts per round.
const VOLUME: f64 = 200e6;
/// The paper's b.
const B: f64 = 40e9 / 8.0;

/// A trial's port bandwidths: egress b (1 + lambda x), ingress
/// b mu (1 + lambda x), x ~ U[-1, 1], lambda = 0.5 (BSP and SSP alike).
pub(super) struct Ports {
    pub uplink: Vec<f64>,
    pub downlink: Vec<f64>,
}

impl Ports {
    /// n ports, uplinks mu times the downlinks before the spread.
    pub(super) fn draw(n: usize, mu: f64, rng: &mut SimRng) -> Ports {
        let mut draw = |scale: f64| -> Vec<f64> {
            (0..n)
                .map(|_| scale * (1.0 + 0.5 * dist::uniform(rng, -1.0, 1.0)))
                .collect()
        };
        let downlink = draw(B);
        let uplink = draw(B * mu);
        Ports { uplink, downlink }
    }

    /// The next round's inputs, with the history's forced pairs and c_ij.
    fn round(&self, setup: &Setup, history: &History) -> Round {
        let mut r = Round::uniform(
            self.uplink.clone(),
            self.downlink.clone(),
            VOLUME,
            setup.p,
            setup.mode,
        );
        r.forced = history.forced();
        r.since = history.since();
        r
    }
}

/// Runs `rounds` rounds of one scheme.
pub fn run(setup: &Setup, scheme: Scheme, rng: &mut SimRng) -> Metrics {
    let ports = Ports::draw(setup.n, setup.mu, rng);
    let mut history = History::new(setup.n, setup.k);
    let mut m = Metrics::default();
    for _ in 0..setup.rounds {
        let r = ports.round(setup, &history);
        let began = Instant::now();
        let sel = match scheme {
            Scheme::Selmcast => selmcast::selmcast_bsp(&r),
            Scheme::Orpheus => selmcast::orpheus(&r, rng),
        };
        m.select_seconds += began.elapsed().as_secs_f64();
        let ideal = selmcast::ideal_time(&r);
        if setup.flows {
            m.normalised += play(&r, &sel) / ideal;
        }
        m.model += selmcast::completion_time(&r, &sel) / ideal;
        m.scale += sel.scale();
        history.record(&sel);
    }
    let rounds = setup.rounds as f64;
    m.normalised /= rounds;
    m.model /= rounds;
    m.scale /= rounds;
    m.select_seconds /= rounds;
    m
}

/// Plays one round's transfers in the flow network; returns its makespan.
pub fn play(r: &Round, sel: &Selection) -> f64 {
    let mut net = FlowNet::new();
    let up: Vec<usize> = r.uplink.iter().map(|&b| net.add_link(b)).collect();
    let down: Vec<usize> = r.downlink.iter().map(|&b| net.add_link(b)).collect();
    for (i, &uplink) in up.iter().enumerate() {
        let receivers = sel.receivers(i);
        match r.mode {
            Multicast::L3 if !receivers.is_empty() => {
                let mut links = vec![uplink];
                links.extend(receivers.iter().map(|&j| down[j]));
                let v = receivers
                    .iter()
                    .map(|&j| r.volume[i][j])
                    .fold(0.0, f64::max);
                net.start(&links, v, 0, i as u64);
            }
            Multicast::L3 => {}
            Multicast::L7 => {
                for j in receivers {
                    net.start(&[uplink, down[j]], r.volume[i][j], 0, i as u64);
                }
            }
        }
    }
    net.drain().last().map_or(0.0, |(t, _)| *t)
}

/// SELMCAST's round time over the exact optimum's for the same rounds
/// (SELMCAST's history drives both), at n <= 5; the mean over rounds (NaN
/// for larger n, where the enumeration is out of reach).
pub fn versus_optimal(setup: &Setup, rng: &mut SimRng) -> f64 {
    let ports = Ports::draw(setup.n, setup.mu, rng);
    let mut history = History::new(setup.n, setup.k);
    let mut ratio = 0.0;
    for _ in 0..setup.rounds {
        let r = ports.round(setup, &history);
        let sel = selmcast::selmcast_bsp(&r);
        let Some(best) = selmcast::optimal(&r) else {
            return f64::NAN;
        };
        ratio += selmcast::completion_time(&r, &sel) / selmcast::completion_time(&r, &best);
        history.record(&sel);
    }
    ratio / setup.rounds as f64
}

fn trials(opts: &Options, setup: &Setup, scheme: Scheme) -> Vec<Metrics> {
    (0..opts.trials)
        .map(|t| {
            run(
                setup,
                scheme,
                &mut dist::rng(opts.seed ^ (setup.n as u64) << 8, t),
            )
        })
        .collect()
}

fn median_of(ms: &[Metrics], f: fn(&Metrics) -> f64) -> f64 {
    report::median(&ms.iter().map(f).collect::<Vec<_>>())
}

/// The BSP half of the reproduction (`super::selmcast_paper` adds the SSP
/// half): normalised completion and scale at n = 100 (L3, L7, mu = 1 and
/// 1/p), the check against the optimum, the sweep over n.
pub fn reproduce_bsp(opts: &Options) -> (Vec<Row>, Vec<Figure>) {
    let at = |mode, mu: f64, scheme| {
        let mut s = Setup::paper(100, mode);
        if mu < 1.0 {
            s.mu = 1.0 / s.p as f64;
        }
        trials(opts, &s, scheme)
    };
    let norm = |m: &[Metrics]| median_of(m, |m| m.normalised);
    let model = |m: &[Metrics]| median_of(m, |m| m.model);
    let scale = |m: &[Metrics]| median_of(m, |m| m.scale);
    let sel_l3 = at(Multicast::L3, 1.0, Scheme::Selmcast);
    let orp_l3 = at(Multicast::L3, 1.0, Scheme::Orpheus);
    let sel_l7 = at(Multicast::L7, 1.0, Scheme::Selmcast);
    let orp_l7 = at(Multicast::L7, 1.0, Scheme::Orpheus);
    let sel_mu = at(Multicast::L3, 0.0, Scheme::Selmcast);
    let orp_mu = at(Multicast::L3, 0.0, Scheme::Orpheus);
    let small = Setup {
        rounds: 6,
        ..Setup::paper(5, Multicast::L7)
    };
    let vs_opt: Vec<f64> = (0..opts.trials)
        .map(|t| versus_optimal(&small, &mut dist::rng(opts.seed, t)))
        .collect();
    let big = Setup {
        rounds: 2,
        flows: false,
        ..Setup::paper(200, Multicast::L3)
    };
    let runtime = median_of(&trials(opts, &big, Scheme::Selmcast), |m| m.select_seconds);
    let rows = vec![
        Row::new(
            "model completion, SELMCAST, L3, n=100",
            "~1.02",
            model(&sel_l3),
            Claim::Below(1.1),
        ),
        Row::new(
            "model completion, Orpheus, L3, n=100",
            "~1.67",
            model(&orp_l3),
            Claim::Above(1.3),
        ),
        Row::new(
            "model completion, SELMCAST, L7, n=100",
            "~1.32",
            model(&sel_l7),
            Claim::Below(model(&orp_l7)),
        ),
        Row::new(
            "model completion, Orpheus, L7, n=100",
            "~1.67",
            model(&orp_l7),
            Claim::Above(1.1),
        ),
        Row::new(
            "max-min flow completion, SELMCAST, L3",
            "~1.02",
            norm(&sel_l3),
            Claim::Below(norm(&orp_l3)),
        ),
        Row::new(
            "max-min flow completion, Orpheus, L3",
            "~1.67",
            norm(&orp_l3),
            Claim::Above(1.3),
        ),
        Row::new(
            "max-min flow completion, SELMCAST, L7",
            "~1.32",
            norm(&sel_l7),
            Claim::Below(norm(&orp_l7)),
        ),
        Row::new(
            "max-min flow completion, Orpheus, L7",
            "~1.67",
            norm(&orp_l7),
            Claim::Above(1.1),
        ),
        Row::new(
            "receivers, SELMCAST / Orpheus, L7",
            "~1.3x",
            scale(&sel_l7) / scale(&orp_l7),
            Claim::Above(1.0),
        ),
        Row::new(
            "receivers per sender / p, SELMCAST, L3, mu=1",
            "exactly 1",
            scale(&sel_l3) * 100.0 / 30.0,
            Claim::Within(0.99, 1.01),
        ),
        Row::new(
            "receivers, SELMCAST / Orpheus, L3, mu=1/p",
            "~1.33x",
            scale(&sel_mu) / scale(&orp_mu),
            Claim::Above(1.05),
        ),
        Row::new(
            "round time, SELMCAST / optimal, L7, n=5",
            "~1",
            report::median(&vs_opt),
            Claim::Within(1.0, 1.3),
        ),
        Row::new(
            "selection runtime at n=200, ms",
            "tens of ms (Python)",
            runtime * 1e3,
            Claim::Below(100.0),
        ),
        Row::new(
            "Eq. 1: Pr(m = p), n=200, p=1",
            "~0.37",
            selmcast::pr_receivers(200, 1, 1),
            Claim::Within(0.36, 0.38),
        ),
    ];
    let ns: Vec<usize> = if opts.quick {
        vec![50, 100]
    } else {
        vec![50, 100, 150, 200]
    };
    let mut series = Vec::new();
    for (name, mode, scheme) in [
        ("SELMCAST L3", Multicast::L3, Scheme::Selmcast),
        ("Orpheus L3", Multicast::L3, Scheme::Orpheus),
        ("SELMCAST L7", Multicast::L7, Scheme::Selmcast),
        ("Orpheus L7", Multicast::L7, Scheme::Orpheus),
    ] {
        let points = ns
            .iter()
            .map(|&n| {
                let s = Setup {
                    rounds: 4,
                    flows: false,
                    ..Setup::paper(n, mode)
                };
                (n as f64, median_of(&trials(opts, &s, scheme), |m| m.model))
            })
            .collect();
        series.push(Series {
            name: name.into(),
            points,
        });
    }
    let figures = vec![Figure {
        file: "selmcast-normalised-completion.svg".into(),
        title: "SELMCAST vs Orpheus: the model's round time over the ideal".into(),
        x_label: "workers n".into(),
        y_label: "normalised completion time".into(),
        series,
    }];
    (rows, figures)
}
