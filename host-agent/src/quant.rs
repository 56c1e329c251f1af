//! Block floating point: float gradients to int32 and back, with one shared
//! exponent per chunk so the switch's integer sum cannot overflow.
//!
//! The exponent on the wire is the IEEE-754 binary32 *biased* exponent `b` of
//! the chunk's largest magnitude: every |x| in the chunk is below 2^(b-126).
//! Non-finite values have b = 255, so the switch's max-reduce carries "this
//! chunk holds NaN or Inf" to every worker for free.
//!
//! With the agreed (max) exponent b and n workers, E = b - 126,
//! c = ceil(log2 n) and the shift s = 31 - c - E:
//!
//! ```text
//! q = clamp(round_half_even(x * 2^s), -L, L),   y = (sum of q) * 2^-s,   L = floor((2^31 - 1) / n)
//! ```
//!
//! |x| < 2^E gives |x * 2^s| < 2^(31 - c) <= 2^31 / n, and the clamp keeps
//! the sum of n contributions within int32: no overflow by construction.
//!
//! **Why a power of two.** Scaling by 2^s is exact in binary32 (for the
//! shifts of every block that is not all but zero), so the quantizer is a
//! binary32 multiply, a conversion and a byte swap, eight elements per AVX2
//! step, and the dequantizer the reverse, with the results those of exact
//! arithmetic. The scale (2^31 - 1) / (n 2^E) used before needed products
//! in f64, four elements per step with two conversions each, and cost the
//! DPDK agent as much per packet as everything else it does; SwitchML
//! scales by powers of two for the same reason. The price is at most one
//! bit of range when n is not a power of two (2^c < 2n).
//!
//! The only errors are the rounding to an integer (at most one quantum
//! 2^-s per worker, the clamp included) and the final rounding to f32:
//!
//! ```text
//! |result - exact sum| <= n * 2^(E + c - 31) + 2^-23 * |exact sum|
//! ```
//!
//! [`error_bound`] computes it; the tests and the demo check every element
//! against it. Relative to the chunk's largest magnitude m (2^E <= 2m) the
//! first term is below 4 n^2 m / 2^31, about 1.2e-7 * m at n = 8.

use inagg_wire::EXPONENT_NON_FINITE;

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

/// The shift s for an agreed (finite) exponent and `workers` contributors:
/// each value is quantized as x * 2^s.
pub fn shift(exponent: u8, workers: u16) -> i32 {
    let c = (u32::BITS - u32::from(workers.max(1) - 1).leading_zeros()) as i32;
    31 - c - (i32::from(exponent) - 126)
}

