//! [`TofinoTarget`]: a job on a Tofino running p4/tna, installed through
//! BF Runtime in p4/README.md's order ("Installing a job"): the pool's
//! bitmaps zeroed (the TNA program has no incarnation check), one PRE node
//! per worker and the job's multicast group, the result receivers, the
//! worker entries, and the job entry last, so that no packet is admitted
//! before the rest is in place. What is installed is read back from the
//! switch, the source of truth, as the bmv2 target does.
//!
//! p4/tna has no aggregation trees, detours or per-job queue maps, so a
//! job asking for one is refused with the reason before anything is
//! written. The result group's relay entries (after the job entry) and
//! groups made by hand are target/groups.rs's; the switch-wide class ->
//! queue map and the ports' strict priority are target/queues.rs's.

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::Duration;

use inagg_switch_api::counters::{Counters, JobCounters};
use inagg_switch_api::{ApiError, JobError};

use super::bfrt_info::BfrtInfo;
use super::client::Client;
use super::entry::{update, ReadEntry};
use super::proto::bfrt_proto as bfrt;
use crate::bmv2::topology::{Host, Topology};
use crate::registry::{refuse, BoxedTarget, ConnectOptions, Registered};
use crate::target::{ControlError, QueueReport, Result, Target};
use crate::{JobInfo, JobSpec, PoolMap, SwitchInfo};

use bfrt::update::Type::{Delete, Insert, Modify};

mod groups;
mod queues;
use queues::TmTables;

/// Table names, as bf-p4c writes them into bf-rt.json for p4/tna.
pub mod names {
    /// One entry per job.
    pub const JOB_TABLE: &str = "pipe.InaggIngress.admission.job_table";
    /// One entry per worker of each job.
    pub const WORKER_TABLE: &str = "pipe.InaggIngress.admission.worker_table";
    /// Where each worker's copy of a result goes.
    pub const RESULT_RECEIVERS: &str = "pipe.InaggEgress.result_rewrite.result_receivers";
    /// The slot bitmaps, zeroed over a pool before its job is installed.
    pub const BITMAPS: [&str; 2] = [
        "pipe.InaggIngress.slot_state.bitmap_lo",
        "pipe.InaggIngress.slot_state.bitmap_hi",
    ];
    /// Each set's round (weight, complete; two per slot), zeroed with the
    /// bitmaps: an earlier job's complete round in an empty set would
    /// otherwise answer a query by the bit-taken-out rule (p4/README.md,
    /// "Differences from the emulator").
    pub const ROUNDS: &str = "pipe.InaggIngress.slot_state.rounds";
    /// The accumulator pairs' registers (`...accumulators.pair_00.values`;
    /// built for two passes, the second half in `accumulators_second`): K
    /// is twice their number.
    pub fn is_pair(table: &str) -> bool {
        table.starts_with("pipe.InaggIngress.accumulators")
            && table.contains(".pair_")
            && table.ends_with(".values")
    }
    /// Groups that relay group datagrams (target/groups.rs).
    pub const GROUP_TABLE: &str = "pipe.InaggIngress.group_relay.group_table";
    /// Their members (ingress).
    pub const MEMBER_TABLE: &str = "pipe.InaggIngress.group_relay.member_table";
    /// Where each member's copy goes (egress).
    pub const GROUP_RECEIVERS: &str = "pipe.InaggEgress.group_rewrite.group_receivers";
    /// Per group id: group datagrams admitted.
    pub const GROUP_PACKETS: &str = "pipe.InaggIngress.group_packets";
    /// Per group id: copies of them sent.
    pub const GROUP_COPIES: &str = "pipe.InaggEgress.group_copies";
    /// Priority class -> egress queue.
    pub const PRIORITY_TO_QUEUE: &str = "pipe.InaggIngress.queue_select.priority_to_queue";
    /// The driver's multicast tables.
    pub const PRE_NODE: &str = "$pre.node";
    /// A multicast group and its nodes.
    pub const PRE_MGID: &str = "$pre.mgid";
    /// Switch-wide counters.
    pub const RX: &str = "pipe.InaggIngress.rx";
    /// Results and copies sent.
    pub const TX: &str = "pipe.InaggEgress.tx";
    /// Drops by reason.
    pub const DROPS: &str = "pipe.InaggIngress.drops";
    /// Per-job counters: (counter, what it counts).
    pub const JOB_COUNTERS: [&str; 6] = [
        "pipe.InaggIngress.job_contributions",
        "pipe.InaggIngress.job_results",
        "pipe.InaggIngress.job_resent_results",
        "pipe.InaggIngress.job_duplicates",
        "pipe.InaggIngress.job_dropped",
        "pipe.InaggIngress.job_queries",
    ];
}
use names::*;

