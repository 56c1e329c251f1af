//! The controller's bookkeeping, pure: the jobs it admitted, where their
//! pools are, who has registered in which session, the hand-made groups,
//! the priority map, and what it knows of each aggregator. `state` applies
//! it to the aggregators and the database.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;

use inagg_switch_api::{check_group, FaultConfig, GroupInfo, GroupSpec, JobError, JobSpec};
use serde::{Deserialize, Serialize};

use crate::alloc::{self, Grant, SlotAllocator};
use crate::site::Site;
use crate::store::StoreError;
use crate::tenants::{self, TenantRecord};
use inagg_controller_api::{
    GroupDecl, GroupStatus, JobDecl, JobStatus, Placement, SiteStatus, TenantDecl, TenantStatus,
};

/// A job as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRecord {
    /// What was asked.
    pub decl: JobDecl,
    /// Id in packets.
    pub id: u16,
    /// Where the pool is.
    pub placement: Placement,
    /// Each rank's endpoint, once known.
    pub endpoints: Vec<Option<SocketAddr>>,
    /// Ranks registered in the current session (all of them once installed).
    pub session: Vec<bool>,
    /// Membership generation of the current session.
    pub generation: u16,
    /// Admission order: waiting jobs are placed first come, first served.
    pub order: u64,
    /// The multicast group of its results, allocated with the job and
    /// freed with it (0 in records stored before groups were allocated:
    /// given one on load).
    #[serde(default)]
    pub group: u16,
    /// The tenant that created it; `None`: the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// A multicast group made by hand, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRecord {
    /// What was asked.
    pub decl: GroupDecl,
    /// The id in packets (the asked one, or allocated).
    pub id: u16,
}

impl GroupRecord {
    /// The switch entry.
    pub fn spec(&self) -> GroupSpec {
        GroupSpec {
            id: self.id,
            members: self.decl.members.clone(),
        }
    }
}

impl JobRecord {
    /// Ranks registered in this session.
    pub fn registered(&self) -> u16 {
        self.session.iter().filter(|&&r| r).count() as u16
    }

    /// Every rank known in this session: the job can be installed.
    pub fn complete(&self) -> bool {
        self.session.iter().all(|&r| r) && self.endpoints.iter().all(Option::is_some)
    }

    /// The switch entry, once complete and placed.
    pub fn spec(&self) -> Option<JobSpec> {
        let grant = self.placement.grant()?;
        if !self.complete() {
            return None;
        }
        Some(JobSpec {
            child_switches: 0,
            detours: Vec::new(),
            upstream: None,
            id: self.id,
            workers: self.endpoints.iter().flatten().copied().collect(),
            pool_base: grant.base,
            pool_size: grant.size,
            elements: self.decl.elements,
            generation: self.generation,
            queues: self.decl.queues.clone(),
            group: (self.group != 0).then_some(self.group),
        })
    }
}

/// What one aggregator should hold.
#[derive(Debug, Default)]
pub struct Desired {
    /// The jobs to install: those placed here with every worker known.
    pub jobs: BTreeMap<u16, JobSpec>,
    pub groups: BTreeMap<u16, GroupSpec>,
    /// Every job placed here, installable or not.
    pub placed: BTreeSet<u16>,
    /// The faults to hold it to; `None` until recorded (the first
    /// contact adopts what it has).
    pub faults: Option<FaultConfig>,
}

