//! Selective reduce: which ready workers synchronise together, and when
//! (docs/PAPERS.md, "Selective reduce").
//!
//! Partial reduce (the baseline) launches a weighted all-reduce as soon as
//! `p` workers are ready, first come first served. Selective reduce groups
//! ready workers of similar bandwidth ([`bag`]), and holds a group back for
//! a slot `dt` when faster workers are likely to finish computing within it
//! and would shorten the group's sync ([`bpawr`]). [`Controller`] is the
//! loop (Algorithm 3) with its periodic full all-reduce.
//!
//! Errata readings (each named where it is followed):
//! - **BAG-size**: BAG's `len(g) <= p` would put p + 1 workers in the core
//!   group; the prose says "select p workers", so `len(g) < p`.
//! - **Eq4**: the paper's progress model is `p_i = F(t_i + dt)`; the true
//!   conditional is `(F(t_i + dt) - F(t_i)) / (1 - F(t_i))`. Both are
//!   offered ([`Progress`]); the paper's is the default for reproduction.
//! - **Predict-strict**: PREDICTWORKERS keeps workers with `b_i > b^` as
//!   printed (the prose says `>=`).
//! - **Loop-bool**: Algorithm 3's Boolean is inverted against the prose:
//!   a group smaller than p waits; `t_X > theta dt` moves `g_delta` to the
//!   next group and holds the group for the predicted arrivals; otherwise
//!   the group launches now.
//! - **Loop-k**: k also counts the full all-reduce, or every later round
//!   would be one.
//! - **BAG-args**: Algorithm 3 calls BAG with its arguments in another
//!   order than BAG's signature; they are matched by meaning (the ready
//!   queue, p, eta, the bandwidths), as [`plan`] passes them.
//! - **Launch-at-p**: the loop's `len(Q) >= p` is followed, not the prose's
//!   "larger than p": p ready workers are enough to plan ([`plan`]), as
//!   partial reduce launches at p.

/// A worker as the controller sees it: its id and bandwidth (bytes/s,
/// `min(uplink, downlink)`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ready {
    pub id: usize,
    pub bandwidth: f64,
}

/// A worker still computing its round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Training {
    pub id: usize,
    pub bandwidth: f64,
    /// Seconds since it started its current round.
    pub elapsed: f64,
}

/// BAG (Algorithm 1): ready workers sorted by bandwidth, highest first, cut
/// into groups: each group takes its first `p` workers (reading
/// BAG-size), then every next worker within `eta` of the p-th's bandwidth.
/// Ties keep the input order. O(n log n).
pub fn bag(ready: &[Ready], p: usize, eta: f64) -> Vec<Vec<Ready>> {
    let mut sorted = ready.to_vec();
    sorted.sort_by(|a, b| b.bandwidth.total_cmp(&a.bandwidth));
    let mut groups = Vec::new();
    let mut g: Vec<Ready> = Vec::new();
    let mut floor = f64::INFINITY;
    for w in sorted {
        if g.len() < p {
            floor = w.bandwidth * (1.0 - eta);
            g.push(w);
        } else if w.bandwidth >= floor {
            g.push(w);
        } else {
            groups.push(std::mem::take(&mut g));
            floor = w.bandwidth * (1.0 - eta);
            g.push(w);
        }
    }
    if !g.is_empty() {
        groups.push(g);
    }
    groups
}

/// How the chance that a computing worker is ready within `dt` is read off
/// the compute-time CDF (reading Eq4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Progress {
    /// The paper's Eq. 4: `F(t + dt)`.
    Paper,
    /// The true conditional: `(F(t + dt) - F(t)) / (1 - F(t))`.
    Hazard,
}

/// The empirical CDF of per-round compute time. Warm start: built from a
/// trace; cold start: from the rounds observed so far ([`Cdf::observe`]).
#[derive(Debug, Clone, Default)]
pub struct Cdf {
    sorted: Vec<f64>,
}

impl Cdf {
    /// From samples (any order).
    pub fn from_samples(mut samples: Vec<f64>) -> Cdf {
        samples.retain(|x| x.is_finite());
        samples.sort_by(f64::total_cmp);
        Cdf { sorted: samples }
    }

    /// Adds one observed round.
    pub fn observe(&mut self, x: f64) {
        if x.is_finite() {
            let at = self.sorted.partition_point(|&y| y <= x);
            self.sorted.insert(at, x);
        }
    }