/// A job the program cannot take (the operator's to change).
fn invalid(message: String) -> ControlError {
    ControlError::Api(ApiError::Invalid { message })
}

/// The most workers a TNA job has: the bitmap is two 32-bit halves.
pub const MAX_WORKERS: usize = 64;

/// How to reach and set up the switch.
#[derive(Debug, Clone)]
pub struct TofinoOptions {
    /// bf_switchd's BF Runtime server (gRPC, port 50052 by default).
    pub addr: SocketAddr,
    /// The device id.
    pub device_id: u32,
    /// The client id this connection subscribes with.
    pub client_id: u32,
    /// The program's name on the switch (bf-p4c's, from the P4 file: inagg).
    pub p4_name: String,
    /// The directory bf-p4c wrote (`p4/build/tna`: bf-rt.json, and
    /// pipe/context.json with pipe/tofino.bin or tofino2.bin): pushed to
    /// the switch. Without it, the client binds to the program it runs.
    pub program: Option<PathBuf>,
    /// Worker ports and MACs; needed to create jobs.
    pub topology: Option<Topology>,
    /// Bound on connecting, the subscription and every call.
    pub timeout: Duration,
}

/// Tofino in the registry of targets.
pub const REGISTERED: Registered = Registered {
    name: "tofino",
    about: "bf_switchd (a Tofino, or the Tofino model) running p4/tna, over BF Runtime",
    default_addr: SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 50052),
    files: "--topology (workers' ports and MACs); --program (bf-p4c's output) to push it",
    says_data_addr: false,
    connect: connect_registered,
};

/// Connects from the command line's options; bmv2's are refused.
fn connect_registered(o: &ConnectOptions) -> Result<BoxedTarget> {
    if o.p4info.is_some() || o.bmv2_json.is_some() {
        return Err(refuse(
            "tofino",
            "--p4info and --bmv2-json (bmv2's); give the program with --program",
        ));
    }
    if o.tls.is_some() {
        return Err(refuse(
            "tofino",
            "--switch-tls options: bf_switchd's BF Runtime server has no TLS of its own; \
             reach it over a trusted management network or a tunnel",
        ));
    }
    let defaults = TofinoOptions::default();
    let device_id = match o.device_id {
        Some(id) => u32::try_from(id).map_err(|_| {
            ControlError::Protocol(format!("--device-id {id}: at most {}", u32::MAX))
        })?,
        None => defaults.device_id,
    };
    let options = TofinoOptions {
        addr: o.addr.unwrap_or(defaults.addr),
        device_id,
        client_id: o.client_id.unwrap_or(defaults.client_id),
        program: o.program.clone(),
        topology: o.topology.as_deref().map(Topology::load).transpose()?,
        ..defaults
    };
    Ok(Box::new(TofinoTarget::connect(options)?))
}

impl Default for TofinoOptions {
    fn default() -> Self {
        TofinoOptions {
            addr: REGISTERED.default_addr,
            device_id: 0,
            client_id: 1,
            p4_name: "inagg".into(),
            program: None,
            topology: None,
            timeout: Duration::from_secs(10),
        }
    }
}

