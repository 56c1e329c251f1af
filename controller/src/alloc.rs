//! The controller's allocator over a switch's aggregator memory.
//!
//! A pool is a contiguous range of slots (the switch maps a packet's slot
//! to `pool_base + slot`). Placement is best fit: the smallest free range
//! that holds the whole request, which keeps large ranges whole for large
//! jobs. When no range holds the request, the largest free range is
//! granted instead (a partial grant: the job's window shrinks, it still
//! works); when nothing is free, nothing is granted and the controller
//! falls back to host aggregation or makes the job wait.
//!
//! Pure: no I/O, so the controller's placement decisions are unit-tested
//! here.

use std::collections::BTreeMap;

pub use inagg_controller_api::Grant;

/// Why a range cannot be reserved (when rebuilding the allocator from the
/// controller's stored state).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// The range runs past the memory.
    #[error("slots [{base}, {end}) run past the switch's {slots} slots")]
    Beyond {
        /// First slot.
        base: u32,
        /// End.
        end: u64,
        /// Slots the switch has.
        slots: u32,
    },
    /// The range overlaps one already in use.
    #[error("slots [{base}, {end}) overlap the pool at [{other_base}, {other_end})")]
    Overlap {
        /// First slot.
        base: u32,
        /// End.
        end: u64,
        /// The pool in the way.
        other_base: u32,
        /// Its end.
        other_end: u64,
    },
}

/// Used ranges of `slots` slots of aggregator memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotAllocator {
    slots: u32,
    /// base -> size of each range in use.
    used: BTreeMap<u32, u32>,
}

impl SlotAllocator {
    /// An empty memory of `slots` slots.
    pub fn new(slots: u32) -> SlotAllocator {
        SlotAllocator {
            slots,
            used: BTreeMap::new(),
        }
    }

    /// Slots in the memory.
    pub fn slots(&self) -> u32 {
        self.slots
    }

    /// Slots not in any pool.
    pub fn free(&self) -> u32 {
        self.slots - self.used.values().sum::<u32>()
    }

    /// The free ranges, in slot order.
    pub fn free_ranges(&self) -> Vec<Grant> {
        let mut out = Vec::new();
        let mut at = 0u32;
        for (&base, &size) in &self.used {
            if base > at {
                out.push(Grant {
                    base: at,
                    size: base - at,
                });
            }
            at = base + size;
        }
        if at < self.slots {
            out.push(Grant {
                base: at,
                size: self.slots - at,
            });
        }
        out
    }

    /// The largest free range (the first of equals), if any slot is free.
    pub fn largest_free(&self) -> Option<Grant> {
        largest(&self.free_ranges())
    }

    /// Places a pool of `want` slots: best fit if a free range holds it,
    /// else the largest free range (a partial grant), else `None`.
    pub fn allocate(&mut self, want: u32) -> Option<Grant> {
        let ranges = self.free_ranges();
        let fit = ranges
            .iter()
            .filter(|r| r.size >= want)
            .min_by_key(|r| r.size)
            .map(|r| Grant {
                base: r.base,
                size: want,
            });
        let grant = fit.or_else(|| largest(&ranges))?;
        if grant.size == 0 {
            return None;
        }
        self.used.insert(grant.base, grant.size);
        Some(grant)
    }

    /// Marks a range as used (a pool the controller placed before a restart).
    pub fn reserve(&mut self, g: Grant) -> Result<(), AllocError> {
        if g.end() > u64::from(self.slots) {
            return Err(AllocError::Beyond {
                base: g.base,
                end: g.end(),
                slots: self.slots,
            });
        }
        // Ranges never overlap, so only the last one starting before our end
        // can reach into us.
        let before = self.used.range(..g.end() as u32).next_back();
        if let Some((&b, &s)) = before {
            if u64::from(b) + u64::from(s) > u64::from(g.base) {
                return Err(AllocError::Overlap {
                    base: g.base,
                    end: g.end(),
                    other_base: b,
                    other_end: u64::from(b) + u64::from(s),
                });
            }
        }
        self.used.insert(g.base, g.size);
        Ok(())
    }

    /// Frees the pool that starts at `base`; false if there was none.
    pub fn release(&mut self, base: u32) -> bool {
        self.used.remove(&base).is_some()
    }
}

/// A pool to move: from where it is to where a repacked memory puts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Move<K> {
    /// Whose pool (the controller's job name).
    pub key: K,
    /// Where it is.
    pub from: Grant,
    /// Where it goes.
    pub to: Grant,
}

