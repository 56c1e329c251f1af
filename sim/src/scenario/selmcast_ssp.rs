//! SELMCAST vs Orpheus for SSP training (docs/PAPERS.md, "SELMCAST for SSP";
//! Section V-C): n = 50 workers behind one big switch, L3 multicast of a 200
//! MB update per round, b = 40 Gbit/s with the BSP ports' spread (lambda =
//! 0.5, mu = 1), p = 0.3n, k = 4, ssp = 4, eta = 0.75, 10 minutes of
//! training.
//!
//! A worker computes a round (a draw from its workload's stand-in), then
//! multicasts its update; when the multicast has reached its receivers it
//! starts the next round, unless that would put it more than `ssp` rounds
//! ahead of the slowest worker, in which case it waits (blocked). Received
//! updates are applied asynchronously and never hold a worker up.
//!
//! SELMCAST runs Algorithm 2 ([`Online::admit`]) each time a
//! worker becomes ready: running multicasts may lose receivers, and every
//! task's flow is restarted in its new priority class (the order L), which
//! the flow network serves strictly yet work-conservingly. Orpheus picks
//! forced plus random receivers and shares ports max-min fairly.
//!
//! tau_i, the time sender i would still wait after its multicast, is
//! estimated as the controller could: the slowest worker's remaining
//! compute at the workload's mean, plus a mean round for each further
//! round the gap needs.

use inagg_sched::selmcast::Multicast;
use inagg_sched::selmcast_ssp::{Online, SenderHistory, Task};

use super::selmcast::Ports;
use crate::dist::{self, Compute, SimRng};
use crate::events::Events;
use crate::flow::{FlowId, FlowNet};
use crate::report::{self, Claim, Row};
use crate::svg::{Figure, Series};
use crate::Options;

/// Who picks the receivers: the same two schemes as under BSP.
pub use super::selmcast::Scheme;

/// One SSP setting.
#[derive(Debug, Clone, Copy)]
pub struct Setup {
    pub n: usize,
    pub p: usize,
    /// The consistency window (u32::MAX: no rule).
    pub k: u32,
    /// The staleness bound.
    pub ssp: u32,
    pub eta: f64,
    /// Bytes per update.
    pub volume: f64,
    /// Seconds of training observed.
    pub horizon: f64,
    pub workload: Compute,
    /// Bandwidth variability (the paper's Fig. 13): every `vary_every`
    /// seconds each port's rate becomes `b#(1 - gamma) + gamma b*`, with
    /// `b#` drawn once per trial and `b*` drawn afresh each time from the
    /// same distribution. 0: fixed rates.
    pub gamma: f64,
    /// Delta_T of the variability, seconds.
    pub vary_every: f64,
}

impl Setup {
    /// The paper's defaults for one workload.
    pub fn paper(workload: Compute) -> Setup {
        Setup {
            n: 50,
            p: 15,
            k: 4,
            ssp: 4,
            eta: 0.75,
            volume: 200e6,
            horizon: 600.0,
            workload,
            gamma: 0.0,
            vary_every: 0.1,
        }
    }
}

/// The stand-ins for the paper's three traces (from its reference \[20\],
/// rescaled to a 1000 ms mean; the distributions themselves are lost from
/// the seed text): coefficients of variation chosen to span a steady CNN,
/// a sequence model and a variable-length translation model.
pub const WORKLOADS: [Compute; 3] = [
    Compute::ssp("LSTM (UCF101)", 0.30),
    Compute::ssp("Transformer (WMT16)", 0.40),
    Compute::ssp("ResNet-50 (ImageNet)", 0.15),
];

/// One trial's results.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct Metrics {
    /// Compute time over training time, averaged over workers.
    pub utilisation: f64,
    /// Receivers per completed multicast over n.
    pub scale: f64,
    /// Receivers per multicast when it was admitted, over n.
    pub planned_scale: f64,
    /// Rounds completed per worker.
    pub rounds: f64,
}

/// What a worker is doing.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Computing since the given time.
    Computing(f64),
    /// Its update is being multicast.
    Syncing,
    /// Waiting for the slowest worker.
    Blocked,
}

