//! `inagg ctl`: the operator CLI, one subcommand per noun. Human tables by
//! default, `--json` for scripts.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use inagg_switch_api::counters::{Counters, DropReason};
use inagg_switch_api::queues::{describe_map, ClassQueue};
use inagg_switch_api::FaultConfig;
use inagg_switch_api::{
    ApiError, AuxPath, Detour, GroupInfo, GroupSpec, JobInfo, JobSpec, PoolMap, Upstream,
};
use serde::Serialize;

mod relay;

use crate::cluster::{self, ClusterFile};
use crate::emu::EmuTarget;
use crate::target::{install_job, ControlError, QueueReport, Result, Target};

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
}

/// Options of `--target bmv2`.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "bmv2 target (--target bmv2)")]
pub struct Bmv2Args {
    /// P4Runtime device id (simple_switch_grpc --device-id) [default: 0].
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
    /// Connect without an election id when none is given: the command only
    /// reads, so it should work beside the switch's controller (which
    /// holds the default id) without taking the switch from it.
    #[arg(skip)]
    pub observe: bool,
}

impl Bmv2Args {
    /// Any of the options only bmv2 takes (--election-id applies to the
    /// emulator too).
    fn any(&self) -> bool {
        self.device_id.is_some()
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

/// Job verbs. (`Create` is much the largest; a command line is parsed
/// once, so it is not boxed.)
#[derive(Debug, Subcommand)]
#[allow(clippy::large_enum_variant)]
pub enum JobCommand {
    /// Install a job. Directly: --id, --workers ENDPOINTS, --pool-base,
    /// --pool-size. Through --controller: --name, --count, --slots (the
    /// controller places the pool; workers register, or give --workers).
    Create {
        /// Job id (0-65535; direct only).
        #[arg(long)]
        id: Option<u16>,
        /// Job name (with --controller).
        #[arg(long)]
        name: Option<String>,
        /// Workers in the job (with --controller).
        #[arg(long)]
        count: Option<u16>,
        /// Slots to ask for (with --controller); fewer may be granted.
        #[arg(long)]
        slots: Option<u32>,
        /// With --controller: wait for free slots instead of running on a
        /// fallback emulator when the switch is full.
        #[arg(long)]
        no_fallback: bool,
        /// Worker endpoints, comma-separated (worker id = position).
        #[arg(long, value_delimiter = ',')]
        workers: Vec<SocketAddr>,
        /// First slot of the pool (direct only).
        #[arg(long)]
        pool_base: Option<u32>,
        /// Slots in the pool (direct only).
        #[arg(long)]
        pool_size: Option<u32>,
        /// Elements per packet (K).
        #[arg(long, default_value_t = 64)]
        elements: u16,
        /// Membership generation (direct only).
        #[arg(long, default_value_t = 0)]
        generation: u16,
        /// This job's priority class -> egress queue map, CLASS=QUEUE,
        /// repeatable or comma-separated (`--class-queue 5=7,1=0`).
        #[arg(
            long = "class-queue",
            value_name = "CLASS=QUEUE",
            value_delimiter = ','
        )]
        class_queue: Vec<ClassQueue>,
        /// The multicast group for the job's results (direct only; the
        /// controller allocates one) [default: the target's pick].
        #[arg(long)]
        group: Option<u16>,
        /// Make the job a node of an aggregation tree (direct only; the
        /// emulator and bmv2): complete slots' partial sums go up to job JOB
        /// of the switch at SWITCH, as its member MEMBER, and the results
        /// it sends back go down to the workers (docs/PROTOCOL.md,
        /// "Aggregation trees").
        #[arg(long, value_name = "SWITCH/JOB/MEMBER")]
        upstream: Option<Upstream>,
        /// With --upstream (emulator and bmv2): when more than BUSY_BOUND
        /// packets wait on the port to the parent, send partial sums as
        /// detours to the switch at VIA while fewer than QUEUE_LENGTH wait
        /// on its port (NetStorm's PRIMARY_BUSY_BOUND and
        /// AUXILIARY_QUEUE_LENGTH) [default bounds: 2/1].
        #[arg(
            long,
            value_name = "VIA[/BUSY_BOUND/QUEUE_LENGTH]",
            requires = "upstream"
        )]
        aux_path: Option<AuxPath>,
        /// Take member MEMBER's detours when they arrive from the switch
        /// at RELAY (the last hop of its auxiliary path); repeatable or
        /// comma-separated.
        #[arg(long, value_name = "MEMBER=RELAY", value_delimiter = ',')]
        detour: Vec<Detour>,
    },
    /// List jobs.
    #[command(alias = "ls")]
    List,
    /// One job in detail.
    Show {
        /// Job id (with --controller: its name).
        job: String,
    },
    /// Remove a job and free its pool.
    #[command(alias = "rm")]
    Delete {
        /// Job id (with --controller: its name).
        job: String,
    },
}

