//! Checking all-reduce results: exact for int32, within the documented
//! bound (host-agent's `Float::error_bound`, `quant::error_bound` for
//! binary32) for floats, NaN where any input chunk was non-finite.

use inagg_host_agent::float::{is_correct, Float};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Outcome of a float check.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FloatCheck {
    /// Every element of every worker passed.
    pub verified: bool,
    /// Elements outside the bound (or not NaN where NaN was due).
    pub failures: u64,
    /// Largest |result - f64 reference|.
    pub max_abs_error: f64,
    /// Largest error as a fraction of its bound (<= 1 passes).
    pub max_bound_fraction: f64,
    /// First failing (worker, element), for the message.
    pub first_failure: Option<(usize, usize)>,
}

/// A synthetic gradient: values of mixed sign whose magnitude varies by
/// orders of magnitude across the tensor, deterministic in (seed, worker).
pub fn gradient(seed: u64, worker: usize, len: usize) -> Vec<f32> {
    let mut rng =
        ChaCha8Rng::seed_from_u64(seed ^ (worker as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    (0..len)
        .map(|i| {
            let magnitude = 10f32.powi((i / 4096 % 7) as i32 - 4);
            (rng.random::<f32>() * 2.0 - 1.0) * magnitude
        })
        .collect()
}

/// Checks every worker's result against the f64 sum of the inputs, of a
/// job with K = `k` elements per packet (each block exponent covers a
/// packet's K - 1 values; docs/PROTOCOL.md, "The check lane").
pub fn check_f32(inputs: &[Vec<f32>], outputs: &[Vec<f32>], k: usize) -> FloatCheck {
    check_float(inputs, outputs, k)
}

/// [`check_f32`] for any float format. A 16-bit sum past the format's
/// range must be the infinity of its sign, unless it could have rounded
/// below the largest finite value (then either passes).
pub fn check_float<T: Float>(inputs: &[Vec<T>], outputs: &[Vec<T>], k: usize) -> FloatCheck {
    let n = inputs.len() as u16;
    let len = inputs[0].len();
    let mut c = FloatCheck {
        verified: true,
        ..FloatCheck::default()
    };
    let chunk = k.saturating_sub(1).max(1);
    for start in (0..len).step_by(chunk) {
        let end = (start + chunk).min(len);
        let e = inputs
            .iter()
            .map(|x| T::block_exponent(&x[start..end]))
            .max()
            .unwrap_or(0);
        for i in start..end {
            let exact: f64 = inputs.iter().map(|x| f64::from(x[i].to_f32())).sum();
            let bound = T::error_bound(e, n, exact);
            for (w, out) in outputs.iter().enumerate() {
                let got = f64::from(out[i].to_f32());
                let ok = if e == inagg_wire::EXPONENT_NON_FINITE {
                    got.is_nan()
                } else {
                    if got.is_finite() {
                        let err = (got - exact).abs();
                        c.max_abs_error = c.max_abs_error.max(err);
                        c.max_bound_fraction = c.max_bound_fraction.max(err / bound);
                    }
                    is_correct(out[i], exact, bound)
                };
                if !ok {
                    c.verified = false;
                    c.failures += 1;
                    c.first_failure.get_or_insert((w, i));
                }
            }
        }
    }
    c
}

/// Checks int32 results for exact (wrapping) equality with the sum.
pub fn check_i32(inputs: &[Vec<i32>], outputs: &[Vec<i32>]) -> Result<(), String> {
    for i in 0..inputs[0].len() {
        let want = inputs.iter().fold(0i32, |a, x| a.wrapping_add(x[i]));
        for (w, out) in outputs.iter().enumerate() {
            if out[i] != want {
                return Err(format!(
                    "worker {w} element {i}: got {} want {want}",
                    out[i]
                ));
            }
        }
    }
    Ok(())
}