/// The training run's state.
struct Run<'a> {
    setup: &'a Setup,
    scheme: Scheme,
    net: FlowNet,
    uplink: Vec<usize>,
    downlink: Vec<usize>,
    /// b#: the rates drawn at the start.
    base: Ports,
    /// When the rates are next redrawn (infinity: never).
    next_vary: f64,
    online: Online,
    history: SenderHistory,
    flow: Vec<Option<FlowId>>,
    round: Vec<u32>,
    phase: Vec<Phase>,
    computed: Vec<f64>,
    events: Events<usize>,
    receivers: usize,
    multicasts: usize,
    planned: usize,
    admitted: usize,
}

impl<'a> Run<'a> {
    fn new(setup: &'a Setup, scheme: Scheme, rng: &mut SimRng) -> Run<'a> {
        let base = Ports::draw(setup.n, 1.0, rng);
        let mut net = FlowNet::new();
        let uplink = base.uplink.iter().map(|&c| net.add_link(c)).collect();
        let downlink = base.downlink.iter().map(|&c| net.add_link(c)).collect();
        let online = Online::new(
            base.uplink.clone(),
            base.downlink.clone(),
            Multicast::L3,
            setup.eta,
        );
        Run {
            setup,
            scheme,
            net,
            uplink,
            downlink,
            base,
            next_vary: if setup.gamma > 0.0 {
                setup.vary_every
            } else {
                f64::INFINITY
            },
            online,
            history: SenderHistory::new(setup.n, setup.k),
            flow: vec![None; setup.n],
            round: vec![0; setup.n],
            phase: vec![Phase::Blocked; setup.n],
            computed: vec![0.0; setup.n],
            events: Events::default(),
            receivers: 0,
            multicasts: 0,
            planned: 0,
            admitted: 0,
        }
    }

    fn compute(&mut self, w: usize, rng: &mut SimRng) {
        let now = self.net.now();
        self.phase[w] = Phase::Computing(now);
        let dt = self.setup.workload.sample(rng);
        self.events.push(now + dt, w);
    }

    /// Worker w finished computing: its multicast is admitted.
    fn ready(&mut self, w: usize, rng: &mut SimRng) {
        let now = self.net.now();
        if let Phase::Computing(since) = self.phase[w] {
            self.computed[w] += now - since;
        }
        self.phase[w] = Phase::Syncing;
        self.admitted += 1;
        let mut task = Task::new(
            self.setup.n,
            w,
            self.setup.volume,
            self.setup.p,
            self.history.forced(w),
            self.history.since(w),
        );
        match self.scheme {
            Scheme::Selmcast => {
                self.sync_remaining();
                self.estimate_tau();
                task.tau = self.tau_of(w);
                let before: Vec<Vec<bool>> = self
                    .online
                    .tasks
                    .iter()
                    .map(|t| t.as_ref().map_or_else(Vec::new, |t| t.receivers.clone()))
                    .collect();
                let order = self.online.admit(w, task);
                self.planned += self.online.tasks[w]
                    .as_ref()
                    .map_or(0, |t| t.receiver_list().len());
                self.restart_flows(&order, &before);
            }
            Scheme::Orpheus => {
                self.online.admit_random(w, task, rng);
                self.planned += self.online.tasks[w]
                    .as_ref()
                    .map_or(0, |t| t.receiver_list().len());
                self.start_flow(w, 0);
            }
        }
    }

    /// Copies each running flow's bytes left into its task's receivers.
    fn sync_remaining(&mut self) {
        for (i, t) in self.online.tasks.iter_mut().enumerate() {
            let (Some(t), Some(id)) = (t, self.flow[i]) else {
                continue;
            };
            let left = self.net.remaining(id).unwrap_or(0.0);
            for j in t.receiver_list() {
                t.remaining[j] = left;
            }
        }
    }

    /// Updates tau for every running task.
    fn estimate_tau(&mut self) {
        for i in 0..self.setup.n {
            if self.online.tasks[i].is_some() {
                let tau = self.tau_of(i);
                self.online.tasks[i].as_mut().expect("running").tau = tau;
            }
        }
    }

    /// How long worker i would wait after its multicast for the SSP bound.
    fn tau_of(&self, i: usize) -> f64 {
        let min = *self.round.iter().min().expect("workers");
        let gap = i64::from(self.round[i]) + 1 - i64::from(min) - i64::from(self.setup.ssp);
        if gap <= 0 {
            return 0.0;
        }
        let mean = self.setup.workload.mean;
        let now = self.net.now();
        let slowest = (0..self.setup.n)
            .filter(|&v| self.round[v] == min)
            .map(|v| match self.phase[v] {
                Phase::Computing(since) => (since + mean - now).max(0.0),
                _ => 0.0,
            })
            .fold(0.0, f64::max);
        slowest + (gap - 1) as f64 * mean
    }

    /// Puts every running task's flow in its priority class (the order L),
    /// restarting those whose receivers changed over their new receivers.
    fn restart_flows(&mut self, order: &[usize], before: &[Vec<bool>]) {
        for (class, &i) in order.iter().enumerate() {
            let class = class.min(u8::MAX as usize) as u8;
            let same = self.online.tasks[i].as_ref().map(|t| &t.receivers) == Some(&before[i]);
            match self.flow[i] {
                Some(id) if same => self.net.set_class(id, class),
                _ => {
                    if let Some(id) = self.flow[i].take() {
                        self.net.cancel(id);
                    }
                    self.start_flow(i, class);
                }
            }
        }
    }

    fn start_flow(&mut self, i: usize, class: u8) {
        let t = self.online.tasks[i].as_ref().expect("running task");
        let receivers = t.receiver_list();
        let bytes = receivers
            .iter()
            .map(|&j| t.remaining[j])
            .fold(0.0, f64::max);
        let mut links = vec![self.uplink[i]];
        links.extend(receivers.iter().map(|&j| self.downlink[j]));
        self.flow[i] = Some(self.net.start(&links, bytes, class, i as u64));
    }

    /// Sender i's multicast reached its receivers.
    fn delivered(&mut self, i: usize, rng: &mut SimRng) {
        self.flow[i] = None;
        let Some(t) = self.online.finish(i) else {
            return;
        };
        self.receivers += t.receiver_list().len();
        self.multicasts += 1;
        self.history.record(i, &t.receivers);
        self.phase[i] = Phase::Blocked;
        self.unblock(rng);
    }

    /// Starts the next round of every blocked worker the SSP bound allows.
    fn unblock(&mut self, rng: &mut SimRng) {
        loop {
            let min = *self.round.iter().min().expect("workers");
            let next = (0..self.setup.n).find(|&w| {
                self.phase[w] == Phase::Blocked && self.round[w] + 1 - min <= self.setup.ssp
            });
            let Some(w) = next else { return };
            self.round[w] += 1;
            self.compute(w, rng);
        }
    }

    /// Redraws every port's rate (Fig. 13): the network and the
    /// scheduler's view both take the new rates.
    fn vary(&mut self, rng: &mut SimRng) {
        let fresh = Ports::draw(self.setup.n, 1.0, rng);
        let g = self.setup.gamma;
        let mix = |base: f64, now: f64| base * (1.0 - g) + g * now;
        for i in 0..self.setup.n {
            let up = mix(self.base.uplink[i], fresh.uplink[i]);
            let down = mix(self.base.downlink[i], fresh.downlink[i]);
            self.net.set_capacity(self.uplink[i], up);
            self.net.set_capacity(self.downlink[i], down);
            self.online.uplink[i] = up;
            self.online.downlink[i] = down;
        }
        self.next_vary += self.setup.vary_every;
    }

    fn play(mut self, rng: &mut SimRng) -> Metrics {
        for w in 0..self.setup.n {
            self.compute(w, rng);
        }
        let end = self.setup.horizon;
        loop {
            let flow_at = self.net.next_finish().unwrap_or(f64::INFINITY);
            let event_at = self.events.peek_time().unwrap_or(f64::INFINITY);
            let at = flow_at.min(event_at);
            if self.next_vary < at.min(end) {
                // Only flows within rounding of their end can finish here.
                for f in self.net.advance_to(self.next_vary) {
                    self.delivered(f.tag as usize, rng);
                }
                self.vary(rng);
                continue;
            }
            if at > end {
                break;
            }
            if flow_at <= event_at {
                for f in self.net.advance_to(flow_at) {
                    self.delivered(f.tag as usize, rng);
                }
            } else {
                let (t, w) = self.events.pop().expect("event");
                self.net.advance_to(t);
                self.ready(w, rng);
            }
        }
        self.net.advance_to(end);
        self.metrics()
    }

    fn metrics(&self) -> Metrics {
        let end = self.setup.horizon;
        let n = self.setup.n as f64;
        let busy: f64 = (0..self.setup.n)
            .map(|w| match self.phase[w] {
                Phase::Computing(since) => self.computed[w] + (end - since),
                _ => self.computed[w],
            })
            .sum();
        Metrics {
            utilisation: busy / (n * end),
            scale: self.receivers as f64 / self.multicasts.max(1) as f64 / n,
            planned_scale: self.planned as f64 / self.admitted.max(1) as f64 / n,
            rounds: self.round.iter().map(|&r| f64::from(r)).sum::<f64>() / n,
        }
    }
}

/// One trial of `scheme` under `setup`.
pub fn run(setup: &Setup, scheme: Scheme, rng: &mut SimRng) -> Metrics {
    let run = Run::new(setup, scheme, rng);
    run.play(rng)
}

/// `f(0..count)` on up to two threads (the machine's cores), in order.
fn par_map<T: Send>(count: u64, f: impl Fn(u64) -> T + Sync) -> Vec<T> {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get().min(2)) as u64;
    let mut out: Vec<(u64, T)> = std::thread::scope(|s| {
        let f = &f;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                s.spawn(move || {
                    (t..count)
                        .step_by(threads as usize)
                        .map(|i| (i, f(i)))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("trial thread"))
            .collect()
    });
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, x)| x).collect()
}

