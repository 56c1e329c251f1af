//! The conformance vectors as raw Ethernet frames on real ports: the
//! emulator runs in a network namespace ("the switch") with one veth per
//! switch port, `inagg conformance --ports` runs in a second namespace ("the
//! hosts") on the other ends, and every vector must pass on the wire, as it
//! would against bmv2 (the bmv2 runner uses the same command). Needs root
//! and iproute2; without them the test says it skipped and why.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use inagg_emu::conformance;

mod common;
use common::{in_ns, sh, skip_reason};

const SWITCH_IP: &str = "10.0.0.100";
const SWITCH_MAC: &str = "02:5e:00:00:00:01";
const CONTROL: &str = "192.168.77.2:47001";
/// The control endpoint is off loopback, so the emulator needs a token;
/// every command here passes it through the environment.
const TOKEN: &str = "raw-conformance";

/// Two namespaces, removed (with the emulator) when dropped.
struct Lab {
    switch: String,
    hosts: String,
    emu: Option<Child>,
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Some(mut c) = self.emu.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in [&self.switch, &self.hosts] {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
    }
}

fn vector_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/conformance")
}

/// Every worker endpoint of every vector: switch port -> [(ip, mac)].
fn endpoints() -> BTreeMap<u16, Vec<(String, String)>> {
    let mut ports: BTreeMap<u16, Vec<(String, String)>> = BTreeMap::new();
    for path in conformance::files(&vector_dir()).unwrap() {
        let case = conformance::load(&path).unwrap();
        for w in case.endpoints() {
            let SocketAddr::V4(a) = w.addr else { continue };
            let e = (a.ip().to_string(), w.mac.clone());
            let list = ports.entry(w.port).or_default();
            if !list.contains(&e) {
                list.push(e);
            }
        }
        // Senders that are no job's worker still need a port and a route back.
        for s in &case.packets {
            let SocketAddr::V4(a) = s.input.from else {
                continue;
            };
            let list = ports.entry(s.input.port).or_default();
            if !list.iter().any(|(ip, _)| *ip == a.ip().to_string()) {
                list.push((a.ip().to_string(), "02:00:00:00:00:ee".into()));
            }
        }
    }
    ports
}

fn build_lab() -> Lab {
    let id = std::process::id();
    let lab = Lab {
        switch: format!("icf-sw-{id}"),
        hosts: format!("icf-h-{id}"),
        emu: None,
    };
    for ns in [&lab.switch, &lab.hosts] {
        sh(&["ip", "netns", "add", ns]);
        in_ns(ns, &["ip", "link", "set", "lo", "up"]);
    }
    let (s, h) = (lab.switch.as_str(), lab.hosts.as_str());
    in_ns(
        s,
        &["ip", "addr", "add", &format!("{SWITCH_IP}/32"), "dev", "lo"],
    );
    in_ns(
        s,
        &["sh", "-c", "echo 0 > /proc/sys/net/ipv4/conf/all/rp_filter"],
    );
    for (port, hosts) in endpoints() {
        let (hi, si) = (format!("icfh{port}"), format!("icfs{port}"));
        sh(&[
            "ip", "link", "add", &hi, "netns", h, "type", "veth", "peer", "name", &si, "netns", s,
        ]);
        in_ns(s, &["ip", "link", "set", &si, "address", SWITCH_MAC, "up"]);
        in_ns(h, &["ip", "link", "set", &hi, "up"]);
        for (ip, mac) in hosts {
            in_ns(s, &["ip", "route", "add", &format!("{ip}/32"), "dev", &si]);
            in_ns(
                s,
                &[
                    "ip",
                    "neigh",
                    "replace",
                    &ip,
                    "lladdr",
                    &mac,
                    "dev",
                    &si,
                    "nud",
                    "permanent",
                ],
            );
        }
    }
    // The control link, so the replayer can install jobs and read counters.
    sh(&[
        "ip", "link", "add", "icfc", "netns", h, "type", "veth", "peer", "name", "icfc", "netns", s,
    ]);
    in_ns(h, &["ip", "addr", "add", "192.168.77.1/30", "dev", "icfc"]);
    in_ns(s, &["ip", "addr", "add", "192.168.77.2/30", "dev", "icfc"]);
    in_ns(h, &["ip", "link", "set", "icfc", "up"]);
    in_ns(s, &["ip", "link", "set", "icfc", "up"]);
    lab
}

fn start_emulator(lab: &mut Lab) {
    let child = Command::new("ip")
        .args([
            "netns",
            "exec",
            &lab.switch,
            env!("CARGO_BIN_EXE_inagg"),
            "emu",
        ])
        .args([
            "--data",
            &format!("{SWITCH_IP}:47000"),
            "--control",
            CONTROL,
            // Off loopback, on the test's own bridge: in clear, said so.
            "--insecure",
        ])
        .env("INAGG_SWITCH_TOKEN", TOKEN)
        .stdout(Stdio::null())
        .spawn()
        .expect("start the emulator");
    lab.emu = Some(child);
    // Ready when the control endpoint answers.
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let ok = Command::new("ip")
            .args(["netns", "exec", &lab.hosts, env!("CARGO_BIN_EXE_inagg")])
            .args(["ctl", "--addr", CONTROL, "info"])
            .env("INAGG_SWITCH_TOKEN", TOKEN)
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the emulator did not come up in its namespace");
}

fn replay(lab: &Lab, dir: &Path) -> Output {
    let ports: Vec<String> = endpoints().keys().map(|p| format!("icfh{p}={p}")).collect();
    Command::new("ip")
        .args(["netns", "exec", &lab.hosts, env!("CARGO_BIN_EXE_inagg")])
        .arg("conformance")
        .arg(dir)
        .args(["--ports", &ports.join(",")])
        .args(["--switch", &format!("{SWITCH_IP}:47000")])
        .args(["--switch-mac", SWITCH_MAC, "--addr", CONTROL])
        .env("INAGG_SWITCH_TOKEN", TOKEN)
        .output()
        .expect("run inagg conformance")
}

#[test]
fn emulator_passes_every_vector_as_raw_frames_on_veth_ports() {
    if let Some(why) = skip_reason() {
        inagg_testbed::skip::skip("netns", &why);
        return;
    }
    let mut lab = build_lab();
    start_emulator(&mut lab);

    let out = replay(&lab, &vector_dir());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let n = conformance::files(&vector_dir()).unwrap().len();
    assert!(stdout.contains(&format!("{n} vectors passed")), "{stdout}");

    // The wire replay can fail: one wrong expected byte is caught.
    let tmp = std::env::temp_dir().join(format!("inagg-bad-vector-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let text = std::fs::read_to_string(vector_dir().join("02_n_workers_complete_a_slot.json"));
    let mut case: serde_json::Value = serde_json::from_str(&text.unwrap()).unwrap();
    let value = &mut case["packets"][2]["out"][1]["fields"]["values"][0];
    *value = (value.as_i64().unwrap() + 1).into();
    std::fs::write(tmp.join("02_bad.json"), case.to_string()).unwrap();
    let out = replay(&lab, &tmp);
    let _ = std::fs::remove_dir_all(&tmp);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success());
    // Failed on the payload comparison, not on anything else.
    assert!(
        stdout.contains("FAIL  02_bad.json: packet 2") && stdout.contains("want"),
        "{stdout}"
    );
}
