//! The DPDK data path for real: agents on DPDK net_af_packet ports, each in
//! its own network namespace, joined by veth pairs to a "switch" namespace
//! where the emulator runs on its socket backend (a Linux bridge with the
//! switch address) or on its DPDK backend (net_af_packet on every switch
//! port, no kernel address). Loss comes from the emulator. A mixed job, with
//! some workers on kernel sockets, must give the same bytes on every worker,
//! and a DPDK emulator must send partial sums up an aggregation tree to a
//! parent switch on another port.
//!
//! Needs root, iproute2 and a build with `--features dpdk` (this file only
//! compiles then). Without root the namespace tests say they skipped and
//! why; the bad-EAL test runs anyway.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

mod common;
use common::{in_ns, sh, skip_reason};
use inagg_testbed::skip::skip;

const SWITCH: &str = "10.0.0.100:47000";
/// A parent switch, for aggregation trees: the socket emulator in a
/// namespace of its own, one veth away from the DPDK emulator.
const PARENT: &str = "10.0.0.200:47000";
const CONTROL: &str = "127.0.0.1:47001";
const EAL_BASE: &str =
    "--no-huge -m 128 --no-pci --no-shconf --no-telemetry --log-level=lib.eal:error";

/// One lab at a time: every process in it polls, and the machine may have
/// two cores.
static SERIAL: Mutex<()> = Mutex::new(());

fn inagg() -> &'static str {
    env!("CARGO_BIN_EXE_inagg")
}

/// How the emulator reaches its ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EmuBackend {
    Socket,
    Dpdk,
}

/// How a worker reaches the switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AgentBackend {
    Socket,
    Dpdk,
    /// DPDK with two queue pairs (two lanes): af_packet's fanout puts the
    /// switch's results on one queue, so one lane hands the other lane's
    /// results over.
    DpdkTwoLanes,
    /// A Python process on DPDK through the C library
    /// (`tests/python/pattern_worker.py`; int32 only).
    PythonDpdk,
}

