//! The tofino target end to end, against the stand-in BF Runtime server of
//! `tofino::standin` (its doc says what it checks, and why it stands in
//! for bf_switchd). Its bf-rt.json (`tofino::testing::tna_bfrt_json`) is
//! compared with the compiler's own where `p4/build.sh tna` has run, and
//! its fixed tables with the driver's where INAGG_BFRT_FIXED names them.

#![cfg(feature = "tofino")]

use std::net::SocketAddr;
use std::time::Duration;

use inagg_switch_api::{JobError, JobSpec, Upstream};
use inagg_switch_control::bmv2::testing::job as spec;
use inagg_switch_control::bmv2::Topology;
use inagg_switch_control::target::{install_job, ControlError, Target};
use inagg_switch_control::tofino::proto::bfrt_proto as bfrt;
use inagg_switch_control::tofino::standin::{
    entries, key_of, program_dir, stream, table_entry, tempdir, topology, Switch, CELL_BYTES,
};
use inagg_switch_control::tofino::testing::{fixed_bfrt_json, shape, tna_bfrt_json};
use inagg_switch_control::tofino::{BfrtInfo, TofinoOptions, TofinoTarget};

fn connect(sw: &Switch, program: Option<&std::path::Path>) -> Result<TofinoTarget, ControlError> {
    TofinoTarget::connect(TofinoOptions {
        addr: sw.addr,
        program: program.map(std::path::Path::to_path_buf),
        topology: Some(topology()),
        timeout: Duration::from_secs(5),
        ..TofinoOptions::default()
    })
}

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

    // The bitmaps zeroed over the pool, slot 12 included, and its sets'
    // rounds, in a write of their own before anything else.
    let s = sw.state.lock().unwrap();
    assert_eq!(
        s.writes.len(),
        3,
        "the bitmaps, the ports' queues, then the entries"
    );
    assert_eq!(s.writes[0].len(), 2 * 4 + 2 * 4);
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
    // Both sets of each of the pool's slots (10..14): sets 20..28.
    let rounds = entries(&sw, "pipe.InaggIngress.slot_state.rounds");
    let index = |b: &[u8]| b.iter().fold(0u64, |a, &x| a << 8 | u64::from(x));
    let mut sets: Vec<u64> = rounds.iter().map(|(k, _)| index(&k[0].1)).collect();
    sets.sort_unstable();
    assert_eq!(
        sets,
        (20..28).collect::<Vec<u64>>(),
        "the pool's sets' rounds zeroed"
    );
    for (_, d) in &rounds {
        assert_eq!(stream(d, 1), vec![0; 2]);
        assert_eq!(stream(d, 2), vec![0; 2]);
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
        let why = format!(
            "no {} (run p4/build.sh tna where bf-p4c is installed)",
            path.display()
        );
        inagg_testbed::skip::skip("tofino", &why);
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
    let per_job = "contributions results resent_results duplicates dropped queries"
        .split(' ')
        .map(|c| format!("pipe.InaggIngress.job_{c}"))
        .collect::<Vec<_>>();
    names.extend(per_job.iter().map(String::as_str));
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

#[test]
fn a_port_with_fewer_than_eight_queues_is_refused_before_the_job_is_written() {
    let sw = Switch::start();
    let dir = program_dir(64, 8192);
    let mut t = connect(&sw, Some(dir.path())).unwrap();
    // Port 2's group gives it 4 queues (tf1.tm.port.group can): the
    // priority classes need 8.
    {
        let mut s = sw.state.lock().unwrap();
        let cfg = s
            .info
            .as_ref()
            .unwrap()
            .table("tf1.tm.port.cfg")
            .unwrap()
            .clone();
        let key = (cfg.id, vec![(1, 2u32.to_be_bytes().to_vec())]);
        let data = s.entries.get_mut(&key).expect("port 2's tm.port.cfg entry");
        for f in &mut data.fields {
            if f.field_id == cfg.data("port_queues_count").unwrap().id {
                f.value = Some(bfrt::data_field::Value::Stream(vec![4]));
            } else if f.field_id == cfg.data("egress_qid_queues").unwrap().id {
                f.value = Some(bfrt::data_field::Value::IntArrVal(
                    bfrt::data_field::IntArray {
                        val: vec![8, 9, 10, 11],
                    },
                ));
            }
        }
    }
    let err = install_job(&mut t, &spec(1, &["10.0.0.1:5000", "10.0.0.2:5000"], 0, 8)).unwrap_err();
    assert!(
        err.to_string()
            .contains("switch port 2 has 4 queues; inagg's priority classes need 8"),
        "{err}"
    );
    assert!(sw.state.lock().unwrap().writes.is_empty());
    assert!(t.jobs().unwrap().is_empty());
}

/// The stand-in's fixed tables have the driver's keys and, for every data
/// field the target uses, its id, type and values: checked against the
/// driver's own descriptions where INAGG_BFRT_FIXED names them (its
/// bf_rt_pre and bf_rt_tm JSON files for Tofino 1, separated by `:`).
#[test]
fn the_standins_fixed_tables_are_the_drivers() {
    let Some(paths) = std::env::var_os("INAGG_BFRT_FIXED") else {
        let why = "INAGG_BFRT_FIXED names none of the driver's bf-rt files";
        inagg_testbed::skip::skip("tofino", why);
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
