//! Block floating point: float gradients to int32 and back, with one shared
//! exponent per chunk so the switch's integer sum cannot overflow.
//!
//! The exponent on the wire is the IEEE-754 binary32 *biased* exponent `b` of
//! the chunk's largest magnitude: every |x| in the chunk is below 2^(b-126).
//! Non-finite values have b = 255, so the switch's max-reduce carries "this
//! chunk holds NaN or Inf" to every worker for free.
//!
//! With the agreed (max) exponent b and n workers, E = b - 126 and
//!
//! ```text
//! scale = (2^31 - 1) / (n * 2^E),   q = clamp(round(x * scale), -L, L),   L = floor((2^31 - 1) / n)
//! ```
//!
//! so |q| <= L and the sum of n contributions stays within int32: no overflow
//! by construction. Products are formed in f64, so the only errors are the
//! rounding to an integer (at most one quantum 1/scale per worker, the clamp
//! included) and the final rounding of the result to f32:
//!
//! ```text
//! |result - exact sum| <= n^2 * 2^E / (2^31 - 1) + 2^-23 * |exact sum|
//! ```
//!
//! [`error_bound`] computes it; the tests and the demo check every element
//! against it. Relative to the chunk's largest magnitude m (2^E <= 2m) the
//! first term is at most 2 n^2 m / (2^31 - 1), about 3e-8 * m at n = 8.

use inagg_wire::EXPONENT_NON_FINITE;

/// 2^31 - 1.
const INT_MAX: f64 = i32::MAX as f64;

/// The block exponent of a chunk: the biased binary32 exponent of its largest
/// magnitude (0 for all zeros, 255 if any value is NaN or infinite).
pub fn block_exponent(chunk: &[f32]) -> u8 {
    // On the bit patterns with the sign cleared, integer order is magnitude
    // order, and NaN/Inf sort above every finite value.
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports AVX2.
        return (unsafe { simd::max_magnitude_bits(chunk) } >> 23) as u8;
    }
    (max_magnitude_bits_scalar(chunk) >> 23) as u8
}

fn max_magnitude_bits_scalar(chunk: &[f32]) -> u32 {
    chunk
        .iter()
        .fold(0u32, |m, x| m.max(x.to_bits() & 0x7fff_ffff))
}

/// The scale for an agreed exponent and `workers` contributors.
pub fn scale(exponent: u8, workers: u16) -> f64 {
    let e = i32::from(exponent) - 126;
    INT_MAX / (f64::from(workers) * pow2(e))
}

/// 2^e, exactly, for the exponents a block can have (-126..=129): built from
/// its bits rather than by `powi`'s multiply loop, which showed up in
/// profiles of the per-chunk path.
fn pow2(e: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&e));
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The largest |q| one worker may contribute.
fn limit(workers: u16) -> f64 {
    (INT_MAX / f64::from(workers)).floor()
}

/// The documented bound on |result - exact sum| for one element.
pub fn error_bound(exponent: u8, workers: u16, exact_sum: f64) -> f64 {
    let n = f64::from(workers);
    let e = i32::from(exponent) - 126;
    n * n * pow2(e) / INT_MAX + exact_sum.abs() * pow2(-23)
}

/// Quantizes `chunk` with the agreed exponent into `out` (big-endian int32,
/// `out.len() / 4 >= chunk.len()`), zero-padding the rest. A non-finite
/// exponent sends zeros: the result is replaced by NaN on every worker.
///
/// Returns the [`inagg_wire::frame::ones_sum_native`] sum of `out`, taken
/// while writing it (the UDP checksum of a raw-Ethernet frame).
pub fn quantize(chunk: &[f32], exponent: u8, workers: u16, out: &mut [u8]) -> u64 {
    quantize_with(
        chunk,
        exponent,
        || scale(exponent, workers),
        limit(workers),
        out,
    )
}

/// Dequantizes the first `out.len()` elements of a result payload.
pub fn dequantize(payload: &[u8], exponent: u8, workers: u16, out: &mut [f32]) {
    dequantize_with(payload, exponent, || 1.0 / scale(exponent, workers), out)
}

/// [`quantize`] with the scale computed only for a finite exponent.
fn quantize_with(
    chunk: &[f32],
    exponent: u8,
    scale: impl FnOnce() -> f64,
    limit: f64,
    out: &mut [u8],
) -> u64 {
    debug_assert!(out.len() >= chunk.len() * 4);
    let (body, pad) = out.split_at_mut(chunk.len() * 4);
    pad.fill(0);
    if exponent == EXPONENT_NON_FINITE {
        body.fill(0);
        return 0;
    }
    dispatch_quantize(chunk, scale(), limit, body)
}