    /// F(t): the share of samples at most `t` (0 with no samples).
    pub fn at(&self, t: f64) -> f64 {
        if self.sorted.is_empty() {
            return 0.0;
        }
        self.sorted.partition_point(|&y| y <= t) as f64 / self.sorted.len() as f64
    }

    /// The chance that a worker `elapsed` seconds into its round is ready
    /// within `dt`.
    pub fn ready_within(&self, elapsed: f64, dt: f64, progress: Progress) -> f64 {
        let later = self.at(elapsed + dt);
        match progress {
            Progress::Paper => later,
            Progress::Hazard => {
                let now = self.at(elapsed);
                if now >= 1.0 {
                    1.0 // past every observed round: due any moment
                } else {
                    ((later - now) / (1.0 - now)).clamp(0.0, 1.0)
                }
            }
        }
    }

    /// Samples held.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// No samples yet.
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }
}

/// The knobs of selective reduce (paper defaults in [`Params::paper`]).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Params {
    /// Least group size.
    pub p: usize,
    /// BAG's bandwidth tolerance.
    pub eta: f64,
    /// BPAWR holds a group when waiting saves more than `theta * dt`.
    pub theta: f64,
    /// The waiting slot, seconds.
    pub dt: f64,
    /// Model bytes (v).
    pub volume: f64,
    /// A full all-reduce every `c` syncs.
    pub c: u64,
    /// Reading of Eq. 4.
    pub progress: Progress,
}

impl Params {
    /// The paper's defaults for n workers (p = 0.3n, eta = 0.3, theta = 1)
    /// and inagg's choices where it gives none (dt = 0.1 s, c = 10).
    pub fn paper(n: usize, volume: f64) -> Params {
        Params {
            p: ((n as f64 * 0.3).round() as usize).max(1),
            eta: 0.3,
            theta: 1.0,
            dt: 0.1,
            volume,
            c: 10,
            progress: Progress::Paper,
        }
    }
}

/// The bandwidth term of Eq. 2 for a group whose slowest member has `min_b`.
fn sync_cost(volume: f64, min_b: f64) -> f64 {
    2.0 * volume / min_b
}

fn min_bandwidth(g: &[Ready]) -> f64 {
    g.iter().map(|w| w.bandwidth).fold(f64::INFINITY, f64::min)
}

/// BPAWR's verdict on one group.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Fewer than p ready: wait.
    TooSmall,
    /// Launch the group now.
    Launch,
    /// Waiting `dt` for the predicted faster workers pays: hold the group,
    /// and hand `moved` (its slowest members, which the better group would
    /// leave out) to the next group.
    Hold { moved: Vec<Ready> },
}

/// BPAWR (Algorithm 2) for group `g`: `training` is S, the computing
/// workers not yet counted on by an earlier group; those predicted here are
/// removed from it.
pub fn bpawr(g: &[Ready], training: &mut Vec<Training>, params: &Params, cdf: &Cdf) -> Verdict {
    if g.len() < params.p {
        return Verdict::TooSmall;
    }
    let slowest = min_bandwidth(g);
    // PREDICTWORKERS (reading Predict-strict): b_i > b^.
    let (faster, rest): (Vec<Training>, Vec<Training>) =
        training.iter().partition(|w| w.bandwidth > slowest);
    *training = rest;
    let chances: Vec<f64> = faster
        .iter()
        .map(|w| cdf.ready_within(w.elapsed, params.dt, params.progress))
        .collect();
    let total: f64 = chances.iter().sum();
    let k = total.floor() as usize;
    if k == 0 {
        return Verdict::Launch;
    }
    let mean_b = faster
        .iter()
        .zip(&chances)
        .map(|(w, c)| w.bandwidth * c)
        .sum::<f64>()
        / total;
    let virtual_id = usize::MAX;
    let mut pool = g.to_vec();
    pool.extend((0..k).map(|_| Ready {
        id: virtual_id,
        bandwidth: mean_b,
    }));
    let best = bag(&pool, params.p, params.eta).swap_remove(0);
    let gain = sync_cost(params.volume, slowest) - sync_cost(params.volume, min_bandwidth(&best));
    if gain > params.theta * params.dt {
        let moved = g
            .iter()
            .filter(|w| !best.iter().any(|b| b.id == w.id))
            .copied()
            .collect();
        Verdict::Hold { moved }
    } else {
        Verdict::Launch
    }
}

