//! Priority scheduling of many tensors within one job: FIFO, P3 and
//! ByteScheduler over in-network aggregation, with Geryon's priority
//! classes on the packets. The order of service and Geryon's classes are
//! `inagg_sched::priority`'s, the rule the simulator reproduces the papers
//! with; this module runs them live, agreed by every worker.
//!
//! Back-propagation hands gradients over last layer first, but the next
//! forward pass needs the first layer first. P3 cuts tensors into slices and
//! sends the most urgent slice first (preemption at slice granularity);
//! ByteScheduler lets up to `credit` slices be committed at once, trading
//! preemption delay for pipelining; Geryon tags each packet with a priority
//! class so the switch's strict-priority queues favour urgent traffic.
//!
//! **Why the workers must agree.** On a switch every worker must put the same
//! slice in the same slot, or the switch adds unrelated numbers. A P3 or
//! ByteScheduler on a parameter server needs no agreement (each key is
//! summed apart); here the order itself must be the same everywhere, though
//! each worker's tensors become ready at its own moment. The scheduler
//! therefore runs in *epochs*: each epoch is one all-reduce of
//!
//! ```text
//! [ control: K - 1 flags | slice | slice | ... ] (each slice padded to whole chunks of K - 1)
//! ```
//!
//! where flag `i` is 1 on a worker holding tensor `base + i` (tensors are
//! numbered in the order they are submitted, the same order on every worker,
//! as for plain all-reduces). A flag that sums to the worker count means
//! the tensor is ready everywhere: every worker learns it from the same
//! result, in the same epoch, so every worker adds it to the same pending
//! set at once. Which slices go into the next epoch is a function of that
//! set alone (most urgent first, up to `credit` slices), so every worker
//! builds the same epoch without any further exchange. An urgent tensor that
//! arrives late is agreed one epoch later and overtakes every slice of a
//! bulk tensor not yet committed: at most `credit` slices stand in its way.
//! (Horovod and ByteScheduler's all-reduce mode agree through a coordinator
//! process; here the switch's own sums are the coordinator.)
//!
//! Float flags are summed through the float path (quantized); the sum is
//! rounded to the nearest integer, which the quantization error bound
//! (far below 0.5 for values of 1) makes exact.

use std::collections::VecDeque;
use std::sync::mpsc::{Receiver, TryRecvError};
use std::time::Instant;

use crate::{Error, Result, Stats, Worker};

/// An element type the scheduler can all-reduce.
pub trait Element: Copy + Default + Send + 'static {
    /// The control flag "I hold this tensor".
    const ONE: Self;
    /// Sums `data` across the job, tagging chunk `c` with `classes[c]`.
    fn allreduce(worker: &mut Worker, data: &mut [Self], classes: &[u8]) -> Result<Stats>;
    /// A summed flag as a count of workers.
    fn count(self) -> i64;
    /// The largest worker count whose flags sum exactly in this type.
    const MAX_COUNT: i64;
}

impl Element for i32 {
    const ONE: i32 = 1;
    const MAX_COUNT: i64 = i32::MAX as i64;
    fn allreduce(worker: &mut Worker, data: &mut [i32], classes: &[u8]) -> Result<Stats> {
        worker.allreduce_i32_classes(data, Some(classes))
    }
    fn count(self) -> i64 {
        i64::from(self)
    }
}

/// Every float format: flags are summed through the float path.
macro_rules! float_element {
    ($($t:ty: $one:expr, $max:expr),*) => {$(
        impl Element for $t {
            const ONE: $t = $one;
            const MAX_COUNT: i64 = $max;
            fn allreduce(worker: &mut Worker, data: &mut [$t], classes: &[u8]) -> Result<Stats> {
                worker.allreduce_float(data, Some(classes))
            }
            fn count(self) -> i64 {
                // Quantized sums of small integers are within ~1e-8 of
                // them, and the 16-bit formats hold every integer up to
                // 256 (bfloat16) or 2048 (binary16) exactly.
                crate::float::Float::to_f32(self).round() as i64
            }
        }
    )*};
}