/// Medians over `trials` trials of one setting (seeded per workload, so
/// SELMCAST and Orpheus see the same ports and compute draws).
pub fn medians(setup: &Setup, scheme: Scheme, trials: u64, seed: u64) -> Metrics {
    let tag = setup.workload.cv.to_bits() ^ (setup.p as u64) << 32;
    let ms = par_map(trials, |t| {
        run(setup, scheme, &mut dist::rng(seed ^ tag, t))
    });
    let med = |f: fn(&Metrics) -> f64| report::median(&ms.iter().map(f).collect::<Vec<_>>());
    Metrics {
        utilisation: med(|m| m.utilisation),
        scale: med(|m| m.scale),
        planned_scale: med(|m| m.planned_scale),
        rounds: med(|m| m.rounds),
    }
}

/// The paper's per-workload figures (LSTM, Transformer, ResNet-50).
const PAPER_UTIL_ORPHEUS: [&str; 3] = ["0.63", "0.65", "0.64"];
const PAPER_UTIL_SELMCAST: [&str; 3] = ["0.68", "0.70", "0.70"];
const PAPER_ETA_SCALE: [&str; 3] = ["+66%", "+66%", "+58%"];

/// The SSP half of the SELMCAST reproduction: rows and figures.
pub fn reproduce(opts: &Options) -> (Vec<Row>, Vec<Figure>) {
    let horizon = if opts.quick { 60.0 } else { 600.0 };
    let sweep_trials = opts.trials.min(3);
    let at = |w: Compute| Setup {
        horizon,
        ..Setup::paper(w)
    };
    let mut rows = Vec::new();
    let mut no_k_util: f64 = 0.0;
    let mut no_k_scale: f64 = 0.0;
    for (idx, w) in WORKLOADS.into_iter().enumerate() {
        let name = w.name.split(' ').next().unwrap_or(w.name);
        let orp = medians(&at(w), Scheme::Orpheus, opts.trials, opts.seed);
        let sel = medians(&at(w), Scheme::Selmcast, opts.trials, opts.seed);
        rows.push(Row::new(
            format!("SSP NPU utilisation, Orpheus, {name}"),
            PAPER_UTIL_ORPHEUS[idx],
            orp.utilisation,
            Claim::Within(0.5, 0.8),
        ));
        rows.push(Row::new(
            format!("SSP NPU utilisation, SELMCAST, {name}"),
            PAPER_UTIL_SELMCAST[idx],
            sel.utilisation,
            Claim::Above(orp.utilisation),
        ));
        rows.push(Row::new(
            format!("SSP scale delivered, Orpheus, {name}"),
            "0.30",
            orp.scale,
            Claim::Within(0.25, 0.4),
        ));
        rows.push(Row::new(
            format!("SSP scale delivered, SELMCAST, {name}"),
            "0.30 -> 0.55",
            sel.scale,
            Claim::Above(orp.scale),
        ));
        rows.push(Row::new(
            format!("SSP scale planned at admission, SELMCAST, {name}"),
            "0.30 -> 0.55",
            sel.planned_scale,
            Claim::Above(orp.scale),
        ));
        if !opts.quick {
            // Without the k rule: a sweep setting (200 s, up to 3 trials).
            let free = Setup {
                k: u32::MAX,
                horizon: 200.0,
                ..Setup::paper(w)
            };
            let o = medians(&free, Scheme::Orpheus, sweep_trials, opts.seed);
            let s = medians(&free, Scheme::Selmcast, sweep_trials, opts.seed);
            no_k_util = no_k_util.max(s.utilisation / o.utilisation);
            no_k_scale = no_k_scale.max(s.scale / o.scale);
        }
    }
    if !opts.quick {
        rows.push(Row::new(
            "SSP without k: utilisation, SELMCAST / Orpheus, best workload",
            "up to 1.17x",
            no_k_util,
            Claim::Above(1.0),
        ));
        rows.push(Row::new(
            "SSP without k: delivered scale, SELMCAST / Orpheus, best workload",
            "up to 1.53x",
            no_k_scale,
            Claim::Above(1.0),
        ));
    }
    let sweep = Setup {
        horizon: if opts.quick { 60.0 } else { 200.0 },
        ..Setup::paper(WORKLOADS[1])
    };
    let etas: &[f64] = if opts.quick {
        &[0.0, 0.75]
    } else {
        &[0.0, 0.25, 0.5, 0.75, 1.0]
    };
    let by_eta: Vec<(f64, Metrics)> = etas
        .iter()
        .map(|&eta| {
            (
                eta,
                medians(
                    &Setup { eta, ..sweep },
                    Scheme::Selmcast,
                    sweep_trials,
                    opts.seed,
                ),
            )
        })
        .collect();
    let eta_of = |e: f64| {
        by_eta
            .iter()
            .find(|(x, _)| *x == e)
            .map(|(_, m)| *m)
            .unwrap_or_default()
    };
    let (e0, e75) = (eta_of(0.0), eta_of(0.75));
    rows.push(Row::new(
        "SSP eta 0.75 vs 0: delivered scale, Transformer",
        PAPER_ETA_SCALE[1],
        e75.scale / e0.scale - 1.0,
        Claim::Above(0.2),
    ));
    rows.push(Row::new(
        "SSP eta 0.75 vs 0: utilisation change, Transformer",
        "< -8%",
        e75.utilisation / e0.utilisation - 1.0,
        Claim::Within(-0.16, -0.04),
    ));
    let mut figures = vec![eta_figure(&by_eta)];
    if !opts.quick {
        let (more_rows, more_figures) = sweeps(&sweep, sweep_trials, opts.seed);
        rows.extend(more_rows);
        figures.extend(more_figures);
    }
    (rows, figures)
}

