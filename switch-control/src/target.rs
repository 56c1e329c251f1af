//! The switch abstraction: what the control plane can ask of any target.

use std::net::SocketAddr;

use inagg_switch_api::counters::Counters;
use inagg_switch_api::detour::{RelayInfo, RelayKey, RelaySpec};
use inagg_switch_api::queues::{ClassQueue, LinkConfig, PortStats};
use inagg_switch_api::FaultConfig;
use inagg_switch_api::{
    validate_job, ApiError, GroupInfo, GroupSpec, JobError, JobInfo, JobSpec, PoolMap, SwitchInfo,
};

/// Control-plane errors. Each variant says whose fault it is.
#[derive(Debug, thiserror::Error)]
pub enum ControlError {
    /// The target could not be reached (environment: is it running?).
    #[error("cannot reach the {target} control endpoint at {addr}: {source}; is it running?")]
    Connect {
        /// Target kind.
        target: &'static str,
        /// Where we tried.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// The connection failed mid-request (environment).
    #[error("control connection failed: {0}")]
    Io(#[from] std::io::Error),
    /// The target answered something we cannot read (a version mismatch).
    #[error("unexpected reply from the target: {0}")]
    Protocol(String),
    /// The job was refused (the operator's fault; the message says what to change).
    #[error(transparent)]
    Job(#[from] JobError),
    /// The target refused the request for another reason.
    #[error("{0}")]
    Api(ApiError),
    /// Another controller is the emulator's primary, so this connection
    /// may not change it (environment: the message says which and what to
    /// do). Like a lost connection, it marks a controller's site down.
    #[error("{0}")]
    Arbitration(ApiError),
    /// The target does not implement this operation.
    #[error("the {target} target does not support {what}")]
    Unsupported {
        /// Target kind.
        target: &'static str,
        /// The operation.
        what: &'static str,
    },
    /// The P4Runtime server could not be reached, or did not answer in time
    /// (environment: is the switch running, on that address?).
    #[error("cannot reach P4Runtime server at {addr}: {reason}; is simple_switch_grpc running?")]
    P4RuntimeUnreachable {
        /// Where we tried.
        addr: SocketAddr,
        /// What went wrong (refused, timed out, ...).
        reason: String,
    },
    /// The BF Runtime server (bf_switchd) could not be reached, or did not
    /// answer in time (environment: is the switch running, on that address?).
    #[error("cannot reach BF Runtime server at {addr}: {reason}; is bf_switchd running?")]
    BfRuntimeUnreachable {
        /// Where we tried.
        addr: SocketAddr,
        /// What went wrong (refused, timed out, ...).
        reason: String,
    },
    /// A BF Runtime call failed: the switch refused it (the message says
    /// why) or the connection broke.
    #[error("BF Runtime {op} failed: {}: {message}", rpc_code_name(*.code))]
    BfRuntime {
        /// The call and what it was about.
        op: String,
        /// The gRPC canonical status code.
        code: i32,
        /// The switch's message.
        message: String,
    },
    /// Another controller is the primary for the device (environment: stop
    /// it, or pass a higher election id).
    #[error(
        "not the primary controller of device {device_id}: {message} (our election id {ours}); \
         another controller holds it, stop it or pass a higher --election-id"
    )]
    NotPrimary {
        /// The device.
        device_id: u64,
        /// Our election id.
        ours: u128,
        /// What the switch said.
        message: String,
    },
    /// A write on a P4Runtime connection made without an election id (an
    /// observer, as `inagg ctl` makes for commands that only read).
    #[error(
        "{op} on the P4Runtime server at {addr}: this connection only reads (it has no \
         election id); pass --election-id to change the switch"
    )]
    ReadOnly {
        /// The server.
        addr: SocketAddr,
        /// The refused call.
        op: String,
    },
    /// A P4Runtime call failed: the switch refused it (the message says
    /// why) or the connection broke.
    #[error("P4Runtime {op} failed: {}: {message}", rpc_code_name(*.code))]
    Rpc {
        /// The call and what it was about.
        op: String,
        /// The gRPC canonical status code.
        code: i32,
        /// The switch's message.
        message: String,
    },
    /// The P4 program's P4Info lacks something the control plane needs: the
    /// pipeline is not inagg's p4/v1model, or was compiled from another
    /// version of it (the operator's fault: rebuild and push it).
    #[error("{message} (P4Info from {source_name})")]
    P4Info {
        /// Where the P4Info came from (a file, or the switch).
        source_name: String,
        /// What is missing or wrong.
        message: String,
    },
    /// The controller refused a request or could not be reached (a
    /// `inagg_controller_api::ClientError`, whose message says whose fault
    /// and what to do).
    #[error(transparent)]
    Controller(Box<dyn std::error::Error + Send + Sync>),
    /// A configuration file is unusable (the operator's fault).
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: String,
        /// What is wrong with it.
        message: String,
    },
}

impl From<ApiError> for ControlError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Job { error } => ControlError::Job(error),
            e @ ApiError::NotPrimary { .. } => ControlError::Arbitration(e),
            other => ControlError::Api(other),
        }
    }
}

