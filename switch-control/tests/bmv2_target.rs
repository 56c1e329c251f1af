//! The bmv2 target end to end, against a recording P4Runtime server.
//!
//! **This is not bmv2.** tests/bmv2_switch.rs runs the target against the
//! real simple_switch_grpc where it is installed (pipeline push,
//! arbitration, observers, jobs, groups, trees, relays, counters read back),
//! and tests/bmv2/run.sh sends packets through it. This stand-in (`Recorder`,
//! below) stays for what the real switch cannot be made to do or show:
//!
//! - the exact requests, their order and their bytes (a real switch only
//!   shows the state they leave);
//! - a write that fails in the middle of an install, a job left half
//!   installed by an interrupted run, entries missing under a job;
//! - counter values without traffic, a server that accepts and never
//!   answers, another controller already primary with a given id.
//!
//! It implements the service the way the specification and
//! simple_switch_grpc do, as far as the control plane can tell:
//!
//! - StreamChannel arbitration: the highest election id is primary, a lower
//!   one gets an error status, the primary is forgotten when its stream
//!   closes;
//! - Write: only from the primary; INSERT of an existing entry is
//!   ALREADY_EXISTS, MODIFY or DELETE of a missing one NOT_FOUND; table ids,
//!   match field ids, action ids (and that the table lists the action),
//!   parameter ids, counter ids and indices are checked against the
//!   installed P4Info, and every value must be a canonical bytestring that
//!   fits its width (INVALID_ARGUMENT otherwise);
//! - Read: whole tables (a table entry with only its id) and single counter
//!   cells, answered from what was written;
//! - Set/GetForwardingPipelineConfig: VERIFY_AND_COMMIT stores the pipeline
//!   and clears all state; Get answers COOKIE_ONLY and P4INFO_AND_COOKIE.
//!
//! Its P4Info (`bmv2::testing::v1model_p4info`) is checked against the one
//! p4c makes by tests/bmv2_switch.rs. It records every request, so the
//! tests check the exact entries, their order and their bytes.
//!
//! ```text
//!   Bmv2Target --gRPC (127.0.0.1:ephemeral)--> Recorder (tonic server, own thread)
//!                                               tables / groups / counters / log
//! ```

#![cfg(feature = "bmv2")]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use inagg_switch_api::detour::RelaySpec;
use inagg_switch_api::JobError;
use inagg_switch_control::bmv2::p4info::P4Info;
use inagg_switch_control::bmv2::proto::google::rpc;
use inagg_switch_control::bmv2::proto::p4::config::v1 as cfg;
use inagg_switch_control::bmv2::proto::p4::v1 as p4;
use inagg_switch_control::bmv2::proto::p4::v1::p4_runtime_server::{P4Runtime, P4RuntimeServer};
use inagg_switch_control::bmv2::target::PipelineAction;
use inagg_switch_control::bmv2::testing::{job as spec, topology, v1model_p4info};
use inagg_switch_control::bmv2::{Bmv2Options, Bmv2Target};
use inagg_switch_control::grpc::TestServer;
use inagg_switch_control::target::install_job;
use inagg_switch_control::{ControlError, JobSpec, Target};
use prost::Message;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

// ---------------------------------------------------------------------------
// The recording server.

/// One recorded request.
#[derive(Debug, Clone, PartialEq)]
enum Logged {
    /// An arbitration update: the election id.
    Arbitration(u128),
    /// One update of a Write, whether it succeeded or not.
    Write(p4::Update),
    /// A pipeline push.
    SetPipeline(p4::SetForwardingPipelineConfigRequest),
}

#[derive(Debug, Default)]
struct State {
    device_id: u64,
    /// The installed pipeline.
    p4info: Option<P4Info>,
    device_config: Vec<u8>,
    cookie: Option<u64>,
    pushes: usize,
    /// The primary's election id.
    primary: Option<u128>,
    /// Another controller, not connected here, holding this election id.
    other_controller: Option<u128>,
    /// (table id, encoded match) -> entry.
    tables: BTreeMap<(u32, Vec<u8>), p4::TableEntry>,
    groups: BTreeMap<u32, p4::MulticastGroupEntry>,
    counters: BTreeMap<(u32, i64), p4::CounterData>,
    log: Vec<Logged>,
    /// Refuse the nth (0-based) insert into this table with RESOURCE_EXHAUSTED.
    fail_insert: Option<(u32, usize)>,
    inserts_seen: BTreeMap<u32, usize>,
}

fn election(e: Option<&p4::Uint128>) -> u128 {
    e.map_or(0, |e| (u128::from(e.high) << 64) | u128::from(e.low))
}

fn canonical_fit(bytes: &[u8], bitwidth: i32, what: &str) -> Result<(), Status> {
    if bytes.is_empty() || (bytes.len() > 1 && bytes[0] == 0) {
        return Err(Status::invalid_argument(format!(
            "{what}: {bytes:02x?} is not a canonical bytestring"
        )));
    }
    let bits = (bytes.len() as i32 - 1) * 8 + (8 - bytes[0].leading_zeros() as i32);
    if bits > bitwidth {
        return Err(Status::invalid_argument(format!(
            "{what}: {bytes:02x?} does not fit in {bitwidth} bits"
        )));
    }
    Ok(())
}

impl State {
    fn with_pipeline(info: P4Info) -> State {
        State {
            p4info: Some(info),
            ..State::default()
        }
    }

    fn info(&self) -> Result<&P4Info, Status> {
        self.p4info
            .as_ref()
            .ok_or_else(|| Status::failed_precondition("no forwarding pipeline config"))
    }

    /// Checks an entry against the P4Info (the action only when present).
    fn check_entry(&self, e: &p4::TableEntry) -> Result<(), Status> {
        let info = self.info()?;
        let table = info
            .tables
            .iter()
            .find(|t| t.preamble.as_ref().unwrap().id == e.table_id)
            .ok_or_else(|| Status::not_found(format!("unknown table id {:#x}", e.table_id)))?;
        if e.r#match.len() != table.match_fields.len() {
            return Err(Status::invalid_argument(
                "every exact match field is needed",
            ));
        }
        for m in &e.r#match {
            let f = table
                .match_fields
                .iter()
                .find(|f| f.id == m.field_id)
                .ok_or_else(|| Status::invalid_argument(format!("unknown field {}", m.field_id)))?;
            let Some(p4::field_match::FieldMatchType::Exact(x)) = &m.field_match_type else {
                return Err(Status::invalid_argument("not an exact match"));
            };
            canonical_fit(&x.value, f.bitwidth, &f.name)?;
        }
        if let Some(p4::table_action::Type::Action(a)) =
            e.action.as_ref().and_then(|a| a.r#type.as_ref())
        {
            if !table.action_refs.iter().any(|r| r.id == a.action_id) {
                return Err(Status::invalid_argument(
                    "the table does not list the action",
                ));
            }
            let action = info
                .actions
                .iter()
                .find(|x| x.preamble.as_ref().unwrap().id == a.action_id)
                .ok_or_else(|| Status::not_found("unknown action"))?;
            if a.params.len() != action.params.len() {
                return Err(Status::invalid_argument("wrong number of parameters"));
            }
            for p in &a.params {
                let d = action
                    .params
                    .iter()
                    .find(|d| d.id == p.param_id)
                    .ok_or_else(|| Status::invalid_argument("unknown parameter"))?;
                canonical_fit(&p.value, d.bitwidth, &d.name)?;
            }
        }
        Ok(())
    }

    fn key(e: &p4::TableEntry) -> (u32, Vec<u8>) {
        let mut m = e.r#match.clone();
        m.sort_by_key(|f| f.field_id);
        let bytes: Vec<u8> = m.iter().flat_map(|f| f.encode_to_vec()).collect();
        (e.table_id, bytes)
    }

    fn apply(&mut self, u: &p4::Update) -> Result<(), Status> {
        use p4::update::Type;
        let kind = Type::try_from(u.r#type).map_err(|_| Status::invalid_argument("type"))?;
        match u.entity.as_ref().and_then(|e| e.entity.as_ref()) {
            Some(p4::entity::Entity::TableEntry(e)) => {
                self.check_entry(e)?;
                let key = Self::key(e);
                let exists = self.tables.contains_key(&key);
                match kind {
                    Type::Insert => {
                        let n = self.inserts_seen.entry(e.table_id).or_default();
                        if self.fail_insert == Some((e.table_id, *n)) {
                            *n += 1;
                            return Err(Status::resource_exhausted("table is full"));
                        }
                        *n += 1;
                        if exists {
                            return Err(Status::already_exists("match entry exists"));
                        }
                        self.tables.insert(key, e.clone());
                    }
                    Type::Modify if exists => {
                        self.tables.insert(key, e.clone());
                    }
                    Type::Delete if exists => {
                        self.tables.remove(&key);
                    }
                    Type::Modify | Type::Delete => return Err(Status::not_found("no such entry")),
                    Type::Unspecified => return Err(Status::invalid_argument("no update type")),
                }
            }
            Some(p4::entity::Entity::PacketReplicationEngineEntry(p)) => {
                let Some(p4::packet_replication_engine_entry::Type::MulticastGroupEntry(g)) =
                    &p.r#type
                else {
                    return Err(Status::unimplemented("clone sessions"));
                };
                let exists = self.groups.contains_key(&g.multicast_group_id);
                match kind {
                    Type::Insert if exists => {
                        return Err(Status::already_exists("multicast group exists"))
                    }
                    Type::Insert | Type::Modify if g.multicast_group_id == 0 => {
                        return Err(Status::invalid_argument("group 0"))
                    }
                    Type::Insert => {
                        self.groups.insert(g.multicast_group_id, g.clone());
                    }
                    Type::Modify if exists => {
                        self.groups.insert(g.multicast_group_id, g.clone());
                    }
                    Type::Delete if exists => {
                        self.groups.remove(&g.multicast_group_id);
                    }
                    _ => return Err(Status::not_found("no such multicast group")),
                }
            }
            Some(p4::entity::Entity::CounterEntry(c)) => {
                if kind != Type::Modify {
                    return Err(Status::invalid_argument("counters take MODIFY only"));
                }
                let size = self.counter_size(c.counter_id)?;
                let index = c
                    .index
                    .as_ref()
                    .ok_or_else(|| Status::unimplemented("wildcard counter write"))?
                    .index;
                if !(0..size).contains(&index) {
                    return Err(Status::out_of_range("counter index"));
                }
                self.counters
                    .insert((c.counter_id, index), c.data.unwrap_or_default());
            }
            None => return Err(Status::invalid_argument("empty entity")),
        }
        Ok(())
    }

    fn counter_size(&self, id: u32) -> Result<i64, Status> {
        self.info()?
            .counters
            .iter()
            .find(|c| c.preamble.as_ref().unwrap().id == id)
            .map(|c| c.size)
            .ok_or_else(|| Status::not_found(format!("unknown counter {id:#x}")))
    }

    fn read(&self, entity: &p4::Entity) -> Result<Vec<p4::Entity>, Status> {
        match entity.entity.as_ref() {
            Some(p4::entity::Entity::TableEntry(q)) => {
                if !q.r#match.is_empty() {
                    return Err(Status::unimplemented("reads by key"));
                }
                Ok(self
                    .tables
                    .values()
                    .filter(|e| q.table_id == 0 || e.table_id == q.table_id)
                    .map(|e| p4::Entity {
                        entity: Some(p4::entity::Entity::TableEntry(e.clone())),
                    })
                    .collect())
            }
            Some(p4::entity::Entity::CounterEntry(q)) => {
                let size = self.counter_size(q.counter_id)?;
                let index = q
                    .index
                    .as_ref()
                    .ok_or_else(|| Status::unimplemented("wildcard counter read"))?
                    .index;
                if !(0..size).contains(&index) {
                    return Err(Status::out_of_range("counter index"));
                }
                let data = self
                    .counters
                    .get(&(q.counter_id, index))
                    .cloned()
                    .unwrap_or_default();
                Ok(vec![p4::Entity {
                    entity: Some(p4::entity::Entity::CounterEntry(p4::CounterEntry {
                        counter_id: q.counter_id,
                        index: Some(p4::Index { index }),
                        data: Some(data),
                    })),
                }])
            }
            _ => Err(Status::unimplemented("this read")),
        }
    }
}