/// A subscribed connection to bf_switchd, bound to p4/tna.
#[derive(Debug)]
pub struct TofinoTarget {
    client: Client,
    info: BfrtInfo,
    topology: Option<Topology>,
    /// SLOTS: the bitmap registers' size.
    slots: u32,
    /// K: twice the accumulator pairs.
    elements: u16,
    /// The traffic manager's tables for this chip.
    tm: TmTables,
}

/// A program directory's files as a pipeline to push.
pub fn program_config(dir: &Path, p4_name: &str) -> Result<bfrt::ForwardingPipelineConfig> {
    let read = |rel: &str| {
        let path = dir.join(rel);
        crate::files::read_limited(&path, crate::files::PROGRAM_LIMIT).map_err(|e| {
            ControlError::Config {
                path: path.display().to_string(),
                message: format!("cannot read: {e} (is {} bf-p4c's output?)", dir.display()),
            }
        })
    };
    let binary = ["pipe/tofino.bin", "pipe/tofino2.bin"]
        .into_iter()
        .find(|b| dir.join(b).exists())
        .ok_or_else(|| ControlError::Config {
            path: dir.display().to_string(),
            message: "no pipe/tofino.bin or pipe/tofino2.bin: build with p4/build.sh tna".into(),
        })?;
    Ok(bfrt::ForwardingPipelineConfig {
        p4_name: p4_name.into(),
        bfruntime_info: read("bf-rt.json")?,
        profiles: vec![bfrt::forwarding_pipeline_config::Profile {
            profile_name: "pipe".into(),
            context: read("pipe/context.json")?,
            binary: read(binary)?,
            pipe_scope: vec![0, 1, 2, 3],
        }],
    })
}

/// The switch's descriptions of `p4_name` and of its fixed tables.
fn info_from_switch(client: &Client, p4_name: &str) -> Result<BfrtInfo> {
    let reply = client.pipeline()?;
    let program = reply
        .config
        .iter()
        .find(|c| c.p4_name == p4_name)
        .ok_or_else(|| {
            let running: Vec<&str> = reply.config.iter().map(|c| c.p4_name.as_str()).collect();
            ControlError::Protocol(format!(
                "the switch at {} runs no program {p4_name} (it runs {running:?}); push it \
                 with --program p4/build/tna",
                client.addr()
            ))
        })?;
    let mut info = BfrtInfo::parse(&program.bfruntime_info, "the switch's bf-rt.json")?;
    let fixed = reply.non_p4_config.unwrap_or_default().bfruntime_info;
    info.merge(BfrtInfo::parse(&fixed, "the switch's fixed tables")?)?;
    Ok(info)
}

/// SLOTS and K of the program `info` describes, after checking that it
/// has every table the target writes or reads.
fn compiled(info: &BfrtInfo) -> Result<(u32, u16)> {
    let mut needed = vec![
        JOB_TABLE,
        WORKER_TABLE,
        RESULT_RECEIVERS,
        GROUP_TABLE,
        MEMBER_TABLE,
        GROUP_RECEIVERS,
        PRIORITY_TO_QUEUE,
        PRE_NODE,
        PRE_MGID,
    ];
    needed.extend([RX, TX, DROPS, GROUP_PACKETS, GROUP_COPIES]);
    needed.extend(BITMAPS);
    needed.push(ROUNDS);
    needed.extend(JOB_COUNTERS);
    for name in needed {
        info.table(name)?;
    }
    let slots = u32::try_from(info.table(BITMAPS[0])?.size).unwrap_or(u32::MAX);
    let pairs = info.names().filter(|n| is_pair(n)).count();
    let elements = u16::try_from(pairs * 2)
        .ok()
        .filter(|&k| k > 0)
        .ok_or_else(|| info.missing(format!("{pairs} accumulator pairs")))?;
    Ok((slots, elements))
}