/// Multicast group verbs.
#[derive(Debug, Subcommand)]
pub enum GroupCommand {
    /// Make a group by hand: a member's group datagrams are copied to every
    /// other member. Directly: --id. Through --controller: --name (the id is
    /// allocated unless --id is given).
    Create {
        /// Group id (1-65535).
        #[arg(long)]
        id: Option<u16>,
        /// Group name (with --controller).
        #[arg(long)]
        name: Option<String>,
        /// Member endpoints, comma-separated (member id = position).
        #[arg(long, value_delimiter = ',', required = true)]
        members: Vec<SocketAddr>,
    },
    /// List every group, the jobs' and those made by hand.
    #[command(alias = "ls")]
    List,
    /// Remove a group made by hand (a job's group goes with its job).
    #[command(alias = "rm")]
    Delete {
        /// Group id (with --controller: its name).
        group: String,
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
    // `ClusterFile::parse` admits "emu" and "bmv2" only.
    let kind = match args.target {
        Some(kind) => kind,
        None if file.switch.target == "bmv2" => TargetKind::Bmv2,
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
                    what: "the bmv2 options (--device-id, --p4info, --bmv2-json, --topology); \
                           use them with --target bmv2",
                });
            }
            let addr = addr.unwrap_or(SocketAddr::from(([127, 0, 0, 1], 47001)));
            let token = bmv2
                .switch_token
                .clone()
                .map(inagg_wire::token::Token::new)
                .transpose()
                .map_err(|e| ControlError::Protocol(format!("--switch-token: {e}")))?;
            Ok(Box::new(EmuTarget::connect_with(
                addr,
                token.as_ref(),
                bmv2.election_id,
            )?))
        }
        TargetKind::Bmv2 => connect_bmv2(addr, bmv2),
    }
}