#[derive(Clone)]
struct Recorder(Arc<Mutex<State>>);

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl P4Runtime for Recorder {
    async fn write(
        &self,
        request: Request<p4::WriteRequest>,
    ) -> Result<Response<p4::WriteResponse>, Status> {
        let r = request.into_inner();
        let mut s = self.0.lock().unwrap();
        if r.device_id != s.device_id {
            return Err(Status::not_found("unknown device"));
        }
        if s.primary.is_none() || s.primary != Some(election(r.election_id.as_ref())) {
            return Err(Status::permission_denied("not the primary"));
        }
        for u in &r.updates {
            s.log.push(Logged::Write(u.clone()));
        }
        for u in &r.updates {
            s.apply(u)?;
        }
        Ok(Response::new(p4::WriteResponse {}))
    }

    type ReadStream = BoxStream<p4::ReadResponse>;

    async fn read(
        &self,
        request: Request<p4::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let r = request.into_inner();
        let s = self.0.lock().unwrap();
        s.info()?;
        let mut entities = Vec::new();
        for e in &r.entities {
            entities.extend(s.read(e)?);
        }
        let reply = p4::ReadResponse { entities };
        Ok(Response::new(Box::pin(tokio_stream::once(Ok(reply)))))
    }

    async fn set_forwarding_pipeline_config(
        &self,
        request: Request<p4::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::SetForwardingPipelineConfigResponse>, Status> {
        let r = request.into_inner();
        let mut s = self.0.lock().unwrap();
        if s.primary != Some(election(r.election_id.as_ref())) {
            return Err(Status::permission_denied("not the primary"));
        }
        s.log.push(Logged::SetPipeline(r.clone()));
        let config = r
            .config
            .ok_or_else(|| Status::invalid_argument("no config"))?;
        s.p4info = Some(
            config
                .p4info
                .ok_or_else(|| Status::invalid_argument("no P4Info"))?,
        );
        s.device_config = config.p4_device_config;
        s.cookie = config.cookie.map(|c| c.cookie);
        s.pushes += 1;
        s.tables.clear();
        s.groups.clear();
        s.counters.clear();
        Ok(Response::new(p4::SetForwardingPipelineConfigResponse {}))
    }

    async fn get_forwarding_pipeline_config(
        &self,
        request: Request<p4::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<p4::GetForwardingPipelineConfigResponse>, Status> {
        use p4::get_forwarding_pipeline_config_request::ResponseType;
        let r = request.into_inner();
        let s = self.0.lock().unwrap();
        let info = s.info()?.clone();
        let cookie = s
            .cookie
            .map(|cookie| p4::forwarding_pipeline_config::Cookie { cookie });
        let config = match ResponseType::try_from(r.response_type) {
            Ok(ResponseType::CookieOnly) => p4::ForwardingPipelineConfig {
                cookie,
                ..Default::default()
            },
            Ok(ResponseType::P4infoAndCookie) => p4::ForwardingPipelineConfig {
                p4info: Some(info),
                cookie,
                ..Default::default()
            },
            _ => p4::ForwardingPipelineConfig {
                p4info: Some(info),
                p4_device_config: s.device_config.clone(),
                cookie,
            },
        };
        Ok(Response::new(p4::GetForwardingPipelineConfigResponse {
            config: Some(config),
        }))
    }

    type StreamChannelStream = BoxStream<p4::StreamMessageResponse>;

    async fn stream_channel(
        &self,
        request: Request<tonic::Streaming<p4::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        let mut inbound = request.into_inner();
        let state = self.0.clone();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut mine: Option<u128> = None;
            while let Ok(Some(msg)) = inbound.message().await {
                let Some(p4::stream_message_request::Update::Arbitration(a)) = msg.update else {
                    continue;
                };
                let id = election(a.election_id.as_ref());
                let reply = {
                    let mut s = state.lock().unwrap();
                    s.log.push(Logged::Arbitration(id));
                    if a.device_id != s.device_id {
                        Err(Status::not_found(format!("unknown device {}", a.device_id)))
                    } else {
                        let highest = s.other_controller.into_iter().chain(s.primary).max();
                        let primary = match highest {
                            None => true,
                            Some(h) => id >= h,
                        };
                        if primary {
                            s.primary = Some(id);
                            mine = Some(id);
                        }
                        let best = highest.map_or(id, |h| h.max(id));
                        Ok(p4::StreamMessageResponse {
                            update: Some(p4::stream_message_response::Update::Arbitration(
                                p4::MasterArbitrationUpdate {
                                    device_id: a.device_id,
                                    role: None,
                                    election_id: Some(p4::Uint128 {
                                        high: (best >> 64) as u64,
                                        low: best as u64,
                                    }),
                                    status: Some(rpc::Status {
                                        code: if primary { 0 } else { 6 },
                                        message: if primary {
                                            String::new()
                                        } else {
                                            "Is backup".into()
                                        },
                                        details: Vec::new(),
                                    }),
                                },
                            )),
                        })
                    }
                };
                let fatal = reply.is_err();
                if tx.send(reply).await.is_err() || fatal {
                    break;
                }
            }
            let mut s = state.lock().unwrap();
            if mine.is_some() && s.primary == mine {
                s.primary = None;
            }
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// A running recorder; stops when dropped.
struct Switch {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    _server: TestServer,
}

impl Switch {
    fn start(state: State) -> Switch {
        let state = Arc::new(Mutex::new(state));
        let server = TestServer::start(tonic::service::Routes::new(P4RuntimeServer::new(
            Recorder(state.clone()),
        )))
        .unwrap();
        Switch {
            addr: server.addr,
            state,
            _server: server,
        }
    }

    fn with_pipeline() -> Switch {
        Switch::start(State::with_pipeline(v1model_p4info(64, 8192)))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    fn writes(&self) -> Vec<p4::Update> {
        self.state()
            .log
            .iter()
            .filter_map(|l| match l {
                Logged::Write(u) => Some(u.clone()),
                _ => None,
            })
            .collect()
    }

    fn options(&self) -> Bmv2Options {
        Bmv2Options {
            addr: self.addr,
            topology: Some(topology()),
            timeout: Duration::from_secs(3),
            ..Bmv2Options::default()
        }
    }

    fn connect(&self) -> Bmv2Target {
        Bmv2Target::connect(self.options()).unwrap()
    }
}

// ---------------------------------------------------------------------------
// Fixtures: the P4Info's ids looked up by name here, independently of the
// target's resolution.

struct Ids(P4Info);

/// An action and its parameters, by name.
type NamedAction<'a> = (&'a str, &'a [(&'a str, &'a [u8])]);

impl Ids {
    fn new() -> Ids {
        Ids(v1model_p4info(64, 8192))
    }
    fn table(&self, name: &str) -> &cfg::Table {
        self.0
            .tables
            .iter()
            .find(|t| t.preamble.as_ref().unwrap().name == name)
            .unwrap()
    }
    fn table_id(&self, name: &str) -> u32 {
        self.table(name).preamble.as_ref().unwrap().id
    }
    fn field(&self, table: &str, field: &str) -> u32 {
        self.table(table)
            .match_fields
            .iter()
            .find(|f| f.name == field)
            .unwrap()
            .id
    }
    fn action(&self, name: &str) -> &cfg::Action {
        self.0
            .actions
            .iter()
            .find(|a| a.preamble.as_ref().unwrap().name == name)
            .unwrap()
    }
    fn param(&self, action: &str, param: &str) -> u32 {
        self.action(action)
            .params
            .iter()
            .find(|p| p.name == param)
            .unwrap()
            .id
    }
    fn counter(&self, name: &str) -> u32 {
        self.0
            .counters
            .iter()
            .find(|c| c.preamble.as_ref().unwrap().name == name)
            .unwrap()
            .preamble
            .as_ref()
            .unwrap()
            .id
    }

    /// A table entry: exact matches and an action, all by name.
    fn entry(
        &self,
        table: &str,
        matches: &[(&str, &[u8])],
        action: Option<NamedAction>,
    ) -> p4::Entity {
        p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(p4::TableEntry {
                table_id: self.table_id(table),
                r#match: matches
                    .iter()
                    .map(|(f, v)| p4::FieldMatch {
                        field_id: self.field(table, f),
                        field_match_type: Some(p4::field_match::FieldMatchType::Exact(
                            p4::field_match::Exact { value: v.to_vec() },
                        )),
                    })
                    .collect(),
                action: action.map(|(a, params)| p4::TableAction {
                    r#type: Some(p4::table_action::Type::Action(p4::Action {
                        action_id: self.action(a).preamble.as_ref().unwrap().id,
                        params: params
                            .iter()
                            .map(|(p, v)| p4::action::Param {
                                param_id: self.param(a, p),
                                value: v.to_vec(),
                            })
                            .collect(),
                    })),
                }),
                ..Default::default()
            })),
        }
    }

    fn counter_cell(&self, name: &str, index: i64, data: Option<(i64, i64)>) -> p4::Entity {
        p4::Entity {
            entity: Some(p4::entity::Entity::CounterEntry(p4::CounterEntry {
                counter_id: self.counter(name),
                index: Some(p4::Index { index }),
                data: data.map(|(packet_count, byte_count)| p4::CounterData {
                    byte_count,
                    packet_count,
                }),
            })),
        }
    }
}