// Integers are exact up to 2^(significand bits + 1).
float_element!(
    f32: 1.0, 1 << 24,
    crate::f16: crate::f16::ONE, 1 << 11,
    crate::bf16: crate::bf16::ONE, 1 << 8
);

/// How urgent a tensor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Priority {
    /// Order of service: lower goes first (P3 uses the layer's position in
    /// the forward pass). Ties go in submission order.
    pub rank: u32,
    /// The priority class its packets carry (0 = lowest, as on the wire),
    /// which the switch maps to an egress queue.
    pub class: u8,
}

impl Priority {
    /// Geryon's rule for layer `layer` (0-based, forward order) of `layers`
    /// ([`inagg_sched::priority::geryon_class`]): urgency `1 - layer /
    /// layers`, and the class is the number of `thresholds` the urgency
    /// reaches, so with one threshold 0.6 an urgency of 0.7 is class 1
    /// (high) and 0.5 is class 0. The rank is the layer, so P3 serves the
    /// same order.
    pub fn geryon(layer: usize, layers: usize, thresholds: &[f64]) -> Priority {
        Priority {
            rank: u32::try_from(layer).unwrap_or(u32::MAX),
            class: inagg_sched::priority::geryon_class(layer, layers, thresholds),
        }
    }
}

/// A tensor handed to the scheduler.
#[derive(Debug, Clone)]
pub struct Tensor<T> {
    /// The gradient; the sum comes back in the same buffer.
    pub data: Vec<T>,
    /// Its urgency.
    pub priority: Priority,
}

/// A tensor whose sum is complete.
#[derive(Debug, Clone)]
pub struct Completed<T> {
    /// Its number: the order in which it was submitted.
    pub seq: usize,
    /// The tensor, summed across the job.
    pub tensor: Tensor<T>,
    /// When this worker received it from the source.
    pub submitted: Instant,
    /// When every worker was known to hold it.
    pub agreed: Instant,
    /// When its last slice came back.
    pub finished: Instant,
}

/// Which slice goes next: in submission order, by [`Priority::rank`], or
/// by [`Priority::class`] (highest first).
pub use inagg_sched::priority::Order;

/// A scheduling policy: the order, the slice size and the credit.
///
/// The credit here is per epoch: up to `credit` slices are committed
/// together when the workers agree, rather than ByteScheduler's sliding
/// window of unacknowledged slices, because on a switch a slice may only be
/// committed at a point every worker agrees on. Within an epoch the engine's
/// window still keeps one packet per slot in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Service order.
    pub order: Order,
    /// Elements per slice (rounded up to whole chunks, a packet's K - 1 values).
    pub slice: usize,
    /// Slices committed per epoch: what an urgent tensor may have to wait
    /// behind once it is agreed.
    pub credit: usize,
}

impl Policy {
    /// FIFO with `credit` slices per epoch.
    pub fn fifo(slice: usize, credit: usize) -> Policy {
        Policy {
            order: Order::Fifo,
            slice,
            credit,
        }
    }

    /// P3: most urgent slice first, one slice at a time (stop-and-wait).
    pub fn p3(slice: usize) -> Policy {
        Policy {
            order: Order::Priority,
            slice,
            credit: 1,
        }
    }

    /// ByteScheduler: most urgent first, up to `credit` slices at once.
    pub fn bytescheduler(slice: usize, credit: usize) -> Policy {
        Policy {
            order: Order::Priority,
            slice,
            credit,
        }
    }
}

/// What a scheduler run did.
#[derive(Debug, Clone, Default)]
pub struct SchedStats {
    /// Epochs (all-reduces) run.
    pub epochs: u64,
    /// Epochs that carried only the control flags (waiting for a tensor to
    /// be ready on every worker).
    pub idle_epochs: u64,
    /// The data path's statistics, summed over the epochs.
    pub transport: Stats,
}

/// A tensor the job holds, and how far its sum has got.
struct Held<T> {
    tensor: Tensor<T>,
    submitted: Instant,
    agreed: Option<Instant>,
    /// Next element to commit to an epoch.
    next: usize,
    /// Elements whose sums have come back.
    summed: usize,
}