impl TofinoTarget {
    /// Connects, subscribes, pushes the program when given (else binds to
    /// the one running) and resolves every name through the switch's own
    /// descriptions.
    pub fn connect(options: TofinoOptions) -> Result<TofinoTarget> {
        let config = match &options.program {
            Some(dir) => Some(program_config(dir, &options.p4_name)?),
            None => None,
        };
        let mut client = Client::connect(
            options.addr,
            options.device_id,
            options.client_id,
            options.timeout,
        )?;
        client.set_pipeline(&options.p4_name, config)?;
        let info = info_from_switch(&client, &options.p4_name)?;
        let (slots, elements) = compiled(&info)?;
        let tm = TmTables::resolve(&info)?;
        Ok(TofinoTarget {
            client,
            info,
            topology: options.topology,
            slots,
            elements,
            tm,
        })
    }

    fn topology(&self) -> Result<&Topology> {
        self.topology.as_ref().ok_or_else(|| ControlError::Config {
            path: "--topology".into(),
            message: "creating a job on a Tofino needs the topology file: each worker's switch \
                      port and MAC (see `inagg ctl --help`)"
                .into(),
        })
    }

    /// What p4/tna cannot do, refused before anything is written.
    fn check_supported(&self, spec: &JobSpec) -> Result<()> {
        let refuse = |what: &str| {
            Err(invalid(format!(
                "job {}: {what}; p4/tna has none (docs/PROTOCOL.md: use the emulator or bmv2)",
                spec.id
            )))
        };
        if spec.upstream.is_some() {
            return refuse("an aggregation tree's parent (upstream)");
        }
        if !spec.detours.is_empty() {
            return refuse("detours");
        }
        if spec.child_switches != 0 {
            return refuse("child switches (a tree's root or inner node)");
        }
        if !spec.queues.is_empty() {
            return refuse("a per-job queue map");
        }
        if spec.workers.len() > MAX_WORKERS {
            return refuse(&format!(
                "{} workers (at most {MAX_WORKERS})",
                spec.workers.len()
            ));
        }
        if spec.elements != self.elements {
            return Err(invalid(format!(
                "job {}: {} elements per packet, but the switch's program was compiled with \
                 K = {}; every job's K must equal it",
                spec.id, spec.elements, self.elements
            )));
        }
        Ok(())
    }

    /// The job's multicast group id.
    fn group(spec: &JobSpec) -> u16 {
        spec.group.unwrap_or(spec.id.wrapping_add(1))
    }

    /// PRE node id of job `job`'s worker `w`: unique per (job, worker),
    /// below 2^22 (a group's are above, target/groups.rs).
    fn node(job: u16, w: usize) -> u32 {
        (u32::from(job) << 6) | w as u32
    }

    /// Multicast group `mgid` with one PRE node per `(node id, port)`, the
    /// node's replication id its index (worker or member id).
    fn pre_entries(&self, mgid: u16, nodes: &[(u32, u16)]) -> Result<Vec<bfrt::Update>> {
        let mut updates = Vec::new();
        for (rid, &(id, port)) in nodes.iter().enumerate() {
            let node = self
                .info
                .entry(PRE_NODE)?
                .key("$MULTICAST_NODE_ID", u64::from(id))?
                .set("$MULTICAST_RID", rid as u64)?
                .ints("$MULTICAST_LAG_ID", vec![])?
                .ints("$DEV_PORT", vec![u32::from(port)])?;
            updates.push(update(Insert, node.build()));
        }
        let ids: Vec<u32> = nodes.iter().map(|&(id, _)| id).collect();
        let group = self
            .info
            .entry(PRE_MGID)?
            .key("$MGID", u64::from(mgid))?
            .bools("$MULTICAST_NODE_L1_XID_VALID", vec![false; ids.len()])?
            .ints("$MULTICAST_NODE_L1_XID", vec![0; ids.len()])?
            .ints("$MULTICAST_NODE_ID", ids)?;
        updates.push(update(Insert, group.build()));
        Ok(updates)
    }

    /// Deletes multicast group `mgid` and then its nodes.
    fn pre_deletes(
        &self,
        mgid: u16,
        nodes: impl Iterator<Item = u32>,
    ) -> Result<Vec<bfrt::Update>> {
        let group = self.info.entry(PRE_MGID)?.key("$MGID", u64::from(mgid))?;
        let mut updates = vec![update(Delete, group.build())];
        for id in nodes {
            let node = self
                .info
                .entry(PRE_NODE)?
                .key("$MULTICAST_NODE_ID", u64::from(id))?;
            updates.push(update(Delete, node.build()));
        }
        Ok(updates)
    }