fn group(id: u32, replicas: &[(u32, u32)]) -> p4::Entity {
    let replicas = replicas
        .iter()
        .map(|&(port, instance)| p4::Replica {
            port_kind: Some(p4::replica::PortKind::EgressPort(port)),
            instance,
        })
        .collect();
    inagg_switch_control::bmv2::target::group_entity(id, replicas)
}

fn upd(kind: p4::update::Type, entity: p4::Entity) -> p4::Update {
    p4::Update {
        r#type: kind as i32,
        entity: Some(entity),
    }
}

use p4::update::Type::{Delete, Insert, Modify};

const JOB_TABLE: &str = "InaggIngress.admission.job_table";
const SET_JOB: &str = "InaggIngress.admission.set_job";
const WORKER_TABLE: &str = "InaggIngress.admission.worker_table";
const SET_WORKER: &str = "InaggIngress.admission.set_worker";
const RECEIVERS: &str = "InaggEgress.result_rewrite.result_receivers";
const SET_RECEIVER: &str = "InaggEgress.result_rewrite.set_receiver";
const PER_JOB: [&str; 10] = [
    "InaggIngress.job_contributions",
    "InaggIngress.job_results",
    "InaggIngress.job_resent_results",
    "InaggIngress.job_duplicates",
    "InaggIngress.job_dropped",
    "InaggIngress.job_upstream",
    "InaggIngress.job_upstream_resent",
    "InaggIngress.job_detours_sent",
    "InaggIngress.job_detours_taken",
    "InaggIngress.job_queries",
];

const GROUP_TABLE: &str = "InaggIngress.group_relay.group_table";
const SET_GROUP: &str = "InaggIngress.group_relay.set_group";
const MEMBER_TABLE: &str = "InaggIngress.group_relay.member_table";
const SET_MEMBER: &str = "InaggIngress.group_relay.set_member";
const GROUP_RECEIVERS: &str = "InaggEgress.group_rewrite.group_receivers";
const SET_MEMBER_ADDRESS: &str = "InaggEgress.group_rewrite.set_member_address";
const GROUP_COUNTERS: [&str; 2] = ["InaggIngress.group_packets", "InaggEgress.group_copies"];

/// A member in the entries' encoding: switch port, MAC, IPv4 address, UDP
/// port (big-endian, no padding).
type Member<'a> = (u8, [u8; 6], [u8; 4], &'a [u8]);

/// The worker_table entry admitting `member` to job `job` (encoded) as
/// worker `worker` (None: the key alone, for a delete).
fn worker_entry(ids: &Ids, job: &[u8], member: Member, worker: Option<u8>) -> p4::Entity {
    let (switch_port, _, addr, port) = member;
    let worker = worker.map(|w| [w]);
    let params = worker.as_ref().map(|w| [("worker", &w[..])]);
    ids.entry(
        WORKER_TABLE,
        &[
            ("job", job),
            ("ingress_port", &[switch_port]),
            ("src_addr", &addr),
            ("src_port", port),
        ],
        params.as_ref().map(|p| (SET_WORKER, &p[..])),
    )
}

/// The result_receivers entry sending copy `rid` of job `job`'s results to
/// `member`.
fn receiver_entry(ids: &Ids, job: &[u8], rid: u8, member: Member) -> p4::Entity {
    let (_, mac, addr, port) = member;
    ids.entry(
        RECEIVERS,
        &[("job", job), ("rid", &[rid])],
        Some((
            SET_RECEIVER,
            &[("dst_mac", &mac), ("dst_addr", &addr), ("dst_port", port)],
        )),
    )
}

/// The two workers of the tests' jobs: 10.0.0.1:5000 on port 1 and
/// 10.0.0.2:5001 on port 2.
const TWO: [Member<'static>; 2] = [
    (1, [2, 0, 0, 0, 0, 1], [10, 0, 0, 1], &[0x13, 0x88]),
    (2, [2, 0, 0, 0, 0, 2], [10, 0, 0, 2], &[0x13, 0x89]),
];

/// The inserts that make group `g` (encoded) relay among `members`, in the
/// documented order: group_receivers, member_table, group_table.
fn relay_inserts(ids: &Ids, g: &[u8], members: &[Member]) -> Vec<p4::Update> {
    let mut out = Vec::new();
    for (i, (_, mac, addr, port)) in members.iter().enumerate() {
        out.push(upd(
            Insert,
            ids.entry(
                GROUP_RECEIVERS,
                &[("group", g), ("rid", &[i as u8])],
                Some((
                    SET_MEMBER_ADDRESS,
                    &[("dst_mac", mac), ("dst_addr", addr), ("dst_port", port)],
                )),
            ),
        ));
    }
    for (i, (switch_port, _, addr, port)) in members.iter().enumerate() {
        out.push(upd(
            Insert,
            ids.entry(
                MEMBER_TABLE,
                &[
                    ("group", g),
                    ("ingress_port", &[*switch_port]),
                    ("src_addr", addr),
                    ("src_port", port),
                ],
                Some((SET_MEMBER, &[("member", &[i as u8])])),
            ),
        ));
    }
    out.push(upd(
        Insert,
        ids.entry(
            GROUP_TABLE,
            &[("group", g)],
            Some((SET_GROUP, &[("mcast_grp", g)])),
        ),
    ));
    out
}

/// The incarnation of the last job_table insert in the log.
fn last_incarnation(sw: &Switch, ids: &Ids) -> Vec<u8> {
    let param = ids.param(SET_JOB, "incarnation");
    sw.writes()
        .iter()
        .rev()
        .find_map(|u| match u.entity.as_ref()?.entity.as_ref()? {
            p4::entity::Entity::TableEntry(e) if e.table_id == ids.table_id(JOB_TABLE) => {
                match e.action.as_ref()?.r#type.as_ref()? {
                    p4::table_action::Type::Action(a) => a
                        .params
                        .iter()
                        .find(|p| p.param_id == param)
                        .map(|p| p.value.clone()),
                }
            }
            _ => None,
        })
        .unwrap()
}

// ---------------------------------------------------------------------------
// Tests.

