//! dSyncPS on the stack: two-tier aggregation across switches
//! (docs/PAPERS.md, "dSyncPS").
//!
//! Each rack's switch averages its workers' models every round (the
//! paper's primary parameter server, local BSP); every T rounds a spine
//! switch averages the racks' models (the paper's global synchronisation).
//! When the global sync is due is decided by the policy the simulator runs,
//! [`inagg_sched::dsyncps::GlobalSync`].
//!
//! What crosses each switch:
//! - **Local round** (rack job, every worker of the rack): each worker's
//!   delta since the last sync's model, `params - base`. The sum over the
//!   rack, divided by the rack's worker count, is the rack's mean delta,
//!   and `base + mean delta` the rack's mean model, the same bits on every
//!   worker of the rack. Deltas rather than parameters: the block exponent
//!   follows the largest magnitude in each chunk, and a delta is much
//!   smaller than the weights, so its quantization step is too.
//! - **Global sync** (spine job, one member per rack: the rack's leader,
//!   worker 0): the leader contributes its rack's worker count times the
//!   rack's mean model; the spine's sum divided by the N workers in all is
//!   the mean over every worker, each weighted equally. Models, not
//!   deltas, because a rack that joins mid-training (below) has no common
//!   base to take deltas from; the models' step (a few 1e-8 for weights
//!   near 1 and a handful of racks) is below f32's own rounding.
//! - **Broadcast** (rack job again, as int32): the leader contributes the
//!   bit patterns of the global mean and every other worker zeros, so the
//!   integer all-reduce hands every worker of the rack the leader's floats
//!   bit for bit, with the same retransmission under loss as any
//!   all-reduce. (A float all-reduce would requantize them with the rack's
//!   own scale, and racks of different sizes would round differently.)
//!   Every leader divides the same spine sum by the same N, so every
//!   worker of every rack holds the same bits.
//!
//! Two ways to pace the global sync:
//! - [`TwoTier::new`]: a fixed set of racks, each worker running the same
//!   schedule (its rack's row of the table).
//! - [`TwoTier::managed`]: racks join and leave mid-training ([`spine`]).
//!   A spine manager holds the table with every rack's row, applies the
//!   advance/defer rule to a rack that joins, and installs the spine job
//!   for each sync's racks (a new generation when they change). The rack's
//!   leader asks it every round and passes the word on inside the rack's
//!   own all-reduce (one extra element, 1.0 for a global round), so the
//!   other workers need no connection of their own. A rack that joins
//!   contributes nothing to its first sync and takes the mean (a new
//!   server overwrites its model with the current one).

pub mod spine;

use anyhow::{bail, Context, Result};
use inagg_host_agent::Worker;
use inagg_sched::dsyncps::GlobalSync;

/// What a round did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RoundKind {
    /// Averaged over the rack only.
    Local,
    /// Averaged over the rack, then over every rack.
    Global,
}

/// One worker's side of two-tier aggregation.
pub struct TwoTier {
    /// The rack's job: every worker of the rack.
    local: Worker,
    /// The spine's job, for the rack's leader only.
    global: Option<Worker>,
    /// Who decides when the global sync is due.
    pace: Pace,
    /// The model after the last sync (the deltas' origin).
    base: Vec<f32>,
    /// Global syncs this worker took part in.
    syncs: u64,
}

/// Who decides when a round ends in a global sync.
enum Pace {
    /// Every worker runs the same fixed schedule (this rack's row) over a
    /// fixed set of racks of `total` workers.
    Fixed { schedule: GlobalSync, total: u32 },
    /// The rack's leader asks the spine manager and tells the rack.
    Leader(spine::SpineLink),
    /// A worker of a managed rack: its leader tells it.
    Follower,
}

/// What a global sync needs: the spine's mean is over `total` workers, and
/// a `fresh` rack contributes nothing.
struct SyncPlan {
    total: u32,
    fresh: bool,
}

impl TwoTier {
    /// A worker of a rack: `local` is its worker in the rack's job; the
    /// rack's worker 0 also passes its worker in the spine's job (one
    /// member per rack). `total` is the number of workers in all racks,
    /// `t` the global period in rounds, `initial` the model every worker
    /// starts from.
    pub fn new(
        local: Worker,
        global: Option<Worker>,
        total: u32,
        t: u32,
        initial: &[f32],
    ) -> Result<TwoTier> {
        let leader = local.config().worker == 0;
        if leader != global.is_some() {
            bail!(
                "worker {} of the rack: the spine job is for worker 0 (the leader) only",
                local.config().worker
            );
        }
        let rack = u32::from(local.config().workers);
        if total < rack {
            bail!("{total} workers in all racks, fewer than this rack's {rack}");
        }
        if t == 0 {
            bail!("the global period T must be at least 1 round");
        }
        Ok(TwoTier {
            local,
            global,
            pace: Pace::Fixed {
                schedule: GlobalSync::new(t, [0]),
                total,
            },
            base: initial.to_vec(),
            syncs: 0,
        })
    }

