//! Bulk conversion between int32 slices and payload bytes (big-endian, the
//! network order the P4 programs add in).
//!
//! They are the agent's and the emulator's per-element hot path: on x86-64
//! with AVX2 (checked once at run time) eight lanes are swapped with one
//! `vpshufb` and added with one `vpaddd`; elsewhere plain loops.

use crate::ELEMENT_LEN;

/// Writes `values` into `out` as big-endian int32s. `out` must be exactly
/// `values.len() * 4` bytes.
#[inline]
pub fn write_i32s(out: &mut [u8], values: &[i32]) {
    assert_eq!(out.len(), values.len() * ELEMENT_LEN, "payload size");
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: AVX2 is present; lengths were checked above.
        return unsafe { simd::swap_into(values.as_ptr().cast(), out.as_mut_ptr(), values.len()) };
    }
    for (chunk, v) in out.chunks_exact_mut(ELEMENT_LEN).zip(values) {
        chunk.copy_from_slice(&v.to_be_bytes());
    }
}

/// [`write_i32s`], returning the [`crate::frame::ones_sum_native`] sum of
/// the bytes written, taken in the same pass (for the UDP checksum of a
/// raw-Ethernet frame, without reading the payload back).
#[inline]
pub fn write_i32s_summed(out: &mut [u8], values: &[i32]) -> u64 {
    assert_eq!(out.len(), values.len() * ELEMENT_LEN, "payload size");
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: AVX2 is present; lengths were checked above.
        return unsafe {
            simd::swap_into_summed(values.as_ptr().cast(), out.as_mut_ptr(), values.len())
        };
    }
    write_i32s(out, values);
    crate::frame::ones_sum_native(out)
}

/// Reads big-endian int32s from `bytes` into `out`. `bytes` must be exactly
/// `out.len() * 4` bytes.
#[inline]
pub fn read_i32s(bytes: &[u8], out: &mut [i32]) {
    assert_eq!(bytes.len(), out.len() * ELEMENT_LEN, "payload size");
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: AVX2 is present; lengths were checked above.
        return unsafe { simd::swap_into(bytes.as_ptr(), out.as_mut_ptr().cast(), out.len()) };
    }
    for (chunk, v) in bytes.chunks_exact(ELEMENT_LEN).zip(out) {
        *v = i32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
}

/// Adds the big-endian int32s in `bytes` into `acc`, wrapping on overflow as
/// a 32-bit register ALU does.
#[inline]
pub fn add_i32s(acc: &mut [i32], bytes: &[u8]) {
    assert_eq!(bytes.len(), acc.len() * ELEMENT_LEN, "payload size");
    #[cfg(target_arch = "x86_64")]
    if simd::available() {
        // SAFETY: AVX2 is present; lengths were checked above.
        return unsafe { simd::add(acc, bytes) };
    }
    for (chunk, v) in bytes.chunks_exact(ELEMENT_LEN).zip(acc) {
        *v = v.wrapping_add(i32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]));
    }
}

/// The AVX2 helpers, shared with the agent's quantization kernels.
#[cfg(target_arch = "x86_64")]
pub mod simd {
    use std::arch::x86_64::*;

    /// Whether this CPU has AVX2 (checked once).
    pub fn available() -> bool {
        use std::sync::OnceLock;
        static AVX2: OnceLock<bool> = OnceLock::new();
        *AVX2.get_or_init(|| is_x86_feature_detected!("avx2"))
    }

