//! `inagg ctl`: the operator CLI, one subcommand per noun; straight to a
//! switch ([`switch`]) or through a controller ([`controller`]), with one
//! reading of the job and group flags for both ([`jobs`]). Human tables by
//! default, `--json` for scripts ([`output`]).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Subcommand};
use inagg_switch_api::{ApiError, FaultConfig};
use inagg_switch_control::cluster::ClusterFile;
use inagg_switch_control::registry::{self, BoxedTarget, ConnectOptions, Registered};
use inagg_switch_control::target::{ControlError, Result};

mod controller;
mod jobs;
pub mod output;
mod relay;
mod switch;

use jobs::{GroupCommand, JobCommand};

/// Arguments of `inagg ctl`.
#[derive(Debug, Args)]
pub struct CtlArgs {
    /// Which kind of switch to program [default: a cluster file's
    /// `[switch] target` with `apply`, else emu].
    #[arg(long, global = true, value_parser = target_parser())]
    pub target: Option<&'static Registered>,
    /// The target's control endpoint [default: 127.0.0.1:47001 for emu,
    /// the P4Runtime server 127.0.0.1:9559 for bmv2].
    #[arg(long, global = true)]
    pub addr: Option<SocketAddr>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Go through this controller (`inagg controller`) instead of
    /// programming the switch directly: jobs by name, pools placed for you.
    #[arg(long, global = true, env = "INAGG_CONTROLLER", value_name = "ADDR")]
    pub controller: Option<SocketAddr>,
    /// The controller's API token.
    #[arg(long, global = true, env = "INAGG_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// TLS towards the controller.
    #[command(flatten)]
    pub controller_tls: crate::tls::ControllerTls,
    /// Options of the bmv2 target.
    #[command(flatten)]
    pub bmv2: Bmv2Args,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// `inagg ctl --controller ADDR tenant ...`.
#[derive(Debug, Subcommand)]
pub enum TenantCommand {
    /// Add a tenant; prints its credential, which is shown this once (the
    /// controller keeps only a hash of it).
    Create {
        /// Its name (A-Z, a-z, 0-9, '.', '-', '_').
        name: String,
        /// Aggregator slots its jobs may hold together.
        #[arg(long)]
        slots: u32,
        /// Priority-map entries (--class-queue) its jobs may carry together.
        #[arg(long, default_value_t = 0)]
        queues: u32,
    },
    /// Every tenant: its quota, what its jobs hold, its jobs.
    List,
    /// A new credential for a tenant; the old one stops working at once.
    Rotate {
        /// Its name.
        name: String,
    },
    /// Remove a tenant and its credential (it must have no jobs).
    Delete {
        /// Its name.
        name: String,
    },
}

/// `--target`: a name of the registry of targets
/// (`inagg_switch_control::registry`), its possible values listed in help.
pub fn target_parser() -> impl TypedValueParser<Value = &'static Registered> {
    PossibleValuesParser::new(registry::names())
        .map(|name| registry::find(&name).expect("a possible value is registered"))
}

/// Options of `--target bmv2` and `--target tofino`.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "P4 targets (--target bmv2, --target tofino)")]
pub struct Bmv2Args {
    /// Device id (simple_switch_grpc --device-id; bf_switchd's device)
    /// [default: 0].
    #[arg(long, global = true)]
    pub device_id: Option<u64>,
    /// Election id for arbitration (bmv2 and emu): the connected controller
    /// with the highest is primary, and only it changes the switch
    /// [default: 1 with bmv2 and for `inagg controller`; `ctl` straight to
    /// an emulator claims nothing unless given one].
    #[arg(long, global = true)]
    pub election_id: Option<u64>,
    /// The emulator's control token (`inagg emu --token`).
    #[arg(
        long,
        global = true,
        env = "INAGG_SWITCH_TOKEN",
        hide_env_values = true,
        help_heading = "Switch"
    )]
    pub switch_token: Option<String>,
    /// Binary P4Info (p4/build/v1model/inagg.p4info.bin) [default: the
    /// P4Info of the pipeline installed on the switch].
    #[arg(long, global = true, value_name = "PATH")]
    pub p4info: Option<PathBuf>,
    /// bmv2 JSON (p4/build/v1model/inagg.json): with --p4info, pushes the
    /// pipeline unless the switch already runs this one. A push clears every
    /// table entry.
    #[arg(long, global = true, value_name = "PATH")]
    pub bmv2_json: Option<PathBuf>,
    /// Topology file (TOML): each worker host's switch port and MAC, by IPv4
    /// address. Needed to create jobs: `[workers]` then lines like
    /// `"10.0.0.1" = { port = 1, mac = "02:00:00:00:00:01" }`.
    #[arg(long, global = true, value_name = "PATH")]
    pub topology: Option<PathBuf>,
    /// Tofino: the directory bf-p4c wrote (p4/build/tna: bf-rt.json,
    /// pipe/context.json, pipe/tofino.bin or tofino2.bin), pushed to the
    /// switch [default: bind to the program inagg the switch runs]. A push
    /// clears every table entry.
    #[arg(long, global = true, value_name = "DIR")]
    pub program: Option<PathBuf>,
    /// Tofino: the BF Runtime client id to subscribe with [default: 1].
    #[arg(long, global = true)]
    pub client_id: Option<u32>,
    /// Connect without an election id when none is given: the command only
    /// reads, so it should work beside the switch's controller (which
    /// holds the default id) without taking the switch from it.
    #[arg(skip)]
    #[cfg_attr(not(feature = "bmv2"), allow(dead_code))]
    pub observe: bool,
    /// TLS towards the switch.
    #[command(flatten)]
    pub tls: crate::tls::SwitchTls,
}