impl<T> Held<T> {
    /// The completed tensor, handed back to the caller (its buffer leaves
    /// with it).
    fn finish(&mut self, seq: usize, now: Instant) -> Completed<T> {
        let priority = self.tensor.priority;
        let tensor = std::mem::replace(
            &mut self.tensor,
            Tensor {
                data: Vec::new(),
                priority,
            },
        );
        Completed {
            seq,
            tensor,
            submitted: self.submitted,
            agreed: self.agreed.unwrap_or(now),
            finished: now,
        }
    }
}

/// One slice of one epoch: elements `range` of tensor `seq`, at `at` in the
/// epoch's buffer.
struct Pick {
    seq: usize,
    range: std::ops::Range<usize>,
    at: usize,
}

/// Runs `expected` tensors from `source` through `worker` under `policy`,
/// calling `done` as each tensor's sum completes (the caller's next forward
/// pass may start on it). Every worker of the job must submit the same
/// tensors (lengths and priorities) in the same order.
///
/// Errors: the data path's (a timeout when a peer stops), and
/// [`Error::Config`] when the source closes before `expected` tensors came.
pub fn run<T: Element>(
    worker: &mut Worker,
    policy: Policy,
    expected: usize,
    source: &Receiver<Tensor<T>>,
    mut done: impl FnMut(Completed<T>),
) -> Result<SchedStats> {
    let k = worker.config().values_per_packet();
    let slice = policy.slice.max(1).div_ceil(k) * k;
    let credit = policy.credit.max(1);
    let workers = i64::from(worker.config().workers);
    if workers > T::MAX_COUNT {
        return Err(Error::Config(format!(
            "a schedule sums its flags in the tensors' type, which counts exactly up to {} \
             workers, not {workers}: use a wider type",
            T::MAX_COUNT
        )));
    }
    let mut held: Vec<Held<T>> = Vec::with_capacity(expected);
    let mut base = 0usize; // lowest tensor not yet agreed
    let mut pending: VecDeque<usize> = VecDeque::new();
    let mut finished = 0usize;
    let mut stats = SchedStats::default();
    let mut buf: Vec<T> = Vec::new();
    let mut classes: Vec<u8> = Vec::new();
    while finished < expected {
        receive(source, &mut held, expected)?;
        let picks = pick(&mut held, &mut pending, policy.order, slice, credit, k);
        build(&held, &picks, base, k, &mut buf, &mut classes);
        let s = T::allreduce(worker, &mut buf, &classes)?;
        stats.transport.merge(&s);
        stats.epochs += 1;
        if picks.is_empty() {
            stats.idle_epochs += 1;
        }
        let now = Instant::now();
        for p in &picks {
            let h = &mut held[p.seq];
            h.tensor.data[p.range.clone()].copy_from_slice(&buf[p.at..p.at + p.range.len()]);
            h.summed += p.range.len();
            // Reached once, by the tensor's last slice.
            if h.summed == h.tensor.data.len() {
                finished += 1;
                done(h.finish(p.seq, now));
            }
        }
        // A flag summing to n was 1 here too, so the tensor is in `held`
        // (`get_mut` all the same: a peer's bytes never index blindly).
        for (i, flag) in buf[..k].iter().enumerate() {
            let seq = base + i;
            let newly = held.get_mut(seq).filter(|h| h.agreed.is_none());
            if let Some(h) = newly.filter(|_| flag.count() == workers) {
                h.agreed = Some(now);
                pending.push_back(seq);
            }
        }
        while held.get(base).is_some_and(|h| h.agreed.is_some()) {
            base += 1;
        }
        finished += complete_empty(&mut held, &mut pending, now, &mut done);
    }
    Ok(stats)
}

/// Moves tensors from the source into `held`, without waiting.
fn receive<T>(
    source: &Receiver<Tensor<T>>,
    held: &mut Vec<Held<T>>,
    expected: usize,
) -> Result<()> {
    while held.len() < expected {
        match source.try_recv() {
            Ok(tensor) => held.push(Held {
                tensor,
                submitted: Instant::now(),
                agreed: None,
                next: 0,
                summed: 0,
            }),
            Err(TryRecvError::Empty) => break,
            Err(TryRecvError::Disconnected) => {
                return Err(Error::Config(format!(
                    "the tensor source closed after {} of {expected} tensors",
                    held.len()
                )))
            }
        }
    }
    Ok(())
}

