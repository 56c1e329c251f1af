//! The emulator's control endpoint: requests and replies, one JSON object
//! per line over TCP. The control plane's emulator target is its client.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};

use crate::counters::Counters;
use crate::detour::{RelayInfo, RelayKey, RelaySpec};
use crate::faults::FaultConfig;
use crate::job::{GroupInfo, GroupSpec, JobError, JobInfo, JobSpec, PoolMap, SwitchInfo};
use crate::queues::{ClassQueue, LinkConfig, PortStats};

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
    /// Present the endpoint's token (`inagg emu --token`). An emulator
    /// started with one answers nothing else until a connection has
    /// presented it.
    Authenticate {
        /// The token.
        token: String,
    },
}

impl Request {
    /// Whether the request changes what a controller keeps in step (jobs,
    /// groups, relays, the priority map) or what its jobs' packets meet
    /// (the injected faults): while a controller holds the switch, only it
    /// may send these (a connection that never claimed it could otherwise
    /// leave 100% loss behind the controller's back). Port rates and
    /// counters stay open to any connection.
    pub fn managed(&self) -> bool {
        matches!(
            self,
            Request::SetFaults { .. }
                | Request::CreateJob { .. }
                | Request::DeleteJob { .. }
                | Request::CreateGroup { .. }
                | Request::DeleteGroup { .. }
                | Request::CreateRelay { .. }
                | Request::DeleteRelay { .. }
                | Request::SetPriorityQueue { .. }
        )
    }

    /// The request for a log line: its Debug form, except a token.
    pub fn summary(&self) -> String {
        match self {
            Request::Authenticate { .. } => "Authenticate".into(),
            other => format!("{other:?}"),
        }
    }

    /// Whether the request changes the switch (logged at info level; reads
    /// at debug).
    pub fn changes_state(&self) -> bool {
        !matches!(
            self,
            Request::Authenticate { .. }
                | Request::Info
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
        /// The job (boxed: the largest reply).
        job: Box<JobInfo>,
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
    /// The endpoint has a token and this connection has not presented it
    /// (or presented another).
    #[error("unauthorized: {message}")]
    Unauthorized {
        /// What to do.
        message: String,
    },
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
