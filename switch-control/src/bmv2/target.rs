//! [`Bmv2Target`]: inagg's control plane for `simple_switch_grpc` running
//! p4/v1model, over P4Runtime.
//!
//! A job is what p4/README.md ("Installing a job") says it is, written in
//! that order so that no packet is admitted before everything it needs is in
//! place:
//!
//! 1. multicast group job id + 1, one replica per worker (its switch port,
//!    replication id = worker id);
//! 2. result_receivers (job, worker id) -> set_receiver(MAC, address, port);
//! 3. worker_table (job, port, address, UDP port) -> set_worker(worker id);
//! 4. the job's per-job counters, and its group's, zeroed;
//! 5. job_table (job) -> set_job(n, base, size, K, generation, group,
//!    incarnation), with an incarnation never used before;
//! 6. the result group's relay entries, so that the workers can send each
//!    other group datagrams (target/relay.rs, which also installs groups
//!    made by hand).
//!
//! A job with an upstream (a node of an aggregation tree) also gets its
//! upstream_table and parent_table entries, and a job that takes detours
//! its detour_table entries, before its job_table entry (target/tree.rs,
//! target/detour.rs, which also installs relay entries).
//!
//! A failed write undoes the ones before it. Deleting goes the other way,
//! the relay's group_table entry first. Nothing is remembered between
//! calls: jobs, pools and the job count are read back from the switch's
//! tables every time, so several `inagg ctl` runs (or a restarted one) see
//! the same state.

use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use inagg_switch_api::counters::{Counters, DropReason, JobCounters};
use inagg_switch_api::detour::{RelayInfo, RelayKey, RelaySpec};
use inagg_switch_api::job::detours_unrelayed;
use inagg_switch_api::SwitchConfig;
use inagg_switch_api::{
    validate_job, ApiError, GroupInfo, GroupSpec, JobError, JobInfo, JobSpec, PoolMap, SwitchInfo,
};
use prost::Message;

use super::bytestring;
use super::client::{rpc_code, Client};
use super::p4info::{self, Field, ResultReceivers, Schema, WorkerTable};
use super::proto::p4::v1 as p4;
use super::topology::{Host, Topology};
use crate::registry::{refuse, BoxedTarget, ConnectOptions, Registered};
use crate::target::{ControlError, QueueReport, Result, Target};

mod detour;
mod queues;
mod relay;
mod tree;
use detour::{HopEntry, DETOURS, RELAYS};
use relay::GroupEntry;
use tree::UpstreamEntry;

/// gRPC canonical codes the target reacts to.
const NOT_FOUND: i32 = 5;
const ALREADY_EXISTS: i32 = 6;

/// How to reach and set up the switch.
#[derive(Debug, Clone)]
pub struct Bmv2Options {
    /// The P4Runtime server (`simple_switch_grpc -- --grpc-server-addr`).
    pub addr: SocketAddr,
    /// The P4Runtime device id (`simple_switch_grpc --device-id`).
    pub device_id: u64,
    /// Our election id: the highest connected one is the primary. None
    /// connects as an observer, which reads and never writes (nor pushes
    /// a pipeline), and leaves the switch's primary alone.
    pub election_id: Option<u128>,
    /// A binary P4Info to resolve names with; without it, the switch's
    /// installed pipeline's P4Info is used.
    pub p4info: Option<PathBuf>,
    /// The bmv2 JSON: with `p4info`, push this pipeline unless the switch
    /// already runs it (same cookie).
    pub bmv2_json: Option<PathBuf>,
    /// Worker ports and MACs; needed to create jobs.
    pub topology: Option<Topology>,
    /// Bound on connecting, arbitration and every call.
    pub timeout: Duration,
    /// TLS towards simple_switch_grpc (started with --grpc-server-ssl);
    /// in clear when `None`.
    pub tls: Option<inagg_netio::tls::ClientFiles>,
}

/// bmv2 in the registry of targets.
pub const REGISTERED: Registered = Registered {
    name: "bmv2",
    about: "simple_switch_grpc running p4/v1model, over P4Runtime",
    default_addr: SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9559),
    files: "--topology (workers' ports and MACs); --p4info and --bmv2-json to push the pipeline",
    says_data_addr: false,
    connect: connect_registered,
};

/// Connects from the command line's options; Tofino's are refused.
fn connect_registered(o: &ConnectOptions) -> Result<BoxedTarget> {
    if o.program.is_some() || o.client_id.is_some() {
        return Err(refuse(
            "bmv2",
            "--program and --client-id (Tofino's); give the pipeline with --p4info and --bmv2-json",
        ));
    }
    let defaults = Bmv2Options::default();
    let options = Bmv2Options {
        addr: o.addr.unwrap_or(defaults.addr),
        device_id: o.device_id.unwrap_or(defaults.device_id),
        election_id: match o.election_id {
            Some(id) => Some(u128::from(id)),
            None if o.observe => None,
            None => defaults.election_id,
        },
        p4info: o.p4info.clone(),
        bmv2_json: o.bmv2_json.clone(),
        topology: o.topology.as_deref().map(Topology::load).transpose()?,
        timeout: defaults.timeout,
        tls: o.tls.clone(),
    };
    Ok(Box::new(Bmv2Target::connect(options)?))
}

impl Default for Bmv2Options {
    fn default() -> Self {
        Bmv2Options {
            addr: REGISTERED.default_addr,
            device_id: 0,
            election_id: Some(1),
            p4info: None,
            bmv2_json: None,
            topology: None,
            timeout: Duration::from_secs(10),
            tls: None,
        }
    }
}

/// What happened to the pipeline when connecting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PipelineAction {
    /// No bmv2 JSON was given: the switch's pipeline was left alone.
    Untouched,
    /// The switch already ran the given pipeline (same cookie).
    AlreadyInstalled,
    /// The given pipeline was pushed (VERIFY_AND_COMMIT).
    Pushed,
}

/// A connection to simple_switch_grpc, primary for its device.
#[derive(Debug)]
pub struct Bmv2Target {
    client: Client,
    schema: Schema,
    topology: Option<Topology>,
    pipeline: PipelineAction,
    /// The last incarnation handed out; the next is one more.
    incarnation: u32,
}

