//! What each round of a slot carries, for int32 and float all-reduces, and
//! how a tensor is shared between the lanes of a multi-queue worker.

use std::marker::PhantomData;

use inagg_wire::payload;

use crate::float::Float;
use crate::protocol::{Codec, Encoded};
use crate::quant;

/// A lane's share of a tensor: the chunks of the slots the lane owns.
///
/// Chunk `c` travels in slot `c % window`, and lane `l` of `n` owns the
/// slots `s` with `s % n == l`, so the lanes' chunks are disjoint and each
/// lane can write its own in place while the others run on other cores.
/// [`LaneData::chunk`] enforces the ownership, which is what makes handing
/// out `&mut` chunks from several views of one tensor sound.
pub(crate) struct LaneData<'a, T> {
    ptr: *mut T,
    len: usize,
    k: usize,
    window: usize,
    lanes: usize,
    lane: usize,
    _tensor: PhantomData<&'a mut [T]>,
}

// SAFETY: a view only reaches its own chunks (see `chunk`), disjoint from
// every other view's; the tensor is borrowed mutably for 'a.
unsafe impl<T: Send> Send for LaneData<'_, T> {}

impl<'a, T> LaneData<'a, T> {
    /// `lanes` views of `data` in chunks of `k` dealt to `window` slots.
    pub fn split(data: &'a mut [T], k: usize, window: usize, lanes: usize) -> Vec<Self> {
        assert!(
            k > 0 && window > 0 && lanes > 0,
            "k, window and lanes are positive"
        );
        (0..lanes)
            .map(|lane| LaneData {
                ptr: data.as_mut_ptr(),
                len: data.len(),
                k,
                window,
                lanes,
                lane,
                _tensor: PhantomData,
            })
            .collect()
    }

    /// The whole tensor as one lane.
    #[cfg(test)]
    pub fn whole(data: &'a mut [T], k: usize) -> Self {
        Self::split(data, k, 1, 1).remove(0)
    }

    /// Elements in the whole tensor.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The chunk round `round` of `slot` carries (chunk `slot + round *
    /// window`), if the tensor has it. Panics if another lane owns the
    /// slot: the engine gives a lane only its own slots' rounds. Taking the
    /// slot rather than the chunk index keeps the check free of divisions
    /// on a one-lane worker (it runs twice per packet).
    pub fn chunk(&mut self, slot: usize, round: usize) -> Option<&mut [T]> {
        assert!(
            slot < self.window && (self.lanes == 1 || slot % self.lanes == self.lane),
            "slot {slot} belongs to another lane"
        );
        let start = round
            .checked_mul(self.window)
            .and_then(|i| i.checked_add(slot))
            .and_then(|i| i.checked_mul(self.k))?;
        if start >= self.len {
            return None;
        }
        let end = (start + self.k).min(self.len);
        // SAFETY: in bounds, and no other view reaches this chunk (above);
        // &mut self keeps this view from lending it twice.
        Some(unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), end - start) })
    }

    /// The chunk a round carries: the engine only runs rounds the tensor has.
    fn round_chunk(&mut self, slot: usize, round: usize) -> &mut [T] {
        self.chunk(slot, round)
            .expect("round within the slot's chunks")
    }
}

/// Int32 sums: chunk `slot + round * window` in round `round`; no exponents.
pub(crate) struct IntCodec<'a> {
    pub data: LaneData<'a, i32>,
    /// Each chunk's priority class, when chunks have their own.
    pub classes: Option<&'a [u8]>,
}

/// The class of chunk `index`, if `classes` gives chunks classes.
fn chunk_class(classes: Option<&[u8]>, index: usize) -> Option<u8> {
    classes.and_then(|c| c.get(index).copied())
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
        dealt(chunk_count(self.data.len(), self.data.k), slot, window)
    }

    fn encode(&mut self, slot: usize, round: usize, _window: usize, out: &mut [u8]) -> Encoded {
        let chunk = self.data.round_chunk(slot, round);
        let len = chunk.len();
        let sum = payload::write_i32s_summed(&mut out[..len * 4], chunk);
        out[len * 4..].fill(0);
        Encoded { exponent: 0, sum }
    }

    fn decode(&mut self, slot: usize, round: usize, _window: usize, bytes: &[u8], _exponent: u8) {
        let chunk = self.data.round_chunk(slot, round);
        let len = chunk.len();
        payload::read_i32s(&bytes[..len * 4], chunk);
    }

    fn class(&self, slot: usize, round: usize, window: usize) -> Option<u8> {
        chunk_class(self.classes, slot + round * window)
    }
}

