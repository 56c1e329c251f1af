//! Many tensors per step through the C ABI: `inagg_host_agent::priority` (FIFO,
//! P3, ByteScheduler, with Geryon's classes on the packets) running on a
//! thread of its own, fed by `inagg_sched_submit_*` as back-propagation
//! produces gradients, and drained by `inagg_sched_wait` in the order the
//! sums complete.
//!
//! While a schedule runs, its thread owns the worker (plain all-reduces are
//! refused); `inagg_sched_end` gives it back. The scheduler never touches
//! the caller's memory: a submitted buffer is copied in, and its sum is
//! copied back into it by the `inagg_sched_wait` that reports it, on the
//! caller's thread.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;

use inagg_host_agent::priority::{self, Completed, Policy, Priority, SchedStats, Tensor};
use inagg_host_agent::{bf16, f16, Result as AgentResult, Worker};

use crate::{Failure, INAGG_E_ARGUMENT, INAGG_E_FAILED};

/// A submitted tensor's buffer in the caller's memory, where its sum goes.
#[derive(Clone, Copy)]
struct Target {
    ptr: usize,
    len: usize,
}

/// Where tensors go in: a channel of the schedule's element type.
trait Source: Send {
    /// Copies `len` elements at `ptr` into a tensor for the scheduler;
    /// false if its thread has stopped.
    ///
    /// # Safety
    /// `ptr` holds `len` elements of the channel's type (or `len` is 0).
    unsafe fn send(&self, ptr: usize, len: usize, priority: Priority) -> bool;
}

impl<T: Copy + Send> Source for Sender<Tensor<T>> {
    unsafe fn send(&self, ptr: usize, len: usize, priority: Priority) -> bool {
        // SAFETY: the caller's contract.
        let data = unsafe { copy::<T>(ptr, len) };
        Sender::send(self, Tensor { data, priority }).is_ok()
    }
}

/// Where sums come out.
trait Sink: Send {
    /// Blocks for the next completed tensor, copies its sums into the
    /// buffer `target` gives for its number, and returns the number; None
    /// if the scheduler's thread has stopped.
    ///
    /// # Safety
    /// `target(seq)` is the live buffer tensor `seq` was submitted from.
    unsafe fn receive(&self, target: &dyn Fn(usize) -> Target) -> Option<usize>;
}

impl<T: Copy + Send> Sink for Receiver<Completed<T>> {
    unsafe fn receive(&self, target: &dyn Fn(usize) -> Target) -> Option<usize> {
        let c = self.recv().ok()?;
        // SAFETY: the caller's contract; the scheduler returns each
        // tensor with the length it was given.
        unsafe { paste(&c.tensor.data, target(c.seq)) };
        Some(c.seq)
    }
}

/// The scheduler's thread: it gives the worker back with how the run ended.
type Runner = JoinHandle<(Worker, AgentResult<SchedStats>)>;

/// The element type of a schedule (`INAGG_DTYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    I32,
    F16,
    Bf16,
}

/// A running schedule. Submitting and waiting lock different parts, so a
/// thread blocked in `wait` does not hold up a thread submitting.
pub struct Schedule {
    dtype: Dtype,
    expected: usize,
    submit: Mutex<Submitted>,
    done: Mutex<Done>,
    thread: Mutex<Option<Runner>>,
}

struct Submitted {
    sender: Option<Box<dyn Source>>,
    targets: Vec<Target>,
}

struct Done {
    receiver: Option<Box<dyn Sink>>,
    reported: usize,
}

/// The policy named `name`: "fifo", "p3" or "bytescheduler".
pub fn policy(name: &str, slice: usize, credit: usize) -> Result<Policy, Failure> {
    if slice == 0 || credit == 0 {
        return Err(Failure::new(
            INAGG_E_ARGUMENT,
            format!("slice {slice} and credit {credit}: both must be at least 1"),
        ));
    }
    if slice > MAX_SLICE || credit > MAX_CREDIT {
        return Err(Failure::new(
            INAGG_E_ARGUMENT,
            format!(
                "slice {slice} and credit {credit}: at most {MAX_SLICE} elements a slice \
                 and {MAX_CREDIT} slices of credit (a negative number passed as a size \
                 arrives as a huge one)"
            ),
        ));
    }
    match name {
        "fifo" => Ok(Policy::fifo(slice, credit)),
        "p3" if credit == 1 => Ok(Policy::p3(slice)),
        "p3" => Err(Failure::new(
            INAGG_E_ARGUMENT,
            format!("p3 sends one slice at a time (credit 1, not {credit}); bytescheduler takes a credit"),
        )),
        "bytescheduler" => Ok(Policy::bytescheduler(slice, credit)),
        other => Err(Failure::new(
            INAGG_E_ARGUMENT,
            format!("policy {other:?}: give fifo, p3 or bytescheduler"),
        )),
    }
}

/// The most elements a slice holds: 2^30 (4 GiB of float32), beyond any
/// one tensor a worker sums.
pub const MAX_SLICE: usize = 1 << 30;
/// The most slices a schedule commits at once.
pub const MAX_CREDIT: usize = 1 << 16;
/// The most tensors one schedule takes: 2^24, far beyond any model's
/// parameter count; a larger count is a mistake (a negative number passed
/// as a size), refused rather than reserved for.
pub const MAX_TENSORS: usize = 1 << 24;

/// Refuses a tensor count beyond [`MAX_TENSORS`].
pub fn tensor_count(tensors: usize) -> Result<usize, Failure> {
    if tensors > MAX_TENSORS {
        return Err(Failure::new(
            INAGG_E_ARGUMENT,
            format!(
                "{tensors} tensors: a schedule takes at most {MAX_TENSORS} (a negative \
                 number passed as a size arrives as a huge one)"
            ),
        ));
    }
    Ok(tensors)
}