#[test]
fn arbitration_and_pipeline_push_are_idempotent() {
    let sw = Switch::start(State::default());
    let dir = std::env::temp_dir().join(format!("inagg-bmv2-push-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let info = v1model_p4info(64, 8192);
    let p4info = dir.join("inagg.p4info.bin");
    let json = dir.join("inagg.json");
    std::fs::write(&p4info, info.encode_to_vec()).unwrap();
    std::fs::write(&json, br#"{"program": "inagg.p4"}"#).unwrap();
    let options = Bmv2Options {
        p4info: Some(p4info.clone()),
        bmv2_json: Some(json.clone()),
        ..sw.options()
    };

    let t = Bmv2Target::connect(options.clone()).unwrap();
    assert_eq!(t.pipeline_action(), PipelineAction::Pushed);
    {
        let s = sw.state();
        assert_eq!(s.log[0], Logged::Arbitration(1));
        let Logged::SetPipeline(push) = &s.log[1] else {
            panic!("{:?}", s.log)
        };
        assert_eq!(
            push.action,
            p4::set_forwarding_pipeline_config_request::Action::VerifyAndCommit as i32
        );
        assert_eq!(push.election_id, Some(p4::Uint128 { high: 0, low: 1 }));
        let config = push.config.as_ref().unwrap();
        assert_eq!(config.p4info.as_ref(), Some(&info));
        assert_eq!(config.p4_device_config, br#"{"program": "inagg.p4"}"#);
        assert!(config.cookie.is_some());
        assert_eq!(s.pushes, 1);
    }
    drop(t);

    // The same files again: the cookie matches, nothing is pushed (a push
    // would clear every entry).
    let again = Bmv2Target::connect(options.clone()).unwrap();
    assert_eq!(again.pipeline_action(), PipelineAction::AlreadyInstalled);
    assert_eq!(sw.state().pushes, 1);
    drop(again);

    // No files: the names resolve through the switch's P4Info.
    let mut plain = sw.connect();
    assert_eq!(plain.pipeline_action(), PipelineAction::Untouched);
    assert_eq!(plain.info().unwrap().slots, 8192);
    drop(plain);

    // Another JSON is another pipeline.
    std::fs::write(&json, br#"{"program": "other"}"#).unwrap();
    let t = Bmv2Target::connect(options).unwrap();
    assert_eq!(t.pipeline_action(), PipelineAction::Pushed);
    assert_eq!(sw.state().pushes, 2);
    drop(t);

    // A JSON without its P4Info is refused before connecting.
    let err = Bmv2Target::connect(Bmv2Options {
        bmv2_json: Some(json),
        ..sw.options()
    })
    .unwrap_err();
    assert!(err.to_string().contains("give --p4info too"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn create_job_writes_the_documented_entries_in_order() {
    let sw = Switch::with_pipeline();
    let ids = Ids::new();
    let mut t = sw.connect();
    let job = spec(1, &["10.0.0.1:5000", "10.0.0.2:5001"], 0, 128);
    install_job(&mut t, &job).unwrap();

    let incarnation = last_incarnation(&sw, &ids);
    assert!(
        !incarnation.is_empty()
            && incarnation.len() <= 4
            && (incarnation.len() == 1 || incarnation[0] != 0),
        "canonical 32-bit: {incarnation:02x?}"
    );
    assert_ne!(incarnation, [0], "incarnation 0 is never used");
    let mut expected = vec![
        upd(Insert, group(2, &[(1, 0), (2, 1)])),
        upd(Insert, receiver_entry(&ids, &[1], 0, TWO[0])),
        upd(Insert, receiver_entry(&ids, &[1], 1, TWO[1])),
        upd(Insert, worker_entry(&ids, &[1], TWO[0], Some(0))),
        upd(Insert, worker_entry(&ids, &[1], TWO[1], Some(1))),
    ];
    for c in PER_JOB {
        expected.push(upd(Modify, ids.counter_cell(c, 1, Some((0, 0)))));
    }
    for c in GROUP_COUNTERS {
        expected.push(upd(Modify, ids.counter_cell(c, 2, Some((0, 0)))));
    }
    expected.push(upd(
        Insert,
        ids.entry(
            JOB_TABLE,
            &[("job", &[1])],
            Some((
                SET_JOB,
                &[
                    ("worker_count", &[2]),
                    ("pool_base", &[0]),
                    ("pool_size", &[0x80]),
                    ("elements", &[0x40]),
                    ("generation", &[0]),
                    ("mcast_grp", &[2]),
                    ("incarnation", &incarnation),
                    ("detours", &[0]),
                    ("child_switches", &[0]),
                ],
            )),
        ),
    ));
    // Then the job's result group relays group datagrams among its workers.
    expected.extend(relay_inserts(&ids, &[2], &TWO));
    let writes = sw.writes();
    assert_eq!(writes.len(), expected.len(), "{writes:#?}");
    for (i, (got, want)) in writes.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "write {i}");
    }

    // Read back from the switch: the same job.
    let jobs = t.jobs().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].spec, job);
    assert_eq!(jobs[0].counters, Default::default());
    assert_eq!(t.job(1).unwrap().spec, job);
    let info = t.info().unwrap();
    assert_eq!((info.slots, info.max_elements, info.jobs), (8192, 64, 1));
    let pools = t.pools().unwrap();
    assert_eq!(pools.free, 8192 - 128);
    assert_eq!(pools.ranges[0].job, Some(1));

    // A second connection (another `inagg ctl` run) sees the same state.
    drop(t);
    let mut other = sw.connect();
    assert_eq!(other.jobs().unwrap()[0].spec, job);

    // Wide values: pool_base and ports take more bytes, still no padding.
    let wide = spec(300, &["10.0.0.3:47000"], 4096, 4096);
    install_job(&mut other, &wide).unwrap();
    let writes = sw.writes();
    let want = ids.entry(
        JOB_TABLE,
        &[("job", &[0x01, 0x2c])],
        Some((
            SET_JOB,
            &[
                ("worker_count", &[1]),
                ("pool_base", &[0x10, 0x00]),
                ("pool_size", &[0x10, 0x00]),
                ("elements", &[0x40]),
                ("generation", &[0]),
                ("mcast_grp", &[0x01, 0x2d]),
                ("incarnation", &last_incarnation(&sw, &ids)),
                ("detours", &[0]),
                ("child_switches", &[0]),
            ],
        )),
    );
    // The job_table entry, then the relay's three entries.
    assert_eq!(writes[writes.len() - 4], upd(Insert, want));
    assert_eq!(
        writes[writes.len() - 19],
        upd(Insert, group(301, &[(3, 0)]))
    );
    assert_eq!(other.jobs().unwrap().len(), 2);
}

#[test]
fn bad_jobs_are_refused_before_anything_is_written() {
    let sw = Switch::with_pipeline();
    let mut t = sw.connect();
    install_job(&mut t, &spec(1, &["10.0.0.1:5000"], 0, 128)).unwrap();
    let before = sw.writes().len();

    let err = install_job(&mut t, &spec(2, &["10.0.0.2:5000"], 64, 128)).unwrap_err();
    assert!(
        matches!(
            err,
            ControlError::Job(JobError::PoolOverlap { other: 1, .. })
        ),
        "{err}"
    );
    // create_job checks again, against what it reads from the switch.
    let err = t
        .create_job(&spec(1, &["10.0.0.2:5000"], 1000, 8))
        .unwrap_err();
    assert!(
        matches!(err, ControlError::Job(JobError::DuplicateId { id: 1 })),
        "{err}"
    );
    let err = t
        .create_job(&spec(2, &["10.0.0.2:5000"], 8190, 8))
        .unwrap_err();
    assert!(
        matches!(err, ControlError::Job(JobError::PoolBeyondMemory { .. })),
        "{err}"
    );
    let mut k32 = spec(2, &["10.0.0.2:5000"], 1000, 8);
    k32.elements = 32;
    let msg = t.create_job(&k32).unwrap_err().to_string();
    assert!(msg.contains("compiled with K = 64"), "{msg}");

    let msg = t
        .create_job(&spec(2, &["10.0.0.2:5000", "10.0.0.9:5001"], 1000, 8))
        .unwrap_err()
        .to_string();
    assert_eq!(
        msg,
        "topology.toml: no entry for job 2 worker 1 (10.0.0.9:5001); add \"10.0.0.9\" = \
         { port = N, mac = \"..\" } under [workers]"
    );
    let msg = t
        .create_job(&spec(65535, &["10.0.0.2:5000"], 1000, 8))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("job id 65535 cannot be used"), "{msg}");

    let mut no_topology = Bmv2Target::connect(Bmv2Options {
        topology: None,
        ..sw.options()
    })
    .unwrap();
    let msg = no_topology
        .create_job(&spec(2, &["10.0.0.2:5000"], 1000, 8))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("needs the topology file"), "{msg}");
    // Reading works without one.
    assert_eq!(no_topology.jobs().unwrap().len(), 1);

    assert_eq!(sw.writes().len(), before, "nothing written");

    // Full tables are refused before anything is written, too.
    let mut info = v1model_p4info(64, 8192);
    for t in &mut info.tables {
        if t.preamble.as_ref().unwrap().name == JOB_TABLE {
            t.size = 1;
        }
    }
    let small = Switch::start(State::with_pipeline(info));
    let mut t = small.connect();
    install_job(&mut t, &spec(1, &["10.0.0.1:5000"], 0, 8)).unwrap();
    let before = small.writes().len();
    let msg = install_job(&mut t, &spec(2, &["10.0.0.2:5000"], 8, 8))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("job 2: InaggIngress.admission.job_table holds 1 of its 1 entries"),
        "{msg}"
    );
    assert_eq!(small.writes().len(), before);
}

#[test]
fn delete_job_removes_everything_in_reverse_order() {
    let sw = Switch::with_pipeline();
    let ids = Ids::new();
    let mut t = sw.connect();
    install_job(
        &mut t,
        &spec(1, &["10.0.0.1:5000", "10.0.0.2:5001"], 0, 128),
    )
    .unwrap();
    install_job(&mut t, &spec(7, &["10.0.0.3:6000"], 128, 64)).unwrap();
    let first = last_incarnation(&sw, &ids);
    let before = sw.writes().len();

    t.delete_job(1).unwrap();
    let writes = sw.writes()[before..].to_vec();
    let member_key = |port: u8, addr: [u8; 4], udp: &[u8]| {
        ids.entry(
            MEMBER_TABLE,
            &[
                ("group", &[2]),
                ("ingress_port", &[port]),
                ("src_addr", &addr),
                ("src_port", udp),
            ],
            None,
        )
    };
    let expected = vec![
        // The job's result group stops relaying first: group_table leads.
        upd(Delete, ids.entry(GROUP_TABLE, &[("group", &[2])], None)),
        upd(Delete, member_key(1, [10, 0, 0, 1], &[0x13, 0x88])),
        upd(Delete, member_key(2, [10, 0, 0, 2], &[0x13, 0x89])),
        upd(
            Delete,
            ids.entry(GROUP_RECEIVERS, &[("group", &[2]), ("rid", &[0])], None),
        ),
        upd(
            Delete,
            ids.entry(GROUP_RECEIVERS, &[("group", &[2]), ("rid", &[1])], None),
        ),
        upd(Delete, ids.entry(JOB_TABLE, &[("job", &[1])], None)),
        upd(Delete, worker_entry(&ids, &[1], TWO[0], None)),
        upd(Delete, worker_entry(&ids, &[1], TWO[1], None)),
        upd(
            Delete,
            ids.entry(RECEIVERS, &[("job", &[1]), ("rid", &[0])], None),
        ),
        upd(
            Delete,
            ids.entry(RECEIVERS, &[("job", &[1]), ("rid", &[1])], None),
        ),
        upd(Delete, group(2, &[])),
    ];
    assert_eq!(writes, expected);

    let jobs = t.jobs().unwrap();
    assert_eq!(jobs.iter().map(|j| j.spec.id).collect::<Vec<_>>(), [7]);
    {
        let s = sw.state();
        assert_eq!(
            s.tables.len(),
            6,
            "job 7's six entries remain: job, worker, receiver, and its group's relay"
        );
        assert_eq!(s.groups.keys().copied().collect::<Vec<_>>(), [8]);
    }
    let err = t.delete_job(1).unwrap_err();
    assert!(
        matches!(err, ControlError::Job(JobError::UnknownJob { id: 1 })),
        "{err}"
    );
    assert!(matches!(
        t.job(1).unwrap_err(),
        ControlError::Job(JobError::UnknownJob { id: 1 })
    ));

    // Reinstalled, the job gets a new incarnation, so the slot state its
    // pool kept on the switch counts as empty.
    install_job(
        &mut t,
        &spec(1, &["10.0.0.1:5000", "10.0.0.2:5001"], 0, 128),
    )
    .unwrap();
    let second = last_incarnation(&sw, &ids);
    assert_ne!(first, second);
    assert_ne!(last_incarnation(&sw, &ids), [0]);
}

/// A group made by hand is what p4/README.md says: its multicast group
/// (replication id = member id), group_receivers, member_table, its
/// counters zeroed, group_table last; it reads back with its members and
/// counters, shares no id with a job's result group, and goes in reverse.
#[test]
fn groups_made_by_hand_write_the_documented_entries_and_read_back() {
    use inagg_switch_api::GroupSpec;
    let sw = Switch::with_pipeline();
    let ids = Ids::new();
    let mut t = sw.connect();
    install_job(&mut t, &spec(1, &["10.0.0.1:5000"], 0, 128)).unwrap();
    let before = sw.writes().len();
    let members: Vec<SocketAddr> = vec![
        "10.0.0.2:5001".parse().unwrap(),
        "10.0.0.3:47000".parse().unwrap(),
    ];
    let g9 = GroupSpec {
        id: 9,
        members: members.clone(),
    };
    t.create_group(&g9).unwrap();

    let mut expected = vec![upd(Insert, group(9, &[(2, 0), (3, 1)]))];
    let mut relay = relay_inserts(
        &ids,
        &[9],
        &[
            (2, [2, 0, 0, 0, 0, 2], [10, 0, 0, 2], &[0x13, 0x89]),
            (3, [2, 0, 0, 0, 0, 3], [10, 0, 0, 3], &[0xb7, 0x98]),
        ],
    );
    let group_table = relay.pop().unwrap();
    expected.extend(relay);
    for c in GROUP_COUNTERS {
        expected.push(upd(Modify, ids.counter_cell(c, 9, Some((0, 0)))));
    }
    expected.push(group_table);
    assert_eq!(sw.writes()[before..].to_vec(), expected);

    // Read back, beside job 1's result group (2), with its counters.
    for (name, packets) in [(GROUP_COUNTERS[0], 3), (GROUP_COUNTERS[1], 3)] {
        sw.state().counters.insert(
            (ids.counter(name), 9),
            p4::CounterData {
                byte_count: 0,
                packet_count: packets,
            },
        );
    }
    let groups = t.groups().unwrap();
    assert_eq!(
        groups.iter().map(|g| (g.id, g.job)).collect::<Vec<_>>(),
        [(2, Some(1)), (9, None)]
    );
    assert_eq!(groups[1].members, members);
    assert_eq!((groups[1].packets, groups[1].copies), (3, 3));

    // Ids are shared with the jobs' result groups, both ways.
    let err = t
        .create_group(&GroupSpec {
            id: 2,
            members: members.clone(),
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            ControlError::Job(JobError::GroupInUse { group: 2, .. })
        ),
        "{err}"
    );
    let err = install_job(&mut t, &spec(8, &["10.0.0.2:5001"], 128, 8)).unwrap_err();
    assert!(
        matches!(
            err,
            ControlError::Job(JobError::GroupInUse { group: 9, .. })
        ),
        "{err}"
    );
    let err = t
        .create_group(&GroupSpec {
            id: 9,
            members: members.clone(),
        })
        .unwrap_err();
    assert!(
        matches!(
            err,
            ControlError::Job(JobError::GroupInUse { group: 9, .. })
        ),
        "{err}"
    );
    // A member the topology does not place, and bad specs, write nothing.
    let n = sw.writes().len();
    let err = t
        .create_group(&GroupSpec {
            id: 10,
            members: vec!["10.9.9.9:1".parse().unwrap()],
        })
        .unwrap_err();
    assert!(err.to_string().contains("group 10 member 0"), "{err}");
    let err = t
        .create_group(&GroupSpec {
            id: 0,
            members: members.clone(),
        })
        .unwrap_err();
    assert!(
        matches!(err, ControlError::Job(JobError::GroupZero)),
        "{err}"
    );
    assert_eq!(sw.writes().len(), n);

    // A job's group goes with its job; an unknown group is an error.
    let err = t.delete_group(2).unwrap_err();
    assert!(
        matches!(
            err,
            ControlError::Job(JobError::GroupOfJob { group: 2, job: 1 })
        ),
        "{err}"
    );
    let err = t.delete_group(11).unwrap_err();
    assert!(
        matches!(err, ControlError::Job(JobError::UnknownGroup { group: 11 })),
        "{err}"
    );

    // Deleted in reverse: group_table first, the multicast group last.
    let before = sw.writes().len();
    t.delete_group(9).unwrap();
    let member_key = |port: u8, addr: [u8; 4], udp: &[u8]| {
        ids.entry(
            MEMBER_TABLE,
            &[
                ("group", &[9]),
                ("ingress_port", &[port]),
                ("src_addr", &addr),
                ("src_port", udp),
            ],
            None,
        )
    };
    assert_eq!(
        sw.writes()[before..].to_vec(),
        vec![
            upd(Delete, ids.entry(GROUP_TABLE, &[("group", &[9])], None)),
            upd(Delete, member_key(2, [10, 0, 0, 2], &[0x13, 0x89])),
            upd(Delete, member_key(3, [10, 0, 0, 3], &[0xb7, 0x98])),
            upd(
                Delete,
                ids.entry(GROUP_RECEIVERS, &[("group", &[9]), ("rid", &[0])], None)
            ),
            upd(
                Delete,
                ids.entry(GROUP_RECEIVERS, &[("group", &[9]), ("rid", &[1])], None)
            ),
            upd(Delete, group(9, &[])),
        ]
    );
    assert_eq!(
        t.groups().unwrap().iter().map(|g| g.id).collect::<Vec<_>>(),
        [2]
    );
    // Job 8 (default group 9) now installs.
    install_job(&mut t, &spec(8, &["10.0.0.2:5001"], 128, 8)).unwrap();

    // A group whose entries do not add up (another writer took one away)
    // is reported as partly installed, and deleting it removes the rest.
    t.create_group(&GroupSpec { id: 20, members }).unwrap();
    let receivers = ids.table_id(GROUP_RECEIVERS);
    let rid = ids.field(GROUP_RECEIVERS, "rid");
    sw.state().tables.retain(|(table, _), e| {
        let member_1 = e.r#match.iter().any(|m| {
            m.field_id == rid
                && matches!(&m.field_match_type,
                    Some(p4::field_match::FieldMatchType::Exact(x)) if x.value == [1])
        });
        !(*table == receivers && member_1)
    });
    let err = t.groups().unwrap_err().to_string();
    assert!(
        err.contains("group 20 is only partly installed")
            && err.contains("no group_receivers entry for member 1"),
        "{err}"
    );
    t.delete_group(20).unwrap();
    assert_eq!(
        t.groups().unwrap().iter().map(|g| g.id).collect::<Vec<_>>(),
        [2, 9]
    );
}

