//! Test support: a stand-in BF Runtime server, for the tofino target's
//! tests (switch-control/tests/tofino_target.rs) and the CLI's
//! (tests/cli.rs).
//!
//! **This is not bf_switchd.** The real one (with the Tofino model behind
//! it) cannot run on this project's machines: the public open-p4studio
//! sources lack the Tofino model binary and parts of the driver
//! (p4/README.md, "Loading on Tofino"). Until it can, this stand-in checks
//! what the control plane sends, the way the driver checks it as far as
//! the control plane can tell:
//!
//! - StreamChannel: a Subscribe binds the client id; writes from a client
//!   that has not subscribed and bound to the program are refused;
//! - SetForwardingPipelineConfig: a push (VERIFY_AND_WARM_INIT_BEGIN_AND_END)
//!   stores the program's bf-rt.json and clears all state; BIND names a
//!   program the device runs (NOT_FOUND otherwise);
//! - Write (ROLLBACK_ON_ERROR): table, key field and data field ids and
//!   action ids are checked against the program's and the driver's
//!   descriptions, values against their widths (INVALID_ARGUMENT); INSERT
//!   of an existing entry is ALREADY_EXISTS, DELETE of a missing one
//!   NOT_FOUND; register and counter cells are modified in place, index
//!   within the size; one failed update undoes the whole write;
//! - Read: a whole table (no key) or one entry or cell.
//! - The traffic manager's tables (`tf1.tm.*`) hold an entry for every key
//!   from the start, as the driver's do: the ports of [`TOPOLOGY`], each
//!   with 8 queues in its port group, and the buffer's cell size. Their
//!   string fields take only the values the table lists, and a queue's
//!   scheduler entry is written to one pipe (`entry_tgt`), as the driver's
//!   per-pipe queue tables take it.
//!
//! Its descriptions are [`super::testing`]'s, compared with the compiler's
//! and the driver's own where those are at hand. It panics on what a test
//! got wrong (a table name that is not there): it serves tests only.

#![allow(clippy::missing_panics_doc)]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::proto::bfrt_proto as bfrt;
use super::proto::bfrt_proto::bf_runtime_server::{BfRuntime, BfRuntimeServer};
use super::testing::{fixed_bfrt_json, tna_bfrt_json};
use super::BfrtInfo;
use crate::bmv2::Topology;
use crate::grpc::TestServer;

/// A key: its fields' bytes by field id.
pub type KeyBytes = Vec<(u32, Vec<u8>)>;
/// A table entry's identity: its table and key.
pub type Key = (u32, KeyBytes);

/// What the stand-in switch holds and has been sent.
#[derive(Default)]
pub struct State {
    /// Programs the device runs: name -> bf-rt.json.
    programs: HashMap<String, Vec<u8>>,
    /// The pushed program's description, with the driver's fixed tables.
    pub info: Option<BfrtInfo>,
    subscribed: Vec<u32>,
    bound: Vec<u32>,
    /// Every entry and written cell, by table and key.
    pub entries: BTreeMap<Key, bfrt::TableData>,
    /// Every Write's updates, in order.
    pub writes: Vec<Vec<bfrt::Update>>,
}

struct Standin(Arc<Mutex<State>>);

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

/// The table whose id is `id`.
fn table_by_id(info: &BfrtInfo, id: u32) -> Option<&super::bfrt_info::Table> {
    info.names()
        .filter_map(|n| info.table(n).ok())
        .find(|t| t.id == id)
}

/// An entry's table and exact key.
pub fn key_of(t: &bfrt::TableEntry) -> Key {
    let mut fields = Vec::new();
    if let Some(bfrt::table_entry::Value::Key(k)) = &t.value {
        for f in &k.fields {
            if let Some(bfrt::key_field::MatchType::Exact(e)) = &f.match_type {
                fields.push((f.field_id, e.value.clone()));
            }
        }
    }
    fields.sort();
    (t.table_id, fields)
}

/// An update's table entry.
pub fn table_entry(u: &bfrt::Update) -> Result<&bfrt::TableEntry, Status> {
    match u.entity.as_ref().and_then(|e| e.entity.as_ref()) {
        Some(bfrt::entity::Entity::TableEntry(t)) => Ok(t),
        _ => Err(Status::invalid_argument("an update without a table entry")),
    }
}

