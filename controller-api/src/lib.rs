//! The controller's API: one JSON request per line over TCP, one JSON
//! reply per line, and its [`Client`]. `inagg ctl --controller`, the agents
//! that register (`inagg agent --controller`, the C library, PyTorch) and
//! the Prometheus exporter are its clients; the daemon (`inagg-controller`)
//! serves it.
//!
//! Every request carries the protocol's [`API_VERSION`]; a controller
//! answers a request of another version with an error that names both, so
//! an old client is told to upgrade rather than misread.

pub mod client;

pub use client::{Client, ClientError};

use std::net::SocketAddr;

use inagg_switch_api::queues::ClassQueue;
use inagg_switch_api::FaultConfig;
use serde::{Deserialize, Serialize};

/// The version of this protocol. A change that an older client or
/// controller would misread takes the next number.
pub const API_VERSION: u32 = 2;

/// The version a request without one speaks: the protocol before it was
/// versioned.
pub const UNVERSIONED: u32 = 1;

/// A granted range of slots.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    /// First slot.
    pub base: u32,
    /// Slots granted (at most the request).
    pub size: u32,
}

impl Grant {
    /// One past the last slot.
    pub fn end(&self) -> u64 {
        u64::from(self.base) + u64::from(self.size)
    }
}

/// Default address of the controller's API (loopback: remote use needs an
/// explicit address and a token).
pub const DEFAULT_ADDR: &str = "127.0.0.1:47100";

/// What a job asks for. Workers register by rank unless `endpoints` names
/// them all up front.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobDecl {
    /// The job's name (what agents give with `--job`).
    pub name: String,
    /// Workers in the job.
    pub workers: u16,
    /// Aggregator slots asked for (the job's window); fewer may be granted.
    pub slots: u32,
    /// Elements per packet, K.
    #[serde(default = "default_elements")]
    pub elements: u16,
    /// When the switch has no free slot: run on a host emulator (true) or
    /// wait for slots to free (false).
    #[serde(default = "yes")]
    pub fallback: bool,
    /// Every worker's endpoint, by rank, for workers that do not register.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<Vec<SocketAddr>>,
    /// The job's priority class -> egress queue map, installed with its
    /// pool (classes not listed follow the switch-wide map).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queues: Vec<ClassQueue>,
}

/// A multicast group made by hand through the controller: unaggregated
/// group datagrams between its members (peer-to-peer parameter multicast).
/// Installed on the switch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupDecl {
    /// The group's name.
    pub name: String,
    /// The group id in packets; `None`: the controller allocates one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u16>,
    /// Member endpoints; member id = position.
    pub members: Vec<SocketAddr>,
}

/// A multicast group as the controller reports it: a job's result group or
/// one made by hand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupStatus {
    /// The group's name, or its job's.
    pub name: String,
    /// The id in packets.
    pub id: u16,
    /// Whose: "job" (allocated and freed with the job) or "hand".
    pub owner: String,
    /// Members known (a job's: the workers registered so far).
    pub members: Vec<SocketAddr>,
    /// On its aggregator, as the last read of it shows.
    pub installed: bool,
    /// Group datagrams relayed (hand-made groups; 0 when unread).
    pub packets: u64,
    /// Copies made of them.
    pub copies: u64,
}

impl JobDecl {
    /// A job of `workers` workers asking for `slots` slots, with the
    /// defaults a declaration without them gets: K = 64, a fallback
    /// allowed, workers that register, the switch-wide priority map.
    pub fn new(name: &str, workers: u16, slots: u32) -> JobDecl {
        JobDecl {
            name: name.into(),
            workers,
            slots,
            elements: default_elements(),
            fallback: yes(),
            endpoints: None,
            queues: Vec::new(),
        }
    }
}

fn default_elements() -> u16 {
    64
}

fn yes() -> bool {
    true
}

/// Where a job's pool is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "on", rename_all = "snake_case")]
pub enum Placement {
    /// Nowhere yet: no slot free on the switch and no fallback (or the job
    /// does not want one). It is placed when slots free, in order of arrival.
    Waiting,
    /// On the switch.
    Switch {
        /// The slots.
        grant: Grant,
    },
    /// On a host emulator (ATP's software fallback, with the same protocol).
    Fallback {
        /// The emulator's control address.
        host: SocketAddr,
        /// The slots.
        grant: Grant,
    },
}

