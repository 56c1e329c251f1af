//! Seeded mutations of a corpus, for the replay tests on stable Rust
//! (libFuzzer's own mutator does this, guided by coverage, under
//! `fuzz/run`): a few edits of one seed, of the kinds that reach past
//! length and range checks.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Values at the edges of fields' ranges.
const EDGES: [u16; 8] = [0, 1, 2, 0x7f, 0x80, 0xff, 0x7fff, 0xffff];

/// One of `seeds` (not empty) with one to four edits: bits flipped, bytes
/// or 16-bit fields set to random or edge values, cut short, bytes
/// inserted or removed, a range repeated, or the tail of another seed.
pub fn mutate(rng: &mut ChaCha8Rng, seeds: &[Vec<u8>]) -> Vec<u8> {
    let mut data = seeds[rng.random_range(0..seeds.len())].clone();
    for _ in 0..rng.random_range(1..=4) {
        edit(rng, &mut data, seeds);
    }
    data
}

fn edit(rng: &mut ChaCha8Rng, data: &mut Vec<u8>, seeds: &[Vec<u8>]) {
    let len = data.len();
    let at = |rng: &mut ChaCha8Rng| rng.random_range(0..len.max(1));
    match rng.random_range(0..8) {
        0 if len > 0 => data[at(rng)] ^= 1 << rng.random_range(0..8),
        1 if len > 0 => data[at(rng)] = rng.random(),
        2 if len > 1 => {
            let i = rng.random_range(0..len - 1);
            let v = EDGES[rng.random_range(0..EDGES.len())].to_be_bytes();
            data[i..i + 2].copy_from_slice(&v);
        }
        3 => data.truncate(rng.random_range(0..=len)),
        4 => {
            let i = rng.random_range(0..=len);
            let extra: Vec<u8> = (0..rng.random_range(1..16)).map(|_| rng.random()).collect();
            data.splice(i..i, extra);
        }
        5 if len > 0 => {
            let i = at(rng);
            let j = rng.random_range(i..=len);
            data.drain(i..j);
        }
        6 if len > 0 => {
            let i = at(rng);
            let j = rng.random_range(i..=len.min(i + 64));
            let copy = data[i..j].to_vec();
            data.splice(j..j, copy);
        }
        7 => {
            let other = &seeds[rng.random_range(0..seeds.len())];
            let from = rng.random_range(0..=other.len());
            data.truncate(rng.random_range(0..=len));
            data.extend_from_slice(&other[from..]);
        }
        _ => {}
    }
}