/// Float sums with the exponent negotiated one window ahead (as SwitchML
/// does): round 0 of a slot carries only the block exponent of the slot's
/// first chunk; round r >= 1 carries chunk `slot + (r-1) * window`, quantized
/// with its agreed exponent, and the exponent of the chunk one window later.
/// One extra packet per slot, none per chunk. `T` is the tensor's format
/// (binary32, or a 16-bit one widened on the way: [`Float`]).
pub(crate) struct FloatCodec<'a, T> {
    pub data: LaneData<'a, T>,
    /// Each chunk's priority class, when chunks have their own.
    pub classes: Option<&'a [u8]>,
    /// Agreed (max-reduced) exponent per chunk, filled as results arrive
    /// (a lane fills only its own chunks').
    pub agreed: Vec<u8>,
    /// The quantizer for the job's worker count.
    quantizer: quant::Quantizer,
    /// A 16-bit chunk widened to binary32 (unused for binary32 tensors).
    scratch: Vec<f32>,
}

impl<'a, T: Float> FloatCodec<'a, T> {
    pub fn new(data: LaneData<'a, T>, workers: u16, classes: Option<&'a [u8]>) -> Self {
        let chunks = chunk_count(data.len(), data.k);
        FloatCodec {
            data,
            classes,
            agreed: vec![0; chunks],
            quantizer: quant::Quantizer::new(workers),
            scratch: Vec::new(),
        }
    }
}

/// The chunk round `round` of `slot` carries quantized, with its agreed
/// exponent (none in round 0, which carries only an exponent). Takes the
/// codec's fields apart so the caller can lend its scratch buffer too.
fn quantized<'b, T>(
    agreed: &[u8],
    data: &'b mut LaneData<'_, T>,
    slot: usize,
    round: usize,
    window: usize,
) -> Option<(u8, &'b mut [T])> {
    let round = round.checked_sub(1)?;
    let index = slot + round * window;
    Some((agreed[index], data.round_chunk(slot, round)))
}

impl<T: Float> Codec for FloatCodec<'_, T> {
    fn rounds(&self, slot: usize, window: usize) -> usize {
        let chunks = self.agreed.len();
        let n = dealt(chunks, slot, window);
        if n == 0 {
            0
        } else {
            n + 1
        }
    }

    fn encode(&mut self, slot: usize, round: usize, window: usize, out: &mut [u8]) -> Encoded {
        let sum = match quantized(&self.agreed, &mut self.data, slot, round, window) {
            None => {
                out.fill(0);
                0
            }
            Some((e, chunk)) => T::quantize(&self.quantizer, chunk, e, out, &mut self.scratch),
        };
        let exponent = self
            .data
            .chunk(slot, round)
            .map_or(0, |c| T::block_exponent(c));
        Encoded { exponent, sum }
    }

    fn decode(&mut self, slot: usize, round: usize, window: usize, bytes: &[u8], exponent: u8) {
        if let Some((e, chunk)) = quantized(&self.agreed, &mut self.data, slot, round, window) {
            T::dequantize(&self.quantizer, bytes, e, chunk, &mut self.scratch);
        }
        if let Some(next) = self.agreed.get_mut(slot + round * window) {
            *next = exponent;
        }
    }

    /// Round 0 carries only an exponent: it can be the slot's handshake.
    fn carries_values(&self, _slot: usize, round: usize, _window: usize) -> bool {
        round > 0
    }

    /// Round r >= 1 carries chunk `slot + (r-1) * window`; round 0, the
    /// exponent of the slot's first chunk, goes with that chunk's class.
    fn class(&self, slot: usize, round: usize, window: usize) -> Option<u8> {
        chunk_class(self.classes, slot + round.saturating_sub(1) * window)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_reach_disjoint_chunks_that_cover_the_tensor() {
        // 10 elements, k = 2: chunks 0..5 over a window of 3 slots and 2
        // lanes: lane 0 owns slots 0 and 2 (chunks 0, 2, 3), lane 1 slot 1
        // (chunks 1, 4).
        let mut data: Vec<u32> = (0..10).collect();
        let mut lanes = LaneData::split(&mut data, 2, 3, 2);
        for (s, r) in [(0, 0), (2, 0), (0, 1)] {
            lanes[0]
                .chunk(s, r)
                .unwrap()
                .iter_mut()
                .for_each(|x| *x += 100);
        }
        for (s, r) in [(1, 0), (1, 1)] {
            lanes[1]
                .chunk(s, r)
                .unwrap()
                .iter_mut()
                .for_each(|x| *x += 200);
        }
        assert_eq!(lanes[1].chunk(1, 2), None, "past the end");
        drop(lanes);
        assert_eq!(data, [100, 101, 202, 203, 104, 105, 106, 107, 208, 209]);
    }

    #[test]
    #[should_panic(expected = "belongs to another lane")]
    fn a_lane_cannot_reach_another_lanes_chunk() {
        let mut data = [0u8; 8];
        let mut lanes = LaneData::split(&mut data, 2, 2, 2);
        let _ = lanes[0].chunk(1, 0);
    }

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
        let c = FloatCodec::<f32>::new(LaneData::whole(&mut data, 4), 2, None);
        // 3 chunks over a window of 2: slot 0 has chunks 0 and 2, slot 1 has chunk 1.
        assert_eq!((c.rounds(0, 2), c.rounds(1, 2)), (3, 2));
    }
}