/// Resolves the names through the P4Info of the pipeline the switch runs.
fn schema_from_switch(client: &Client) -> Result<Schema> {
    use p4::get_forwarding_pipeline_config_request::ResponseType;
    let source = format!(
        "device {} of the switch at {}",
        client.device_id(),
        client.addr()
    );
    let no_pipeline = |why: String| ControlError::P4Info {
        source_name: source.clone(),
        message: format!(
            "{why}; push inagg's pipeline with --p4info p4/build/v1model/inagg.p4info.bin \
             --bmv2-json p4/build/v1model/inagg.json"
        ),
    };
    let config = client
        .pipeline(ResponseType::P4infoAndCookie)
        .map_err(|e| no_pipeline(format!("cannot read the installed pipeline ({e})")))?;
    let info = config
        .and_then(|c| c.p4info)
        .filter(|i| !i.tables.is_empty())
        .ok_or_else(|| {
            no_pipeline(format!(
                "no pipeline on device {} (is that simple_switch_grpc's --device-id?)",
                client.device_id()
            ))
        })?;
    Schema::resolve(&info, &source)
}

/// FNV-1a, 64 bits: the pipeline cookie (stable across builds, unlike
/// std's hashers).
fn fnv1a(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

impl Bmv2Target {
    /// Loads the P4Info (from the file or the switch), connects, becomes
    /// primary and pushes the pipeline when asked to.
    pub fn connect(options: Bmv2Options) -> Result<Bmv2Target> {
        let file = match &options.p4info {
            Some(path) => {
                let info = p4info::load(path)?;
                let schema = Schema::resolve(&info, &path.display().to_string())?;
                Some((info, schema))
            }
            None => None,
        };
        let json = match (&options.bmv2_json, &file) {
            (Some(path), Some(_)) => Some(
                crate::files::read_limited(path, crate::files::PROGRAM_LIMIT).map_err(|e| {
                    ControlError::Config {
                        path: path.display().to_string(),
                        message: format!("cannot read: {e}"),
                    }
                })?,
            ),
            (Some(path), None) => {
                return Err(ControlError::Config {
                    path: path.display().to_string(),
                    message: "a bmv2 JSON is pushed together with its P4Info: give --p4info too"
                        .into(),
                })
            }
            (None, _) => None,
        };

        let client = Client::connect(
            options.addr,
            options.device_id,
            options.election_id,
            (options.timeout, options.tls.as_ref()),
        )?;

        let mut pipeline = PipelineAction::Untouched;
        if let (Some(json), Some((info, _))) = (&json, &file) {
            let info_bytes = info.encode_to_vec();
            let cookie = fnv1a(&[&info_bytes, json]);
            let installed = client
                .pipeline(p4::get_forwarding_pipeline_config_request::ResponseType::CookieOnly)
                .ok()
                .flatten()
                .and_then(|c| c.cookie)
                .map(|c| c.cookie);
            if installed == Some(cookie) {
                pipeline = PipelineAction::AlreadyInstalled;
            } else {
                client
                    .set_pipeline(p4::ForwardingPipelineConfig {
                        p4info: Some(info.clone()),
                        p4_device_config: json.clone(),
                        cookie: Some(p4::forwarding_pipeline_config::Cookie { cookie }),
                    })
                    .map_err(|e| match e {
                        // PI's answer when the server runs no such device.
                        ControlError::Rpc { op, code, message }
                            if message.contains("assign device") =>
                        {
                            ControlError::Rpc {
                                op,
                                code,
                                message: format!(
                                    "{message} {} (is that simple_switch_grpc's --device-id?)",
                                    options.device_id
                                ),
                            }
                        }
                        e => e,
                    })?;
                pipeline = PipelineAction::Pushed;
            }
        }

        let schema = match file {
            Some((_, schema)) => schema,
            None => schema_from_switch(&client)?,
        };

        let seed = std::collections::hash_map::RandomState::new()
            .hash_one((std::time::SystemTime::now(), std::process::id()));
        Ok(Bmv2Target {
            client,
            schema,
            topology: options.topology,
            pipeline,
            incarnation: seed as u32,
        })
    }

    /// The names resolved to ids.
    pub fn schema(&self) -> &Schema {
        &self.schema
    }

    /// What connecting did to the pipeline.
    pub fn pipeline_action(&self) -> PipelineAction {
        self.pipeline
    }

    /// The P4Runtime server.
    pub fn addr(&self) -> SocketAddr {
        self.client.addr()
    }

    /// A non-zero incarnation no installed job has. Successive calls never
    /// repeat one; the sequence starts at a random point per connection, so
    /// separate runs repeat each other's with a chance of about 2^-32 only.
    fn fresh_incarnation(&mut self, in_use: &[u32]) -> u32 {
        loop {
            self.incarnation = self.incarnation.wrapping_add(1);
            if self.incarnation != 0 && !in_use.contains(&self.incarnation) {
                return self.incarnation;
            }
        }
    }

    /// Reads the three tables a job lives in.
    fn read_state(&self) -> Result<SwitchState> {
        let s = &self.schema;
        let whole = |table_id| p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                table_id,
                ..Default::default()
            })),
        };
        let entities = self.client.read(
            "job_table, worker_table, result_receivers, group_table, member_table, \
             group_receivers, upstream_table, parent_table, relay_table, detour_table",
            vec![
                whole(s.job_table.id),
                whole(s.worker_table.id),
                whole(s.result_receivers.id),
                whole(s.group_table.id),
                whole(s.member_table.id),
                whole(s.group_receivers.id),
                whole(s.upstream_table.id),
                whole(s.parent_table.id),
                whole(s.relay_table.id),
                whole(s.detour_table.id),
            ],
        )?;
        let mut state = SwitchState::default();
        for entity in entities {
            let Some(p4::entity::Entity::TableEntry(e)) = entity.entity else {
                continue;
            };
            if e.table_id == s.job_table.id {
                let j = JobEntry::parse(s, &e)?;
                state.jobs.insert(j.job, j);
            } else if e.table_id == s.worker_table.id {
                state
                    .workers
                    .push(WorkerEntry::parse(&s.worker_table, &WORKERS, &e)?);
            } else if e.table_id == s.result_receivers.id {
                state.receivers.push(ReceiverEntry::parse(
                    &s.result_receivers,
                    &RESULT_RECEIVERS,
                    &e,
                )?);
            } else if e.table_id == s.group_table.id {
                let g = GroupEntry::parse(s, &e)?;
                state.groups.insert(g.group, g);
            } else if e.table_id == s.member_table.id {
                state
                    .members
                    .push(WorkerEntry::parse(&s.member_table, &MEMBERS, &e)?);
            } else if e.table_id == s.group_receivers.id {
                state.group_receivers.push(ReceiverEntry::parse(
                    &s.group_receivers,
                    &GROUP_RECEIVERS,
                    &e,
                )?);
            } else if e.table_id == s.upstream_table.id {
                let u = UpstreamEntry::parse(s, &e)?;
                state.upstreams.insert(u.job, u);
            } else if e.table_id == s.parent_table.id {
                state.parents.push(tree::parse_parent(s, &e)?);
            } else if e.table_id == s.relay_table.id {
                state
                    .relays
                    .push(HopEntry::parse(&s.relay_table, &RELAYS, &e)?);
            } else if e.table_id == s.detour_table.id {
                state
                    .detours
                    .push(HopEntry::parse(&s.detour_table, &DETOURS, &e)?);
            }
        }
        Ok(state)
    }

    /// Reads the per-job counters of `ids`.
    fn job_counters(&self, ids: &[u16]) -> Result<HashMap<u16, JobCounters>> {
        let per_job = self.schema.counters.per_job();
        let mut entities = Vec::new();
        for &id in ids {
            for c in per_job.iter().filter(|c| i64::from(id) < c.size) {
                entities.push(counter_entity(c.id, i64::from(id), None));
            }
        }
        let cells = if entities.is_empty() {
            HashMap::new()
        } else {
            self.read_counters("per-job counters", entities)?
        };
        let cell = |c: &p4info::Counter, id: u16| {
            cells
                .get(&(c.id, i64::from(id)))
                .map_or(0, |d| d.packet_count.max(0) as u64)
        };
        Ok(ids
            .iter()
            .map(|&id| {
                let [contributions, results, resent, duplicates, dropped, upstream, upstream_resent, detours_sent, detours_taken, queries] =
                    &per_job;
                (
                    id,
                    JobCounters {
                        contributions: cell(contributions, id),
                        results: cell(results, id),
                        resent_results: cell(resent, id),
                        duplicates: cell(duplicates, id),
                        dropped: cell(dropped, id),
                        upstream: cell(upstream, id),
                        upstream_resent: cell(upstream_resent, id),
                        detours_sent: cell(detours_sent, id),
                        detours_taken: cell(detours_taken, id),
                        queries: cell(queries, id),
                        // The v1model program does not count
                        // announcements (p4/README.md, "Differences from
                        // the emulator").
                        ..JobCounters::default()
                    },
                )
            })
            .collect())
    }

    fn read_counters(
        &self,
        op: &str,
        entities: Vec<p4::Entity>,
    ) -> Result<HashMap<(u32, i64), p4::CounterData>> {
        let mut cells = HashMap::new();
        for entity in self.client.read(op, entities)? {
            if let Some(p4::entity::Entity::CounterEntry(c)) = entity.entity {
                let index = c.index.map_or(0, |i| i.index);
                cells.insert((c.counter_id, index), c.data.unwrap_or_default());
            }
        }
        Ok(cells)
    }

    /// The installed jobs, with their incarnations.
    fn installed(&self) -> Result<(SwitchState, Vec<(JobSpec, u32)>)> {
        let state = self.read_state()?;
        let jobs = state
            .jobs
            .values()
            .map(|j| state.spec(j).map(|spec| (spec, j.incarnation)))
            .collect::<Result<Vec<_>>>()?;
        Ok((state, jobs))
    }

    /// Checks what the compiled program imposes beyond [`validate_job`].
    fn check_compiled(&self, spec: &JobSpec) -> Result<()> {
        let invalid = |message: String| ControlError::Api(ApiError::Invalid { message });
        if spec.elements != self.schema.elements {
            return Err(invalid(format!(
                "job {}: {} elements per packet, but the switch's program was compiled with K = {}; \
                 every job's K must equal it (or rebuild with p4/build.sh -DK={})",
                spec.id, spec.elements, self.schema.elements, spec.elements
            )));
        }
        if !spec.queues.is_empty() {
            return Err(ControlError::Unsupported {
                target: "bmv2",
                what: "per-job priority maps (the program's priority_to_queue is keyed by class \
                       alone; map classes switch-wide instead)",
            });
        }
        if spec.group == Some(0) {
            return Err(JobError::GroupZero.into());
        }
        if spec.id == u16::MAX && spec.group.is_none() {
            return Err(invalid(format!(
                "job id {} cannot be used on bmv2: its multicast group (id + 1) does not fit 16 bits",
                spec.id
            )));
        }
        Ok(())
    }

    /// Refuses a job the tables have no room for, before writing anything.
    fn check_room(&self, state: &SwitchState, spec: &JobSpec) -> Result<()> {
        use p4info::names::{
            DETOUR_TABLE, JOB_TABLE, PARENT_TABLE, RESULT_RECEIVERS, UPSTREAM_TABLE, WORKER_TABLE,
        };
        let s = &self.schema;
        let n = spec.workers.len();
        let tree = usize::from(spec.upstream.is_some());
        room(
            &format!("job {}", spec.id),
            "job",
            [
                (JOB_TABLE, state.jobs.len(), 1, s.job_table.size),
                (
                    UPSTREAM_TABLE,
                    state.upstreams.len(),
                    tree,
                    s.upstream_table.size,
                ),
                (PARENT_TABLE, state.parents.len(), tree, s.parent_table.size),
                (
                    DETOUR_TABLE,
                    state.detours.len(),
                    spec.detours.len(),
                    s.detour_table.size,
                ),
                (WORKER_TABLE, state.workers.len(), n, s.worker_table.size),
                (
                    RESULT_RECEIVERS,
                    state.receivers.len(),
                    n,
                    s.result_receivers.size,
                ),
            ],
        )
    }

    /// The writes that install `spec`: the group and the per-worker entries
    /// in order, and the job_table entry, which goes in last.
    fn install_plan(
        &self,
        spec: &JobSpec,
        endpoints: &[SocketAddrV4],
        hosts: &[Host],
        incarnation: u32,
    ) -> Result<(Vec<Step>, Step)> {
        let s = &self.schema;
        let job = u64::from(spec.id);
        let group = job_group(spec);
        let mut steps = vec![Step {
            what: format!("insert multicast group {group}"),
            entity: group_entity(group, replicas(hosts)),
            replace_existing: true,
        }];
        let owner = format!("job {}", spec.id);
        steps.extend(receiver_steps(
            &s.result_receivers,
            &RESULT_RECEIVERS,
            job,
            &owner,
            endpoints,
            hosts,
        )?);
        steps.extend(endpoint_steps(
            &s.worker_table,
            &WORKERS,
            job,
            &owner,
            endpoints,
            hosts,
        )?);
        let t = &s.job_table;
        let a = &t.set_job;
        let what = format!("job_table entry for job {}", spec.id);
        let last = Step {
            entity: table_entity(
                t.id,
                vec![exact(t.job, job, &what)?],
                Some(action(
                    a.id,
                    vec![
                        param(a.worker_count, spec.workers.len() as u64, &what)?,
                        param(a.pool_base, spec.pool_base.into(), &what)?,
                        param(a.pool_size, spec.pool_size.into(), &what)?,
                        param(a.elements, spec.elements.into(), &what)?,
                        param(a.generation, spec.generation.into(), &what)?,
                        param(a.mcast_grp, group.into(), &what)?,
                        param(a.incarnation, incarnation.into(), &what)?,
                        param(a.detours, u64::from(!spec.detours.is_empty()), &what)?,
                        param(a.child_switches, spec.child_switches, &what)?,
                    ],
                )),
            ),
            what: format!("insert {what}"),
            replace_existing: false,
        };
        Ok((steps, last))
    }

    /// Zeroes job `id`'s per-job counters, so that a new job starts from 0
    /// as on the emulator.
    fn zero_job_counters(&self, id: u16) -> Result<()> {
        let updates: Vec<p4::Update> = self
            .schema
            .counters
            .per_job()
            .iter()
            .filter(|c| i64::from(id) < c.size)
            .map(|c| {
                update(
                    p4::update::Type::Modify,
                    counter_entity(c.id, id.into(), Some(zero())),
                )
            })
            .collect();
        if updates.is_empty() {
            return Ok(());
        }
        self.client
            .write(&format!("zero the counters of job {id}"), updates)
    }

    /// Deletes table entries of job `id` that the tables hold without a
    /// job_table entry (what a crashed install leaves behind).
    fn remove_leftovers(&self, state: &SwitchState, id: u16) -> Result<()> {
        for e in state.workers.iter().filter(|w| w.job == id) {
            self.client.write(
                &format!("delete leftover worker_table entry for job {id}"),
                vec![update(p4::update::Type::Delete, e.key.clone())],
            )?;
        }
        for e in state.receivers.iter().filter(|r| r.job == id) {
            self.client.write(
                &format!("delete leftover result_receivers entry for job {id}"),
                vec![update(p4::update::Type::Delete, e.key.clone())],
            )?;
        }
        for (what, key) in state.tree_entries(id) {
            self.client.write(
                &what.replacen("delete", "delete leftover", 1),
                vec![update(p4::update::Type::Delete, key)],
            )?;
        }
        Ok(())
    }

    /// The topology file, which every endpoint's port and MAC come from.
    fn topology(&self) -> Result<&Topology> {
        self.topology.as_ref().ok_or_else(|| ControlError::Config {
            path: "--topology".into(),
            message: "creating a job on bmv2 needs the topology file: each worker's switch port \
                      and MAC (see `inagg ctl --help`)"
                .into(),
        })
    }
}

