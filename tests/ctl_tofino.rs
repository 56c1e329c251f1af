//! `inagg ctl --target tofino`, the binary end to end, against the stand-in
//! BF Runtime server of `inagg_switch_control::tofino::standin` (its doc
//! says what it checks, and why it stands in for bf_switchd): the program
//! pushed, a job, a priority class, the queues' counters, a group made by
//! hand and the counters, each through the CLI's options and output.

#![cfg(feature = "tofino")]

use std::process::{Command, Output};

use inagg_switch_control::tofino::proto::bfrt_proto as bfrt;
use inagg_switch_control::tofino::standin::{program_dir, Switch, TOPOLOGY};

const INAGG: &str = env!("CARGO_BIN_EXE_inagg");

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Runs `inagg ctl --target tofino --addr ... --topology ... ARGS`, and
/// returns its output, failing the test if it failed.
fn ctl(sw: &Switch, topology: &std::path::Path, args: &[&str]) -> String {
    let out = Command::new(INAGG)
        .args(["ctl", "--target", "tofino", "--addr", &sw.addr.to_string()])
        .arg("--topology")
        .arg(topology)
        .args(args)
        .output()
        .unwrap();
    assert!(out.status.success(), "inagg ctl {args:?}: {}", text(&out));
    text(&out)
}

/// Puts `(field id, value)` into the stand-in's entry of `table` at `key`,
/// as the switch's hardware would have counted them.
fn set_cell(sw: &Switch, table: &str, key: Vec<(u32, Vec<u8>)>, fields: &[(u32, u64)]) {
    let mut s = sw.state.lock().unwrap();
    let id = s.table_id(table);
    let fields = fields
        .iter()
        .map(|&(field_id, v)| bfrt::DataField {
            field_id,
            value: Some(bfrt::data_field::Value::Stream(v.to_be_bytes().to_vec())),
        })
        .collect();
    let data = bfrt::TableData {
        action_id: 0,
        fields,
    };
    s.entries.insert((id, key), data);
}

