//! The emulator's management API: what a job is, the checks a job must pass,
//! and the request/response messages of the control endpoint (one JSON object
//! per line over TCP). The control plane's emulator target is its client.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::counters::{Counters, JobCounters};
pub use crate::detour::{AuxPath, Detour, RelayInfo, RelayKey, RelaySpec};
use crate::egress::{ClassQueue, LinkConfig, PortStats};
use crate::faults::FaultConfig;
use crate::switch::SwitchConfig;

/// A job as installed on the switch: who its workers are and which slots of
/// aggregator memory it owns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Job id, carried in every packet.
    pub id: u16,
    /// Worker endpoints; worker id = index. Results are sent to these.
    pub workers: Vec<SocketAddr>,
    /// First slot of the pool in the switch's memory.
    pub pool_base: u32,
    /// Slots in the pool: [pool_base, pool_base + pool_size).
    pub pool_size: u32,
    /// Elements (int32) per packet, K.
    pub elements: u16,
    /// Membership generation; packets with another generation are dropped.
    #[serde(default)]
    pub generation: u16,
    /// This job's priority class -> egress queue map. A class listed here
    /// leaves by its queue; any other class by the switch-wide map, so a
    /// job without a map behaves as before.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<ClassQueue>,
    /// The multicast group that carries this job's results: installed with
    /// the job (members = its workers, replication id = worker id) and freed
    /// with it. `None`: the target picks one (bmv2: job id + 1; the
    /// emulator: no group-table entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u16>,
    /// The parent switch, when this job is an inner or leaf node of a
    /// multi-switch aggregation tree (docs/PROTOCOL.md, "Aggregation
    /// trees"): a complete slot's partial sum goes up to it as one
    /// contribution instead of out to the workers, and the result it sends
    /// back is multicast down. `None`: this switch is the root (or the only
    /// switch) and multicasts its own results.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<Upstream>,
    /// Members (child switches) whose partial sums may also arrive as
    /// detours over an auxiliary path, and the relay each arrives from
    /// (docs/PROTOCOL.md, "Auxiliary paths").
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub detours: Vec<Detour>,
}

/// Where a tree job's partial sums go: the parent switch's data-plane
/// endpoint, the parent's job for this tree, and this switch's member id in
/// it. The parent lists this switch's data-plane endpoint as that member.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Upstream {
    /// The parent switch's data-plane endpoint.
    pub switch: SocketAddr,
    /// The parent's job id (its pool holds the same slots' next level).
    pub job: u16,
    /// This switch's member id in the parent's job.
    pub member: u16,
    /// Where partial sums go when the link to the parent is busy: the
    /// first switch of an auxiliary path (`None`: always the primary).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aux: Option<AuxPath>,
}

impl std::str::FromStr for Upstream {
    type Err = String;

    /// `SWITCH/JOB/MEMBER`, as the CLI takes it: `10.0.0.2:47000/3/1` sends
    /// partial sums to job 3 of the switch at 10.0.0.2:47000 as its member 1.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not SWITCH/JOB/MEMBER (for example 10.0.0.2:47000/3/1)");
        let mut parts = s.split('/');
        let (Some(switch), Some(job), Some(member), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Upstream {
            switch: switch.trim().parse().map_err(|_| bad())?,
            job: job.trim().parse().map_err(|_| bad())?,
            member: member.trim().parse().map_err(|_| bad())?,
            aux: None,
        })
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.switch, self.job, self.member)
    }
}

impl JobSpec {
    /// End of the pool (exclusive).
    pub fn pool_end(&self) -> u64 {
        u64::from(self.pool_base) + u64::from(self.pool_size)
    }

    /// Bytes of aggregator values its pool takes.
    pub fn memory(&self) -> u64 {
        u64::from(self.pool_size) * slot_bytes(self.elements)
    }
}

/// Bytes of aggregator values one slot takes at K = `elements`: K 32-bit
/// values in each of its two shadow sets.
pub fn slot_bytes(elements: u16) -> u64 {
    2 * u64::from(elements) * 4
}

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

