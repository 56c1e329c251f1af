//! Bulk conversion between int32 slices and payload bytes (big-endian, the
//! network order the P4 programs add in).
//!
//! They are the agent's and the emulator's per-element hot path: on x86-64
//! with AVX2 (checked once at run time) eight lanes are swapped with one
//! `vpshufb` and added with one `vpaddd`; elsewhere plain loops.

#[cfg(target_arch = "x86_64")]
use crate::simd;
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
