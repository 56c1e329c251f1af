//! The controller end to end: emulators as the switch and as a host
//! fallback, the controller in this process, workers that register by rank
//! and run real all-reduces over UDP on loopback, with loss.
//!
//! ```text
//!   workers --register--> controller --installs--> switch emu (64 slots)
//!      |                                  \------> fallback emu
//!      +--------- contributions / results ---------^ (whichever admits them)
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use inagg_controller::{Connector, Controller, ControllerConfig};
use inagg_controller_api::Client;
use inagg_controller_api::{
    Admission, Caller, JobDecl, JobStatus, Placement, SiteStatus, TenantDecl,
};
use inagg_emu::{EmulatorConfig, FaultConfig, SwitchConfig};
use inagg_host_agent::{AgentConfig, Worker};
use inagg_switch_api::queues::ClassQueue;
use inagg_switch_control::target::Target;
use inagg_switch_control::EmuTarget;
use inagg_testbed::flood::Flood;
use inagg_testbed::local::LocalCluster;
use inagg_testbed::verify::check_i32;

fn emulator(slots: u32, loss: f64, seed: u64) -> LocalCluster {
    LocalCluster::start_with(
        FaultConfig {
            drop_ingress: loss,
            drop_egress: loss,
            seed,
            ..FaultConfig::default()
        },
        SwitchConfig {
            slots,
            ..SwitchConfig::default()
        },
    )
    .unwrap()
}

/// How `inagg controller` reaches an emulator: claiming it with election
/// id 1.
fn connector(addr: SocketAddr) -> Connector {
    Box::new(move || Ok(Box::new(EmuTarget::connect_as(addr, 1)?) as Box<dyn Target + Send>))
}

