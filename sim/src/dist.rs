//! Random draws for the scenarios: compute times and bandwidths, from a
//! seeded generator so that every run is deterministic for its seed.
//!
//! The papers draw per-round compute times from traces that are not at hand
//! (the figures that showed them did not survive in the seed text). Each
//! [`Compute`] here is a documented stand-in: a log-normal with the stated
//! mean and coefficient of variation, plus, for cloud machines, a share of
//! rounds slowed by interference. REPRODUCTION.md lists them.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The generator every scenario uses.
pub type SimRng = ChaCha8Rng;

/// A generator for trial `trial` of a run seeded with `seed`.
pub fn rng(seed: u64, trial: u64) -> SimRng {
    ChaCha8Rng::seed_from_u64(seed ^ trial.wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// A standard normal draw (Box-Muller).
pub fn normal(rng: &mut SimRng) -> f64 {
    let u1: f64 = rng.random::<f64>().max(f64::MIN_POSITIVE);
    let u2: f64 = rng.random();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// A per-round compute-time distribution (seconds).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Compute {
    /// What it stands in for.
    pub name: &'static str,
    /// Mean of the log-normal body, seconds.
    pub mean: f64,
    /// Its coefficient of variation.
    pub cv: f64,
    /// Share of rounds slowed by interference.
    pub tail_share: f64,
    /// How much slower those rounds are (a factor drawn in [1, this]).
    pub tail_factor: f64,
}

impl Compute {
    /// Stand-in for selective reduce's CNN trace (ResNet-50 / ImageNet on
    /// a cloud instance with 2 V100s): steady work, cloud interference.
    pub const CNN: Compute = Compute {
        name: "CNN (ResNet-50, 2xV100 cloud)",
        mean: 0.40,
        cv: 0.10,
        tail_share: 0.05,
        tail_factor: 3.0,
    };
    /// Stand-in for selective reduce's Transformer trace (WMT16 on a P100):
    /// the spread comes from sentence lengths.
    pub const TRANSFORMER: Compute = Compute {
        name: "Transformer (WMT16, P100)",
        mean: 0.60,
        cv: 0.40,
        tail_share: 0.0,
        tail_factor: 1.0,
    };

    /// SELMCAST's SSP traces: mean 1000 ms with the spread of each model.
    pub const fn ssp(name: &'static str, cv: f64) -> Compute {
        Compute {
            name,
            mean: 1.0,
            cv,
            tail_share: 0.0,
            tail_factor: 1.0,
        }
    }

    /// One draw.
    pub fn sample(&self, rng: &mut SimRng) -> f64 {
        let s2 = (1.0 + self.cv * self.cv).ln();
        let mu = self.mean.ln() - s2 / 2.0;
        let mut t = (mu + s2.sqrt() * normal(rng)).exp();
        if self.tail_share > 0.0 && rng.random::<f64>() < self.tail_share {
            t *= rng.random_range(1.0..=self.tail_factor.max(1.0));
        }
        t
    }

    /// `n` draws (a warm-start trace).
    pub fn samples(&self, rng: &mut SimRng, n: usize) -> Vec<f64> {
        (0..n).map(|_| self.sample(rng)).collect()
    }
}

/// Gbit/s to bytes/s.
pub fn gbps(x: f64) -> f64 {
    x * 1e9 / 8.0
}

/// Mbit/s to bytes/s.
pub fn mbps(x: f64) -> f64 {
    x * 1e6 / 8.0
}

/// `x` drawn uniformly from [lo, hi].
pub fn uniform(rng: &mut SimRng, lo: f64, hi: f64) -> f64 {
    if hi > lo {
        rng.random_range(lo..=hi)
    } else {
        lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_ins_have_their_stated_mean_and_spread() {
        let mut r = rng(7, 0);
        let xs = Compute::TRANSFORMER.samples(&mut r, 200_000);
        let mean = xs.iter().sum::<f64>() / xs.len() as f64;
        let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64).sqrt();
        assert!((mean - 0.6).abs() < 0.01, "{mean}");
        assert!((sd / mean - 0.4).abs() < 0.02, "{}", sd / mean);
        assert!(xs.iter().all(|&x| x > 0.0));
    }

    #[test]
    fn seeds_are_deterministic_and_trials_differ() {
        let a: f64 = rng(1, 0).random();
        assert_eq!(a, rng(1, 0).random::<f64>());
        assert_ne!(a, rng(1, 1).random::<f64>());
    }
}