impl Bmv2Args {
    /// The options a target connects with, at `addr`.
    pub fn options(&self, addr: Option<SocketAddr>) -> ConnectOptions {
        ConnectOptions {
            addr,
            device_id: self.device_id,
            election_id: self.election_id,
            observe: self.observe,
            switch_token: self.switch_token.clone(),
            p4info: self.p4info.clone(),
            bmv2_json: self.bmv2_json.clone(),
            topology: self.topology.clone(),
            program: self.program.clone(),
            client_id: self.client_id,
            tls: self.tls.files(),
        }
    }
}

/// `ctl faults`: shown when no option is given; the options given change
/// those fields only.
#[derive(Debug, Clone, Args)]
pub struct FaultArgs {
    /// Drop probability worker -> switch.
    #[arg(long)]
    pub drop_ingress: Option<f64>,
    /// Drop probability switch -> worker.
    #[arg(long)]
    pub drop_egress: Option<f64>,
    /// Duplication probability.
    #[arg(long)]
    pub duplicate: Option<f64>,
    /// Reordering probability.
    #[arg(long)]
    pub reorder: Option<f64>,
    /// RNG seed.
    #[arg(long)]
    pub seed: Option<u64>,
    /// With --controller: the aggregator (its control address) [default:
    /// the switch].
    #[arg(long, value_name = "ADDR")]
    pub site: Option<SocketAddr>,
}

impl FaultArgs {
    /// `base` with the fields given changed, checked; `None` when none is
    /// given.
    pub fn applied_to(&self, base: FaultConfig) -> Result<Option<FaultConfig>> {
        let probabilities = [
            self.drop_ingress,
            self.drop_egress,
            self.duplicate,
            self.reorder,
        ];
        if probabilities.iter().all(Option::is_none) && self.seed.is_none() {
            return Ok(None);
        }
        let f = FaultConfig {
            drop_ingress: self.drop_ingress.unwrap_or(base.drop_ingress),
            drop_egress: self.drop_egress.unwrap_or(base.drop_egress),
            duplicate: self.duplicate.unwrap_or(base.duplicate),
            reorder: self.reorder.unwrap_or(base.reorder),
            seed: self.seed.unwrap_or(base.seed),
        };
        // Checked here too: NaN cannot cross a JSON control channel (it
        // would arrive as null and fail to parse there).
        f.validate()
            .map_err(|message| ControlError::Api(ApiError::Invalid { message }))?;
        Ok(Some(f))
    }
}

/// Faults on one line, as `ctl faults` prints them.
pub fn describe_faults(f: &FaultConfig) -> String {
    format!(
        "drop_ingress {}  drop_egress {}  duplicate {}  reorder {}  seed {}",
        f.drop_ingress, f.drop_egress, f.duplicate, f.reorder, f.seed
    )
}