impl Schedule {
    /// Starts `expected` tensors of `dtype` under `policy` on `worker`'s
    /// own thread.
    pub fn start(worker: Worker, dtype: Dtype, policy: Policy, expected: usize) -> Schedule {
        fn spawn<T: priority::Element>(
            mut worker: Worker,
            policy: Policy,
            expected: usize,
        ) -> (Box<dyn Source>, Box<dyn Sink>, Runner) {
            let (tx, rx) = channel::<Tensor<T>>();
            let (done_tx, done_rx) = channel();
            let thread = std::thread::spawn(move || {
                let result = priority::run(&mut worker, policy, expected, &rx, |c| {
                    // The waiting side may be gone (ended early); the sum is
                    // then nobody's.
                    let _ = done_tx.send(c);
                });
                (worker, result)
            });
            (Box::new(tx), Box::new(done_rx), thread)
        }
        let (sender, receiver, thread) = match dtype {
            Dtype::F32 => spawn::<f32>(worker, policy, expected),
            Dtype::I32 => spawn::<i32>(worker, policy, expected),
            Dtype::F16 => spawn::<f16>(worker, policy, expected),
            Dtype::Bf16 => spawn::<bf16>(worker, policy, expected),
        };
        Schedule {
            dtype,
            expected,
            submit: Mutex::new(Submitted {
                sender: Some(sender),
                // Grown as tensors come: the count is bounded, not reserved.
                targets: Vec::new(),
            }),
            done: Mutex::new(Done {
                receiver: Some(receiver),
                reported: 0,
            }),
            thread: Mutex::new(Some(thread)),
        }
    }

    /// Hands the buffer at `ptr` (`len` elements of the schedule's type) to
    /// the scheduler; its number.
    ///
    /// # Safety
    /// `ptr` holds `len` elements of the schedule's type (checked by the
    /// caller for NULL and alignment) and stays valid, untouched, until
    /// `wait` reports its number.
    pub unsafe fn submit(
        &self,
        dtype: Dtype,
        ptr: usize,
        len: usize,
        priority: Priority,
    ) -> Result<usize, Failure> {
        if dtype != self.dtype {
            return Err(Failure::new(
                INAGG_E_ARGUMENT,
                format!(
                    "the schedule sums {:?}; this tensor is {dtype:?}",
                    self.dtype
                ),
            ));
        }
        let mut s = self.submit.lock().unwrap_or_else(|p| p.into_inner());
        let seq = s.targets.len();
        if seq == self.expected {
            return Err(Failure::new(
                INAGG_E_ARGUMENT,
                format!(
                    "all {} tensors of the schedule are submitted already",
                    self.expected
                ),
            ));
        }
        // SAFETY: the caller's contract.
        let sent = s
            .sender
            .as_ref()
            .is_some_and(|tx| unsafe { tx.send(ptr, len, priority) });
        if !sent {
            return Err(Failure::new(
                INAGG_E_FAILED,
                "the schedule has stopped; inagg_sched_end says why",
            ));
        }
        s.targets.push(Target { ptr, len });
        Ok(seq)
    }

    /// Blocks until the next tensor's sum is complete, copies it into that
    /// tensor's buffer, and returns its number. Refused when every
    /// submitted tensor has been reported (waiting would never end).
    pub fn wait(&self) -> Result<usize, Failure> {
        let mut d = self.done.lock().unwrap_or_else(|p| p.into_inner());
        let submitted = self
            .submit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .targets
            .len();
        if d.reported >= submitted {
            return Err(Failure::new(
                INAGG_E_ARGUMENT,
                format!(
                    "nothing to wait for: {} of {} tensors submitted, all reported",
                    submitted, self.expected
                ),
            ));
        }
        let target = |seq: usize| {
            self.submit
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .targets[seq]
        };
        // SAFETY: the caller keeps each buffer valid until its report.
        let got = d
            .receiver
            .as_ref()
            .and_then(|rx| unsafe { rx.receive(&target) });
        let Some(seq) = got else {
            return Err(Failure::new(
                INAGG_E_FAILED,
                "the schedule has stopped; inagg_sched_end says why",
            ));
        };
        d.reported += 1;
        Ok(seq)
    }

    /// Stops the schedule: closes the source, joins the thread and returns
    /// the worker with how the run ended. Tensors not all submitted and
    /// reported make the run an error.
    pub fn end(&self) -> Option<(Worker, Result<SchedStats, Failure>)> {
        let thread = self
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()?;
        self.submit.lock().unwrap_or_else(|p| p.into_inner()).sender = None;
        let (reported, receiver) = {
            let mut d = self.done.lock().unwrap_or_else(|p| p.into_inner());
            (d.reported, d.receiver.take())
        };
        drop(receiver);
        let (worker, result) = thread.join().ok()?;
        let result = match result {
            Ok(_) if reported < self.expected => Err(Failure::new(
                INAGG_E_ARGUMENT,
                format!(
                    "the schedule ended with {reported} of {} tensors reported by inagg_sched_wait",
                    self.expected
                ),
            )),
            Ok(stats) => Ok(stats),
            Err(e) => Err(e.into()),
        };
        Some((worker, result))
    }
}

/// # Safety
/// `ptr` holds `len` initialised `T` (or `len` is 0).
unsafe fn copy<T: Copy>(ptr: usize, len: usize) -> Vec<T> {
    if len == 0 {
        return Vec::new();
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(ptr as *const T, len) }.to_vec()
}

/// # Safety
/// `target` has room for `v.len()` elements of `T`.
unsafe fn paste<T: Copy>(v: &[T], target: Target) {
    debug_assert_eq!(v.len(), target.len);
    if !v.is_empty() {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), target.ptr as *mut T, v.len()) };
    }
}