    /// A worker of a rack whose global syncs a spine manager paces (racks
    /// may join and leave): the rack's worker 0 passes its spine worker
    /// (any job id and rank: the manager's plans retarget it) and its
    /// link to the manager ([`spine::SpineLink::join`]); the others pass
    /// `None`. `initial` is the model the rack starts from.
    pub fn managed(
        local: Worker,
        leader: Option<(Worker, spine::SpineLink)>,
        initial: &[f32],
    ) -> Result<TwoTier> {
        let is_leader = local.config().worker == 0;
        if is_leader != leader.is_some() {
            bail!(
                "worker {} of the rack: the spine link is for worker 0 (the leader) only",
                local.config().worker
            );
        }
        let (global, pace) = match leader {
            Some((worker, link)) => (Some(worker), Pace::Leader(link)),
            None => (None, Pace::Follower),
        };
        Ok(TwoTier {
            local,
            global,
            pace,
            base: initial.to_vec(),
            syncs: 0,
        })
    }

    /// Global syncs this worker took part in.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// A managed rack's leader leaves the spine's table (the rack's other
    /// workers just stop calling [`TwoTier::round`]). Nothing to do for a
    /// fixed schedule or a follower.
    pub fn leave(self) -> Result<()> {
        match self.pace {
            Pace::Leader(link) => link.leave(),
            Pace::Fixed { .. } | Pace::Follower => Ok(()),
        }
    }

    /// Averages `params` (this worker's model after its local step) over
    /// the rack, and over every rack when the global sync is due. Every
    /// worker of every rack must call it once per round with models of the
    /// same length.
    pub fn round(&mut self, params: &mut [f32]) -> Result<RoundKind> {
        if params.len() != self.base.len() {
            bail!(
                "a model of {} parameters; this job's has {}",
                params.len(),
                self.base.len()
            );
        }
        let mut delta: Vec<f32> = params.iter().zip(&self.base).map(|(p, b)| p - b).collect();
        // The leader's plan for this round (None: local, or not a leader).
        let plan = match &mut self.pace {
            Pace::Leader(link) => link.round().context("asking the spine manager")?,
            Pace::Fixed { .. } | Pace::Follower => None,
        };
        let managed = !matches!(self.pace, Pace::Fixed { .. });
        if managed {
            // The leader's word to its rack: 1.0 for a global round.
            delta.push(if plan.is_some() { 1.0 } else { 0.0 });
        }
        self.local
            .allreduce_f32(&mut delta)
            .context("local aggregation at the rack's switch")?;
        let sync = match &mut self.pace {
            Pace::Fixed { schedule, total } => schedule.local_done(0).then_some(SyncPlan {
                total: *total,
                fresh: false,
            }),
            Pace::Leader(_) => plan.map(|p| SyncPlan {
                total: p.total,
                fresh: p.fresh,
            }),
            // A follower contributes nothing at the spine: total unused.
            Pace::Follower => (delta.pop().unwrap_or(0.0) > 0.5).then_some(SyncPlan {
                total: 0,
                fresh: false,
            }),
        };
        delta.truncate(params.len());
        let n = f32::from(self.local.config().workers);
        apply(params, &self.base, &delta, n);
        let Some(sync) = sync else {
            return Ok(RoundKind::Local);
        };
        if let (Some(p), Some(spine)) = (plan, &mut self.global) {
            // Only on a change: the same job and generation continue their
            // slots' rounds (retargeting starts them again at 0).
            let c = spine.config();
            if (c.job, c.worker, c.workers, c.generation)
                != (p.job, p.member, p.members, p.generation)
            {
                spine.retarget(p.job, p.member, p.members, p.generation)?;
            }
        }
        self.global_sync(params, &sync)?;
        self.base.copy_from_slice(params);
        self.syncs += 1;
        match &mut self.pace {
            Pace::Fixed { schedule, .. } => schedule.finish(),
            Pace::Leader(link) => link.synced()?,
            Pace::Follower => {}
        }
        Ok(RoundKind::Global)
    }

    /// Replaces the rack's mean model `params` with the mean over every
    /// rack, the same bits on every worker of every rack: the leader sums
    /// its rack's share (rack size times the mean, or nothing if fresh) at
    /// the spine and divides by the total, then hands the bits to its rack.
    fn global_sync(&mut self, params: &mut [f32], plan: &SyncPlan) -> Result<()> {
        let mut mean = vec![0.0f32; params.len()];
        if let Some(spine) = &mut self.global {
            if !plan.fresh {
                let n = f32::from(self.local.config().workers);
                for (m, p) in mean.iter_mut().zip(params.iter()) {
                    *m = p * n;
                }
            }
            spine
                .allreduce_f32(&mut mean)
                .context("global sync at the spine switch")?;
            let total = plan.total as f32;
            for m in &mut mean {
                *m /= total;
            }
        }
        let mut bits: Vec<i32> = mean.iter().map(|x| x.to_bits() as i32).collect();
        self.local
            .allreduce_i32(&mut bits)
            .context("broadcast of the global model in the rack")?;
        for (p, b) in params.iter_mut().zip(bits) {
            *p = f32::from_bits(b as u32);
        }
        Ok(())
    }
}

/// `params = base + sum / n`, element by element.
fn apply(params: &mut [f32], base: &[f32], sum: &[f32], n: f32) {
    for ((p, b), s) in params.iter_mut().zip(base).zip(sum) {
        *p = b + s / n;
    }
}