#[cfg(feature = "bmv2")]
fn connect_bmv2(addr: Option<SocketAddr>, b: &Bmv2Args) -> Result<Box<dyn Target + Send>> {
    use crate::bmv2::{Bmv2Options, Bmv2Target, Topology};
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
        return crate::ctl_controller::run(addr, args.token.clone(), args.json, args.command, out);
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
    let t = target.as_mut();
    let json = args.json;
    match args.command {
        CtlCommand::Info => {
            let info = t.info()?;
            let data = t.data_addr()?;
            emit(
                out,
                json,
                &serde_json::json!({ "target": t.kind(), "info": info, "data_addr": data }),
                |o| {
                    writeln!(o, "target        {}", t.kind())?;
                    writeln!(
                        o,
                        "data plane    {}",
                        data.map_or("-".into(), |a| a.to_string())
                    )?;
                    writeln!(o, "slots         {}", info.slots)?;
                    let only = if info.fixed_elements {
                        " (the only K)"
                    } else {
                        ""
                    };
                    writeln!(o, "max elements  {}{only}", info.max_elements)?;
                    if info.memory != u64::MAX {
                        writeln!(
                            o,
                            "memory        {} of {} used",
                            inagg_switch_api::size_text(info.memory_used),
                            inagg_switch_api::size_text(info.memory)
                        )?;
                    }
                    writeln!(o, "jobs          {}", info.jobs)
                },
            )
        }
        CtlCommand::Job(cmd) => run_job(cmd, t, json, out),
        CtlCommand::Group(cmd) => run_group(cmd, t, json, out),
        CtlCommand::Relay(cmd) => relay::run(cmd, t, json, out),
        CtlCommand::Pool => {
            let pools = t.pools()?;
            emit(out, json, &pools, |o| write_pools(o, &pools))
        }
        CtlCommand::Counters { reset } => {
            let counters = t.counters()?;
            let jobs = t.jobs()?;
            if reset {
                t.reset_counters()?;
            }
            emit(
                out,
                json,
                &serde_json::json!({ "switch": counters_json(&counters), "jobs": jobs }),
                |o| write_counters(o, &counters, &jobs),
            )
        }
        CtlCommand::Faults {
            drop_ingress,
            drop_egress,
            duplicate,
            reorder,
            seed,
        } => {
            let mut f = t.faults()?;
            let changes = [drop_ingress, drop_egress, duplicate, reorder]
                .iter()
                .any(Option::is_some)
                || seed.is_some();
            if changes {
                f = FaultConfig {
                    drop_ingress: drop_ingress.unwrap_or(f.drop_ingress),
                    drop_egress: drop_egress.unwrap_or(f.drop_egress),
                    duplicate: duplicate.unwrap_or(f.duplicate),
                    reorder: reorder.unwrap_or(f.reorder),
                    seed: seed.unwrap_or(f.seed),
                };
                // Checked here too: NaN cannot cross the JSON control
                // channel (it would arrive as null and fail to parse there).
                f.validate()
                    .map_err(|message| ControlError::Api(ApiError::Invalid { message }))?;
                t.set_faults(f)?;
            }
            emit(out, json, &f, |o| {
                writeln!(
                    o,
                    "drop_ingress {}  drop_egress {}  duplicate {}  reorder {}  seed {}",
                    f.drop_ingress, f.drop_egress, f.duplicate, f.reorder, f.seed
                )
            })
        }
        CtlCommand::Queues => {
            let report = t.queues()?;
            emit(out, json, &report, |o| write_queues(o, &report))
        }
        CtlCommand::Sites => Err(ControlError::Unsupported {
            target: t.kind(),
            what: "sites (they are the controller's: pass --controller ADDR)",
        }),
        CtlCommand::PortRate { port, rate } => {
            let rate_bps = parse_port_rate(&rate)?;
            t.set_port_rate(port, rate_bps)?;
            let shown = rate_bps.map_or("the line rate".to_string(), |r| {
                format!("{} Gbit/s", r as f64 / 1e9)
            });
            emit(
                out,
                json,
                &serde_json::json!({ "port": port, "rate_bps": rate_bps }),
                |o| writeln!(o, "port {port} -> {shown}"),
            )
        }
        CtlCommand::Priority { class, queue } => {
            t.set_priority_queue(class, queue)?;
            emit(
                out,
                json,
                &serde_json::json!({ "class": class, "queue": queue }),
                |o| writeln!(o, "priority class {class} -> queue {queue}"),
            )
        }
        CtlCommand::Apply {
            file,
            prune,
            dry_run,
        } => {
            // Loaded above, before connecting (the load here is never reached).
            let parsed = match cluster_file {
                Some(parsed) => parsed,
                None => ClusterFile::load(&file)?,
            };
            let steps = cluster::plan(&parsed, &file, t, prune)?;
            if !dry_run {
                cluster::execute(&steps, t)?;
            }
            emit_plan(out, json, dry_run, "steps", &steps)
        }
    }
}