/// Refuses `owner` (a job, a group: `kind`) when a table lacks room: each
/// row is (table, entries used, entries it needs, the table's size; 0 for
/// unknown).
fn room<const N: usize>(
    owner: &str,
    kind: &str,
    tables: [(&str, usize, usize, i64); N],
) -> Result<()> {
    for (name, used, more, size) in tables {
        if size > 0 && (used + more) as i64 > size {
            return Err(ControlError::Api(ApiError::Invalid {
                message: format!(
                    "{owner}: {name} holds {used} of its {size} entries and the {kind} needs \
                     {more} more; delete a {kind} or rebuild the program with larger tables"
                ),
            }));
        }
    }
    Ok(())
}

/// `addr` as IPv4: bmv2 handles IPv4 endpoints only. `what` names the
/// endpoint in the error ("job 4: parent switch").
fn ipv4(addr: SocketAddr, what: &str) -> Result<SocketAddrV4> {
    match addr {
        SocketAddr::V4(v4) => Ok(v4),
        SocketAddr::V6(_) => Err(ControlError::Api(ApiError::Invalid {
            message: format!("{what} {addr} is IPv6; bmv2 handles IPv4 only"),
        })),
    }
}

/// The IPv4 endpoints of `owner`'s `member`s (workers of a job, members of
/// a group).
fn ipv4_endpoints(owner: &str, member: &str, addrs: &[SocketAddr]) -> Result<Vec<SocketAddrV4>> {
    let what = format!("{owner}: {member}");
    addrs.iter().map(|a| ipv4(*a, &what)).collect()
}