/// Checks a new job against the switch's memory and the jobs installed.
pub fn validate_job<'a>(
    spec: &JobSpec,
    existing: impl IntoIterator<Item = &'a JobSpec>,
    config: SwitchConfig,
) -> Result<(), JobError> {
    let id = spec.id;
    if spec.workers.is_empty() {
        return Err(JobError::NoWorkers { id });
    }
    if spec.workers.len() > inagg_wire::MAX_WORKERS {
        return Err(JobError::TooManyWorkers {
            id,
            count: spec.workers.len(),
            max: inagg_wire::MAX_WORKERS,
        });
    }
    for (i, a) in spec.workers.iter().enumerate() {
        if spec.workers[..i].contains(a) {
            return Err(JobError::DuplicateWorker { id, addr: *a });
        }
    }
    if spec.elements == 0 || spec.elements > config.max_elements {
        return Err(JobError::BadElements {
            id,
            elements: spec.elements,
            max: config.max_elements,
        });
    }
    if spec.pool_size == 0 || spec.pool_size > 65_536 {
        return Err(JobError::BadPoolSize {
            id,
            size: spec.pool_size,
        });
    }
    let (base, end) = (spec.pool_base, spec.pool_end());
    if end > u64::from(config.slots) {
        return Err(JobError::PoolBeyondMemory {
            id,
            base,
            end,
            slots: config.slots,
        });
    }
    check_queue_map(&spec.queues)?;
    if let Some(up) = spec.upstream {
        check_upstream(id, &up, &spec.workers)?;
        crate::detour::check_aux_path(id, &up)?;
    }
    crate::detour::check_detours(id, &spec.workers, &spec.detours)?;
    if spec.group == Some(0) {
        return Err(JobError::GroupZero);
    }
    let mut used = 0u64;
    for other in existing {
        used += other.memory();
        if let (Some(g), Some(o)) = (spec.group, other.group) {
            if g == o {
                return Err(JobError::GroupInUse {
                    group: g,
                    owner: format!("job {}", other.id),
                });
            }
        }
        if other.id == id {
            return Err(JobError::DuplicateId { id });
        }
        if let (Some(up), Some(o)) = (spec.upstream, other.upstream) {
            if (up.switch, up.job) == (o.switch, o.job) {
                // The parent's results name its job only: they could not
                // tell the two apart.
                return Err(JobError::BadUpstream {
                    id,
                    reason: format!(
                        "job {} already takes job {}'s results from {}; one job per parent job",
                        other.id, up.job, up.switch
                    ),
                });
            }
        }
        if u64::from(base) < other.pool_end() && u64::from(other.pool_base) < end {
            return Err(JobError::PoolOverlap {
                id,
                base,
                end,
                other: other.id,
                other_base: other.pool_base,
                other_end: other.pool_end(),
            });
        }
    }
    let free = config.memory.saturating_sub(used);
    if spec.memory() > free {
        return Err(JobError::OutOfMemory {
            id,
            size: spec.pool_size,
            elements: spec.elements,
            needs: spec.memory(),
            free,
            total: config.memory,
        });
    }
    Ok(())
}

/// Checks a tree job's parent: a member id the parent's bitmap holds, and
/// a parent that is not one of the job's own workers (results from it
/// would loop back up).
fn check_upstream(id: u16, up: &Upstream, workers: &[SocketAddr]) -> Result<(), JobError> {
    if usize::from(up.member) >= inagg_wire::MAX_WORKERS {
        return Err(JobError::BadUpstream {
            id,
            reason: format!(
                "member id {} is beyond the parent's {} bitmap bits",
                up.member,
                inagg_wire::MAX_WORKERS
            ),
        });
    }
    if workers.contains(&up.switch) {
        return Err(JobError::BadUpstream {
            id,
            reason: format!("{} is also one of the job's workers", up.switch),
        });
    }
    Ok(())
}