/// One pass of Algorithm 3's partial branch: the groups to launch now
/// (readings Loop-bool and Launch-at-p). `ready` is Q, `training` is S;
/// BAG gets them in its own signature's order (reading BAG-args).
pub fn plan(ready: &[Ready], training: &[Training], params: &Params, cdf: &Cdf) -> Vec<Vec<Ready>> {
    if ready.len() < params.p {
        return Vec::new();
    }
    let mut groups = bag(ready, params.p, params.eta);
    let mut s = training.to_vec();
    let mut launch = Vec::new();
    for i in 0..groups.len() {
        let g = std::mem::take(&mut groups[i]);
        match bpawr(&g, &mut s, params, cdf) {
            Verdict::TooSmall => {}
            Verdict::Launch => launch.push(g),
            Verdict::Hold { moved } => {
                if let Some(next) = groups.get_mut(i + 1) {
                    next.extend(moved);
                }
            }
        }
    }
    launch
}

/// The controller of Algorithm 3: every `c`-th sync is a full all-reduce
/// (all n ready), the others are selective groups.
#[derive(Debug, Clone)]
pub struct Controller {
    pub params: Params,
    /// Syncs launched (reading Loop-k: the full ones count).
    pub k: u64,
}

impl Controller {
    pub fn new(params: Params) -> Controller {
        Controller { params, k: 0 }
    }

    /// The groups to launch now, given n workers of which `ready` wait.
    pub fn step(
        &mut self,
        n: usize,
        ready: &[Ready],
        training: &[Training],
        cdf: &Cdf,
    ) -> Vec<Vec<Ready>> {
        let c = self.params.c;
        let full_turn = c > 0 && self.k.is_multiple_of(c);
        let mut launch = if full_turn {
            all_reduce(ready, n)
        } else {
            plan(ready, training, &self.params, cdf)
        };
        if c > 0 && !full_turn {
            // Each group is one sync: several at once must not carry k
            // past the next full turn (the groups beyond it wait for it,
            // as every ready worker does).
            let before_full = c - self.k % c;
            launch.truncate(usize::try_from(before_full).unwrap_or(usize::MAX));
        }
        self.k += launch.len() as u64;
        launch
    }
}

/// The baseline all-reduce, and the controller's periodic full round: all
/// `n` workers together, once every one of them is ready; nothing before.
pub fn all_reduce(ready: &[Ready], n: usize) -> Vec<Vec<Ready>> {
    if ready.len() == n && n > 0 {
        vec![ready.to_vec()]
    } else {
        Vec::new()
    }
}

