//! What each round of a slot carries, for int32 and float all-reduces.

use inagg_wire::payload;

use crate::engine::Codec;
use crate::quant;

/// Int32 sums: chunk `slot + round * window` in round `round`; no exponents.
pub(crate) struct IntCodec<'a> {
    pub data: &'a mut [i32],
    pub k: usize,
}

impl IntCodec<'_> {
    fn chunk(&self, index: usize) -> std::ops::Range<usize> {
        index * self.k..((index + 1) * self.k).min(self.data.len())
    }
}

/// Chunks of `k` elements in `len` elements.
pub(crate) fn chunk_count(len: usize, k: usize) -> usize {
    len.div_ceil(k)
}

/// Rounds of slot `slot` when `items` items are dealt round-robin to `window` slots.
fn dealt(items: usize, slot: usize, window: usize) -> usize {
    if slot < items {
        (items - slot).div_ceil(window)
    } else {
        0
    }
}

impl Codec for IntCodec<'_> {
    fn rounds(&self, slot: usize, window: usize) -> usize {
        dealt(chunk_count(self.data.len(), self.k), slot, window)
    }

    fn encode(&mut self, slot: usize, round: usize, window: usize, out: &mut [u8]) -> u8 {
        let r = self.chunk(slot + round * window);
        let len = r.len();
        payload::write_i32s(&mut out[..len * 4], &self.data[r]);
        out[len * 4..].fill(0);
        0
    }

    fn decode(&mut self, slot: usize, round: usize, window: usize, bytes: &[u8], _exponent: u8) {
        let r = self.chunk(slot + round * window);
        let len = r.len();
        payload::read_i32s(&bytes[..len * 4], &mut self.data[r]);
    }
}

/// Float sums with the exponent negotiated one window ahead (as SwitchML
/// does): round 0 of a slot carries only the block exponent of the slot's
/// first chunk; round r >= 1 carries chunk `slot + (r-1) * window`, quantized
/// with its agreed exponent, and the exponent of the chunk one window later.
/// One extra packet per slot, none per chunk.
pub(crate) struct FloatCodec<'a> {
    pub data: &'a mut [f32],
    pub k: usize,
    pub workers: u16,
    /// Agreed (max-reduced) exponent per chunk, filled as results arrive.
    pub agreed: Vec<u8>,
}

impl<'a> FloatCodec<'a> {
    pub fn new(data: &'a mut [f32], k: usize, workers: u16) -> Self {
        let chunks = chunk_count(data.len(), k);
        FloatCodec {
            data,
            k,
            workers,
            agreed: vec![0; chunks],
        }
    }

    fn chunk(&self, index: usize) -> Option<std::ops::Range<usize>> {
        let start = index * self.k;
        (start < self.data.len()).then(|| start..(start + self.k).min(self.data.len()))
    }
}

impl Codec for FloatCodec<'_> {
    fn rounds(&self, slot: usize, window: usize) -> usize {
        let chunks = self.agreed.len();
        let n = dealt(chunks, slot, window);
        if n == 0 {
            0
        } else {
            n + 1
        }
    }

    fn encode(&mut self, slot: usize, round: usize, window: usize, out: &mut [u8]) -> u8 {
        if round == 0 {
            out.fill(0);
        } else {
            let index = slot + (round - 1) * window;
            let r = self.chunk(index).expect("round within the slot's chunks");
            quant::quantize(&self.data[r], self.agreed[index], self.workers, out);
        }
        self.chunk(slot + round * window)
            .map_or(0, |r| quant::block_exponent(&self.data[r]))
    }

    fn decode(&mut self, slot: usize, round: usize, window: usize, bytes: &[u8], exponent: u8) {
        if round > 0 {
            let index = slot + (round - 1) * window;
            let r = self.chunk(index).expect("round within the slot's chunks");
            let e = self.agreed[index];
            quant::dequantize(bytes, e, self.workers, &mut self.data[r]);
        }
        if let Some(next) = self.agreed.get_mut(slot + round * window) {
            *next = exponent;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_dealt_round_robin() {
        // 10 chunks over 4 slots: slots 0,1 get 3; slots 2,3 get 2.
        assert_eq!(
            (0..4).map(|s| dealt(10, s, 4)).collect::<Vec<_>>(),
            vec![3, 3, 2, 2]
        );
        assert_eq!(dealt(2, 3, 4), 0);
    }

    #[test]
    fn float_codec_has_one_exponent_round_per_slot() {
        let mut data = vec![1.0f32; 10];
        let c = FloatCodec::new(&mut data, 4, 2);
        // 3 chunks over a window of 2: slot 0 has chunks 0 and 2, slot 1 has chunk 1.
        assert_eq!((c.rounds(0, 2), c.rounds(1, 2)), (3, 2));
    }
}