const UPSTREAM_TABLE: &str = "InaggIngress.admission.upstream_table";
const SET_UPSTREAM: &str = "InaggIngress.admission.set_upstream";
const PARENT_TABLE: &str = "InaggIngress.admission.parent_table";
const FROM_PARENT: &str = "InaggIngress.admission.from_parent";

/// Job 4 on 10.0.0.1:5000 and 10.0.0.2:5001, a leaf whose parent is job 30
/// of the switch at 10.0.9.1:47000 (port 9), as its member 1.
fn tree_job() -> JobSpec {
    JobSpec {
        upstream: Some("10.0.9.1:47000/30/1".parse().unwrap()),
        ..spec(4, &["10.0.0.1:5000", "10.0.0.2:5001"], 0, 16)
    }
}

/// tree_job()'s upstream_table insert, with the auxiliary path's
/// parameters as given (aux, via_mac, via_addr, via_port, via_egress_port,
/// busy_bound, queue_length).
fn tree_job_upstream(ids: &Ids, aux: [&[u8]; 7]) -> p4::Update {
    let names = [
        "aux",
        "via_mac",
        "via_addr",
        "via_port",
        "via_egress_port",
        "busy_bound",
        "queue_length",
    ];
    let mut params: Vec<(&str, &[u8])> = vec![
        ("parent_job", &[30]),
        ("member", &[1]),
        ("parent_mac", &[2, 0, 0, 0, 0, 9]),
        ("parent_addr", &[10, 0, 9, 1]),
        ("parent_port", &[0xb7, 0x98]),
        ("egress_port", &[9]),
    ];
    params.extend(names.into_iter().zip(aux));
    upd(
        Insert,
        ids.entry(
            UPSTREAM_TABLE,
            &[("job", &[4])],
            Some((SET_UPSTREAM, &params)),
        ),
    )
}

