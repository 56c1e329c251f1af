//! What a switch holds and the checks it makes: jobs (their workers and
//! pools), groups made by hand, the switch's memory and limits, the pool
//! map. Every switch (the emulator, bmv2, Tofino) and every control plane
//! speaks in these.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::counters::JobCounters;
pub use crate::detour::AuxPath;
use crate::detour::{Detour, RelayKey, RelaySpec};
pub use crate::error::JobError;
use crate::queues::ClassQueue;

/// Size of the switch's aggregator memory and the packets it accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchConfig {
    /// Slots of aggregator memory shared by all jobs' pools.
    pub slots: u32,
    /// Largest element count (K) a job may use.
    pub max_elements: u16,
    /// Bytes of aggregator values (both shadow sets of every slot) the
    /// pools may take together. An ASIC's registers are a fixed size; the
    /// emulator's grow with each job's K, so without a budget a few large
    /// pools would grow the process until the OS killed it. A job that
    /// would pass it is refused instead (`JobError::OutOfMemory`).
    pub memory: u64,
}

/// The emulator's default value memory: 4 GiB, room for the default 8192
/// slots at the largest K four times over.
pub const DEFAULT_MEMORY: u64 = 4 << 30;

impl Default for SwitchConfig {
    /// 8192 slots, as SwitchML's Tofino program holds per pipeline stage;
    /// K up to the largest that fits one UDP datagram.
    fn default() -> Self {
        SwitchConfig {
            slots: 8192,
            max_elements: inagg_wire::MAX_ELEMENTS as u16,
            memory: DEFAULT_MEMORY,
        }
    }
}

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
    /// Members that are switches (a tree's child switches), one bit per
    /// member id. They take the job's results, but not the status a held
    /// member's query sends to the members its round waits for
    /// (docs/PROTOCOL.md, "Loss recovery"): a switch does not query.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub child_switches: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
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
    /// A plain job: generation 0, the switch-wide priority map, the
    /// target's multicast group, no tree entries (set those fields after,
    /// or with `..JobSpec::new(..)`).
    pub fn new(
        id: u16,
        workers: Vec<SocketAddr>,
        pool_base: u32,
        pool_size: u32,
        elements: u16,
    ) -> JobSpec {
        JobSpec {
            child_switches: 0,
            id,
            workers,
            pool_base,
            pool_size,
            elements,
            generation: 0,
            queues: Vec::new(),
            group: None,
            upstream: None,
            detours: Vec::new(),
        }
    }

    /// End of the pool (exclusive).
    pub fn pool_end(&self) -> u64 {
        u64::from(self.pool_base) + u64::from(self.pool_size)
    }

    /// Bytes of aggregator values its pool takes.
    pub fn memory(&self) -> u64 {
        u64::from(self.pool_size) * slot_bytes(self.elements)
    }
}

/// Child switches must be members: a bit beyond the member list names no
/// one.
fn check_child_switches(spec: &JobSpec) -> Result<(), JobError> {
    let n = spec.workers.len();
    match (0..64).find(|&m| m >= n && spec.child_switches & (1u64 << m) != 0) {
        Some(member) => Err(JobError::BadChildSwitch {
            id: spec.id,
            member,
            members: n,
        }),
        None => Ok(()),
    }
}

/// Bytes of aggregator values one slot takes at K = `elements`: K 32-bit
/// values in each of its two shadow sets.
pub fn slot_bytes(elements: u16) -> u64 {
    2 * u64::from(elements) * 4
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
        check_aux_path(id, &up)?;
    }
    crate::detour::check_detours(id, &spec.workers, &spec.detours)?;
    check_child_switches(spec)?;
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
        crate::queues::check_queue(cq.queue)?;
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

/// One meaning per match (docs/PROTOCOL.md, "Auxiliary paths"): the relay
/// table is looked up before the jobs, so a relay entry with the fields
/// under which `job` (the installed job of the entry's id, if any) takes a
/// detour would carry that member's detours past it. Every target checks
/// this before installing a relay entry.
pub fn relay_meets_no_detour(spec: &RelaySpec, job: Option<&JobSpec>) -> Result<(), JobError> {
    let Some(job) = job else {
        return Ok(());
    };
    if !job.detours.iter().any(|d| d.key(spec.job) == spec.key()) {
        return Ok(());
    }
    Err(JobError::BadRelay {
        key: spec.key().to_string(),
        reason: format!(
            "job {} here takes member {}'s detours from {}; the entry would carry them past it",
            spec.job, spec.member, spec.from
        ),
    })
}

/// The same rule from the job's side: none of its detours may arrive under
/// the fields of a relay entry already installed (`relayed` says whether
/// one is).
pub fn detours_unrelayed(
    spec: &JobSpec,
    relayed: impl Fn(&RelayKey) -> bool,
) -> Result<(), JobError> {
    for d in &spec.detours {
        let key = d.key(spec.id);
        if relayed(&key) {
            return Err(JobError::BadDetour {
                id: spec.id,
                reason: format!(
                    "member {}'s detours from {} would be carried on by relay {key}; delete the relay first",
                    d.member, d.relay
                ),
            });
        }
    }
    Ok(())
}

/// Checks a tree job's auxiliary path, if it has one: a port other than
/// the primary's, a queue that can hold a packet.
pub fn check_aux_path(id: u16, up: &Upstream) -> Result<(), JobError> {
    let bad = |reason: String| Err(JobError::BadDetour { id, reason });
    let Some(aux) = up.aux else {
        return Ok(());
    };
    if aux.via == up.switch {
        return bad(format!(
            "the auxiliary path starts at the parent {} itself; give another switch",
            up.switch
        ));
    }
    if aux.queue_length == 0 {
        return bad("an auxiliary queue length of 0 never takes a packet".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::*;

    fn spec(id: u16, base: u32, size: u32) -> JobSpec {
        let workers = vec![
            "127.0.0.1:1".parse().unwrap(),
            "127.0.0.1:2".parse().unwrap(),
        ];
        JobSpec::new(id, workers, base, size, 64)
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
    fn child_switches_must_be_members() {
        let mut s = spec(3, 0, 10);
        s.child_switches = 1 << s.workers.len();
        assert_eq!(
            validate_job(&s, [], CONFIG).unwrap_err().to_string(),
            format!(
                "job 3: child switch {0} is not a member (the job has {0})",
                s.workers.len()
            )
        );
        s.child_switches = 1;
        assert!(validate_job(&s, [], CONFIG).is_ok());
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