/// The name of a gRPC canonical status code (`grpc::StatusCode`).
pub fn rpc_code_name(code: i32) -> String {
    const NAMES: [&str; 17] = [
        "OK",
        "CANCELLED",
        "UNKNOWN",
        "INVALID_ARGUMENT",
        "DEADLINE_EXCEEDED",
        "NOT_FOUND",
        "ALREADY_EXISTS",
        "PERMISSION_DENIED",
        "RESOURCE_EXHAUSTED",
        "FAILED_PRECONDITION",
        "ABORTED",
        "OUT_OF_RANGE",
        "UNIMPLEMENTED",
        "INTERNAL",
        "UNAVAILABLE",
        "DATA_LOSS",
        "UNAUTHENTICATED",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| NAMES.get(i))
        .map_or_else(|| format!("status {code}"), |n| (*n).to_string())
}

/// Result with [`ControlError`].
pub type Result<T> = std::result::Result<T, ControlError>;

/// A switch the control plane can program. Optional operations default to
/// [`ControlError::Unsupported`].
pub trait Target {
    /// Short name of the backend ("emu", "bmv2", ...).
    fn kind(&self) -> &'static str;
    /// Memory and limits.
    fn info(&mut self) -> Result<SwitchInfo>;
    /// Where the data plane listens, when the target knows it.
    fn data_addr(&mut self) -> Result<Option<SocketAddr>> {
        Ok(None)
    }
    /// Installs a job (already validated by [`install_job`]).
    fn create_job(&mut self, spec: &JobSpec) -> Result<()>;
    /// Removes a job.
    fn delete_job(&mut self, id: u16) -> Result<()>;
    /// One job with counters.
    fn job(&mut self, id: u16) -> Result<JobInfo>;
    /// Every job with counters.
    fn jobs(&mut self) -> Result<Vec<JobInfo>>;
    /// The memory layout.
    fn pools(&mut self) -> Result<PoolMap>;
    /// Switch-wide counters.
    fn counters(&mut self) -> Result<Counters>;
    /// Zeroes all counters.
    fn reset_counters(&mut self) -> Result<()>;
    /// Fault injection settings (emulator only).
    fn faults(&mut self) -> Result<FaultConfig> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "fault injection",
        })
    }
    /// Changes fault injection (emulator only).
    fn set_faults(&mut self, _faults: FaultConfig) -> Result<()> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "fault injection",
        })
    }
    /// Every multicast group: the jobs' and those made by hand.
    fn groups(&mut self) -> Result<Vec<GroupInfo>> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "multicast groups",
        })
    }
    /// Installs a multicast group made by hand (unaggregated group datagrams).
    fn create_group(&mut self, _group: &GroupSpec) -> Result<()> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "multicast groups made by hand",
        })
    }
    /// Removes a multicast group made by hand.
    fn delete_group(&mut self, _id: u16) -> Result<()> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "multicast groups made by hand",
        })
    }
    /// Every relay entry (auxiliary paths' forwarding, emulator only).
    fn relays(&mut self) -> Result<Vec<RelayInfo>> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "relay entries (auxiliary paths)",
        })
    }
    /// Installs a relay entry: detours matching it go on unchanged.
    fn create_relay(&mut self, _relay: &RelaySpec) -> Result<()> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "relay entries (auxiliary paths)",
        })
    }
    /// Removes a relay entry.
    fn delete_relay(&mut self, _key: RelayKey) -> Result<()> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "relay entries (auxiliary paths)",
        })
    }
    /// Sends priority class `class` through egress queue `queue`.
    fn set_priority_queue(&mut self, _class: u8, _queue: u8) -> Result<()> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "priority queues",
        })
    }
    /// Gives the egress port to `port` a rate of its own in bits per
    /// second (`None`: the line rate again): a slow link to one
    /// destination, such as a WAN link to a parent switch (emulator only).
    fn set_port_rate(&mut self, _port: SocketAddr, _rate_bps: Option<u64>) -> Result<()> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "per-port rates",
        })
    }
    /// The class-to-queue map, the ports' pacing and their queues' counters.
    fn queues(&mut self) -> Result<QueueReport> {
        Err(ControlError::Unsupported {
            target: self.kind(),
            what: "queue counters",
        })
    }
}

/// What [`Target::queues`] reports.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct QueueReport {
    /// Priority class -> queue, for the classes not on queue 0.
    pub map: Vec<ClassQueue>,
    /// Line rate and queue size of the ports; `None`: not paced.
    pub link: Option<LinkConfig>,
    /// Each port's queues.
    pub ports: Vec<PortStats>,
}

/// Checks a job against the target's memory and installed jobs, then
/// installs it. The check refuses overlaps, pools beyond memory, duplicate
/// ids and bad limits before the switch is touched.
pub fn install_job(target: &mut dyn Target, spec: &JobSpec) -> Result<()> {
    let info = target.info()?;
    let jobs = target.jobs()?;
    let config = info.config();
    validate_job(spec, jobs.iter().map(|j| &j.spec), config)?;
    target.create_job(spec)
}