/// Where a job runs, in words: `switch slots [0, 64)`.
impl std::fmt::Display for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Placement::Waiting => write!(f, "waiting for free slots"),
            Placement::Switch { grant } => {
                write!(f, "switch slots [{}, {})", grant.base, grant.end())
            }
            Placement::Fallback { host, grant } => {
                write!(f, "fallback {host} slots [{}, {})", grant.base, grant.end())
            }
        }
    }
}

impl Placement {
    /// The slots, if placed.
    pub fn grant(&self) -> Option<Grant> {
        match *self {
            Placement::Waiting => None,
            Placement::Switch { grant } | Placement::Fallback { grant, .. } => Some(grant),
        }
    }
}

/// A job as the controller reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobStatus {
    /// What was asked.
    pub decl: JobDecl,
    /// The id in packets.
    pub id: u16,
    /// Where its pool is.
    pub placement: Placement,
    /// Ranks registered in the current session.
    pub registered: u16,
    /// Installed on its aggregator: every worker known, and the aggregator
    /// did not refuse it.
    pub installed: bool,
    /// Why its aggregator refused to install it (a K or a queue map that
    /// aggregator does not have); the job waits, placed, until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// The aggregator it is placed on is down, and why (its jobs are
    /// installed when it is back): which one and what the last attempt
    /// said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub down: Option<String>,
    /// Membership generation of the current session.
    pub generation: u16,
    /// The aggregator's data-plane address, once placed and reachable.
    pub data_addr: Option<SocketAddr>,
    /// The tenant that owns it; `None`: the operator's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// A tenant, as the operator declares it: a name and its quota.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TenantDecl {
    /// Its name (the characters of job names).
    pub name: String,
    /// Aggregator slots its jobs may hold together (the sum of their
    /// `slots`).
    pub slots: u32,
    /// Priority-map entries (`queues`) its jobs may carry together.
    pub queues: u32,
}

/// A tenant and what it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantStatus {
    /// What the operator declared.
    pub decl: TenantDecl,
    /// Its jobs, by name.
    pub jobs: Vec<String>,
    /// Slots its jobs hold (asked for), against `decl.slots`.
    pub slots_used: u32,
    /// Priority-map entries its jobs carry, against `decl.queues`.
    pub queues_used: u32,
}

/// Who a request's token says its sender is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Caller {
    /// The operator (the controller's `--token`, or anyone where the
    /// controller has none): every job, the aggregators, the priority map,
    /// the tenants.
    Operator,
    /// A tenant (its credential): its own jobs, within its quota.
    Tenant {
        /// Its name.
        name: String,
    },
}

impl std::fmt::Display for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Caller::Operator => write!(f, "the operator"),
            Caller::Tenant { name } => write!(f, "tenant {name:?}"),
        }
    }
}

/// What a worker is told when it is admitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Admission {
    /// The job's name.
    pub job: String,
    /// The id in packets.
    pub id: u16,
    /// This worker's id (its rank).
    pub worker: u16,
    /// Workers in the job.
    pub workers: u16,
    /// Slots granted: the window.
    pub pool_size: u32,
    /// K.
    pub elements: u16,
    /// The session's membership generation.
    pub generation: u16,
    /// Where to send contributions: the switch or a host emulator.
    pub data_addr: SocketAddr,
    /// On the fallback rather than the switch?
    pub fallback: bool,
}

/// One aggregator the controller drives.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SiteStatus {
    /// "switch" or "fallback".
    pub role: String,
    /// Target kind.
    pub kind: String,
    /// Control address.
    pub control: SocketAddr,
    /// Reachable at the last attempt?
    pub up: bool,
    /// The last error, when down.
    pub error: Option<String>,
    /// Slots (once reached).
    pub slots: Option<u32>,
    /// The K it takes, in words: "K up to 16370", "K = 64 only" (once
    /// reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elements: Option<String>,
    /// Free slots.
    pub free: Option<u32>,
    /// Free ranges.
    pub free_ranges: Vec<Grant>,
    /// Bytes of aggregator values its pools may take (an emulator's
    /// budget), and the bytes the pools placed there take; none for a P4
    /// switch, whose slots are a fixed size.
    #[serde(default)]
    pub memory: Option<(u64, u64)>,
}

/// Who set an aggregator's faults through the controller, from where and
/// when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FaultsSetBy {
    /// Who.
    pub caller: Caller,
    /// From where.
    pub peer: SocketAddr,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
}