#[test]
fn tree_jobs_write_their_upstream_and_parent_entries_and_read_back() {
    let sw = Switch::with_pipeline();
    let ids = Ids::new();
    let mut t = sw.connect();
    let job = tree_job();
    install_job(&mut t, &job).unwrap();

    // No auxiliary path: its parameters are 0.
    let upstream = tree_job_upstream(&ids, [&[0], &[0], &[0], &[0], &[0], &[0], &[0]]);
    let parent = upd(
        Insert,
        ids.entry(
            PARENT_TABLE,
            &[
                ("parent_job", &[30]),
                ("ingress_port", &[9]),
                ("src_addr", &[10, 0, 9, 1]),
                ("src_port", &[0xb7, 0x98]),
            ],
            Some((FROM_PARENT, &[("job", &[4])])),
        ),
    );
    let writes = sw.writes();
    let at = |u: &p4::Update| writes.iter().position(|w| w == u);
    let job_table = writes
        .iter()
        .position(|w| {
            matches!(&w.entity.as_ref().unwrap().entity,
                Some(p4::entity::Entity::TableEntry(e)) if e.table_id == ids.table_id(JOB_TABLE))
        })
        .unwrap();
    let (u, p) = (at(&upstream).unwrap(), at(&parent).unwrap());
    // Both before job_table: no set completes before the switch knows where
    // its partial sum goes.
    assert!(u < p && p < job_table, "{u} {p} {job_table}");

    // Read back: the same job, upstream included.
    assert_eq!(t.jobs().unwrap()[0].spec, job);
    // Another connection (another `inagg ctl` run) sees it too.
    drop(t);
    let mut t = sw.connect();
    assert_eq!(t.job(4).unwrap().spec, job);

    // Refusals, before anything is written.
    let before = sw.writes().len();
    let mut same_parent = tree_job();
    same_parent.id = 5;
    same_parent.pool_base = 16;
    same_parent.workers = vec!["10.0.0.3:5000".parse().unwrap()];
    let msg = t.create_job(&same_parent).unwrap_err().to_string();
    assert!(
        msg.contains("job 4 already takes job 30's results from 10.0.9.1:47000"),
        "{msg}"
    );
    let mut aux = same_parent.clone();
    aux.upstream = Some("10.0.9.1:47000/31/1".parse().unwrap());
    aux.upstream.as_mut().unwrap().aux = Some("10.0.7.7:47000/2/1".parse().unwrap());
    let msg = t.create_job(&aux).unwrap_err().to_string();
    assert!(
        msg.contains("no entry for job 5's auxiliary path (10.0.7.7:47000)"),
        "{msg}"
    );
    let mut stranger = same_parent.clone();
    stranger.upstream = Some("10.0.8.8:47000/31/1".parse().unwrap());
    let msg = t.create_job(&stranger).unwrap_err().to_string();
    assert_eq!(
        msg,
        "topology.toml: no entry for job 5's parent switch (10.0.8.8:47000); add \
         \"10.0.8.8\" = { port = N, mac = \"..\" } under [workers]"
    );
    assert_eq!(sw.writes().len(), before, "nothing written");

    // Counters of a tree job read back.
    sw.state().counters.insert(
        (ids.counter("InaggIngress.job_upstream"), 4),
        p4::CounterData {
            byte_count: 0,
            packet_count: 6,
        },
    );
    assert_eq!(t.job(4).unwrap().counters.upstream, 6);

    // Deleting: job_table first, then the tree entries; nothing is left.
    let before = sw.writes().len();
    t.delete_job(4).unwrap();
    let writes = sw.writes()[before..].to_vec();
    let delete_of = |u: &p4::Update| {
        let mut key = u.entity.clone().unwrap();
        if let Some(p4::entity::Entity::TableEntry(e)) = &mut key.entity {
            e.action = None;
        }
        upd(Delete, key)
    };
    let job_deleted = writes
        .iter()
        .position(|w| *w == upd(Delete, ids.entry(JOB_TABLE, &[("job", &[4])], None)))
        .unwrap();
    assert_eq!(writes[job_deleted + 1], delete_of(&upstream));
    assert_eq!(writes[job_deleted + 2], delete_of(&parent));
    assert!(sw.state().tables.is_empty());
}

const DETOUR_TABLE: &str = "InaggIngress.admission.detour_table";
const TAKE_DETOUR: &str = "InaggIngress.admission.take_detour";
const RELAY_TABLE: &str = "InaggIngress.admission.relay_table";
const RELAY_TO: &str = "InaggIngress.admission.relay_to";

/// Job 5, a parent whose member 1 (the child switch at 10.0.9.1:47000)
/// also sends by a detour arriving from the relay at 10.0.0.2:47000.
fn parent_job() -> JobSpec {
    JobSpec {
        detours: vec!["1=10.0.0.2:47000".parse().unwrap()],
        ..spec(5, &["10.0.0.1:6000", "10.0.9.1:47000"], 32, 8)
    }
}

/// A relay entry for job `job`'s member `member` from `from` to `to`.
fn relay_spec(job: u16, from: &str, member: u16, to: &str) -> RelaySpec {
    RelaySpec {
        job,
        from: from.parse().unwrap(),
        member,
        to: to.parse().unwrap(),
    }
}

#[test]
fn auxiliary_paths_write_their_entries_and_read_back() {
    let sw = Switch::with_pipeline();
    let ids = Ids::new();
    let mut t = sw.connect();

    // A child with an auxiliary path: set_upstream carries it.
    let mut child = tree_job();
    child.upstream.as_mut().unwrap().aux = Some("10.0.0.3:47000/3/2".parse().unwrap());
    install_job(&mut t, &child).unwrap();
    let upstream = tree_job_upstream(
        &ids,
        [
            &[1],
            &[2, 0, 0, 0, 0, 3],
            &[10, 0, 0, 3],
            &[0xb7, 0x98],
            &[3],
            &[3],
            &[2],
        ],
    );
    assert!(sw.writes().contains(&upstream), "{:#?}", sw.writes());

    // A parent that takes member 1's detours from 10.0.0.2: its
    // detour_table entry goes in before job_table, which says it detours.
    let before = sw.writes().len();
    install_job(&mut t, &parent_job()).unwrap();
    let writes = sw.writes()[before..].to_vec();
    let detour = upd(
        Insert,
        ids.entry(
            DETOUR_TABLE,
            &[
                ("job", &[5]),
                ("ingress_port", &[2]),
                ("src_addr", &[10, 0, 0, 2]),
                ("src_port", &[0xb7, 0x98]),
                ("member", &[1]),
            ],
            Some((
                TAKE_DETOUR,
                &[
                    ("member_mac", &[2, 0, 0, 0, 0, 9]),
                    ("member_addr", &[10, 0, 9, 1]),
                    ("member_port", &[0xb7, 0x98]),
                    ("egress_port", &[9]),
                ],
            )),
        ),
    );
    let at_detour = writes
        .iter()
        .position(|w| *w == detour)
        .expect("detour_table entry");
    let job_insert = upd(
        Insert,
        ids.entry(
            JOB_TABLE,
            &[("job", &[5])],
            Some((
                SET_JOB,
                &[
                    ("worker_count", &[2]),
                    ("pool_base", &[32]),
                    ("pool_size", &[8]),
                    ("elements", &[0x40]),
                    ("generation", &[0]),
                    ("mcast_grp", &[6]),
                    ("incarnation", &last_incarnation(&sw, &ids)),
                    ("detours", &[1]),
                    ("child_switches", &[0]),
                ],
            )),
        ),
    );
    let at_job = writes
        .iter()
        .position(|w| *w == job_insert)
        .expect("job_table entry");
    assert!(at_detour < at_job, "{at_detour} {at_job}");

    // Both read back through another connection, as installed.
    let mut other = sw.connect();
    assert_eq!(other.job(4).unwrap().spec, child);
    assert_eq!(other.job(5).unwrap().spec, parent_job());

    // Relay entries: a counter cell each, zeroed before the entry; the
    // lowest free cell is reused.
    let before = sw.writes().len();
    t.create_relay(&relay_spec(7, "10.0.0.1:47000", 2, "10.0.9.1:47000"))
        .unwrap();
    let relay_entry = |job: u8, index: u8| {
        ids.entry(
            RELAY_TABLE,
            &[
                ("job", &[job]),
                ("ingress_port", &[1]),
                ("src_addr", &[10, 0, 0, 1]),
                ("src_port", &[0xb7, 0x98]),
                ("member", &[2]),
            ],
            Some((
                RELAY_TO,
                &[
                    ("index", &[index]),
                    ("next_mac", &[2, 0, 0, 0, 0, 9]),
                    ("next_addr", &[10, 0, 9, 1]),
                    ("next_port", &[0xb7, 0x98]),
                    ("egress_port", &[9]),
                ],
            )),
        )
    };
    assert_eq!(
        sw.writes()[before..].to_vec(),
        vec![
            upd(
                Modify,
                ids.counter_cell("InaggIngress.relay_packets", 0, Some((0, 0)))
            ),
            upd(Insert, relay_entry(7, 0)),
        ]
    );
    t.create_relay(&relay_spec(8, "10.0.0.1:47000", 2, "10.0.9.1:47000"))
        .unwrap();
    t.delete_relay(relay_spec(7, "10.0.0.1:47000", 2, "10.0.9.1:47000").key())
        .unwrap_or_else(|e| panic!("{e}"));
    t.create_relay(&relay_spec(9, "10.0.0.1:47000", 2, "10.0.9.1:47000"))
        .unwrap();
    assert_eq!(sw.writes().last().unwrap(), &upd(Insert, relay_entry(9, 0)));
    sw.state().counters.insert(
        (ids.counter("InaggIngress.relay_packets"), 1),
        p4::CounterData {
            byte_count: 0,
            packet_count: 12,
        },
    );
    let relays = other.relays().unwrap();
    let listed: Vec<(u16, u64)> = relays.iter().map(|r| (r.spec.job, r.packets)).collect();
    assert_eq!(listed, [(8, 12), (9, 0)]);
    assert_eq!(
        relays[0].spec,
        relay_spec(8, "10.0.0.1:47000", 2, "10.0.9.1:47000")
    );

    // Refusals, before anything is written: the same key twice; an entry
    // that would carry job 5's detours past it; a job whose detours an
    // entry would carry on; an unknown relay; a hop not in the topology.
    let before = sw.writes().len();
    let err = t
        .create_relay(&relay_spec(8, "10.0.0.1:47000", 2, "10.0.0.3:47000"))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "relay job 8 member 2 from 10.0.0.1:47000 is already installed; delete it first"
    );
    let err = t
        .create_relay(&relay_spec(5, "10.0.0.2:47000", 1, "10.0.9.1:47000"))
        .unwrap_err();
    assert!(err.to_string().contains("carry them past it"), "{err}");
    let mut relayed = parent_job();
    relayed.id = 8;
    relayed.pool_base = 64;
    relayed.detours = vec!["2=10.0.0.1:47000".parse().unwrap()];
    relayed.workers.push("10.0.0.3:6000".parse().unwrap());
    let err = t.create_job(&relayed).unwrap_err();
    assert!(
        err.to_string().contains("would be carried on by relay"),
        "{err}"
    );
    let err = t
        .delete_relay(relay_spec(7, "10.0.0.1:47000", 2, "10.0.9.1:47000").key())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "no relay job 7 member 2 from 10.0.0.1:47000 is installed"
    );
    let err = t
        .create_relay(&relay_spec(7, "10.0.7.7:47000", 2, "10.0.9.1:47000"))
        .unwrap_err();
    assert!(
        err.to_string().contains("no entry for relay_table entry"),
        "{err}"
    );
    assert_eq!(sw.writes().len(), before, "nothing written");

    // The counters of auxiliary paths read back, and reset.
    {
        let mut st = sw.state();
        let mut set = |name: &str, index: i64, packets: i64| {
            st.counters.insert(
                (ids.counter(name), index),
                p4::CounterData {
                    byte_count: 0,
                    packet_count: packets,
                },
            );
        };
        set("InaggIngress.job_detours_sent", 4, 3);
        set("InaggIngress.job_detours_taken", 5, 2);
        set("InaggIngress.relayed", 0, 12);
    }
    assert_eq!(t.job(4).unwrap().counters.detours_sent, 3);
    assert_eq!(t.job(5).unwrap().counters.detours_taken, 2);
    assert_eq!(t.counters().unwrap().relayed, 12);
    t.reset_counters().unwrap();
    assert_eq!(t.counters().unwrap().relayed, 0);
    assert!(t.relays().unwrap().iter().all(|r| r.packets == 0));

    // Deleting the parent: job_table, then its detour_table entry.
    let before = sw.writes().len();
    t.delete_job(5).unwrap();
    let writes = sw.writes()[before..].to_vec();
    let job_deleted = writes
        .iter()
        .position(|w| *w == upd(Delete, ids.entry(JOB_TABLE, &[("job", &[5])], None)))
        .unwrap();
    let mut key = detour.entity.clone().unwrap();
    if let Some(p4::entity::Entity::TableEntry(e)) = &mut key.entity {
        e.action = None;
    }
    assert_eq!(writes[job_deleted + 1], upd(Delete, key));
    t.delete_job(4).unwrap();
    for r in t.relays().unwrap() {
        t.delete_relay(r.spec.key()).unwrap();
    }
    assert!(sw.state().tables.is_empty());
}