impl State {
    /// The id of table `name` in the pushed description.
    pub fn table_id(&self, name: &str) -> u32 {
        self.info.as_ref().unwrap().table(name).unwrap().id
    }

    /// The entries the driver's traffic-manager tables start with.
    fn driver_entries(&self) -> BTreeMap<Key, bfrt::TableData> {
        let info = self.info.as_ref().unwrap();
        let table = |n: &str| info.table(n).unwrap();
        let field = |t: &str, n: &str| table(t).data(n).unwrap().id;
        let byte = |v: u8| Some(bfrt::data_field::Value::Stream(vec![v]));
        let data =
            |t: &str, fields: Vec<(&str, Option<bfrt::data_field::Value>)>| bfrt::TableData {
                action_id: 0,
                fields: fields
                    .into_iter()
                    .map(|(n, value)| bfrt::DataField {
                        field_id: field(t, n),
                        value,
                    })
                    .collect(),
            };
        let mut entries = BTreeMap::new();
        let cfg = "tf1.tm.port.cfg";
        for port in PORTS {
            // Four ports per port group, 8 queues each.
            let (pg, nr) = ((port % 128 / 4) as u8, (port % 4) as u8);
            let queues: Vec<u32> = (0..8).map(|q| u32::from(nr) * 8 + q).collect();
            let d = data(
                cfg,
                vec![
                    ("pg_id", byte(pg)),
                    ("pg_port_nr", byte(nr)),
                    ("port_queues_count", byte(8)),
                    (
                        "egress_qid_queues",
                        Some(bfrt::data_field::Value::IntArrVal(
                            bfrt::data_field::IntArray { val: queues },
                        )),
                    ),
                ],
            );
            entries.insert((table(cfg).id, vec![(1, port.to_be_bytes().to_vec())]), d);
        }
        let d = data(
            "tf1.tm.cfg",
            vec![(
                "cell_size_bytes",
                Some(bfrt::data_field::Value::Stream(
                    CELL_BYTES.to_be_bytes().to_vec(),
                )),
            )],
        );
        entries.insert((table("tf1.tm.cfg").id, Vec::new()), d);
        entries
    }

    /// Checks one entry against the descriptions: ids, widths, indices.
    fn check(&self, t: &bfrt::TableEntry, with_data: bool) -> Result<bool, Status> {
        let info = self
            .info
            .as_ref()
            .ok_or_else(|| Status::failed_precondition("no program"))?;
        let table = table_by_id(info, t.table_id)
            .ok_or_else(|| Status::invalid_argument(format!("unknown table id {}", t.table_id)))?;
        // Cells, and the traffic manager's entries: every key exists.
        let cells = matches!(table.table_type.as_str(), "Register" | "Counter")
            || table.table_type.starts_with("Tm");
        for (id, value) in key_of(t).1 {
            let field = table.keys().iter().find(|f| f.id == id).ok_or_else(|| {
                Status::invalid_argument(format!("{}: unknown key field {id}", table.name))
            })?;
            if value.len() != field.width.div_ceil(8) as usize {
                return Err(Status::invalid_argument(format!(
                    "{}: {} has {} bytes",
                    table.name,
                    field.name,
                    value.len()
                )));
            }
            let v = value.iter().fold(0u64, |a, &b| (a << 8) | u64::from(b));
            if field.width < 64 && v >> field.width != 0 {
                return Err(Status::invalid_argument(format!(
                    "{}: {} is {v}, over {} bits",
                    table.name, field.name, field.width
                )));
            }
            let indexed = matches!(table.table_type.as_str(), "Register" | "Counter");
            if indexed && v >= table.size {
                return Err(Status::invalid_argument(format!(
                    "{}: index {v} of {}",
                    table.name, table.size
                )));
            }
        }
        if with_data {
            let data = t
                .data
                .as_ref()
                .ok_or_else(|| Status::invalid_argument("no data"))?;
            let params = match table.actions().iter().find(|a| a.id == data.action_id) {
                Some(a) => a.params().to_vec(),
                None if data.action_id == 0 => table.data_fields().to_vec(),
                None => {
                    return Err(Status::invalid_argument(format!(
                        "{}: action id {}",
                        table.name, data.action_id
                    )))
                }
            };
            for f in &data.fields {
                let field = params.iter().find(|p| p.id == f.field_id).ok_or_else(|| {
                    Status::invalid_argument(format!("{}: data field {}", table.name, f.field_id))
                })?;
                if let Some(bfrt::data_field::Value::StrVal(v)) = &f.value {
                    match &field.text {
                        Some(choices) if choices.is_empty() || choices.contains(v) => {}
                        _ => {
                            return Err(Status::invalid_argument(format!(
                                "{}: {} cannot be {v:?}",
                                table.name, field.name
                            )))
                        }
                    }
                }
                if let Some(bfrt::data_field::Value::Stream(b)) = &f.value {
                    if b.len() != field.width.div_ceil(8) as usize {
                        return Err(Status::invalid_argument(format!(
                            "{}: {} has {} bytes",
                            table.name,
                            field.name,
                            b.len()
                        )));
                    }
                }
            }
        }
        Ok(cells)
    }