/// [`dequantize`] with the inverse scale computed only for a finite exponent.
fn dequantize_with(payload: &[u8], exponent: u8, inv: impl FnOnce() -> f64, out: &mut [f32]) {
    debug_assert!(payload.len() >= out.len() * 4);
    if exponent == EXPONENT_NON_FINITE {
        out.fill(f32::NAN);
        return;
    }
    dispatch_dequantize(&payload[..out.len() * 4], inv(), out);
}

/// [`quantize`] and [`dequantize`] for one worker count, with each
/// exponent's scale and its inverse computed on first use: the per-packet
/// path then costs no division (two 64-bit divisions were a tenth of the
/// DPDK agent's float path at K = 64). The values are those of [`scale`],
/// bit for bit.
#[derive(Debug, Clone)]
pub struct Scales {
    workers: u16,
    limit: f64,
    /// `scale(e, workers)` at index e; 0 where not yet computed (a scale
    /// is never 0).
    scale: [f64; 256],
    /// `1 / scale(e, workers)`, likewise.
    inv: [f64; 256],
}

impl Scales {
    /// An empty table for `workers` contributors.
    pub fn new(workers: u16) -> Scales {
        Scales {
            workers,
            limit: limit(workers),
            scale: [0.0; 256],
            inv: [0.0; 256],
        }
    }

    fn scale(&mut self, exponent: u8) -> f64 {
        let s = &mut self.scale[usize::from(exponent)];
        if *s == 0.0 {
            *s = scale(exponent, self.workers);
        }
        *s
    }

    fn inv(&mut self, exponent: u8) -> f64 {
        let i = usize::from(exponent);
        if self.inv[i] == 0.0 {
            self.inv[i] = 1.0 / self.scale(exponent);
        }
        self.inv[i]
    }

    /// [`quantize`] with this table.
    pub fn quantize(&mut self, chunk: &[f32], exponent: u8, out: &mut [u8]) -> u64 {
        let limit = self.limit;
        quantize_with(chunk, exponent, || self.scale(exponent), limit, out)
    }

    /// [`dequantize`] with this table.
    pub fn dequantize(&mut self, payload: &[u8], exponent: u8, out: &mut [f32]) {
        dequantize_with(payload, exponent, || self.inv(exponent), out)
    }
}

/// The scalar quantizer; returns the checksum sum of what it wrote.
#[inline(always)]
fn quantize_body(chunk: &[f32], s: f64, l: f64, out: &mut [u8]) -> u64 {
    let mut sum = 0;
    for (x, o) in chunk.iter().zip(out.chunks_exact_mut(4)) {
        let q = (f64::from(*x) * s).round_ties_even().clamp(-l, l) as i32;
        let bytes = q.to_be_bytes();
        o.copy_from_slice(&bytes);
        sum += u64::from(u32::from_ne_bytes(bytes));
    }
    sum
}