/// Nouns.
#[derive(Debug, Subcommand)]
pub enum CtlCommand {
    /// The switch's memory and limits.
    Info,
    /// Jobs: create, list, show, delete.
    #[command(subcommand, alias = "jobs")]
    Job(JobCommand),
    /// Multicast groups: the jobs' result groups and groups made by hand
    /// for unaggregated group datagrams.
    #[command(subcommand, alias = "groups")]
    Group(GroupCommand),
    /// Relay entries of a switch on an auxiliary path: detours (partial
    /// sums sent the long way round) forwarded unchanged.
    #[command(subcommand, alias = "relays")]
    Relay(relay::RelayCommand),
    /// Aggregator memory: which slots each job's pool holds, what is free.
    #[command(alias = "pools")]
    Pool,
    /// Counters: switch-wide (drops by reason) and per job.
    #[command(alias = "stats")]
    Counters {
        /// Zero them after showing.
        #[arg(long)]
        reset: bool,
    },
    /// The emulator's fault injection.
    Faults(FaultArgs),
    /// Egress queues: the priority class -> queue map, the ports' line rate,
    /// and each port's queues (packets, bytes, tail drops, depth).
    Queues,
    /// Send a priority class's packets through an egress queue (0-7; 7 is
    /// served first).
    Priority {
        /// The class (the priority field agents put in their packets).
        class: u8,
        /// The queue.
        queue: u8,
    },
    /// Give the emulator's egress port to one destination a rate of its
    /// own (a slow WAN link to a parent switch, say), or the line rate back.
    PortRate {
        /// The destination the port leads to (IP:PORT).
        port: SocketAddr,
        /// Gbit/s, or `default` for the line rate.
        rate: String,
    },
    /// The aggregators behind the controller (the switch, fallback
    /// emulators): up or down, memory, free ranges (with --controller).
    Sites,
    /// The controller's tenants (with --controller and the operator's
    /// token): each sees and changes only its own jobs, within a quota.
    #[command(subcommand, alias = "tenants")]
    Tenant(TenantCommand),
    /// Who the controller takes this token for: the operator or a tenant
    /// (with --controller).
    Whoami,
    /// The controller's audit: the last changes asked of it (jobs,
    /// registrations, groups, priorities, tenants), who asked, from where,
    /// when, and whether they were done; a tenant sees its own (with
    /// --controller).
    Events {
        /// How many, newest last.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=i64::from(inagg_controller_api::MAX_EVENTS)))]
        last: u32,
    },
    /// Make the switch hold the jobs of a cluster file (jobs by id, pools
    /// given); with --controller, make the controller hold the jobs (by
    /// name), groups and priority entries of a controller file. The changes
    /// are shown, then made.
    Apply {
        /// The file (TOML); docs/GUIDE.md shows both kinds.
        #[arg(short = 'f', long = "file")]
        file: String,
        /// Also delete installed jobs the file does not list.
        #[arg(long)]
        prune: bool,
        /// Show the plan, change nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl CtlCommand {
    /// Whether the command only reads the switch (so `ctl` connects to
    /// bmv2 as an observer unless given an election id or a pipeline).
    fn reads_only(&self) -> bool {
        matches!(
            self,
            CtlCommand::Info
                | CtlCommand::Pool
                | CtlCommand::Queues
                | CtlCommand::Counters { reset: false }
                | CtlCommand::Job(JobCommand::List | JobCommand::Show { .. })
                | CtlCommand::Group(GroupCommand::List)
                | CtlCommand::Relay(relay::RelayCommand::List)
        )
    }
}

/// Connects to the target `args` name.
pub fn connect(args: &CtlArgs) -> Result<BoxedTarget> {
    let bmv2 = Bmv2Args {
        observe: args.command.reads_only() && args.bmv2.bmv2_json.is_none(),
        ..args.bmv2.clone()
    };
    let target = args.target.unwrap_or(registry::default_target());
    target.connect(&bmv2.options(args.addr))
}

/// Connects for `ctl apply -f FILE`: the file's `[switch]` table names the
/// target and its control endpoint, and the command line's `--target` and
/// `--addr` override them. (Without this a file written for bmv2 would
/// be applied to whatever emulator answered on the default address.)
fn connect_for_file(args: &CtlArgs, file: &ClusterFile) -> Result<BoxedTarget> {
    let target = match args.target {
        Some(target) => target,
        None => registry::find(&file.switch.target)?,
    };
    target.connect(&args.bmv2.options(args.addr.or(file.switch.control)))
}

/// Runs `inagg ctl`, writing to `out`.
pub fn run(args: CtlArgs, out: &mut dyn Write) -> Result<()> {
    if let Some(addr) = args.controller {
        let tls = (args.controller_tls.load())
            .map_err(|e| ControlError::Controller(format!("{e:#}").into()))?;
        let auth = (args.token.clone(), tls);
        return controller::run(addr, auth, args.json, args.command, out);
    }
    // A cluster file is read once: its [switch] table says where to connect.
    let cluster_file = match &args.command {
        CtlCommand::Apply { file, .. } => Some(ClusterFile::load(file)?),
        _ => None,
    };
    let mut target = match &cluster_file {
        Some(parsed) => connect_for_file(&args, parsed)?,
        None => connect(&args)?,
    };
    switch::run(target.as_mut(), args.command, cluster_file, args.json, out)
}