/// The entries of a receivers table (result_receivers or group_receivers)
/// for `owner`'s endpoints: (owner, replication id = index) -> address.
fn receiver_steps(
    r: &ResultReceivers,
    n: &ReceiverNames,
    owner_id: u64,
    owner: &str,
    endpoints: &[SocketAddrV4],
    hosts: &[Host],
) -> Result<Vec<Step>> {
    endpoints
        .iter()
        .zip(hosts)
        .enumerate()
        .map(|(i, (ep, host))| {
            let what = format!("{} entry for {owner} {} {i}", n.table, n.member);
            let a = &r.set_receiver;
            Ok(Step {
                entity: table_entity(
                    r.id,
                    vec![
                        exact(r.job, owner_id, &what)?,
                        exact(r.rid, i as u64, &what)?,
                    ],
                    Some(action(
                        a.id,
                        vec![
                            param(a.dst_mac, host.mac.to_u64(), &what)?,
                            param(a.dst_addr, u32::from(*ep.ip()).into(), &what)?,
                            param(a.dst_port, ep.port().into(), &what)?,
                        ],
                    )),
                ),
                what: format!("insert {what}"),
                replace_existing: false,
            })
        })
        .collect()
}

/// The entries of an endpoint table (worker_table or member_table) for
/// `owner`'s endpoints: (owner, port, address, UDP port) -> index.
fn endpoint_steps(
    t: &WorkerTable,
    n: &EndpointNames,
    owner_id: u64,
    owner: &str,
    endpoints: &[SocketAddrV4],
    hosts: &[Host],
) -> Result<Vec<Step>> {
    endpoints
        .iter()
        .zip(hosts)
        .enumerate()
        .map(|(i, (ep, host))| {
            let what = format!("{} entry for {owner} {} {i}", n.table, n.member);
            Ok(Step {
                entity: table_entity(
                    t.id,
                    vec![
                        exact(t.job, owner_id, &what)?,
                        exact(t.ingress_port, host.port.into(), &what)?,
                        exact(t.src_addr, u32::from(*ep.ip()).into(), &what)?,
                        exact(t.src_port, ep.port().into(), &what)?,
                    ],
                    Some(action(
                        t.set_worker.id,
                        vec![param(t.set_worker.worker, i as u64, &what)?],
                    )),
                ),
                what: format!("insert {what}"),
                replace_existing: false,
            })
        })
        .collect()
}