/// The faults the controller keeps on one aggregator (an emulator; a P4
/// switch has none), and what the aggregator had at the last reconcile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteFaults {
    /// "switch" or "fallback".
    pub role: String,
    /// Control address.
    pub control: SocketAddr,
    /// What the controller holds it to.
    pub intended: FaultConfig,
    /// Who set them through the controller; `None`: they are what the
    /// aggregator had when the controller first reached it (its start
    /// options), or none.
    pub set_by: Option<FaultsSetBy>,
    /// What the aggregator had at the last reconcile, before any were put
    /// back; `None` when it was not reached or has no faults to read.
    pub found: Option<FaultConfig>,
}

/// A request and the API token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// The protocol version the client speaks ([`API_VERSION`]).
    #[serde(default = "unversioned")]
    pub version: u32,
    /// The token the controller was started with, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The request.
    pub request: Request,
}

/// Requests.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Admit a job: place its pool.
    CreateJob {
        /// The job.
        decl: JobDecl,
    },
    /// Remove a job and free its pool.
    DeleteJob {
        /// Its name.
        name: String,
    },
    /// Every job (a tenant's own).
    Jobs,
    /// Add a tenant (operator only); the reply carries its credential,
    /// which the controller does not keep (only its hash).
    CreateTenant {
        /// The tenant.
        decl: TenantDecl,
    },
    /// Remove a tenant and its credential (operator only; refused while it
    /// has jobs).
    DeleteTenant {
        /// Its name.
        name: String,
    },
    /// Give a tenant a new credential; the old one stops working (operator
    /// only).
    RotateTenant {
        /// Its name.
        name: String,
    },
    /// Every tenant (operator only).
    Tenants,
    /// Who this connection's token says it is.
    Whoami,
    /// Hold an aggregator (the switch unless `site` says which) to these
    /// faults, from the next reconcile on (operator only).
    SetFaults {
        /// The aggregator's control address; the switch when absent.
        #[serde(default)]
        site: Option<SocketAddr>,
        /// The faults.
        faults: FaultConfig,
    },
    /// The faults the controller holds each aggregator to, who set them,
    /// and what each had.
    Faults,
    /// The audit: the last `last` changes asked of the controller (a
    /// tenant's own), oldest first.
    Events {
        /// How many, at most [`MAX_EVENTS`].
        last: u32,
    },
    /// Register a worker; answered once the job is installed (every rank
    /// registered, slots granted) or after `wait_ms`.
    Register {
        /// The job's name.
        job: String,
        /// The worker's rank (worker id).
        rank: u16,
        /// Its data endpoint; `None`: the UDP `port` at the address the
        /// request came from.
        endpoint: Option<SocketAddr>,
        /// With `endpoint: None`.
        port: Option<u16>,
        /// How long to wait for the rest of the job, ms.
        wait_ms: u64,
    },
    /// Make a multicast group by hand.
    CreateGroup {
        /// The group.
        decl: GroupDecl,
    },
    /// Remove a group made by hand.
    DeleteGroup {
        /// Its name.
        name: String,
    },
    /// Every multicast group: the jobs' and those made by hand.
    Groups,
    /// The aggregators and their memory.
    Sites,
    /// Counters of every aggregator and of every job on it.
    Stats,
    /// The switch-wide priority class -> queue map.
    Priority,
    /// Priority class -> egress queue, on every aggregator.
    SetPriority {
        /// The class.
        class: u8,
        /// The queue.
        queue: u8,
    },
}