    /// Zeroes the pool's slots in the bitmaps (one entry a slot) and its
    /// sets in `rounds` (two a slot): a new job starts on clean slots.
    fn pool_zeros(&self, spec: &JobSpec) -> Result<Vec<bfrt::Update>> {
        let slots =
            u64::from(spec.pool_base)..u64::from(spec.pool_base) + u64::from(spec.pool_size);
        let mut updates = Vec::new();
        for name in BITMAPS {
            updates.extend(self.register_zeros(name, slots.clone())?);
        }
        updates.extend(self.register_zeros(ROUNDS, slots.start * 2..slots.end * 2)?);
        Ok(updates)
    }

    /// Every cell of register `name` at the indices given, written 0.
    fn register_zeros(
        &self,
        name: &str,
        indices: std::ops::Range<u64>,
    ) -> Result<Vec<bfrt::Update>> {
        let cells: Vec<String> = self
            .info
            .table(name)?
            .data_fields()
            .iter()
            .map(|f| f.name.clone())
            .collect();
        let mut updates = Vec::new();
        for index in indices {
            let mut e = self.info.entry(name)?.key("$REGISTER_INDEX", index)?;
            for cell in &cells {
                e = e.set(cell, 0)?;
            }
            updates.push(update(Modify, e.build()));
        }
        Ok(updates)
    }

    fn install_entries(
        &self,
        spec: &JobSpec,
        hosts: &[(SocketAddrV4, Host)],
    ) -> Result<Vec<bfrt::Update>> {
        let group = Self::group(spec);
        let nodes: Vec<(u32, u16)> = hosts
            .iter()
            .enumerate()
            .map(|(w, (_, host))| (Self::node(spec.id, w), host.port))
            .collect();
        let mut updates = self.pre_entries(group, &nodes)?;
        let id = u64::from(spec.id);
        updates.extend(self.receiver_entries(&RECEIVERS, id, hosts)?);
        updates.extend(self.sender_entries(&WORKERS, id, hosts)?);
        let job = self
            .info
            .entry(JOB_TABLE)?
            .key("job", u64::from(spec.id))?
            .action("set_job")?
            .set("worker_count", spec.workers.len() as u64)?
            .set("pool_base", u64::from(spec.pool_base))?
            .set("pool_size", u64::from(spec.pool_size))?
            .set("elements", u64::from(spec.elements))?
            .set("generation", u64::from(spec.generation))?
            .set("mcast_grp", u64::from(group))?;
        updates.push(update(Insert, job.build()));
        Ok(updates)
    }

    /// `(t.key = id, rid = i) -> t.action(MAC, address, port)` for each
    /// endpoint i: where its multicast copy goes (result_receivers,
    /// group_receivers).
    fn receiver_entries(
        &self,
        t: &Endpoints,
        id: u64,
        hosts: &[(SocketAddrV4, Host)],
    ) -> Result<Vec<bfrt::Update>> {
        let mut updates = Vec::new();
        for (i, (addr, host)) in hosts.iter().enumerate() {
            let entry = self
                .info
                .entry(t.table)?
                .key(t.key, id)?
                .key("rid", i as u64)?
                .action(t.action)?
                .set("dst_mac", host.mac.to_u64())?
                .set("dst_addr", u64::from(u32::from(*addr.ip())))?
                .set("dst_port", u64::from(addr.port()))?;
            updates.push(update(Insert, entry.build()));
        }
        Ok(updates)
    }

