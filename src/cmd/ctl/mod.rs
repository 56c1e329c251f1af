//! `inagg ctl`: the operator CLI, one subcommand per noun; straight to a
//! switch ([`switch`]) or through a controller ([`controller`]), with one
//! reading of the job and group flags for both ([`jobs`]). Human tables by
//! default, `--json` for scripts ([`output`]).

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use inagg_switch_control::cluster::ClusterFile;
use inagg_switch_control::emu::EmuTarget;
use inagg_switch_control::target::{ControlError, Result, Target};

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
    #[arg(long, value_enum, global = true)]
    pub target: Option<TargetKind>,
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
    /// Options of the bmv2 target.
    #[command(flatten)]
    pub bmv2: Bmv2Args,
    /// What to do.
    #[command(subcommand)]
    pub command: CtlCommand,
}

/// Switch backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TargetKind {
    /// inagg's software switch (`inagg emu`).
    Emu,
    /// simple_switch_grpc running p4/v1model, over P4Runtime.
    Bmv2,
    /// bf_switchd (a Tofino, or the Tofino model) running p4/tna, over BF
    /// Runtime.
    Tofino,
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
}

impl Bmv2Args {
    /// Any of the options only bmv2 takes (--election-id applies to the
    /// emulator too).
    fn any(&self) -> bool {
        self.device_id.is_some()
            || self.program.is_some()
            || self.client_id.is_some()
            || self.p4info.is_some()
            || self.bmv2_json.is_some()
            || self.topology.is_some()
    }
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
    Faults {
        /// Drop probability worker -> switch.
        #[arg(long)]
        drop_ingress: Option<f64>,
        /// Drop probability switch -> worker.
        #[arg(long)]
        drop_egress: Option<f64>,
        /// Duplication probability.
        #[arg(long)]
        duplicate: Option<f64>,
        /// Reordering probability.
        #[arg(long)]
        reorder: Option<f64>,
        /// RNG seed.
        #[arg(long)]
        seed: Option<u64>,
    },
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
pub fn connect(args: &CtlArgs) -> Result<Box<dyn Target + Send>> {
    let bmv2 = Bmv2Args {
        observe: args.command.reads_only() && args.bmv2.bmv2_json.is_none(),
        ..args.bmv2.clone()
    };
    connect_target(args.target.unwrap_or(TargetKind::Emu), args.addr, &bmv2)
}

/// Connects for `ctl apply -f FILE`: the file's `[switch]` table names the
/// target and its control endpoint, and the command line's `--target` and
/// `--addr` override them. (Without this a file written for bmv2 would
/// be applied to whatever emulator answered on the default address.)
fn connect_for_file(args: &CtlArgs, file: &ClusterFile) -> Result<Box<dyn Target + Send>> {
    // `ClusterFile::parse` admits "emu", "bmv2" and "tofino" only.
    let kind = match args.target {
        Some(kind) => kind,
        None if file.switch.target == "bmv2" => TargetKind::Bmv2,
        None if file.switch.target == "tofino" => TargetKind::Tofino,
        None => TargetKind::Emu,
    };
    connect_target(kind, args.addr.or(file.switch.control), &args.bmv2)
}

/// Connects to a target of the given kind: `addr` defaults per kind, the
/// bmv2 options apply to bmv2 only. Shared by `inagg ctl` and the other
/// commands that program a switch (`inagg conformance`).
pub fn connect_target(
    kind: TargetKind,
    addr: Option<SocketAddr>,
    bmv2: &Bmv2Args,
) -> Result<Box<dyn Target + Send>> {
    match kind {
        TargetKind::Emu => {
            if bmv2.any() {
                return Err(ControlError::Unsupported {
                    target: "emulator",
                    what: "the P4 targets' options (--device-id, --p4info, --bmv2-json, \
                           --program, --client-id, --topology); use them with --target bmv2 \
                           or tofino",
                });
            }
            let addr = addr.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 47001)));
            let token = bmv2
                .switch_token
                .clone()
                .map(inagg_netio::token::Token::new)
                .transpose()
                .map_err(|e| ControlError::Protocol(format!("--switch-token: {e}")))?;
            Ok(Box::new(EmuTarget::connect_with(
                addr,
                token.as_ref(),
                bmv2.election_id,
            )?))
        }
        TargetKind::Bmv2 => connect_bmv2(addr, bmv2),
        TargetKind::Tofino => connect_tofino(addr, bmv2),
    }
}

#[cfg(feature = "tofino")]
fn connect_tofino(addr: Option<SocketAddr>, b: &Bmv2Args) -> Result<Box<dyn Target + Send>> {
    use inagg_switch_control::bmv2::Topology;
    use inagg_switch_control::tofino::{TofinoOptions, TofinoTarget};
    if b.p4info.is_some() || b.bmv2_json.is_some() {
        return Err(ControlError::Unsupported {
            target: "tofino",
            what: "--p4info and --bmv2-json (bmv2's); give the program with --program",
        });
    }
    let defaults = TofinoOptions::default();
    let device_id = match b.device_id {
        Some(id) => u32::try_from(id).map_err(|_| {
            ControlError::Protocol(format!("--device-id {id}: at most {}", u32::MAX))
        })?,
        None => defaults.device_id,
    };
    let options = TofinoOptions {
        addr: addr.unwrap_or(defaults.addr),
        device_id,
        client_id: b.client_id.unwrap_or(defaults.client_id),
        program: b.program.clone(),
        topology: b.topology.as_deref().map(Topology::load).transpose()?,
        ..defaults
    };
    Ok(Box::new(TofinoTarget::connect(options)?))
}

#[cfg(not(feature = "tofino"))]
fn connect_tofino(_addr: Option<SocketAddr>, _b: &Bmv2Args) -> Result<Box<dyn Target + Send>> {
    Err(ControlError::Unsupported {
        target: "tofino",
        what: "anything in this build: rebuild inagg with the `tofino` feature",
    })
}

#[cfg(feature = "bmv2")]
fn connect_bmv2(addr: Option<SocketAddr>, b: &Bmv2Args) -> Result<Box<dyn Target + Send>> {
    use inagg_switch_control::bmv2::{Bmv2Options, Bmv2Target, Topology};
    let defaults = Bmv2Options::default();
    let options = Bmv2Options {
        addr: addr.unwrap_or(defaults.addr),
        device_id: b.device_id.unwrap_or(defaults.device_id),
        election_id: match b.election_id {
            Some(id) => Some(u128::from(id)),
            None if b.observe => None,
            None => defaults.election_id,
        },
        p4info: b.p4info.clone(),
        bmv2_json: b.bmv2_json.clone(),
        topology: b.topology.as_deref().map(Topology::load).transpose()?,
        timeout: defaults.timeout,
    };
    Ok(Box::new(Bmv2Target::connect(options)?))
}

#[cfg(not(feature = "bmv2"))]
fn connect_bmv2(_addr: Option<SocketAddr>, _b: &Bmv2Args) -> Result<Box<dyn Target + Send>> {
    Err(ControlError::Unsupported {
        target: "bmv2",
        what: "anything in this build: rebuild inagg with the `bmv2` feature",
    })
}

/// Runs `inagg ctl`, writing to `out`.
pub fn run(args: CtlArgs, out: &mut dyn Write) -> Result<()> {
    if let Some(addr) = args.controller {
        return controller::run(addr, args.token.clone(), args.json, args.command, out);
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
