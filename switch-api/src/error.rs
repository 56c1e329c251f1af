//! Why a switch refuses a job, a group, a relay or a queue map.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

/// Why a job or a multicast group cannot be installed, found or removed.
/// The operator's fault: every message says what to change.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "error", rename_all = "snake_case")]
pub enum JobError {
    /// A priority class mapped to a queue the ports do not have.
    #[error("queue {queue} does not exist: ports have queues 0 to {}", .queues.saturating_sub(1))]
    BadQueue {
        /// The queue asked for.
        queue: u8,
        /// Queues per port.
        queues: u8,
    },
    /// A job's priority map lists a class twice.
    #[error("priority class {class} is mapped twice; give each class one queue")]
    DuplicateClass {
        /// The repeated class.
        class: u8,
    },
    /// The id is taken.
    #[error("job {id} already exists; delete it first or pick another id")]
    DuplicateId {
        /// The id asked for.
        id: u16,
    },
    /// No such job.
    #[error("no job {id} is installed")]
    UnknownJob {
        /// The id asked for.
        id: u16,
    },
    /// A job needs at least one worker.
    #[error("job {id} has no workers")]
    NoWorkers {
        /// The job.
        id: u16,
    },
    /// More workers than the slot bitmap holds.
    #[error("job {id} has {count} workers; at most {max} are supported")]
    TooManyWorkers {
        /// The job.
        id: u16,
        /// Workers given.
        count: usize,
        /// The bitmap width.
        max: usize,
    },
    /// Two workers with the same endpoint: the switch could not tell them apart.
    #[error("job {id}: worker endpoint {addr} is listed twice")]
    DuplicateWorker {
        /// The job.
        id: u16,
        /// The repeated endpoint.
        addr: SocketAddr,
    },
    /// A zero-sized pool, or one larger than a 16-bit slot index reaches.
    #[error("job {id}: pool size {size} must be between 1 and 65536 slots")]
    BadPoolSize {
        /// The job.
        id: u16,
        /// Slots asked for.
        size: u32,
    },
    /// The pool runs past the end of aggregator memory.
    #[error("job {id}: pool [{base}, {end}) runs past the switch's {slots} slots")]
    PoolBeyondMemory {
        /// The job.
        id: u16,
        /// First slot.
        base: u32,
        /// End of the pool.
        end: u64,
        /// Slots the switch has.
        slots: u32,
    },
    /// The pool's values would pass the switch's memory budget.
    #[error(
        "job {id}: a pool of {size} slots at K = {elements} takes {} of aggregator memory, and \
         {} of the switch's {} is free; give a smaller pool or K, or start the emulator with \
         a larger --memory-mib",
        size_text(*.needs), size_text(*.free), size_text(*.total)
    )]
    OutOfMemory {
        /// The job.
        id: u16,
        /// Its pool size.
        size: u32,
        /// Its K.
        elements: u16,
        /// Bytes its pool takes.
        needs: u64,
        /// Bytes free before it.
        free: u64,
        /// The budget.
        total: u64,
    },
    /// The pool overlaps another job's.
    #[error(
        "job {id}: pool [{base}, {end}) overlaps job {other}'s pool [{other_base}, {other_end})"
    )]
    PoolOverlap {
        /// The job.
        id: u16,
        /// First slot.
        base: u32,
        /// End of the pool.
        end: u64,
        /// The job it collides with.
        other: u16,
        /// That job's first slot.
        other_base: u32,
        /// That job's pool end.
        other_end: u64,
    },
    /// Group id 0 means "no group" on a switch (as in P4Runtime).
    #[error("multicast group 0 is reserved; pick a group id from 1 to 65535")]
    GroupZero,
    /// The group id is taken by a job's group or a group made by hand.
    #[error("multicast group {group} is in use ({owner}); pick another id or delete it first")]
    GroupInUse {
        /// The id asked for.
        group: u16,
        /// Who holds it: "job N" or "made by hand".
        owner: String,
    },
    /// No such group.
    #[error("no multicast group {group} is installed")]
    UnknownGroup {
        /// The id asked for.
        group: u16,
    },
    /// A group made by hand cannot be deleted alone while it is a job's.
    #[error("multicast group {group} belongs to job {job}; it goes when the job is deleted")]
    GroupOfJob {
        /// The group.
        group: u16,
        /// Its job.
        job: u16,
    },
    /// A group without members, or with more than the switch replicates.
    #[error("multicast group {group} has {count} members; give 1 to {max}")]
    BadMembers {
        /// The group.
        group: u16,
        /// Members given.
        count: usize,
        /// The most a group may have.
        max: usize,
    },
    /// Two members with the same endpoint.
    #[error("multicast group {group}: member {addr} is listed twice")]
    DuplicateMember {
        /// The group.
        group: u16,
        /// The repeated endpoint.
        addr: SocketAddr,
    },
    /// A tree job whose upstream is unusable: a member id beyond the
    /// bitmap, or one of the job's own workers named as its parent.
    #[error("job {id}: upstream {reason}")]
    BadUpstream {
        /// The job.
        id: u16,
        /// What is wrong with it.
        reason: String,
    },
    /// A job's child switches name a member it does not have.
    #[error("job {id}: child switch {member} is not a member (the job has {members})")]
    BadChildSwitch {
        /// The job.
        id: u16,
        /// The member id named.
        member: usize,
        /// The job's members.
        members: usize,
    },
    /// A relay entry that cannot work (it loops, or names a member no
    /// parent has).
    #[error("relay {key}: {reason}")]
    BadRelay {
        /// The entry's match fields.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The relay table already matches these fields.
    #[error("relay {key} is already installed; delete it first")]
    RelayInUse {
        /// The entry's match fields.
        key: String,
    },
    /// No relay entry matches these fields.
    #[error("no relay {key} is installed")]
    UnknownRelay {
        /// The match fields asked for.
        key: String,
    },
    /// A job's detours or auxiliary path cannot work.
    #[error("job {id}: {reason}")]
    BadDetour {
        /// The job.
        id: u16,
        /// What is wrong.
        reason: String,
    },
    /// K is zero or larger than the switch supports.
    #[error("job {id}: {elements} elements per packet; the switch supports 1 to {max}")]
    BadElements {
        /// The job.
        id: u16,
        /// K asked for.
        elements: u16,
        /// The switch's maximum.
        max: u16,
    },
}

/// Bytes for messages and tables: "1.5 MiB", or "12.0 KiB" below a MiB.
pub fn size_text(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}