fn eta_figure(by_eta: &[(f64, Metrics)]) -> Figure {
    let series = |name: &str, f: fn(&Metrics) -> f64| Series {
        name: name.into(),
        points: by_eta.iter().map(|(e, m)| (*e, f(m))).collect(),
    };
    Figure {
        file: "selmcast-ssp-eta.svg".into(),
        title: "SELMCAST SSP (Transformer): eta trades utilisation for scale".into(),
        x_label: "eta".into(),
        y_label: "fraction".into(),
        series: vec![
            series("NPU utilisation", |m| m.utilisation),
            series("delivered scale", |m| m.scale),
            series("planned scale", |m| m.planned_scale),
        ],
    }
}

/// One swept knob: both schemes at each setting, in order.
struct Sweep {
    /// x and the setting at x.
    points: Vec<(f64, Setup)>,
    selmcast: Vec<Metrics>,
    orpheus: Vec<Metrics>,
}

impl Sweep {
    fn run(points: Vec<(f64, Setup)>, trials: u64, seed: u64) -> Sweep {
        let of = |scheme| {
            points
                .iter()
                .map(|(_, setup)| medians(setup, scheme, trials, seed))
                .collect()
        };
        Sweep {
            selmcast: of(Scheme::Selmcast),
            orpheus: of(Scheme::Orpheus),
            points,
        }
    }

