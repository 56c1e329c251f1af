//! `inagg ctl --target bmv2` against the real switch: the `inagg` binary
//! drives a `simple_switch_grpc` running p4/v1model as `p4c-bm2-ss`
//! compiles it (both from `inagg_switch_control::bmv2::testing`). Where
//! p4c-bm2-ss or simple_switch_grpc is not on PATH the test prints
//! "skipped: ..." and passes; docs/GUIDE.md ("The bmv2 target") says how to
//! put them on PATH.

#![cfg(feature = "bmv2")]

use std::path::Path;
use std::process::Command;

use inagg_switch_control::bmv2::testing::{program, SimpleSwitch, TOPOLOGY};
use inagg_switch_control::bmv2::{Bmv2Options, Bmv2Target};
use inagg_testbed::pki::Pki;

/// `inagg ctl --target bmv2 --addr <switch> --topology <file> ARGS`: its
/// standard output, or its standard error when it fails.
fn ctl(sw: &SimpleSwitch, topology: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new(env!("CARGO_BIN_EXE_inagg"))
        .args(["ctl", "--target", "bmv2", "--addr", &sw.addr.to_string()])
        .arg("--topology")
        .arg(topology)
        .args(args)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        let err = String::from_utf8(out.stderr).unwrap();
        Err(err
            .trim_end()
            .trim_start_matches("inagg: error: ")
            .to_string())
    }
}

