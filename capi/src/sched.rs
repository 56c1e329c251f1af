//! Many tensors per step through the C ABI: `inagg_host_agent::sched` (FIFO,
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

use inagg_host_agent::sched::{self, Completed, Policy, Priority, SchedStats, Tensor};
use inagg_host_agent::{Result as AgentResult, Worker};

use crate::{Failure, INAGG_E_ARGUMENT, INAGG_E_FAILED};

/// A submitted tensor's buffer in the caller's memory, where its sum goes.
#[derive(Clone, Copy)]
struct Target {
    ptr: usize,
    len: usize,
}

/// Where tensors go in, by element type.
enum Source {
    F32(Sender<Tensor<f32>>),
    I32(Sender<Tensor<i32>>),
}

/// Where their sums come out.
enum Sink {
    F32(Receiver<Completed<f32>>),
    I32(Receiver<Completed<i32>>),
}

/// The scheduler's thread: it gives the worker back with how the run ended.
type Runner = JoinHandle<(Worker, AgentResult<SchedStats>)>;

/// The element type of a schedule (`INAGG_DTYPE_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dtype {
    F32,
    I32,
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
    sender: Option<Source>,
    targets: Vec<Target>,
}

struct Done {
    receiver: Option<Sink>,
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

impl Schedule {
    /// Starts `expected` tensors of `dtype` under `policy` on `worker`'s
    /// own thread.
    pub fn start(worker: Worker, dtype: Dtype, policy: Policy, expected: usize) -> Schedule {
        fn spawn<T: sched::Element>(
            mut worker: Worker,
            policy: Policy,
            expected: usize,
        ) -> (Sender<Tensor<T>>, Receiver<Completed<T>>, Runner) {
            let (tx, rx) = channel::<Tensor<T>>();
            let (done_tx, done_rx) = channel();
            let thread = std::thread::spawn(move || {
                let result = sched::run(&mut worker, policy, expected, &rx, |c| {
                    // The waiting side may be gone (ended early); the sum is
                    // then nobody's.
                    let _ = done_tx.send(c);
                });
                (worker, result)
            });
            (tx, done_rx, thread)
        }
        let (sender, receiver, thread) = match dtype {
            Dtype::F32 => {
                let (tx, rx, t) = spawn::<f32>(worker, policy, expected);
                (Source::F32(tx), Sink::F32(rx), t)
            }
            Dtype::I32 => {
                let (tx, rx, t) = spawn::<i32>(worker, policy, expected);
                (Source::I32(tx), Sink::I32(rx), t)
            }
        };
        Schedule {
            dtype,
            expected,
            submit: Mutex::new(Submitted {
                sender: Some(sender),
                targets: Vec::with_capacity(expected),
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
        let sent = match s.sender.as_ref() {
            // SAFETY: the caller's contract.
            Some(Source::F32(tx)) => tx
                .send(Tensor {
                    data: unsafe { copy::<f32>(ptr, len) },
                    priority,
                })
                .is_ok(),
            // SAFETY: the caller's contract.
            Some(Source::I32(tx)) => tx
                .send(Tensor {
                    data: unsafe { copy::<i32>(ptr, len) },
                    priority,
                })
                .is_ok(),
            None => false,
        };
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
        let got = match d.receiver.as_ref() {
            Some(Sink::F32(rx)) => rx.recv().ok().map(|c| (c.seq, Sums::F32(c.tensor.data))),
            Some(Sink::I32(rx)) => rx.recv().ok().map(|c| (c.seq, Sums::I32(c.tensor.data))),
            None => None,
        };
        let Some((seq, sums)) = got else {
            return Err(Failure::new(
                INAGG_E_FAILED,
                "the schedule has stopped; inagg_sched_end says why",
            ));
        };
        let target = self
            .submit
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .targets[seq];
        // SAFETY: the caller keeps the buffer valid until this report; the
        // scheduler returns each tensor with the length it was given.
        unsafe { sums.write(target) };
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

/// A completed tensor's sums.
enum Sums {
    F32(Vec<f32>),
    I32(Vec<i32>),
}

impl Sums {
    /// Copies the sums into the tensor's buffer.
    ///
    /// # Safety
    /// `target` is the live buffer of the tensor these sums belong to.
    unsafe fn write(&self, target: Target) {
        // SAFETY: the caller's contract; lengths are the submitted ones.
        unsafe {
            match self {
                Sums::F32(v) => paste(v, target),
                Sums::I32(v) => paste(v, target),
            }
        }
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