#[test]
fn a_job_whose_detour_entries_are_missing_is_reported_and_can_be_deleted() {
    let sw = Switch::with_pipeline();
    let ids = Ids::new();
    let mut t = sw.connect();
    install_job(&mut t, &parent_job()).unwrap();
    {
        let mut s = sw.state();
        let detours = ids.table_id(DETOUR_TABLE);
        s.tables.retain(|k, _| k.0 != detours);
    }
    let msg = t.jobs().unwrap_err().to_string();
    assert!(
        msg.contains(
            "job 5 is only partly installed on the switch (job_table says the job takes \
             detours, detour_table has 0 entries for it)"
        ),
        "{msg}"
    );
    t.delete_job(5).unwrap();
    assert!(t.jobs().unwrap().is_empty());
    assert!(sw.state().tables.is_empty());
}

#[test]
fn a_tree_job_missing_half_its_tree_entries_is_reported_and_can_be_deleted() {
    let sw = Switch::with_pipeline();
    let ids = Ids::new();
    let mut t = sw.connect();
    install_job(&mut t, &tree_job()).unwrap();
    {
        let mut s = sw.state();
        let parents = ids.table_id(PARENT_TABLE);
        s.tables.retain(|k, _| k.0 != parents);
    }
    let msg = t.jobs().unwrap_err().to_string();
    assert!(
        msg.contains(
            "job 4 is only partly installed on the switch (an upstream_table entry without \
             parent_table's)"
        ),
        "{msg}"
    );
    t.delete_job(4).unwrap();
    assert!(t.jobs().unwrap().is_empty());
    assert!(sw.state().tables.is_empty());
}

#[test]
fn counters_map_to_the_emulators_and_reset_to_zero() {
    let sw = Switch::with_pipeline();
    let ids = Ids::new();
    let mut t = sw.connect();
    install_job(&mut t, &spec(1, &["10.0.0.1:5000"], 0, 128)).unwrap();
    {
        // What a data plane would have counted.
        let mut s = sw.state();
        let mut set = |name: &str, index: i64, packets: i64, bytes: i64| {
            s.counters.insert(
                (ids.counter(name), index),
                p4::CounterData {
                    byte_count: bytes,
                    packet_count: packets,
                },
            );
        };
        set("InaggIngress.rx", 0, 10, 3420);
        set("InaggEgress.tx", 0, 4, 1368);
        set("InaggIngress.drops", 2, 3, 0);
        set("InaggIngress.drops", 7, 1, 0);
        set("InaggIngress.drops", 15, 2, 0); // stale_round, the last reason
        set("InaggIngress.job_contributions", 1, 7, 0);
        set("InaggIngress.job_results", 1, 2, 0);
        set("InaggIngress.job_resent_results", 1, 1, 0);
        set("InaggIngress.job_duplicates", 1, 1, 0);
        set("InaggIngress.job_dropped", 1, 5, 0);
        set("InaggIngress.job_upstream", 1, 3, 0);
        set("InaggIngress.job_upstream_resent", 1, 2, 0);
        set("InaggIngress.job_detours_sent", 1, 4, 0);
        set("InaggIngress.job_detours_taken", 1, 8, 0);
        set("InaggIngress.job_queries", 1, 6, 0);
        set("InaggIngress.relayed", 0, 11, 0);
        set("InaggIngress.job_results", 2, 99, 0); // no job 2: not reported
    }
    let c = t.counters().unwrap();
    assert_eq!(
        (c.rx_packets, c.rx_bytes, c.tx_packets, c.tx_bytes),
        (10, 3420, 4, 1368)
    );
    assert_eq!(c.drops, [0, 0, 3, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2]);
    assert_eq!((c.injected_duplicates, c.injected_reorders), (0, 0));
    assert_eq!(c.relayed, 11);
    let j = &t.jobs().unwrap()[0].counters;
    assert_eq!(
        (
            j.contributions,
            j.results,
            j.resent_results,
            j.duplicates,
            j.dropped,
            j.upstream,
            j.upstream_resent,
            j.detours_sent,
            j.detours_taken,
            j.queries
        ),
        (7, 2, 1, 1, 5, 3, 2, 4, 8, 6)
    );

    let before = sw.writes().len();
    t.reset_counters().unwrap();
    let writes = sw.writes()[before..].to_vec();
    let mut expected = vec![
        upd(Modify, ids.counter_cell("InaggIngress.rx", 0, Some((0, 0)))),
        upd(Modify, ids.counter_cell("InaggEgress.tx", 0, Some((0, 0)))),
        upd(
            Modify,
            ids.counter_cell("InaggIngress.relayed", 0, Some((0, 0))),
        ),
    ];
    for i in 0..16 {
        expected.push(upd(
            Modify,
            ids.counter_cell("InaggIngress.drops", i, Some((0, 0))),
        ));
    }
    for name in PER_JOB {
        expected.push(upd(Modify, ids.counter_cell(name, 1, Some((0, 0)))));
    }
    // The job's result group (2) counts group datagrams.
    for name in GROUP_COUNTERS {
        expected.push(upd(Modify, ids.counter_cell(name, 2, Some((0, 0)))));
    }
    assert_eq!(writes, expected);
    assert_eq!(t.counters().unwrap(), Default::default());
    assert_eq!(t.jobs().unwrap()[0].counters, Default::default());

    // A new job starts from zero even if its id counted before.
    sw.state().counters.insert(
        (ids.counter("InaggIngress.job_results"), 9),
        p4::CounterData {
            byte_count: 0,
            packet_count: 42,
        },
    );
    install_job(&mut t, &spec(9, &["10.0.0.2:5000"], 128, 8)).unwrap();
    assert_eq!(t.job(9).unwrap().counters.results, 0);
}