#[inline(always)]
fn dequantize_body(payload: &[u8], inv: f64, out: &mut [f32]) {
    for (b, y) in payload.chunks_exact(4).zip(out.iter_mut()) {
        let q = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        *y = (f64::from(q) * inv) as f32;
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    //! AVX2 kernels with exactly the scalar loops' arithmetic: f64 products,
    //! round-half-even (the default MXCSR mode of `vcvtpd2dq`), the same
    //! clamp, and a `vpshufb` byte swap to network order. Eight elements per
    //! step; the scalar body finishes the tail.
    use inagg_wire::payload::simd::{add_halves, lanes_sum, swap_mask};
    use std::arch::x86_64::*;

    /// Chunks of at least this many elements are dequantized with streaming
    /// stores.
    const STREAM_MIN: usize = 1024;

    /// Returns the checksum sum of what it wrote (as `quantize` does).
    ///
    /// # Safety
    /// The CPU must support AVX2; `out.len() >= chunk.len() * 4`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn quantize(chunk: &[f32], s: f64, l: f64, out: &mut [u8]) -> u64 {
        let whole = chunk.len() / 8 * 8;
        let (vs, hi, lo) = (_mm256_set1_pd(s), _mm256_set1_pd(l), _mm256_set1_pd(-l));
        let swap = swap_mask();
        let mut acc = _mm256_setzero_si256();
        for i in (0..whole).step_by(8) {
            let x = _mm256_loadu_ps(chunk.as_ptr().add(i));
            let a = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
            let b = _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(x));
            // Clamping before rounding equals rounding before clamping: l is an integer.
            let a = _mm256_min_pd(_mm256_max_pd(_mm256_mul_pd(a, vs), lo), hi);
            let b = _mm256_min_pd(_mm256_max_pd(_mm256_mul_pd(b, vs), lo), hi);
            let q = _mm256_set_m128i(_mm256_cvtpd_epi32(b), _mm256_cvtpd_epi32(a));
            let q = _mm256_shuffle_epi8(q, swap);
            _mm256_storeu_si256(out.as_mut_ptr().add(i * 4).cast(), q);
            acc = add_halves(acc, q);
        }
        lanes_sum(acc) + super::quantize_body(&chunk[whole..], s, l, &mut out[whole * 4..])
    }

    /// # Safety
    /// The CPU must support AVX2; `payload.len() >= out.len() * 4`.
    ///
    /// The result goes to the caller's tensor and is not read again soon, so
    /// the whole aligned vectors of a large chunk are written with
    /// non-temporal stores: no read-for-ownership of the destination and no
    /// eviction of the packets still in flight. A small chunk (K = 64 on a
    /// Tofino-sized packet) is stored normally: the fence that must follow
    /// streaming stores waits for them to reach memory, and cost more than
    /// the whole conversion (the DPDK loopback agent at K = 64: 470 ns per
    /// packet with streaming stores, 200 ns without).
    #[target_feature(enable = "avx2")]
    pub unsafe fn dequantize(payload: &[u8], inv: f64, out: &mut [f32]) {
        // Streaming stores need 32-byte alignment: scalar up to a boundary
        // of `out` first. Ordinary stores do not, and a small chunk of an
        // unaligned tensor would otherwise spend its head and tail (up to
        // 14 of K = 64 elements) in the scalar loop.
        let stream = out.len() >= STREAM_MIN;
        let head = if stream {
            out.as_ptr().align_offset(32).min(out.len())
        } else {
            0
        };
        super::dequantize_body(&payload[..head * 4], inv, &mut out[..head]);
        let whole = head + (out.len() - head) / 8 * 8;
        let vinv = _mm256_set1_pd(inv);
        let swap = swap_mask();
        for i in (head..whole).step_by(8) {
            let q = _mm256_loadu_si256(payload.as_ptr().add(i * 4).cast());
            let q = _mm256_shuffle_epi8(q, swap);
            let a = _mm256_cvtepi32_pd(_mm256_castsi256_si128(q));
            let b = _mm256_cvtepi32_pd(_mm256_extracti128_si256::<1>(q));
            let y = _mm256_set_m128(
                _mm256_cvtpd_ps(_mm256_mul_pd(b, vinv)),
                _mm256_cvtpd_ps(_mm256_mul_pd(a, vinv)),
            );
            if stream {
                _mm256_stream_ps(out.as_mut_ptr().add(i), y);
            } else {
                _mm256_storeu_ps(out.as_mut_ptr().add(i), y);
            }
        }
        if stream {
            // Order the streaming stores before anything the caller does next.
            _mm_sfence();
        }
        super::dequantize_body(&payload[whole * 4..], inv, &mut out[whole..]);
    }

    /// The largest magnitude's bit pattern (sign cleared) in `chunk`.
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[target_feature(enable = "avx2")]
    pub unsafe fn max_magnitude_bits(chunk: &[f32]) -> u32 {
        let whole = chunk.len() / 8 * 8;
        let abs = _mm256_set1_epi32(0x7fff_ffff);
        let mut m = _mm256_setzero_si256();
        for i in (0..whole).step_by(8) {
            let x = _mm256_loadu_si256(chunk.as_ptr().add(i).cast());
            m = _mm256_max_epu32(m, _mm256_and_si256(x, abs));
        }
        let mut lanes = [0u32; 8];
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), m);
        let tail = super::max_magnitude_bits_scalar(&chunk[whole..]);
        lanes.iter().fold(tail, |a, &b| a.max(b))
    }
}

fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return inagg_wire::payload::simd::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}