/// Checks a job's class -> queue map: every queue exists, no class twice
/// (shared with the controller, which checks a map before storing it).
pub fn check_queue_map(queues: &[ClassQueue]) -> Result<(), JobError> {
    for (i, cq) in queues.iter().enumerate() {
        crate::switch::check_queue(cq.queue)?;
        if queues[..i].iter().any(|o| o.class == cq.class) {
            return Err(JobError::DuplicateClass { class: cq.class });
        }
    }
    Ok(())
}

/// A job and its counters, as the control endpoint reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobInfo {
    /// What was installed.
    pub spec: JobSpec,
    /// What it has done.
    pub counters: JobCounters,
}

/// The most members a multicast group may have (the worker field that names
/// a member is 16 bits; bmv2 and Tofino replicate far more than this).
pub const MAX_GROUP_MEMBERS: usize = 1024;

/// A multicast group made by hand: datagrams of kind multicast sent to it by
/// one member are copied to every other member, unaggregated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupSpec {
    /// Group id, carried in the header's job field; 1 to 65535.
    pub id: u16,
    /// Member endpoints; member index = position (the header's worker field).
    pub members: Vec<SocketAddr>,
}

/// Checks a group made by hand on its own (ids in use are the switch's check).
pub fn check_group(spec: &GroupSpec) -> Result<(), JobError> {
    let group = spec.id;
    if group == 0 {
        return Err(JobError::GroupZero);
    }
    let count = spec.members.len();
    if count == 0 || count > MAX_GROUP_MEMBERS {
        return Err(JobError::BadMembers {
            group,
            count,
            max: MAX_GROUP_MEMBERS,
        });
    }
    for (i, a) in spec.members.iter().enumerate() {
        if spec.members[..i].contains(a) {
            return Err(JobError::DuplicateMember { group, addr: *a });
        }
    }
    Ok(())
}

/// A multicast group as the switch reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    /// Group id.
    pub id: u16,
    /// Members; index = member (or worker) id.
    pub members: Vec<SocketAddr>,
    /// The job whose results it carries; `None`: made by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<u16>,
    /// Group datagrams admitted.
    #[serde(default)]
    pub packets: u64,
    /// Copies made of them (one per member but the sender).
    #[serde(default)]
    pub copies: u64,
}

/// The switch's memory and limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchInfo {
    /// Slots of aggregator memory.
    pub slots: u32,
    /// Largest K.
    pub max_elements: u16,
    /// K must equal `max_elements`: a P4 program holds as many accumulators
    /// per slot as it was compiled for (the emulator takes any K up to it).
    #[serde(default)]
    pub fixed_elements: bool,
    /// Bytes of aggregator values the pools may take together
    /// (`SwitchConfig::memory`); unlimited where the slots' size is fixed
    /// (a P4 program's registers).
    #[serde(default = "unlimited")]
    pub memory: u64,
    /// Bytes of it the installed pools take.
    #[serde(default)]
    pub memory_used: u64,
    /// Jobs installed.
    pub jobs: usize,
}

fn unlimited() -> u64 {
    u64::MAX
}

impl SwitchInfo {
    /// The limits a job is checked against on this switch.
    pub fn config(&self) -> SwitchConfig {
        SwitchConfig {
            slots: self.slots,
            max_elements: self.max_elements,
            memory: self.memory,
        }
    }
}

/// One contiguous range of slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotRange {
    /// First slot.
    pub base: u32,
    /// Slots in the range.
    pub size: u32,
    /// The job owning it, or none for free space.
    pub job: Option<u16>,
}

/// The layout of aggregator memory: every used and free range, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PoolMap {
    /// Total slots.
    pub slots: u32,
    /// Slots not in any pool.
    pub free: u32,
    /// Used and free ranges covering [0, slots).
    pub ranges: Vec<SlotRange>,
}