#[test]
fn a_failed_install_is_undone_and_reported() {
    let ids = Ids::new();
    let mut state = State::with_pipeline(v1model_p4info(64, 8192));
    state.fail_insert = Some((ids.table_id(WORKER_TABLE), 1));
    let sw = Switch::start(state);
    let mut t = sw.connect();
    let err = install_job(
        &mut t,
        &spec(1, &["10.0.0.1:5000", "10.0.0.2:5001"], 0, 128),
    )
    .unwrap_err();
    assert!(matches!(err, ControlError::Rpc { code: 8, .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "P4Runtime Write (insert worker_table entry for job 1 worker 1) failed: \
         RESOURCE_EXHAUSTED: table is full"
    );
    {
        let s = sw.state();
        assert!(s.tables.is_empty(), "{:?}", s.tables);
        assert!(s.groups.is_empty());
        assert!(
            !s.log.iter().any(|l| matches!(l, Logged::Write(u)
                if u.entity.as_ref().and_then(|e| e.entity.as_ref()).is_some_and(|e| matches!(e,
                    p4::entity::Entity::TableEntry(t) if t.table_id == ids.table_id(JOB_TABLE))))),
            "job_table is never written"
        );
    }
    assert!(t.jobs().unwrap().is_empty());
    // The table has room again: the same job goes in.
    install_job(
        &mut t,
        &spec(1, &["10.0.0.1:5000", "10.0.0.2:5001"], 0, 128),
    )
    .unwrap();
}

/// A worker an interrupted install left behind: 10.0.0.9 port 1 on switch
/// port 9.
const STRAY: Member<'static> = (9, [2, 0, 0, 0, 0, 9], [10, 0, 0, 9], &[1]);

#[test]
fn leftovers_of_an_interrupted_install_are_replaced_or_removed() {
    let ids = Ids::new();
    let sw = Switch::with_pipeline();
    let mut t = sw.connect();
    {
        // A crash after the group and one worker entry: no job_table entry.
        let mut s = sw.state();
        s.groups.insert(
            4,
            p4::MulticastGroupEntry {
                multicast_group_id: 4,
                replicas: vec![p4::Replica {
                    port_kind: Some(p4::replica::PortKind::EgressPort(9)),
                    instance: 0,
                }],
            },
        );
        let p4::Entity {
            entity: Some(p4::entity::Entity::TableEntry(e)),
        } = worker_entry(&ids, &[3], STRAY, Some(0))
        else {
            unreachable!()
        };
        s.tables.insert(State::key(&e), e);
    }
    // Not a job: no job_table entry.
    assert!(t.jobs().unwrap().is_empty());

    let before = sw.writes().len();
    install_job(&mut t, &spec(3, &["10.0.0.1:5000"], 0, 8)).unwrap();
    let writes = sw.writes()[before..].to_vec();
    assert_eq!(
        writes[0],
        upd(Delete, worker_entry(&ids, &[3], STRAY, None))
    );
    // The switch refuses the duplicate group (ALREADY_EXISTS); it is replaced.
    assert_eq!(writes[1], upd(Insert, group(4, &[(1, 0)])));
    assert_eq!(writes[2], upd(Modify, group(4, &[(1, 0)])));
    assert_eq!(sw.state().groups[&4].replicas.len(), 1);
    assert_eq!(
        sw.state().groups[&4].replicas[0].port_kind,
        Some(p4::replica::PortKind::EgressPort(1))
    );
    assert_eq!(
        t.jobs().unwrap()[0].spec.workers[0].to_string(),
        "10.0.0.1:5000"
    );
}

#[test]
fn a_partly_installed_job_is_reported_and_can_be_deleted() {
    let ids = Ids::new();
    let sw = Switch::with_pipeline();
    let mut t = sw.connect();
    install_job(&mut t, &spec(9, &["10.0.0.1:5000", "10.0.0.2:5000"], 0, 8)).unwrap();
    {
        let mut s = sw.state();
        let worker_table = ids.table_id(WORKER_TABLE);
        let key = s
            .tables
            .iter()
            .filter(|(k, _)| k.0 == worker_table)
            .map(|(k, _)| k.clone())
            .next_back()
            .unwrap();
        s.tables.remove(&key);
    }
    let msg = t.jobs().unwrap_err().to_string();
    assert!(
        msg.contains(
            "job 9 is only partly installed on the switch (no worker_table entry for worker"
        ) && msg.contains("job delete 9"),
        "{msg}"
    );
    t.delete_job(9).unwrap();
    assert!(t.jobs().unwrap().is_empty());
    assert!(sw.state().tables.is_empty());
    assert!(sw.state().groups.is_empty());
}

#[test]
fn connection_problems_are_clear_errors_within_the_timeout() {
    // Nothing listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let started = Instant::now();
    let err = Bmv2Target::connect(Bmv2Options {
        addr: port,
        timeout: Duration::from_secs(2),
        ..Bmv2Options::default()
    })
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!("cannot reach P4Runtime server at {port}: "))
            && msg.ends_with("is simple_switch_grpc running?"),
        "{msg}"
    );
    // A bound on the wait, not a speed: ten times the 2 s timeout.
    assert!(started.elapsed() < Duration::from_secs(20));

    // Listening but never answering (the kernel accepts, nobody speaks).
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let started = Instant::now();
    let err = Bmv2Target::connect(Bmv2Options {
        addr: silent.local_addr().unwrap(),
        timeout: Duration::from_secs(1),
        ..Bmv2Options::default()
    })
    .unwrap_err();
    assert!(
        matches!(err, ControlError::P4RuntimeUnreachable { .. }),
        "{err}"
    );
    // Bounded (it does not hang), with room for a busy machine: ten
    // times the 1 s timeout.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );

    // Another controller is primary.
    let mut state = State::with_pipeline(v1model_p4info(64, 8192));
    state.other_controller = Some(10);
    let sw = Switch::start(state);
    let msg = Bmv2Target::connect(sw.options()).unwrap_err().to_string();
    assert!(
        msg.starts_with(
            "not the primary controller of device 0: Is backup (highest election id 10)"
        ) && msg.contains("--election-id"),
        "{msg}"
    );
    let t = Bmv2Target::connect(Bmv2Options {
        election_id: Some(11),
        ..sw.options()
    });
    assert!(t.is_ok());

    // Another device id.
    let sw = Switch::with_pipeline();
    let msg = Bmv2Target::connect(Bmv2Options {
        device_id: 3,
        ..sw.options()
    })
    .unwrap_err()
    .to_string();
    assert!(msg.contains("unknown device 3"), "{msg}");
}

#[test]
fn a_pipeline_that_is_not_inaggs_is_refused_by_name() {
    let mut info = v1model_p4info(64, 8192);
    info.tables
        .retain(|t| t.preamble.as_ref().unwrap().name != JOB_TABLE);
    let sw = Switch::start(State::with_pipeline(info));
    let msg = Bmv2Target::connect(sw.options()).unwrap_err().to_string();
    assert_eq!(
        msg,
        format!(
            "table InaggIngress.admission.job_table not in P4Info; is the pipeline inagg's \
             p4/v1model? (P4Info from device 0 of the switch at {})",
            sw.addr
        )
    );

    let empty = Switch::start(State::default());
    let msg = Bmv2Target::connect(empty.options())
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("push inagg's pipeline with --p4info p4/build/v1model/inagg.p4info.bin"),
        "{msg}"
    );
}

/// The controller with bmv2 as its switch (the recording server here):
/// bmv2 takes its compiled K only and has no per-job priority maps, and
/// does not say where its data plane is.
#[test]
fn the_controller_places_jobs_on_bmv2_and_keeps_a_refusal_to_its_job() {
    use inagg_controller::{Connector, Controller, ControllerConfig};
    use inagg_controller_api::Client;
    use inagg_controller_api::{JobDecl, Placement};
    use inagg_switch_api::queues::ClassQueue;

    let sw = Switch::with_pipeline();
    let options = sw.options();
    let connect: Connector = Box::new(move || {
        Ok(Box::new(Bmv2Target::connect(options.clone())?) as Box<dyn Target + Send>)
    });
    let state = std::env::temp_dir().join(format!("inagg-bmv2-ctl-{}.redb", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let data: SocketAddr = "10.0.0.254:47000".parse().unwrap();
    let start = |switch_data: Option<SocketAddr>, connect: Connector| {
        Controller::start(ControllerConfig {
            tls: None,
            insecure: false,
            listen: "127.0.0.1:0".parse().unwrap(),
            token: None,
            state: state.clone(),
            switch: (sw.addr, connect),
            switch_data,
            fallbacks: Vec::new(),
            reconcile_every: Duration::from_millis(100),
        })
        .unwrap()
    };
    let ctl = start(Some(data), connect);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let site = &c.sites().unwrap()[0];
    assert!(site.up, "{site:?}");
    assert_eq!(site.elements.as_deref(), Some("K = 64 only"));
    let job = |name: &str, endpoints: &[&str]| JobDecl {
        name: name.into(),
        workers: 2,
        slots: 16,
        elements: 64,
        fallback: false,
        endpoints: Some(endpoints.iter().map(|e| e.parse().unwrap()).collect()),
        queues: Vec::new(),
    };

    // K = 32 is not the program's: refused at once.
    let err = c
        .create_job(JobDecl {
            elements: 32,
            ..job("narrow", &["10.0.0.1:6000", "10.0.0.2:6000"])
        })
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "job \"narrow\": K = 32 elements per packet is not one any aggregator it may run on \
             takes (the switch at {}: K = 64 only)",
            sw.addr
        )
    );

    // A job with its own priority map is placed, and refused by bmv2. The
    // refusal is that job's: the switch stays up and takes the next job.
    let queued = c
        .create_job(JobDecl {
            queues: vec![ClassQueue { class: 0, queue: 7 }],
            ..job("queued", &["10.0.0.1:5000", "10.0.0.2:5001"])
        })
        .unwrap();
    assert!(matches!(queued.placement, Placement::Switch { .. }));
    let plain = c
        .create_job(job("plain", &["10.0.0.1:5002", "10.0.0.3:5000"]))
        .unwrap();
    let jobs = c.jobs().unwrap();
    let status = |name: &str| jobs.iter().find(|j| j.decl.name == name).unwrap().clone();
    let q = status("queued");
    assert!(!q.installed);
    assert!(
        q.refused.as_deref().is_some_and(
            |r| r.starts_with("the bmv2 target does not support per-job priority maps")
        ),
        "{q:?}"
    );
    let p = status("plain");
    assert!(p.installed && p.refused.is_none(), "{p:?}");
    assert!(c.sites().unwrap()[0].up);
    let on_switch: Vec<u16> = sw
        .connect()
        .jobs()
        .unwrap()
        .iter()
        .map(|j| j.spec.id)
        .collect();
    assert_eq!(on_switch, vec![plain.id]);

    // Workers of the refused job are told why once their session is
    // complete; workers of another job are sent to --switch-data.
    let ctl_addr = ctl.addr();
    // Every rank at once (a session is complete when all have registered).
    let register_all = |job: &'static str, endpoints: [&'static str; 2]| {
        let ranks: Vec<_> = (0u16..)
            .zip(endpoints)
            .map(|(rank, endpoint)| {
                std::thread::spawn(move || {
                    Client::connect(ctl_addr, None)
                        .unwrap()
                        .register(
                            job,
                            rank,
                            endpoint.parse().unwrap(),
                            Duration::from_secs(20),
                        )
                        .map_err(|e| e.to_string())
                })
            })
            .collect();
        ranks
            .into_iter()
            .map(|r| r.join().unwrap())
            .collect::<Vec<_>>()
    };
    for r in register_all("queued", ["10.0.0.1:5000", "10.0.0.2:5001"]) {
        let err = r.unwrap_err();
        assert!(
            err.starts_with("job \"queued\" cannot run where it is placed: the bmv2 target does not support per-job priority maps"),
            "{err}"
        );
    }
    for r in register_all("plain", ["10.0.0.1:5002", "10.0.0.3:5000"]) {
        let a = r.unwrap();
        assert_eq!((a.data_addr, a.elements, a.fallback), (data, 64, false));
    }
    drop(ctl);

    // Without --switch-data a registering worker is told what to pass.
    let options = sw.options();
    let connect: Connector = Box::new(move || {
        Ok(Box::new(Bmv2Target::connect(options.clone())?) as Box<dyn Target + Send>)
    });
    let ctl = start(None, connect);
    let err = Client::connect(ctl.addr(), None)
        .unwrap()
        .register(
            "plain",
            0,
            "10.0.0.1:5002".parse().unwrap(),
            Duration::from_secs(20),
        )
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("start the controller with --switch-data ADDR"),
        "{err}"
    );
    drop(ctl);
    let _ = std::fs::remove_file(&state);
}
