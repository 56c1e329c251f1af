//! Seeded fault injection: what tc netem would do on a real link, done inside
//! the emulator so it runs anywhere (this machine has no netem) and replays
//! exactly from its seed.
//!
//! Each direction (ingress: worker to switch; egress: switch to worker, per
//! multicast copy) draws, per packet: drop with its probability; otherwise
//! duplicate (the copy follows at once) and reorder (the packet is held and
//! released right after the next packet in the same direction, or when the
//! emulator finds its socket idle for a millisecond). Reordering is bounded
//! to one position on purpose: the protocol tolerates any reordering within a
//! round trip, which is what real multipath fabrics produce.

pub use inagg_switch_api::faults::FaultConfig;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Which way a packet travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Worker to switch.
    Ingress,
    /// Switch to worker.
    Egress,
}

/// What happens to one packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Lost.
    Drop,
    /// Delivered, possibly twice, possibly one place late.
    Pass {
        /// Deliver a second copy right after.
        duplicate: bool,
        /// Hold it back one place.
        reorder: bool,
    },
}

/// The injector: settings plus a ChaCha RNG seeded from them.
#[derive(Debug, Clone)]
pub struct FaultInjector {
    config: FaultConfig,
    rng: ChaCha8Rng,
}

impl FaultInjector {
    /// An injector seeded from `config.seed`.
    pub fn new(config: FaultConfig) -> FaultInjector {
        FaultInjector {
            config,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
        }
    }

    /// Current settings.
    pub fn config(&self) -> FaultConfig {
        self.config
    }

    /// Decides one packet's fate. Draws nothing when faults are off, so the
    /// fault-free fast path costs one branch.
    pub fn decide(&mut self, direction: Direction) -> Fate {
        if !self.config.any() {
            return Fate::Pass {
                duplicate: false,
                reorder: false,
            };
        }
        let drop = match direction {
            Direction::Ingress => self.config.drop_ingress,
            Direction::Egress => self.config.drop_egress,
        };
        if self.rng.random_bool(drop) {
            return Fate::Drop;
        }
        Fate::Pass {
            duplicate: self.rng.random_bool(self.config.duplicate),
            reorder: self.rng.random_bool(self.config.reorder),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_fates() {
        let cfg = FaultConfig {
            drop_ingress: 0.3,
            drop_egress: 0.1,
            duplicate: 0.2,
            reorder: 0.2,
            seed: 42,
        };
        let run = || {
            let mut f = FaultInjector::new(cfg);
            (0..200)
                .map(|i| {
                    f.decide(if i % 2 == 0 {
                        Direction::Ingress
                    } else {
                        Direction::Egress
                    })
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(), run());
    }

    #[test]
    fn drop_rate_is_close_to_the_setting() {
        let mut f = FaultInjector::new(FaultConfig::loss(0.1, 7));
        let drops = (0..100_000)
            .filter(|_| f.decide(Direction::Ingress) == Fate::Drop)
            .count();
        assert!((9_000..11_000).contains(&drops), "{drops}");
    }

    #[test]
    fn probabilities_are_validated() {
        let bad = FaultConfig {
            reorder: 1.5,
            ..FaultConfig::default()
        };
        assert_eq!(
            bad.validate().unwrap_err(),
            "reorder = 1.5 is not a probability in [0, 1]"
        );
        assert!(FaultConfig {
            drop_egress: f64::NAN,
            ..FaultConfig::default()
        }
        .validate()
        .is_err());
    }
}
