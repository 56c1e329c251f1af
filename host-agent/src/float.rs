//! The floating-point formats the agent sums: binary32, and the two 16-bit
//! formats of mixed-precision training, IEEE binary16 (`f16`) and bfloat16
//! (`bf16`).
//!
//! The wire and the switch do not change with the format: every chunk
//! travels as int32 quantized with a block exponent (see [`crate::quant`]),
//! and the exponent is binary32's. A 16-bit chunk is widened to binary32 on
//! the way in (exactly: every 16-bit value is a binary32 value) and the
//! result is rounded back, to nearest-even, on the way out. So workers may
//! even mix formats in one job: a bf16 worker and an f32 worker of the same
//! job agree on every exponent and sum the same integers.
//!
//! Frameworks hand gradients in these formats (PyTorch's bf16 and fp16
//! gradient buckets, DDP's compression hooks); taking them as they are
//! spares the caller a widened copy of the whole tensor.

use half::slice::HalfFloatSliceExt;
use half::{bf16, f16};

use crate::quant::{self, Quantizer};

/// A floating-point element type the agent all-reduces.
pub trait Float: Copy + Default + Send + Sync + 'static {
    /// The format's name (`f32`, `f16`, `bf16`).
    const NAME: &'static str;
    /// log2 of one unit in the last place of 1.0: a bound on the relative
    /// error of one rounding to nearest into this format (twice the unit
    /// roundoff, which also covers the rounding to binary32 before it).
    const ULP_LOG2: i32;
    /// The smallest positive subnormal: where the relative bound stops
    /// holding, the absolute error of a rounding is below it.
    const SUBNORMAL: f64;
    /// The largest finite value; sums beyond it round to infinity.
    const MAX: f64;

    /// The value as binary32 (exact).
    fn to_f32(self) -> f32;

    /// The block exponent of a chunk (see [`quant::block_exponent`]).
    fn block_exponent(chunk: &[Self]) -> u8;

    /// Widens `chunk` into `out` (same length).
    fn widen(chunk: &[Self], out: &mut [f32]);

    /// Rounds `values` to nearest-even into `out` (same length).
    fn narrow(values: &[f32], out: &mut [Self]);

    /// Quantizes `chunk` into `out` as [`Quantizer::quantize`] does, with
    /// `scratch` for the widened chunk where no kernel reads the format
    /// directly; returns the checksum sum.
    fn quantize(
        q: &Quantizer,
        chunk: &[Self],
        exponent: u8,
        out: &mut [u8],
        scratch: &mut Vec<f32>,
    ) -> u64 {
        #[cfg(target_arch = "x86_64")]
        if let Some(k) = Self::kernels() {
            // SAFETY: `kernels` gives only what the CPU runs, and
            // `quantize_fast` calls it only where AVX2 is present too.
            let fast = q.quantize_fast(chunk.len(), exponent, out, |s, l, body| unsafe {
                (k.quantize)(chunk, s, l, body)
            });
            if let Some(sum) = fast {
                return sum;
            }
        }
        quantize_widened(q, chunk, exponent, out, scratch)
    }

    /// Dequantizes a result payload into `out`, through `scratch` where no
    /// kernel writes the format directly.
    fn dequantize(
        q: &Quantizer,
        payload: &[u8],
        exponent: u8,
        out: &mut [Self],
        scratch: &mut Vec<f32>,
    ) {
        #[cfg(target_arch = "x86_64")]
        if let (Some(k), Some(s)) = (Self::kernels(), q.fast_shift(exponent)) {
            // SAFETY: as in `quantize` (`fast_shift` checks AVX2); the
            // payload holds the elements.
            return unsafe { (k.dequantize)(&payload[..out.len() * 4], s, out) };
        }
        dequantize_widened(q, payload, exponent, out, scratch)
    }

    /// AVX2 kernels that read and write this format in place, converting
    /// in registers, if the CPU has what they need (None: widen through
    /// the scratch chunk).
    #[cfg(target_arch = "x86_64")]
    fn kernels() -> Option<Kernels<Self>> {
        None
    }

    /// The bound on |result - exact sum| for one element of a sum of
    /// `workers` values whose chunk agreed on `exponent`: the quantization
    /// error, and the roundings to binary32 and then to this format.
    fn error_bound(exponent: u8, workers: u16, exact_sum: f64) -> f64 {
        let quantization = quant::error_bound(exponent, workers, 0.0);
        let ulp = f64::from(Self::ULP_LOG2).exp2();
        quantization + ulp * (exact_sum.abs() + quantization) + Self::SUBNORMAL
    }
}