/// A fresh state file for one test, removed when the test ends (after its
/// controller, which the test declares later and so drops first).
fn state_file(test: &str) -> StateFile {
    let p = std::env::temp_dir().join(format!(
        "inagg-controller-{test}-{}.redb",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&p);
    StateFile(p)
}

struct StateFile(PathBuf);

impl std::ops::Deref for StateFile {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for StateFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn start(switch: SocketAddr, fallbacks: &[SocketAddr], state: &Path) -> Controller {
    Controller::start(ControllerConfig {
        tls: None,
        insecure: false,
        listen: "127.0.0.1:0".parse().unwrap(),
        token: None,
        state: state.to_path_buf(),
        switch: (switch, connector(switch)),
        switch_data: None,
        fallbacks: fallbacks.iter().map(|&a| (a, connector(a))).collect(),
        reconcile_every: Duration::from_millis(100),
    })
    .unwrap()
}

/// A controller over the emulator at `switch` that wants `token`.
fn start_with_token(switch: SocketAddr, state: &Path, token: &str) -> Controller {
    Controller::start(ControllerConfig {
        tls: None,
        insecure: false,
        listen: "127.0.0.1:0".parse().unwrap(),
        token: Some(token.into()),
        state: state.to_path_buf(),
        switch: (switch, connector(switch)),
        switch_data: None,
        fallbacks: vec![],
        reconcile_every: Duration::from_millis(100),
    })
    .unwrap()
}

fn decl(name: &str, workers: u16, slots: u32) -> JobDecl {
    JobDecl::new(name, workers, slots)
}

/// A loopback port nobody holds, for a worker to register before it binds
/// (its K and aggregator come from the admission).
fn free_port() -> SocketAddr {
    inagg_testbed::ports::udp()
}

/// The real binary, with none of the caller's controller settings.
fn inagg(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_inagg"))
        .args(args)
        .env_remove("INAGG_CONTROLLER")
        .env_remove("INAGG_TOKEN")
        .output()
        .unwrap()
}

fn inputs(workers: u16, len: usize, seed: i32) -> Vec<Vec<i32>> {
    (0..workers)
        .map(|w| {
            (0..len)
                .map(|i| (i as i32).wrapping_mul(7919) ^ (seed * 131 + i32::from(w)))
                .collect()
        })
        .collect()
}

/// Registers every rank of `job` at once, runs one int32 all-reduce on
/// each, checks the sums exactly, and returns rank 0's admission.
fn run_job(ctl: SocketAddr, job: &str, workers: u16, len: usize, seed: i32) -> Admission {
    run_job_as(ctl, None, job, workers, len, seed)
}

/// [`run_job`], registering with `token`.
fn run_job_as(
    ctl: SocketAddr,
    token: Option<&str>,
    job: &str,
    workers: u16,
    len: usize,
    seed: i32,
) -> Admission {
    let input = inputs(workers, len, seed);
    let mut data = input.clone();
    let admissions: Vec<Admission> = std::thread::scope(|s| {
        let handles: Vec<_> = data
            .iter_mut()
            .enumerate()
            .map(|(rank, d)| {
                s.spawn(move || {
                    // Bound and held from before the registration.
                    let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
                    let bind = socket.local_addr().unwrap();
                    let mut c = Client::connect(ctl, token.map(String::from)).unwrap();
                    let a = c
                        .register(job, rank as u16, bind, Duration::from_secs(30))
                        .unwrap_or_else(|e| panic!("{job} rank {rank}: {e}"));
                    let config = AgentConfig::from_admission(&a, bind);
                    let mut w = Worker::with_socket(config, socket).unwrap();
                    w.allreduce_i32(d).unwrap();
                    a
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    check_i32(&input, &data).unwrap_or_else(|e| panic!("job {job}: {e}"));
    for (rank, a) in admissions.iter().enumerate() {
        assert_eq!(a.worker, rank as u16);
        assert_eq!(
            (a.id, a.generation, a.pool_size, a.data_addr),
            (
                admissions[0].id,
                admissions[0].generation,
                admissions[0].pool_size,
                admissions[0].data_addr
            ),
            "every rank of {job} got the same job parameters"
        );
    }
    admissions[0].clone()
}

#[test]
fn three_jobs_share_the_switch_and_a_fourth_runs_on_the_fallback() {
    let switch = emulator(64, 0.01, 7);
    let fallback = emulator(256, 0.02, 8);
    let state = state_file("share");
    let ctl = start(switch.control_addr(), &[fallback.control_addr()], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let urgent = vec![ClassQueue { class: 0, queue: 7 }];
    let a = c
        .create_job(JobDecl {
            queues: urgent.clone(),
            ..decl("a", 2, 16)
        })
        .unwrap();
    let b = c.create_job(decl("b", 3, 24)).unwrap();
    // 24 slots left: c asks for 32 and gets them (a partial grant).
    let cj = c.create_job(decl("c", 4, 32)).unwrap();
    let d = c.create_job(decl("d", 2, 16)).unwrap();
    assert!(matches!(a.placement, Placement::Switch { grant } if grant.size == 16));
    assert!(matches!(b.placement, Placement::Switch { grant } if grant.size == 24));
    assert!(matches!(cj.placement, Placement::Switch { grant } if grant.size == 24));
    assert!(
        matches!(d.placement, Placement::Fallback { host, grant } if host == fallback.control_addr() && grant.size == 16),
        "{:?}",
        d.placement
    );

    let ctl_addr = ctl.addr();
    let runs: Vec<Admission> = std::thread::scope(|s| {
        let jobs = [("a", 2, 1), ("b", 3, 2), ("c", 4, 3), ("d", 2, 4)];
        let handles: Vec<_> = jobs
            .iter()
            .map(|&(name, n, seed)| s.spawn(move || run_job(ctl_addr, name, n, 30_000, seed)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(
        runs[2].pool_size, 24,
        "c runs with the slots it was granted"
    );
    assert!(runs[..3]
        .iter()
        .all(|r| !r.fallback && r.data_addr == switch.emu.data_addr()));
    assert!(runs[3].fallback && runs[3].data_addr == fallback.emu.data_addr());

    // What each aggregator holds, read from the aggregators themselves.
    let ids = |addr| {
        let mut t = EmuTarget::connect(addr).unwrap();
        let mut v: Vec<u16> = t
            .jobs()
            .unwrap()
            .iter()
            .filter(|j| j.counters.results > 0)
            .map(|j| j.spec.id)
            .collect();
        v.sort();
        v
    };
    assert_eq!(ids(switch.control_addr()), vec![a.id, b.id, cj.id]);
    // a's own priority map went to the switch with its pool.
    let mut t = EmuTarget::connect(switch.control_addr()).unwrap();
    assert_eq!(t.job(a.id).unwrap().spec.queues, urgent);
    assert!(t.job(b.id).unwrap().spec.queues.is_empty());
    assert_eq!(ids(fallback.control_addr()), vec![d.id]);
    // Loss really happened on both.
    for e in [&switch, &fallback] {
        let counters = EmuTarget::connect(e.control_addr())
            .unwrap()
            .counters()
            .unwrap();
        assert!(counters.dropped(inagg_emu::DropReason::InjectedIngress) > 0);
    }
    // The controller's view of the same counters, with its names.
    let stats = c.stats().unwrap();
    let named = |i: usize| {
        let mut v: Vec<String> = stats[i]
            .jobs
            .iter()
            .filter(|j| j.counters.results > 0)
            .filter_map(|j| j.name.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(named(0), ["a", "b", "c"]);
    assert_eq!(named(1), ["d"]);
    // The same for Prometheus (`inagg controller --metrics ADDR`).
    let text = inagg_controller::metrics::controller(&ctl.stats_source()());
    let site = format!("role=\"fallback\",site=\"{}\"", fallback.control_addr());
    assert!(
        text.contains(&format!("inagg_site_up{{{site}}} 1\n")),
        "{text}"
    );
    let d_results = format!(
        "inagg_job_results_total{{{site},job=\"{}\",name=\"d\"}}",
        d.id
    );
    assert!(text.contains(&d_results), "{text}");
    let sw = stats[0].counters.as_ref().unwrap();
    assert!(sw.dropped(inagg_emu::DropReason::InjectedEgress) > 0);
}

/// An emulator whose value memory, not its slots, runs out: a job is
/// granted the slots the memory left has room for at its K, the next one
/// goes to the fallback, and the partial grant runs.
#[test]
fn the_switchs_memory_budget_shrinks_grants_like_its_slots() {
    // 24 slots' worth at K = 64 (512 bytes a slot), in 64 slots.
    let switch = LocalCluster::start_with(
        FaultConfig::default(),
        SwitchConfig {
            slots: 64,
            memory: 24 * 512,
            ..SwitchConfig::default()
        },
    )
    .unwrap();
    let fallback = emulator(256, 0.0, 9);
    let state = state_file("memory");
    let ctl = start(switch.control_addr(), &[fallback.control_addr()], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let a = c.create_job(decl("a", 2, 16)).unwrap();
    let b = c.create_job(decl("b", 2, 16)).unwrap();
    let d = c.create_job(decl("d", 2, 16)).unwrap();
    assert!(matches!(a.placement, Placement::Switch { grant } if grant.size == 16));
    assert!(
        matches!(b.placement, Placement::Switch { grant } if grant.size == 8),
        "{:?}",
        b.placement
    );
    assert!(
        matches!(d.placement, Placement::Fallback { host, .. } if host == fallback.control_addr()),
        "{:?}",
        d.placement
    );
    let run = run_job(ctl.addr(), "b", 2, 20_000, 5);
    assert_eq!(run.pool_size, 8);
    assert!(!run.fallback);
    // `ctl sites` shows the budget and what the two pools take of it.
    let out = inagg(&["ctl", "--controller", &ctl.addr().to_string(), "sites"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("12.0 KiB of 12.0 KiB of value memory taken by its pools"),
        "{text}"
    );
    let sites = c.sites().unwrap();
    assert_eq!(sites[0].memory, Some((24 * 512, 24 * 512)));
}

#[test]
fn freeing_a_job_lets_a_waiting_job_onto_the_switch() {
    let switch = emulator(32, 0.0, 1);
    let state = state_file("wait");
    let ctl = start(switch.control_addr(), &[], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    c.create_job(decl("big", 1, 32)).unwrap();
    let mut waiting = decl("late", 2, 8);
    waiting.fallback = false;
    assert_eq!(c.create_job(waiting).unwrap().placement, Placement::Waiting);

    // Its workers register and wait: no slot is free.
    let (tx, rx) = mpsc::channel();
    let ctl_addr = ctl.addr();
    let late = std::thread::spawn(move || {
        let a = run_job(ctl_addr, "late", 2, 20_000, 9);
        tx.send(()).unwrap();
        a
    });
    // A registration that is refused would come back at once; a waiting
    // one does not.
    assert!(rx.recv_timeout(Duration::from_millis(500)).is_err());
    let st = c.jobs().unwrap();
    let late_status = st.iter().find(|j| j.decl.name == "late").unwrap();
    assert_eq!(late_status.placement, Placement::Waiting);

    c.delete_job("big").unwrap();
    rx.recv_timeout(Duration::from_secs(30))
        .expect("the waiting job runs once slots are free");
    let a = late.join().unwrap();
    assert!(!a.fallback);
    assert_eq!(a.pool_size, 8);
}

/// An emulator that takes K up to `max_elements`, as a P4 switch takes
/// the K it was compiled for, at the given addresses (ephemeral if none).
fn narrow_emulator(max_elements: u16, at: Option<(SocketAddr, SocketAddr)>) -> LocalCluster {
    let ephemeral = EmulatorConfig::ephemeral();
    let (data_addr, control_addr) = at.unwrap_or((ephemeral.data_addr, ephemeral.control_addr));
    LocalCluster::start_config(EmulatorConfig {
        data_addr,
        control_addr,
        switch: SwitchConfig {
            slots: 64,
            max_elements,
            ..SwitchConfig::default()
        },
        ..ephemeral
    })
    .unwrap()
}

#[test]
fn a_job_goes_only_where_its_k_is_taken_and_a_refused_install_is_reported() {
    let switch = narrow_emulator(64, None);
    let (data, control) = (switch.emu.data_addr(), switch.control_addr());
    let fallback = emulator(64, 0.01, 3);
    let state = state_file("k");
    let ctl = start(control, &[fallback.control_addr()], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let sites = c.sites().unwrap();
    assert_eq!(sites[0].elements.as_deref(), Some("K up to 64"));

    // K = 1024 is more than the switch takes: the job goes to the fallback
    // and sums there.
    let wide = |name: &str, fallback: bool| JobDecl {
        elements: 1024,
        fallback,
        ..decl(name, 2, 8)
    };
    let w = c.create_job(wide("wide", true)).unwrap();
    assert!(
        matches!(w.placement, Placement::Fallback { host, .. } if host == fallback.control_addr()),
        "{:?}",
        w.placement
    );
    let a = run_job(ctl.addr(), "wide", 2, 20_000, 5);
    assert!(a.fallback && a.elements == 1024 && a.data_addr == fallback.emu.data_addr());
    // Without a fallback nothing takes it, which is said at once.
    let err = c.create_job(wide("stuck", false)).unwrap_err().to_string();
    assert!(
        err.contains("K = 1024 elements per packet is not one any aggregator it may run on takes")
            && err.contains(&format!("the switch at {control}: K up to 64")),
        "{err}"
    );
    // More than a packet holds is refused whatever the aggregators.
    let err = c
        .create_job(JobDecl {
            elements: 20_000,
            ..decl("huge", 2, 8)
        })
        .unwrap_err()
        .to_string();
    assert!(err.contains("a packet holds 1 to 16370"), "{err}");

    // Jobs the switch took, and then did not: it comes back compiled for
    // K = 32. A job that accepts a fallback is placed there and runs; one
    // that does not is told so at once when a worker registers.
    let moved = c.create_job(decl("moved", 2, 8)).unwrap();
    let pinned = c
        .create_job(JobDecl {
            fallback: false,
            ..decl("pinned", 2, 8)
        })
        .unwrap();
    for j in [&moved, &pinned] {
        assert!(matches!(j.placement, Placement::Switch { .. }), "{j:?}");
    }
    run_job(ctl.addr(), "moved", 2, 5_000, 6);
    switch.emu.stop();
    let _again = narrow_emulator(32, Some((data, control)));
    let placed = (0..200).find_map(|_| {
        let sites = c.sites().unwrap();
        let job = c
            .jobs()
            .unwrap()
            .into_iter()
            .find(|j| j.decl.name == "moved")?;
        if sites[0].elements.as_deref() == Some("K up to 32") && job.placement.grant().is_some() {
            return Some(job.placement);
        }
        std::thread::sleep(Duration::from_millis(50));
        None
    });
    assert!(
        matches!(placed, Some(Placement::Fallback { host, .. }) if host == fallback.control_addr()),
        "{placed:?}"
    );
    let a = run_job(ctl.addr(), "moved", 2, 5_000, 7);
    assert!(a.fallback && a.data_addr == fallback.emu.data_addr());
    let err = Client::connect(ctl.addr(), None)
        .unwrap()
        .register("pinned", 0, free_port(), Duration::from_secs(30))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        format!(
            "job \"pinned\" cannot be placed: K = 64 elements per packet is not one any \
             aggregator it may run on takes (the switch at {control}: K up to 32)"
        )
    );
    let addr = ctl.addr().to_string();
    let out = inagg(&["ctl", "--controller", &addr, "sites"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("K up to 32 elements per packet"),
        "{text}"
    );
    // The two control endpoints mixed up: each error says which is which.
    let out = inagg(&["ctl", "--addr", &addr, "job", "list"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("is an inagg controller, not an emulator's"),
        "{err}"
    );
    let out = inagg(&["ctl", "--controller", &control.to_string(), "sites"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("is an emulator's control port, not an inagg"),
        "{err}"
    );
}

/// Polls the controller until `done` holds for its sites and jobs (it
/// reconciles every 100 ms), or panics saying what it waited for.
fn until(c: &mut Client, what: &str, done: impl Fn(&[SiteStatus], &[JobStatus]) -> bool) {
    for _ in 0..200 {
        if done(&c.sites().unwrap(), &c.jobs().unwrap()) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the controller never got to: {what}");
}

/// A registration's error, with a short wait.
fn refused_registration(ctl: SocketAddr, job: &str) -> String {
    Client::connect(ctl, None)
        .unwrap()
        .register(job, 0, free_port(), Duration::from_secs(1))
        .unwrap_err()
        .to_string()
}

#[test]
fn jobs_leave_a_fallback_that_is_down_and_no_worker_is_admitted_to_a_down_aggregator() {
    let switch = emulator(8, 0.0, 1);
    let (f1, f2) = (emulator(64, 0.01, 2), emulator(64, 0.01, 3));
    let (f1_at, f2_at) = (f1.control_addr(), f2.control_addr());
    let state = state_file("down");
    let ctl = start(switch.control_addr(), &[f1_at, f2_at], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    c.create_job(decl("full", 1, 8)).unwrap();
    run_job(ctl.addr(), "full", 1, 1_000, 1);
    let on =
        |host| move |p: Placement| matches!(p, Placement::Fallback { host: h, .. } if h == host);
    // The first fallback takes c once the controller has reached it (on a
    // loaded machine its first contact can come after the switch's).
    until(&mut c, "every site reached", |sites, _| {
        sites.iter().all(|s| s.up)
    });
    assert!(on(f1_at)(c.create_job(decl("c", 2, 4)).unwrap().placement));

    // The first fallback goes down before c's workers register: c goes to
    // the second, and runs there under loss.
    f1.emu.stop();
    until(&mut c, "c on the second fallback", |_, jobs| {
        jobs.iter()
            .any(|j| j.decl.name == "c" && on(f2_at)(j.placement))
    });
    let a = run_job(ctl.addr(), "c", 2, 20_000, 2);
    assert!(a.fallback && a.data_addr == f2.emu.data_addr());

    // Both fallbacks down and the switch full: a new job waits, and its
    // worker is told why when its wait runs out.
    f2.emu.stop();
    until(&mut c, "both fallbacks down", |sites, _| {
        sites[1..].iter().all(|s| !s.up)
    });
    assert_eq!(
        c.create_job(decl("d", 1, 4)).unwrap().placement,
        Placement::Waiting
    );
    let err = refused_registration(ctl.addr(), "d");
    assert!(
        err.starts_with(
            "job \"d\" not ready after 1.0 s: no aggregator has a free slot (delete a job, or \
             add a --fallback emulator); the fallback at "
        ) && err.contains(&format!("the fallback at {f1_at} is down: "))
            && err.contains(&format!("the fallback at {f2_at} is down: ")),
        "{err}"
    );

    // The switch goes down too. A new session of "full" (its one rank
    // registering again) is complete at once, but nothing holds it: the
    // worker is not admitted, and is told where the job waits.
    let switch_at = switch.control_addr();
    switch.emu.stop();
    until(&mut c, "the switch down", |sites, _| !sites[0].up);
    let err = refused_registration(ctl.addr(), "full");
    assert!(
        err.starts_with(&format!(
            "job \"full\" not ready after 1.0 s: the switch at {switch_at}, where it is placed, \
             is down ("
        )) && err.ends_with("); it is installed when that is back"),
        "{err}"
    );
    let full = c
        .jobs()
        .unwrap()
        .into_iter()
        .find(|j| j.decl.name == "full")
        .unwrap();
    // Its worker gave up: it left the session.
    assert!(!full.installed && full.registered == 0, "{full:?}");
    let down = full.down.as_deref().unwrap_or_default();
    assert!(
        down.starts_with(&format!("the switch at {switch_at}: ")),
        "{full:?}"
    );
    let out = inagg(&[
        "ctl",
        "--controller",
        &ctl.addr().to_string(),
        "job",
        "list",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let row = text
        .lines()
        .find(|l| l.starts_with("full "))
        .unwrap_or_default();
    assert!(row.contains("AGG DOWN"), "{text}");
    // The reason is what the controller's last attempt to reach the switch
    // said, which a later attempt can replace between two reads: the CLI
    // names the switch and gives a reason.
    let said = format!(
        "job \"full\" waits for its aggregator, which is down: the switch at {switch_at}: "
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with(&said) && l.len() > said.len()),
        "{text}"
    );
}

#[test]
fn a_job_on_a_fallback_the_restarted_controller_is_not_given_is_placed_again() {
    let switch = emulator(8, 0.0, 1);
    let fallback = emulator(64, 0.0, 2);
    let state = state_file("gone");
    let ctl = start(switch.control_addr(), &[fallback.control_addr()], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    c.create_job(decl("full", 1, 8)).unwrap();
    let on_fallback = c.create_job(decl("c", 2, 4)).unwrap();
    assert!(matches!(on_fallback.placement, Placement::Fallback { .. }));

    // Restarted without --fallback: c waits for room on the switch rather
    // than for an aggregator this controller will never reach, and runs
    // there once the switch has room.
    drop(ctl);
    let ctl = start(switch.control_addr(), &[], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let placed = |c: &mut Client| {
        c.jobs()
            .unwrap()
            .into_iter()
            .find(|j| j.decl.name == "c")
            .unwrap()
            .placement
    };
    assert_eq!(placed(&mut c), Placement::Waiting);
    c.delete_job("full").unwrap();
    assert!(matches!(placed(&mut c), Placement::Switch { .. }));
    let a = run_job(ctl.addr(), "c", 2, 10_000, 3);
    assert!(!a.fallback && a.data_addr == switch.emu.data_addr());
}

#[test]
fn a_controller_that_cannot_start_leaves_the_switch_alone() {
    let switch = emulator(16, 0.0, 1);
    let state = state_file("first");
    let ctl = start(switch.control_addr(), &[], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let job = c.create_job(decl("j", 1, 8)).unwrap();
    run_job(ctl.addr(), "j", 1, 1_000, 1);
    let held = || {
        let jobs = EmuTarget::connect(switch.control_addr())
            .unwrap()
            .jobs()
            .unwrap();
        jobs.iter().map(|j| j.spec.id).collect::<Vec<_>>()
    };
    assert_eq!(held(), [job.id]);

    // A second controller on the same API address, with its own (empty)
    // state: refused before it reconciles, which would have removed the
    // first one's job from the switch.
    let other = state_file("second");
    let config = |fallbacks: Vec<SocketAddr>, listen: SocketAddr| ControllerConfig {
        tls: None,
        insecure: false,
        listen,
        token: None,
        state: other.to_path_buf(),
        switch: (switch.control_addr(), connector(switch.control_addr())),
        switch_data: None,
        fallbacks: fallbacks.into_iter().map(|a| (a, connector(a))).collect(),
        reconcile_every: Duration::from_millis(100),
    };
    let err = Controller::start(config(vec![], ctl.addr()))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.starts_with(&format!("cannot listen on {}", ctl.addr())),
        "{err}"
    );
    assert_eq!(held(), [job.id]);

    // One aggregator given twice would have two sites removing each
    // other's jobs from it.
    let any = "127.0.0.1:0".parse().unwrap();
    let fallback = free_port();
    for fallbacks in [vec![switch.control_addr()], vec![fallback, fallback]] {
        let err = Controller::start(config(fallbacks.clone(), any))
            .err()
            .unwrap()
            .to_string();
        assert_eq!(
            err,
            format!(
                "the aggregator at {} is given twice (as the switch and a fallback, or as two \
                 fallbacks): each must be its own",
                fallbacks[0]
            )
        );
    }
    assert_eq!(held(), [job.id]);

    // A second controller on another address, with its own (empty) state:
    // it starts, but the switch refuses its claim (the first holds election
    // id 1), so it never removes the first one's job; it shows the switch
    // down, saying why.
    let second = Controller::start(config(vec![], any)).unwrap();
    let mut c2 = Client::connect(second.addr(), None).unwrap();
    until(&mut c2, "the second controller refused", |sites, _| {
        sites[0].error.as_deref().is_some_and(|e| {
            e.starts_with(
                "another controller manages this switch: the one connected from 127.0.0.1:",
            ) && e.ends_with(
                ", with election id 1 (this connection claimed 1); change the switch \
                     through it (ctl --controller), stop it, or claim with a higher --election-id",
            )
        })
    });
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(held(), [job.id]);
    // `inagg ctl` straight to the switch reads it, but may not change it
    // unless it claims a higher election id.
    let at = switch.control_addr().to_string();
    let id = job.id.to_string();
    let out = inagg(&["ctl", "--addr", &at, "job", "list"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = inagg(&["ctl", "--addr", &at, "job", "delete", &id]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("another controller manages this switch"),
        "{err}"
    );
    assert_eq!(held(), [job.id]);
    let out = inagg(&[
        "ctl",
        "--addr",
        &at,
        "--election-id",
        "1",
        "job",
        "delete",
        &id,
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("(this connection claimed 1)"), "{err}");

    // The first stops: the second claims the switch and brings it in step
    // with its own state (no jobs).
    drop(ctl);
    until(&mut c2, "the second controller in charge", |sites, _| {
        sites[0].up
    });
    for _ in 0..100 {
        if held().is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(held().is_empty());
    drop(second);
}

#[test]
fn jobs_are_reinstalled_after_the_switch_and_the_controller_restart() {
    let first = emulator(64, 0.0, 1);
    let (data, control) = (first.emu.data_addr(), first.control_addr());
    let state = state_file("restart");
    let ctl = start(control, &[], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let job = c.create_job(decl("j", 2, 16)).unwrap();
    let before = run_job(ctl.addr(), "j", 2, 10_000, 1);

    // The switch restarts empty, at the same addresses.
    first.emu.stop();
    let _second = LocalCluster::start_config(EmulatorConfig {
        data_addr: data,
        control_addr: control,
        switch: SwitchConfig {
            slots: 64,
            ..SwitchConfig::default()
        },
        ..EmulatorConfig::ephemeral()
    })
    .unwrap();
    let installed = |want: u16| {
        // The controller checks every 100 ms; give it a few rounds.
        for _ in 0..100 {
            if let Ok(jobs) = EmuTarget::connect(control).and_then(|mut t| t.jobs()) {
                if jobs.iter().any(|j| j.spec.id == want) {
                    return true;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    };
    assert!(installed(job.id), "re-installed on the restarted switch");

    // The controller restarts: the job, its pool and its session are read
    // back from the database and put on the switch again.
    drop(ctl);
    // As an operator would while a controller may hold the switch: with a
    // higher election id.
    EmuTarget::connect_as(control, 2)
        .unwrap()
        .delete_job(job.id)
        .unwrap();
    let ctl = start(control, &[], &state);
    assert!(
        installed(job.id),
        "re-installed by the restarted controller"
    );
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let jobs = c.jobs().unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].placement, job.placement);
    assert_eq!(jobs[0].generation, before.generation);
    // A new session of the job gets a newer generation, and works.
    let after = run_job(ctl.addr(), "j", 2, 10_000, 2);
    assert_ne!(after.generation, before.generation);
}

#[test]
fn the_api_wants_its_token_and_stays_on_loopback_without_one() {
    let switch = emulator(16, 0.0, 1);
    let state = state_file("token");
    let remote = Controller::start(ControllerConfig {
        tls: None,
        insecure: false,
        listen: "0.0.0.0:0".parse().unwrap(),
        token: None,
        state: state.to_path_buf(),
        switch: (switch.control_addr(), connector(switch.control_addr())),
        switch_data: None,
        fallbacks: vec![],
        reconcile_every: Duration::from_millis(100),
    });
    let err = remote.err().expect("refused").to_string();
    assert!(err.contains("without a token"), "{err}");

    let ctl = Controller::start(ControllerConfig {
        tls: None,
        insecure: false,
        listen: "127.0.0.1:0".parse().unwrap(),
        token: Some("s3cret".into()),
        state: state.to_path_buf(),
        switch: (switch.control_addr(), connector(switch.control_addr())),
        switch_data: None,
        fallbacks: vec![],
        reconcile_every: Duration::from_millis(100),
    })
    .unwrap();
    let err = Client::connect(ctl.addr(), None)
        .unwrap()
        .jobs()
        .unwrap_err();
    assert!(err.to_string().contains("token"), "{err}");
    let err = Client::connect(ctl.addr(), Some("guess".into()))
        .unwrap()
        .jobs()
        .unwrap_err();
    assert!(err.to_string().contains("token"), "{err}");
    assert!(Client::connect(ctl.addr(), Some("s3cret".into()))
        .unwrap()
        .jobs()
        .unwrap()
        .is_empty());

    // A wrong token costs its connection: the reply, then the close.
    let mut guesser = std::net::TcpStream::connect(ctl.addr()).unwrap();
    guesser
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let guess = b"{\"token\":\"guess\",\"request\":{\"op\":\"jobs\"}}\n";
    std::io::Write::write_all(&mut guesser, guess).unwrap();
    let mut replies = String::new();
    std::io::Read::read_to_string(&mut guesser, &mut replies).unwrap();
    assert!(replies.contains("wrong or missing API token"), "{replies}");
    assert_eq!(
        replies.lines().count(),
        1,
        "closed after one guess: {replies}"
    );
    // Strangers (silent, or tokenless requests) cannot lock the token's
    // holders out: 100 of them, then a client with the token is served.
    let strangers: Vec<_> = (0..100)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(ctl.addr()).unwrap();
            if i % 2 == 0 {
                let _ = std::io::Write::write_all(&mut s, b"{\"request\":{\"op\":\"jobs\"}}\n");
            }
            s
        })
        .collect();
    assert!(Client::connect(ctl.addr(), Some("s3cret".into()))
        .unwrap()
        .jobs()
        .unwrap()
        .is_empty());
    drop(strangers);

    // Bad requests are refused with the reason, not dropped.
    let mut c = Client::connect(ctl.addr(), Some("s3cret".into())).unwrap();
    let e = c
        .create_job(decl("bad name", 2, 8))
        .unwrap_err()
        .to_string();
    assert!(e.contains("'.', '-' and '_'"), "{e}");
    for hostile in [
        "\u{1b}[2J\u{1b}[31m",
        "a\u{202e}b",
        "zero\u{200b}width",
        "bell\u{7}",
    ] {
        let e = c.create_job(decl(hostile, 2, 8)).unwrap_err().to_string();
        assert!(e.contains("'.', '-' and '_'"), "{hostile:?}: {e}");
    }
    // From the CLI: refused, and the name quoted in the error is shown,
    // not obeyed.
    let addr = ctl.addr().to_string();
    let out = inagg(&[
        "ctl",
        "--controller",
        &addr,
        "--token",
        "s3cret",
        "job",
        "create",
        "--name",
        "\u{1b}[2J\u{1b}[31m",
        "--count",
        "2",
        "--slots",
        "8",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("'.', '-' and '_'"), "{stderr}");
    assert!(stderr.contains("\\u{1b}[2J"), "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
    let e = c.create_job(decl("x", 2, 0)).unwrap_err().to_string();
    assert!(e.contains("0 slots"), "{e}");
    let bad_map = JobDecl {
        queues: vec![ClassQueue { class: 2, queue: 8 }],
        ..decl("x", 2, 8)
    };
    let e = c.create_job(bad_map).unwrap_err().to_string();
    assert!(e.contains("queue 8 does not exist"), "{e}");
    c.create_job(decl("x", 2, 8)).unwrap();
    // Rank `rank` of x registers at 127.0.0.1:9 and is refused: why?
    let mut refused = |rank: u16, wait_ms: u64| {
        let endpoint = "127.0.0.1:9".parse().unwrap();
        c.register("x", rank, endpoint, Duration::from_millis(wait_ms))
            .unwrap_err()
            .to_string()
    };
    let e = refused(5, 10);
    assert!(
        e.ends_with("has 2 workers (ranks 0 to 1); rank 5 is not one"),
        "{e}"
    );
    let e = refused(0, 100);
    assert!(e.contains("1 of 2 workers registered"), "{e}");

    // Rank 0 registers again from elsewhere (a restarted worker) while a
    // registration of it waits: the waiting one is told at once, and the
    // new one is admitted with rank 1.
    let ctl_addr = ctl.addr();
    let register = move |rank: u16, port: u16| {
        std::thread::spawn(move || {
            Client::connect(ctl_addr, Some("s3cret".into()))
                .unwrap()
                .register(
                    "x",
                    rank,
                    SocketAddr::from(([127, 0, 0, 1], port)),
                    Duration::from_secs(30),
                )
                .map_err(|e| e.to_string())
        })
    };
    let first = register(0, 10);
    std::thread::sleep(Duration::from_millis(300));
    // While rank 0 waits, its endpoint is not another rank's.
    let e = c
        .register(
            "x",
            1,
            "127.0.0.1:10".parse().unwrap(),
            Duration::from_millis(10),
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("already rank 0's"), "{e}");
    let again = register(0, 11);
    let e = first.join().unwrap().unwrap_err();
    assert_eq!(
        e,
        "job \"x\": rank 0 registered again from 127.0.0.1:11 while this registration waited; \
         that one takes its place"
    );
    let last = register(1, 12).join().unwrap().unwrap();
    let again = again.join().unwrap().unwrap();
    assert_eq!(
        (again.worker, last.worker, again.generation),
        (0, 1, last.generation)
    );
}

/// A client of another version of the API is told so by name (the
/// versions of both), before anything of its request is read; the current
/// client is served on the same controller.
#[test]
fn a_client_of_another_api_version_is_told_which_one_to_use() {
    let cluster = emulator(64, 0.0, 1);
    let state = state_file("api-version");
    let ctl = start(cluster.control_addr(), &[], &state);
    let ask = |line: &str| {
        let mut s = std::net::TcpStream::connect(ctl.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        std::io::Write::write_all(&mut s, line.as_bytes()).unwrap();
        let mut reply = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(s), &mut reply).unwrap();
        reply
    };
    let current = inagg_controller_api::API_VERSION;
    for (line, theirs) in [
        (
            "{\"request\":{\"op\":\"jobs\"}}\n".to_string(),
            "1".to_string(),
        ),
        (
            format!(
                "{{\"version\":{},\"request\":{{\"op\":\"jobs\"}}}}\n",
                current + 1
            ),
            (current + 1).to_string(),
        ),
        (
            "{\"version\":\"two\",\"request\":{\"op\":\"jobs\"}}\n".to_string(),
            "unreadable".to_string(),
        ),
    ] {
        let reply = ask(&line);
        let want =
            format!("this controller speaks API version {current}, the request version {theirs}");
        assert!(
            reply.contains("\"error\"") && reply.contains(&want),
            "{line}: {reply}"
        );
    }
    let ok = ask(&format!(
        "{{\"version\":{current},\"request\":{{\"op\":\"jobs\"}}}}\n"
    ));
    assert!(ok.starts_with("{\"ok\""), "{ok}");
    assert!(Client::connect(ctl.addr(), None)
        .unwrap()
        .jobs()
        .unwrap()
        .is_empty());
}

/// Tenants: the operator (the controller's token) declares them with a
/// quota; each tenant's credential sees, changes and registers to its own
/// jobs only, within the quota, and nothing of the aggregators or the
/// other tenants. Credentials are stored hashed, a rotated one stops
/// working, and tenants survive a restart.
#[test]
fn tenants_see_and_change_only_their_own_jobs_within_their_quota() {
    let switch = emulator(64, 0.0, 5);
    let state = state_file("tenants");
    let with_token = |state: &Path| start_with_token(switch.control_addr(), state, "op-secret");
    let ctl = with_token(&state);
    let connect = |token: &str| Client::connect(ctl.addr(), Some(token.into())).unwrap();
    let mut op = connect("op-secret");
    assert_eq!(op.whoami().unwrap(), Caller::Operator);
    let tenant = |name: &str, slots, queues| TenantDecl {
        name: name.into(),
        slots,
        queues,
    };
    let (a_status, cred_a) = op.create_tenant(tenant("team-a", 24, 0)).unwrap();
    assert_eq!((a_status.slots_used, a_status.jobs.len()), (0, 0));
    let (_, cred_b) = op.create_tenant(tenant("team-b", 16, 1)).unwrap();
    let e = op.create_tenant(tenant("team-a", 1, 0)).unwrap_err();
    assert!(e.to_string().contains("already exists"), "{e}");
    let e = op.create_tenant(tenant("bad name", 1, 0)).unwrap_err();
    assert!(e.to_string().contains("'.', '-' and '_'"), "{e}");
    // Hashes are stored, not the credentials.
    let stored = std::fs::read(&*state).unwrap();
    for cred in [&cred_a, &cred_b] {
        let secret = cred.rsplit_once('.').unwrap().1.as_bytes();
        assert!(!stored.windows(secret.len()).any(|w| w == secret));
    }

    let mut a = connect(&cred_a);
    let mut b = connect(&cred_b);
    let a_caller = Caller::Tenant {
        name: "team-a".into(),
    };
    assert_eq!(a.whoami().unwrap(), a_caller);
    a.create_job(decl("a1", 2, 16)).unwrap();
    let e = a.create_job(decl("a2", 2, 16)).unwrap_err().to_string();
    assert!(
        e.contains("32 slots, beyond tenant \"team-a\"'s quota of 24"),
        "{e}"
    );
    let urgent = vec![ClassQueue { class: 1, queue: 7 }];
    let e = a
        .create_job(JobDecl {
            queues: urgent.clone(),
            ..decl("a3", 2, 8)
        })
        .unwrap_err()
        .to_string();
    assert!(e.contains("1 priority-map entries, beyond"), "{e}");
    b.create_job(JobDecl {
        queues: urgent,
        ..decl("b1", 2, 8)
    })
    .unwrap();
    let names = |jobs: Vec<JobStatus>| -> Vec<(String, Option<String>)> {
        jobs.into_iter().map(|j| (j.decl.name, j.tenant)).collect()
    };
    let team = |t: &str| Some(t.to_string());
    assert_eq!(names(a.jobs().unwrap()), [("a1".into(), team("team-a"))]);
    assert_eq!(names(b.jobs().unwrap()), [("b1".into(), team("team-b"))]);
    assert_eq!(
        names(op.jobs().unwrap()),
        [("a1".into(), team("team-a")), ("b1".into(), team("team-b"))]
    );

    // Another tenant's job is unknown to b: it can neither delete it nor
    // take one of its ranks.
    let e = b.delete_job("a1").unwrap_err().to_string();
    assert!(e.contains("no job \"a1\""), "{e}");
    let e = b
        .register("a1", 0, free_port(), Duration::from_secs(1))
        .unwrap_err()
        .to_string();
    assert!(e.contains("no job \"a1\""), "{e}");
    // The aggregators, the priority map's entries, groups and tenants are
    // the operator's.
    let refusals = [
        a.sites().map(drop),
        a.set_priority(1, 7),
        a.tenants().map(drop),
        a.create_tenant(tenant("team-c", 8, 0)).map(drop),
        a.delete_tenant("team-b"),
    ];
    for r in refusals {
        let e = r.unwrap_err().to_string();
        assert!(
            e.contains("is the operator's to do: this credential is tenant \"team-a\"'s"),
            "{e}"
        );
    }
    assert!(a.priority().is_ok(), "the map as it stands is readable");

    // team-a's workers register with its credential and all-reduce exactly.
    let a1 = run_job_as(ctl.addr(), Some(&cred_a), "a1", 2, 5_000, 7);
    // Prometheus labels each job with its tenant.
    let text = inagg_controller::metrics::controller(&ctl.stats_source()());
    let a1_results = format!(
        "inagg_job_results_total{{role=\"switch\",site=\"{}\",tenant=\"team-a\",job=\"{}\",name=\"a1\"}}",
        switch.control_addr(),
        a1.id
    );
    assert!(text.contains(&a1_results), "{text}");

    let tenants = op.tenants().unwrap();
    assert_eq!(
        (tenants[0].slots_used, tenants[0].jobs.clone()),
        (16, vec!["a1".to_string()])
    );
    assert_eq!(tenants[1].queues_used, 1);
    let e = op.delete_tenant("team-a").unwrap_err().to_string();
    assert!(e.contains("still has jobs (a1)"), "{e}");

    // A rotated credential stops working at once.
    let (_, cred_a2) = op.rotate_tenant("team-a").unwrap();
    let e = Client::connect(ctl.addr(), Some(cred_a.clone()))
        .unwrap()
        .jobs()
        .unwrap_err()
        .to_string();
    assert!(e.contains("token"), "{e}");
    let mut a2 = connect(&cred_a2);
    a2.delete_job("a1").unwrap();
    op.delete_tenant("team-a").unwrap();
    let e = Client::connect(ctl.addr(), Some(cred_a2))
        .unwrap()
        .jobs()
        .unwrap_err()
        .to_string();
    assert!(e.contains("token"), "{e}");

    // Tenants and their jobs survive a restart of the controller.
    drop((a, a2, b, op));
    drop(ctl);
    let ctl = with_token(&state);
    let mut b = Client::connect(ctl.addr(), Some(cred_b)).unwrap();
    assert_eq!(names(b.jobs().unwrap()), [("b1".into(), team("team-b"))]);

    // The audit survived it too: the operator reads every change asked,
    // a tenant its own, each with its outcome.
    let said = |e: &inagg_controller_api::Event| {
        let outcome = e.refused.as_deref().map_or("done", |_| "refused");
        format!("{}: {} {outcome}", e.caller, e.what)
    };
    let mine: Vec<String> = b.events(100).unwrap().iter().map(said).collect();
    assert_eq!(
        mine,
        [
            "tenant \"team-b\": create job \"b1\" (2 workers, 8 slots) done",
            "tenant \"team-b\": delete job \"a1\" refused",
            "tenant \"team-b\": register rank 0 of job \"a1\" refused",
        ]
    );
    let mut op = Client::connect(ctl.addr(), Some("op-secret".into())).unwrap();
    let all = op.events(1000).unwrap();
    let all_said: Vec<String> = all.iter().map(said).collect();
    for entry in [
        "the operator: create tenant \"team-a\" (24 slots, 0 queue entries) done",
        "tenant \"team-a\": priority class 1 -> queue 7 refused",
        "tenant \"team-a\": delete job \"a1\" done",
        "the operator: delete tenant \"team-a\" done",
    ] {
        assert!(
            all_said.iter().any(|s| s == entry),
            "{entry} in {all_said:#?}"
        );
    }
    assert!(all.windows(2).all(|w| w[0].seq + 1 == w[1].seq), "{all:#?}");
    assert_eq!(op.events(2).unwrap().len(), 2, "the last two");
}

/// `inagg ctl tenant ...` and `whoami`, the real binary: the credential is
/// printed once and works as a token; a tenant's table and refusals read
/// as the docs show them.
#[test]
fn the_cli_manages_tenants_and_a_tenant_works_with_its_credential() {
    let switch = emulator(32, 0.0, 9);
    let state = state_file("cli-tenants");
    let ctl = start_with_token(switch.control_addr(), &state, "op");
    let addr = ctl.addr().to_string();
    let ctl_as = |token: &str, args: &[&str]| {
        let base = ["ctl", "--controller", addr.as_str(), "--token", token];
        let out = inagg(&[&base[..], args].concat());
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    let (ok, text) = ctl_as("op", &["tenant", "create", "t1", "--slots", "8"]);
    assert!(ok, "{text}");
    assert!(text.contains("shown this once"), "{text}");
    let credential = text
        .lines()
        .find_map(|l| l.strip_prefix("credential: "))
        .unwrap_or_else(|| panic!("no credential in {text}"))
        .to_string();
    assert!(credential.starts_with("t1."), "{credential}");
    let (ok, text) = ctl_as(&credential, &["whoami"]);
    assert!(ok && text.contains("tenant \"t1\""), "{text}");
    let (ok, text) = ctl_as(
        &credential,
        &[
            "job", "create", "--name", "j", "--count", "2", "--slots", "8",
        ],
    );
    assert!(ok, "{text}");
    let (ok, text) = ctl_as("op", &["tenant", "list"]);
    assert!(ok && text.contains("8/8") && text.contains(" j"), "{text}");
    let (ok, text) = ctl_as("op", &["job", "list"]);
    let row = text.lines().find(|l| l.starts_with("j ")).unwrap_or("");
    assert!(ok && row.split_whitespace().nth(1) == Some("t1"), "{text}");
    let (ok, text) = ctl_as(&credential, &["tenant", "list"]);
    assert!(!ok && text.contains("is the operator's to do"), "{text}");
    let (ok, text) = ctl_as("op", &["tenant", "delete", "t1"]);
    assert!(!ok && text.contains("still has jobs (j)"), "{text}");
    let (ok, text) = ctl_as("op", &["tenant", "create", "t2"]);
    assert!(!ok && text.contains("--slots"), "{text}");
    let (ok, text) = ctl_as(&credential, &["job", "delete", "j"]);
    assert!(ok, "{text}");
    let (ok, text) = ctl_as("op", &["tenant", "delete", "t1"]);
    assert!(ok && text.contains("deleted tenant \"t1\""), "{text}");
    let (ok, text) = ctl_as(&credential, &["whoami"]);
    assert!(!ok && text.contains("token"), "{text}");
    // The audit, as a table: who asked what, and what came of it.
    let (ok, text) = ctl_as("op", &["events"]);
    assert!(ok, "{text}");
    assert!(text.starts_with("   SEQ  TIME (UTC)"), "{text}");
    for (who, what) in [
        (
            "operator",
            "create tenant \"t1\" (8 slots, 0 queue entries) -> done",
        ),
        ("t1", "create job \"j\" (2 workers, 8 slots) -> done"),
        (
            "operator",
            "delete tenant \"t1\" -> REFUSED: tenant \"t1\" still has jobs (j); delete them first",
        ),
    ] {
        assert!(
            text.lines().any(|l| l.contains(who) && l.ends_with(what)),
            "{who} {what} in {text}"
        );
    }
    let (ok, text) = ctl_as("op", &["events", "--last", "0"]);
    assert!(!ok && text.contains("--last"), "{text}");
}

/// A wrong token costs its connection, and past five of them its address
/// backs off: every connection from it is refused, the right token too,
/// with the wait said, until the back-off has passed (its doubling is
/// `inagg_netio::conns`'s, tested in virtual time there). Presenting no
/// token is not a guess.
#[test]
fn wrong_tokens_make_their_address_back_off() {
    let switch = emulator(16, 0.0, 2);
    let state = state_file("backoff");
    let ctl = start_with_token(switch.control_addr(), &state, "right");
    let jobs = |token: Option<&str>| {
        Client::connect(ctl.addr(), token.map(String::from))
            .and_then(|mut c| c.jobs())
            .map_err(|e| e.to_string())
    };
    for _ in 0..10 {
        assert!(jobs(None)
            .unwrap_err()
            .contains("wrong or missing API token"));
    }
    assert!(jobs(Some("right")).is_ok(), "no token is not a guess");
    for _ in 0..inagg_netio::conns::FREE_GUESSES {
        assert!(jobs(Some("guess"))
            .unwrap_err()
            .contains("wrong or missing API token"));
    }
    assert!(jobs(Some("right")).is_ok(), "five typos are free");
    let e = jobs(Some("guess")).unwrap_err();
    assert!(e.contains("wrong or missing API token"), "{e}");
    let e = jobs(Some("right")).unwrap_err();
    assert!(
        e.contains("too many wrong tokens from 127.0.0.1: try again in"),
        "{e}"
    );
    // Once the back-off has passed the right token is served again.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while jobs(Some("right")).is_err() {
        assert!(std::time::Instant::now() < deadline, "still refused");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A worker that stops waiting (its wait runs out, or it is killed while
/// it waits) leaves the session: the other ranks are not admitted to a job
/// one of its ranks will never send to.
#[test]
fn a_worker_that_stops_waiting_leaves_the_session() {
    let switch = emulator(16, 0.01, 5);
    let state = state_file("leaves");
    let ctl = start(switch.control_addr(), &[], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    c.create_job(decl("g", 2, 4)).unwrap();
    let registered = |c: &mut Client| c.jobs().unwrap()[0].registered;

    // Rank 0's wait runs out before rank 1 comes; rank 1 alone is then
    // not admitted (it was, to a session rank 0 had left).
    let waiting = "not ready after 1.0 s: 1 of 2 workers registered";
    assert_eq!(
        refused_registration(ctl.addr(), "g"),
        format!("job \"g\" {waiting}")
    );
    assert_eq!(registered(&mut c), 0);
    let err = Client::connect(ctl.addr(), None)
        .unwrap()
        .register("g", 1, free_port(), Duration::from_secs(1))
        .unwrap_err()
        .to_string();
    assert_eq!(err, format!("job \"g\" {waiting}"));

    // An agent killed while it waits leaves at once, long before its
    // 60 s wait would run out.
    let mut agent = std::process::Command::new(env!("CARGO_BIN_EXE_inagg"))
        .args([
            "agent",
            "--controller",
            &ctl.addr().to_string(),
            "--job",
            "g",
        ])
        .args([
            "--rank",
            "0",
            "--bind",
            &free_port().to_string(),
            "--len",
            "8",
        ])
        .env_remove("INAGG_TOKEN")
        .output_async();
    until(&mut c, "the agent registered", |_, jobs| {
        jobs[0].registered == 1
    });
    agent.kill().unwrap();
    agent.wait().unwrap();
    until(&mut c, "the killed agent gone", |_, jobs| {
        jobs[0].registered == 0
    });

    // Both ranks then register and all-reduce under loss, exactly.
    run_job(ctl.addr(), "g", 2, 20_000, 4);
}

/// `inagg ctl --controller` and `inagg agent --controller`, the real binary.
#[test]
fn the_cli_creates_a_job_and_its_agents_register_by_rank() {
    let switch = emulator(32, 0.01, 3);
    let state = state_file("cli");
    let ctl = start(switch.control_addr(), &[], &state);
    let addr = ctl.addr().to_string();
    let out = inagg(&[
        "ctl",
        "--controller",
        &addr,
        "job",
        "create",
        "--name",
        "m",
        "--count",
        "2",
        "--slots",
        "64",
        "--class-queue",
        "1=7",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("partial grant"), "{text}");
    let out = inagg(&["ctl", "--controller", &addr, "job", "show", "m"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("priority map  class 1 -> queue 7"), "{text}");
    let out = inagg(&[
        "ctl",
        "--controller",
        &addr,
        "job",
        "create",
        "--name",
        "q",
        "--count",
        "1",
        "--slots",
        "1",
        "--class-queue",
        "1:7",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("\"1:7\" is not CLASS=QUEUE"), "{err}");
    let out = inagg(&["ctl", "--controller", &addr, "job", "create", "--id", "3"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the controller's to choose"), "{err}");

    // The controller gives the job's shape: an agent may not give its own.
    for (flag, value) in [
        ("--workers", "2"),
        ("--pool-size", "8"),
        ("--elements", "32"),
        ("--generation", "1"),
        ("--switch", "127.0.0.1:9"),
    ] {
        let out = inagg(&[
            "agent",
            "--controller",
            &addr,
            "--job",
            "m",
            "--rank",
            "0",
            "--bind",
            "127.0.0.1:9",
            "--len",
            "8",
            flag,
            value,
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(flag) && err.contains("cannot be used with"),
            "{flag}: {err}"
        );
    }
    let agents: Vec<_> = (0..2)
        .map(|r| {
            let bind = free_port().to_string();
            std::process::Command::new(env!("CARGO_BIN_EXE_inagg"))
                .args([
                    "agent",
                    "--controller",
                    &addr,
                    "--job",
                    "m",
                    "--rank",
                    &r.to_string(),
                    "--bind",
                    &bind,
                    "--len",
                    "50000",
                    "--verify",
                    "--json",
                ])
                .output_async()
        })
        .collect();
    for a in agents {
        let out = a.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["verified"], true);
    }
    let out = inagg(&["completions", "bash"]);
    let script = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && script.contains("--controller"));
    let out = inagg(&["ctl", "--controller", &addr, "--json", "job", "list"]);
    let jobs: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(jobs[0]["installed"], true);
    assert_eq!(jobs[0]["placement"]["grant"]["size"], 32);
}

/// Spawns with piped output (the agents of one job must run at once).
trait OutputAsync {
    fn output_async(&mut self) -> std::process::Child;
}

impl OutputAsync for std::process::Command {
    fn output_async(&mut self) -> std::process::Child {
        self.stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    }
}

#[test]
fn the_controller_allocates_job_groups_and_keeps_hand_made_ones() {
    use inagg_controller_api::GroupDecl;
    use inagg_host_agent::group::GroupSocket;
    let first = emulator(64, 0.0, 3);
    let (data, control) = (first.emu.data_addr(), first.control_addr());
    let state = state_file("groups");
    let ctl = start(control, &[], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let job = c.create_job(decl("a", 2, 8)).unwrap();
    let mut sockets: Vec<GroupSocket> = (0..3)
        .map(|m| GroupSocket::bind("127.0.0.1:0".parse().unwrap(), data, 2, m).unwrap())
        .collect();
    let members: Vec<SocketAddr> = sockets.iter().map(|s| s.local_addr().unwrap()).collect();
    let hand = c
        .create_group(GroupDecl {
            name: "peers".into(),
            id: None,
            members: members.clone(),
        })
        .unwrap();
    // The job took group 1 when it was created; the hand-made one gets 2.
    assert_eq!(
        (hand.id, hand.owner.as_str(), hand.installed),
        (2, "hand", true)
    );
    let err = c
        .create_group(GroupDecl {
            name: "clash".into(),
            id: Some(1),
            members: members.clone(),
        })
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("multicast group 1 is in use (job a)"),
        "{err}"
    );
    let err = c.delete_group("a").unwrap_err();
    assert!(
        err.to_string()
            .contains("its group goes when the job is deleted"),
        "{err}"
    );

    run_job(ctl.addr(), "a", 2, 1000, 5);
    let on_switch = |t: &mut EmuTarget| -> Vec<(u16, Option<u16>)> {
        t.groups().unwrap().iter().map(|g| (g.id, g.job)).collect()
    };
    let mut t = EmuTarget::connect(control).unwrap();
    assert_eq!(on_switch(&mut t), vec![(1, Some(job.id)), (2, None)]);
    let listed = c.groups().unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().all(|g| g.installed), "{listed:?}");
    assert_eq!(
        (listed[0].name.as_str(), listed[0].owner.as_str()),
        ("a", "job")
    );

    // Deleting the job frees its group; the hand-made one stays.
    c.delete_job("a").unwrap();
    assert_eq!(on_switch(&mut t), vec![(2, None)]);

    // The switch restarts empty, then the controller: the group comes back
    // each time and carries datagrams.
    first.emu.stop();
    let _second = LocalCluster::start_config(EmulatorConfig {
        data_addr: data,
        control_addr: control,
        ..EmulatorConfig::ephemeral()
    })
    .unwrap();
    let reinstalled = || {
        (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            EmuTarget::connect(control)
                .and_then(|mut t| t.groups())
                .is_ok_and(|g| g.len() == 1 && g[0].members == members)
        })
    };
    assert!(reinstalled(), "re-installed on the restarted switch");
    drop(c);
    drop(ctl);
    // The stopped controller's claim ends when the switch sees its
    // connection close, which may come a moment after the stop returns;
    // until then the switch refuses a change from anyone else.
    let deleted = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        EmuTarget::connect(control)
            .and_then(|mut t| t.delete_group(2))
            .is_ok()
    });
    assert!(deleted, "the stopped controller still holds the switch");
    let ctl = start(control, &[], &state);
    assert!(reinstalled(), "re-installed by the restarted controller");
    sockets[2].send(&[42, 43], 1, 0).unwrap();
    for s in &mut sockets[..2] {
        let d = s.recv(Duration::from_secs(5)).unwrap().expect("a copy");
        assert_eq!((d.sender, d.values), (2, vec![42, 43]));
    }
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    c.delete_group("peers").unwrap();
    assert!(EmuTarget::connect(control)
        .unwrap()
        .groups()
        .unwrap()
        .is_empty());
    let err = c.delete_group("peers").unwrap_err();
    assert!(err.to_string().contains("no group \"peers\""), "{err}");
}

#[test]
fn apply_through_the_controller_shows_the_diff_then_makes_it() {
    let switch = emulator(64, 0.0, 4);
    let state = state_file("apply");
    let ctl = start(switch.control_addr(), &[], &state);
    let addr = ctl.addr().to_string();
    let file = std::env::temp_dir().join(format!("inagg-apply-{}.toml", std::process::id()));
    let path = file.to_str().unwrap().to_string();
    let apply = |text: &str, extra: &[&str]| {
        std::fs::write(&file, text).unwrap();
        let args = ["ctl", "--controller", &addr, "apply", "-f", &path];
        let out = inagg(&[&args[..], extra].concat());
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let err = String::from_utf8_lossy(&out.stderr).to_string();
        (out.status.success(), text, err)
    };
    let v1 = r#"
priority = [{ class = 5, queue = 7 }]
[[job]]
name = "train"
workers = 2
slots = 8
[[group]]
name = "peers"
members = ["127.0.0.1:6000", "127.0.0.1:6001"]
"#;
    let (ok, text, err) = apply(v1, &["--dry-run"]);
    assert!(ok, "{err}");
    assert!(text.contains("dry run: nothing changed"), "{text}");
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    assert!(c.jobs().unwrap().is_empty(), "a dry run changes nothing");

    let (ok, text, err) = apply(v1, &[]);
    assert!(ok, "{err}");
    for line in [
        "+ job train: 2 workers, 8 slots, k=64",
        "+ group peers: 2 members",
        "~ priority class 5: queue 0 -> 7",
        "applied",
    ] {
        assert!(text.contains(line), "{line:?} in {text}");
    }
    run_job(ctl.addr(), "train", 2, 2000, 9);
    let mut t = EmuTarget::connect(switch.control_addr()).unwrap();
    assert_eq!(t.groups().unwrap().len(), 2, "the job's group and peers");
    assert_eq!(
        t.queues().unwrap().map,
        vec![ClassQueue { class: 5, queue: 7 }]
    );

    // The same file again: nothing to do.
    let (ok, text, _) = apply(v1, &[]);
    assert!(ok);
    assert!(
        text.contains("= job train: unchanged") && text.contains("= group peers: unchanged"),
        "{text}"
    );
    assert!(!text.contains('+') && !text.contains('~'), "{text}");

    // More slots re-creates the job; --prune drops the group.
    let v2 = "[[job]]\nname = \"train\"\nworkers = 2\nslots = 16\n";
    let (ok, text, err) = apply(v2, &["--prune", "--json"]);
    assert!(ok, "{err}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let actions: Vec<&str> = json["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, vec!["replace_job", "delete_group"]);
    let jobs = c.jobs().unwrap();
    assert_eq!((jobs.len(), jobs[0].decl.slots), (1, 16));
    assert!(c.groups().unwrap().iter().all(|g| g.owner == "job"));
    run_job(ctl.addr(), "train", 2, 2000, 10);
    let (_, text, _) = apply(&v2.replace("slots = 16", "slots = 32"), &["--dry-run"]);
    assert!(
        text.contains("~ job train: slots 16 -> 32 (re-created: its workers register again)"),
        "{text}"
    );

    // A bad file changes nothing and says where and what.
    let (ok, _, err) = apply("[[job]]\nname = \"x\"\nworkers = 2\nslots = 0\n", &[]);
    assert!(!ok);
    assert!(err.contains(&path) && err.contains("0 slots"), "{err}");
    assert_eq!(c.jobs().unwrap().len(), 1);
    drop(ctl);
    let _ = std::fs::remove_file(file);
}

/// Runs one all-reduce of `job` on rank `rank`, registering first, and
/// returns the summed data.
fn rank_allreduce(
    ctl: SocketAddr,
    job: &str,
    rank: u16,
    mut data: Vec<i32>,
) -> (Admission, Vec<i32>) {
    let bind = free_port();
    let mut c = Client::connect(ctl, None).unwrap();
    let a = c
        .register(job, rank, bind, Duration::from_secs(30))
        .unwrap_or_else(|e| panic!("{job} rank {rank}: {e}"));
    Worker::new(AgentConfig::from_admission(&a, bind))
        .unwrap()
        .allreduce_i32(&mut data)
        .unwrap();
    (a, data)
}

#[test]
fn pools_of_jobs_between_all_reduces_are_moved_to_make_room() {
    let switch = emulator(64, 0.01, 6);
    let state = state_file("defrag");
    let ctl = start(switch.control_addr(), &[], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let grant = |c: &mut Client, name: &str| {
        let jobs = c.jobs().unwrap();
        let j = jobs.iter().find(|j| j.decl.name == name).unwrap();
        let g = j.placement.grant().unwrap();
        (g.base, g.size)
    };
    for name in ["a", "b", "c"] {
        let mut d = decl(name, 2, 16);
        d.fallback = false;
        c.create_job(d).unwrap();
    }
    run_job(ctl.addr(), "a", 2, 3000, 1);
    run_job(ctl.addr(), "c", 2, 3000, 2);
    c.delete_job("b").unwrap();
    assert_eq!(grant(&mut c, "c"), (32, 16));

    // 32 slots are free in two pieces and c is installed: no move, so a
    // job asking for 32 gets the largest piece.
    let mut d = decl("d", 1, 32);
    d.fallback = false;
    assert_eq!(
        c.create_job(d.clone())
            .unwrap()
            .placement
            .grant()
            .unwrap()
            .size,
        16
    );
    c.delete_job("d").unwrap();

    // Rank 0 of c starts a new session: c is between all-reduces until
    // rank 1 registers, so its pool may move.
    let input = inputs(2, 3000, 3);
    let first = {
        let (ctl, data) = (ctl.addr(), input[0].clone());
        std::thread::spawn(move || rank_allreduce(ctl, "c", 0, data))
    };
    while c
        .jobs()
        .unwrap()
        .iter()
        .any(|j| j.decl.name == "c" && (j.installed || j.registered != 1))
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    let placed = c.create_job(d).unwrap().placement.grant().unwrap();
    assert_eq!(
        (placed.base, placed.size),
        (32, 32),
        "a whole grant after the move"
    );
    assert_eq!(grant(&mut c, "c"), (16, 16), "c moved next to a");
    // c's workers find their pool where it is now, and sum exactly.
    let (_, second) = rank_allreduce(ctl.addr(), "c", 1, input[1].clone());
    let (admission, first) = first.join().unwrap();
    assert_eq!(admission.pool_size, 16);
    check_i32(&input, &[first, second]).unwrap();
    let pools = EmuTarget::connect(switch.control_addr())
        .unwrap()
        .pools()
        .unwrap();
    let owned: Vec<(u32, u32)> = pools
        .ranges
        .iter()
        .filter(|r| r.job.is_some())
        .map(|r| (r.base, r.size))
        .collect();
    assert_eq!(
        owned,
        vec![(0, 16), (16, 16)],
        "a and c on the switch (d not yet registered)"
    );
}

/// A connection that has not claimed the switch cannot change its faults.
/// A connection that displaces the controller (a higher election id, on an
/// emulator without a token) and changes the switch: deletes the job, sets
/// 100% loss. When it goes, the controller takes the switch back whole:
/// the job installed again and the faults it first found put back, so a
/// job runs.
#[test]
fn the_controller_takes_the_switch_back_whole() {
    let switch = emulator(64, 0.0, 1);
    let state = state_file("take-back");
    let ctl = start(switch.control_addr(), &[], &state);
    let mut c = Client::connect(ctl.addr(), None).unwrap();
    let job = c.create_job(decl("j", 1, 8)).unwrap();
    run_job(ctl.addr(), "j", 1, 1_000, 1);

    // A connection that has not claimed the switch cannot set its faults
    // behind the controller's back.
    let err = EmuTarget::connect(switch.control_addr())
        .unwrap()
        .set_faults(FaultConfig {
            drop_ingress: 1.0,
            ..FaultConfig::default()
        })
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("another controller manages this switch"),
        "{err}"
    );

    let mut rogue = EmuTarget::connect_as(switch.control_addr(), 1 << 62).unwrap();
    rogue.delete_job(job.id).unwrap();
    rogue
        .set_faults(FaultConfig {
            drop_ingress: 1.0,
            drop_egress: 1.0,
            ..FaultConfig::default()
        })
        .unwrap();
    until(&mut c, "the controller displaced", |sites, _| {
        sites[0]
            .error
            .as_deref()
            .is_some_and(|e| e.starts_with("another controller manages this switch"))
    });
    drop(rogue);
    until(&mut c, "the switch taken back", |sites, _| sites[0].up);
    let mut look = EmuTarget::connect(switch.control_addr()).unwrap();
    for _ in 0..100 {
        if look.jobs().unwrap().len() == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(look.jobs().unwrap()[0].spec.id, job.id);
    // As the emulator started: no faults, its seed 1.
    let seed_only = FaultConfig {
        seed: 1,
        ..FaultConfig::default()
    };
    assert_eq!(look.faults().unwrap(), seed_only);
    run_job(ctl.addr(), "j", 1, 1_000, 2);
}

/// The controller holds each emulator to the faults it records: those the
/// emulator had when the controller first reached it, until the operator
/// sets others through the controller (`ctl --controller faults`). Faults
/// changed behind its back (here while it was stopped) are put back when
/// it next looks, and `ctl faults` says what it found, who set the faults
/// and when. Tenants may not set them.
#[test]
fn the_controller_holds_the_faults_it_records() {
    let switch = emulator(16, 0.0, 4);
    let control = switch.control_addr();
    let state = state_file("faults");
    let seed_only = FaultConfig {
        seed: 4,
        ..FaultConfig::default()
    };
    let ctl = start_with_token(control, &state, "op");
    let mut op = Client::connect(ctl.addr(), Some("op".into())).unwrap();
    let sites = op.faults().unwrap();
    assert_eq!(sites.len(), 1);
    assert_eq!(
        (sites[0].intended, sites[0].found),
        (seed_only, Some(seed_only))
    );
    assert_eq!(sites[0].set_by, None, "adopted at the first contact");

    // Behind the controller's back: while it is stopped, anyone with the
    // emulator's ear sets 100% loss; the restarted controller puts its own
    // faults back at its first look.
    drop(op);
    drop(ctl);
    let mut direct = EmuTarget::connect(control).unwrap();
    direct.set_faults(FaultConfig::loss(1.0, 9)).unwrap();
    let ctl = start_with_token(control, &state, "op");
    assert_eq!(direct.faults().unwrap(), seed_only, "put back at once");
    let mut op = Client::connect(ctl.addr(), Some("op".into())).unwrap();
    let sites = op.faults().unwrap();
    assert_eq!(
        sites[0].found,
        Some(FaultConfig::loss(1.0, 9)),
        "what it found"
    );
    assert_eq!(sites[0].intended, seed_only);

    // The operator's own, through the controller: installed at once, kept
    // across a restart, and shown with who set them.
    op.set_faults(None, FaultConfig::loss(0.25, 3)).unwrap();
    assert_eq!(direct.faults().unwrap(), FaultConfig::loss(0.25, 3));
    let e = op
        .set_faults(Some("127.0.0.1:9".parse().unwrap()), FaultConfig::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no aggregator at 127.0.0.1:9"), "{e}");
    let e = op
        .set_faults(None, FaultConfig::loss(1.5, 3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("drop_ingress"), "{e}");
    let (_, credential) = op
        .create_tenant(TenantDecl {
            name: "t".into(),
            slots: 8,
            queues: 0,
        })
        .unwrap();
    let e = Client::connect(ctl.addr(), Some(credential))
        .unwrap()
        .set_faults(None, FaultConfig::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("is the operator's to do"), "{e}");
    drop(op);
    drop(ctl);
    direct.set_faults(FaultConfig::default()).unwrap();
    let ctl = start_with_token(control, &state, "op");
    assert_eq!(direct.faults().unwrap(), FaultConfig::loss(0.25, 3));

    // The CLI shows them and changes one field.
    let addr = ctl.addr().to_string();
    let ctl_op = |args: &[&str]| {
        let out = inagg(&[&["ctl", "--controller", &addr, "--token", "op"][..], args].concat());
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        (out.status.success(), text)
    };
    let (ok, text) = ctl_op(&["faults"]);
    assert!(ok, "{text}");
    assert!(
        text.contains(
            "  held to  drop_ingress 0.25  drop_egress 0.25  duplicate 0  reorder 0  seed 3"
        ) && text.contains("  set by   the operator from 127.0.0.1:"),
        "{text}"
    );
    let (ok, text) = ctl_op(&["faults", "--drop-egress", "0.5"]);
    assert!(ok, "{text}");
    assert!(
        text.contains("the switch held to drop_ingress 0.25  drop_egress 0.5"),
        "{text}"
    );
    assert_eq!(direct.faults().unwrap().drop_egress, 0.5);
    let (ok, text) = ctl_op(&["events"]);
    assert!(
        ok && text.contains("set faults on the switch: drop_ingress 0.25 drop_egress 0.5"),
        "{text}"
    );
}

/// A claimant's connection has given its claim up when its drop returns
/// (the emulator lets go before it closes, the client waits for the
/// close): a change made right after by a client without a claim is not
/// refused for a claim that is gone.
#[test]
fn a_dropped_claimant_has_let_go_of_the_switch() {
    let switch = emulator(16, 0.0, 1);
    for seed in 0..200 {
        drop(EmuTarget::connect_as(switch.control_addr(), 7).unwrap());
        let mut next = EmuTarget::connect(switch.control_addr()).unwrap();
        next.set_faults(FaultConfig {
            seed,
            ..FaultConfig::default()
        })
        .unwrap();
        assert_eq!(next.faults().unwrap().seed, seed);
    }
}

/// No lock-out: a thousand strangers, each sending a tokenless request
/// every 50 ms and reconnecting whenever it is closed, at the controller's
/// API and at an emulator's control endpoint with a token: every request
/// of a client with the token is answered (how long it waits is
/// `inagg bench --flood`'s to say).
#[test]
fn a_thousand_strangers_do_not_lock_out_a_token_holder() {
    let switch = emulator(16, 0.0, 1);
    let state = state_file("flood");
    let ctl = start_with_token(switch.control_addr(), &state, "op");
    let emu = inagg_emu::Emulator::start(EmulatorConfig {
        token: Some(inagg_netio::token::Token::new("sw").unwrap()),
        ..EmulatorConfig::ephemeral()
    })
    .unwrap();
    let floods = [
        Flood::start(ctl.addr(), 1000, br#"{"request":{"op":"jobs"}}"#),
        Flood::start(emu.control_addr(), 1000, br#"{"op":"info"}"#),
    ];
    // At work: every stranger has sent, and the endpoints have closed
    // some (they are reopened).
    for flood in &floods {
        while flood.lines() < 2000 || flood.opened() <= 1000 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let token = inagg_netio::token::Token::new("sw").unwrap();
    for i in 0..20 {
        let jobs = Client::connect(ctl.addr(), Some("op".into())).and_then(|mut c| c.jobs());
        assert!(jobs.is_ok(), "request {i} through the flood: {jobs:?}");
        let info = EmuTarget::connect_with(emu.control_addr(), Some(&token), None)
            .and_then(|mut t| t.info());
        assert!(
            info.is_ok(),
            "emulator request {i} through the flood: {info:?}"
        );
    }
}