/// 2^e, exactly, for the exponents a block can have: built from its bits
/// rather than by `powi`'s multiply loop, which showed up in profiles of
/// the per-chunk path.
pub(crate) fn pow2(e: i32) -> f64 {
    debug_assert!((-1022..=1023).contains(&e));
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The largest |q| one worker may contribute, floor((2^31 - 1) / n), rounded
/// down to a binary32 value (an integer: the clamp then commutes with the
/// rounding). Values never reach it unless n > 128 (see the module doc).
fn limit(workers: u16) -> f32 {
    let l = (i32::MAX as f64 / f64::from(workers.max(1))).floor();
    let f = l as f32;
    if f64::from(f) > l {
        f32::from_bits(f.to_bits() - 1)
    } else {
        f
    }
}

/// The documented bound on |result - exact sum| for one element.
pub fn error_bound(exponent: u8, workers: u16, exact_sum: f64) -> f64 {
    f64::from(workers) * pow2(-shift(exponent, workers)) + exact_sum.abs() * pow2(-23)
}

/// The shifts whose scale 2^s and inverse 2^-s are normal binary32 values
/// and whose dequantized nonzero results cannot be subnormal: binary32
/// arithmetic is then exact up to the one final rounding. Outside it (blocks
/// whose largest magnitude is below about 2^-95) the scalar f64 loops run,
/// with the same results.
const FAST_SHIFTS: std::ops::RangeInclusive<i32> = -126..=126;

/// Quantizes `chunk` with the agreed exponent into `out` (big-endian int32,
/// `out.len() / 4 >= chunk.len()`), zero-padding the rest. A non-finite
/// exponent sends zeros: the result is replaced by NaN on every worker.
///
/// Returns the [`inagg_wire::frame::ones_sum_native`] sum of `out`, taken
/// while writing it (the UDP checksum of a raw-Ethernet frame).
pub fn quantize(chunk: &[f32], exponent: u8, workers: u16, out: &mut [u8]) -> u64 {
    Quantizer::new(workers).quantize(chunk, exponent, out)
}

/// Dequantizes the first `out.len()` elements of a result payload.
pub fn dequantize(payload: &[u8], exponent: u8, workers: u16, out: &mut [f32]) {
    Quantizer::new(workers).dequantize(payload, exponent, out)
}

/// [`quantize`] and [`dequantize`] for one worker count, with what depends
/// only on it (the limit: a division and a floor) worked out once: the
/// agent's codec calls them once per packet.
#[derive(Debug, Clone, Copy)]
pub struct Quantizer {
    workers: u16,
    limit: f32,
}

impl Quantizer {
    /// For sums of `workers` contributions.
    pub fn new(workers: u16) -> Quantizer {
        Quantizer {
            workers,
            limit: limit(workers),
        }
    }

    /// [`quantize`].
    pub fn quantize(&self, chunk: &[f32], exponent: u8, out: &mut [u8]) -> u64 {
        debug_assert!(out.len() >= chunk.len() * 4);
        let (body, pad) = out.split_at_mut(chunk.len() * 4);
        pad.fill(0);
        if exponent == EXPONENT_NON_FINITE {
            body.fill(0);
            return 0;
        }
        let s = shift(exponent, self.workers);
        #[cfg(target_arch = "x86_64")]
        if has_avx2() && FAST_SHIFTS.contains(&s) {
            // SAFETY: the CPU supports AVX2; `body` holds the chunk.
            return unsafe { simd::quantize(chunk, s, self.limit, body) };
        }
        quantize_body(chunk, s, self.limit, body)
    }

    /// Runs `kernel` (an AVX2 quantizer over a chunk of `len` elements in
    /// its own format) with the shift and the limit, after zero-padding
    /// `out` past the chunk, when the AVX2 path applies: a finite exponent
    /// whose shift is in `FAST_SHIFTS`. None otherwise (nothing written):
    /// the caller then widens the chunk and calls [`Quantizer::quantize`].
    pub(crate) fn quantize_fast(
        &self,
        len: usize,
        exponent: u8,
        out: &mut [u8],
        kernel: impl FnOnce(i32, f32, &mut [u8]) -> u64,
    ) -> Option<u64> {
        let s = self.fast_shift(exponent)?;
        let (body, pad) = out.split_at_mut(len * 4);
        pad.fill(0);
        Some(kernel(s, self.limit, body))
    }

    /// The shift of `exponent` when the AVX2 kernels can take it.
    pub(crate) fn fast_shift(&self, exponent: u8) -> Option<i32> {
        let s = shift(exponent, self.workers);
        (exponent != EXPONENT_NON_FINITE && has_avx2() && FAST_SHIFTS.contains(&s)).then_some(s)
    }

    /// [`dequantize`].
    pub fn dequantize(&self, payload: &[u8], exponent: u8, out: &mut [f32]) {
        debug_assert!(payload.len() >= out.len() * 4);
        if exponent == EXPONENT_NON_FINITE {
            out.fill(f32::NAN);
            return;
        }
        let s = shift(exponent, self.workers);
        let payload = &payload[..out.len() * 4];
        #[cfg(target_arch = "x86_64")]
        if has_avx2() && FAST_SHIFTS.contains(&s) {
            // SAFETY: the CPU supports AVX2; `payload` holds the elements.
            return unsafe { simd::dequantize(payload, s, out) };
        }
        dequantize_body(payload, s, out)
    }
}

/// The scalar quantizer, in f64 (exact for every shift); returns the
/// checksum sum of what it wrote.
#[inline(always)]
pub(crate) fn quantize_body(chunk: &[f32], s: i32, l: f32, out: &mut [u8]) -> u64 {
    let (scale, l) = (pow2(s), f64::from(l));
    let mut sum = 0;
    for (x, o) in chunk.iter().zip(out.chunks_exact_mut(4)) {
        let q = (f64::from(*x) * scale).round_ties_even().clamp(-l, l) as i32;
        let bytes = q.to_be_bytes();
        o.copy_from_slice(&bytes);
        sum += u64::from(u32::from_ne_bytes(bytes));
    }
    sum
}

/// The scalar dequantizer: one rounding, of the exact product, to f32.
#[inline(always)]
pub(crate) fn dequantize_body(payload: &[u8], s: i32, out: &mut [f32]) {
    let inv = pow2(-s);
    for (b, y) in payload.chunks_exact(4).zip(out.iter_mut()) {
        let q = i32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        *y = (f64::from(q) * inv) as f32;
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    //! AVX2 kernels with exactly the scalar loops' results, for the shifts
    //! in `FAST_SHIFTS`: binary32 products by a power of two (exact),
    //! round-half-even (the default MXCSR mode of `vcvtps2dq`), the same
    //! clamp, and a `vpshufb` byte swap to network order. Eight elements
    //! per step; the scalar body finishes the tail.
    use inagg_wire::simd::{add_halves, lanes_sum, swap_mask};
    use std::arch::x86_64::*;

    /// Chunks of at least this many elements are dequantized with streaming
    /// stores.
    const STREAM_MIN: usize = 1024;

    /// Returns the checksum sum of what it wrote (as `quantize` does).
    ///
    /// # Safety
    /// The CPU must support AVX2; `out.len() >= chunk.len() * 4`; `s` is
    /// in `FAST_SHIFTS`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn quantize(chunk: &[f32], s: i32, l: f32, out: &mut [u8]) -> u64 {
        let whole = chunk.len() / 8 * 8;
        let scale = super::pow2(s) as f32;
        let (vs, hi, lo) = (_mm256_set1_ps(scale), _mm256_set1_ps(l), _mm256_set1_ps(-l));
        let swap = swap_mask();
        let mut acc = _mm256_setzero_si256();
        for i in (0..whole).step_by(8) {
            let x = _mm256_mul_ps(_mm256_loadu_ps(chunk.as_ptr().add(i)), vs);
            // Clamping before rounding equals rounding before clamping: l is an integer.
            let q = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(x, lo), hi));
            let q = _mm256_shuffle_epi8(q, swap);
            _mm256_storeu_si256(out.as_mut_ptr().add(i * 4).cast(), q);
            acc = add_halves(acc, q);
        }
        lanes_sum(acc) + super::quantize_body(&chunk[whole..], s, l, &mut out[whole * 4..])
    }

    /// # Safety
    /// The CPU must support AVX2; `payload.len() >= out.len() * 4`; `s` is
    /// in `FAST_SHIFTS`.
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
    pub unsafe fn dequantize(payload: &[u8], s: i32, out: &mut [f32]) {
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
        super::dequantize_body(&payload[..head * 4], s, &mut out[..head]);
        let whole = head + (out.len() - head) / 8 * 8;
        let vinv = _mm256_set1_ps(super::pow2(-s) as f32);
        let swap = swap_mask();
        for i in (head..whole).step_by(8) {
            let q = _mm256_loadu_si256(payload.as_ptr().add(i * 4).cast());
            let y = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(q, swap)), vinv);
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
        super::dequantize_body(&payload[whole * 4..], s, &mut out[whole..]);
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