impl PoolMap {
    /// Builds the map from the installed jobs (whose pools never overlap).
    pub fn new<'a>(slots: u32, jobs: impl IntoIterator<Item = &'a JobSpec>) -> PoolMap {
        let mut used: Vec<SlotRange> = jobs
            .into_iter()
            .map(|j| SlotRange {
                base: j.pool_base,
                size: j.pool_size,
                job: Some(j.id),
            })
            .collect();
        used.sort_by_key(|r| r.base);
        let mut ranges = Vec::new();
        let mut at = 0u32;
        for r in used {
            if r.base > at {
                ranges.push(SlotRange {
                    base: at,
                    size: r.base - at,
                    job: None,
                });
            }
            at = r.base + r.size;
            ranges.push(r);
        }
        if at < slots {
            ranges.push(SlotRange {
                base: at,
                size: slots - at,
                job: None,
            });
        }
        let free = ranges
            .iter()
            .filter(|r| r.job.is_none())
            .map(|r| r.size)
            .sum();
        PoolMap {
            slots,
            free,
            ranges,
        }
    }
}

/// A request to the control endpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Memory, limits and the data-plane address.
    Info,
    /// Install a job.
    CreateJob {
        /// The job.
        spec: JobSpec,
    },
    /// Remove a job.
    DeleteJob {
        /// Its id.
        id: u16,
    },
    /// One job with counters.
    GetJob {
        /// Its id.
        id: u16,
    },
    /// Every job with counters.
    ListJobs,
    /// The memory layout.
    Pools,
    /// Switch-wide counters.
    Counters,
    /// Zero every counter.
    ResetCounters,
    /// The fault injector's settings.
    GetFaults,
    /// Change the fault injector's settings (reseeds it).
    SetFaults {
        /// New settings.
        faults: FaultConfig,
    },
    /// The egress ports' line rate and per-queue counters.
    Queues,
    /// Install a multicast group made by hand.
    CreateGroup {
        /// The group.
        group: GroupSpec,
    },
    /// Remove a group made by hand.
    DeleteGroup {
        /// Its id.
        id: u16,
    },
    /// Every multicast group, the jobs' and those made by hand.
    ListGroups,
    /// Give one egress port a rate of its own (a slower link to one
    /// destination), or the line rate back with `rate_bps: None`. Needs a
    /// line rate (paced ports).
    SetPortRate {
        /// The destination the port leads to.
        port: SocketAddr,
        /// Bits per second; `None`: the line rate.
        rate_bps: Option<u64>,
    },
    /// Send a priority class's packets through an egress queue (the P4
    /// programs' `priority_to_queue` entry).
    SetPriorityQueue {
        /// The class (the header's priority field).
        class: u8,
        /// The queue, below 8 (7 is served first).
        queue: u8,
    },
    /// Install a relay entry: detours matching it are forwarded unchanged.
    CreateRelay {
        /// The entry.
        relay: RelaySpec,
    },
    /// Remove a relay entry.
    DeleteRelay {
        /// Its match fields.
        key: RelayKey,
    },
    /// Every relay entry with its counter.
    ListRelays,
    /// Claim the switch for this connection's controller (P4Runtime's
    /// arbitration: the highest election id connected is the primary, and
    /// only it changes jobs, groups, relays and the priority map; see
    /// `arbitration`). Refused if another connection holds this id or a
    /// higher one.
    Arbitrate {
        /// 1 or more.
        election_id: u64,
    },
}

impl Request {
    /// Whether the request changes what a controller keeps in step (jobs,
    /// groups, relays, the priority map): while a controller holds the
    /// switch, only it may send these. The emulator's own knobs (faults,
    /// port rates, counters) stay open to any connection.
    pub fn managed(&self) -> bool {
        matches!(
            self,
            Request::CreateJob { .. }
                | Request::DeleteJob { .. }
                | Request::CreateGroup { .. }
                | Request::DeleteGroup { .. }
                | Request::CreateRelay { .. }
                | Request::DeleteRelay { .. }
                | Request::SetPriorityQueue { .. }
        )
    }