/// A format's own AVX2 quantizer and dequantizer (see [`Float::kernels`]):
/// they take the shift (in `quant`'s `FAST_SHIFTS`) and, to quantize, the
/// clamp limit, and write as [`Quantizer::quantize`] and
/// [`Quantizer::dequantize`] do.
#[cfg(target_arch = "x86_64")]
pub struct Kernels<T> {
    quantize: unsafe fn(&[T], i32, f32, &mut [u8]) -> u64,
    dequantize: unsafe fn(&[u8], i32, &mut [T]),
}

/// Widens the chunk into `scratch` and quantizes that.
fn quantize_widened<T: Float>(
    q: &Quantizer,
    chunk: &[T],
    exponent: u8,
    out: &mut [u8],
    scratch: &mut Vec<f32>,
) -> u64 {
    let wide = scratch_of(scratch, chunk.len());
    T::widen(chunk, wide);
    q.quantize(wide, exponent, out)
}

/// Dequantizes into `scratch` and narrows that into `out`.
fn dequantize_widened<T: Float>(
    q: &Quantizer,
    payload: &[u8],
    exponent: u8,
    out: &mut [T],
    scratch: &mut Vec<f32>,
) {
    let wide = scratch_of(scratch, out.len());
    q.dequantize(payload, exponent, wide);
    T::narrow(wide, out);
}

/// Whether an element's result is correct: within `bound` (its
/// `T::error_bound`) of the exact sum, or the infinity of its sign where
/// the sum, give or take the bound, reaches past the format's largest
/// finite value (a binary16 sum past 65504 rounds to infinity). NaN results
/// are never correct here: a chunk that must come back NaN is the caller's
/// to recognise.
pub fn is_correct<T: Float>(result: T, exact: f64, bound: f64) -> bool {
    let got = f64::from(result.to_f32());
    if got.is_infinite() {
        got.signum() == exact.signum() && exact.abs() + bound >= T::MAX
    } else {
        (got - exact).abs() <= bound
    }
}

/// The first `len` elements of the scratch buffer, grown if need be (once:
/// the codec keeps it across packets).
fn scratch_of(scratch: &mut Vec<f32>, len: usize) -> &mut [f32] {
    if scratch.len() < len {
        scratch.resize(len, 0.0);
    }
    &mut scratch[..len]
}

impl Float for f32 {
    const NAME: &'static str = "f32";
    const ULP_LOG2: i32 = -23;
    const SUBNORMAL: f64 = 0.0;
    const MAX: f64 = f32::MAX as f64;

    fn to_f32(self) -> f32 {
        self
    }

    fn block_exponent(chunk: &[f32]) -> u8 {
        quant::block_exponent(chunk)
    }

    fn widen(chunk: &[f32], out: &mut [f32]) {
        out.copy_from_slice(chunk);
    }

    fn narrow(values: &[f32], out: &mut [f32]) {
        out.copy_from_slice(values);
    }

    /// Straight from the tensor: no scratch copy on the binary32 path.
    fn quantize(
        q: &Quantizer,
        chunk: &[f32],
        exponent: u8,
        out: &mut [u8],
        _scratch: &mut Vec<f32>,
    ) -> u64 {
        q.quantize(chunk, exponent, out)
    }