pub(crate) fn has_avx2() -> bool {
    #[cfg(target_arch = "x86_64")]
    return inagg_wire::simd::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
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
    fn shifts_and_limits() {
        // 1.0 has b = 127 (E = 1: |x| < 2); one worker: x * 2^30.
        assert_eq!(shift(127, 1), 30);
        assert_eq!(shift(127, 2), 29);
        assert_eq!(shift(127, 3), 28, "3 workers round up to 4");
        assert_eq!(shift(127, 64), 24);
        assert_eq!(shift(127, 65), 23);
        assert_eq!(
            limit(1),
            2_147_483_520.0,
            "the largest binary32 below 2^31 - 1"
        );
        assert_eq!(limit(1000), 2_147_483.0, "exact below 2^24");
        let mut q = [0u8; 4];
        quantize(&[1.0], 127, 1, &mut q);
        assert_eq!(i32::from_be_bytes(q), 1 << 30);
    }

    #[test]
    fn no_overflow_for_any_worker_count_or_exponent() {
        // Every worker sends the largest magnitude its exponent allows, all
        // the same sign: the sum still fits in int32, for every n (the clamp
        // matters above 128 workers).
        for n in [1u16, 2, 3, 5, 64, 127, 128, 129, 200, 1000, u16::MAX] {
            for b in [1u8, 100, 127, 254] {
                let x = f32::from_bits((u32::from(b) << 23) | 0x7f_ffff);
                assert_eq!(block_exponent(&[x]), b);
                for sign in [1.0, -1.0] {
                    let mut q = [0u8; 4];
                    quantize(&[sign * x], b, n, &mut q);
                    let sum = i64::from(i32::from_be_bytes(q)) * i64::from(n);
                    assert!(sum.abs() <= i64::from(i32::MAX), "n {n} b {b}: {sum}");
                }
            }
        }
    }

    #[test]
    fn simd_kernels_are_the_exact_arithmetic_of_the_scalar_loops() {
        if !has_avx2() {
            return;
        }
        // 1003 elements: whole vectors and a scalar tail; halves for ties;
        // magnitudes across the range; exponents that put the shift at the
        // top of the fast range (b = 31, one worker: s = 126) and beyond it
        // (b = 30), and as low as these worker counts take it (s = -105).
        let mut x: Vec<f32> = (0..1003)
            .map(|i| ((i * 7919) % 1000) as f32 / 37.0 - 13.0)
            .collect();
        x[5] = 0.5;
        x[6] = -2.5;
        x[7] = 1e-30;
        for n in [1u16, 3, 4, 129] {
            for b in [1u8, 30, 31, 32, 130, 131, 200, 254] {
                let s = shift(b, n);
                if !FAST_SHIFTS.contains(&s) {
                    continue;
                }
                // Scale the values under the exponent: |x| < 2^(b - 126).
                let k = pow2(i32::from(b) - 131) as f32;
                let xs: Vec<f32> = x.iter().map(|v| v * k).collect();
                let l = limit(n);
                let (mut a, mut v) = (vec![0u8; 4012], vec![0u8; 4012]);
                let sum_a = quantize_body(&xs, s, l, &mut a);
                // SAFETY: AVX2 checked above; the shift is in the fast range.
                let sum_v = unsafe { simd::quantize(&xs, s, l, &mut v) };
                assert_eq!(a, v, "n {n} b {b}");
                // The sums taken while writing are the checksum's.
                let want = inagg_wire::frame::ones_sum(&a);
                assert_eq!(inagg_wire::frame::from_native(sum_a), want);
                assert_eq!(inagg_wire::frame::from_native(sum_v), want);
                // Results of n workers' sums, dequantized both ways.
                let mut sums = vec![0i32; 1003];
                for _ in 0..n.min(8) {
                    add_i32s(&mut sums, &a);
                }
                let mut bytes = vec![0u8; 4012];
                inagg_wire::payload::write_i32s(&mut bytes, &sums);
                let (mut ya, mut yv) = (vec![0f32; 1003], vec![0f32; 1003]);
                dequantize_body(&bytes, s, &mut ya);
                // SAFETY: as above.
                unsafe { simd::dequantize(&bytes, s, &mut yv) };
                let bits = |y: &[f32]| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&ya), bits(&yv), "n {n} b {b}");
            }
        }
    }

    #[test]
    fn pow2_is_exact() {
        for e in -126..=129 {
            assert_eq!(pow2(e), 2f64.powi(e), "2^{e}");
        }
    }
}