    /// Applies one update to `entries`.
    fn apply(
        &self,
        entries: &mut BTreeMap<Key, bfrt::TableData>,
        u: &bfrt::Update,
    ) -> Result<(), Status> {
        use bfrt::update::Type;
        let t = table_entry(u)?;
        let key = key_of(t);
        match Type::try_from(u.r#type) {
            Ok(Type::Insert) => {
                self.check(t, true)?;
                if entries.contains_key(&key) {
                    return Err(Status::already_exists("entry exists"));
                }
                entries.insert(key, t.data.clone().unwrap_or_default());
            }
            Ok(Type::Modify) => {
                let cells = self.check(t, true)?;
                let pipe = t.entry_tgt.as_ref().map(|d| d.pipe_id);
                if t.table_id == self.table_id("tf1.tm.queue.sched_cfg")
                    && !matches!(pipe, Some(p) if p < 4)
                {
                    return Err(Status::invalid_argument(format!(
                        "tf1.tm.queue.sched_cfg is written per pipe, not to pipe {pipe:?}"
                    )));
                }
                if !cells && !entries.contains_key(&key) {
                    return Err(Status::not_found("no such entry"));
                }
                entries.insert(key, t.data.clone().unwrap_or_default());
            }
            Ok(Type::Delete) => {
                self.check(t, false)?;
                entries
                    .remove(&key)
                    .ok_or_else(|| Status::not_found("no such entry"))?;
            }
            _ => return Err(Status::unimplemented("update type")),
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl BfRuntime for Standin {
    async fn write(
        &self,
        request: Request<bfrt::WriteRequest>,
    ) -> Result<Response<bfrt::WriteResponse>, Status> {
        let r = request.into_inner();
        let mut s = self.0.lock().unwrap();
        if !s.bound.contains(&r.client_id) {
            return Err(Status::failed_precondition(format!(
                "client {} is not bound to a program",
                r.client_id
            )));
        }
        s.writes.push(r.updates.clone());
        let mut entries = s.entries.clone();
        for u in &r.updates {
            s.apply(&mut entries, u)?;
        }
        s.entries = entries;
        Ok(Response::new(bfrt::WriteResponse::default()))
    }

    type ReadStream = BoxStream<bfrt::ReadResponse>;

    async fn read(
        &self,
        request: Request<bfrt::ReadRequest>,
    ) -> Result<Response<Self::ReadStream>, Status> {
        let r = request.into_inner();
        let s = self.0.lock().unwrap();
        let mut out = Vec::new();
        for e in &r.entities {
            let Some(bfrt::entity::Entity::TableEntry(t)) = &e.entity else {
                continue;
            };
            let (table, key) = key_of(t);
            let cells = s.check(t, false)?;
            for ((tid, k), data) in &s.entries {
                if *tid == table && (key.is_empty() || *k == key) {
                    out.push(bfrt::Entity {
                        entity: Some(bfrt::entity::Entity::TableEntry(bfrt::TableEntry {
                            table_id: table,
                            value: Some(bfrt::table_entry::Value::Key(bfrt::TableKey {
                                fields: k
                                    .iter()
                                    .map(|(id, v)| bfrt::KeyField {
                                        field_id: *id,
                                        match_type: Some(bfrt::key_field::MatchType::Exact(
                                            bfrt::key_field::Exact { value: v.clone() },
                                        )),
                                    })
                                    .collect(),
                            })),
                            data: Some(data.clone()),
                            ..Default::default()
                        })),
                    });
                }
            }
            let info = s.info.as_ref().unwrap();
            let desc = table_by_id(info, table).unwrap();
            // A port the switch does not have reads as nothing.
            let zeros = cells && desc.table_type != "TmPortCfg";
            if zeros && !key.is_empty() && !s.entries.contains_key(&(table, key.clone())) {
                // A cell never written reads as zeros.
                let fields = desc
                    .data_fields()
                    .iter()
                    .map(|f| bfrt::DataField {
                        field_id: f.id,
                        value: Some(bfrt::data_field::Value::Stream(vec![
                            0;
                            f.width.div_ceil(8)
                                as usize
                        ])),
                    })
                    .collect();
                let mut t = t.clone();
                t.data = Some(bfrt::TableData {
                    action_id: 0,
                    fields,
                });
                out.push(bfrt::Entity {
                    entity: Some(bfrt::entity::Entity::TableEntry(t)),
                });
            }
        }
        let reply = bfrt::ReadResponse {
            entities: out,
            status: Vec::new(),
        };
        Ok(Response::new(Box::pin(tokio_stream::iter([Ok(reply)]))))
    }

    async fn set_forwarding_pipeline_config(
        &self,
        request: Request<bfrt::SetForwardingPipelineConfigRequest>,
    ) -> Result<Response<bfrt::SetForwardingPipelineConfigResponse>, Status> {
        use bfrt::set_forwarding_pipeline_config_request::Action;
        let r = request.into_inner();
        let mut s = self.0.lock().unwrap();
        if !s.subscribed.contains(&r.client_id) {
            return Err(Status::failed_precondition("subscribe first"));
        }
        let config = r
            .config
            .first()
            .ok_or_else(|| Status::invalid_argument("no config"))?;
        match Action::try_from(r.action) {
            Ok(Action::Bind) => {
                if !s.programs.contains_key(&config.p4_name) {
                    return Err(Status::not_found(format!("no program {}", config.p4_name)));
                }
            }
            Ok(Action::VerifyAndWarmInitBeginAndEnd) => {
                let mut info = BfrtInfo::parse(&config.bfruntime_info, "pushed")
                    .map_err(|e| Status::invalid_argument(e.to_string()))?;
                info.merge(BfrtInfo::parse(fixed_bfrt_json().as_bytes(), "fixed").unwrap())
                    .unwrap();
                s.info = Some(info);
                s.programs =
                    HashMap::from([(config.p4_name.clone(), config.bfruntime_info.clone())]);
                s.entries = s.driver_entries();
            }
            _ => return Err(Status::unimplemented("action")),
        }
        s.bound.push(r.client_id);
        Ok(Response::new(Default::default()))
    }

    async fn get_forwarding_pipeline_config(
        &self,
        _request: Request<bfrt::GetForwardingPipelineConfigRequest>,
    ) -> Result<Response<bfrt::GetForwardingPipelineConfigResponse>, Status> {
        let s = self.0.lock().unwrap();
        Ok(Response::new(bfrt::GetForwardingPipelineConfigResponse {
            config: s
                .programs
                .iter()
                .map(|(name, json)| bfrt::ForwardingPipelineConfig {
                    p4_name: name.clone(),
                    bfruntime_info: json.clone(),
                    profiles: Vec::new(),
                })
                .collect(),
            non_p4_config: Some(bfrt::NonP4Config {
                bfruntime_info: fixed_bfrt_json().into_bytes(),
            }),
        }))
    }

    type StreamChannelStream = BoxStream<bfrt::StreamMessageResponse>;

    async fn stream_channel(
        &self,
        request: Request<tonic::Streaming<bfrt::StreamMessageRequest>>,
    ) -> Result<Response<Self::StreamChannelStream>, Status> {
        let mut inbound = request.into_inner();
        let state = self.0.clone();
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(async move {
            let mut mine = None;
            while let Ok(Some(msg)) = inbound.message().await {
                let Some(bfrt::stream_message_request::Update::Subscribe(sub)) = msg.update else {
                    continue;
                };
                state.lock().unwrap().subscribed.push(msg.client_id);
                mine = Some(msg.client_id);
                let reply = bfrt::StreamMessageResponse {
                    update: Some(bfrt::stream_message_response::Update::Subscribe(
                        bfrt::Subscribe {
                            status: Some(Default::default()),
                            ..sub
                        },
                    )),
                };
                if tx.send(Ok(reply)).await.is_err() {
                    break;
                }
            }
            let mut s = state.lock().unwrap();
            s.subscribed.retain(|c| Some(*c) != mine);
            s.bound.retain(|c| Some(*c) != mine);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}

/// Where the test workers are plugged in; 10.0.0.3 is on port 130, in
/// pipe 1.
pub const TOPOLOGY: &str = r#"
[workers]
"10.0.0.1" = { port = 1, mac = "02:00:00:00:00:01" }
"10.0.0.2" = { port = 2, mac = "02:00:00:00:00:02" }
"10.0.0.3" = { port = 130, mac = "02:00:00:00:00:03" }
"10.0.9.1" = { port = 9, mac = "02:00:00:00:00:09" }
"#;

/// The switch's ports: [`TOPOLOGY`]'s.
pub const PORTS: [u32; 4] = [1, 2, 130, 9];

/// The traffic manager's buffer cell.
pub const CELL_BYTES: u32 = 80;

/// [`TOPOLOGY`], parsed.
pub fn topology() -> Topology {
    Topology::parse("topology.toml", TOPOLOGY).unwrap()
}

/// A running stand-in; stops when dropped.
pub struct Switch {
    /// Its BF Runtime address.
    pub addr: SocketAddr,
    /// What it holds.
    pub state: Arc<Mutex<State>>,
    _server: TestServer,
}

impl Switch {
    /// Starts a stand-in on a free local port.
    pub fn start() -> Switch {
        let state = Arc::new(Mutex::new(State::default()));
        let server = TestServer::start(tonic::service::Routes::new(BfRuntimeServer::new(Standin(
            state.clone(),
        ))))
        .unwrap();
        Switch {
            addr: server.addr,
            state,
            _server: server,
        }
    }
}

/// A program directory as bf-p4c writes it, with the stand-in's bf-rt.json.
pub fn program_dir(k: u16, slots: u32) -> tempdir::Dir {
    let dir = tempdir::Dir::new();
    std::fs::create_dir_all(dir.path().join("pipe")).unwrap();
    std::fs::write(dir.path().join("bf-rt.json"), tna_bfrt_json(k, slots)).unwrap();
    std::fs::write(dir.path().join("pipe/context.json"), b"{}").unwrap();
    std::fs::write(dir.path().join("pipe/tofino.bin"), b"\0bin").unwrap();
    dir
}

/// Temporary directories for program files.
pub mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        /// A fresh directory under the system temporary directory.
        pub fn new() -> Dir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("inagg-tofino-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        /// Where it is.
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Default for Dir {
        fn default() -> Self {
            Dir::new()
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The entries of table `name` in the stand-in, by key then data fields'
/// bytes, resolved through the pushed description.
pub fn entries(sw: &Switch, name: &str) -> Vec<(KeyBytes, bfrt::TableData)> {
    let s = sw.state.lock().unwrap();
    let id = s.info.as_ref().unwrap().table(name).unwrap().id;
    s.entries
        .iter()
        .filter(|((t, _), _)| *t == id)
        .map(|((_, k), d)| (k.clone(), d.clone()))
        .collect()
}

/// Data field `id`'s bytes.
pub fn stream(d: &bfrt::TableData, id: u32) -> Vec<u8> {
    d.fields
        .iter()
        .find(|f| f.field_id == id)
        .and_then(|f| match &f.value {
            Some(bfrt::data_field::Value::Stream(b)) => Some(b.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no bytes field {id} in {d:?}"))
}
