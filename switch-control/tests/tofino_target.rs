//! The tofino target end to end, against a stand-in BF Runtime server.
//!
//! **This is not bf_switchd.** The real one (with the Tofino model behind
//! it) cannot run on this project's machines: the public open-p4studio
//! sources lack the Tofino model binary and parts of the driver
//! (p4/README.md, "Loading on Tofino"). Until it can, this stand-in
//! (`Standin`, below) checks what the control plane sends, the way the
//! driver checks it as far as the control plane can tell:
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
//! Its bf-rt.json (`tofino::testing::tna_bfrt_json`) is compared with the
//! compiler's own where `p4/build.sh tna` has run.

#![cfg(feature = "tofino")]

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inagg_switch_api::{JobError, JobSpec, Upstream};
use inagg_switch_control::bmv2::testing::job as spec;
use inagg_switch_control::bmv2::Topology;
use inagg_switch_control::grpc::TestServer;
use inagg_switch_control::target::{install_job, ControlError, Target};
use inagg_switch_control::tofino::proto::bfrt_proto as bfrt;
use inagg_switch_control::tofino::proto::bfrt_proto::bf_runtime_server::{
    BfRuntime, BfRuntimeServer,
};
use inagg_switch_control::tofino::testing::{fixed_bfrt_json, shape, tna_bfrt_json};
use inagg_switch_control::tofino::{BfrtInfo, TofinoOptions, TofinoTarget};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

// ---------------------------------------------------------------------------
// The stand-in server.

/// A key: its fields' bytes by field id.
type KeyBytes = Vec<(u32, Vec<u8>)>;
/// A table entry's identity: its table and key.
type Key = (u32, KeyBytes);

#[derive(Default)]
struct State {
    /// Programs the device runs: name -> bf-rt.json.
    programs: HashMap<String, Vec<u8>>,
    info: Option<BfrtInfo>,
    subscribed: Vec<u32>,
    bound: Vec<u32>,
    entries: BTreeMap<Key, bfrt::TableData>,
    /// Every Write's updates, in order.
    writes: Vec<Vec<bfrt::Update>>,
}

struct Standin(Arc<Mutex<State>>);

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