/// One write of an install.
struct Step {
    what: String,
    entity: p4::Entity,
    /// An existing entity is replaced (MODIFY) instead of failing: for the
    /// multicast group, which cannot be read back on every bmv2 and may be
    /// left over from an interrupted install.
    replace_existing: bool,
}

fn update(kind: p4::update::Type, entity: p4::Entity) -> p4::Update {
    p4::Update {
        r#type: kind as i32,
        entity: Some(entity),
    }
}

fn zero() -> p4::CounterData {
    p4::CounterData {
        byte_count: 0,
        packet_count: 0,
    }
}

fn counter_entity(counter_id: u32, index: i64, data: Option<p4::CounterData>) -> p4::Entity {
    p4::Entity {
        entity: Some(p4::entity::Entity::CounterEntry(p4::CounterEntry {
            counter_id,
            index: Some(p4::Index { index }),
            data,
        })),
    }
}

/// The multicast group carrying a job's results: the spec's, or id + 1.
fn job_group(spec: &JobSpec) -> u32 {
    spec.group.map_or(u32::from(spec.id) + 1, u32::from)
}

/// One replica per endpoint: its switch port, replication id = its index
/// (the worker or member id).
fn replicas(hosts: &[Host]) -> Vec<p4::Replica> {
    hosts
        .iter()
        .zip(0u32..)
        .map(|(h, i)| p4::Replica {
            port_kind: Some(p4::replica::PortKind::EgressPort(u32::from(h.port))),
            instance: i,
        })
        .collect()
}

/// The P4Runtime entity of multicast group `multicast_group_id` with
/// `replicas` (public for the tests that check what is written).
pub fn group_entity(multicast_group_id: u32, replicas: Vec<p4::Replica>) -> p4::Entity {
    p4::Entity {
        entity: Some(p4::entity::Entity::PacketReplicationEngineEntry(
            p4::PacketReplicationEngineEntry {
                r#type: Some(
                    p4::packet_replication_engine_entry::Type::MulticastGroupEntry(
                        p4::MulticastGroupEntry {
                            multicast_group_id,
                            replicas,
                        },
                    ),
                ),
            },
        )),
    }
}

fn table_entity(
    table_id: u32,
    matches: Vec<p4::FieldMatch>,
    action: Option<p4::Action>,
) -> p4::Entity {
    p4::Entity {
        entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
            table_id,
            r#match: matches,
            action: action.map(|a| p4::TableAction {
                r#type: Some(p4::table_action::Type::Action(a)),
            }),
            ..Default::default()
        })),
    }
}

fn action(action_id: u32, params: Vec<p4::action::Param>) -> p4::Action {
    p4::Action { action_id, params }
}

fn encode(field: Field, value: u64, what: &str) -> Result<Vec<u8>> {
    bytestring::encode(value, field.bitwidth).map_err(|e| {
        ControlError::Api(ApiError::Invalid {
            message: format!("{what}: {e}"),
        })
    })
}

fn exact(field: Field, value: u64, what: &str) -> Result<p4::FieldMatch> {
    Ok(p4::FieldMatch {
        field_id: field.id,
        field_match_type: Some(p4::field_match::FieldMatchType::Exact(
            p4::field_match::Exact {
                value: encode(field, value, what)?,
            },
        )),
    })
}

fn param(field: Field, value: u64, what: &str) -> Result<p4::action::Param> {
    Ok(p4::action::Param {
        param_id: field.id,
        value: encode(field, value, what)?,
    })
}

/// Decoding of entries read back; a bad one is the switch's (or another
/// writer's) fault.
fn bad_entry(table: &str, message: String) -> ControlError {
    ControlError::Protocol(format!("{table} entry read from the switch: {message}"))
}

fn match_value(table: &str, e: &p4::TableEntry, field: Field, name: &str) -> Result<u64> {
    let m = e
        .r#match
        .iter()
        .find(|m| m.field_id == field.id)
        .ok_or_else(|| bad_entry(table, format!("no match field {name}")))?;
    let Some(p4::field_match::FieldMatchType::Exact(x)) = &m.field_match_type else {
        return Err(bad_entry(table, format!("match field {name} is not exact")));
    };
    bytestring::decode(&x.value, field.bitwidth)
        .map_err(|err| bad_entry(table, format!("{name}: {err}")))
}

fn entry_action<'a>(
    table: &str,
    e: &'a p4::TableEntry,
    action_id: u32,
    name: &str,
) -> Result<&'a p4::Action> {
    match e.action.as_ref().and_then(|a| a.r#type.as_ref()) {
        Some(p4::table_action::Type::Action(a)) if a.action_id == action_id => Ok(a),
        _ => Err(bad_entry(table, format!("its action is not {name}"))),
    }
}

fn param_value(table: &str, a: &p4::Action, field: Field, name: &str) -> Result<u64> {
    let p = a
        .params
        .iter()
        .find(|p| p.param_id == field.id)
        .ok_or_else(|| bad_entry(table, format!("no parameter {name}")))?;
    bytestring::decode(&p.value, field.bitwidth)
        .map_err(|err| bad_entry(table, format!("{name}: {err}")))
}

/// Narrows a decoded value to its Rust type (the P4Info's widths could be
/// wider than the program's of p4/README.md).
fn narrow<T: TryFrom<u64>>(table: &str, name: &str, v: u64) -> Result<T> {
    T::try_from(v).map_err(|_| bad_entry(table, format!("{name} = {v} is out of range")))
}

/// A job_table entry.
#[derive(Debug, Clone)]
struct JobEntry {
    job: u16,
    worker_count: u16,
    pool_base: u32,
    pool_size: u32,
    elements: u16,
    generation: u16,
    incarnation: u32,
    /// The job takes detours.
    detours: bool,
    /// The members that are switches.
    child_switches: u64,
    /// The job's result multicast group.
    group: u16,
    /// The key, for deleting it.
    key: p4::Entity,
}