    /// `(t.key = id, port, address, UDP port) -> t.action(t.param = i)` for
    /// each endpoint i: who a packet is from (worker_table, member_table).
    fn sender_entries(
        &self,
        t: &Endpoints,
        id: u64,
        hosts: &[(SocketAddrV4, Host)],
    ) -> Result<Vec<bfrt::Update>> {
        let mut updates = Vec::new();
        for (i, (addr, host)) in hosts.iter().enumerate() {
            let entry = self
                .info
                .entry(t.table)?
                .key(t.key, id)?
                .key("ingress_port", u64::from(host.port))?
                .key("src_addr", u64::from(u32::from(*addr.ip())))?
                .key("src_port", u64::from(addr.port()))?
                .action(t.action)?
                .set(t.param, i as u64)?;
            updates.push(update(Insert, entry.build()));
        }
        Ok(updates)
    }

    /// Every entry of table `name`.
    fn read_all(&self, name: &str) -> Result<Vec<ReadEntry<'_>>> {
        let table = self.info.table(name)?;
        let all = self.info.entry(name)?.build();
        Ok(ReadEntry::of(table, self.client.read(name, vec![all])?))
    }

    /// The installed jobs, read back from job_table and worker_table.
    fn installed(&self) -> Result<Vec<JobSpec>> {
        specs(&self.read_all(JOB_TABLE)?, &self.read_all(WORKER_TABLE)?)
    }

    /// Packets and bytes of each (counter, index) cell, in one read.
    fn read_counters(&self, cells: &[(&str, u64)]) -> Result<Vec<(u64, u64)>> {
        let mut entities = Vec::new();
        for &(counter, index) in cells {
            let mut cell = self
                .info
                .entry(counter)?
                .key("$COUNTER_INDEX", index)?
                .build();
            if let Some(bfrt::entity::Entity::TableEntry(t)) = &mut cell.entity {
                t.table_flags = Some(bfrt::TableFlags {
                    from_hw: true,
                    key_only: false,
                });
            }
            entities.push(cell);
        }
        let read = self.client.read("counters", entities)?;
        let mut counters: Vec<&str> = cells.iter().map(|&(counter, _)| counter).collect();
        counters.sort_unstable();
        counters.dedup();
        let mut found = HashMap::new();
        for counter in counters {
            let table = self.info.table(counter)?;
            for e in ReadEntry::of(table, read.clone()) {
                let index = e.key("$COUNTER_INDEX")?;
                let value = (e.get("$COUNTER_SPEC_PKTS")?, e.get("$COUNTER_SPEC_BYTES")?);
                found.insert((counter, index), value);
            }
        }
        cells
            .iter()
            .map(|&(counter, index)| {
                found.get(&(counter, index)).copied().ok_or_else(|| {
                    ControlError::Protocol(format!("the switch returned no {counter}[{index}]"))
                })
            })
            .collect()
    }

    /// Each job's counters, in one read.
    fn job_counters(&self, ids: &[u16]) -> Result<Vec<JobCounters>> {
        let cells: Vec<(&str, u64)> = ids
            .iter()
            .flat_map(|&id| JOB_COUNTERS.map(|name| (name, u64::from(id))))
            .collect();
        let values = self.read_counters(&cells)?;
        Ok(values
            .chunks(JOB_COUNTERS.len())
            .map(|v| JobCounters {
                contributions: v[0].0,
                results: v[1].0,
                resent_results: v[2].0,
                duplicates: v[3].0,
                dropped: v[4].0,
                queries: v[5].0,
                ..JobCounters::default()
            })
            .collect())
    }

    fn zero_counter(&self, counter: &str, index: u64) -> Result<bfrt::Update> {
        let cell = self
            .info
            .entry(counter)?
            .key("$COUNTER_INDEX", index)?
            .set("$COUNTER_SPEC_PKTS", 0)?
            .set("$COUNTER_SPEC_BYTES", 0)?;
        Ok(update(Modify, cell.build()))
    }
}

/// A table of endpoints by (job or group, ...): its name, its key naming
/// the job or group, its action and that action's id parameter.
struct Endpoints {
    table: &'static str,
    key: &'static str,
    action: &'static str,
    param: &'static str,
}

/// Where each worker's copy of a job's result goes.
const RECEIVERS: Endpoints = Endpoints {
    table: RESULT_RECEIVERS,
    key: "job",
    action: "set_receiver",
    param: "",
};