    fn dequantize(
        q: &Quantizer,
        payload: &[u8],
        exponent: u8,
        out: &mut [f32],
        _scratch: &mut Vec<f32>,
    ) {
        q.dequantize(payload, exponent, out)
    }

    /// The binary32 bound as documented in [`crate::quant`].
    fn error_bound(exponent: u8, workers: u16, exact_sum: f64) -> f64 {
        quant::error_bound(exponent, workers, exact_sum)
    }
}

/// The largest magnitude's bits in a chunk of 16-bit floats. Both 16-bit
/// formats keep the sign in the top bit, so as for binary32, integer order
/// on the bits with the sign cleared is magnitude order, with Inf and NaN
/// above every finite value.
fn max_magnitude_bits(bits: &[u16]) -> u16 {
    bits.iter().fold(0u16, |m, b| m.max(b & 0x7fff))
}

impl Float for f16 {
    const NAME: &'static str = "f16";
    const ULP_LOG2: i32 = -10;
    /// 2^-24.
    const SUBNORMAL: f64 = 5.960_464_477_539_063e-8;
    const MAX: f64 = 65504.0;

    fn to_f32(self) -> f32 {
        f16::to_f32(self)
    }

    fn block_exponent(chunk: &[f16]) -> u8 {
        let max = max_magnitude_bits(chunk.reinterpret_cast());
        if max >= 0x7c00 {
            return inagg_wire::EXPONENT_NON_FINITE;
        }
        (f16::from_bits(max).to_f32().to_bits() >> 23) as u8
    }

    fn widen(chunk: &[f16], out: &mut [f32]) {
        chunk.convert_to_f32_slice(out);
    }

    fn narrow(values: &[f32], out: &mut [f16]) {
        out.convert_from_f32_slice(values);
    }

    #[cfg(target_arch = "x86_64")]
    fn kernels() -> Option<Kernels<f16>> {
        simd16::f16_kernels()
    }
}

impl Float for bf16 {
    const NAME: &'static str = "bf16";
    const ULP_LOG2: i32 = -7;
    /// 2^-133.
    const SUBNORMAL: f64 = 9.183_549_615_799_121e-41;
    const MAX: f64 = 3.389_531_389_251_535_5e38;

    fn to_f32(self) -> f32 {
        bf16::to_f32(self)
    }

    /// bfloat16 is binary32's top half: its exponent field is binary32's.
    fn block_exponent(chunk: &[bf16]) -> u8 {
        (max_magnitude_bits(chunk.reinterpret_cast()) >> 7) as u8
    }

    fn widen(chunk: &[bf16], out: &mut [f32]) {
        for (x, y) in chunk.iter().zip(out.iter_mut()) {
            *y = f32::from_bits(u32::from(x.to_bits()) << 16);
        }
    }

    fn narrow(values: &[f32], out: &mut [bf16]) {
        out.convert_from_f32_slice(values);
    }

    #[cfg(target_arch = "x86_64")]
    fn kernels() -> Option<Kernels<bf16>> {
        Some(simd16::bf16_kernels())
    }
}

#[cfg(target_arch = "x86_64")]
mod simd16 {
    //! AVX2 kernels for the 16-bit formats, with exactly the results of
    //! widening, quantizing as binary32 does and narrowing: the binary32
    //! kernel's steps (`quant::simd`) with a conversion at either end of
    //! each eight-element step. binary16 converts with F16C (`vcvtph2ps`,
    //! and `vcvtps2ph` rounding to nearest-even); bfloat16 is binary32's
    //! top half, so it widens with a shift and narrows with the integer
    //! round-to-nearest-even. The dequantized values are never NaN (a
    //! non-finite exponent does not reach these kernels), which that
    //! integer rounding relies on.
    use std::arch::x86_64::*;

    use half::{bf16, f16};
    use inagg_wire::simd::{add_halves, lanes_sum, swap_mask};

    use super::{Float, Kernels};
    use crate::quant::{dequantize_body, pow2, quantize_body};