impl JobEntry {
    fn parse(s: &Schema, e: &p4::TableEntry) -> Result<JobEntry> {
        use p4info::names::{key, param as p, SET_JOB};
        let t = "job_table";
        let j = &s.job_table;
        let a = entry_action(t, e, j.set_job.id, SET_JOB)?;
        let v = |f, n| param_value(t, a, f, n);
        let job = narrow(t, key::JOB, match_value(t, e, j.job, key::JOB)?)?;
        Ok(JobEntry {
            job,
            worker_count: narrow(
                t,
                p::WORKER_COUNT,
                v(j.set_job.worker_count, p::WORKER_COUNT)?,
            )?,
            pool_base: narrow(t, p::POOL_BASE, v(j.set_job.pool_base, p::POOL_BASE)?)?,
            pool_size: narrow(t, p::POOL_SIZE, v(j.set_job.pool_size, p::POOL_SIZE)?)?,
            elements: narrow(t, p::ELEMENTS, v(j.set_job.elements, p::ELEMENTS)?)?,
            generation: narrow(t, p::GENERATION, v(j.set_job.generation, p::GENERATION)?)?,
            incarnation: narrow(t, p::INCARNATION, v(j.set_job.incarnation, p::INCARNATION)?)?,
            detours: v(j.set_job.detours, p::DETOURS)? == 1,
            child_switches: v(j.set_job.child_switches, p::CHILD_SWITCHES)?,
            group: narrow(t, p::MCAST_GRP, v(j.set_job.mcast_grp, p::MCAST_GRP)?)?,
            key: key_of(e),
        })
    }
}

/// A worker_table entry.
#[derive(Debug, Clone)]
struct WorkerEntry {
    job: u16,
    endpoint: SocketAddrV4,
    worker: u16,
    key: p4::Entity,
}

/// The names of a table shaped like worker_table, for errors.
struct EndpointNames {
    table: &'static str,
    /// What an endpoint is called: worker or member.
    member: &'static str,
    owner: &'static str,
    action: &'static str,
    id: &'static str,
}

const WORKERS: EndpointNames = EndpointNames {
    table: "worker_table",
    member: "worker",
    owner: p4info::names::key::JOB,
    action: p4info::names::SET_WORKER,
    id: p4info::names::param::WORKER,
};

const MEMBERS: EndpointNames = EndpointNames {
    table: "member_table",
    member: "member",
    owner: p4info::names::key::GROUP,
    action: p4info::names::SET_MEMBER,
    id: p4info::names::param::MEMBER,
};

impl WorkerEntry {
    /// An entry of `w`, worker_table (`WORKERS`) or member_table
    /// (`MEMBERS`): `job` is then the group id and `worker` the member id.
    fn parse(w: &WorkerTable, n: &EndpointNames, e: &p4::TableEntry) -> Result<WorkerEntry> {
        use p4info::names::key;
        let t = n.table;
        let a = entry_action(t, e, w.set_worker.id, n.action)?;
        let addr: u32 = narrow(
            t,
            key::SRC_ADDR,
            match_value(t, e, w.src_addr, key::SRC_ADDR)?,
        )?;
        let port: u16 = narrow(
            t,
            key::SRC_PORT,
            match_value(t, e, w.src_port, key::SRC_PORT)?,
        )?;
        Ok(WorkerEntry {
            job: narrow(t, n.owner, match_value(t, e, w.job, n.owner)?)?,
            endpoint: SocketAddrV4::new(Ipv4Addr::from(addr), port),
            worker: narrow(t, n.id, param_value(t, a, w.set_worker.worker, n.id)?)?,
            key: key_of(e),
        })
    }
}

/// A result_receivers entry.
#[derive(Debug, Clone)]
struct ReceiverEntry {
    job: u16,
    rid: u16,
    endpoint: SocketAddrV4,
    key: p4::Entity,
}

/// The names of a table shaped like result_receivers, for errors.
struct ReceiverNames {
    table: &'static str,
    /// What a receiver is called: worker or member.
    member: &'static str,
    owner: &'static str,
    action: &'static str,
}

const RESULT_RECEIVERS: ReceiverNames = ReceiverNames {
    table: "result_receivers",
    member: "worker",
    owner: p4info::names::key::JOB,
    action: p4info::names::SET_RECEIVER,
};

const GROUP_RECEIVERS: ReceiverNames = ReceiverNames {
    table: "group_receivers",
    member: "member",
    owner: p4info::names::key::GROUP,
    action: p4info::names::SET_MEMBER_ADDRESS,
};

impl ReceiverEntry {
    /// An entry of `r`, result_receivers or group_receivers (`job` is then
    /// the group id).
    fn parse(r: &ResultReceivers, n: &ReceiverNames, e: &p4::TableEntry) -> Result<ReceiverEntry> {
        use p4info::names::{key, param as p};
        let t = n.table;
        let a = entry_action(t, e, r.set_receiver.id, n.action)?;
        // Checked (it must decode and fit), not kept: jobs are reported by
        // endpoint.
        param_value(t, a, r.set_receiver.dst_mac, p::DST_MAC)?;
        let addr: u32 = narrow(
            t,
            p::DST_ADDR,
            param_value(t, a, r.set_receiver.dst_addr, p::DST_ADDR)?,
        )?;
        let port: u16 = narrow(
            t,
            p::DST_PORT,
            param_value(t, a, r.set_receiver.dst_port, p::DST_PORT)?,
        )?;
        Ok(ReceiverEntry {
            job: narrow(t, n.owner, match_value(t, e, r.job, n.owner)?)?,
            rid: narrow(t, key::RID, match_value(t, e, r.rid, key::RID)?)?,
            endpoint: SocketAddrV4::new(Ipv4Addr::from(addr), port),
            key: key_of(e),
        })
    }
}

/// The entry's key alone (what a DELETE names).
fn key_of(e: &p4::TableEntry) -> p4::Entity {
    p4::Entity {
        entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
            table_id: e.table_id,
            r#match: e.r#match.clone(),
            priority: e.priority,
            ..Default::default()
        })),
    }
}

/// What the switch's tables hold.
#[derive(Debug, Default)]
struct SwitchState {
    jobs: BTreeMap<u16, JobEntry>,
    workers: Vec<WorkerEntry>,
    receivers: Vec<ReceiverEntry>,
    /// group_table, by group id: jobs' groups and groups made by hand.
    groups: BTreeMap<u16, GroupEntry>,
    /// member_table (`job` is the group id).
    members: Vec<WorkerEntry>,
    /// group_receivers (`job` is the group id).
    group_receivers: Vec<ReceiverEntry>,
    /// upstream_table, by job id.
    upstreams: BTreeMap<u16, UpstreamEntry>,
    /// parent_table (`job` is the parent's job, `worker` the local job).
    parents: Vec<WorkerEntry>,
    /// relay_table.
    relays: Vec<HopEntry>,
    /// detour_table (`from` is the relay, `to` the member).
    detours: Vec<HopEntry>,
}