    /// The smallest SELMCAST / Orpheus ratio of `f` over the settings.
    fn worst_ratio(&self, f: fn(&Metrics) -> f64) -> f64 {
        self.ratios(f).into_iter().fold(f64::INFINITY, f64::min)
    }

    /// The largest SELMCAST / Orpheus ratio of `f` over the settings.
    fn best_ratio(&self, f: fn(&Metrics) -> f64) -> f64 {
        self.ratios(f).into_iter().fold(0.0, f64::max)
    }

    fn ratios(&self, f: fn(&Metrics) -> f64) -> Vec<f64> {
        self.selmcast
            .iter()
            .zip(&self.orpheus)
            .map(|(s, o)| f(s) / f(o))
            .collect()
    }

    /// `f` at the last setting over `f` at the first, for one scheme.
    fn end_over_start(ms: &[Metrics], f: fn(&Metrics) -> f64) -> f64 {
        match (ms.first(), ms.last()) {
            (Some(a), Some(b)) => f(b) / f(a),
            _ => f64::NAN,
        }
    }

    /// Two plots: NPU utilisation and delivered scale over the knob.
    fn figures(&self, file: &str, knob: &str, log2: bool) -> Vec<Figure> {
        let x = |v: f64| if log2 { v.log2() } else { v };
        let series = |f: fn(&Metrics) -> f64| {
            [("SELMCAST", &self.selmcast), ("Orpheus", &self.orpheus)]
                .into_iter()
                .map(|(name, ms)| Series {
                    name: name.into(),
                    points: self
                        .points
                        .iter()
                        .zip(ms.iter())
                        .map(|((v, _), m)| (x(*v), f(m)))
                        .collect(),
                })
                .collect::<Vec<_>>()
        };
        let x_label = if log2 {
            format!("log2 {knob}")
        } else {
            knob.to_string()
        };
        let figure = |what: &str, suffix: &str, series| Figure {
            file: format!("selmcast-ssp-{suffix}-{file}.svg"),
            title: format!("SELMCAST vs Orpheus, SSP (Transformer): {what} over {knob}"),
            x_label: x_label.clone(),
            y_label: what.into(),
            series,
        };
        vec![
            figure("NPU utilisation", "utilisation", series(|m| m.utilisation)),
            figure("delivered multicast scale", "scale", series(|m| m.scale)),
        ]
    }
}

