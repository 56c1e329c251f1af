//! Bulk conversion between int32 slices and payload bytes (big-endian, the
//! network order the P4 programs add in).
//!
//! These loops are written so the compiler vectorises them (a byte swap per
//! lane); they are the agent's and the emulator's per-element hot path.

use crate::ELEMENT_LEN;

/// Writes `values` into `out` as big-endian int32s. `out` must be exactly
/// `values.len() * 4` bytes.
#[inline]
pub fn write_i32s(out: &mut [u8], values: &[i32]) {
    assert_eq!(out.len(), values.len() * ELEMENT_LEN, "payload size");
    for (chunk, v) in out.chunks_exact_mut(ELEMENT_LEN).zip(values) {
        chunk.copy_from_slice(&v.to_be_bytes());
    }
}

/// Reads big-endian int32s from `bytes` into `out`. `bytes` must be exactly
/// `out.len() * 4` bytes.
#[inline]
pub fn read_i32s(bytes: &[u8], out: &mut [i32]) {
    assert_eq!(bytes.len(), out.len() * ELEMENT_LEN, "payload size");
    for (chunk, v) in bytes.chunks_exact(ELEMENT_LEN).zip(out) {
        *v = i32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
}

/// Adds the big-endian int32s in `bytes` into `acc`, wrapping on overflow as
/// a 32-bit register ALU does.
#[inline]
pub fn add_i32s(acc: &mut [i32], bytes: &[u8]) {
    assert_eq!(bytes.len(), acc.len() * ELEMENT_LEN, "payload size");
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
}