fn run_job(cmd: JobCommand, t: &mut dyn Target, json: bool, out: &mut dyn Write) -> Result<()> {
    match cmd {
        JobCommand::Create {
            id,
            name,
            count,
            slots,
            no_fallback,
            workers,
            pool_base,
            pool_size,
            elements,
            generation,
            class_queue,
            group,
            upstream,
            aux_path,
            detour,
        } => {
            if name.is_some() || count.is_some() || slots.is_some() || no_fallback {
                return Err(usage(
                    "--name, --count, --slots and --no-fallback are for jobs created through \
                     --controller ADDR",
                ));
            }
            let need = |v: Option<u32>, flag: &str| {
                v.ok_or_else(|| usage(&format!("{flag} is needed (or use --controller ADDR)")))
            };
            let id = id.ok_or_else(|| usage("--id is needed (or use --controller ADDR)"))?;
            if workers.is_empty() {
                return Err(usage(
                    "--workers ENDPOINTS is needed (or use --controller ADDR)",
                ));
            }
            let upstream = upstream.map(|u| Upstream { aux: aux_path, ..u });
            let spec = JobSpec {
                detours: detour,
                upstream,
                id,
                workers,
                pool_base: need(pool_base, "--pool-base")?,
                pool_size: need(pool_size, "--pool-size")?,
                elements,
                generation,
                queues: class_queue,
                group,
            };
            install_job(t, &spec)?;
            emit(out, json, &spec, |o| {
                writeln!(
                    o,
                    "created job {id}: pool [{}, {}) k={elements}",
                    spec.pool_base,
                    spec.pool_end()
                )
            })
        }
        JobCommand::List => {
            let jobs = t.jobs()?;
            emit(out, json, &jobs, |o| write_jobs(o, &jobs))
        }
        JobCommand::Show { job } => {
            let job = t.job(job_id(&job)?)?;
            emit(out, json, &job, |o| write_job(o, &job))
        }
        JobCommand::Delete { job } => {
            let id = job_id(&job)?;
            t.delete_job(id)?;
            emit(out, json, &serde_json::json!({ "deleted": id }), |o| {
                writeln!(o, "deleted job {id}")
            })
        }
    }
}

fn run_group(cmd: GroupCommand, t: &mut dyn Target, json: bool, out: &mut dyn Write) -> Result<()> {
    match cmd {
        GroupCommand::Create { id, name, members } => {
            if name.is_some() {
                return Err(usage("--name is for groups made through --controller ADDR"));
            }
            let id = id.ok_or_else(|| usage("--id is needed (or use --controller ADDR)"))?;
            let spec = GroupSpec { id, members };
            t.create_group(&spec)?;
            emit(out, json, &spec, |o| {
                writeln!(
                    o,
                    "created multicast group {id} with {} members",
                    spec.members.len()
                )
            })
        }
        GroupCommand::List => {
            let groups = t.groups()?;
            emit(out, json, &groups, |o| write_groups(o, &groups))
        }
        GroupCommand::Delete { group } => {
            let id: u16 = group.parse().map_err(|_| {
                usage(&format!(
                    "group {group:?}: a switch group is a number (1-65535); named groups are the \
                     controller's (--controller ADDR)"
                ))
            })?;
            t.delete_group(id)?;
            emit(out, json, &serde_json::json!({ "deleted": id }), |o| {
                writeln!(o, "deleted multicast group {id}")
            })
        }
    }
}

/// The switch's group table: id, owner, members, counters.
fn write_groups(o: &mut dyn Write, groups: &[GroupInfo]) -> std::io::Result<()> {
    writeln!(
        o,
        "{:>5}  {:<16}  {:>7}  {:>10}  {:>10}  MEMBERS",
        "GROUP", "OWNER", "MEMBERS", "PACKETS", "COPIES"
    )?;
    for g in groups {
        let owner = g
            .job
            .map_or_else(|| "by hand".to_string(), |j| format!("job {j}"));
        let members: Vec<String> = g.members.iter().map(ToString::to_string).collect();
        writeln!(
            o,
            "{:>5}  {:<16}  {:>7}  {:>10}  {:>10}  {}",
            g.id,
            owner,
            g.members.len(),
            g.packets,
            g.copies,
            members.join(",")
        )?;
    }
    if groups.is_empty() {
        writeln!(o, "(no multicast groups)")?;
    }
    Ok(())
}

/// A job id from the command line (names are the controller's).
fn job_id(s: &str) -> Result<u16> {
    s.parse().map_err(|_| {
        usage(&format!(
            "job {s:?}: a switch job is a number (0-65535); named jobs are the controller's (--controller ADDR)"
        ))
    })
}

/// A command-line mistake.
pub(crate) fn usage(message: &str) -> ControlError {
    ControlError::Config {
        path: "command line".into(),
        message: message.into(),
    }
}