#[test]
fn ctl_programs_a_tofino_through_bf_runtime() {
    let sw = Switch::start();
    let dir = program_dir(64, 8192);
    let topology = dir.path().join("topology.toml");
    std::fs::write(&topology, TOPOLOGY).unwrap();
    let program = dir.path().to_str().unwrap();

    let info = ctl(&sw, &topology, &["--program", program, "--json", "info"]);
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(
        (
            info["info"]["slots"].as_u64(),
            info["info"]["max_elements"].as_u64()
        ),
        (Some(8192), Some(64))
    );

    // Without --program, the client binds to the program the switch runs.
    ctl(
        &sw,
        &topology,
        &[
            "job",
            "create",
            "--id",
            "7",
            "--workers",
            "10.0.0.1:5000,10.0.0.3:5000",
            "--pool-base",
            "0",
            "--pool-size",
            "16",
            "--elements",
            "64",
        ],
    );
    let jobs: serde_json::Value =
        serde_json::from_str(&ctl(&sw, &topology, &["--json", "job", "list"])).unwrap();
    assert_eq!(jobs[0]["spec"]["id"], 7, "{jobs}");
    assert_eq!(jobs[0]["spec"]["workers"][1], "10.0.0.3:5000", "{jobs}");

    let out = ctl(&sw, &topology, &["priority", "5", "7"]);
    assert!(out.contains("priority class 5 -> queue 7"), "{out}");
    // Port 130 (10.0.0.3) has dropped 4 packets from queue 7: its pipe's
    // port group 0, group queue 23.
    set_cell(
        &sw,
        "tf1.tm.counter.queue",
        vec![(1, vec![0]), (2, vec![23])],
        &[(1, 4), (2, 0), (3, 0)],
    );
    let out = ctl(&sw, &topology, &["queues"]);
    assert!(
        out.contains("tofino's own queues: 8 strict-priority queues per port, queue 7 first"),
        "{out}"
    );
    assert!(out.contains("class -> queue: 5->7 (others on 0)"), "{out}");
    let row = out
        .lines()
        .find(|l| l.starts_with("10.0.0.3:5000"))
        .unwrap_or_else(|| panic!("no row for port 130's queue 7: {out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!((cells[1], cells[4]), ("7", "4"), "queue 7, 4 drops: {row}");

    ctl(
        &sw,
        &topology,
        &[
            "group",
            "create",
            "--id",
            "700",
            "--members",
            "10.0.0.2:6000,10.0.0.3:6000",
        ],
    );
    let groups: serde_json::Value =
        serde_json::from_str(&ctl(&sw, &topology, &["--json", "group", "list"])).unwrap();
    let ids: Vec<u64> = groups
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["id"].as_u64().unwrap())
        .collect();
    assert_eq!(
        ids,
        [8, 700],
        "the job's result group and the one by hand: {groups}"
    );

    // The switch has received 45 packets (InaggIngress.rx, bytes 4500).
    set_cell(
        &sw,
        "pipe.InaggIngress.rx",
        vec![(65556, vec![0; 4])],
        &[(65553, 4500), (65554, 45)],
    );
    let counters: serde_json::Value =
        serde_json::from_str(&ctl(&sw, &topology, &["--json", "counters"])).unwrap();
    let switch = &counters["switch"];
    assert_eq!(
        (&switch["rx_packets"], &switch["rx_bytes"]),
        (&45.into(), &4500.into()),
        "{counters}"
    );
    assert_eq!(counters["jobs"][0]["spec"]["id"], 7, "{counters}");

    ctl(&sw, &topology, &["group", "delete", "700"]);
    ctl(&sw, &topology, &["job", "delete", "7"]);
    let jobs = ctl(&sw, &topology, &["--json", "job", "list"]);
    assert_eq!(jobs.split_whitespace().collect::<String>(), "[]");
}

/// `inagg controller --target tofino` places a job named through `inagg ctl
/// --controller` on the switch: its entries are in the stand-in's tables.
#[test]
fn the_controller_places_jobs_on_a_tofino() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let sw = Switch::start();
    let dir = program_dir(64, 8192);
    let topology = dir.path().join("topology.toml");
    std::fs::write(&topology, TOPOLOGY).unwrap();
    let listen = inagg_testbed::ports::tcp();
    let mut controller = Command::new(INAGG)
        .args([
            "controller",
            "--target",
            "tofino",
            "--switch",
            &sw.addr.to_string(),
        ])
        .arg("--program")
        .arg(dir.path())
        .arg("--topology")
        .arg(&topology)
        .args([
            "--switch-data",
            "10.0.0.254:47000",
            "--listen",
            &listen.to_string(),
        ])
        .arg("--state")
        .arg(dir.path().join("controller.redb"))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the API to listen (its log says so), at most 30 s.
    let mut log = BufReader::new(controller.stderr.take().unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut seen = String::new();
    while std::net::TcpStream::connect(listen).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "the controller never listened: {seen}"
        );
        let mut line = String::new();
        if log.read_line(&mut line).unwrap_or(0) == 0 {
            let _ = controller.kill();
            panic!("the controller exited: {seen}");
        }
        seen.push_str(&line);
    }
    std::thread::spawn(move || std::io::copy(&mut log, &mut std::io::sink()));

    let out = Command::new(INAGG)
        .args(["ctl", "--controller", &listen.to_string(), "job", "create"])
        .args([
            "--name",
            "resnet",
            "--workers",
            "10.0.0.1:5000,10.0.0.2:5000",
        ])
        .args(["--elements", "64", "--slots", "32"])
        .output()
        .unwrap();
    let _ = controller.kill();
    let _ = controller.wait();
    assert!(out.status.success(), "{}", text(&out));
    let s = sw.state.lock().unwrap();
    let jobs = s.table_id("pipe.InaggIngress.admission.job_table");
    let workers = s.table_id("pipe.InaggIngress.admission.worker_table");
    let count = |t| s.entries.keys().filter(|(id, _)| *id == t).count();
    assert_eq!((count(jobs), count(workers)), (1, 2), "{}", text(&out));
}
