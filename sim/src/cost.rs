//! Cost models of one synchronisation among a group of workers.
//!
//! In the selective-reduce setup every worker belongs to at most one group
//! at a time, so the edge links a group uses are its own and the fair-share
//! flow model reduces to these closed forms (each ring step is bounded by
//! its slowest hop; every step moves v/|g| bytes per worker).

/// How a group synchronises.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum CostModel {
    /// Ring all-reduce (Eq. 2 of selective reduce):
    /// `2(|g|-1) alpha + 2 (|g|-1)/|g| v / min b`.
    Ring { alpha: f64 },
    /// In-network aggregation: each worker sends v once and receives the
    /// sum once at its own rate, pipelined: `v / min b + rtt`, whatever
    /// |g| is.
    Ina { rtt: f64 },
}

impl CostModel {
    /// Seconds to synchronise `volume` bytes among workers of the given
    /// bandwidths (bytes/s). A group of one has nothing to exchange.
    pub fn sync_time(&self, bandwidths: &[f64], volume: f64) -> f64 {
        let g = bandwidths.len();
        if g < 2 {
            return 0.0;
        }
        let min_b = bandwidths.iter().copied().fold(f64::INFINITY, f64::min);
        let g = g as f64;
        match *self {
            CostModel::Ring { alpha } => {
                2.0 * (g - 1.0) * alpha + 2.0 * (g - 1.0) / g * volume / min_b
            }
            CostModel::Ina { rtt } => volume / min_b + rtt,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_is_eq2_and_ina_does_not_grow_with_the_group() {
        let ring = CostModel::Ring { alpha: 0.001 };
        // 4 workers, slowest 1 GB/s, 1 GB: 6 ms + 1.5 s.
        let t = ring.sync_time(&[1e9, 2e9, 3e9, 4e9], 1e9);
        assert!((t - 1.506).abs() < 1e-12, "{t}");
        let ina = CostModel::Ina { rtt: 0.0001 };
        let a = ina.sync_time(&[1e9; 4], 1e9);
        let b = ina.sync_time(&[1e9; 64], 1e9);
        assert_eq!(a, b);
        assert!(a < ring.sync_time(&[1e9; 4], 1e9));
        assert_eq!(ring.sync_time(&[1e9], 1e9), 0.0);
    }
}