/// Prints an `apply` plan: JSON `{"applied": .., key: items}`, or one
/// line per item and whether it was carried out.
pub(crate) fn emit_plan<T: Serialize + std::fmt::Display>(
    out: &mut dyn Write,
    json: bool,
    dry_run: bool,
    key: &str,
    items: &[T],
) -> Result<()> {
    let value = serde_json::json!({ "applied": !dry_run, key: items });
    emit(out, json, &value, |o| {
        for item in items {
            writeln!(o, "{item}")?;
        }
        if items.is_empty() {
            writeln!(
                o,
                "nothing to do: the switch already holds what the file says"
            )?;
        }
        let done = if dry_run {
            "dry run: nothing changed"
        } else {
            "applied"
        };
        writeln!(o, "{done}")
    })
}

/// Prints `value` as JSON or through `human`.
pub(crate) fn emit<T: Serialize>(
    out: &mut dyn Write,
    json: bool,
    value: &T,
    human: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> Result<()> {
    if json {
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| ControlError::Protocol(e.to_string()))?;
        writeln!(out, "{text}")?;
    } else {
        human(out)?;
    }
    Ok(())
}

fn counters_json(c: &Counters) -> serde_json::Value {
    let drops: serde_json::Map<String, serde_json::Value> = DropReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), c.dropped(*r).into()))
        .collect();
    serde_json::json!({
        "rx_packets": c.rx_packets, "rx_bytes": c.rx_bytes,
        "tx_packets": c.tx_packets, "tx_bytes": c.tx_bytes,
        "injected_duplicates": c.injected_duplicates, "injected_reorders": c.injected_reorders,
        "relayed": c.relayed, "neighbours_refused": c.neighbours_refused,
        "drops": drops,
    })
}

fn write_jobs(o: &mut dyn Write, jobs: &[JobInfo]) -> std::io::Result<()> {
    writeln!(
        o,
        "{:>5}  {:>7}  {:>13}  {:>5}  {:>3}  {:>12}  {:>10}",
        "JOB", "WORKERS", "POOL", "K", "GEN", "CONTRIB", "RESULTS"
    )?;
    for j in jobs {
        let s = &j.spec;
        writeln!(
            o,
            "{:>5}  {:>7}  {:>13}  {:>5}  {:>3}  {:>12}  {:>10}",
            s.id,
            s.workers.len(),
            format!("[{}, {})", s.pool_base, s.pool_end()),
            s.elements,
            s.generation,
            j.counters.contributions,
            j.counters.results
        )?;
    }
    if jobs.is_empty() {
        writeln!(o, "(no jobs)")?;
    }
    Ok(())
}

fn write_job(o: &mut dyn Write, j: &JobInfo) -> std::io::Result<()> {
    let s = &j.spec;
    let c = &j.counters;
    writeln!(
        o,
        "job {}  pool [{}, {})  k={}  generation {}",
        s.id,
        s.pool_base,
        s.pool_end(),
        s.elements,
        s.generation
    )?;
    for (i, w) in s.workers.iter().enumerate() {
        writeln!(o, "  worker {i:>3}  {w}")?;
    }
    if !s.queues.is_empty() {
        writeln!(o, "  priority map  {}", describe_map(&s.queues))?;
    }
    if let Some(g) = s.group {
        writeln!(o, "  multicast group {g}")?;
    }
    if let Some(up) = s.upstream {
        writeln!(
            o,
            "  upstream  switch {}  job {}  as member {}  (sent up {}, again {})",
            up.switch, up.job, up.member, c.upstream, c.upstream_resent
        )?;
        if let Some(aux) = up.aux {
            writeln!(
                o,
                "  auxiliary path  via {}  busy bound {}  queue length {}  (detours sent {})",
                aux.via, aux.busy_bound, aux.queue_length, c.detours_sent
            )?;
        }
    }
    for d in &s.detours {
        writeln!(o, "  detours of member {} from relay {}", d.member, d.relay)?;
    }
    if !s.detours.is_empty() {
        writeln!(o, "  detours taken {}", c.detours_taken)?;
    }
    writeln!(
        o,
        "  contributions {}  results {}  resent {}  duplicates {}  dropped {}",
        c.contributions, c.results, c.resent_results, c.duplicates, c.dropped
    )
}

