//! P4Runtime bytestrings: how match values, action parameters and the like
//! carry integers (P4Runtime specification, "Bytestrings").
//!
//! An unsigned integer of a field `bitwidth` bits wide is its big-endian
//! bytes. The canonical form, the one servers return in reads and the one
//! written here, is the shortest that holds the value: no leading zero bytes,
//! and zero as the single byte 0x00. A receiver accepts any length as long as
//! the value fits the width, so [`decode`] does.

/// A value that does not fit its field, or a string no value can come from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The value needs more bits than the field has.
    #[error("{value} does not fit in {bitwidth} bits")]
    TooWide {
        /// The value.
        value: u64,
        /// The field's width.
        bitwidth: u32,
    },
    /// Empty strings encode nothing; servers reject them.
    #[error("empty bytestring")]
    Empty,
    /// The string holds a value wider than the field (or than 64 bits).
    #[error("bytestring {bytes:02x?} does not fit in {bitwidth} bits")]
    Overflow {
        /// The string.
        bytes: Vec<u8>,
        /// The field's width.
        bitwidth: u32,
    },
}

/// The canonical bytestring of `value` for a field of `bitwidth` bits.
pub fn encode(value: u64, bitwidth: u32) -> Result<Vec<u8>, Error> {
    if bitwidth < 64 && value >> bitwidth != 0 {
        return Err(Error::TooWide { value, bitwidth });
    }
    let bytes = value.to_be_bytes();
    let first = bytes.iter().position(|&b| b != 0).unwrap_or(7);
    Ok(bytes[first..].to_vec())
}

/// The value of a bytestring for a field of `bitwidth` bits (at most 64).
/// Leading zero bytes are accepted.
pub fn decode(bytes: &[u8], bitwidth: u32) -> Result<u64, Error> {
    if bytes.is_empty() {
        return Err(Error::Empty);
    }
    let first = bytes
        .iter()
        .position(|&b| b != 0)
        .unwrap_or(bytes.len() - 1);
    let significant = &bytes[first..];
    let overflow = || Error::Overflow {
        bytes: bytes.to_vec(),
        bitwidth,
    };
    if significant.len() > 8 {
        return Err(overflow());
    }
    let value = significant
        .iter()
        .fold(0u64, |v, &b| (v << 8) | u64::from(b));
    if bitwidth < 64 && value >> bitwidth != 0 {
        return Err(overflow());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_canonically() {
        assert_eq!(encode(0, 16).unwrap(), [0x00]);
        assert_eq!(encode(1, 9).unwrap(), [0x01]);
        assert_eq!(encode(0x1388, 16).unwrap(), [0x13, 0x88]);
        assert_eq!(encode(0x0a00_0001, 32).unwrap(), [10, 0, 0, 1]);
        assert_eq!(encode(0x0000_0100_0000, 48).unwrap(), [1, 0, 0, 0]);
        assert_eq!(encode(0x0200_0000_0001, 48).unwrap(), [2, 0, 0, 0, 0, 1]);
        assert_eq!(encode(u64::MAX, 64).unwrap(), [0xff; 8]);
        assert_eq!(encode(511, 9).unwrap(), [0x01, 0xff]);
    }

    #[test]
    fn refuses_values_wider_than_the_field() {
        assert_eq!(
            encode(512, 9),
            Err(Error::TooWide {
                value: 512,
                bitwidth: 9
            })
        );
        assert_eq!(
            encode(8, 3).unwrap_err().to_string(),
            "8 does not fit in 3 bits"
        );
    }

    #[test]
    fn decodes_any_length_that_fits() {
        assert_eq!(decode(&[0x00], 16), Ok(0));
        assert_eq!(decode(&[0x00, 0x00, 0x05], 9), Ok(5));
        assert_eq!(decode(&[0x13, 0x88], 16), Ok(5000));
        assert_eq!(decode(&[0, 0, 0, 0, 0, 0, 0, 0, 0, 7], 64), Ok(7));
        assert_eq!(decode(&[], 8), Err(Error::Empty));
        assert!(matches!(
            decode(&[0x02, 0x00], 9),
            Err(Error::Overflow { .. })
        ));
        assert!(matches!(
            decode(&[1, 0, 0, 0, 0, 0, 0, 0, 0], 64),
            Err(Error::Overflow { .. })
        ));
    }

    #[test]
    fn round_trips() {
        for (v, w) in [(0, 1), (1, 1), (255, 8), (256, 16), (65_535, 16), (300, 9)] {
            assert_eq!(decode(&encode(v, w).unwrap(), w), Ok(v));
        }
    }
}
