//! Many tensors of one job through the agent's scheduler
//! (`inagg_host_agent::priority`), the way a training step hands them over:
//! each worker's tensors arrive on a channel at their own times (the
//! back-propagation order, with per-worker jitter), and each worker collects
//! its sums as they complete. Shared by the end-to-end tests and the
//! priority benchmark.

use std::sync::mpsc;
use std::time::Duration;

use anyhow::Result;
use inagg_host_agent::priority::{self, Completed, Element, Policy, SchedStats, Tensor};
use inagg_host_agent::Worker;

/// When each tensor is handed to a worker, after the previous one.
#[derive(Debug, Clone)]
pub struct Arrival<T> {
    /// Wait this long after the previous tensor (per worker: jitter is the
    /// caller's to add).
    pub after: Duration,
    /// The tensor.
    pub tensor: Tensor<T>,
}

/// What one worker saw.
#[derive(Debug)]
pub struct WorkerRun<T> {
    /// The completed tensors, in completion order.
    pub done: Vec<Completed<T>>,
    /// The scheduler's statistics.
    pub stats: SchedStats,
}

/// Runs every worker's `plans[w]` through `workers[w]` under `policy` at
/// once: one scheduler thread and one submitting thread per worker.
pub fn run<T: Element>(
    workers: &mut [Worker],
    plans: Vec<Vec<Arrival<T>>>,
    policy: Policy,
) -> Result<Vec<WorkerRun<T>>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = workers
            .iter_mut()
            .zip(plans)
            .map(|(w, plan)| {
                let expected = plan.len();
                let (tx, rx) = mpsc::channel();
                s.spawn(move || {
                    for a in plan {
                        std::thread::sleep(a.after);
                        if tx.send(a.tensor).is_err() {
                            return; // the scheduler stopped with an error
                        }
                    }
                });
                s.spawn(move || {
                    let mut done = Vec::with_capacity(expected);
                    let stats = priority::run(w, policy, expected, &rx, |c| done.push(c))?;
                    Ok::<_, inagg_host_agent::Error>(WorkerRun { done, stats })
                })
            })
            .collect();
        crate::local::join_workers(handles)
    })
}

/// The sums of tensor `seq` from every worker, in worker order.
pub fn results<T: Clone>(runs: &[WorkerRun<T>], seq: usize) -> Vec<Vec<T>> {
    runs.iter()
        .map(|r| {
            r.done
                .iter()
                .find(|c| c.seq == seq)
                .map(|c| c.tensor.data.clone())
                .unwrap_or_default()
        })
        .collect()
}

/// Position of tensor `seq` in a worker's completion order.
pub fn finish_rank<T>(run: &WorkerRun<T>, seq: usize) -> Option<usize> {
    run.done.iter().position(|c| c.seq == seq)
}
