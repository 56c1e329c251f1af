//! The faults an emulator injects (its control endpoint sets them): drop,
//! duplication and reordering probabilities, and the seed that replays them.

use serde::{Deserialize, Serialize};

/// Fault probabilities (each in [0, 1]) and the seed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct FaultConfig {
    /// Drop probability for packets arriving at the switch.
    pub drop_ingress: f64,
    /// Drop probability for each packet (each copy) the switch sends.
    pub drop_egress: f64,
    /// Probability that a packet is duplicated (each direction).
    pub duplicate: f64,
    /// Probability that a packet is held back one place (each direction).
    pub reorder: f64,
    /// RNG seed; the same seed and traffic give the same faults.
    pub seed: u64,
}

impl FaultConfig {
    /// The same loss in both directions, nothing else.
    pub fn loss(p: f64, seed: u64) -> FaultConfig {
        FaultConfig {
            drop_ingress: p,
            drop_egress: p,
            seed,
            ..FaultConfig::default()
        }
    }

    /// Checks every probability is a number in [0, 1].
    pub fn validate(&self) -> Result<(), String> {
        for (name, p) in [
            ("drop_ingress", self.drop_ingress),
            ("drop_egress", self.drop_egress),
            ("duplicate", self.duplicate),
            ("reorder", self.reorder),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(format!("{name} = {p} is not a probability in [0, 1]"));
            }
        }
        Ok(())
    }

    /// Whether any fault is switched on.
    pub fn any(&self) -> bool {
        self.drop_ingress > 0.0
            || self.drop_egress > 0.0
            || self.duplicate > 0.0
            || self.reorder > 0.0
    }
}