/// Which worker of a job a contribution is from.
const WORKERS: Endpoints = Endpoints {
    table: WORKER_TABLE,
    key: "job",
    action: "set_worker",
    param: "worker",
};

/// The jobs that job_table's and worker_table's entries describe.
fn specs(jobs: &[ReadEntry<'_>], worker_entries: &[ReadEntry<'_>]) -> Result<Vec<JobSpec>> {
    let mut workers: BTreeMap<u16, BTreeMap<u64, SocketAddr>> = BTreeMap::new();
    for e in worker_entries {
        let addr = Ipv4Addr::from(e.key("src_addr")? as u32);
        let port = e.key("src_port")? as u16;
        workers
            .entry(e.key("job")? as u16)
            .or_default()
            .insert(e.get("worker")?, SocketAddr::from((addr, port)));
    }
    let mut specs = Vec::new();
    for e in jobs {
        let id = e.key("job")? as u16;
        let group = e.get("mcast_grp")? as u16;
        specs.push(JobSpec {
            // The TNA program has no trees.
            child_switches: 0,
            id,
            workers: workers
                .remove(&id)
                .unwrap_or_default()
                .into_values()
                .collect(),
            pool_base: e.get("pool_base")? as u32,
            pool_size: e.get("pool_size")? as u32,
            elements: e.get("elements")? as u16,
            generation: e.get("generation")? as u16,
            queues: Vec::new(),
            group: (group != id.wrapping_add(1)).then_some(group),
            upstream: None,
            detours: Vec::new(),
        });
    }
    specs.sort_by_key(|j| j.id);
    Ok(specs)
}

