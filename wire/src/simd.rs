//! The AVX2 helpers, shared by the payload conversion, the checksum
//! ([`crate::frame`]) and the agent's quantization kernels. x86-64 only;
//! every function's caller checks [`available`] first.

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
        3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8, 15, 14, 13, 12, 3, 2, 1, 0, 7, 6, 5, 4, 11, 10, 9, 8,
        15, 14, 13, 12,
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