impl SwitchState {
    /// The job spec of a job_table entry, from its worker_table and
    /// result_receivers entries; an error if they do not add up.
    fn spec(&self, j: &JobEntry) -> Result<JobSpec> {
        let partly = |what: String| {
            ControlError::Protocol(format!(
                "job {} is only partly installed on the switch ({what}); \
                 `inagg ctl --target bmv2 job delete {}` removes what is there",
                j.job, j.job
            ))
        };
        let n = usize::from(j.worker_count);
        let mut workers: Vec<Option<SocketAddrV4>> = vec![None; n];
        for w in self.workers.iter().filter(|w| w.job == j.job) {
            match workers.get_mut(usize::from(w.worker)) {
                Some(slot @ None) => *slot = Some(w.endpoint),
                Some(Some(_)) => {
                    return Err(partly(format!(
                        "two worker_table entries for worker {}",
                        w.worker
                    )))
                }
                None => {
                    return Err(partly(format!(
                        "worker_table names worker {} of {n}",
                        w.worker
                    )))
                }
            }
        }
        let workers = workers
            .into_iter()
            .enumerate()
            .map(|(i, w)| w.ok_or_else(|| partly(format!("no worker_table entry for worker {i}"))))
            .collect::<Result<Vec<_>>>()?;
        for (i, w) in workers.iter().enumerate() {
            let r = self
                .receivers
                .iter()
                .find(|r| r.job == j.job && usize::from(r.rid) == i)
                .ok_or_else(|| partly(format!("no result_receivers entry for worker {i}")))?;
            if r.endpoint != *w {
                return Err(partly(format!(
                    "result_receivers sends worker {i}'s results to {}, worker_table has it at {w}",
                    r.endpoint
                )));
            }
        }
        let upstream = self.upstream_of(j.job, partly)?;
        let detours = self.detours_of(j.job);
        if j.detours == detours.is_empty() {
            return Err(partly(format!(
                "job_table says the job {} detours, detour_table has {} entries for it",
                if j.detours { "takes" } else { "takes no" },
                detours.len()
            )));
        }
        Ok(JobSpec {
            detours,
            upstream,
            child_switches: j.child_switches,
            id: j.job,
            workers: workers.into_iter().map(SocketAddr::V4).collect(),
            pool_base: j.pool_base,
            pool_size: j.pool_size,
            elements: j.elements,
            generation: j.generation,
            queues: Vec::new(),
            // The default group (id + 1) reads back as "the target's pick".
            group: (u32::from(j.group) != u32::from(j.job) + 1).then_some(j.group),
        })
    }
}