    /// Whether the request changes the switch (logged at info level; reads
    /// at debug).
    pub fn changes_state(&self) -> bool {
        !matches!(
            self,
            Request::Info
                | Request::GetJob { .. }
                | Request::ListJobs
                | Request::ListGroups
                | Request::ListRelays
                | Request::Pools
                | Request::Counters
                | Request::GetFaults
                | Request::Queues
        )
    }
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// To `Info`.
    Info {
        /// Memory and limits.
        info: SwitchInfo,
        /// Where the data plane listens.
        data_addr: SocketAddr,
    },
    /// Done, nothing to report.
    Done,
    /// One job.
    Job {
        /// The job.
        job: JobInfo,
    },
    /// Every job.
    Jobs {
        /// The jobs.
        jobs: Vec<JobInfo>,
    },
    /// The memory layout.
    Pools {
        /// The map.
        pools: PoolMap,
    },
    /// Switch-wide counters.
    Counters {
        /// The counters.
        counters: Counters,
    },
    /// Fault settings.
    Faults {
        /// The settings.
        faults: FaultConfig,
    },
    /// To `ListGroups`.
    Groups {
        /// The groups, by id.
        groups: Vec<GroupInfo>,
    },
    /// To `ListRelays`.
    Relays {
        /// The entries, by match fields.
        relays: Vec<RelayInfo>,
    },
    /// To `Queues`.
    Queues {
        /// Priority class -> queue, for the classes not on queue 0.
        map: Vec<ClassQueue>,
        /// The ports' line rate and queue size; `None`: not paced.
        link: Option<LinkConfig>,
        /// Each port's queues (ports appear as they are first used).
        ports: Vec<PortStats>,
    },
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ApiError {
    /// The job operation was refused.
    #[error("{error}")]
    Job {
        /// Why.
        error: JobError,
    },
    /// The request was not understood (the client's fault).
    #[error("bad request: {message}")]
    BadRequest {
        /// What the parser said.
        message: String,
    },
    /// A setting is out of range (the client's fault).
    /// The endpoint holds as many connections as it serves, all at work.
    #[error("busy: {message}")]
    Busy {
        /// Why, and what to do.
        message: String,
    },
    #[error("invalid setting: {message}")]
    Invalid {
        /// What is wrong.
        message: String,
    },
    /// Another connection is the primary controller (`arbitration`).
    #[error(
        "another controller manages this switch: the one connected from {peer}, with election \
         id {primary}{}; change the switch through it (ctl --controller), stop it, or claim \
         with a higher --election-id",
        ours.map_or(String::new(), |o| format!(" (this connection claimed {o})"))
    )]
    NotPrimary {
        /// This connection's claim, if it made one.
        ours: Option<u64>,
        /// The primary's election id.
        primary: u64,
        /// Where the primary is connected from.
        peer: SocketAddr,
    },
}

impl From<JobError> for ApiError {
    fn from(error: JobError) -> Self {
        ApiError::Job { error }
    }
}

/// One line of response: a reply or an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Response {
    /// Success.
    Ok(Reply),
    /// Failure.
    Err(ApiError),
}