/// Up to `credit` slices from the agreed tensors, in the policy's order.
/// A function of the agreed set alone, so every worker picks the same.
fn pick<T>(
    held: &mut [Held<T>],
    pending: &mut VecDeque<usize>,
    order: Order,
    slice: usize,
    credit: usize,
    k: usize,
) -> Vec<Pick> {
    let mut picks = Vec::new();
    let mut at = k; // after the control flags
    while picks.len() < credit {
        let key = |s: usize| {
            let p = held[s].tensor.priority;
            order.key(u64::from(p.rank), p.class, s as u64)
        };
        let next = pending
            .iter()
            .enumerate()
            .filter(|(_, &s)| held[s].next < held[s].tensor.data.len())
            .min_by_key(|(_, &s)| key(s))
            .map(|(i, _)| i);
        let Some(i) = next else { break };
        let seq = pending[i];
        let h = &mut held[seq];
        let end = (h.next + slice).min(h.tensor.data.len());
        picks.push(Pick {
            seq,
            range: h.next..end,
            at,
        });
        at += (end - h.next).div_ceil(k) * k;
        h.next = end;
        if h.next == h.tensor.data.len() {
            pending.remove(i);
        }
    }
    picks
}

/// Completes agreed tensors with no elements (nothing to send).
fn complete_empty<T>(
    held: &mut [Held<T>],
    pending: &mut VecDeque<usize>,
    now: Instant,
    done: &mut impl FnMut(Completed<T>),
) -> usize {
    let mut n = 0;
    pending.retain(|&seq| {
        if !held[seq].tensor.data.is_empty() {
            return true;
        }
        n += 1;
        done(held[seq].finish(seq, now));
        false
    });
    n
}