/// The baseline partial reduce: the first `p` ready workers, in arrival
/// order, whenever `p` wait.
pub fn partial_reduce(ready: &[Ready], p: usize) -> Vec<Vec<Ready>> {
    ready
        .chunks_exact(p.max(1))
        .map(<[Ready]>::to_vec)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(id: usize, b: f64) -> Ready {
        Ready { id, bandwidth: b }
    }

    fn ids(g: &[Ready]) -> Vec<usize> {
        g.iter().map(|w| w.id).collect()
    }

    #[test]
    fn bag_takes_p_then_the_tolerated() {
        let ready = [
            w(0, 10.0),
            w(1, 9.0),
            w(2, 8.0),
            w(3, 6.0),
            w(4, 2.0),
            w(5, 1.9),
        ];
        // p = 2: core {0, 1}, floor 9 * 0.7 = 6.3: 2 joins, 3 does not;
        // then core {3, 4}, floor 2 * 0.7 = 1.4: 5 joins.
        let g = bag(&ready, 2, 0.3);
        assert_eq!(
            g.iter().map(|g| ids(g)).collect::<Vec<_>>(),
            [vec![0, 1, 2], vec![3, 4, 5]]
        );
        // eta = 0: groups of exactly p, except equal bandwidths.
        assert_eq!(bag(&ready, 2, 0.0).len(), 3);
    }

    #[test]
    fn paper_figure3_bandwidth_aware_groups() {
        // Fig. 3: b1 = b3 = 1, b2 = b4 = 5, all four ready: BAG with p = 2
        // pairs the fast with the fast.
        let ready = [w(1, 1.0), w(2, 5.0), w(3, 1.0), w(4, 5.0)];
        let g = bag(&ready, 2, 0.3);
        assert_eq!(
            g.iter().map(|g| ids(g)).collect::<Vec<_>>(),
            [vec![2, 4], vec![1, 3]]
        );
    }

    #[test]
    fn eq4_readings() {
        let cdf = Cdf::from_samples((1..=10).map(f64::from).collect());
        assert_eq!(cdf.at(5.0), 0.5);
        assert_eq!(cdf.ready_within(4.0, 1.0, Progress::Paper), 0.5);
        // P(T <= 5 | T > 4) = (0.5 - 0.4) / 0.6.
        let h = cdf.ready_within(4.0, 1.0, Progress::Hazard);
        assert!((h - 1.0 / 6.0).abs() < 1e-12);
        assert_eq!(cdf.ready_within(20.0, 1.0, Progress::Hazard), 1.0);
        assert_eq!(Cdf::default().at(3.0), 0.0);
    }

    fn params(p: usize) -> Params {
        Params {
            p,
            eta: 0.3,
            theta: 1.0,
            dt: 0.1,
            volume: 500e6,
            c: 10,
            progress: Progress::Paper,
        }
    }

    #[test]
    fn bpawr_holds_for_fast_workers_about_to_finish() {
        // The group's slowest has 1 GB/s; a 10 GB/s worker is certain to be
        // ready within dt: waiting replaces the slow one and saves ~0.9 s.
        let cdf = Cdf::from_samples(vec![1.0; 10]);
        let g = [w(0, 10e9), w(1, 1e9)];
        let mut s = vec![Training {
            id: 2,
            bandwidth: 10e9,
            elapsed: 0.95,
        }];
        let v = bpawr(&g, &mut s, &params(2), &cdf);
        assert_eq!(
            v,
            Verdict::Hold {
                moved: vec![w(1, 1e9)]
            }
        );
        assert!(s.is_empty(), "the predicted worker is counted on once");
        // Not about to finish: launch.
        let mut s = vec![Training {
            id: 2,
            bandwidth: 10e9,
            elapsed: 0.1,
        }];
        assert_eq!(bpawr(&g, &mut s, &params(2), &cdf), Verdict::Launch);
        // A slower predicted worker is no gain.
        let mut s = vec![Training {
            id: 2,
            bandwidth: 0.5e9,
            elapsed: 0.95,
        }];
        assert_eq!(bpawr(&g, &mut s, &params(2), &cdf), Verdict::Launch);
        assert_eq!(
            bpawr(&g[..1], &mut Vec::new(), &params(2), &cdf),
            Verdict::TooSmall
        );
    }

    #[test]
    fn controller_runs_full_every_c() {
        let cdf = Cdf::default();
        let mut c = Controller::new(params(2));
        let ready = [w(0, 5.0), w(1, 4.0), w(2, 3.0)];
        // k = 0: a full all-reduce, only once all 3 are ready.
        assert!(c.step(3, &ready[..2], &[], &cdf).is_empty());
        assert_eq!(c.step(3, &ready, &[], &cdf).len(), 1);
        assert_eq!(c.k, 1);
        // Then selective groups.
        let g = c.step(3, &ready, &[], &cdf);
        assert_eq!(
            g.iter().map(|g| ids(g)).collect::<Vec<_>>(),
            [vec![0, 1, 2]]
        );
        assert_eq!(partial_reduce(&ready, 2).len(), 1);
    }

    /// Several selective groups ready at once never step over a full
    /// turn: at k = c - 1 one of them goes, and the next sync is the full
    /// all-reduce (a loaded machine, where more workers wait at once,
    /// once had a 3-worker group take step c).
    #[test]
    fn groups_launched_together_stop_at_the_full_turn() {
        let cdf = Cdf::default();
        let mut c = Controller::new(Params { c: 4, ..params(2) });
        c.k = 3;
        let ready = [w(0, 5.0), w(1, 5.0), w(2, 1.0), w(3, 1.0)];
        assert_eq!(
            plan(&ready, &[], &c.params, &cdf).len(),
            2,
            "two groups planned"
        );
        let g = c.step(4, &ready, &[], &cdf);
        assert_eq!(g.len(), 1, "only the group before the full turn: {g:?}");
        assert_eq!(c.k, 4);
        let full = c.step(4, &ready, &[], &cdf);
        assert_eq!(
            full.iter().map(|g| ids(g)).collect::<Vec<_>>(),
            [vec![0, 1, 2, 3]]
        );
    }

    #[test]
    fn all_reduce_waits_for_every_worker() {
        let ready = [w(3, 1.0), w(0, 5.0), w(1, 4.0)];
        assert!(all_reduce(&ready[..2], 3).is_empty());
        assert_eq!(
            all_reduce(&ready, 3)
                .iter()
                .map(|g| ids(g))
                .collect::<Vec<_>>(),
            [vec![3, 0, 1]]
        );
        assert!(all_reduce(&[], 0).is_empty(), "no workers, no round");
    }
}
