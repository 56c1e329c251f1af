//! The bmv2 target against the real switch: `simple_switch_grpc` (bmv2's
//! P4Runtime server) running p4/v1model as `p4c-bm2-ss` compiles it.
//!
//! Each test starts a simple_switch_grpc of its own (no ports, P4Runtime and
//! Thrift on free local ports) and pushes the program compiled once per run
//! into `CARGO_TARGET_TMPDIR`. Where p4c-bm2-ss or simple_switch_grpc is not
//! on PATH every test prints "skipped: ..." and passes, so CI, which cannot
//! build them, stays green; docs/GUIDE.md ("The bmv2 target") says how to put them on PATH.
//!
//! Packets through the switch (aggregation, counters that move, trees and
//! detours on the wire) are tests/bmv2/run.sh's: they need veth pairs and
//! root. tests/bmv2_target.rs keeps a recording stand-in for what the real
//! switch cannot be made to do: fail one write in the middle of an install,
//! hold a half-installed job, or show the order and bytes of each request.

#![cfg(feature = "bmv2")]

use std::collections::BTreeMap;
use std::path::Path;

use inagg_switch_api::detour::RelaySpec;
use inagg_switch_api::GroupSpec;
use inagg_switch_control::bmv2::p4info;
use inagg_switch_control::bmv2::proto::p4::config::v1 as cfg;
use inagg_switch_control::bmv2::target::PipelineAction;
use inagg_switch_control::bmv2::testing::{job as spec, program, v1model_p4info, SimpleSwitch};
use inagg_switch_control::bmv2::{Bmv2Options, Bmv2Target};
use inagg_switch_control::target::install_job;
use inagg_switch_control::{ControlError, JobSpec, Target};
use inagg_testbed::pki::Pki;

/// Returns the program, or prints why the test skips.
macro_rules! program_or_skip {
    () => {
        match program(&Path::new(env!("CARGO_TARGET_TMPDIR")).join("bmv2-switch")) {
            Ok(p) => p,
            Err(why) => {
                inagg_testbed::skip::skip("bmv2", &why);
                return;
            }
        }
    };
}