fn key_of(t: &bfrt::TableEntry) -> Key {
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

fn table_entry(u: &bfrt::Update) -> Result<&bfrt::TableEntry, Status> {
    match u.entity.as_ref().and_then(|e| e.entity.as_ref()) {
        Some(bfrt::entity::Entity::TableEntry(t)) => Ok(t),
        _ => Err(Status::invalid_argument("an update without a table entry")),
    }
}

impl State {
    fn table_id(&self, name: &str) -> u32 {
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
        let table = info
            .names()
            .filter_map(|n| info.table(n).ok())
            .find(|x| x.id == t.table_id)
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
            let desc = info
                .names()
                .filter_map(|n| info.table(n).ok())
                .find(|x| x.id == table)
                .unwrap();
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
const TOPOLOGY: &str = r#"
[workers]
"10.0.0.1" = { port = 1, mac = "02:00:00:00:00:01" }
"10.0.0.2" = { port = 2, mac = "02:00:00:00:00:02" }
"10.0.0.3" = { port = 130, mac = "02:00:00:00:00:03" }
"10.0.9.1" = { port = 9, mac = "02:00:00:00:00:09" }
"#;

/// The switch's ports: [`TOPOLOGY`]'s.
const PORTS: [u32; 4] = [1, 2, 130, 9];

/// The traffic manager's buffer cell.
const CELL_BYTES: u32 = 80;

fn topology() -> Topology {
    Topology::parse("topology.toml", TOPOLOGY).unwrap()
}

/// A running stand-in; stops when dropped.
struct Switch {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    _server: TestServer,
}

impl Switch {
    fn start() -> Switch {
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
fn program_dir(k: u16, slots: u32) -> tempdir::Dir {
    let dir = tempdir::Dir::new();
    std::fs::create_dir_all(dir.path().join("pipe")).unwrap();
    std::fs::write(dir.path().join("bf-rt.json"), tna_bfrt_json(k, slots)).unwrap();
    std::fs::write(dir.path().join("pipe/context.json"), b"{}").unwrap();
    std::fs::write(dir.path().join("pipe/tofino.bin"), b"\0bin").unwrap();
    dir
}

mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(std::path::PathBuf);
    impl Dir {
        pub fn new() -> Dir {
            use std::sync::atomic::{AtomicU32, Ordering};
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("inagg-tofino-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &std::path::Path {
            &self.0
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

fn connect(sw: &Switch, program: Option<&std::path::Path>) -> Result<TofinoTarget, ControlError> {
    TofinoTarget::connect(TofinoOptions {
        addr: sw.addr,
        program: program.map(std::path::Path::to_path_buf),
        topology: Some(topology()),
        timeout: Duration::from_secs(5),
        ..TofinoOptions::default()
    })
}

/// The entries of table `name` in the stand-in, by key then data fields'
/// bytes, resolved through the pushed description.
fn entries(sw: &Switch, name: &str) -> Vec<(KeyBytes, bfrt::TableData)> {
    let s = sw.state.lock().unwrap();
    let id = s.info.as_ref().unwrap().table(name).unwrap().id;
    s.entries
        .iter()
        .filter(|((t, _), _)| *t == id)
        .map(|((_, k), d)| (k.clone(), d.clone()))
        .collect()
}

fn stream(d: &bfrt::TableData, id: u32) -> Vec<u8> {
    d.fields
        .iter()
        .find(|f| f.field_id == id)
        .and_then(|f| match &f.value {
            Some(bfrt::data_field::Value::Stream(b)) => Some(b.clone()),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no bytes field {id} in {d:?}"))
}

// ---------------------------------------------------------------------------
// The tests.

#[test]
fn a_job_is_installed_in_order_read_back_and_removed() {
    let sw = Switch::start();
    let dir = program_dir(64, 8192);
    let mut t = connect(&sw, Some(dir.path())).unwrap();
    let info = t.info().unwrap();
    assert_eq!((info.slots, info.max_elements, info.jobs), (8192, 64, 0));
    // A cell of the pool's bitmap left set by an earlier job.
    {
        let mut s = sw.state.lock().unwrap();
        let id = s
            .info
            .as_ref()
            .unwrap()
            .table("pipe.InaggIngress.slot_state.bitmap_lo")
            .unwrap()
            .id;
        let dirty = bfrt::TableData {
            action_id: 0,
            fields: vec![bfrt::DataField {
                field_id: 1,
                value: Some(bfrt::data_field::Value::Stream(vec![0, 0, 0, 5])),
            }],
        };
        s.entries
            .insert((id, vec![(65556, vec![0, 0, 0, 12])]), dirty);
    }
    let job = spec(
        7,
        &["10.0.0.1:5000", "10.0.0.2:5001", "10.0.0.3:5002"],
        10,
        4,
    );
    install_job(&mut t, &job).unwrap();

    // The bitmaps zeroed over the pool, slot 12 included, in a write of
    // their own before anything else.
    let s = sw.state.lock().unwrap();
    assert_eq!(
        s.writes.len(),
        3,
        "the bitmaps, the ports' queues, then the entries"
    );
    assert_eq!(s.writes[0].len(), 2 * 4);
    // Queue q of each worker port at strict priority q, on the port's
    // pipe: port 130 (pipe 1) is the third in port group 0 of its pipe
    // (queues 16-23); ports 1 and 2 are in pipe 0.
    let sched = s.table_id("tf1.tm.queue.sched_cfg");
    let mut levels = Vec::new();
    for u in &s.writes[1] {
        let t = table_entry(u).unwrap();
        assert_eq!(t.table_id, sched);
        let (_, key) = key_of(t);
        let text: Vec<String> = t
            .data
            .as_ref()
            .unwrap()
            .fields
            .iter()
            .map(|f| match &f.value {
                Some(bfrt::data_field::Value::StrVal(v)) => v.clone(),
                v => panic!("{v:?}"),
            })
            .collect();
        let pipe = t.entry_tgt.as_ref().unwrap().pipe_id;
        levels.push((pipe, key[0].1[0], key[1].1[0], text));
    }
    assert_eq!(levels.len(), 3 * 8);
    let level = |q: u8| vec![q.to_string(), q.to_string()];
    assert_eq!(levels[0], (0, 0, 8, level(0)), "port 1, queue 0");
    assert_eq!(levels[15], (0, 0, 23, level(7)), "port 2, queue 7");
    assert_eq!(levels[20], (1, 0, 20, level(4)), "port 130, queue 4");
    // The job entry after the PRE, receivers and workers; then the result
    // group's relay (3 receivers, 3 members, 2 counters zeroed), its
    // group_table entry last.
    let tables: Vec<u32> = s.writes[2]
        .iter()
        .map(|u| table_entry(u).unwrap().table_id)
        .collect();
    let job_at = tables
        .iter()
        .position(|&t| t == s.table_id("pipe.InaggIngress.admission.job_table"))
        .unwrap();
    assert_eq!(
        job_at,
        3 + 1 + 3 + 3,
        "the job entry after the rest of the job"
    );
    assert_eq!(tables.len(), job_at + 1 + 3 + 3 + 2 + 1);
    assert_eq!(
        tables.last(),
        Some(&s.table_id("pipe.InaggIngress.group_relay.group_table")),
        "the relay's group entry goes last"
    );
    drop(s);
    let cells = entries(&sw, "pipe.InaggIngress.slot_state.bitmap_lo");
    assert_eq!(cells.len(), 4);
    for (_, d) in &cells {
        assert_eq!(stream(d, 1), vec![0; 4]);
        assert_eq!(stream(d, 2), vec![0; 4]);
    }

    // One PRE node per worker (rid = worker id, its port), one group.
    let nodes = entries(&sw, "$pre.node");
    assert_eq!(nodes.len(), 3);
    let ports: Vec<u32> = nodes
        .iter()
        .map(
            |(_, d)| match &d.fields.iter().find(|f| f.field_id == 3).unwrap().value {
                Some(bfrt::data_field::Value::IntArrVal(a)) => a.val[0],
                v => panic!("{v:?}"),
            },
        )
        .collect();
    assert_eq!(ports, vec![1, 2, 130]);
    let groups = entries(&sw, "$pre.mgid");
    assert_eq!(groups.len(), 1);
    assert_eq!(groups[0].0, vec![(1, vec![0, 8])], "group = job id + 1");

    // Receivers and worker entries: the endpoint's exact bytes.
    let receivers = entries(&sw, "pipe.InaggEgress.result_rewrite.result_receivers");
    assert_eq!(receivers.len(), 3);
    let (key, data) = &receivers[1];
    assert_eq!(key, &vec![(1, vec![0, 7]), (2, vec![0, 1])]);
    assert_eq!(stream(data, 1), vec![2, 0, 0, 0, 0, 2], "worker 1's MAC");
    assert_eq!(stream(data, 2), vec![10, 0, 0, 2]);
    assert_eq!(stream(data, 3), 5001u16.to_be_bytes().to_vec());
    let workers = entries(&sw, "pipe.InaggIngress.admission.worker_table");
    assert_eq!(workers.len(), 3);
    assert!(workers
        .iter()
        .any(|(k, d)| k.contains(&(2, vec![0, 130])) && stream(d, 1) == vec![0, 2]));

    // Read back from the switch as it was asked for.
    let jobs = t.jobs().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].spec, job);
    assert_eq!(t.pools().unwrap().free, 8192 - 4);

    // Installed twice: refused before anything is written.
    let writes = sw.state.lock().unwrap().writes.len();
    let err = install_job(&mut t, &job).unwrap_err();
    assert!(err.to_string().contains("job 7 already exists"), "{err}");
    assert_eq!(sw.state.lock().unwrap().writes.len(), writes);

    // The result group relays among the workers.
    let groups = t.groups().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!((groups[0].id, groups[0].job), (8, Some(7)));
    assert_eq!(groups[0].members, job.workers);
    let members = entries(&sw, "pipe.InaggIngress.group_relay.member_table");
    assert!(members.iter().any(|(k, d)| k.contains(&(1, vec![0, 8]))
        && k.contains(&(2, vec![0, 130]))
        && stream(d, 1) == vec![0, 2]));

    t.delete_job(7).unwrap();
    for name in [
        "pipe.InaggIngress.admission.job_table",
        "pipe.InaggIngress.admission.worker_table",
        "pipe.InaggEgress.result_rewrite.result_receivers",
        "pipe.InaggIngress.group_relay.group_table",
        "pipe.InaggIngress.group_relay.member_table",
        "pipe.InaggEgress.group_rewrite.group_receivers",
        "$pre.node",
        "$pre.mgid",
    ] {
        assert!(entries(&sw, name).is_empty(), "{name} still has entries");
    }
    let err = t.delete_job(7).unwrap_err();
    assert!(
        matches!(err, ControlError::Job(JobError::UnknownJob { id: 7 })),
        "{err}"
    );
}

#[test]
fn what_p4_tna_cannot_do_is_refused_before_anything_is_written() {
    let sw = Switch::start();
    let dir = program_dir(32, 1024);
    let mut t = connect(&sw, Some(dir.path())).unwrap();
    let mut tree = spec(1, &["10.0.0.1:5000"], 0, 4);
    tree.elements = 32;
    tree.upstream = Some(Upstream {
        switch: "10.0.9.1:47000".parse().unwrap(),
        job: 2,
        member: 0,
        aux: None,
    });
    let mut wrong_k = spec(2, &["10.0.0.1:5000"], 0, 4);
    wrong_k.elements = 16;
    let many = JobSpec::new(
        3,
        (0..65)
            .map(|i| SocketAddr::from(([10, 0, 0, 1], 6000 + i)))
            .collect(),
        0,
        4,
        32,
    );
    let mut beyond = spec(4, &["10.0.0.1:5000"], 1020, 8);
    beyond.elements = 32;
    let cases: [(&JobSpec, &str); 4] = [
        (
            &tree,
            "aggregation tree's parent (upstream); p4/tna has none",
        ),
        (
            &wrong_k,
            "16 elements per packet, but the switch's program was compiled with K = 32",
        ),
        (&many, "65 workers"),
        (&beyond, "runs past the switch's 1024 slots"),
    ];
    for (job, want) in cases {
        let err = install_job(&mut t, job).unwrap_err();
        assert!(err.to_string().contains(want), "{err}");
    }
    assert!(sw.state.lock().unwrap().writes.is_empty());
    // A worker the topology does not place.
    let mut stranger = spec(5, &["10.9.9.9:5000"], 0, 4);
    stranger.elements = 32;
    let err = install_job(&mut t, &stranger).unwrap_err();
    assert!(err.to_string().contains("10.9.9.9"), "{err}");
    assert!(sw.state.lock().unwrap().writes.is_empty());
}

#[test]
fn counters_are_read_per_job_and_switch_wide_and_reset() {
    let sw = Switch::start();
    let dir = program_dir(64, 8192);
    let mut t = connect(&sw, Some(dir.path())).unwrap();
    install_job(&mut t, &spec(3, &["10.0.0.1:5000", "10.0.0.2:5000"], 0, 16)).unwrap();
    let set = |name: &str, index: u32, pkts: u64| {
        let mut s = sw.state.lock().unwrap();
        let id = s.info.as_ref().unwrap().table(name).unwrap().id;
        let cell = bfrt::TableData {
            action_id: 0,
            fields: vec![
                bfrt::DataField {
                    field_id: 65553,
                    value: Some(bfrt::data_field::Value::Stream(
                        (pkts * 100).to_be_bytes().to_vec(),
                    )),
                },
                bfrt::DataField {
                    field_id: 65554,
                    value: Some(bfrt::data_field::Value::Stream(pkts.to_be_bytes().to_vec())),
                },
            ],
        };
        s.entries
            .insert((id, vec![(65556, index.to_be_bytes().to_vec())]), cell);
    };
    set("pipe.InaggIngress.job_contributions", 3, 40);
    set("pipe.InaggIngress.job_queries", 3, 2);
    set("pipe.InaggIngress.rx", 0, 45);
    set("pipe.InaggIngress.drops", 7, 3);
    let job = t.job(3).unwrap();
    assert_eq!(
        (
            job.counters.contributions,
            job.counters.queries,
            job.counters.results
        ),
        (40, 2, 0)
    );
    let c = t.counters().unwrap();
    assert_eq!(
        (c.rx_packets, c.rx_bytes, c.drops[7], c.tx_packets),
        (45, 4500, 3, 0)
    );
    t.reset_counters().unwrap();
    assert_eq!(t.job(3).unwrap().counters.contributions, 0);
    assert_eq!(t.counters().unwrap().rx_packets, 0);
}

#[test]
fn a_client_binds_to_the_running_program_or_says_what_is_missing() {
    let sw = Switch::start();
    // Nothing runs yet: binding names what to push.
    let err = connect(&sw, None).unwrap_err();
    assert!(err.to_string().contains("no program inagg"), "{err}");
    let dir = program_dir(64, 8192);
    let mut first = connect(&sw, Some(dir.path())).unwrap();
    install_job(&mut first, &spec(1, &["10.0.0.1:5000"], 0, 2)).unwrap();
    drop(first);
    // A second client binds without pushing, and sees the job.
    let mut second = connect(&sw, None).unwrap();
    assert_eq!(second.jobs().unwrap().len(), 1);
    // A program directory without a binary.
    let empty = tempdir::Dir::new();
    std::fs::write(empty.path().join("bf-rt.json"), "{}").unwrap();
    let err = connect(&sw, Some(empty.path())).unwrap_err();
    assert!(
        err.to_string()
            .contains("no pipe/tofino.bin or pipe/tofino2.bin"),
        "{err}"
    );
    // Another program: a table the target needs is missing.
    let other = program_dir(64, 8192);
    let json = tna_bfrt_json(64, 8192).replace("result_receivers", "receivers");
    std::fs::write(other.path().join("bf-rt.json"), json).unwrap();
    let err = connect(&sw, Some(other.path())).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("no table pipe.InaggEgress.result_rewrite.result_receivers"),
        "{text}"
    );
    assert!(text.contains("is the pipeline inagg's p4/tna"), "{text}");
}

#[test]
fn no_server_is_an_error_naming_bf_switchd_within_the_timeout() {
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let err = TofinoTarget::connect(TofinoOptions {
        addr: free,
        timeout: Duration::from_secs(2),
        ..TofinoOptions::default()
    })
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains(&format!("cannot reach BF Runtime server at {free}")),
        "{text}"
    );
    assert!(text.contains("is bf_switchd running?"), "{text}");
}

/// The stand-in's bf-rt.json has the compiler's shape for every table the
/// target uses: the file INAGG_TNA_BFRT names (tests/tofino/run.sh
/// compiles one), else what `p4/build.sh tna` left in p4/build/tna.
#[test]
fn the_standins_bf_rt_json_is_the_one_bf_p4c_makes() {
    let path = match std::env::var_os("INAGG_TNA_BFRT") {
        Some(p) => std::path::PathBuf::from(p),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../p4/build/tna/bf-rt.json"),
    };
    let Ok(real) = std::fs::read(&path) else {
        eprintln!(
            "skipped: no {} (run p4/build.sh tna where bf-p4c is installed)",
            path.display()
        );
        return;
    };
    let real = BfrtInfo::parse(&real, "bf-p4c").unwrap();
    let pairs = real
        .names()
        .filter(|n| inagg_switch_control::tofino::target::names::is_pair(n))
        .count();
    let slots = real
        .table("pipe.InaggIngress.slot_state.bitmap_lo")
        .unwrap()
        .size;
    let standin = BfrtInfo::parse(
        tna_bfrt_json(pairs as u16 * 2, slots as u32).as_bytes(),
        "stand-in",
    )
    .unwrap();
    let mut names = vec![
        "pipe.InaggIngress.admission.job_table",
        "pipe.InaggIngress.admission.worker_table",
        "pipe.InaggEgress.result_rewrite.result_receivers",
        "pipe.InaggIngress.queue_select.priority_to_queue",
        "pipe.InaggIngress.group_relay.group_table",
        "pipe.InaggIngress.group_relay.member_table",
        "pipe.InaggEgress.group_rewrite.group_receivers",
        "pipe.InaggIngress.group_packets",
        "pipe.InaggEgress.group_copies",
        "pipe.InaggIngress.slot_state.bitmap_lo",
        "pipe.InaggIngress.slot_state.bitmap_hi",
        "pipe.InaggIngress.accumulators.pair_00.values",
        "pipe.InaggIngress.rx",
        "pipe.InaggEgress.tx",
        "pipe.InaggIngress.drops",
    ];
    names.extend([
        "pipe.InaggIngress.job_contributions",
        "pipe.InaggIngress.job_results",
        "pipe.InaggIngress.job_resent_results",
        "pipe.InaggIngress.job_duplicates",
        "pipe.InaggIngress.job_dropped",
        "pipe.InaggIngress.job_queries",
    ]);
    assert_eq!(shape(&standin, &names), shape(&real, &names));
}

#[test]
fn priority_classes_map_to_queues_whose_drops_and_depths_are_read() {
    use inagg_switch_api::queues::ClassQueue;
    let sw = Switch::start();
    let dir = program_dir(64, 8192);
    let mut t = connect(&sw, Some(dir.path())).unwrap();
    let report = t.queues().unwrap();
    assert!(report.map.is_empty() && report.ports.is_empty());
    t.set_priority_queue(5, 7).unwrap();
    t.set_priority_queue(200, 2).unwrap();
    t.set_priority_queue(9, 0).unwrap();
    let cq = |class, queue| ClassQueue { class, queue };
    assert_eq!(t.queues().unwrap().map, [cq(5, 7), cq(200, 2)]);
    let entries_now = entries(&sw, "pipe.InaggIngress.queue_select.priority_to_queue");
    assert_eq!(entries_now.len(), 2);
    assert_eq!(entries_now[0].0, vec![(1, vec![5])]);
    assert_eq!(stream(&entries_now[0].1, 1), vec![7]);
    // Changed, then moved back to queue 0 (the default: no entry).
    t.set_priority_queue(5, 3).unwrap();
    t.set_priority_queue(200, 0).unwrap();
    assert_eq!(t.queues().unwrap().map, [cq(5, 3)]);
    // A queue the ports do not have: refused, nothing written.
    let writes = sw.state.lock().unwrap().writes.len();
    let msg = t.set_priority_queue(1, 8).unwrap_err().to_string();
    assert!(msg.contains("queue 8"), "{msg}");
    assert_eq!(sw.state.lock().unwrap().writes.len(), writes);

    // With a job, its ports' queues: port 130's queue 7 (group queue 23 of
    // pipe 1's group 0) has dropped 4 packets and holds 3 cells.
    install_job(&mut t, &spec(2, &["10.0.0.1:5000", "10.0.0.3:5000"], 0, 8)).unwrap();
    {
        let mut s = sw.state.lock().unwrap();
        let id = s.table_id("tf1.tm.counter.queue");
        let cell = |v: u64| Some(bfrt::data_field::Value::Stream(v.to_be_bytes().to_vec()));
        let data = bfrt::TableData {
            action_id: 0,
            fields: [(1, 4), (2, 3), (3, 10)]
                .into_iter()
                .map(|(field_id, v)| bfrt::DataField {
                    field_id,
                    value: cell(v),
                })
                .collect(),
        };
        s.entries
            .insert((id, vec![(1, vec![0]), (2, vec![23])]), data);
    }
    let report = t.queues().unwrap();
    let ports: Vec<String> = report.ports.iter().map(|p| p.port.to_string()).collect();
    assert_eq!(ports, ["10.0.0.1:5000", "10.0.0.3:5000"]);
    let q7 = report.ports[1].queues[7];
    assert_eq!(
        (q7.drops, q7.depth_bytes, q7.max_depth_bytes),
        (4, 3 * CELL_BYTES as usize, 10 * CELL_BYTES as usize)
    );
    assert_eq!(report.ports[0].queues[7].drops, 0);
}

#[test]
fn a_port_the_switch_lacks_is_refused_before_the_job_is_written() {
    let sw = Switch::start();
    let dir = program_dir(64, 8192);
    let mut t = TofinoTarget::connect(TofinoOptions {
        addr: sw.addr,
        program: Some(dir.path().to_path_buf()),
        topology: Some(
            Topology::parse(
                "topology.toml",
                "[workers]\n\"10.0.0.1\" = { port = 300, mac = \"02:00:00:00:00:01\" }\n",
            )
            .unwrap(),
        ),
        timeout: Duration::from_secs(5),
        ..TofinoOptions::default()
    })
    .unwrap();
    let err = install_job(&mut t, &spec(1, &["10.0.0.1:5000"], 0, 8)).unwrap_err();
    assert!(
        err.to_string()
            .contains("no tf1.tm.port.cfg entry for port 300"),
        "{err}"
    );
    assert!(sw.state.lock().unwrap().writes.is_empty());
}

/// The stand-in's fixed tables have the driver's keys and, for every data
/// field the target uses, its id, type and values: checked against the
/// driver's own descriptions where INAGG_BFRT_FIXED names them (its
/// bf_rt_pre and bf_rt_tm JSON files for Tofino 1, separated by `:`).
#[test]
fn the_standins_fixed_tables_are_the_drivers() {
    let Some(paths) = std::env::var_os("INAGG_BFRT_FIXED") else {
        eprintln!("skipped: INAGG_BFRT_FIXED names none of the driver's bf-rt files");
        return;
    };
    let mut driver = BfrtInfo::default();
    for path in std::env::split_paths(&paths) {
        let json = std::fs::read(&path).unwrap();
        let info = BfrtInfo::parse(&json, &path.display().to_string()).unwrap();
        driver.merge(info).unwrap();
    }
    let standin = BfrtInfo::parse(fixed_bfrt_json().as_bytes(), "stand-in").unwrap();
    let mut names: Vec<&str> = standin.names().collect();
    names.sort_unstable();
    for name in names {
        let ours = standin.table(name).unwrap();
        let theirs = driver.table(name).unwrap();
        assert_eq!(ours.table_type, theirs.table_type, "{name}");
        assert_eq!(ours.keys(), theirs.keys(), "{name}'s keys");
        for field in ours.data_fields() {
            assert_eq!(Ok(field), theirs.data(&field.name), "{name}");
        }
    }
}

#[test]
fn groups_made_by_hand_are_installed_counted_and_removed() {
    use inagg_switch_api::GroupSpec;
    let sw = Switch::start();
    let dir = program_dir(64, 8192);
    let mut t = connect(&sw, Some(dir.path())).unwrap();
    install_job(&mut t, &spec(1, &["10.0.0.1:5000", "10.0.0.2:5000"], 0, 8)).unwrap();
    let members: Vec<SocketAddr> = ["10.0.0.3:6000", "10.0.0.1:6000", "10.0.0.2:6001"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let group = GroupSpec {
        id: 700,
        members: members.clone(),
    };
    let writes = sw.state.lock().unwrap().writes.len();
    t.create_group(&group).unwrap();
    assert_eq!(
        sw.state.lock().unwrap().writes.len(),
        writes + 1,
        "one write"
    );
    // Member 0 on port 130: its PRE node (rid 0) and its receiver entry.
    let nodes = entries(&sw, "$pre.node");
    assert_eq!(nodes.len(), 2 + 3);
    let group_node = (1u32 << 31) | (700 << 10);
    assert!(nodes
        .iter()
        .any(|(k, d)| k == &vec![(1, group_node.to_be_bytes().to_vec())]
            && stream(d, 1) == vec![0, 0]));
    let receivers = entries(&sw, "pipe.InaggEgress.group_rewrite.group_receivers");
    let (_, first) = receivers
        .iter()
        .find(|(k, _)| k == &vec![(1, 700u16.to_be_bytes().to_vec()), (2, vec![0, 0])])
        .unwrap();
    assert_eq!(stream(first, 2), vec![10, 0, 0, 3]);

    // Counted: packets and copies at the group id.
    {
        let mut s = sw.state.lock().unwrap();
        let id = s.table_id("pipe.InaggEgress.group_copies");
        let cell = bfrt::TableData {
            action_id: 0,
            fields: vec![
                bfrt::DataField {
                    field_id: 65553,
                    value: Some(bfrt::data_field::Value::Stream(vec![0; 8])),
                },
                bfrt::DataField {
                    field_id: 65554,
                    value: Some(bfrt::data_field::Value::Stream(6u64.to_be_bytes().to_vec())),
                },
            ],
        };
        s.entries
            .insert((id, vec![(65556, 700u32.to_be_bytes().to_vec())]), cell);
    }
    let groups = t.groups().unwrap();
    let ids: Vec<(u16, Option<u16>)> = groups.iter().map(|g| (g.id, g.job)).collect();
    assert_eq!(ids, [(2, Some(1)), (700, None)]);
    assert_eq!(groups[1].members, members);
    assert_eq!((groups[1].packets, groups[1].copies), (0, 6));

    // Ids in use, by a job's result group or by this group; a job whose
    // result group would be this group's id.
    let msg = t
        .create_group(&GroupSpec {
            id: 2,
            members: members.clone(),
        })
        .unwrap_err()
        .to_string();
    assert!(msg.contains("job 1"), "{msg}");
    let msg = t.create_group(&group).unwrap_err().to_string();
    assert!(msg.contains("made by hand"), "{msg}");
    let mut clash = spec(3, &["10.0.0.3:5000"], 8, 8);
    clash.group = Some(700);
    let msg = install_job(&mut t, &clash).unwrap_err().to_string();
    assert!(msg.contains("made by hand"), "{msg}");
    let msg = t.delete_group(2).unwrap_err().to_string();
    assert!(msg.contains("belongs to job 1"), "{msg}");

    t.delete_group(700).unwrap();
    assert_eq!(t.groups().unwrap().len(), 1);
    assert_eq!(entries(&sw, "$pre.node").len(), 2);
    assert_eq!(entries(&sw, "$pre.mgid").len(), 1);
    assert!(matches!(
        t.delete_group(700).unwrap_err(),
        ControlError::Job(JobError::UnknownGroup { group: 700 })
    ));
}