    /// binary16's kernels, where the CPU converts binary16 (F16C).
    pub fn f16_kernels() -> Option<Kernels<f16>> {
        use std::sync::OnceLock;
        static F16C: OnceLock<bool> = OnceLock::new();
        F16C.get_or_init(|| is_x86_feature_detected!("f16c"))
            .then_some(Kernels {
                quantize: quantize_f16,
                dequantize: dequantize_f16,
            })
    }

    /// bfloat16's kernels (AVX2 alone).
    pub fn bf16_kernels() -> Kernels<bf16> {
        Kernels {
            quantize: quantize_bf16,
            dequantize: dequantize_bf16,
        }
    }

    /// The quantizer's loop over whole eight-element steps, `load8`
    /// widening eight elements, then the scalar body for the tail.
    #[inline(always)]
    unsafe fn quantize_with<T: Float>(
        chunk: &[T],
        s: i32,
        l: f32,
        out: &mut [u8],
        load8: impl Fn(*const T) -> __m256,
    ) -> u64 {
        let whole = chunk.len() / 8 * 8;
        let scale = _mm256_set1_ps(pow2(s) as f32);
        let (lo, hi, swap) = (_mm256_set1_ps(-l), _mm256_set1_ps(l), swap_mask());
        let mut acc = _mm256_setzero_si256();
        for i in (0..whole).step_by(8) {
            let x = _mm256_mul_ps(load8(chunk.as_ptr().add(i)), scale);
            let q = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(x, lo), hi));
            let q = _mm256_shuffle_epi8(q, swap);
            _mm256_storeu_si256(out.as_mut_ptr().add(i * 4).cast(), q);
            acc = add_halves(acc, q);
        }
        let (rest, mut wide) = (&chunk[whole..], [0f32; 8]);
        T::widen(rest, &mut wide[..rest.len()]);
        lanes_sum(acc) + quantize_body(&wide[..rest.len()], s, l, &mut out[whole * 4..])
    }

    /// The dequantizer's loop, `store8` narrowing eight binary32 values
    /// into the tensor, then the scalar body for the tail.
    #[inline(always)]
    unsafe fn dequantize_with<T: Float>(
        payload: &[u8],
        s: i32,
        out: &mut [T],
        store8: impl Fn(*mut T, __m256),
    ) {
        let whole = out.len() / 8 * 8;
        let (inv, swap) = (_mm256_set1_ps(pow2(-s) as f32), swap_mask());
        for i in (0..whole).step_by(8) {
            let q = _mm256_loadu_si256(payload.as_ptr().add(i * 4).cast());
            let y = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_shuffle_epi8(q, swap)), inv);
            store8(out.as_mut_ptr().add(i), y);
        }
        let (rest, mut wide) = (out.len() - whole, [0f32; 8]);
        dequantize_body(&payload[whole * 4..], s, &mut wide[..rest]);
        T::narrow(&wide[..rest], &mut out[whole..]);
    }

    /// # Safety
    /// The CPU supports AVX2 and F16C; `out.len() >= chunk.len() * 4`;
    /// `s` is in `FAST_SHIFTS`.
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn quantize_f16(chunk: &[f16], s: i32, l: f32, out: &mut [u8]) -> u64 {
        quantize_with(chunk, s, l, out, |p| {
            _mm256_cvtph_ps(_mm_loadu_si128(p.cast()))
        })
    }

    /// # Safety
    /// The CPU supports AVX2 and F16C; `payload.len() >= out.len() * 4`;
    /// `s` is in `FAST_SHIFTS`.
    #[target_feature(enable = "avx2,f16c")]
    unsafe fn dequantize_f16(payload: &[u8], s: i32, out: &mut [f16]) {
        dequantize_with(payload, s, out, |p, y| {
            let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(y);
            _mm_storeu_si128(p.cast(), h);
        })
    }

    /// # Safety
    /// The CPU supports AVX2; `out.len() >= chunk.len() * 4`; `s` is in
    /// `FAST_SHIFTS`.
    #[target_feature(enable = "avx2")]
    unsafe fn quantize_bf16(chunk: &[bf16], s: i32, l: f32, out: &mut [u8]) -> u64 {
        quantize_with(chunk, s, l, out, |p| {
            let bits = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.cast()));
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(bits))
        })
    }

    /// # Safety
    /// The CPU supports AVX2; `payload.len() >= out.len() * 4`; `s` is in
    /// `FAST_SHIFTS`.
    #[target_feature(enable = "avx2")]
    unsafe fn dequantize_bf16(payload: &[u8], s: i32, out: &mut [bf16]) {
        let (one, half_less) = (_mm256_set1_epi32(1), _mm256_set1_epi32(0x7fff));
        dequantize_with(payload, s, out, |p, y| {
            let bits = _mm256_castps_si256(y);
            // Round to nearest-even on the discarded low half: add 0x7fff,
            // and one more when the kept half is odd.
            let odd = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), one);
            let rounded = _mm256_add_epi32(bits, _mm256_add_epi32(half_less, odd));
            let top = _mm256_srli_epi32::<16>(rounded);
            // Pack each 128-bit lane's four halves, then gather the two
            // lanes' packs into the low 128 bits.
            let packed = _mm256_permute4x64_epi64::<0b00_00_10_00>(_mm256_packus_epi32(top, top));
            _mm_storeu_si128(p.cast(), _mm256_castsi256_si128(packed));
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_formats_constants_are_what_their_names_say() {
        assert_eq!(f16::SUBNORMAL, 2f64.powi(-24));
        assert_eq!(f16::from_bits(1).to_f64(), f16::SUBNORMAL);
        assert_eq!(f16::MAX.to_f64(), <f16 as Float>::MAX);
        assert_eq!(bf16::SUBNORMAL, 2f64.powi(-133));
        assert_eq!(bf16::from_bits(1).to_f64(), bf16::SUBNORMAL);
        assert_eq!(bf16::MAX.to_f64(), <bf16 as Float>::MAX);
        assert_eq!(f16::EPSILON.to_f64(), 2f64.powi(<f16 as Float>::ULP_LOG2));
        assert_eq!(bf16::EPSILON.to_f64(), 2f64.powi(<bf16 as Float>::ULP_LOG2));
    }

    /// A chunk's 16-bit block exponent is the binary32 one of its widened values.
    fn same_exponent_as_widened<T: Float>(chunk: &[T]) {
        let wide: Vec<f32> = chunk.iter().map(|x| x.to_f32()).collect();
        assert_eq!(
            T::block_exponent(chunk),
            quant::block_exponent(&wide),
            "{} chunk {wide:?}",
            T::NAME
        );
    }

    #[test]
    fn half_block_exponents_are_binary32_ones() {
        let values = [
            0.0, -0.0, 1.0, -1.5, 0.33, 1e-3, -7e-6, 6e-8, 65504.0, -40000.0, 2.5e-5,
        ];
        for v in values {
            same_exponent_as_widened(&[f16::from_f32(v), f16::from_f32(-0.25)]);
            same_exponent_as_widened(&[bf16::from_f32(v), bf16::from_f32(-0.25)]);
        }
        for big in [1e20f32, -3e38, 1e-38, 1e-40] {
            same_exponent_as_widened(&[bf16::from_f32(big), bf16::from_f32(1.0)]);
        }
        same_exponent_as_widened::<f16>(&[]);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let h = [f16::from_f32(1.0), f16::from_f32(bad)];
            assert_eq!(f16::block_exponent(&h), inagg_wire::EXPONENT_NON_FINITE);
            let b = [bf16::from_f32(bad), bf16::from_f32(1.0)];
            assert_eq!(bf16::block_exponent(&b), inagg_wire::EXPONENT_NON_FINITE);
        }
    }

    #[test]
    fn narrowing_rounds_to_nearest_even_and_overflows_to_infinity() {
        // 1 + 2^-11 is halfway between two binary16 values: to the even one.
        let mut h = [f16::ZERO; 4];
        f16::narrow(
            &[
                1.0 + 2f32.powi(-11),
                1.0 + 3.0 * 2f32.powi(-11),
                65520.0,
                -1e6,
            ],
            &mut h,
        );
        assert_eq!(
            h.map(f16::to_f32),
            [1.0, 1.0 + 2f32.powi(-9), f32::INFINITY, f32::NEG_INFINITY]
        );
        let mut b = [bf16::ZERO; 2];
        bf16::narrow(&[1.0 + 2f32.powi(-8), f32::NAN], &mut b);
        assert_eq!(b[0].to_f32(), 1.0);
        assert!(b[1].is_nan());
    }

    /// Quantizes each worker's chunk, sums the integers as the switch does,
    /// and checks the narrowed result against the bound.
    fn sum_within_bound<T: Float>(chunks: &[Vec<T>]) -> Vec<T> {
        let n = chunks.len() as u16;
        let k = chunks[0].len();
        let e = chunks.iter().map(|c| T::block_exponent(c)).max().unwrap();
        let q = Quantizer::new(n);
        let mut scratch = Vec::new();
        let mut acc = vec![0i32; k];
        let mut buf = vec![0u8; k * 4];
        for c in chunks {
            T::quantize(&q, c, e, &mut buf, &mut scratch);
            inagg_wire::payload::add_i32s(&mut acc, &buf);
        }
        inagg_wire::payload::write_i32s(&mut buf, &acc);
        let mut out = vec![T::default(); k];
        T::dequantize(&q, &buf, e, &mut out, &mut scratch);
        for i in 0..k {
            let exact: f64 = chunks.iter().map(|c| f64::from(c[i].to_f32())).sum();
            let got = f64::from(out[i].to_f32());
            let bound = T::error_bound(e, n, exact);
            assert!(
                (got - exact).abs() <= bound,
                "{} element {i}: {got} for {exact}, bound {bound}",
                T::NAME
            );
        }
        out
    }

    fn pattern<T: Float>(w: usize, k: usize, scale: f32, make: fn(f32) -> T) -> Vec<T> {
        (0..k)
            .map(|i| make((((i * 37 + w * 11) % 101) as f32 / 50.0 - 1.0) * scale))
            .collect()
    }

    #[test]
    fn half_sums_are_within_their_bounds() {
        for n in [1, 2, 3, 8] {
            for scale in [1.0f32, 1e-3, 3e3, 1e-6] {
                let h: Vec<Vec<f16>> = (0..n)
                    .map(|w| pattern(w, 70, scale, f16::from_f32))
                    .collect();
                sum_within_bound(&h);
                let b: Vec<Vec<bf16>> = (0..n)
                    .map(|w| pattern(w, 70, scale, bf16::from_f32))
                    .collect();
                sum_within_bound(&b);
            }
        }
    }

    #[test]
    fn small_integers_sum_exactly_in_both_half_formats() {
        let h: Vec<Vec<f16>> = (0..5)
            .map(|w| {
                (0..64)
                    .map(|i| f16::from_f32((i % 9) as f32 - 4.0 + w as f32))
                    .collect()
            })
            .collect();
        let out = sum_within_bound(&h);
        for (i, y) in out.iter().enumerate() {
            let want: f32 = (0..5).map(|w| (i % 9) as f32 - 4.0 + w as f32).sum();
            assert_eq!(y.to_f32(), want);
        }
        let b: Vec<Vec<bf16>> = (0..3).map(|_| vec![bf16::ONE; 16]).collect();
        assert!(sum_within_bound(&b).iter().all(|y| y.to_f32() == 3.0));
    }

    /// A xorshift stream, for reproducible arbitrary bits.
    fn bits(seed: u64) -> impl FnMut() -> u64 {
        let mut x = seed | 1;
        move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        }
    }

    /// An arbitrary int32 sum: a random one, or one whose binary32 value
    /// lies exactly halfway between two bfloat16 or two binary16 values
    /// (q in [2^23, 2^24), so its low 16 or 13 bits are the binary32
    /// significand's), where rounding to nearest-even must pick the even.
    fn sum(next: &mut impl FnMut() -> u64) -> i32 {
        let r = next();
        let sign = if r & 8 == 0 { 1 } else { -1 };
        let m = (r >> 8) as i32;
        sign * match r % 3 {
            0 => (r >> 32) as i32,
            1 => ((128 + (m & 127)) << 16) | 0x8000,
            _ => ((1024 + (m & 1023)) << 13) | 0x1000,
        }
    }

    /// The direct kernels give the widened path's bytes, checksum and
    /// values, bit for bit: arbitrary 16-bit inputs (subnormals, ties,
    /// the largest values) and arbitrary int32 sums at shifts from tiny
    /// to huge (binary16 overflows to infinity), every tail length.
    fn kernels_equal_widening<T: Float + PartialEq + std::fmt::Debug>(from_bits: fn(u16) -> T) {
        let mut next = bits(0x9e37_79b9);
        let (mut s1, mut s2) = (Vec::new(), Vec::new());
        for len in 0..40 {
            for workers in [1, 3, 64] {
                let q = Quantizer::new(workers);
                // Finite values only: a NaN or infinite input makes the
                // exponent non-finite, which no kernel sees.
                let chunk: Vec<T> = std::iter::repeat_with(|| from_bits(next() as u16))
                    .filter(|x| x.to_f32().is_finite())
                    .take(len)
                    .collect();
                let e = T::block_exponent(&chunk);
                let (mut a, mut b) = (vec![0xaau8; len * 4 + 8], vec![0x55u8; len * 4 + 8]);
                let fast = T::quantize(&q, &chunk, e, &mut a, &mut s1);
                let widened = quantize_widened(&q, &chunk, e, &mut b, &mut s2);
                assert_eq!(
                    (fast, &a),
                    (widened, &b),
                    "{} len {len} n {workers}",
                    T::NAME
                );
                for exponent in [1u8, 100, 127, 134, 142, 150, 200, 254] {
                    let payload: Vec<u8> = (0..len)
                        .flat_map(|_| sum(&mut next).to_be_bytes())
                        .collect();
                    let (mut x, mut y) = (vec![T::default(); len], vec![T::default(); len]);
                    T::dequantize(&q, &payload, exponent, &mut x, &mut s1);
                    dequantize_widened(&q, &payload, exponent, &mut y, &mut s2);
                    let same = x
                        .iter()
                        .zip(&y)
                        .all(|(u, v)| u.to_f32().to_bits() == v.to_f32().to_bits());
                    assert!(same, "{} len {len} e {exponent}: {x:?} vs {y:?}", T::NAME);
                }
            }
        }
    }

    #[test]
    fn binary16_kernels_equal_widening() {
        kernels_equal_widening(f16::from_bits);
    }

    #[test]
    fn bfloat16_kernels_equal_widening() {
        kernels_equal_widening(bf16::from_bits);
    }

    #[test]
    fn a_binary16_sum_past_its_range_is_infinite() {
        let h: Vec<Vec<f16>> = (0..2).map(|_| vec![f16::from_f32(40000.0); 8]).collect();
        let (n, e) = (2, f16::block_exponent(&h[0]));
        let q = Quantizer::new(n);
        let (mut acc, mut buf, mut scratch) = (vec![0i32; 8], vec![0u8; 32], Vec::new());
        for c in &h {
            f16::quantize(&q, c, e, &mut buf, &mut scratch);
            inagg_wire::payload::add_i32s(&mut acc, &buf);
        }
        inagg_wire::payload::write_i32s(&mut buf, &acc);
        let mut out = vec![f16::ZERO; 8];
        f16::dequantize(&q, &buf, e, &mut out, &mut scratch);
        assert!(out.iter().all(|y| y.to_f32() == f32::INFINITY));
    }
}