/// Why the controller refused a request (the caller's fault unless it says
/// otherwise; each message says what to do).
#[derive(Debug, thiserror::Error)]
pub enum CoreError {
    /// A bad job declaration.
    #[error("job {name:?}: {message}")]
    BadJob {
        /// The job.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The name is taken.
    #[error("job {0:?} already exists; delete it first (inagg ctl job delete {0})")]
    Exists(String),
    /// No such job.
    #[error("no job {0:?}; create it first (inagg ctl job create --name {0} ...)")]
    Unknown(String),
    /// A rank outside the job.
    #[error("job {name:?} has {workers} workers (ranks 0 to {}); rank {rank} is not one", .workers.saturating_sub(1))]
    BadRank {
        /// The job.
        name: String,
        /// The rank given.
        rank: u16,
        /// Workers in the job.
        workers: u16,
    },
    /// The endpoint is another rank's.
    #[error("job {name:?}: endpoint {endpoint} is already rank {other}'s")]
    EndpointTaken {
        /// The job.
        name: String,
        /// The endpoint.
        endpoint: SocketAddr,
        /// Whose it is.
        other: usize,
    },
    /// Refused as the switch would refuse it (a queue it does not have).
    #[error(transparent)]
    Refused(#[from] inagg_switch_api::JobError),
    /// Every job id is in use.
    #[error("all 65535 job ids are in use")]
    NoIds,
    /// Every multicast group id is in use.
    #[error("all 65535 multicast group ids are in use")]
    NoGroupIds,
    /// A bad group declaration.
    #[error("group {name:?}: {message}")]
    BadGroup {
        /// The group.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The group name is taken.
    #[error("group {0:?} already exists; delete it first (inagg ctl group delete {0})")]
    GroupExists(String),
    /// No such group.
    #[error("no group {0:?}; `inagg ctl group list` shows the groups")]
    UnknownGroup(String),
    /// A bad tenant declaration.
    #[error("tenant {name:?}: {message}")]
    BadTenant {
        /// The tenant.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// The tenant name is taken.
    #[error("tenant {0:?} already exists (inagg ctl tenant rotate {0} gives it a new credential)")]
    TenantExists(String),
    /// No such tenant.
    #[error("no tenant {0:?}; `inagg ctl tenant list` shows the tenants")]
    UnknownTenant(String),
    /// The tenant still has jobs.
    #[error("faults: {0}")]
    BadFaults(String),
    #[error("tenant {name:?} still has jobs ({jobs}); delete them first")]
    TenantBusy {
        /// The tenant.
        name: String,
        /// Its jobs, by name.
        jobs: String,
    },
    /// Beyond the tenant's quota.
    #[error("job {name:?}: {message}")]
    Quota {
        /// The job.
        name: String,
        /// What it would hold, against what quota.
        message: String,
    },
    /// The database failed (the environment's fault).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a change left to be written to the database.
#[derive(Debug, Default)]
pub struct Dirty {
    /// Jobs changed or deleted, by name.
    pub jobs: BTreeSet<String>,
    /// The next generation.
    pub generation: bool,
    /// The class -> queue map.
    pub priority: bool,
    /// The hand-made groups.
    pub groups: bool,
    /// The tenants.
    pub tenants: bool,
    /// The faults held.
    pub faults: bool,
}

/// The faults the controller holds one aggregator to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FaultRecord {
    /// The faults.
    pub config: FaultConfig,
    /// Who set them through the controller; `None`: found on the
    /// aggregator when the controller first reached it.
    pub set_by: Option<inagg_controller_api::FaultsSetBy>,
}

/// The controller's bookkeeping: jobs, their placements and sessions,
/// groups, the priority map, and what is known of each aggregator. Pure:
/// no connection, no database (a change is noted in [`Book::take_dirty`]
/// for `state::Core` to write), so every transition is unit-tested here.
pub struct Book {
    /// The jobs by name.
    pub jobs: BTreeMap<String, JobRecord>,
    /// Multicast groups made by hand, by name (on the switch).
    pub groups: BTreeMap<String, GroupRecord>,
    /// Class -> queue on every aggregator.
    pub priority: BTreeMap<u8, u8>,
    /// The tenants by name (given after [`Book::new`], as stored).
    pub tenants: BTreeMap<String, TenantRecord>,
    /// The faults each aggregator is held to, by control address (given
    /// after [`Book::new`], as stored).
    pub faults: BTreeMap<SocketAddr, FaultRecord>,
    /// Index 0: the switch; then the fallbacks.
    pub sites: Vec<Site>,
    next_order: u64,
    next_generation: u16,
    dirty: Dirty,
}

impl Book {
    /// The stored state over `sites` (none reached yet): every stored job
    /// gets a group if it has none, and jobs stored on a fallback that is
    /// not among `sites` are placed again.
    pub fn new(
        jobs: BTreeMap<String, JobRecord>,
        groups: BTreeMap<String, GroupRecord>,
        priority: BTreeMap<u8, u8>,
        next_generation: u16,
        sites: Vec<Site>,
    ) -> Result<Book, CoreError> {
        let next_order = jobs.values().map(|j| j.order + 1).max().unwrap_or(0);
        let mut book = Book {
            jobs,
            groups,
            priority,
            tenants: BTreeMap::new(),
            faults: BTreeMap::new(),
            sites,
            next_order,
            next_generation,
            dirty: Dirty::default(),
        };
        book.give_jobs_groups()?;
        book.leave_unknown_fallbacks()?;
        Ok(book)
    }

    /// What changed since the last call, to be written.
    pub fn take_dirty(&mut self) -> Dirty {
        std::mem::take(&mut self.dirty)
    }

    /// The generation the next session gets.
    pub fn next_generation(&self) -> u16 {
        self.next_generation
    }
    /// Sends the jobs stored on a fallback this controller was not given
    /// (it restarted without that `--fallback`) to be placed again, rather
    /// than wait for an aggregator it will never reach.
    fn leave_unknown_fallbacks(&mut self) -> Result<(), CoreError> {
        let sites: Vec<SocketAddr> = self.sites.iter().map(|s| s.control).collect();
        let gone: Vec<(String, SocketAddr)> = self
            .jobs
            .values()
            .filter_map(|j| match j.placement {
                Placement::Fallback { host, .. } if !sites.contains(&host) => {
                    Some((j.decl.name.clone(), host))
                }
                _ => None,
            })
            .collect();
        for (name, host) in gone {
            tracing::warn!(
                "job {name:?} was on the fallback at {host}, which this controller is not given \
                 (--fallback); placed again (what that fallback holds is left to it)"
            );
            self.unplace(&name)?;
        }
        Ok(())
    }
    /// Gives a group to every stored job without one.
    fn give_jobs_groups(&mut self) -> Result<(), CoreError> {
        let names: Vec<String> = self
            .jobs
            .values()
            .filter(|j| j.group == 0)
            .map(|j| j.decl.name.clone())
            .collect();
        for name in names {
            let group = self.free_group()?;
            let job = self.jobs.get_mut(&name).expect("listed above");
            job.group = group;
            self.dirty.jobs.insert(job.decl.name.clone());
        }
        Ok(())
    }
    /// Group ids in use: the jobs' and the hand-made ones.
    fn groups_in_use(&self) -> BTreeMap<u16, String> {
        let jobs = self
            .jobs
            .values()
            .filter(|j| j.group != 0)
            .map(|j| (j.group, format!("job {}", j.decl.name)));
        let hand = self
            .groups
            .values()
            .map(|g| (g.id, format!("group {}", g.decl.name)));
        jobs.chain(hand).collect()
    }
    /// The lowest group id not in use.
    fn free_group(&self) -> Result<u16, CoreError> {
        let used = self.groups_in_use();
        (1..=u16::MAX)
            .find(|i| !used.contains_key(i))
            .ok_or(CoreError::NoGroupIds)
    }
    /// Makes a group by hand (installed on the switch by the next reconcile).
    pub fn create_group(&mut self, decl: GroupDecl) -> Result<GroupRecord, CoreError> {
        check_group_decl(&decl)?;
        if self.groups.contains_key(&decl.name) {
            return Err(CoreError::GroupExists(decl.name));
        }
        let id = match decl.id {
            Some(id) => {
                if let Some(owner) = self.groups_in_use().get(&id) {
                    return Err(JobError::GroupInUse {
                        group: id,
                        owner: owner.clone(),
                    }
                    .into());
                }
                id
            }
            None => self.free_group()?,
        };
        let record = GroupRecord { decl, id };
        self.groups.insert(record.decl.name.clone(), record.clone());
        self.dirty.groups = true;
        Ok(record)
    }
    /// Removes a group made by hand.
    pub fn delete_group(&mut self, name: &str) -> Result<(), CoreError> {
        if self.groups.remove(name).is_none() {
            let message = match self.jobs.get(name) {
                Some(_) => format!(
                    "{name:?} is a job; its group goes when the job is deleted \
                     (inagg ctl job delete {name})"
                ),
                None => return Err(CoreError::UnknownGroup(name.into())),
            };
            return Err(CoreError::BadGroup {
                name: name.into(),
                message,
            });
        }
        self.dirty.groups = true;
        Ok(())
    }
    /// A fresh generation for a new session of some job: packets of older
    /// sessions carry another one and are dropped.
    fn fresh_generation(&mut self) -> Result<u16, CoreError> {
        let g = self.next_generation;
        self.next_generation = self.next_generation.wrapping_add(1).max(1);
        self.dirty.generation = true;
        Ok(g)
    }
    /// The index in `sites` of the aggregator a placement is on.
    fn site_index(&self, p: &Placement) -> Option<usize> {
        match *p {
            Placement::Waiting => None,
            Placement::Switch { .. } => Some(0),
            Placement::Fallback { host, .. } => self.sites.iter().position(|s| s.control == host),
        }
    }
    /// The aggregator a job is placed on.
    pub fn site_of(&self, job: &JobRecord) -> Option<&Site> {
        self.site_index(&job.placement)
            .and_then(|i| self.sites.get(i))
    }
    /// Status of one job.
    pub fn status(&self, job: &JobRecord) -> JobStatus {
        let site = self.site_of(job);
        let refusal = site.and_then(|s| s.refusals.get(&job.id));
        JobStatus {
            decl: job.decl.clone(),
            id: job.id,
            placement: job.placement,
            registered: job.registered(),
            installed: site.zip(job.spec()).is_some_and(|(s, spec)| s.holds(&spec)),
            refused: refusal.map(|(_, why)| why.clone()),
            down: site.and_then(|s| Some(format!("{}: {}", s.name(), s.down()?))),
            generation: job.generation,
            data_addr: site.and_then(|s| s.data_addr),
            tenant: job.tenant.clone(),
        }
    }
    /// Why a job is not installed yet, for a registration whose wait ran
    /// out: no room, its aggregator down, or ranks missing.
    pub fn why_waiting(&self, job: &JobRecord) -> String {
        let down = |s: &Site| Some((s.name(), s.down()?));
        match self.site_of(job) {
            None => {
                let mut why = "no aggregator has a free slot (delete a job, or add a --fallback \
                               emulator)"
                    .to_string();
                for (site, e) in self.candidates(&job.decl).iter().filter_map(down) {
                    why = format!("{why}; {site} is down: {e}");
                }
                why
            }
            Some(s) => match down(s) {
                Some((site, e)) => {
                    format!("{site}, where it is placed, is down ({e}); it is installed when that is back")
                }
                None => format!(
                    "{} of {} workers registered",
                    job.registered(),
                    job.decl.workers
                ),
            },
        }
    }
    /// Admits a job: checks it, gives it an id, places its pool.
    pub fn create(&mut self, decl: JobDecl) -> Result<JobStatus, CoreError> {
        check_decl(&decl)?;
        if let Some(message) = self.too_wide(&decl) {
            return Err(CoreError::BadJob {
                name: decl.name,
                message,
            });
        }
        if self.jobs.contains_key(&decl.name) {
            return Err(CoreError::Exists(decl.name));
        }
        let used: std::collections::BTreeSet<u16> = self.jobs.values().map(|j| j.id).collect();
        let id = (1..=u16::MAX)
            .find(|i| !used.contains(i))
            .ok_or(CoreError::NoIds)?;
        let n = usize::from(decl.workers);
        let given = decl.endpoints.clone();
        let mut job = JobRecord {
            id,
            placement: Placement::Waiting,
            endpoints: given
                .as_ref()
                .map_or(vec![None; n], |e| e.iter().copied().map(Some).collect()),
            session: vec![given.is_some(); n],
            generation: self.fresh_generation()?,
            order: self.next_order,
            group: self.free_group()?,
            decl,
            tenant: None,
        };
        self.next_order += 1;
        job.placement = self.place(&job.decl);
        tracing::info!("job {:?} (id {}): {}", job.decl.name, id, job.placement);
        self.dirty.jobs.insert(job.decl.name.clone());
        let status = self.status(&job);
        self.jobs.insert(job.decl.name.clone(), job);
        Ok(status)
    }
    /// The aggregators a job may run on: the switch, and the fallbacks if
    /// it accepts one.
    fn candidates(&self, decl: &JobDecl) -> &[Site] {
        if decl.fallback {
            &self.sites
        } else {
            &self.sites[..1]
        }
    }
    /// Why no aggregator the job may run on takes its K, when every one of
    /// them is known to refuse it (a site not reached yet might take it).
    pub fn too_wide(&self, decl: &JobDecl) -> Option<String> {
        let sites = self.candidates(decl);
        if sites.iter().any(|s| s.may_take(decl)) {
            return None;
        }
        let limits: Vec<String> = sites
            .iter()
            .filter_map(|s| Some(format!("{}: {}", s.name(), s.elements_taken()?)))
            .collect();
        Some(format!(
            "K = {} elements per packet is not one any aggregator it may run on takes ({})",
            decl.elements,
            limits.join(", ")
        ))
    }
    /// Where a new pool goes: the switch (whole or partial grant), else a
    /// fallback with room (if the job accepts one), else nowhere yet. Only
    /// an aggregator that takes the job's K is given it. When
    /// no free range of the switch holds the request, the switch's memory
    /// is first compacted as far as jobs between all-reduces allow.
    fn place(&mut self, decl: &JobDecl) -> Placement {
        let largest = |c: &Book| {
            c.sites[0]
                .alloc
                .as_ref()
                .map(|a| a.largest_free().map_or(0, |g| g.size))
        };
        let on_switch = self.sites[0].may_take(decl);
        if on_switch && largest(self).is_some_and(|l| l < decl.slots) {
            self.defragment(&decl.name);
        }
        let want = self.memory_cap(0, decl);
        if let Some(grant) = self.sites[0]
            .alloc
            .as_mut()
            .filter(|_| on_switch && want > 0)
            .and_then(|a| a.allocate(want))
        {
            return Placement::Switch { grant };
        }
        if decl.fallback {
            for i in 1..self.sites.len() {
                // A fallback that is down would hold the job up until it is back.
                let want = self.memory_cap(i, decl);
                let site = &mut self.sites[i];
                if !site.up || !site.may_take(decl) || want == 0 {
                    continue;
                }
                if let Some(grant) = site.alloc.as_mut().and_then(|a| a.allocate(want)) {
                    return Placement::Fallback {
                        host: site.control,
                        grant,
                    };
                }
            }
        }
        Placement::Waiting
    }
    /// What `inagg ctl sites` shows of every site, with the value memory
    /// the pools placed on each take.
    pub fn site_status(&self) -> Vec<SiteStatus> {
        (0..self.sites.len())
            .map(|i| {
                let site = &self.sites[i];
                SiteStatus {
                    memory: (site.memory != u64::MAX && site.up)
                        .then(|| (site.memory, self.memory_used(i))),
                    ..site.status()
                }
            })
            .collect()
    }
    /// Bytes of values the pools placed on site `i` take.
    fn memory_used(&self, i: usize) -> u64 {
        self.jobs
            .values()
            .filter(|j| self.site_index(&j.placement) == Some(i))
            .filter_map(|j| {
                let g = j.placement.grant()?;
                Some(u64::from(g.size) * inagg_switch_api::slot_bytes(j.decl.elements))
            })
            .sum()
    }
    /// The most slots (up to the job's request) that site `i`'s value
    /// memory leaves room for at the job's K: an emulator's budget less
    /// what the pools placed there take. A request larger than that is
    /// granted less, as one larger than the free slots is.
    fn memory_cap(&self, i: usize, decl: &JobDecl) -> u32 {
        let used = self.memory_used(i);
        let room =
            self.sites[i].memory.saturating_sub(used) / inagg_switch_api::slot_bytes(decl.elements);
        room.min(u64::from(decl.slots)) as u32
    }
    /// Defragments the switch's memory between all-reduces: the pools of
    /// jobs that are not installed (their current session has not every
    /// rank yet, so none of their all-reduces can be running, and their
    /// workers address slots relative to the pool, so a new base is
    /// invisible to them) are packed again around the installed ones.
    /// Kept only when it makes the largest free range larger; `for_job`
    /// names the job it is for, in the log.
    fn defragment(&mut self, for_job: &str) {
        let Some(old) = self.sites[0].alloc.as_ref() else {
            return;
        };
        let mut fixed = Vec::new();
        let mut movable = Vec::new();
        for j in self.jobs.values() {
            let Placement::Switch { grant } = j.placement else {
                continue;
            };
            if j.spec().is_some() {
                fixed.push(grant);
            } else {
                movable.push((j.decl.name.clone(), grant));
            }
        }
        let Some((next, moves)) = alloc::repack(old, &fixed, &movable) else {
            return;
        };
        for m in moves {
            let job = self.jobs.get_mut(&m.key).expect("listed above");
            job.placement = Placement::Switch { grant: m.to };
            self.dirty.jobs.insert(m.key.clone());
            tracing::info!(
                "moved job {:?} from slots [{}, {}) to [{}, {}) \
                 (between its all-reduces) to make room for {for_job:?}",
                m.key,
                m.from.base,
                m.from.end(),
                m.to.base,
                m.to.end()
            );
        }
        self.sites[0].alloc = Some(next);
    }

    /// Admits a job for `tenant` (None: the operator), within its quota.
    pub fn create_as(
        &mut self,
        decl: JobDecl,
        tenant: Option<&str>,
    ) -> Result<JobStatus, CoreError> {
        let Some(tenant) = tenant else {
            return self.create(decl);
        };
        let record = self
            .tenants
            .get(tenant)
            .ok_or_else(|| CoreError::UnknownTenant(tenant.into()))?;
        tenants::check_quota(record, &self.jobs, &decl).map_err(|message| CoreError::Quota {
            name: decl.name.clone(),
            message,
        })?;
        let name = decl.name.clone();
        self.create(decl)?;
        if let Some(job) = self.jobs.get_mut(&name) {
            job.tenant = Some(tenant.to_string());
        }
        let job = &self.jobs[&name];
        Ok(self.status(job))
    }

    /// The job `name` if `tenant` may see it (the operator sees every job);
    /// another tenant's job is unknown to it, as if it did not exist.
    pub fn job_of(&self, name: &str, tenant: Option<&str>) -> Result<&JobRecord, CoreError> {
        self.jobs
            .get(name)
            .filter(|j| tenant.is_none() || j.tenant.as_deref() == tenant)
            .ok_or_else(|| CoreError::Unknown(name.into()))
    }

    /// Adds a tenant; returns its credential (not kept).
    pub fn create_tenant(&mut self, decl: TenantDecl) -> Result<String, CoreError> {
        check_name(&decl.name).map_err(|message| CoreError::BadTenant {
            name: decl.name.clone(),
            message,
        })?;
        if self.tenants.contains_key(&decl.name) {
            return Err(CoreError::TenantExists(decl.name));
        }
        let name = decl.name.clone();
        let (record, credential) = TenantRecord::issue(decl);
        self.tenants.insert(name, record);
        self.dirty.tenants = true;
        Ok(credential)
    }

    /// Gives a tenant a new credential; returns it.
    pub fn rotate_tenant(&mut self, name: &str) -> Result<String, CoreError> {
        let record = self
            .tenants
            .get_mut(name)
            .ok_or_else(|| CoreError::UnknownTenant(name.into()))?;
        let credential = record.rotate();
        self.dirty.tenants = true;
        Ok(credential)
    }

    /// Removes a tenant that has no jobs.
    pub fn delete_tenant(&mut self, name: &str) -> Result<(), CoreError> {
        if !self.tenants.contains_key(name) {
            return Err(CoreError::UnknownTenant(name.into()));
        }
        let (jobs, _, _) = tenants::usage(&self.jobs, name);
        if !jobs.is_empty() {
            return Err(CoreError::TenantBusy {
                name: name.into(),
                jobs: jobs.join(", "),
            });
        }
        self.tenants.remove(name);
        self.dirty.tenants = true;
        Ok(())
    }

    /// Every tenant's status.
    pub fn tenant_status(&self) -> Vec<TenantStatus> {
        self.tenants
            .values()
            .map(|r| tenants::status(r, &self.jobs))
            .collect()
    }

    /// The tenant whose credential `token` is, if it is one.
    pub fn tenant_of(&self, token: &str) -> Option<&str> {
        let (name, secret) = tenants::split_credential(token)?;
        let record = self.tenants.get(name)?;
        record.verifies(secret).then_some(record.decl.name.as_str())
    }

    /// Removes a job, frees its pool, and places waiting jobs in the room.
    pub fn delete(&mut self, name: &str) -> Result<(), CoreError> {
        let job = self
            .jobs
            .remove(name)
            .ok_or_else(|| CoreError::Unknown(name.into()))?;
        self.dirty.jobs.insert(name.to_string());
        self.release_pool(job.placement);
        self.place_waiting()
    }
    /// Frees a placement's slots on its aggregator (if it has any there).
    fn release_pool(&mut self, placement: Placement) {
        if let (Some(g), Some(i)) = (placement.grant(), self.site_index(&placement)) {
            if let Some(a) = self.sites[i].alloc.as_mut() {
                a.release(g.base);
            }
        }
    }
    /// Takes a job off its aggregator, to be placed again.
    fn unplace(&mut self, name: &str) -> Result<(), CoreError> {
        let job = self.jobs.get_mut(name).expect("a known job");
        let was = std::mem::replace(&mut job.placement, Placement::Waiting);
        self.release_pool(was);
        self.dirty.jobs.insert(name.to_string());
        Ok(())
    }
    /// Places waiting jobs, first come first served, while room lasts.
    pub fn place_waiting(&mut self) -> Result<(), CoreError> {
        let mut waiting: Vec<(u64, String)> = self
            .jobs
            .values()
            .filter(|j| j.placement == Placement::Waiting)
            .map(|j| (j.order, j.decl.name.clone()))
            .collect();
        waiting.sort();
        for (_, name) in waiting {
            let decl = self.jobs[&name].decl.clone();
            let placement = self.place(&decl);
            if placement == Placement::Waiting {
                continue;
            }
            let job = self.jobs.get_mut(&name).expect("listed above");
            tracing::info!("waiting job {name:?} placed: {placement}");
            job.placement = placement;
            self.dirty.jobs.insert(job.decl.name.clone());
        }
        Ok(())
    }
    /// Records a worker's endpoint. A rank registering again after the
    /// job was installed starts a new session: a fresh generation, and the
    /// job is installed again once every rank has registered again.
    pub fn register(
        &mut self,
        name: &str,
        rank: u16,
        endpoint: SocketAddr,
    ) -> Result<(), CoreError> {
        let generation = match self.jobs.get(name) {
            Some(j) if j.complete() => Some(self.fresh_generation()?),
            _ => None,
        };
        let job = self
            .jobs
            .get_mut(name)
            .ok_or_else(|| CoreError::Unknown(name.into()))?;
        let workers = job.decl.workers;
        if rank >= workers {
            return Err(CoreError::BadRank {
                name: name.into(),
                rank,
                workers,
            });
        }
        let taken = job
            .endpoints
            .iter()
            .enumerate()
            .position(|(r, e)| r != usize::from(rank) && *e == Some(endpoint));
        // A rank that already registered in this session keeps its
        // endpoint; one from an earlier session gives it up.
        if let Some(other) = taken {
            if job.session[other] && generation.is_none() {
                return Err(CoreError::EndpointTaken {
                    name: name.into(),
                    endpoint,
                    other,
                });
            }
            job.endpoints[other] = None;
        }
        if let Some(g) = generation {
            job.generation = g;
            job.session.iter_mut().for_each(|r| *r = false);
        }
        job.endpoints[usize::from(rank)] = Some(endpoint);
        job.session[usize::from(rank)] = true;
        self.dirty.jobs.insert(job.decl.name.clone());
        Ok(())
    }
    /// Takes back rank `rank`'s registration from `endpoint` in session
    /// `generation`, which ended without admission (its wait ran out, its
    /// job cannot run, or its worker went away). A rank that is not there
    /// must not complete a session: the others would be admitted to a job
    /// one of its ranks never sends to. Nothing changes if the rank has
    /// registered again since, or a new session began. Returns whether it
    /// was taken back.
    pub fn withdraw(
        &mut self,
        name: &str,
        rank: u16,
        endpoint: SocketAddr,
        generation: u16,
    ) -> Result<bool, CoreError> {
        let Some(job) = self.jobs.get_mut(name) else {
            return Ok(false);
        };
        let r = usize::from(rank);
        let ours = job.generation == generation
            && job.endpoints.get(r) == Some(&Some(endpoint))
            && job.session[r];
        if !ours {
            return Ok(false);
        }
        job.session[r] = false;
        job.endpoints[r] = None;
        self.dirty.jobs.insert(job.decl.name.clone());
        Ok(true)
    }
    /// Sets a class -> queue entry (installed by the next reconcile).
    pub fn set_priority(&mut self, class: u8, queue: u8) -> Result<(), CoreError> {
        // Checked as every aggregator will check it, before it is stored.
        inagg_switch_api::queues::check_queue(queue)?;
        self.priority.insert(class, queue);
        self.dirty.priority = true;
        Ok(())
    }
    /// Holds the aggregator at `site` (the switch when `None`) to `config`
    /// from the next reconcile on.
    pub fn set_faults(
        &mut self,
        site: Option<SocketAddr>,
        config: FaultConfig,
        set_by: inagg_controller_api::FaultsSetBy,
    ) -> Result<(), CoreError> {
        config.validate().map_err(CoreError::BadFaults)?;
        let control = match site {
            None => self.sites[0].control,
            Some(a) if self.sites.iter().any(|s| s.control == a) => a,
            Some(a) => {
                let known: Vec<String> = self.sites.iter().map(Site::name).collect();
                return Err(CoreError::BadFaults(format!(
                    "no aggregator at {a}: this controller has {}",
                    known.join(", ")
                )));
            }
        };
        let set_by = Some(set_by);
        self.faults.insert(control, FaultRecord { config, set_by });
        self.dirty.faults = true;
        Ok(())
    }

    /// The faults each aggregator is held to, who set them, and what it
    /// had at the last reconcile, the switch first.
    pub fn site_faults(&self) -> Vec<inagg_controller_api::SiteFaults> {
        self.sites
            .iter()
            .map(|s| {
                let record = self.faults.get(&s.control);
                inagg_controller_api::SiteFaults {
                    role: s.role.to_string(),
                    control: s.control,
                    intended: record.map(|r| r.config).unwrap_or_default(),
                    set_by: record.and_then(|r| r.set_by.clone()),
                    found: s.faults_found,
                }
            })
            .collect()
    }

    /// Takes the faults aggregator `i` was found with as those it is held
    /// to, if it has none recorded (the first contact ever: its start
    /// options are the operator's).
    pub fn adopt_faults(&mut self, i: usize) {
        let (control, found) = (self.sites[i].control, self.sites[i].faults_found);
        if let (Some(config), false) = (found, self.faults.contains_key(&control)) {
            let record = FaultRecord {
                config,
                set_by: None,
            };
            self.faults.insert(control, record);
            self.dirty.faults = true;
        }
    }

    /// Sends the jobs on a fallback that is down, and between sessions
    /// (not every rank has registered, so none of their all-reduces can be
    /// running), to be placed again: on another aggregator with room, or
    /// on the same one once it is back. A job whose session is complete
    /// stays, since its workers may be running on a data plane that only
    /// the control connection lost.
    pub fn leave_down_fallbacks(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        for i in 1..self.sites.len() {
            if self.sites[i].up {
                continue;
            }
            let names: Vec<String> = self
                .jobs
                .values()
                .filter(|j| self.on_site(j, i) && j.spec().is_none())
                .map(|j| j.decl.name.clone())
                .collect();
            for name in names {
                problems.push(format!(
                    "job {name:?}: {} is down; placed again",
                    self.sites[i].name()
                ));
                if let Err(e) = self.unplace(&name) {
                    problems.push(e.to_string());
                }
            }
        }
        problems
    }
    fn on_site(&self, job: &JobRecord, i: usize) -> bool {
        self.site_index(&job.placement) == Some(i)
    }
    /// Rebuilds a site's allocator from the stored placements; a pool that
    /// no longer fits (a smaller memory after a restart) sends its job back
    /// to waiting.
    pub fn reserve_site(&mut self, i: usize) -> Vec<String> {
        let mut problems = Vec::new();
        let slots = match self.sites[i].alloc.as_ref() {
            Some(a) => a.slots(),
            None => return problems,
        };
        let mut alloc = SlotAllocator::new(slots);
        let names: Vec<String> = self
            .jobs
            .values()
            .filter(|j| self.on_site(j, i))
            .map(|j| j.decl.name.clone())
            .collect();
        for name in names {
            let site = &self.sites[i];
            let job = self.jobs.get_mut(&name).expect("listed above");
            let grant: Grant = job.placement.grant().expect("placed");
            let why = if site.may_take(&job.decl) {
                alloc.reserve(grant).err().map(|e| e.to_string())
            } else {
                let taken = site.elements_taken().unwrap_or_default();
                let k = job.decl.elements;
                Some(format!("K = {k}, and the {} now takes {taken}", site.role))
            };
            if let Some(why) = why {
                problems.push(format!("job {name:?}: {why}; placed again"));
                job.placement = Placement::Waiting;
                self.dirty.jobs.insert(name.clone());
            }
        }
        self.sites[i].alloc = Some(alloc);
        problems
    }
    /// Every group, the jobs' and the hand-made ones, with the counters
    /// of the aggregators that answered (`seen`, by id).
    pub fn group_status(&self, seen: &BTreeMap<u16, GroupInfo>) -> Vec<GroupStatus> {
        let status = |name: &str, id: u16, owner: &str, members: Vec<SocketAddr>| {
            let on = seen.get(&id);
            GroupStatus {
                name: name.into(),
                id,
                owner: owner.into(),
                installed: on.is_some_and(|g| g.members == members),
                packets: on.map_or(0, |g| g.packets),
                copies: on.map_or(0, |g| g.copies),
                members,
            }
        };
        let jobs = self.jobs.values().filter(|j| j.group != 0).map(|j| {
            let members = j.endpoints.iter().flatten().copied().collect();
            status(&j.decl.name, j.group, "job", members)
        });
        let hand = self
            .groups
            .values()
            .map(|g| status(&g.decl.name, g.id, "hand", g.decl.members.clone()));
        let mut all: Vec<GroupStatus> = jobs.chain(hand).collect();
        all.sort_by_key(|g| g.id);
        all
    }
    /// What site `i` should hold: its jobs whose every rank is known, the
    /// hand-made groups (on the switch), and every job placed there.
    pub fn desired(&self, i: usize) -> Desired {
        let here: Vec<&JobRecord> = self.jobs.values().filter(|j| self.on_site(j, i)).collect();
        Desired {
            jobs: here
                .iter()
                .filter_map(|j| j.spec())
                .map(|s| (s.id, s))
                .collect(),
            // Groups made by hand live on the switch.
            groups: match i {
                0 => self.groups.values().map(|g| (g.id, g.spec())).collect(),
                _ => BTreeMap::new(),
            },
            placed: here.iter().map(|j| j.id).collect(),
            faults: self.faults.get(&self.sites[i].control).map(|f| f.config),
        }
    }

    /// Job names by id, for naming the counters an aggregator reports.
    pub fn names(&self) -> BTreeMap<u16, String> {
        self.jobs
            .values()
            .map(|j| (j.id, j.decl.name.clone()))
            .collect()
    }
}

/// Checks a job declaration as the controller does on admission (also
/// used by `ctl apply` to check a whole file before changing anything).
pub(crate) fn check_decl(d: &JobDecl) -> Result<(), CoreError> {
    let bad = |message: String| {
        Err(CoreError::BadJob {
            name: d.name.clone(),
            message,
        })
    };
    if let Err(message) = check_name(&d.name) {
        return bad(message);
    }
    if d.workers == 0 || usize::from(d.workers) > inagg_wire::MAX_WORKERS {
        return bad(format!(
            "{} workers; a job has 1 to {}",
            d.workers,
            inagg_wire::MAX_WORKERS
        ));
    }
    if d.slots == 0 || d.slots > 65536 {
        return bad(format!("{} slots; ask for 1 to 65536", d.slots));
    }
    if d.elements == 0 || usize::from(d.elements) > inagg_wire::MAX_ELEMENTS {
        return bad(format!(
            "K = {} elements per packet; a packet holds 1 to {}",
            d.elements,
            inagg_wire::MAX_ELEMENTS
        ));
    }
    if let Err(e) = inagg_switch_api::check_queue_map(&d.queues) {
        return bad(e.to_string());
    }
    if let Some(e) = &d.endpoints {
        if e.len() != usize::from(d.workers) {
            return bad(format!(
                "{} endpoints for {} workers; give one per worker or none",
                e.len(),
                d.workers
            ));
        }
        let unique: std::collections::BTreeSet<_> = e.iter().collect();
        if unique.len() != e.len() {
            return bad("an endpoint is listed twice".into());
        }
    }
    Ok(())
}

/// Checks a hand-made group's declaration on its own (ids in use are
/// checked against the state).
pub(crate) fn check_group_decl(d: &GroupDecl) -> Result<(), CoreError> {
    let bad = |message: String| CoreError::BadGroup {
        name: d.name.clone(),
        message,
    };
    check_name(&d.name).map_err(bad)?;
    let spec = GroupSpec {
        // Any valid id: the members are what is checked here.
        id: d.id.unwrap_or(1),
        members: d.members.clone(),
    };
    check_group(&spec).map_err(|e| bad(e.to_string()))
}

/// Job and group names: what agents and operators type, and what every
/// table and log line shows. ASCII letters, digits, '.', '-' and '_'
/// only: no control character can reach a terminal through a name, and no
/// look-alike or invisible character can make two names read the same.
fn check_name(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if name.is_empty() || name.len() > 64 || !name.chars().all(allowed) {
        return Err("a name is 1 to 64 of the characters A-Z, a-z, 0-9, '.', '-' and '_'".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names are printable ASCII of a stated set: nothing a tenant names
    /// can drive a terminal or pass for another name.
    #[test]
    fn names_are_letters_digits_dots_dashes_and_underscores() {
        for good in ["resnet", "coll.ranks-0-1", "bert_large-2", &"a".repeat(64)] {
            assert_eq!(check_name(good), Ok(()), "{good:?}");
        }
        let long = "a".repeat(65);
        for bad in [
            "",
            "a b",
            "a\u{1b}[2J",
            "bell\u{7}",
            "del\u{7f}",
            "nul\u{0}",
            "rtl\u{202e}x",
            "zero\u{200b}width",
            "caf\u{e9}",
            "a/b",
            &long,
        ] {
            let e = check_name(bad).unwrap_err();
            assert!(
                e.contains("A-Z, a-z, 0-9, '.', '-' and '_'"),
                "{bad:?}: {e}"
            );
        }
    }

    const SWITCH: &str = "10.0.0.1:47001";
    const FALLBACK: &str = "10.0.0.2:47001";

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    /// A site reached: `slots` slots, K up to 64, no memory budget.
    fn reached(role: &'static str, control: &str, slots: u32) -> Site {
        let mut s = Site::new(role, addr(control));
        s.up = true;
        s.alloc = Some(SlotAllocator::new(slots));
        s.elements = Some((64, false));
        s
    }

    /// A book over a switch of `slots` slots and, when given, a fallback.
    fn book(slots: u32, fallback: Option<u32>) -> Book {
        let mut sites = vec![reached("switch", SWITCH, slots)];
        if let Some(f) = fallback {
            sites.push(reached("fallback", FALLBACK, f));
        }
        Book::new(BTreeMap::new(), BTreeMap::new(), BTreeMap::new(), 1, sites).unwrap()
    }

    fn decl(name: &str, workers: u16, slots: u32) -> JobDecl {
        JobDecl::new(name, workers, slots)
    }

    fn worker(i: u8) -> SocketAddr {
        SocketAddr::from(([10, 0, 1, i], 5000))
    }

    fn grant(base: u32, size: u32) -> Placement {
        Placement::Switch {
            grant: Grant { base, size },
        }
    }

    /// Registers every rank of `name`.
    fn register_all(b: &mut Book, name: &str) {
        for rank in 0..b.jobs[name].decl.workers {
            b.register(name, rank, worker(rank as u8)).unwrap();
        }
    }

    #[test]
    fn a_job_gets_an_id_a_group_a_generation_and_a_whole_grant() {
        let mut b = book(64, None);
        let status = b.create(decl("a", 2, 16)).unwrap();
        assert_eq!(
            (status.id, status.placement, status.generation),
            (1, grant(0, 16), 1)
        );
        assert_eq!(b.jobs["a"].group, 1);
        assert!(!status.installed, "no rank has registered");
        let dirty = b.take_dirty();
        assert!(dirty.jobs.contains("a") && dirty.generation);
        assert!(b.take_dirty().jobs.is_empty(), "taken once");
        let err = b.create(decl("a", 2, 16)).unwrap_err();
        assert!(matches!(err, CoreError::Exists(_)), "{err}");
    }

    #[test]
    fn a_full_switch_grants_part_then_sends_jobs_to_the_fallback_or_to_wait() {
        let mut b = book(32, Some(64));
        assert_eq!(b.create(decl("a", 2, 24)).unwrap().placement, grant(0, 24));
        // 8 slots left: a partial grant.
        assert_eq!(b.create(decl("b", 2, 16)).unwrap().placement, grant(24, 8));
        // The switch is full: the fallback takes it whole.
        let on_fallback = b.create(decl("c", 2, 16)).unwrap().placement;
        assert_eq!(
            on_fallback,
            Placement::Fallback {
                host: addr(FALLBACK),
                grant: Grant { base: 0, size: 16 }
            }
        );
        // A job that will not run on a fallback waits, and is placed,
        // first come first served, when a pool is freed.
        let d = JobDecl {
            fallback: false,
            ..decl("d", 2, 8)
        };
        assert_eq!(b.create(d).unwrap().placement, Placement::Waiting);
        assert!(b
            .why_waiting(&b.jobs["d"])
            .contains("no aggregator has a free slot"));
        b.delete("b").unwrap();
        assert_eq!(b.jobs["d"].placement, grant(24, 8));
        assert!(
            b.take_dirty().jobs.contains("b"),
            "the deleted job is written too"
        );
    }

    #[test]
    fn a_k_no_aggregator_takes_is_refused_unless_one_is_not_reached_yet() {
        let mut b = book(64, None);
        b.sites[0].elements = Some((64, true));
        let wide = JobDecl {
            elements: 128,
            ..decl("w", 2, 8)
        };
        let err = b.create(wide.clone()).unwrap_err();
        assert!(err.to_string().contains("K = 64 only"), "{err}");
        b.sites[0].elements = None; // not reached: it might take it
        assert!(b.too_wide(&wide).is_none());
    }

    #[test]
    fn sessions_complete_and_a_rank_registering_again_starts_a_new_one() {
        let mut b = book(64, None);
        b.create(decl("a", 2, 8)).unwrap();
        b.register("a", 0, worker(0)).unwrap();
        assert!(b.jobs["a"].spec().is_none(), "rank 1 is missing");
        let err = b.register("a", 1, worker(0)).unwrap_err();
        assert!(
            matches!(err, CoreError::EndpointTaken { other: 0, .. }),
            "{err}"
        );
        let err = b.register("a", 2, worker(2)).unwrap_err();
        assert!(matches!(err, CoreError::BadRank { rank: 2, .. }), "{err}");
        b.register("a", 1, worker(1)).unwrap();
        let spec = b.jobs["a"].spec().expect("complete");
        assert_eq!(
            (spec.generation, spec.workers.clone()),
            (1, vec![worker(0), worker(1)])
        );
        // Rank 0 again, after the session completed: a new session with a
        // fresh generation, waiting for rank 1 again.
        b.register("a", 0, worker(9)).unwrap();
        let job = &b.jobs["a"];
        assert_eq!((job.generation, job.registered()), (2, 1));
        assert!(job.spec().is_none());
    }

    #[test]
    fn a_registration_is_withdrawn_only_in_its_own_session() {
        let mut b = book(64, None);
        b.create(decl("a", 2, 8)).unwrap();
        b.register("a", 0, worker(0)).unwrap();
        let g = b.jobs["a"].generation;
        assert!(
            !b.withdraw("a", 0, worker(0), g + 1).unwrap(),
            "another session"
        );
        assert!(
            !b.withdraw("a", 0, worker(7), g).unwrap(),
            "another endpoint"
        );
        assert!(b.withdraw("a", 0, worker(0), g).unwrap());
        assert_eq!(b.jobs["a"].registered(), 0);
        assert!(!b.withdraw("nobody", 0, worker(0), g).unwrap());
    }

    #[test]
    fn pools_between_all_reduces_move_to_make_room_and_installed_ones_stay() {
        let mut b = book(32, None);
        for name in ["a", "b", "c", "d"] {
            b.create(decl(name, 1, 8)).unwrap();
        }
        register_all(&mut b, "b"); // b is installed: its pool stays
        b.delete("a").unwrap();
        b.delete("c").unwrap();
        // Free: [0,8) and [16,24); a 16-slot job needs d moved next to b's.
        let placed = b.create(decl("e", 1, 16)).unwrap().placement;
        assert_eq!(b.jobs["b"].placement, grant(8, 8));
        assert_eq!(b.jobs["d"].placement, grant(0, 8));
        assert_eq!(placed, grant(16, 16));
        assert!(b.take_dirty().jobs.contains("d"), "the move is written");
    }

    #[test]
    fn group_ids_are_shared_by_jobs_and_groups_made_by_hand() {
        let mut b = book(64, None);
        b.create(decl("a", 2, 8)).unwrap(); // group 1
        let hand = |name: &str, id| GroupDecl {
            name: name.into(),
            id,
            members: vec![worker(1), worker(2)],
        };
        let err = b.create_group(hand("g", Some(1))).unwrap_err();
        assert!(err.to_string().contains("job a"), "{err}");
        assert_eq!(b.create_group(hand("g", None)).unwrap().id, 2);
        assert!(b.take_dirty().groups);
        let err = b.delete_group("a").unwrap_err();
        assert!(
            err.to_string()
                .contains("its group goes when the job is deleted"),
            "{err}"
        );
        b.delete_group("g").unwrap();
        assert!(matches!(
            b.delete_group("g"),
            Err(CoreError::UnknownGroup(_))
        ));
    }

    #[test]
    fn jobs_between_sessions_leave_a_fallback_that_is_down() {
        let mut b = book(0, Some(64));
        b.create(decl("idle", 1, 8)).unwrap();
        b.create(decl("busy", 1, 8)).unwrap();
        register_all(&mut b, "busy");
        b.sites[1].up = false;
        let problems = b.leave_down_fallbacks();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("\"idle\""), "{problems:?}");
        assert_eq!(b.jobs["idle"].placement, Placement::Waiting);
        // Its workers may be running on the data plane: it stays.
        assert!(matches!(
            b.jobs["busy"].placement,
            Placement::Fallback { .. }
        ));
    }

    #[test]
    fn a_stored_pool_beyond_a_smaller_memory_sends_its_job_back_to_wait() {
        let mut b = book(64, None);
        b.create(decl("low", 1, 16)).unwrap();
        b.create(decl("high", 1, 32)).unwrap(); // [16, 48)
                                                // The switch comes back with 32 slots.
        b.sites[0].alloc = Some(SlotAllocator::new(32));
        let problems = b.reserve_site(0);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(b.jobs["high"].placement, Placement::Waiting);
        assert_eq!(b.jobs["low"].placement, grant(0, 16));
        // Placed again in what is left: a partial grant.
        b.place_waiting().unwrap();
        assert_eq!(b.jobs["high"].placement, grant(16, 16));
    }

    #[test]
    fn jobs_stored_on_a_fallback_no_longer_given_are_placed_again() {
        let mut first = book(0, Some(64));
        first.create(decl("a", 1, 8)).unwrap();
        let jobs = first.jobs.clone();
        let b = Book::new(
            jobs,
            BTreeMap::new(),
            BTreeMap::new(),
            2,
            vec![reached("switch", SWITCH, 64)],
        )
        .unwrap();
        assert_eq!(b.jobs["a"].placement, Placement::Waiting);
    }
}