#[test]
fn ctl_drives_the_bmv2_target() {
    let program = match program(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("ctl-bmv2")) {
        Ok(p) => p,
        Err(why) => {
            inagg_testbed::skip::skip("bmv2", why);
            return;
        }
    };
    let sw = SimpleSwitch::start();
    drop(sw.connect(program)); // pushes the pipeline
    let dir = std::env::temp_dir().join(format!("inagg-bmv2-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let topo = dir.join("topology.toml");
    std::fs::write(&topo, TOPOLOGY).unwrap();

    let out = ctl(
        &sw,
        &topo,
        &[
            "job",
            "create",
            "--id",
            "1",
            "--workers",
            "10.0.0.1:5000,10.0.0.2:5001",
            "--pool-base",
            "0",
            "--pool-size",
            "128",
        ],
    )
    .unwrap();
    assert_eq!(out, "created job 1: pool [0, 128) k=64\n");
    let out = ctl(&sw, &topo, &["info"]).unwrap();
    assert!(
        out.starts_with("target        bmv2\n") && out.contains("jobs          1"),
        "{out}"
    );
    let out = ctl(&sw, &topo, &["--json", "job", "list"]).unwrap();
    let jobs: Vec<serde_json::Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(jobs[0]["spec"]["workers"][1], "10.0.0.2:5001");
    let out = ctl(&sw, &topo, &["pool"]).unwrap();
    assert!(out.contains("8064 of 8192 slots free"), "{out}");
    let out = ctl(&sw, &topo, &["counters", "--reset"]).unwrap();
    assert!(out.contains("unknown_job"), "{out}");

    let cluster = dir.join("cluster.toml");
    std::fs::write(
        &cluster,
        "[switch]\ntarget = \"bmv2\"\n\n[[job]]\nid = 2\nworkers = [\"10.0.0.3:6000\"]\n\
         pool_base = 128\npool_size = 64\n",
    )
    .unwrap();
    let out = ctl(
        &sw,
        &topo,
        &["apply", "-f", cluster.to_str().unwrap(), "--prune"],
    )
    .unwrap();
    assert!(
        out.contains("- job 1") && out.contains("+ job 2") && out.ends_with("applied\n"),
        "{out}"
    );
    let out = ctl(&sw, &topo, &["job", "show", "2"]).unwrap();
    assert!(out.contains("worker   0  10.0.0.3:6000"), "{out}");
    let out = ctl(&sw, &topo, &["job", "delete", "2"]).unwrap();
    assert_eq!(out, "deleted job 2\n");

    // A tree node: its parent's endpoint is in the topology as a worker's.
    let tree = [
        "job",
        "create",
        "--id",
        "3",
        "--workers",
        "10.0.0.3:6000",
        "--pool-base",
        "0",
        "--pool-size",
        "8",
        "--upstream",
        "10.0.9.1:47000/30/1",
    ];
    assert_eq!(
        ctl(&sw, &topo, &tree).unwrap(),
        "created job 3: pool [0, 8) k=64\n"
    );
    let out = ctl(&sw, &topo, &["job", "show", "3"]).unwrap();
    assert!(
        out.contains("upstream  switch 10.0.9.1:47000  job 30  as member 1"),
        "{out}"
    );
    // Another tree node with an auxiliary path, and a parent that takes
    // its detours from a relay.
    let mut aux = tree.to_vec();
    aux[3] = "4";
    aux[7] = "16";
    aux[11] = "10.0.9.1:47000/31/1";
    aux.extend(["--aux-path", "10.0.0.2:47000/3/2"]);
    assert_eq!(
        ctl(&sw, &topo, &aux).unwrap(),
        "created job 4: pool [16, 24) k=64\n"
    );
    let out = ctl(&sw, &topo, &["job", "show", "4"]).unwrap();
    assert!(
        out.contains("auxiliary path  via 10.0.0.2:47000  busy bound 3  queue length 2"),
        "{out}"
    );
    let parent = [
        "job",
        "create",
        "--id",
        "5",
        "--workers",
        "10.0.0.1:6000,10.0.9.1:47000",
        "--pool-base",
        "32",
        "--pool-size",
        "8",
        "--detour",
        "1=10.0.0.2:47000",
    ];
    assert_eq!(
        ctl(&sw, &topo, &parent).unwrap(),
        "created job 5: pool [32, 40) k=64\n"
    );
    let out = ctl(&sw, &topo, &["job", "show", "5"]).unwrap();
    assert!(
        out.contains("detours of member 1 from relay 10.0.0.2:47000")
            && out.contains("detours taken 0"),
        "{out}"
    );
    // A relay entry, listed with its packets, and deleted.
    let relay = [
        "relay",
        "create",
        "--job",
        "7",
        "--from",
        "10.0.0.1:47000",
        "--member",
        "2",
        "--to",
        "10.0.9.1:47000",
    ];
    assert_eq!(
        ctl(&sw, &topo, &relay).unwrap(),
        "created relay job 7 member 2 from 10.0.0.1:47000 -> 10.0.9.1:47000\n"
    );
    let out = ctl(&sw, &topo, &["relay", "list"]).unwrap();
    assert!(
        out.contains("    7       2  10.0.0.1:47000         10.0.9.1:47000                  0"),
        "{out}"
    );
    // The relay entry may not carry job 5's detours past it.
    let clash = [
        "relay",
        "create",
        "--job",
        "5",
        "--from",
        "10.0.0.2:47000",
        "--member",
        "1",
        "--to",
        "10.0.9.1:47000",
    ];
    let msg = ctl(&sw, &topo, &clash).unwrap_err().to_string();
    assert!(msg.contains("carry them past it"), "{msg}");
    assert_eq!(
        ctl(
            &sw,
            &topo,
            &[
                "relay",
                "delete",
                "--job",
                "7",
                "--from",
                "10.0.0.1:47000",
                "--member",
                "2"
            ]
        )
        .unwrap(),
        "deleted relay job 7 member 2 from 10.0.0.1:47000\n"
    );
    assert!(ctl(&sw, &topo, &["relay", "list"])
        .unwrap()
        .contains("(no relay entries)"));
    for id in ["3", "4", "5"] {
        assert_eq!(
            ctl(&sw, &topo, &["job", "delete", id]).unwrap(),
            format!("deleted job {id}\n")
        );
    }

    // Groups made by hand, through the CLI.
    let args = [
        "group",
        "create",
        "--id",
        "9",
        "--members",
        "10.0.0.1:7000,10.0.0.3:7000",
    ];
    let out = ctl(&sw, &topo, &args).unwrap();
    assert_eq!(out, "created multicast group 9 with 2 members\n");
    let out = ctl(&sw, &topo, &["group", "list"]).unwrap();
    assert!(
        out.lines()
            .any(|l| l.contains("9  by hand") && l.ends_with("10.0.0.1:7000,10.0.0.3:7000")),
        "{out}"
    );
    let err = ctl(&sw, &topo, &args).unwrap_err();
    assert!(err.to_string().contains("group 9"), "{err}");
    let out = ctl(&sw, &topo, &["group", "delete", "9"]).unwrap();
    assert_eq!(out, "deleted multicast group 9\n");
    let out = ctl(&sw, &topo, &["group", "list"]).unwrap();
    assert!(out.contains("(no multicast groups)"), "{out}");

    let err = ctl(&sw, &topo, &["faults", "--seed", "3"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the bmv2 target does not support fault injection"
    );
    let err = ctl(
        &sw,
        &topo,
        &[
            "job",
            "create",
            "--id",
            "5",
            "--workers",
            "10.0.0.7:1",
            "--pool-base",
            "0",
            "--pool-size",
            "1",
        ],
    )
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("no entry for job 5 worker 0 (10.0.0.7:1)"),
        "{err}"
    );

    std::fs::remove_dir_all(&dir).unwrap();
}

/// `ctl --target bmv2 --switch-tls-ca` to a simple_switch_grpc started with
/// its SSL options: served; in clear, refused with what to do.
#[test]
fn ctl_speaks_p4runtime_over_tls() {
    let program = match program(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("ctl-bmv2")) {
        Ok(p) => p,
        Err(why) => {
            inagg_testbed::skip::skip("bmv2", why);
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("inagg-bmv2-tls-{}", std::process::id()));
    let pki = Pki::new(&dir).unwrap();
    let file = |p: &Path| p.to_str().unwrap().to_string();
    let (cert, key) = (file(&pki.server_cert), file(&pki.server_key));
    let sw = SimpleSwitch::start_with(&[
        "--grpc-server-ssl",
        "--grpc-server-cert",
        &cert,
        "--grpc-server-key",
        &key,
    ]);
    drop(
        Bmv2Target::connect(Bmv2Options {
            tls: Some(pki.client(false)),
            ..sw.options(program)
        })
        .unwrap(),
    );
    let topo = dir.join("topology.toml");
    std::fs::write(&topo, TOPOLOGY).unwrap();
    let ca = file(&pki.ca);
    let out = ctl(&sw, &topo, &["--switch-tls-ca", &ca, "info"]).unwrap();
    assert!(out.starts_with("target        bmv2\n"), "{out}");
    let err = ctl(&sw, &topo, &["info"]).unwrap_err();
    assert!(err.contains("give its CA: --switch-tls-ca"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