/// Figs. 8, 9, 10, 12 and 13: both schemes over p/n, k, ssp (with k =
/// ssp), the update's volume and the bandwidth variability, on the
/// Transformer stand-in; rows for the claims each figure makes.
fn sweeps(sweep: &Setup, trials: u64, seed: u64) -> (Vec<Row>, Vec<Figure>) {
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    let at = |xs: &[f64], set: &dyn Fn(f64) -> Setup| -> Vec<(f64, Setup)> {
        xs.iter().map(|&x| (x, set(x))).collect()
    };
    let util: fn(&Metrics) -> f64 = |m| m.utilisation;
    let scale: fn(&Metrics) -> f64 = |m| m.scale;

    let by_p = Sweep::run(
        at(&[0.05, 0.1, 0.2, 0.3, 0.4], &|f| Setup {
            p: ((f * sweep.n as f64).round() as usize).max(1),
            ..*sweep
        }),
        trials,
        seed,
    );
    figures.extend(by_p.figures("p", "p / n", false));

    // Fig. 9: k from 1 to 16; the paper's "no k" is the first table's row.
    let by_k = Sweep::run(
        at(&[1.0, 2.0, 4.0, 8.0, 16.0], &|k| Setup {
            k: k as u32,
            ..*sweep
        }),
        trials,
        seed,
    );
    rows.push(Row::new(
        "SSP k 1..16: delivered scale, SELMCAST / Orpheus, worst k",
        "SELMCAST always above",
        by_k.worst_ratio(scale),
        Claim::Above(1.0),
    ));
    rows.push(Row::new(
        "SSP k 1..16: utilisation, SELMCAST / Orpheus, worst k",
        "SELMCAST always above",
        by_k.worst_ratio(util),
        Claim::Above(1.0),
    ));
    rows.push(Row::new(
        "SSP k 1 -> 16: Orpheus delivered scale, ratio",
        "falls",
        Sweep::end_over_start(&by_k.orpheus, scale),
        Claim::Below(1.0),
    ));
    rows.push(Row::new(
        "SSP k 1 -> 16: Orpheus utilisation, ratio",
        "rises",
        Sweep::end_over_start(&by_k.orpheus, util),
        Claim::Above(1.0),
    ));
    figures.extend(by_k.figures("k", "k", true));

    // Fig. 10: ssp from 1 to 16, with k = ssp.
    let by_ssp = Sweep::run(
        at(&[1.0, 2.0, 4.0, 8.0, 16.0], &|v| Setup {
            ssp: v as u32,
            k: v as u32,
            ..*sweep
        }),
        trials,
        seed,
    );
    rows.push(Row::new(
        "SSP ssp = k 1..16: delivered scale, SELMCAST / Orpheus, worst",
        "SELMCAST always above",
        by_ssp.worst_ratio(scale),
        Claim::Above(1.0),
    ));
    rows.push(Row::new(
        "SSP ssp = k 1..16: utilisation, SELMCAST / Orpheus, worst",
        "SELMCAST always above",
        by_ssp.worst_ratio(util),
        Claim::Above(1.0),
    ));
    rows.push(Row::new(
        "SSP ssp = k 1 -> 16: SELMCAST utilisation, ratio",
        "rises (as with k)",
        Sweep::end_over_start(&by_ssp.selmcast, util),
        Claim::Above(1.0),
    ));
    figures.extend(by_ssp.figures("ssp", "ssp (= k)", true));

    // Fig. 12: the update's volume scaled by 2^-4 .. 2^4.
    let by_volume = Sweep::run(
        at(&[1.0 / 16.0, 0.25, 1.0, 4.0, 16.0], &|f| Setup {
            volume: sweep.volume * f,
            ..*sweep
        }),
        trials,
        seed,
    );
    rows.push(Row::new(
        "SSP volume x1/16 -> x16: SELMCAST utilisation, ratio",
        "falls",
        Sweep::end_over_start(&by_volume.selmcast, util),
        Claim::Below(1.0),
    ));
    rows.push(Row::new(
        "SSP volume x1/16 -> x16: SELMCAST delivered scale, ratio",
        "falls",
        Sweep::end_over_start(&by_volume.selmcast, scale),
        Claim::Below(1.0),
    ));
    rows.push(Row::new(
        "SSP volume x1/16..x16: delivered scale, SELMCAST / Orpheus, worst",
        "SELMCAST always much above",
        by_volume.worst_ratio(scale),
        Claim::Above(1.1),
    ));
    figures.extend(by_volume.figures("volume", "volume factor", true));

    // Fig. 13: rates redrawn every 100 ms, gamma from 0 to 1.
    let by_gamma = Sweep::run(
        at(&[0.0, 0.25, 0.5, 0.75, 1.0], &|gamma| Setup {
            gamma,
            ..*sweep
        }),
        trials,
        seed,
    );
    rows.push(Row::new(
        "SSP gamma 0..1: delivered scale, SELMCAST / Orpheus, worst",
        "always above",
        by_gamma.worst_ratio(scale),
        Claim::Above(1.0),
    ));
    rows.push(Row::new(
        "SSP gamma 0..1: delivered scale, SELMCAST / Orpheus, best",
        "up to 1.67x",
        by_gamma.best_ratio(scale),
        Claim::Within(1.2, 2.2),
    ));
    let gain = by_gamma.ratios(util);
    rows.push(Row::new(
        "SSP gamma 0 -> 1: utilisation gain over Orpheus, change",
        "shrinks (about 1.0 or below at gamma 1)",
        gain.last().copied().unwrap_or(f64::NAN) - gain.first().copied().unwrap_or(f64::NAN),
        Claim::Below(0.0),
    ));
    figures.extend(by_gamma.figures("gamma", "gamma (Delta_T = 100 ms)", false));
    (rows, figures)
}
