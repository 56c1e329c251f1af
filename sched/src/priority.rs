//! Priority scheduling of a model's gradient slices over an in-network
//! aggregation transport: FIFO (what a framework does with wait-free
//! back-propagation), P3, ByteScheduler and Geryon (survey section 4.4;
//! docs/PAPERS.md, "Priority scheduling"). The live half, which runs these
//! orders on real agents, is `inagg_host_agent::priority`: it takes its
//! [`Order`] and Geryon's [`geryon_class`] from here, so the simulator and
//! the agents serve slices by one rule.
//!
//! Back-propagation hands gradients over last layer first; the next
//! forward pass needs the first layer first. P3 sends the most urgent slice
//! first and waits for each (stop-and-wait); ByteScheduler keeps up to
//! `credit` slices in flight; Geryon tags every packet with a priority class
//! (urgency 1 - l/L against thresholds) and lets strict-priority queues do
//! the rest, with everything in flight.

/// Which waiting slice is served first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Order {
    /// In production order (what a framework without a scheduler does).
    Fifo,
    /// Most urgent first: the lowest rank (P3 and ByteScheduler use the
    /// layer's position in the forward pass), production order within.
    Priority,
    /// The highest priority class first (Geryon), production order within.
    Class,
}

impl Order {
    /// The key of a slice of `rank` whose packets carry `class`, produced
    /// `seq`-th: the slice with the least key is served first.
    pub fn key(self, rank: u64, class: u8, seq: u64) -> (u64, u64) {
        match self {
            Order::Fifo => (0, seq),
            Order::Priority => (rank, seq),
            Order::Class => (u64::from(u8::MAX - class), seq),
        }
    }
}

/// A scheduling policy.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub enum Policy {
    /// Whole tensors in the order they are produced, all in flight.
    Fifo,
    /// Slices of `slice` bytes, most urgent first, one in flight.
    P3 { slice: f64 },
    /// Slices of `slice` bytes, most urgent first, `credit` in flight.
    ByteScheduler { slice: f64, credit: usize },
    /// Packets of `packet` bytes, all in flight, served by priority class
    /// (then in production order).
    Geryon { packet: f64, thresholds: Vec<f64> },
}

/// A slice waiting to be sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Slice {
    /// Its layer (0 = the first the forward pass needs).
    pub layer: usize,
    /// Production order (ties).
    pub seq: u64,
    pub bytes: f64,
}

impl Policy {
    /// Slices of a layer's `bytes` under this policy.
    pub fn cut(&self, bytes: f64) -> Vec<f64> {
        let size = match self {
            Policy::Fifo => bytes,
            Policy::P3 { slice } | Policy::ByteScheduler { slice, .. } => *slice,
            Policy::Geryon { packet, .. } => *packet,
        };
        if size <= 0.0 || bytes <= size {
            return vec![bytes];
        }
        let whole = (bytes / size).floor() as usize;
        let mut out = vec![size; whole];
        let rest = bytes - whole as f64 * size;
        if rest > 0.0 {
            out.push(rest);
        }
        out
    }

    /// Slices in flight at most.
    pub fn credit(&self) -> usize {
        match self {
            Policy::P3 { .. } => 1,
            Policy::ByteScheduler { credit, .. } => (*credit).max(1),
            Policy::Fifo | Policy::Geryon { .. } => usize::MAX,
        }
    }

    /// The order it serves slices in.
    pub fn order(&self) -> Order {
        match self {
            Policy::Fifo => Order::Fifo,
            Policy::P3 { .. } | Policy::ByteScheduler { .. } => Order::Priority,
            Policy::Geryon { .. } => Order::Class,
        }
    }

    /// The order of service: the pending slice with the least key goes
    /// next (a key for a priority queue), for a model of `layers` layers.
    pub fn key(&self, s: &Slice, layers: usize) -> (u64, u64) {
        let class = match self {
            Policy::Geryon { thresholds, .. } => geryon_class(s.layer, layers, thresholds),
            _ => 0,
        };
        self.order().key(s.layer as u64, class, s.seq)
    }

    /// Which pending slice goes next (an index into `pending`).
    pub fn next(&self, pending: &[Slice], layers: usize) -> Option<usize> {
        (0..pending.len()).min_by_key(|&i| self.key(&pending[i], layers))
    }
}

/// Geryon's urgency of layer `l` of `layers`: 1 - l/L (the first layer is
/// the most urgent).
pub fn urgency(layer: usize, layers: usize) -> f64 {
    1.0 - layer as f64 / layers.max(1) as f64
}

/// Geryon's class of layer `layer` of `layers`, numbered as the wire's
/// priority field is (0 = lowest, docs/PROTOCOL.md): the number of
/// `thresholds` the urgency reaches (`>=`). With one threshold 0.6, an
/// urgency of 0.7 is class 1 (high) and 0.5 is class 0.
pub fn geryon_class(layer: usize, layers: usize, thresholds: &[f64]) -> u8 {
    let u = urgency(layer, layers);
    u8::try_from(thresholds.iter().filter(|&&t| u >= t).count()).unwrap_or(u8::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders() {
        let s = |layer, seq| Slice {
            layer,
            seq,
            bytes: 1.0,
        };
        let pending = [s(5, 0), s(3, 1), s(0, 2), s(1, 3)];
        assert_eq!(Policy::Fifo.next(&pending, 6), Some(0));
        assert_eq!(Policy::P3 { slice: 1.0 }.next(&pending, 6), Some(2));
        // Geryon with one threshold 0.6: layers 0-2 of 6 (urgency 1, 0.83,
        // 0.67) are class 1, the higher; FIFO within the class.
        let g = Policy::Geryon {
            packet: 1.0,
            thresholds: vec![0.6],
        };
        assert_eq!(geryon_class(2, 6, &[0.6]), 1);
        assert_eq!(geryon_class(3, 6, &[0.6]), 0);
        // On a threshold the urgency reaches it: the more urgent class.
        assert_eq!(geryon_class(4, 10, &[0.6]), 1);
        assert_eq!(geryon_class(0, 10, &[0.3, 0.6, 0.9]), 3);
        assert_eq!(g.next(&pending, 6), Some(2));
        assert_eq!(g.next(&pending[..2], 6), Some(0));
        assert_eq!(Policy::Fifo.next(&[], 6), None);
    }

    #[test]
    fn cut_and_credit() {
        assert_eq!(Policy::P3 { slice: 4.0 }.cut(10.0), vec![4.0, 4.0, 2.0]);
        assert_eq!(Policy::Fifo.cut(10.0), vec![10.0]);
        assert_eq!(
            Policy::ByteScheduler {
                slice: 4.0,
                credit: 0
            }
            .credit(),
            1
        );
        assert_eq!(Policy::P3 { slice: 4.0 }.credit(), 1);
    }
}