/// What of a P4Info the control plane depends on, by name: every table's
/// match fields (name, width, kind), actions and size; the parameters of
/// every action a table can run (p4c also lists actions only the program
/// calls); every counter's and register's size. Ids are left
/// out: p4c hashes names into them, the stand-in numbers them.
fn shape(info: &cfg::P4Info) -> BTreeMap<String, String> {
    let name = |p: &Option<cfg::Preamble>| p.as_ref().unwrap().name.clone();
    let by_id: BTreeMap<u32, String> = info
        .actions
        .iter()
        .map(|a| (a.preamble.as_ref().unwrap().id, name(&a.preamble)))
        .collect();
    let mut out = BTreeMap::new();
    for t in &info.tables {
        let fields: Vec<String> = t
            .match_fields
            .iter()
            .map(|f| format!("{}:{}:{:?}", f.name, f.bitwidth, f.r#match))
            .collect();
        let mut actions: Vec<&str> = t
            .action_refs
            .iter()
            .map(|a| by_id.get(&a.id).map_or("?", String::as_str))
            .collect();
        actions.sort();
        out.insert(
            format!("table {}", name(&t.preamble)),
            format!("{fields:?} {actions:?} size {}", t.size),
        );
    }
    let used: std::collections::BTreeSet<u32> = info
        .tables
        .iter()
        .flat_map(|t| t.action_refs.iter().map(|a| a.id))
        .collect();
    for a in info
        .actions
        .iter()
        .filter(|a| used.contains(&a.preamble.as_ref().unwrap().id))
    {
        let params: Vec<String> = a
            .params
            .iter()
            .map(|p| format!("{}:{}", p.name, p.bitwidth))
            .collect();
        out.insert(
            format!("action {}", name(&a.preamble)),
            format!("{params:?}"),
        );
    }
    for c in &info.counters {
        let unit = c.spec.as_ref().map_or(0, |s| s.unit);
        out.insert(
            format!("counter {}", name(&c.preamble)),
            format!("size {} unit {unit}", c.size),
        );
    }
    for r in &info.registers {
        out.insert(
            format!("register {}", name(&r.preamble)),
            format!("size {}", r.size),
        );
    }
    out
}

/// The P4Info the stand-in serves (tests/bmv2_target.rs) is the one p4c
/// makes of p4/v1model, in everything the control plane looks at.
#[test]
fn the_stand_ins_p4info_is_the_one_p4c_makes() {
    let program = program_or_skip!();
    let real = shape(&p4info::load(&program.p4info).unwrap());
    let stand_in = shape(&v1model_p4info(64, 8192));
    let differences: Vec<String> = real
        .keys()
        .chain(stand_in.keys())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .filter(|k| real.get(*k) != stand_in.get(*k))
        .map(|k| {
            format!(
                "{k}\n  p4c:      {:?}\n  stand-in: {:?}",
                real.get(k),
                stand_in.get(k)
            )
        })
        .collect();
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[test]
fn pipeline_push_arbitration_and_observers() {
    let program = program_or_skip!();
    let sw = SimpleSwitch::start();

    // An empty switch: an observer cannot push, and says why.
    let msg = Bmv2Target::connect(Bmv2Options {
        election_id: None,
        ..sw.options(program)
    })
    .unwrap_err()
    .to_string();
    assert!(
        msg.starts_with("SetForwardingPipelineConfig on the P4Runtime server at")
            && msg.contains("only reads"),
        "{msg}"
    );

    let primary = sw.connect(program);
    assert_eq!(primary.pipeline_action(), PipelineAction::Pushed);

    // The same election id again: refused while the first is connected.
    let msg = Bmv2Target::connect(sw.options(program))
        .unwrap_err()
        .to_string();
    assert!(
        msg.starts_with("not the primary controller of device 0: another client is connected with the same election id")
            && msg.contains("--election-id"),
        "{msg}"
    );

    // An observer reads beside the primary and may not write.
    let mut observer = Bmv2Target::connect(Bmv2Options {
        election_id: None,
        p4info: None,
        bmv2_json: None,
        ..sw.options(program)
    })
    .unwrap();
    assert_eq!(observer.pipeline_action(), PipelineAction::Untouched);
    assert_eq!(observer.info().unwrap().slots, 8192);
    assert!(observer.jobs().unwrap().is_empty());
    let err = observer
        .create_job(&spec(1, &["10.0.0.1:5000"], 0, 8))
        .unwrap_err();
    assert!(matches!(err, ControlError::ReadOnly { .. }), "{err}");

    // A higher election id takes the switch; the old primary's writes are
    // refused by the switch.
    let mut old = primary;
    let mut new = sw.connect_as(program, 2);
    assert_eq!(new.pipeline_action(), PipelineAction::AlreadyInstalled);
    let msg = old
        .create_job(&spec(1, &["10.0.0.1:5000"], 0, 8))
        .unwrap_err()
        .to_string();
    assert!(msg.contains("PERMISSION_DENIED"), "{msg}");
    new.create_job(&spec(1, &["10.0.0.1:5000"], 0, 8)).unwrap();
    assert_eq!(observer.jobs().unwrap().len(), 1);

    // Another device id, pushing and not.
    let msg = Bmv2Target::connect(Bmv2Options {
        device_id: 3,
        election_id: Some(3),
        ..sw.options(program)
    })
    .unwrap_err()
    .to_string();
    assert_eq!(
        msg,
        "P4Runtime SetForwardingPipelineConfig failed: UNKNOWN: Error when trying to assign \
         device 3 (is that simple_switch_grpc's --device-id?)"
    );
    // (Another election id: the server may not have seen the last
    // connection's stream close yet.)
    let msg = Bmv2Target::connect(Bmv2Options {
        device_id: 3,
        election_id: Some(4),
        p4info: None,
        bmv2_json: None,
        ..sw.options(program)
    })
    .unwrap_err()
    .to_string();
    assert!(
        msg.starts_with("no pipeline on device 3 (is that simple_switch_grpc's --device-id?)"),
        "{msg}"
    );
}

#[test]
fn jobs_install_read_back_and_delete() {
    let program = program_or_skip!();
    let sw = SimpleSwitch::start();
    let mut t = sw.connect(program);

    let a = spec(
        1,
        &["10.0.0.1:5000", "10.0.0.2:5000", "10.0.0.3:5000"],
        0,
        64,
    );
    let mut b = spec(2, &["10.0.0.1:6000", "10.0.0.2:6000"], 64, 128);
    b.generation = 7;
    install_job(&mut t, &a).unwrap();
    install_job(&mut t, &b).unwrap();

    // Another connection reads them back from the switch.
    drop(t);
    let mut t = sw.connect_as(program, 5);
    assert_eq!(t.pipeline_action(), PipelineAction::AlreadyInstalled);
    let jobs = t.jobs().unwrap();
    let specs: Vec<&JobSpec> = jobs.iter().map(|j| &j.spec).collect();
    assert_eq!(specs, [&a, &b]);
    assert_eq!(t.info().unwrap().jobs, 2);
    let pools = t.pools().unwrap();
    let text = serde_json::to_string(&pools).unwrap();
    assert!(text.contains("192"), "{text}");

    // Refused before anything is written: an overlapping pool, a worker
    // the topology does not know, a pool past the switch's slots.
    let overlap = spec(3, &["10.0.0.3:7000"], 100, 8);
    let msg = t.create_job(&overlap).unwrap_err().to_string();
    assert!(msg.contains("overlaps"), "{msg}");
    let stranger = spec(3, &["10.0.5.5:7000"], 200, 8);
    let msg = t.create_job(&stranger).unwrap_err().to_string();
    assert!(
        msg.contains("no entry for") && msg.contains("10.0.5.5"),
        "{msg}"
    );
    let past = spec(3, &["10.0.0.3:7000"], 8190, 8);
    assert!(t.create_job(&past).is_err());
    assert_eq!(t.jobs().unwrap().len(), 2);

    // Deleted, a job leaves nothing: re-created on the same slots, it reads
    // back the same, with zero counters.
    t.delete_job(1).unwrap();
    assert_eq!(t.jobs().unwrap().len(), 1);
    install_job(&mut t, &a).unwrap();
    let again = t.job(1).unwrap();
    assert_eq!(again.spec, a);
    assert_eq!(again.counters.contributions, 0);
    t.delete_job(1).unwrap();
    t.delete_job(2).unwrap();
    assert!(t.jobs().unwrap().is_empty());
    let msg = t.delete_job(2).unwrap_err().to_string();
    assert!(msg.contains("2"), "{msg}");
}

#[test]
fn groups_trees_and_relays_read_back() {
    let program = program_or_skip!();
    let sw = SimpleSwitch::start();
    let mut t = sw.connect(program);

    // A group made by hand.
    let group = GroupSpec {
        id: 700,
        members: vec![
            "10.0.0.1:9000".parse().unwrap(),
            "10.0.0.2:9000".parse().unwrap(),
        ],
    };
    t.create_group(&group).unwrap();
    let groups = t.groups().unwrap();
    let g = groups.iter().find(|g| g.id == 700).unwrap();
    assert_eq!((g.members.clone(), g.job), (group.members.clone(), None));

    // A tree job with an auxiliary path, and a parent that takes detours.
    let mut child = JobSpec {
        upstream: Some("10.0.9.1:47000/30/1".parse().unwrap()),
        ..spec(4, &["10.0.0.1:5000", "10.0.0.2:5001"], 0, 16)
    };
    child.upstream.as_mut().unwrap().aux = Some("10.0.0.3:47000/3/2".parse().unwrap());
    install_job(&mut t, &child).unwrap();
    let parent = JobSpec {
        detours: vec!["1=10.0.0.2:47000".parse().unwrap()],
        ..spec(5, &["10.0.0.1:6000", "10.0.9.1:47000"], 32, 8)
    };
    install_job(&mut t, &parent).unwrap();
    let relay = RelaySpec {
        job: 30,
        from: "10.0.0.1:47000".parse().unwrap(),
        member: 1,
        to: "10.0.9.1:47000".parse().unwrap(),
    };
    t.create_relay(&relay).unwrap();

    let mut t = Bmv2Target::connect(Bmv2Options {
        election_id: None,
        p4info: None,
        bmv2_json: None,
        ..sw.options(program)
    })
    .unwrap();
    assert_eq!(t.job(4).unwrap().spec, child);
    assert_eq!(t.job(5).unwrap().spec, parent);
    let relays = t.relays().unwrap();
    assert_eq!(relays.len(), 1);
    assert_eq!((relays[0].spec, relays[0].packets), (relay, 0));
    // The jobs' result groups are listed with their jobs.
    let groups = t.groups().unwrap();
    assert!(groups.iter().any(|g| g.job == Some(4)), "{groups:?}");

    let mut t = sw.connect_as(program, 9);
    t.delete_relay(relay.key()).unwrap();
    t.delete_job(5).unwrap();
    t.delete_job(4).unwrap();
    t.delete_group(700).unwrap();
    assert!(t.relays().unwrap().is_empty());
    assert!(t.jobs().unwrap().is_empty());
    assert!(t.groups().unwrap().is_empty());
}

#[test]
fn counters_read_and_reset() {
    let program = program_or_skip!();
    let sw = SimpleSwitch::start();
    let mut t = sw.connect(program);
    install_job(&mut t, &spec(1, &["10.0.0.1:5000"], 0, 8)).unwrap();
    let counters = t.counters().unwrap();
    assert_eq!(counters.rx_packets, 0);
    t.reset_counters().unwrap();
    assert_eq!(t.job(1).unwrap().counters.contributions, 0);
}

#[test]
fn priority_classes_map_to_queues_and_back() {
    use inagg_switch_api::queues::ClassQueue;
    let program = program_or_skip!();
    let sw = SimpleSwitch::start();
    let mut t = sw.connect(program);
    assert!(t.queues().unwrap().map.is_empty());
    t.set_priority_queue(5, 7).unwrap();
    t.set_priority_queue(200, 2).unwrap();
    t.set_priority_queue(9, 0).unwrap();
    let cq = |class, queue| ClassQueue { class, queue };
    assert_eq!(t.queues().unwrap().map, [cq(5, 7), cq(200, 2)]);
    // Changed, then moved back to queue 0 (the default: no entry).
    t.set_priority_queue(5, 3).unwrap();
    t.set_priority_queue(200, 0).unwrap();
    let report = t.queues().unwrap();
    assert_eq!(report.map, [cq(5, 3)]);
    assert!(report.link.is_none() && report.ports.is_empty());
    // A queue the switch's ports do not have, refused before any write.
    let msg = t.set_priority_queue(1, 8).unwrap_err().to_string();
    assert!(msg.contains("queue 8"), "{msg}");
    assert_eq!(t.queues().unwrap().map, [cq(5, 3)]);
}

/// P4Runtime over mutual TLS, on simple_switch_grpc started with its SSL
/// options: a client with the CA and a certificate of its own installs and
/// reads back a job; one in clear, one without a certificate and one
/// trusting another CA are refused.
#[test]
fn p4runtime_over_mutual_tls() {
    let program = program_or_skip!();
    let dir =
        Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("bmv2-tls-{}", std::process::id()));
    let pki = Pki::new(&dir.join("ours")).unwrap();
    let stranger = Pki::new(&dir.join("theirs")).unwrap();
    let file = |p: &Path| p.to_str().unwrap().to_string();
    let (ca, cert, key) = (file(&pki.ca), file(&pki.server_cert), file(&pki.server_key));
    let sw = SimpleSwitch::start_with(&[
        "--grpc-server-ssl",
        "--grpc-server-cacert",
        &ca,
        "--grpc-server-cert",
        &cert,
        "--grpc-server-key",
        &key,
        "--grpc-server-with-client-auth",
    ]);
    let with = |tls| Bmv2Options {
        tls,
        ..sw.options(program)
    };
    let mut t = Bmv2Target::connect(with(Some(pki.client(true)))).unwrap();
    install_job(&mut t, &spec(7, &["10.0.0.1:5000", "10.0.0.2:5000"], 0, 16)).unwrap();
    assert_eq!(t.jobs().unwrap()[0].spec.id, 7);
    drop(t);
    for (tls, says) in [
        (None, "a server with TLS does that to a client in clear"),
        (
            Some(pki.client(false)),
            "to one without a certificate it trusts",
        ),
        (Some(stranger.client(true)), "invalid peer certificate"),
    ] {
        let msg = Bmv2Target::connect(with(tls)).unwrap_err().to_string();
        assert!(
            msg.contains(&format!("P4Runtime server at {}", sw.addr)) && msg.contains(says),
            "{msg}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