fn dispatch_quantize(chunk: &[f32], s: f64, l: f64, out: &mut [u8]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports the features the function is compiled for.
        return unsafe { simd::quantize(chunk, s, l, out) };
    }
    quantize_body(chunk, s, l, out)
}

fn dispatch_dequantize(payload: &[u8], inv: f64, out: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports the features the function is compiled for.
        return unsafe { simd::dequantize(payload, inv, out) };
    }
    dequantize_body(payload, inv, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use inagg_wire::payload::{add_i32s, read_i32s};

    /// Simulates the switch: every worker quantizes its chunk with the agreed
    /// exponent, the int32 payloads are summed with wrapping adds, and the
    /// result is dequantized. Returns the result and the agreed exponent.
    fn aggregate(chunks: &[Vec<f32>]) -> (Vec<f32>, u8) {
        let n = chunks.len() as u16;
        let k = chunks[0].len();
        let e = chunks.iter().map(|c| block_exponent(c)).max().unwrap();
        let mut acc = vec![0i32; k];
        let mut buf = vec![0u8; k * 4];
        for c in chunks {
            quantize(c, e, n, &mut buf);
            add_i32s(&mut acc, &buf);
        }
        let mut bytes = vec![0u8; k * 4];
        inagg_wire::payload::write_i32s(&mut bytes, &acc);
        let mut out = vec![0f32; k];
        dequantize(&bytes, e, n, &mut out);
        (out, e)
    }

    fn check(chunks: &[Vec<f32>]) {
        let (out, e) = aggregate(chunks);
        let n = chunks.len() as u16;
        for i in 0..out.len() {
            let exact: f64 = chunks.iter().map(|c| f64::from(c[i])).sum();
            let err = (f64::from(out[i]) - exact).abs();
            let bound = error_bound(e, n, exact);
            assert!(
                err <= bound,
                "element {i}: got {} want {exact} err {err} > bound {bound}",
                out[i]
            );
        }
    }

    #[test]
    fn exponents_of_special_chunks() {
        assert_eq!(block_exponent(&[0.0, -0.0]), 0);
        assert_eq!(block_exponent(&[1.0]), 127);
        assert_eq!(block_exponent(&[-3.0, 1.0]), 128);
        assert_eq!(block_exponent(&[1.0, f32::NAN]), 255);
        assert_eq!(block_exponent(&[f32::NEG_INFINITY]), 255);
        assert_eq!(block_exponent(&[f32::MAX]), 254);
        assert_eq!(block_exponent(&[f32::from_bits(1)]), 0);
    }

    #[test]
    fn zeros_stay_zero() {
        let (out, _) = aggregate(&[vec![0.0; 8], vec![0.0; 8]]);
        assert!(out.iter().all(|&x| x == 0.0));
    }

    #[test]
    fn mixed_signs_and_magnitudes_within_bound() {
        let a: Vec<f32> = (0..64)
            .map(|i| ((i as f32) * 0.37).sin() * 10f32.powi(i % 7 - 3))
            .collect();
        let b: Vec<f32> = (0..64).map(|i| -((i as f32) * 1.3).cos() * 2.5).collect();
        let c: Vec<f32> = (0..64)
            .map(|i| if i % 2 == 0 { 1e-3 } else { -7.0 })
            .collect();
        check(&[a.clone(), b.clone(), c.clone()]);
        check(&[
            a,
            b,
            c.clone(),
            c.clone(),
            c.clone(),
            c.clone(),
            c.clone(),
            c,
        ]);
    }

    #[test]
    fn tiny_and_huge_values() {
        check(&[
            vec![1e-30, -3e-31, 0.0, 1e-38],
            vec![2e-30, 1e-30, 5e-39, -1e-38],
        ]);
        check(&[
            vec![1.5e38, -3e38, 1.0, 0.0],
            vec![1.5e38, 3e38, -1.0, f32::MAX],
        ]);
        check(&[vec![f32::from_bits(1); 4], vec![f32::from_bits(7); 4]]);
    }

    #[test]
    fn extremes_do_not_overflow_the_integer_sum() {
        for n in [1u16, 2, 3, 7, 8, 64] {
            let chunks: Vec<Vec<f32>> = (0..n)
                .map(|_| vec![f32::MAX, -f32::MAX, 1.0, 0.999_999_9])
                .collect();
            let e = block_exponent(&chunks[0]);
            let mut buf = vec![0u8; 16];
            let mut total = [0i64; 4];
            for c in &chunks {
                quantize(c, e, n, &mut buf);
                let mut q = [0i32; 4];
                read_i32s(&buf, &mut q);
                for i in 0..4 {
                    total[i] += i64::from(q[i]);
                }
            }
            assert!(
                total
                    .iter()
                    .all(|t| (i64::from(i32::MIN)..=i64::from(i32::MAX)).contains(t)),
                "n={n}: {total:?}"
            );
            // Sums that stay finite in f32 are also within the bound.
            let m = f32::MAX / f32::from(n);
            check(
                &(0..n)
                    .map(|_| vec![m, -m, 1.0, 0.999_999_9])
                    .collect::<Vec<_>>(),
            );
        }
    }

    #[test]
    fn non_finite_chunk_becomes_nan_everywhere() {
        let (out, e) = aggregate(&[vec![1.0, 2.0, 3.0], vec![f32::INFINITY, 0.0, 0.0]]);
        assert_eq!(e, EXPONENT_NON_FINITE);
        assert!(out.iter().all(|x| x.is_nan()));
        let (out, _) = aggregate(&[vec![f32::NAN, 2.0], vec![1.0, 1.0]]);
        assert!(out.iter().all(|x| x.is_nan()));
    }

    #[test]
    fn partial_chunk_is_zero_padded() {
        let mut out = [0xa5u8; 16];
        quantize(&[1.0, -1.0], 127, 1, &mut out);
        assert_eq!(&out[8..], &[0u8; 8]);
        let mut back = [0f32; 2];
        dequantize(&out, 127, 1, &mut back);
        assert!((back[0] - 1.0).abs() < 1e-6 && (back[1] + 1.0).abs() < 1e-6);
    }

    #[test]
    fn the_scale_table_gives_the_free_functions_bits() {
        let x: Vec<f32> = (0..70).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let mut table = Scales::new(5);
        for e in [0, 1, 100, 128, 129, 254, EXPONENT_NON_FINITE] {
            // Twice: the first use fills the entry, the second reads it.
            for _ in 0..2 {
                let (mut a, mut b) = (vec![0u8; 288], vec![0u8; 288]);
                let sum = table.quantize(&x, e, &mut a);
                assert_eq!(sum, quantize(&x, e, 5, &mut b), "exponent {e}");
                assert_eq!(a, b, "exponent {e}");
                let (mut ya, mut yb) = (vec![0f32; 70], vec![0f32; 70]);
                table.dequantize(&a, e, &mut ya);
                dequantize(&a, e, 5, &mut yb);
                assert_eq!(
                    ya.iter().map(|y| y.to_bits()).collect::<Vec<_>>(),
                    yb.iter().map(|y| y.to_bits()).collect::<Vec<_>>(),
                    "exponent {e}"
                );
            }
        }
    }

    #[test]
    fn pow2_is_exact() {
        for e in -126..=129 {
            assert_eq!(pow2(e), 2f64.powi(e), "2^{e}");
        }
    }

    #[test]
    fn simd_and_scalar_paths_agree() {
        // 1003 elements: whole vectors and a scalar tail; halves for ties;
        // a too-small scale on the second pass forces the clamp.
        let mut x: Vec<f32> = (0..1003)
            .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
            .collect();
        x[5] = 0.5;
        x[6] = -2.5;
        x[1001] = f32::from_bits(0x7f7f_ffff);
        let e = block_exponent(&x);
        assert_eq!(e, (max_magnitude_bits_scalar(&x) >> 23) as u8);
        for (s, l) in [
            (scale(e, 4), limit(4)),
            (1.0, 5.0),
            (scale(120, 3), limit(3)),
        ] {
            let mut a = vec![0u8; 4012];
            let mut b = vec![0u8; 4012];
            let sum_a = quantize_body(&x, s, l, &mut a);
            let sum_b = dispatch_quantize(&x, s, l, &mut b);
            assert_eq!(a, b);
            // The sums taken while writing are the checksum's.
            let want = inagg_wire::frame::ones_sum(&a);
            assert_eq!(inagg_wire::frame::from_native(sum_a), want);
            assert_eq!(inagg_wire::frame::from_native(sum_b), want);
            let (mut ya, mut yb) = (vec![0f32; 1003], vec![0f32; 1003]);
            dequantize_body(&a, 1.0 / s, &mut ya);
            dispatch_dequantize(&a, 1.0 / s, &mut yb);
            assert_eq!(ya, yb);
        }
    }
}