/// Packs memory of `slots` slots again: the `fixed` pools stay where they
/// are, the `movable` ones are placed again, largest first, each best fit
/// (the big ones find room while there is). Returns the new memory and the
/// pools that move, or `None` when that does not make the largest free
/// range larger than `before`'s, or a movable pool does not fit whole, or
/// two fixed pools overlap.
pub fn repack<K: Clone + Ord>(
    before: &SlotAllocator,
    fixed: &[Grant],
    movable: &[(K, Grant)],
) -> Option<(SlotAllocator, Vec<Move<K>>)> {
    let mut next = SlotAllocator::new(before.slots());
    for g in fixed {
        next.reserve(*g).ok()?;
    }
    let mut movable = movable.to_vec();
    movable.sort_by_key(|(key, g)| (std::cmp::Reverse(g.size), key.clone()));
    let mut moves = Vec::new();
    for (key, from) in movable {
        let to = next.allocate(from.size).filter(|g| g.size == from.size)?;
        if to != from {
            moves.push(Move { key, from, to });
        }
    }
    let size = |a: &SlotAllocator| a.largest_free().map_or(0, |g| g.size);
    (size(&next) > size(before)).then_some((next, moves))
}

/// The largest of `ranges`, the first of equals.
fn largest(ranges: &[Grant]) -> Option<Grant> {
    ranges
        .iter()
        .copied()
        .reduce(|best, r| if r.size > best.size { r } else { best })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_keeps_the_large_range_whole() {
        let mut a = SlotAllocator::new(100);
        let g1 = a.allocate(10).unwrap(); // [0,10)
        let g2 = a.allocate(20).unwrap(); // [10,30)
        let _g3 = a.allocate(5).unwrap(); // [30,35)
        assert!(a.release(g1.base));
        // Free: [0,10) and [35,100); 8 slots go in the small hole.
        assert_eq!(a.allocate(8), Some(Grant { base: 0, size: 8 }));
        assert!(a.release(g2.base));
        assert_eq!(a.free(), 100 - 8 - 5);
    }

    #[test]
    fn a_request_larger_than_any_range_gets_the_largest_one() {
        let mut a = SlotAllocator::new(64);
        let g = a.allocate(40).unwrap();
        assert_eq!(g, Grant { base: 0, size: 40 });
        assert_eq!(a.allocate(40), Some(Grant { base: 40, size: 24 }));
        assert_eq!(a.allocate(1), None, "nothing is free");
        assert_eq!(a.free(), 0);
    }

    #[test]
    fn reserve_refuses_overlaps_and_ranges_beyond_memory() {
        let mut a = SlotAllocator::new(32);
        a.reserve(Grant { base: 8, size: 8 }).unwrap();
        assert!(matches!(
            a.reserve(Grant { base: 12, size: 8 }),
            Err(AllocError::Overlap { other_base: 8, .. })
        ));
        assert!(matches!(
            a.reserve(Grant { base: 4, size: 5 }),
            Err(AllocError::Overlap { other_base: 8, .. })
        ));
        assert!(matches!(
            a.reserve(Grant { base: 30, size: 4 }),
            Err(AllocError::Beyond { .. })
        ));
        a.reserve(Grant { base: 0, size: 8 }).unwrap();
        assert_eq!(a.free_ranges(), vec![Grant { base: 16, size: 16 }]);
    }

    /// Memory of 64 slots holding `pools` (name, base, size).
    fn memory(pools: &[(&str, u32, u32)]) -> (SlotAllocator, Vec<(String, Grant)>) {
        let mut a = SlotAllocator::new(64);
        let pools: Vec<(String, Grant)> = pools
            .iter()
            .map(|&(name, base, size)| (name.to_string(), Grant { base, size }))
            .collect();
        for (_, g) in &pools {
            a.reserve(*g).unwrap();
        }
        (a, pools)
    }

    #[test]
    fn repacking_moves_pools_between_all_reduces_around_the_fixed_ones() {
        // [0,8) a, [16,24) b (installed), [40,48) c: free 8+16+16, largest 16.
        let (a, pools) = memory(&[("a", 0, 8), ("b", 16, 8), ("c", 40, 8)]);
        let fixed = [pools[1].1];
        let movable = [pools[0].clone(), pools[2].clone()];
        let (next, moves) = repack(&a, &fixed, &movable).unwrap();
        // a stays at 0 (best fit in [0,16)); c goes to [8,16): [24,64) is free.
        assert_eq!(
            moves,
            vec![Move {
                key: "c".to_string(),
                from: Grant { base: 40, size: 8 },
                to: Grant { base: 8, size: 8 },
            }]
        );
        assert_eq!(next.largest_free(), Some(Grant { base: 24, size: 40 }));
    }

    #[test]
    fn repacking_that_gains_nothing_is_refused() {
        // Already packed: nothing to gain.
        let (a, pools) = memory(&[("a", 0, 8), ("b", 8, 8)]);
        assert_eq!(repack(&a, &[], &pools), None);
        // Installed pools alone fragment the memory: moving none gains nothing.
        let (a, pools) = memory(&[("a", 8, 8), ("b", 32, 8)]);
        let fixed: Vec<Grant> = pools.iter().map(|(_, g)| *g).collect();
        assert_eq!(repack::<String>(&a, &fixed, &[]), None);
    }
}