impl Target for TofinoTarget {
    fn kind(&self) -> &'static str {
        "tofino"
    }

    fn info(&mut self) -> Result<SwitchInfo> {
        Ok(SwitchInfo {
            slots: self.slots,
            max_elements: self.elements,
            fixed_elements: true,
            memory: u64::MAX,
            memory_used: 0,
            jobs: self.read_all(JOB_TABLE)?.len(),
        })
    }

    fn create_job(&mut self, spec: &JobSpec) -> Result<()> {
        self.check_supported(spec)?;
        let topology = self.topology()?;
        let hosts = spec
            .workers
            .iter()
            .enumerate()
            .map(|(w, &addr)| {
                let host = topology.host(spec.id, w, addr)?;
                match addr {
                    SocketAddr::V4(v4) => Ok((v4, host)),
                    SocketAddr::V6(_) => Err(invalid(format!(
                        "job {}: worker {w} at {addr}: p4/tna matches IPv4 sources",
                        spec.id
                    ))),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let group = Self::group(spec);
        Self::check_group_free(&[], &self.group_entries()?, group)?;
        let zeros = self.pool_zeros(spec)?;
        let mut ports: Vec<u16> = hosts.iter().map(|(_, h)| h.port).collect();
        ports.sort_unstable();
        ports.dedup();
        let priority = self.strict_priority(&ports)?;
        let mut entries = self.install_entries(spec, &hosts)?;
        // The result group's relay, after the job entry (target/groups.rs).
        entries.extend(self.relay_entries(group, &hosts)?);
        self.client
            .write("zero the pool's bitmaps and rounds", zeros)?;
        self.client
            .write("strict-priority queues on the workers' ports", priority)?;
        self.client
            .write(&format!("install job {}", spec.id), entries)
    }

    fn delete_job(&mut self, id: u16) -> Result<()> {
        let workers = self.read_all(WORKER_TABLE)?;
        let spec = specs(&self.read_all(JOB_TABLE)?, &workers)?
            .into_iter()
            .find(|j| j.id == id)
            .ok_or(ControlError::Job(JobError::UnknownJob { id }))?;
        let job_key = self
            .info
            .entry(JOB_TABLE)?
            .key("job", u64::from(id))?
            .build();
        // The result group's relay first, its group_table entry leading.
        let mut first = self.relay_deletes(&self.relay_state()?, Self::group(&spec))?;
        first.push(update(Delete, job_key));
        self.client.write(&format!("delete job {id}"), first)?;
        let mut rest = Vec::new();
        for e in &workers {
            if e.key("job")? == u64::from(id) {
                rest.push(update(Delete, e.key_entity()));
            }
        }
        for w in 0..spec.workers.len() {
            let receiver = self
                .info
                .entry(RESULT_RECEIVERS)?
                .key("job", u64::from(id))?
                .key("rid", w as u64)?;
            rest.push(update(Delete, receiver.build()));
        }
        let nodes = (0..spec.workers.len()).map(|w| Self::node(id, w));
        rest.extend(self.pre_deletes(Self::group(&spec), nodes)?);
        self.client
            .write(&format!("remove job {id}'s entries"), rest)
    }

    fn job(&mut self, id: u16) -> Result<JobInfo> {
        let spec = self
            .installed()?
            .into_iter()
            .find(|j| j.id == id)
            .ok_or(ControlError::Job(JobError::UnknownJob { id }))?;
        let counters = self.job_counters(&[id])?.remove(0);
        Ok(JobInfo { spec, counters })
    }

    fn jobs(&mut self) -> Result<Vec<JobInfo>> {
        let specs = self.installed()?;
        let ids: Vec<u16> = specs.iter().map(|s| s.id).collect();
        let counters = self.job_counters(&ids)?;
        Ok(specs
            .into_iter()
            .zip(counters)
            .map(|(spec, counters)| JobInfo { spec, counters })
            .collect())
    }

    fn pools(&mut self) -> Result<PoolMap> {
        let jobs = self.installed()?;
        Ok(PoolMap::new(self.slots, &jobs))
    }

    fn counters(&mut self) -> Result<Counters> {
        let mut cells = vec![(RX, 0), (TX, 0)];
        cells.extend((0..16).map(|reason| (DROPS, reason)));
        let values = self.read_counters(&cells)?;
        let mut c = Counters::default();
        (c.rx_packets, c.rx_bytes) = values[0];
        (c.tx_packets, c.tx_bytes) = values[1];
        for (count, value) in c.drops.iter_mut().zip(&values[2..]) {
            *count = value.0;
        }
        Ok(c)
    }

    fn groups(&mut self) -> Result<Vec<inagg_switch_api::GroupInfo>> {
        self.all_groups()
    }

    fn create_group(&mut self, spec: &inagg_switch_api::GroupSpec) -> Result<()> {
        self.install_group(spec)
    }

    fn delete_group(&mut self, id: u16) -> Result<()> {
        self.remove_group(id)
    }

    fn set_priority_queue(&mut self, class: u8, queue: u8) -> Result<()> {
        self.map_class(class, queue)
    }

    /// The class -> queue map, and the drops and depths of the queues of
    /// every installed worker's port (the first worker on a port names it).
    fn queues(&mut self) -> Result<QueueReport> {
        let mut ports: Vec<(u16, SocketAddr)> = Vec::new();
        if let Some(topology) = &self.topology {
            for job in self.installed()? {
                for (w, &addr) in job.workers.iter().enumerate() {
                    let port = topology.host(job.id, w, addr)?.port;
                    if !ports.iter().any(|&(p, _)| p == port) {
                        ports.push((port, addr));
                    }
                }
            }
        }
        ports.sort_unstable();
        Ok(QueueReport {
            map: self.queue_map()?,
            link: None,
            ports: self.port_stats(&ports)?,
        })
    }

    fn reset_counters(&mut self) -> Result<()> {
        let mut updates = vec![self.zero_counter(RX, 0)?, self.zero_counter(TX, 0)?];
        for reason in 0..16 {
            updates.push(self.zero_counter(DROPS, reason)?);
        }
        for job in self.installed()? {
            for name in JOB_COUNTERS {
                updates.push(self.zero_counter(name, u64::from(job.id))?);
            }
        }
        self.client.write("reset counters", updates)
    }
}