impl Target for Bmv2Target {
    fn kind(&self) -> &'static str {
        "bmv2"
    }

    fn info(&mut self) -> Result<SwitchInfo> {
        let state = self.read_state()?;
        Ok(SwitchInfo {
            slots: self.schema.slots,
            max_elements: self.schema.elements,
            fixed_elements: true,
            memory: u64::MAX,
            memory_used: 0,
            jobs: state.jobs.len(),
        })
    }

    fn create_job(&mut self, spec: &JobSpec) -> Result<()> {
        let (state, installed) = self.installed()?;
        // A P4 program's registers are fixed: its memory is its slots.
        let config = SwitchConfig {
            slots: self.schema.slots,
            max_elements: self.schema.elements,
            memory: u64::MAX,
        };
        validate_job(spec, installed.iter().map(|(s, _)| s), config)?;
        detours_unrelayed(spec, |key| state.relayed(key))?;
        self.check_compiled(spec)?;
        self.check_room(&state, spec)?;
        // The job's result group (check_compiled: it fits 16 bits) may not
        // be a group made by hand (validate_job checked the jobs' groups).
        let group = job_group(spec) as u16;
        self.check_group_free(&state, group)?;
        self.check_group_room(&state, group, spec.workers.len())?;
        let topology = self.topology()?;
        let hosts = spec
            .workers
            .iter()
            .enumerate()
            .map(|(i, a)| topology.host(spec.id, i, *a))
            .collect::<Result<Vec<Host>>>()?;
        let in_use: Vec<u32> = installed.iter().map(|(_, inc)| *inc).collect();
        let incarnation = self.fresh_incarnation(&in_use);
        let owner = format!("job {}", spec.id);
        let endpoints = ipv4_endpoints(&owner, "worker", &spec.workers)?;
        let (mut steps, last) = self.install_plan(spec, &endpoints, &hosts, incarnation)?;
        // A tree node's entries and the detours it takes go in before its
        // job_table entry.
        steps.extend(self.tree_plan(spec)?);
        steps.extend(self.detour_steps(spec)?);
        // The job's result group relays group datagrams among its workers;
        // its entries go in after the job's.
        let mut after = vec![last];
        after.extend(self.relay_plan(group, &owner, &endpoints, &hosts)?);

        self.remove_leftovers(&state, spec.id)?;
        // Leftover relay entries of the group (it has no group_table entry:
        // check_group_free).
        self.delete_group_entries(&state, group)?;
        self.run_install(
            &steps,
            |t| {
                t.zero_job_counters(spec.id)?;
                t.zero_group_counters(group)
            },
            &after,
        )
    }

    fn delete_job(&mut self, id: u16) -> Result<()> {
        let state = self.read_state()?;
        let job = state.jobs.get(&id);
        let workers: Vec<&WorkerEntry> = state.workers.iter().filter(|w| w.job == id).collect();
        let receivers: Vec<&ReceiverEntry> =
            state.receivers.iter().filter(|r| r.job == id).collect();
        let tree = state.tree_entries(id);
        if job.is_none() && workers.is_empty() && receivers.is_empty() && tree.is_empty() {
            return Err(JobError::UnknownJob { id }.into());
        }
        let group = job.map_or(u32::from(id) + 1, |j| u32::from(j.group));
        // Without a job_table entry, a group_table entry under the default
        // id is a group made by hand, not this job's: it is left alone.
        let ours = u16::try_from(group)
            .ok()
            .filter(|g| job.is_some() || !state.groups.contains_key(g));
        // The job's relay entries first (group_table leads).
        if let Some(g) = ours {
            self.delete_group_entries(&state, g)?;
        }
        let delete = |what: String, entity: p4::Entity| {
            self.client
                .write(&what, vec![update(p4::update::Type::Delete, entity)])
        };
        if let Some(j) = job {
            delete(
                format!("delete job_table entry for job {id}"),
                j.key.clone(),
            )?;
        }
        for (what, key) in tree {
            delete(what, key)?;
        }
        for w in workers {
            delete(
                format!("delete worker_table entry for job {id} worker {}", w.worker),
                w.key.clone(),
            )?;
        }
        for r in receivers {
            delete(
                format!(
                    "delete result_receivers entry for job {id} worker {}",
                    r.rid
                ),
                r.key.clone(),
            )?;
        }
        if ours.is_some() {
            match delete(
                format!("delete multicast group {group}"),
                group_entity(group, Vec::new()),
            ) {
                Err(e) if rpc_code(&e) == Some(NOT_FOUND) => {}
                other => other?,
            }
        }
        Ok(())
    }

    fn job(&mut self, id: u16) -> Result<JobInfo> {
        self.jobs()?
            .into_iter()
            .find(|j| j.spec.id == id)
            .ok_or_else(|| JobError::UnknownJob { id }.into())
    }

    fn jobs(&mut self) -> Result<Vec<JobInfo>> {
        let (_, installed) = self.installed()?;
        let ids: Vec<u16> = installed.iter().map(|(s, _)| s.id).collect();
        let mut counters = self.job_counters(&ids)?;
        Ok(installed
            .into_iter()
            .map(|(spec, _)| JobInfo {
                counters: counters.remove(&spec.id).unwrap_or_default(),
                spec,
            })
            .collect())
    }

    /// The jobs' result groups and the groups made by hand.
    fn groups(&mut self) -> Result<Vec<GroupInfo>> {
        self.all_groups()
    }

    fn create_group(&mut self, spec: &GroupSpec) -> Result<()> {
        self.install_group(spec)
    }

    fn delete_group(&mut self, id: u16) -> Result<()> {
        self.remove_group(id)
    }

    fn relays(&mut self) -> Result<Vec<RelayInfo>> {
        self.relay_infos()
    }

    fn create_relay(&mut self, relay: &RelaySpec) -> Result<()> {
        self.install_relay(relay)
    }

    fn delete_relay(&mut self, key: RelayKey) -> Result<()> {
        self.remove_relay(key)
    }

    fn set_priority_queue(&mut self, class: u8, queue: u8) -> Result<()> {
        self.map_class(class, queue)
    }

    /// The class -> queue map; bmv2's queues have no counters that
    /// P4Runtime reads, so no ports are reported.
    fn queues(&mut self) -> Result<QueueReport> {
        Ok(QueueReport {
            map: self.queue_map()?,
            link: None,
            ports: Vec::new(),
        })
    }

    fn pools(&mut self) -> Result<PoolMap> {
        let (_, installed) = self.installed()?;
        Ok(PoolMap::new(
            self.schema.slots,
            installed.iter().map(|(s, _)| s),
        ))
    }

    fn counters(&mut self) -> Result<Counters> {
        let c = &self.schema.counters;
        // A program may count fewer reasons than the emulator (an older
        // build counted 10); never more are read.
        let drops = c.drops.size.min(DropReason::ALL.len() as i64);
        let mut entities = vec![
            counter_entity(c.rx.id, 0, None),
            counter_entity(c.tx.id, 0, None),
            counter_entity(c.relayed.id, 0, None),
        ];
        entities.extend((0..drops).map(|i| counter_entity(c.drops.id, i, None)));
        let cells = self.read_counters("switch counters", entities)?;
        let cell = |id: u32, index: i64| cells.get(&(id, index)).cloned().unwrap_or_default();
        let (rx, tx) = (cell(c.rx.id, 0), cell(c.tx.id, 0));
        let mut out = Counters {
            rx_packets: rx.packet_count.max(0) as u64,
            rx_bytes: rx.byte_count.max(0) as u64,
            tx_packets: tx.packet_count.max(0) as u64,
            tx_bytes: tx.byte_count.max(0) as u64,
            relayed: cell(c.relayed.id, 0).packet_count.max(0) as u64,
            ..Counters::default()
        };
        for i in 0..drops {
            out.drops[i as usize] = cell(c.drops.id, i).packet_count.max(0) as u64;
        }
        Ok(out)
    }

    fn reset_counters(&mut self) -> Result<()> {
        let state = self.read_state()?;
        let c = &self.schema.counters;
        let zero_cell = |id: u32, index: i64| {
            update(
                p4::update::Type::Modify,
                counter_entity(id, index, Some(zero())),
            )
        };
        let mut updates = vec![
            zero_cell(c.rx.id, 0),
            zero_cell(c.tx.id, 0),
            zero_cell(c.relayed.id, 0),
        ];
        for i in state.relays.iter().filter_map(|r| r.index) {
            updates.push(zero_cell(c.relay_packets.id, i.into()));
        }
        updates.extend((0..c.drops.size).map(|i| zero_cell(c.drops.id, i)));
        for &id in state.jobs.keys() {
            for pc in c.per_job().iter().filter(|pc| i64::from(id) < pc.size) {
                updates.push(zero_cell(pc.id, id.into()));
            }
        }
        for &g in state.groups.keys() {
            updates.extend(
                self.group_counter_cells(g, Some(zero()))
                    .into_iter()
                    .map(|e| update(p4::update::Type::Modify, e)),
            );
        }
        self.client.write("zero the counters", updates)
    }
}

impl Bmv2Target {
    /// Writes `before`, runs `zero` (counters), writes `after`; a failure
    /// undoes every write made, newest first, and is the error returned.
    fn run_install(
        &self,
        before: &[Step],
        zero: impl FnOnce(&Self) -> Result<()>,
        after: &[Step],
    ) -> Result<()> {
        let mut done: Vec<p4::Entity> = Vec::new();
        let mut write_all = |steps: &[Step]| -> Result<()> {
            for step in steps {
                self.write_step(step)?;
                done.push(step.entity.clone());
            }
            Ok(())
        };
        let result = write_all(before)
            .and_then(|()| zero(self))
            .and_then(|()| write_all(after));
        if let Err(e) = result {
            for entity in done.into_iter().rev() {
                let _ = self.client.write(
                    "undo a failed install",
                    vec![update(p4::update::Type::Delete, entity)],
                );
            }
            return Err(e);
        }
        Ok(())
    }

    /// Inserts a step's entity; one that replaces existing entities turns
    /// into a MODIFY when the insert finds one.
    fn write_step(&self, step: &Step) -> Result<()> {
        let insert = self.client.write(
            &step.what,
            vec![update(p4::update::Type::Insert, step.entity.clone())],
        );
        match insert {
            Err(e) if step.replace_existing && rpc_code(&e) == Some(ALREADY_EXISTS) => {
                self.client.write(
                    &step.what.replacen("insert", "replace", 1),
                    vec![update(p4::update::Type::Modify, step.entity.clone())],
                )
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_stable_and_tell_inputs_apart() {
        assert_eq!(fnv1a(&[b""]), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(&[b"a"]), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(fnv1a(&[b"ab", b"c"]), fnv1a(&[b"ab", b"d"]));
    }
}