    /// The `vpshufb` mask that reverses the bytes of each 32-bit lane
    /// (host order <-> network order).
    ///
    /// # Safety
    /// The CPU must support AVX2.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn swap_mask() -> __m256i {
        _mm256_setr_epi8(
            3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 3, 2, 1, 0, 7, 6, 5, 4, 11, 10,
            9, 8, 15, 14, 13, 12,
        )
    }

    /// Copies `n` 32-bit lanes from `src` to `dst`, reversing each lane's bytes.
    ///
    /// # Safety
    /// AVX2 present; `src` and `dst` valid for `4 * n` bytes, not overlapping.
    #[target_feature(enable = "avx2")]
    pub unsafe fn swap_into(src: *const u8, dst: *mut u8, n: usize) {
        let swap = swap_mask();
        let whole = n / 8 * 8;
        for i in (0..whole).step_by(8) {
            let v = _mm256_loadu_si256(src.add(i * 4).cast());
            _mm256_storeu_si256(dst.add(i * 4).cast(), _mm256_shuffle_epi8(v, swap));
        }
        for i in whole..n {
            let v = src.add(i * 4).cast::<u32>().read_unaligned();
            dst.add(i * 4).cast::<u32>().write_unaligned(v.swap_bytes());
        }
    }

    /// [`swap_into`], returning the native-halves sum of the bytes written
    /// (as [`crate::frame::ones_sum_native`] takes it).
    ///
    /// # Safety
    /// AVX2 present; `src` and `dst` valid for `4 * n` bytes, not overlapping.
    #[target_feature(enable = "avx2")]
    pub unsafe fn swap_into_summed(src: *const u8, dst: *mut u8, n: usize) -> u64 {
        let swap = swap_mask();
        let mut acc = _mm256_setzero_si256();
        let whole = n / 8 * 8;
        for i in (0..whole).step_by(8) {
            let v = _mm256_shuffle_epi8(_mm256_loadu_si256(src.add(i * 4).cast()), swap);
            _mm256_storeu_si256(dst.add(i * 4).cast(), v);
            acc = add_halves(acc, v);
        }
        let mut total = lanes_sum(acc);
        for i in whole..n {
            let v = src.add(i * 4).cast::<u32>().read_unaligned().swap_bytes();
            dst.add(i * 4).cast::<u32>().write_unaligned(v);
            total += u64::from(v);
        }
        total
    }

    /// `acc` plus the native-endian 32-bit halves of `v`'s 64-bit lanes:
    /// one step of the checksum's sum (no carries to chase; a lane would
    /// need 2^32 steps to overflow).
    ///
    /// # Safety
    /// AVX2 present.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn add_halves(acc: __m256i, v: __m256i) -> __m256i {
        let low = _mm256_set1_epi64x(0xffff_ffff);
        _mm256_add_epi64(
            acc,
            _mm256_add_epi64(_mm256_and_si256(v, low), _mm256_srli_epi64(v, 32)),
        )
    }

    /// The four 64-bit lanes of an [`add_halves`] accumulator, added.
    ///
    /// # Safety
    /// AVX2 present.
    #[inline]
    #[target_feature(enable = "avx2")]
    pub unsafe fn lanes_sum(acc: __m256i) -> u64 {
        let mut lanes = [0u64; 4];
        _mm256_storeu_si256(lanes.as_mut_ptr().cast(), acc);
        lanes.iter().sum()
    }

    /// The unfolded one's-complement sum of the whole 32-byte blocks of
    /// `data`, as [`crate::frame::ones_sum`] takes it (native-endian 32-bit
    /// halves added into 64-bit lanes), and the bytes that remain.
    ///
    /// # Safety
    /// AVX2 present.
    #[target_feature(enable = "avx2")]
    pub unsafe fn ones_blocks(data: &[u8]) -> (u64, &[u8]) {
        let mut acc = _mm256_setzero_si256();
        let mut blocks = data.chunks_exact(32);
        for b in &mut blocks {
            acc = add_halves(acc, _mm256_loadu_si256(b.as_ptr().cast()));
        }
        (lanes_sum(acc), blocks.remainder())
    }

    /// `acc[i] += big-endian bytes[i]`, wrapping.
    ///
    /// # Safety
    /// AVX2 present; `bytes.len() == 4 * acc.len()`.
    #[target_feature(enable = "avx2")]
    pub unsafe fn add(acc: &mut [i32], bytes: &[u8]) {
        let swap = swap_mask();
        let whole = acc.len() / 8 * 8;
        for i in (0..whole).step_by(8) {
            let v = _mm256_shuffle_epi8(_mm256_loadu_si256(bytes.as_ptr().add(i * 4).cast()), swap);
            let a = acc.as_mut_ptr().add(i).cast::<__m256i>();
            _mm256_storeu_si256(a, _mm256_add_epi32(_mm256_loadu_si256(a), v));
        }
        for (v, b) in acc[whole..]
            .iter_mut()
            .zip(bytes[whole * 4..].chunks_exact(4))
        {
            *v = v.wrapping_add(i32::from_be_bytes([b[0], b[1], b[2], b[3]]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_byte_order() {
        let values = [1, -2, i32::MAX, i32::MIN];
        let mut bytes = [0u8; 16];
        write_i32s(&mut bytes, &values);
        assert_eq!(&bytes[..8], &[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe]);
        let mut back = [0; 4];
        read_i32s(&bytes, &mut back);
        assert_eq!(back, values);
    }

    #[test]
    fn add_wraps_like_a_register() {
        let mut acc = [i32::MAX, -5];
        let mut bytes = [0u8; 8];
        write_i32s(&mut bytes, &[1, 7]);
        add_i32s(&mut acc, &bytes);
        assert_eq!(acc, [i32::MIN, 2]);
    }

    #[test]
    fn the_summed_writer_writes_the_same_bytes_and_their_checksum_sum() {
        // Every length up to three AVX2 steps and a tail, with words whose
        // halves carry: the sum taken while writing folds to RFC 1071's.
        for n in 0..27 {
            let values: Vec<i32> = (0..n).map(|i| -1 - (i as i32) * 0x0101_7fff).collect();
            let mut plain = vec![0u8; n * 4];
            write_i32s(&mut plain, &values);
            let mut summed = vec![0u8; n * 4];
            let sum = write_i32s_summed(&mut summed, &values);
            assert_eq!(summed, plain, "{n} values");
            assert_eq!(
                crate::frame::from_native(sum),
                crate::frame::ones_sum(&plain),
                "{n} values"
            );
        }
    }

    #[test]
    fn vector_and_tail_lanes_agree_with_scalar_arithmetic() {
        // 19 lanes: two AVX2 steps and a 3-lane tail.
        let values: Vec<i32> = (0..19).map(|i| (i * 0x0102_0304) ^ (i << 29)).collect();
        let mut bytes = vec![0u8; 19 * 4];
        write_i32s(&mut bytes, &values);
        for (i, v) in values.iter().enumerate() {
            assert_eq!(&bytes[i * 4..i * 4 + 4], &v.to_be_bytes());
        }
        let mut back = vec![0; 19];
        read_i32s(&bytes, &mut back);
        assert_eq!(back, values);
        let mut acc: Vec<i32> = (0..19).map(|i| i32::MAX - i).collect();
        add_i32s(&mut acc, &bytes);
        let want: Vec<i32> = (0..19)
            .map(|i| (i32::MAX - i as i32).wrapping_add(values[i]))
            .collect();
        assert_eq!(acc, want);
    }
}