/// A switch namespace and one namespace per worker (and the parent
/// switch's, for trees), removed when dropped.
struct Lab {
    tag: String,
    switch: String,
    hosts: Vec<String>,
    emu: Option<Child>,
    /// The parent switch's namespace and emulator.
    parent: Option<(String, Child)>,
    dir: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        let (parent_ns, parent_emu) = self.parent.take().unzip();
        for mut c in self.emu.take().into_iter().chain(parent_emu) {
            let _ = c.kill();
            let _ = c.wait();
        }
        for ns in self
            .hosts
            .iter()
            .chain([&self.switch])
            .chain(parent_ns.as_ref())
        {
            let _ = Command::new("ip").args(["netns", "del", ns]).output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Lab {
    /// Namespaces and veths for `agents`, and the emulator on `emu`.
    fn new(tag: &str, agents: &[AgentBackend], emu: EmuBackend, loss: f64) -> Lab {
        let mut lab = Lab::wire(tag, agents, emu);
        lab.start_emu(emu, agents.len(), loss);
        lab
    }

    /// A DPDK emulator whose last port is a veth to a parent switch (the
    /// socket emulator at [`PARENT`], in a namespace of its own).
    fn with_parent(tag: &str, agents: &[AgentBackend], loss: f64) -> Lab {
        let mut lab = Lab::wire(tag, agents, EmuBackend::Dpdk);
        let ns = format!("idp-up-{tag}-{}", std::process::id());
        sh(&["ip", "netns", "add", &ns]);
        in_ns(&ns, &["ip", "link", "set", "lo", "up"]);
        let (down, up) = (lab.switch_if(agents.len()), format!("p{}", lab.tag));
        sh(&[
            "ip",
            "link",
            "add",
            &down,
            "netns",
            &lab.switch,
            "type",
            "veth",
            "peer",
            "name",
            &up,
            "netns",
            &ns,
        ]);
        in_ns(&ns, &["ip", "addr", "add", "10.0.0.200/24", "dev", &up]);
        in_ns(&ns, &["ip", "link", "set", &up, "up"]);
        in_ns(&lab.switch, &["ip", "link", "set", &down, "up"]);
        let parent = Command::new("ip")
            .args(["netns", "exec", &ns, inagg(), "emu", "--data", PARENT])
            .args(["--control", CONTROL, "--max-elements", "256"])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the parent emulator");
        lab.parent = Some((ns.clone(), parent));
        wait_for_control(&lab, &ns);
        lab.start_emu(EmuBackend::Dpdk, agents.len() + 1, loss);
        lab
    }

    /// Namespaces and veths for `agents` (a bridge for a socket emulator).
    fn wire(tag: &str, agents: &[AgentBackend], emu: EmuBackend) -> Lab {
        let id = std::process::id();
        let lab = Lab {
            tag: format!("{tag}{id}"),
            switch: format!("idp-sw-{tag}-{id}"),
            hosts: (0..agents.len())
                .map(|i| format!("idp-h{i}-{tag}-{id}"))
                .collect(),
            emu: None,
            parent: None,
            dir: std::env::temp_dir().join(format!("inagg-dpdk-{tag}-{id}")),
        };
        std::fs::create_dir_all(&lab.dir).unwrap();
        for ns in lab.hosts.iter().chain([&lab.switch]) {
            sh(&["ip", "netns", "add", ns]);
            in_ns(ns, &["ip", "link", "set", "lo", "up"]);
        }
        if emu == EmuBackend::Socket {
            in_ns(&lab.switch, &["ip", "link", "add", "br0", "type", "bridge"]);
            in_ns(
                &lab.switch,
                &["ip", "addr", "add", "10.0.0.100/24", "dev", "br0"],
            );
            in_ns(&lab.switch, &["ip", "link", "set", "br0", "up"]);
        }
        for (i, backend) in agents.iter().enumerate() {
            let (h, s) = (lab.host_if(i), lab.switch_if(i));
            sh(&[
                "ip",
                "link",
                "add",
                &h,
                "netns",
                &lab.hosts[i],
                "type",
                "veth",
                "peer",
                "name",
                &s,
                "netns",
                &lab.switch,
            ]);
            in_ns(&lab.hosts[i], &["ip", "link", "set", &h, "up"]);
            if *backend == AgentBackend::Socket {
                // Kernel workers have the address on their interface; DPDK
                // workers own it themselves (the kernel must not answer).
                let addr = format!("{}/24", worker_ip(i));
                in_ns(&lab.hosts[i], &["ip", "addr", "add", &addr, "dev", &h]);
            }
            if emu == EmuBackend::Socket {
                in_ns(&lab.switch, &["ip", "link", "set", &s, "master", "br0"]);
            }
            in_ns(&lab.switch, &["ip", "link", "set", &s, "up"]);
        }
        lab
    }

    fn host_if(&self, i: usize) -> String {
        format!("h{i}{}", self.tag)
    }

    fn switch_if(&self, i: usize) -> String {
        format!("s{i}{}", self.tag)
    }

    fn start_emu(&mut self, emu: EmuBackend, ports: usize, loss: f64) {
        let loss = loss.to_string();
        let mut args: Vec<String> = [
            "netns",
            "exec",
            &self.switch,
            inagg(),
            "emu",
            "--data",
            SWITCH,
            "--control",
            CONTROL,
            "--max-elements",
            "256",
            "--loss",
            &loss,
            "--seed",
            "7",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if emu == EmuBackend::Dpdk {
            let vdevs: String = (0..ports)
                .map(|i| format!(" --vdev net_af_packet{i},iface={}", self.switch_if(i)))
                .collect();
            args.extend([
                "--backend".into(),
                "dpdk".into(),
                "--eal".into(),
                format!("{EAL_BASE}{vdevs}"),
            ]);
        }
        let child = Command::new("ip")
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start the emulator");
        self.emu = Some(child);
        wait_for_control(self, &self.switch);
    }

    /// `inagg ctl` against the emulator of namespace `ns`.
    fn ctl_in(&self, ns: &str, args: &[&str]) -> Output {
        let mut all = vec!["netns", "exec", ns, inagg(), "ctl", "--addr", CONTROL];
        all.extend_from_slice(args);
        Command::new("ip")
            .args(&all)
            .output()
            .expect("run inagg ctl")
    }

    fn create_job(&self, workers: usize, pool: u32, elements: u16) {
        let endpoints: Vec<String> = (0..workers)
            .map(|i| format!("{}:40000", worker_ip(i)))
            .collect();
        self.create_job_in(&self.switch, &endpoints.join(","), pool, elements, &[]);
    }

    /// Job 1 at the emulator of namespace `ns`, with its members.
    fn create_job_in(&self, ns: &str, members: &str, pool: u32, elements: u16, more: &[&str]) {
        let (pool, elements) = (pool.to_string(), elements.to_string());
        let mut args = vec!["job", "create", "--id", "1", "--workers", members];
        args.extend([
            "--pool-base",
            "0",
            "--pool-size",
            &pool,
            "--elements",
            &elements,
        ]);
        args.extend_from_slice(more);
        let out = self.ctl_in(ns, &args);
        assert!(
            out.status.success(),
            "job create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts worker `i` on `backend`; its reduced tensor goes to a file.
    fn agent(&self, i: usize, workers: usize, backend: AgentBackend, job: &Job) -> Child {
        let bind = format!("{}:40000", worker_ip(i));
        let output = self.output(i);
        let mut args: Vec<String> = vec![
            "netns".into(),
            "exec".into(),
            self.hosts[i].clone(),
            inagg().into(),
            "agent".into(),
            "--switch".into(),
            SWITCH.into(),
            "--bind".into(),
            bind,
            "--job".into(),
            "1".into(),
            "--worker".into(),
            i.to_string(),
            "--workers".into(),
            workers.to_string(),
            "--pool-size".into(),
            job.pool.to_string(),
            "--elements".into(),
            job.elements.to_string(),
            "--dtype".into(),
            job.dtype.into(),
            "--len".into(),
            job.len.to_string(),
            "--verify".into(),
            "--output".into(),
            output.display().to_string(),
            "--timeout".into(),
            "30".into(),
        ];
        let port = format!("net_af_packet0,iface={}", self.host_if(i));
        match backend {
            AgentBackend::Socket => {}
            AgentBackend::PythonDpdk => return self.python_agent(i, workers, job),
            AgentBackend::Dpdk => {
                let eal = format!("{EAL_BASE} --vdev {port}");
                args.extend(["--backend".into(), "dpdk".into(), "--eal".into(), eal]);
            }
            AgentBackend::DpdkTwoLanes => {
                let eal = format!("{EAL_BASE} --vdev {port},qpairs=2");
                args.extend(["--backend", "dpdk", "--queues", "2", "--eal"].map(String::from));
                args.push(eal);
            }
        }
        Command::new("ip")
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start an agent")
    }

    /// Worker `i` as a Python process on DPDK, with `inagg agent`'s int32
    /// pattern, through libinagg_capi.so (built beside this test, with DPDK).
    fn python_agent(&self, i: usize, workers: usize, job: &Job) -> Child {
        assert_eq!(job.dtype, "i32", "the Python worker sums the int32 pattern");
        let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let exe = std::env::current_exe().unwrap();
        let library = exe.parent().unwrap().join("libinagg_capi.so");
        let config = serde_json::json!({
            "switch": SWITCH, "bind": format!("{}:40000", worker_ip(i)), "job": 1,
            "worker": i, "workers": workers, "pool_size": job.pool, "elements": job.elements,
            "timeout": 30, "backend": "dpdk",
            "eal": format!("{EAL_BASE} --vdev net_af_packet0,iface={}", self.host_if(i)),
        });
        Command::new("ip")
            .args(["netns", "exec", &self.hosts[i], "python3"])
            .arg(repo.join("tests/python/pattern_worker.py"))
            .arg(config.to_string())
            .arg(job.len.to_string())
            .arg(self.output(i))
            .env("PYTHONPATH", repo.join("capi/python"))
            .env("INAGG_LIBRARY", library)
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start python3")
    }

    fn output(&self, i: usize) -> PathBuf {
        self.dir.join(format!("result{i}.bin"))
    }

    /// Runs one all-reduce with every worker; returns each one's report.
    fn allreduce(&self, agents: &[AgentBackend], job: &Job) -> Vec<String> {
        let children: Vec<Child> = agents
            .iter()
            .enumerate()
            .map(|(i, b)| self.agent(i, agents.len(), *b, job))
            .collect();
        children
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let out = c.wait_with_output().expect("agent output");
                let text = format!(
                    "{}{}",
                    String::from_utf8_lossy(&out.stdout),
                    String::from_utf8_lossy(&out.stderr)
                );
                assert!(
                    out.status.success(),
                    "worker {i} ({:?}) failed: {text}",
                    agents[i]
                );
                assert!(text.contains("result verified"), "worker {i}: {text}");
                if agents[i] == AgentBackend::DpdkTwoLanes {
                    let handed = handed_over(&text)
                        .unwrap_or_else(|| panic!("worker {i} ran on 2 lanes: {text}"));
                    assert!(handed > 0, "worker {i}: no result crossed lanes: {text}");
                }
                text
            })
            .collect()
    }

    fn counters(&self) -> serde_json::Value {
        self.counters_in(&self.switch)
    }

    fn counters_in(&self, ns: &str) -> serde_json::Value {
        let out = self.ctl_in(ns, &["--json", "counters"]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("counters JSON")
    }
}

/// Waits until the emulator of namespace `ns` answers on its control port.
fn wait_for_control(lab: &Lab, ns: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = lab.ctl_in(ns, &["info"]);
        if out.status.success() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "emulator in {ns} did not come up: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// "N results handed between them" in a 2-lane agent's report.
fn handed_over(report: &str) -> Option<u64> {
    let (_, rest) = report.split_once("2 lanes (")?;
    rest.split_whitespace().next()?.parse().ok()
}

fn worker_ip(i: usize) -> String {
    format!("10.0.0.{}", i + 1)
}

struct Job {
    pool: u32,
    elements: u16,
    dtype: &'static str,
    len: usize,
}

/// Runs an int32 and a float all-reduce through a lab and checks that every
/// worker verified its result, that all hold the same bytes, and that the
/// emulator saw (and survived) the injected loss.
fn run_lab(tag: &str, agents: &[AgentBackend], emu: EmuBackend) {
    if let Some(why) = skip_reason() {
        skip("dpdk", &why);
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let lab = Lab::new(tag, agents, emu, 0.02);
    lab.create_job(agents.len(), 16, 64);
    for (dtype, len) in [("i32", 30_000), ("f32", 20_000)] {
        let job = Job {
            pool: 16,
            elements: 64,
            dtype,
            len,
        };
        lab.allreduce(agents, &job);
        let first = std::fs::read(lab.output(0)).unwrap();
        assert_eq!(first.len(), len * 4);
        for i in 1..agents.len() {
            let other = std::fs::read(lab.output(i)).unwrap();
            assert!(
                other == first,
                "{dtype}: worker {i} ({:?}) differs from worker 0 ({:?})",
                agents[i],
                agents[0]
            );
        }
    }
    let c = lab.counters();
    let drops = &c["switch"]["drops"];
    let injected = drops["injected_ingress"].as_u64().unwrap_or(0)
        + drops["injected_egress"].as_u64().unwrap_or(0);
    assert!(injected > 0, "no loss was injected: {c}");
    assert_eq!(drops["malformed"].as_u64(), Some(0), "{c}");
}

#[test]
fn dpdk_agents_through_the_socket_emulator_under_loss() {
    use AgentBackend::Dpdk;
    run_lab("ds", &[Dpdk, Dpdk, Dpdk], EmuBackend::Socket);
}

#[test]
fn dpdk_agents_through_the_dpdk_emulator_under_loss() {
    use AgentBackend::Dpdk;
    run_lab("dd", &[Dpdk, Dpdk, Dpdk], EmuBackend::Dpdk);
}

#[test]
fn a_mixed_job_gives_every_worker_the_same_result_on_either_emulator() {
    use AgentBackend::{Dpdk, Socket};
    run_lab("ms", &[Dpdk, Socket, Dpdk, Socket], EmuBackend::Socket);
    run_lab("md", &[Socket, Dpdk, Socket, Dpdk], EmuBackend::Dpdk);
}

#[test]
fn agents_on_two_queue_pairs_hand_results_between_lanes_and_stay_exact() {
    use AgentBackend::{DpdkTwoLanes, Socket};
    run_lab(
        "qs",
        &[DpdkTwoLanes, Socket, DpdkTwoLanes],
        EmuBackend::Socket,
    );
    run_lab("qd", &[DpdkTwoLanes, DpdkTwoLanes], EmuBackend::Dpdk);
}

/// A Python training process on DPDK, through the C library, in a job
/// with a Rust DPDK agent and a kernel-socket agent, at 2% loss: every
/// worker checks its int32 sum and all hold the same bytes.
#[test]
fn a_python_worker_on_dpdk_joins_a_mixed_job() {
    use AgentBackend::{Dpdk, PythonDpdk, Socket};
    if let Some(why) = skip_reason() {
        skip("dpdk", &why);
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let agents = [PythonDpdk, Dpdk, Socket];
    let lab = Lab::new("py", &agents, EmuBackend::Socket, 0.02);
    lab.create_job(agents.len(), 16, 64);
    let job = Job {
        pool: 16,
        elements: 64,
        dtype: "i32",
        len: 30_000,
    };
    let reports = lab.allreduce(&agents, &job);
    assert!(
        reports[0].contains("python worker 0 of 3 on dpdk"),
        "{}",
        reports[0]
    );
    let first = std::fs::read(lab.output(0)).unwrap();
    assert_eq!(first.len(), job.len * 4);
    for i in 1..agents.len() {
        assert!(std::fs::read(lab.output(i)).unwrap() == first, "worker {i}");
    }
}

#[test]
fn an_agent_with_wrong_eal_arguments_fails_with_a_clear_error() {
    let out = Command::new(inagg())
        .args([
            "agent",
            "--backend",
            "dpdk",
            "--eal",
            "--no-huge --no-pci --not-an-eal-option",
            "--bind",
            "10.0.0.1:40000",
            "--switch",
            SWITCH,
            "--job=1",
            "--worker=0",
            "--workers=1",
            "--pool-size=4",
            "--len=100",
        ])
        .output()
        .expect("run inagg agent");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("EAL initialisation failed"), "{stderr}");
    assert!(stderr.contains("--not-an-eal-option"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// An aggregation tree over DPDK: the DPDK emulator sums its workers (one
/// on DPDK, one on a kernel socket) and sends each partial sum up its
/// uplink port to a parent switch, which it finds by ARP; the parent's
/// result comes back in through the same port and is multicast down. 2%
/// loss at the DPDK emulator; every worker verifies and all hold the same
/// bytes.
#[test]
fn a_dpdk_emulator_sends_partial_sums_up_an_aggregation_tree() {
    use AgentBackend::{Dpdk, Socket};
    if let Some(why) = skip_reason() {
        skip("dpdk", &why);
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let agents = [Dpdk, Socket];
    let lab = Lab::with_parent("tr", &agents, 0.02);
    let (parent_ns, _) = lab.parent.as_ref().expect("a parent");
    // The parent's one member is the DPDK emulator, weighing its 2 workers.
    lab.create_job_in(parent_ns, SWITCH, 16, 64, &[]);
    let upstream = format!("{PARENT}/1/0");
    let members = format!("{}:40000,{}:40000", worker_ip(0), worker_ip(1));
    lab.create_job_in(&lab.switch, &members, 16, 64, &["--upstream", &upstream]);
    for (dtype, len) in [("i32", 20_000), ("f32", 20_000)] {
        let job = Job {
            pool: 16,
            elements: 64,
            dtype,
            len,
        };
        lab.allreduce(&agents, &job);
        let first = std::fs::read(lab.output(0)).unwrap();
        assert_eq!(first.len(), len * 4);
        assert!(std::fs::read(lab.output(1)).unwrap() == first, "{dtype}");
    }
    let child = lab.counters();
    let job = &child["jobs"][0]["counters"];
    // 2 x 313 slots, and again for the rounds whose result was lost.
    let up = job["upstream"].as_u64().unwrap_or(0);
    assert!(up >= 626, "{up} partial sums went up: {child}");
    let drops = &child["switch"]["drops"];
    assert!(
        drops["injected_ingress"].as_u64().unwrap_or(0) > 0,
        "{child}"
    );
    assert_eq!(drops["malformed"].as_u64(), Some(0), "{child}");
    let parent = lab.counters_in(parent_ns);
    let results = parent["jobs"][0]["counters"]["results"].as_u64();
    assert!(
        results.unwrap_or(0) >= 626,
        "the parent completed {results:?} slots: {parent}"
    );
}