/// Bytes for messages and tables: "1.5 MiB", or "12.0 KiB" below a MiB.
pub fn size_text(bytes: u64) -> String {
    if bytes < 1 << 20 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: u16, base: u32, size: u32) -> JobSpec {
        JobSpec {
            detours: Vec::new(),
            upstream: None,
            id,
            workers: vec![
                "127.0.0.1:1".parse().unwrap(),
                "127.0.0.1:2".parse().unwrap(),
            ],
            pool_base: base,
            pool_size: size,
            elements: 64,
            generation: 0,
            queues: Vec::new(),
            group: None,
        }
    }

    const CONFIG: SwitchConfig = SwitchConfig {
        slots: 100,
        max_elements: 1024,
        memory: 1 << 20,
    };

    #[test]
    fn overlapping_pools_are_refused_with_both_ranges() {
        let a = spec(1, 0, 50);
        let err = validate_job(&spec(2, 40, 20), [&a], CONFIG).unwrap_err();
        assert_eq!(
            err.to_string(),
            "job 2: pool [40, 60) overlaps job 1's pool [0, 50)"
        );
        assert!(validate_job(&spec(2, 50, 50), [&a], CONFIG).is_ok());
    }

    #[test]
    fn limits_are_enforced() {
        assert!(matches!(
            validate_job(&spec(1, 90, 20), [], CONFIG),
            Err(JobError::PoolBeyondMemory { end: 110, .. })
        ));
        assert!(matches!(
            validate_job(&spec(1, 0, 0), [], CONFIG),
            Err(JobError::BadPoolSize { .. })
        ));
        let a = spec(1, 0, 10);
        assert_eq!(
            validate_job(&spec(1, 20, 10), [&a], CONFIG),
            Err(JobError::DuplicateId { id: 1 })
        );
        let mut s = spec(3, 0, 10);
        s.workers.push(s.workers[0]);
        assert!(matches!(
            validate_job(&s, [], CONFIG),
            Err(JobError::DuplicateWorker { .. })
        ));
        s.workers.clear();
        assert_eq!(
            validate_job(&s, [], CONFIG),
            Err(JobError::NoWorkers { id: 3 })
        );
        let mut s = spec(3, 0, 10);
        s.elements = 2000;
        assert!(matches!(
            validate_job(&s, [], CONFIG),
            Err(JobError::BadElements { .. })
        ));
        s.workers = (0..65)
            .map(|p| SocketAddr::from(([127, 0, 0, 1], p)))
            .collect();
        s.elements = 64;
        assert!(matches!(
            validate_job(&s, [], CONFIG),
            Err(JobError::TooManyWorkers { count: 65, .. })
        ));
    }

    /// The budget counts both shadow sets of every slot at the job's K,
    /// summed over the installed pools: exactly full fits, one slot more
    /// does not.
    #[test]
    fn pools_share_the_memory_budget() {
        // 1 MiB at K = 1024 is 128 slots (2 x 1024 x 4 bytes each).
        let wide = |id, base, size| JobSpec {
            elements: 1024,
            ..spec(id, base, size)
        };
        let config = SwitchConfig {
            slots: 200,
            ..CONFIG
        };
        let a = wide(1, 0, 64);
        assert_eq!(a.memory(), 512 << 10);
        assert!(validate_job(&wide(2, 64, 64), [&a], config).is_ok());
        assert_eq!(
            validate_job(&wide(2, 64, 65), [&a], config),
            Err(JobError::OutOfMemory {
                id: 2,
                size: 65,
                elements: 1024,
                needs: 65 * 8192,
                free: 512 << 10,
                total: 1 << 20,
            })
        );
    }

    #[test]
    fn pool_map_lists_used_and_free_ranges() {
        let jobs = [spec(2, 60, 10), spec(1, 10, 20)];
        let map = PoolMap::new(100, &jobs);
        assert_eq!(map.free, 70);
        let shape: Vec<(u32, u32, Option<u16>)> =
            map.ranges.iter().map(|r| (r.base, r.size, r.job)).collect();
        assert_eq!(
            shape,
            vec![
                (0, 10, None),
                (10, 20, Some(1)),
                (30, 30, None),
                (60, 10, Some(2)),
                (70, 30, None)
            ]
        );
    }

    #[test]
    fn requests_and_errors_serialise_as_tagged_json() {
        let line = serde_json::to_string(&Request::DeleteJob { id: 4 }).unwrap();
        assert_eq!(line, r#"{"op":"delete_job","id":4}"#);
        let resp = Response::Err(JobError::UnknownJob { id: 4 }.into());
        let back: Response = serde_json::from_str(&serde_json::to_string(&resp).unwrap()).unwrap();
        assert_eq!(back, resp);
    }
}