fn write_pools(o: &mut dyn Write, p: &PoolMap) -> std::io::Result<()> {
    writeln!(o, "{:>13}  {:>6}  OWNER", "SLOTS", "SIZE")?;
    for r in &p.ranges {
        let owner = r.job.map_or("free".to_string(), |j| format!("job {j}"));
        writeln!(
            o,
            "{:>13}  {:>6}  {owner}",
            format!("[{}, {})", r.base, r.base + r.size),
            r.size
        )?;
    }
    writeln!(o, "{} of {} slots free", p.free, p.slots)
}

fn write_counters(o: &mut dyn Write, c: &Counters, jobs: &[JobInfo]) -> std::io::Result<()> {
    writeln!(
        o,
        "rx {} packets {} bytes; tx {} packets {} bytes",
        c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes
    )?;
    writeln!(
        o,
        "injected: {} duplicates, {} reorders; relayed {} detours; {} neighbours refused",
        c.injected_duplicates, c.injected_reorders, c.relayed, c.neighbours_refused
    )?;
    writeln!(o, "drops:")?;
    for r in DropReason::ALL {
        writeln!(o, "  {:<18} {}", r.name(), c.dropped(r))?;
    }
    write_jobs(o, jobs)
}

/// `default` (the line rate) or a positive number of Gbit/s.
fn parse_port_rate(rate: &str) -> Result<Option<u64>> {
    if rate == "default" {
        return Ok(None);
    }
    match rate.parse::<f64>() {
        Ok(g) if g.is_finite() && g > 0.0 => Ok(Some((g * 1e9) as u64)),
        _ => Err(ControlError::Api(ApiError::Invalid {
            message: format!(
                "port rate {rate:?}: give Gbit/s (e.g. 0.05 for 50 Mbit/s) or `default`"
            ),
        })),
    }
}

fn write_queues(o: &mut dyn Write, r: &QueueReport) -> std::io::Result<()> {
    match r.link {
        Some(l) => writeln!(
            o,
            "ports paced at {} Gbit/s, {} bytes per queue",
            l.rate_bps as f64 / 1e9,
            l.queue_bytes
        )?,
        None => writeln!(o, "ports not paced (no line rate): queues never build")?,
    }
    if r.map.is_empty() {
        writeln!(o, "every priority class on queue 0")?;
    } else {
        let map: Vec<String> = r
            .map
            .iter()
            .map(|m| format!("{}->{}", m.class, m.queue))
            .collect();
        writeln!(o, "class -> queue: {} (others on 0)", map.join(" "))?;
    }
    writeln!(
        o,
        "{:<22} {:>5} {:>10} {:>12} {:>8} {:>10} {:>10}",
        "port", "queue", "packets", "bytes", "drops", "depth", "max depth"
    )?;
    for p in r
        .ports
        .iter()
        .filter(|p| r.link.is_some_and(|l| l.rate_bps != p.rate_bps))
    {
        writeln!(
            o,
            "port {} paced at {} Gbit/s",
            p.port,
            p.rate_bps as f64 / 1e9
        )?;
    }
    for p in &r.ports {
        if let Some(rate) = p.train_rate_bps() {
            writeln!(
                o,
                "port {} measured {:.3} Gbit/s back to back ({} bytes timed)",
                p.port,
                rate / 1e9,
                p.train_bytes
            )?;
        }
    }
    for p in &r.ports {
        for (q, s) in p.queues.iter().enumerate() {
            if s.tx_packets + s.drops + s.max_depth_bytes as u64 == 0 {
                continue;
            }
            writeln!(
                o,
                "{:<22} {:>5} {:>10} {:>12} {:>8} {:>10} {:>10}",
                p.port.to_string(),
                q,
                s.tx_packets,
                s.tx_bytes,
                s.drops,
                s.depth_bytes,
                s.max_depth_bytes
            )?;
        }
    }
    Ok(())
}
