//! dSyncPS on the stack: two-tier aggregation across switches
//! (../shared/notes/dsyncps.md, "In inagg").
//!
//! Each rack's switch averages its workers' models every round (the
//! paper's primary parameter server, local BSP); every T rounds a spine
//! switch averages the racks' models (the paper's global synchronisation).
//! When the global sync is due is decided by the policy the simulator runs,
//! [`inagg_switch_control::sched::dsyncps::GlobalSync`].
//!
//! What crosses each switch:
//! - **Local round** (rack job, every worker of the rack): each worker's
//!   delta since the last global base, `params - base`. The sum over the
//!   rack, divided by the rack's worker count, is the rack's mean delta.
//! - **Global sync** (spine job, one member per rack: the rack's leader,
//!   worker 0): the leader contributes the rack's *sum* of deltas from the
//!   local round just done; the spine's sum over N workers in all is the
//!   global sum of deltas, so the new model is `base + sum / N`, every
//!   worker weighted equally.
//! - **Broadcast** (rack job again, as int32): the leader contributes the
//!   bit patterns of the global sum and every other worker zeros, so the
//!   integer all-reduce hands every worker of the rack the leader's floats
//!   bit for bit, with the same retransmission under loss as any
//!   all-reduce. (A float all-reduce would requantize them with the rack's
//!   own scale, and racks of different sizes would round differently.)
//!   Every worker of every rack then holds the same bits: the same base
//!   plus the same sum over the same N.
//!
//! Deltas rather than parameters: the block exponent follows the largest
//! magnitude in each chunk, and a delta since the last global sync is
//! much smaller than the weights, so its quantization step is too.
//!
//! Not built here: racks joining or leaving mid-training (the advance /
//! defer rule of `GlobalSync::join` would need the spine job's membership
//! to change generation at the same round).

use anyhow::{bail, Context, Result};
use inagg_host_agent::Worker;
use inagg_switch_control::sched::dsyncps::GlobalSync;

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
    /// Workers in all racks.
    total: u32,
    /// When the next global sync is due (this rack's row).
    schedule: GlobalSync,
    /// The model after the last global sync (the deltas' origin).
    base: Vec<f32>,
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
            total,
            schedule: GlobalSync::new(t, [0]),
            base: initial.to_vec(),
        })
    }

    /// Global syncs done so far.
    pub fn syncs(&self) -> u64 {
        self.schedule.done
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
        self.local
            .allreduce_f32(&mut delta)
            .context("local aggregation at the rack's switch")?;
        if !self.schedule.local_done(0) {
            let n = f32::from(self.local.config().workers);
            apply(params, &self.base, &delta, n);
            return Ok(RoundKind::Local);
        }
        self.global_sync(&mut delta)?;
        apply(params, &self.base, &delta, self.total as f32);
        self.base.copy_from_slice(params);
        self.schedule.finish();
        Ok(RoundKind::Global)
    }

    /// Turns the rack's sum of deltas into the global sum on every worker of
    /// the rack: the leader sums across the spine, then broadcasts.
    fn global_sync(&mut self, rack_sum: &mut [f32]) -> Result<()> {
        match &mut self.global {
            Some(spine) => {
                spine
                    .allreduce_f32(rack_sum)
                    .context("global sync at the spine switch")?;
            }
            None => rack_sum.fill(0.0),
        }
        let mut bits: Vec<i32> = rack_sum.iter().map(|x| x.to_bits() as i32).collect();
        self.local
            .allreduce_i32(&mut bits)
            .context("broadcast of the global model in the rack")?;
        for (x, b) in rack_sum.iter_mut().zip(bits) {
            *x = f32::from_bits(b as u32);
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