/// The epoch's buffer: the control flags, then each slice padded to whole
/// chunks; and each chunk's class (the control chunk takes the most urgent
/// class of the epoch, so it is never the one left queued).
fn build<T: Element>(
    held: &[Held<T>],
    picks: &[Pick],
    base: usize,
    k: usize,
    buf: &mut Vec<T>,
    classes: &mut Vec<u8>,
) {
    let len = picks
        .last()
        .map_or(k, |p| p.at + p.range.len().div_ceil(k) * k);
    buf.clear();
    buf.resize(len, T::default());
    classes.clear();
    for (i, flag) in buf[..k].iter_mut().enumerate() {
        if base + i < held.len() {
            *flag = T::ONE;
        }
    }
    let top = picks
        .iter()
        .map(|p| held[p.seq].tensor.priority.class)
        .max()
        .unwrap_or(0);
    classes.push(top);
    for p in picks {
        let h = &held[p.seq];
        buf[p.at..p.at + p.range.len()].copy_from_slice(&h.tensor.data[p.range.clone()]);
        let chunks = p.range.len().div_ceil(k);
        classes.extend(std::iter::repeat_n(h.tensor.priority.class, chunks));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(lens: &[(usize, u32)]) -> Vec<Held<i32>> {
        lens.iter()
            .map(|&(len, rank)| Held {
                tensor: Tensor {
                    data: vec![0; len],
                    priority: Priority { rank, class: 0 },
                },
                submitted: Instant::now(),
                agreed: None,
                next: 0,
                summed: 0,
            })
            .collect()
    }

    fn order(picks: &[Pick]) -> Vec<(usize, usize, usize)> {
        picks
            .iter()
            .map(|p| (p.seq, p.range.start, p.range.end))
            .collect()
    }

    #[test]
    fn geryon_classes_follow_the_papers_example() {
        // Two classes, threshold 0.6: urgency 0.7 is high, 0.5 low.
        assert_eq!(Priority::geryon(3, 10, &[0.6]).class, 1);
        assert_eq!(Priority::geryon(5, 10, &[0.6]).class, 0);
        assert_eq!(Priority::geryon(0, 10, &[0.3, 0.6, 0.9]).class, 3);
        assert_eq!(Priority::geryon(8, 10, &[0.3, 0.6, 0.9]).class, 0);
        assert_eq!(Priority::geryon(4, 10, &[]).rank, 4);
    }

    #[test]
    fn priority_order_serves_the_most_urgent_slices_first_within_the_credit() {
        // A bulk tensor (rank 9, 4 slices) agreed first, an urgent one
        // (rank 0, 2 slices) agreed later: with credit 2 the first epoch
        // commits two bulk slices, the next two urgent ones.
        let mut h = held(&[(40, 9), (20, 0)]);
        let mut pending = VecDeque::from([0]);
        let p = pick(&mut h, &mut pending, Order::Priority, 10, 2, 10);
        assert_eq!(order(&p), [(0, 0, 10), (0, 10, 20)]);
        assert_eq!((p[0].at, p[1].at), (10, 20), "after the control chunk");
        pending.push_back(1);
        let p = pick(&mut h, &mut pending, Order::Priority, 10, 2, 10);
        assert_eq!(order(&p), [(1, 0, 10), (1, 10, 20)]);
        let p = pick(&mut h, &mut pending, Order::Priority, 10, 3, 10);
        assert_eq!(order(&p), [(0, 20, 30), (0, 30, 40)]);
        assert!(pending.is_empty());
    }

    #[test]
    fn fifo_finishes_the_first_tensor_before_the_urgent_one() {
        let mut h = held(&[(30, 9), (10, 0)]);
        let mut pending = VecDeque::from([0, 1]);
        let p = pick(&mut h, &mut pending, Order::Fifo, 10, 2, 10);
        assert_eq!(order(&p), [(0, 0, 10), (0, 10, 20)]);
        let p = pick(&mut h, &mut pending, Order::Fifo, 10, 2, 10);
        assert_eq!(order(&p), [(0, 20, 30), (1, 0, 10)]);
    }

    #[test]
    fn bytescheduler_credit_on_the_surveys_example() {
        // p1..p4 of rising priority (p4 most urgent). Credit 2 with p1 and
        // p2 agreed together: both are committed (in flight together, the
        // more urgent p2 laid out first), then p4, p3: the survey's p1, p2,
        // p4, p3. Credit 1 with p2..p4 agreed while p1 is out: p1, p4, p3,
        // p2, the survey's order.
        for (credit, first, want) in [(2, 2, [1, 0, 3, 2]), (1, 1, [0, 3, 2, 1])] {
            let mut h = held(&[(10, 4), (10, 3), (10, 2), (10, 1)]);
            let mut pending: VecDeque<usize> = (0..first).collect();
            let mut seqs: Vec<usize> = pick(&mut h, &mut pending, Order::Priority, 10, credit, 10)
                .iter()
                .map(|p| p.seq)
                .collect();
            pending.extend(first..4);
            while !pending.is_empty() {
                let p = pick(&mut h, &mut pending, Order::Priority, 10, credit, 10);
                seqs.extend(p.iter().map(|p| p.seq));
            }
            assert_eq!(seqs, want, "credit {credit}");
        }
    }

    #[test]
    fn the_epoch_buffer_pads_slices_to_chunks_and_tags_them() {
        let mut h = held(&[(15, 1), (5, 0)]);
        h[0].tensor.data = (1..=15).collect();
        h[0].tensor.priority.class = 2;
        h[1].tensor.data = vec![7; 5];
        h[1].tensor.priority.class = 5;
        let mut pending = VecDeque::from([0, 1]);
        let p = pick(&mut h, &mut pending, Order::Fifo, 100, 4, 10);
        let (mut buf, mut classes) = (Vec::new(), Vec::new());
        build(&h, &p, 0, 10, &mut buf, &mut classes);
        assert_eq!(buf.len(), 10 + 20 + 10);
        assert_eq!(&buf[..10], &[1, 1, 0, 0, 0, 0, 0, 0, 0, 0], "2 of 3 held");
        assert_eq!(&buf[10..25], &h[0].tensor.data[..]);
        assert_eq!(&buf[25..30], &[0; 5], "padding");
        assert_eq!(&buf[30..35], &[7; 5]);
        assert_eq!(classes, [5, 2, 2, 5], "control chunk takes the top class");
    }
}