impl Request {
    /// What the request is, for the log, and whether it changes the
    /// controller's state (logged at info level; reads at debug).
    pub fn summary(&self) -> (String, bool) {
        match self {
            Request::CreateJob { decl } => (
                format!(
                    "create job {:?} ({} workers, {} slots)",
                    decl.name, decl.workers, decl.slots
                ),
                true,
            ),
            Request::DeleteJob { name } => (format!("delete job {name:?}"), true),
            Request::CreateGroup { decl } => (
                format!(
                    "create group {:?} ({} members)",
                    decl.name,
                    decl.members.len()
                ),
                true,
            ),
            Request::DeleteGroup { name } => (format!("delete group {name:?}"), true),
            Request::Register { job, rank, .. } => {
                (format!("register rank {rank} of job {job:?}"), true)
            }
            Request::SetPriority { class, queue } => {
                (format!("priority class {class} -> queue {queue}"), true)
            }
            Request::CreateTenant { decl } => (
                format!(
                    "create tenant {:?} ({} slots, {} queue entries)",
                    decl.name, decl.slots, decl.queues
                ),
                true,
            ),
            Request::DeleteTenant { name } => (format!("delete tenant {name:?}"), true),
            Request::RotateTenant { name } => (format!("new credential for tenant {name:?}"), true),
            Request::Tenants => ("list tenants".into(), false),
            Request::Whoami => ("who am I".into(), false),
            Request::SetFaults { site, faults: f } => (
                format!(
                    "set faults on {}: drop_ingress {} drop_egress {} duplicate {} reorder {} \
                     seed {}",
                    site.map_or("the switch".to_string(), |s| s.to_string()),
                    f.drop_ingress,
                    f.drop_egress,
                    f.duplicate,
                    f.reorder,
                    f.seed
                ),
                true,
            ),
            Request::Faults => ("read the faults".into(), false),
            Request::Events { last } => (format!("read the last {last} audit entries"), false),
            Request::Jobs => ("list jobs".into(), false),
            Request::Groups => ("list groups".into(), false),
            Request::Priority => ("read the priority map".into(), false),
            Request::Sites => ("list sites".into(), false),
            Request::Stats => ("read counters".into(), false),
        }
    }
}

/// Replies.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// Done.
    Done,
    /// One job.
    Job {
        /// It.
        job: JobStatus,
    },
    /// Jobs.
    Jobs {
        /// Them.
        jobs: Vec<JobStatus>,
    },
    /// A worker's admission.
    Admitted {
        /// It.
        admission: Admission,
    },
    /// The switch-wide class -> queue map (classes not listed: queue 0).
    Priority {
        /// The entries.
        map: Vec<ClassQueue>,
    },
    /// Multicast groups.
    Groups {
        /// Them, by id.
        groups: Vec<GroupStatus>,
    },
    /// The aggregators.
    Sites {
        /// Them.
        sites: Vec<SiteStatus>,
    },
    /// Counters.
    Stats {
        /// Per aggregator that answered.
        sites: Vec<SiteStats>,
    },
    /// A tenant created or given a new credential.
    Tenant {
        /// It.
        tenant: TenantStatus,
        /// Its credential, `NAME.SECRET`: shown this once.
        credential: String,
    },
    /// Tenants.
    Tenants {
        /// Them, by name.
        tenants: Vec<TenantStatus>,
    },
    /// Who the caller is.
    Caller {
        /// It.
        caller: Caller,
    },
    /// Each aggregator's faults.
    Faults {
        /// By aggregator, the switch first.
        sites: Vec<SiteFaults>,
    },
    /// Entries of the audit, oldest first.
    Events {
        /// Them.
        events: Vec<Event>,
    },
}

/// The most audit entries one request returns, and the most the
/// controller keeps.
pub const MAX_EVENTS: u32 = 10_000;

/// One entry of the controller's audit: a change someone asked for, who
/// (by credential), from where, when, and what came of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Its number: entries are numbered in order, from 1, across restarts.
    pub seq: u64,
    /// When, in milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// Who asked.
    pub caller: Caller,
    /// From where.
    pub peer: SocketAddr,
    /// What was asked ([`Request::summary`]).
    pub what: String,
    /// Why it was refused; `None` when it was done.
    pub refused: Option<String>,
}

/// One aggregator's counters, read from it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SiteStats {
    /// "switch" or "fallback".
    pub role: String,
    /// Its control address.
    pub control: SocketAddr,
    /// Switch-wide counters (drops by reason), or why they could not be read.
    pub counters: Result<inagg_switch_api::counters::Counters, String>,
    /// Each installed job's counters, with the controller's name for it.
    pub jobs: Vec<NamedJobCounters>,
}

/// A job's counters on one aggregator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NamedJobCounters {
    /// The controller's name (None: a job the controller does not know).
    pub name: Option<String>,
    /// Id in packets.
    pub id: u16,
    /// The counters.
    pub counters: inagg_switch_api::counters::JobCounters,
    /// The tenant whose job it is (None: the operator's, or unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenant: Option<String>,
}

/// A reply line: `{"ok": ...}` or `{"error": "..."}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
// One per request line, moved once: boxing the reply would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum Response {
    /// Success.
    Ok(Reply),
    /// Failure: what is wrong and what to do.
    Error(String),
}

fn unversioned() -> u32 {
    UNVERSIONED
}
