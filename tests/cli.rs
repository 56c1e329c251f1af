//! The `inagg` binary as an operator uses it: `inagg emu` as a child process,
//! programmed by `inagg ctl`, with `inagg agent` workers and `inagg demo`.

use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};

use inagg_testbed::process::{first_line, Running};

const INAGG: &str = env!("CARGO_BIN_EXE_inagg");

/// An `inagg emu` child, killed when dropped.
struct Emu {
    _child: Running,
    data: SocketAddr,
    control: SocketAddr,
}

impl Emu {
    fn start(extra: &[&str]) -> Emu {
        Emu::start_with(&[], extra, Stdio::inherit())
    }

    /// With global options before `emu` and its stderr sent to `stderr`.
    fn start_with(global: &[&str], extra: &[&str], stderr: Stdio) -> Emu {
        let (child, line) = first_line(
            Command::new(INAGG)
                .args(global)
                .args(["emu", "--data", "127.0.0.1:0", "--control", "127.0.0.1:0"])
                .args(extra)
                .stderr(stderr),
        );
        // "inagg emu: data plane udp://A  control tcp://B"
        let addr = |tag: &str| {
            line.split(tag)
                .nth(1)
                .unwrap()
                .split_whitespace()
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        Emu {
            data: addr("udp://"),
            control: addr("tcp://"),
            _child: child,
        }
    }

    /// Creates job `id` of one worker (pool 0..8) and returns the address
    /// that worker must bind.
    fn one_worker_job(&self, id: u16) -> SocketAddr {
        let bind = free_udp_port();
        let workers = bind.to_string();
        let id = id.to_string();
        let out = self.create_job(&id, &workers, "0", "8", &[]);
        assert!(out.status.success(), "{}", text(&out));
        bind
    }

    /// `ctl job create` of job `id` with `workers` (comma-separated) on
    /// slots `base`..`base + size`, and `extra` options.
    fn create_job(
        &self,
        id: &str,
        workers: &str,
        base: &str,
        size: &str,
        extra: &[&str],
    ) -> Output {
        let job = ["job", "create", "--id", id, "--workers", workers];
        let pool = ["--pool-base", base, "--pool-size", size];
        self.ctl(&[&job[..], &pool, extra].concat())
    }

    /// `inagg agent` as worker `worker` of job `job`, of `workers`
    /// workers with a pool of `pool` slots, bound at `bind`, through this
    /// emulator; the caller adds what to all-reduce.
    fn agent(
        &self,
        bind: SocketAddr,
        (job, worker): (&str, usize),
        (workers, pool): (u16, u32),
    ) -> Command {
        let mut c = Command::new(INAGG);
        c.args([
            "agent",
            "--switch",
            &self.data.to_string(),
            "--bind",
            &bind.to_string(),
        ])
        .args(["--job", job, "--worker", &worker.to_string()])
        .args([
            "--workers",
            &workers.to_string(),
            "--pool-size",
            &pool.to_string(),
        ]);
        c
    }

    fn ctl(&self, args: &[&str]) -> Output {
        Command::new(INAGG)
            .arg("ctl")
            .args(["--addr", &self.control.to_string()])
            .args(args)
            .output()
            .unwrap()
    }
}

/// Asserts that `out` is a failure whose output says `what`.
fn fails_saying(out: &Output, what: &str) {
    assert!(!out.status.success(), "succeeded: {}", text(out));
    assert!(text(out).contains(what), "{}", text(out));
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// One GET /metrics: the whole HTTP response.
fn scrape(metrics: SocketAddr) -> String {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(metrics).unwrap();
    write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut out = String::new();
    c.read_to_string(&mut out).unwrap();
    out
}

fn free_udp_port() -> SocketAddr {
    inagg_testbed::ports::udp()
}

#[test]
fn ctl_manages_jobs_and_refuses_bad_ones() {
    let emu = Emu::start(&["--slots", "1000"]);
    let ok = emu.create_job("1", "127.0.0.1:5000,127.0.0.1:5001", "0", "600", &[]);
    assert!(ok.status.success(), "{}", text(&ok));
    let overlap = emu.create_job("2", "127.0.0.1:6000", "500", "100", &[]);
    assert!(!overlap.status.success());
    assert!(
        text(&overlap).contains("job 2: pool [500, 600) overlaps job 1's pool [0, 600)"),
        "{}",
        text(&overlap)
    );
    let beyond = emu.create_job("2", "127.0.0.1:6000", "900", "200", &[]);
    assert!(
        text(&beyond).contains("runs past the switch's 1000 slots"),
        "{}",
        text(&beyond)
    );
    let dup = emu.create_job("1", "127.0.0.1:6000", "700", "10", &[]);
    assert!(
        text(&dup).contains("job 1 already exists"),
        "{}",
        text(&dup)
    );
    let list = emu.ctl(&["--json", "job", "list"]);
    let jobs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(jobs.as_array().unwrap().len(), 1);
    assert_eq!(jobs[0]["spec"]["pool_size"], 600);
    let pools = text(&emu.ctl(&["pool"]));
    assert!(pools.contains("400 of 1000 slots free"), "{pools}");
    let show = text(&emu.ctl(&["job", "show", "1"]));
    assert!(show.contains("worker   1  127.0.0.1:5001"), "{show}");
    // A tree node: its partial sums go to another switch's job.
    let tree = |upstream: &str| {
        emu.create_job("3", "127.0.0.1:7000", "700", "8", &["--upstream", upstream])
    };
    let bad = tree("127.0.0.1:9000/3");
    fails_saying(&bad, "is not SWITCH/JOB/MEMBER");
    let own = tree("127.0.0.1:7000/3/0");
    assert!(
        text(&own).contains("job 3: upstream 127.0.0.1:7000 is also one of the job's workers"),
        "{}",
        text(&own)
    );
    assert!(tree("127.0.0.1:9000/5/2").status.success());
    let show = text(&emu.ctl(&["job", "show", "3"]));
    assert!(
        show.contains("upstream  switch 127.0.0.1:9000  job 5  as member 2  (sent up 0, again 0)"),
        "{show}"
    );
    assert!(emu.ctl(&["job", "delete", "3"]).status.success());
    // A tree's root lists its child switches among the members: only
    // members can be.
    let root = |child: &str| {
        emu.ctl(&[
            "--json",
            "job",
            "create",
            "--id",
            "4",
            "--workers",
            "127.0.0.1:7000,127.0.0.1:9000",
            "--pool-base",
            "700",
            "--pool-size",
            "8",
            "--child-switch",
            child,
        ])
    };
    let outside = root("2");
    assert!(
        text(&outside).contains("job 4: child switch 2 is not a member (the job has 2)"),
        "{}",
        text(&outside)
    );
    let wide = root("64");
    fails_saying(&wide, "64 is not in 0..64");
    assert!(root("1").status.success(), "{}", text(&root("1")));
    let list = emu.ctl(&["--json", "job", "list"]);
    let jobs: serde_json::Value = serde_json::from_slice(&list.stdout).unwrap();
    let four = jobs
        .as_array()
        .unwrap()
        .iter()
        .find(|j| j["spec"]["id"] == 4);
    assert_eq!(four.unwrap()["spec"]["child_switches"], 2);
    let show = text(&emu.ctl(&["job", "show", "4"]));
    assert!(
        show.contains("worker   1  127.0.0.1:9000  (child switch)"),
        "{show}"
    );
    assert!(emu.ctl(&["job", "delete", "4"]).status.success());
    assert!(emu.ctl(&["job", "delete", "1"]).status.success());
    let gone = emu.ctl(&["job", "show", "1"]);
    assert!(!gone.status.success() && text(&gone).contains("no job 1 is installed"));
    // A fault probability that is not a number is refused by name, and the
    // switch keeps its settings.
    let nan = emu.ctl(&["faults", "--drop-egress", "NaN"]);
    fails_saying(&nan, "drop_egress = NaN is not a probability");
    let faults = text(&emu.ctl(&["faults"]));
    assert!(faults.contains("drop_egress 0 "), "{faults}");
}

/// The emulator's value memory is a budget (`--memory-mib`): a pool that
/// would pass it is refused with the sizes, and `ctl info` shows what is
/// used.
#[test]
fn pools_past_the_memory_budget_are_refused() {
    let emu = Emu::start(&["--slots", "1000", "--memory-mib", "1"]);
    let create = |id: &str, worker: &str, base: &str, size: &str, k: &str| {
        emu.create_job(id, worker, base, size, &["--elements", k])
    };
    // 600 slots x 2 sets x 64 values x 4 bytes = 307,200 bytes.
    let ok = create("1", "127.0.0.1:5000", "0", "600", "64");
    assert!(ok.status.success(), "{}", text(&ok));
    // 400 x 2 x 256 x 4 = 819,200 bytes, and 741,376 are free.
    let big = create("2", "127.0.0.1:5001", "600", "400", "256");
    assert!(
        !big.status.success()
            && text(&big).contains(
                "job 2: a pool of 400 slots at K = 256 takes 800.0 KiB of aggregator memory, \
                 and 724.0 KiB of the switch's 1.0 MiB is free"
            ),
        "{}",
        text(&big)
    );
    let info = text(&emu.ctl(&["info"]));
    assert!(
        info.contains("memory        300.0 KiB of 1.0 MiB used"),
        "{info}"
    );
    // At K = 64 the same pool fits.
    let fits = create("2", "127.0.0.1:5001", "600", "400", "64");
    assert!(fits.status.success(), "{}", text(&fits));
}

/// Auxiliary paths from the command line: a relay entry made, listed,
/// refused twice and deleted; a tree job with an auxiliary path and a job
/// taking detours, shown; bad forms, and a relay entry that would carry a
/// job's detours past it, refused with the reason.
#[test]
fn ctl_manages_relays_and_auxiliary_paths() {
    let emu = Emu::start(&[]);
    let relay = |verb: &str, extra: &[&str]| {
        let mut args = vec!["relay", verb, "--job", "4", "--from", "127.0.0.1:7001"];
        args.extend_from_slice(&["--member", "2"]);
        args.extend_from_slice(extra);
        emu.ctl(&args)
    };
    let made = relay("create", &["--to", "127.0.0.1:7002"]);
    assert!(made.status.success(), "{}", text(&made));
    let again = relay("create", &["--to", "127.0.0.1:7003"]);
    assert!(
        text(&again).contains("relay job 4 member 2 from 127.0.0.1:7001 is already installed"),
        "{}",
        text(&again)
    );
    let back = emu.ctl(&[
        "relay",
        "create",
        "--job",
        "4",
        "--from",
        "127.0.0.1:7001",
        "--member",
        "3",
        "--to",
        "127.0.0.1:7001",
    ]);
    assert!(
        text(&back).contains("would send detours back"),
        "{}",
        text(&back)
    );
    let list = text(&emu.ctl(&["relay", "list"]));
    assert!(list.contains("127.0.0.1:7002"), "{list}");
    let json = emu.ctl(&["--json", "relay", "list"]);
    let relays: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(relays.as_array().unwrap().len(), 1);
    assert_eq!(relays[0]["packets"], 0);
    assert!(relay("delete", &[]).status.success());
    let gone = relay("delete", &[]);
    assert!(
        text(&gone).contains("no relay job 4 member 2"),
        "{}",
        text(&gone)
    );

    let job = |id: &str, base: &str, extra: &[&str]| {
        let mut args = vec!["job", "create", "--id", id, "--workers"];
        args.extend_from_slice(&["127.0.0.1:8000,127.0.0.1:8001", "--pool-base", base]);
        args.extend_from_slice(&["--pool-size", "8"]);
        args.extend_from_slice(extra);
        emu.ctl(&args)
    };
    let child = job(
        "5",
        "0",
        &[
            "--upstream",
            "127.0.0.1:9000/5/1",
            "--aux-path",
            "127.0.0.1:9100/3/5",
        ],
    );
    assert!(child.status.success(), "{}", text(&child));
    let show = text(&emu.ctl(&["job", "show", "5"]));
    assert!(
        show.contains("auxiliary path  via 127.0.0.1:9100  busy bound 3  queue length 5"),
        "{show}"
    );
    let parent = job("6", "8", &["--detour", "1=127.0.0.1:9200"]);
    assert!(parent.status.success(), "{}", text(&parent));
    let show = text(&emu.ctl(&["job", "show", "6"]));
    assert!(
        show.contains("detours of member 1 from relay 127.0.0.1:9200"),
        "{show}"
    );
    // A relay entry under the fields job 6 takes those detours by.
    let past = emu.ctl(&[
        "relay",
        "create",
        "--job",
        "6",
        "--from",
        "127.0.0.1:9200",
        "--member",
        "1",
        "--to",
        "127.0.0.1:9300",
    ]);
    fails_saying(&past, "the entry would carry them past it");
    let no_up = job("7", "16", &["--aux-path", "127.0.0.1:9100"]);
    fails_saying(&no_up, "--upstream");
    let stranger = job("7", "16", &["--detour", "5=127.0.0.1:9200"]);
    assert!(
        text(&stranger).contains("detours for member 5, but the job has 2 members"),
        "{}",
        text(&stranger)
    );
    let form = job("7", "16", &["--detour", "1:127.0.0.1:9200"]);
    assert!(
        text(&form).contains("is not MEMBER=RELAY"),
        "{}",
        text(&form)
    );
}

#[test]
fn ports_get_rates_of_their_own_at_start_and_at_run_time() {
    let emu = Emu::start(&["--line-rate", "1", "--port-rate", "127.0.0.1:9=0.05"]);
    let rate_of = |port: &str| -> Option<u64> {
        let out = emu.ctl(&["--json", "queues"]);
        assert!(out.status.success(), "{}", text(&out));
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        report["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["port"] == port)
            .map(|p| p["rate_bps"].as_u64().unwrap())
    };
    assert_eq!(rate_of("127.0.0.1:9"), Some(50_000_000));
    let set = emu.ctl(&["port-rate", "127.0.0.1:10", "0.2"]);
    assert!(set.status.success(), "{}", text(&set));
    assert!(
        text(&set).contains("port 127.0.0.1:10 -> 0.2 Gbit/s"),
        "{}",
        text(&set)
    );
    assert_eq!(rate_of("127.0.0.1:10"), Some(200_000_000));
    let shown = text(&emu.ctl(&["queues"]));
    assert!(
        shown.contains("port 127.0.0.1:10 paced at 0.2 Gbit/s"),
        "{shown}"
    );
    let back = emu.ctl(&["port-rate", "127.0.0.1:9", "default"]);
    assert!(back.status.success(), "{}", text(&back));
    assert_eq!(rate_of("127.0.0.1:9"), Some(1_000_000_000));
    // Refusals: a rate that is not one, one too low to pace with, and a
    // port rate on an emulator whose ports are not paced at all.
    let bad = emu.ctl(&["port-rate", "127.0.0.1:9", "fast"]);
    fails_saying(&bad, "give Gbit/s");
    let low = emu.ctl(&["port-rate", "127.0.0.1:9", "0.0000001"]);
    fails_saying(&low, "too low");
    let unpaced = Emu::start(&[]);
    let refused = unpaced.ctl(&["port-rate", "127.0.0.1:9", "1"]);
    fails_saying(&refused, "not paced");
    let no_line = Command::new(INAGG)
        .args(["emu", "--port-rate", "127.0.0.1:9=1"])
        .output()
        .unwrap();
    fails_saying(&no_line, "--line-rate");
    let malformed = Command::new(INAGG)
        .args(["emu", "--line-rate", "1", "--port-rate", "127.0.0.1:9"])
        .output()
        .unwrap();
    fails_saying(&malformed, "ADDR=GBPS");
}

#[test]
fn ctl_apply_plans_checks_and_applies_cluster_files() {
    let emu = Emu::start(&[]);
    let dir = std::env::temp_dir().join(format!("inagg-apply-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let good = dir.join("good.toml");
    std::fs::write(
        &good,
        "[[job]]\nid = 1\nworkers = [\"127.0.0.1:5000\"]\npool_base = 0\npool_size = 64\n\n\
         [[job]]\nid = 2\nworkers = [\"127.0.0.1:5001\", \"127.0.0.1:5002\"]\npool_base = 64\npool_size = 64\nelements = 256\n",
    )
    .unwrap();
    let out = emu.ctl(&["apply", "-f", good.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("+ job 2: pool [64, 128) k=256 workers=2"),
        "{}",
        text(&out)
    );
    let again = text(&emu.ctl(&["apply", "-f", good.to_str().unwrap()]));
    assert!(again.contains("= job 1: unchanged"), "{again}");
    // An empty file keeps every job (no --prune) and says so.
    let empty = dir.join("empty.toml");
    std::fs::write(&empty, "").unwrap();
    let out = emu.ctl(&["apply", "-f", empty.to_str().unwrap()]);
    assert!(
        out.status.success()
            && text(&out).contains("nothing to do: the switch already holds what the file says"),
        "{}",
        text(&out)
    );
    let overlapping = dir.join("overlap.toml");
    std::fs::write(
        &overlapping,
        "[[job]]\nid = 3\nworkers = [\"127.0.0.1:5003\"]\npool_base = 100\npool_size = 10\n",
    )
    .unwrap();
    let out = emu.ctl(&["apply", "-f", overlapping.to_str().unwrap()]);
    fails_saying(&out, "overlaps job 2's pool");
    let malformed = dir.join("bad.toml");
    std::fs::write(&malformed, "[[job]]\nid = \"one\"\n").unwrap();
    let out = emu.ctl(&["apply", "-f", malformed.to_str().unwrap()]);
    fails_saying(&out, "bad.toml");
    let missing = emu.ctl(&["apply", "-f", "/nonexistent/cluster.toml"]);
    assert!(text(&missing).contains("cannot read"), "{}", text(&missing));
    // The file's [switch] table says where to apply it when the command
    // line does not: a file for bmv2 goes to a P4Runtime server (here the
    // emulator's control port, which does not speak it), never to the
    // emulator the default target would have reached.
    let apply_file_for = |target: &str| {
        let path = dir.join(format!("{target}.toml"));
        std::fs::write(
            &path,
            format!(
                "[switch]\ntarget = \"{target}\"\ncontrol = \"{}\"\n\n[[job]]\nid = 4\n\
                 workers = [\"127.0.0.1:5004\"]\npool_base = 200\npool_size = 8\n",
                emu.control
            ),
        )
        .unwrap();
        Command::new(INAGG)
            .args(["ctl", "apply", "-f", path.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let out = apply_file_for("bmv2");
    let went_to_bmv2 = text(&out).contains("P4Runtime") || text(&out).contains("the bmv2 target");
    assert!(!out.status.success() && went_to_bmv2, "{}", text(&out));
    // Nothing of the refused files was installed.
    let jobs: serde_json::Value =
        serde_json::from_slice(&emu.ctl(&["--json", "job", "list"]).stdout).unwrap();
    assert_eq!(jobs.as_array().unwrap().len(), 2);
    // An emulator file with its control address applies with no --addr.
    let out = apply_file_for("emu");
    assert!(
        out.status.success() && text(&out).contains("+ job 4"),
        "{}",
        text(&out)
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn agents_all_reduce_through_a_separate_emulator_process() {
    let emu = Emu::start(&["--loss", "0.02", "--seed", "7"]);
    let (a, b, c) = (free_udp_port(), free_udp_port(), free_udp_port());
    let workers = format!("{a},{b},{c}");
    let out = emu.create_job("5", &workers, "10", "32", &[]);
    assert!(out.status.success(), "{}", text(&out));
    for (dtype, size) in [("i32", 4), ("f32", 4), ("f16", 2), ("bf16", 2)] {
        let children: Vec<Child> = [a, b, c]
            .iter()
            .enumerate()
            .map(|(w, bind)| {
                emu.agent(*bind, ("5", w), (3, 32))
                    .args(["--dtype", dtype, "--len", "20000", "--verify", "--json"])
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for stats in verified(children) {
            assert_eq!(stats["payload_bytes"], 20_000 * size, "{dtype}");
        }
    }
    let counters: serde_json::Value =
        serde_json::from_slice(&emu.ctl(&["--json", "counters"]).stdout).unwrap();
    assert!(
        counters["switch"]["drops"]["injected_ingress"]
            .as_u64()
            .unwrap()
            > 0,
        "{counters}"
    );
    assert!(counters["jobs"][0]["counters"]["results"].as_u64().unwrap() >= 4 * 20_000 / 64);
}

/// `inagg emu --shm PATH` with `inagg agent --shm PATH`: two agents over
/// shared memory and one over UDP in one job, under the emulator's loss,
/// every sum verified; an agent whose emulator has no such socket fails
/// saying so.
#[test]
fn agents_all_reduce_over_the_emulators_shared_memory() {
    let dir = std::env::temp_dir().join(format!("inagg-cli-shm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("emu.sock");
    let path_arg = path.to_str().unwrap();
    let emu = Emu::start(&["--loss", "0.01", "--seed", "3", "--shm", path_arg]);
    // Endpoints for the shared-memory agents name them; nothing binds them.
    let (a, b, c) = (free_udp_port(), free_udp_port(), free_udp_port());
    let out = emu.create_job("6", &format!("{a},{b},{c}"), "0", "16", &[]);
    assert!(out.status.success(), "{}", text(&out));
    let children: Vec<Child> = [a, b, c]
        .iter()
        .enumerate()
        .map(|(w, bind)| {
            let mut cmd = emu.agent(*bind, ("6", w), (3, 16));
            if w < 2 {
                cmd.args(["--shm", path_arg]);
            }
            cmd.args(["--dtype", "f32", "--len", "30000", "--verify", "--json"])
                .stdout(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    verified(children);
    let missing = dir.join("nobody.sock");
    let out = emu
        .agent(a, ("6", 0), (3, 16))
        .args(["--shm", missing.to_str().unwrap(), "--len", "10"])
        .output()
        .unwrap();
    fails_saying(&out, "shared-memory socket");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Waits for `inagg agent ... --verify --json` children: each succeeded
/// and verified its sums; their statistics.
fn verified(children: Vec<Child>) -> Vec<serde_json::Value> {
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{}", text(&out));
            let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(stats["verified"], true, "{stats}");
            stats
        })
        .collect()
}

/// docs/GUIDE.md's aggregation tree by hand, two sessions in a row: a root and a
/// leaf emulator, one agent at each (member 0 at both switches, so the leaf's
/// agent gives --tree-rank 1), one round per slot, then again with other
/// values: the second session sums its own values, not the first's results
/// still stored in the slots (docs/PROTOCOL.md, "Sessions").
#[test]
fn a_tree_by_hand_sums_each_sessions_own_values() {
    let root = Emu::start(&[]);
    let leaf = Emu::start(&[]);
    let (a, b) = (free_udp_port(), free_udp_port());
    let members = format!("{a},{}", leaf.data);
    let upstream = format!("{}/1/1", root.data);
    let job = [
        "job",
        "create",
        "--id",
        "1",
        "--pool-base",
        "0",
        "--pool-size",
        "8",
    ];
    let out = root.ctl(&[&job[..], &["--workers", &members]].concat());
    assert!(out.status.success(), "{}", text(&out));
    let b_only = b.to_string();
    let out = leaf.ctl(&[&job[..], &["--workers", &b_only, "--upstream", &upstream]].concat());
    assert!(out.status.success(), "{}", text(&out));
    let dir = std::env::temp_dir().join(format!("inagg-tree-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, value: i32| {
        let path = dir.join(name);
        let bytes: Vec<u8> = (0..512).flat_map(|_| value.to_le_bytes()).collect();
        std::fs::write(&path, bytes).unwrap();
        path.to_string_lossy().into_owned()
    };
    for (x, y) in [(1, 2), (10, 20)] {
        let (in_a, in_b) = (file("a", x), file("b", y));
        let agent =
            |switch: SocketAddr, bind: SocketAddr, rank: &str, input: &str, output: &str| {
                Command::new(INAGG)
                    .args([
                        "agent",
                        "--switch",
                        &switch.to_string(),
                        "--bind",
                        &bind.to_string(),
                    ])
                    .args(["--job", "1", "--worker", "0", "--tree-rank", rank])
                    .args(["--workers", "2", "--pool-size", "8", "--dtype", "i32"])
                    .args(["--input", input, "--output", output])
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            };
        let (out_a, out_b) = (dir.join("sum_a"), dir.join("sum_b"));
        let children = [
            agent(root.data, a, "0", &in_a, &out_a.to_string_lossy()),
            agent(leaf.data, b, "1", &in_b, &out_b.to_string_lossy()),
        ];
        for child in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{x}+{y}: {}", text(&out));
        }
        for sum in [&out_a, &out_b] {
            let bytes = std::fs::read(sum).unwrap();
            assert_eq!(bytes.len(), 512 * 4);
            assert!(
                bytes
                    .chunks(4)
                    .all(|v| i32::from_le_bytes(v.try_into().unwrap()) == x + y),
                "{x}+{y}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tree of two emulators with two workers at each: the leaf's workers are
/// its members 0 and 1 and the tree's ranks 2 and 3. `--verify` sums the
/// pattern over the tree's ranks, and each worker contributes its tree
/// rank's values (with its member id instead, the leaf's workers repeated
/// the root's values and every result was 6/10 of the expected sum).
#[test]
fn a_tree_with_two_workers_per_switch_verifies_by_tree_rank() {
    let root = Emu::start(&[]);
    let leaf = Emu::start(&[]);
    let binds: Vec<SocketAddr> = (0..4).map(|_| free_udp_port()).collect();
    let job = ["job", "create", "--id", "30", "--pool-base", "0"];
    let root_members = format!("{},{},{}", binds[0], binds[1], leaf.data);
    let out = root.ctl(&[&job[..], &["--pool-size", "16", "--workers", &root_members]].concat());
    assert!(out.status.success(), "{}", text(&out));
    let leaf_members = format!("{},{}", binds[2], binds[3]);
    let upstream = format!("{}/30/2", root.data);
    let leaf_job = [
        "--pool-size",
        "16",
        "--workers",
        &leaf_members,
        "--upstream",
        &upstream,
    ];
    let out = leaf.ctl(&[&job[..], &leaf_job].concat());
    assert!(out.status.success(), "{}", text(&out));
    for dtype in ["i32", "f32"] {
        let children: Vec<Child> = binds
            .iter()
            .enumerate()
            .map(|(rank, bind)| {
                let (switch, member) = if rank < 2 {
                    (root.data, rank)
                } else {
                    (leaf.data, rank - 2)
                };
                Command::new(INAGG)
                    .args(["agent", "--switch", &switch.to_string()])
                    .args(["--bind", &bind.to_string(), "--job", "30"])
                    .args(["--worker", &member.to_string()])
                    .args(["--tree-rank", &rank.to_string(), "--workers", "4"])
                    .args(["--pool-size", "16", "--dtype", dtype, "--len", "5000"])
                    .args(["--verify", "--json"])
                    .stdout(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for (rank, child) in children.into_iter().enumerate() {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{dtype}, rank {rank}: {}", text(&out));
            let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(stats["verified"], true, "{dtype}, rank {rank}");
        }
    }
}

/// An emulator with a control token: `ctl` without `--switch-token` is
/// refused and told what to pass, with it works; off loopback the emulator
/// will not start without a token.
#[test]
fn the_emulators_token_guards_its_control_endpoint() {
    let emu = Emu::start(&["--token", "s3cret"]);
    let create = ["job", "create", "--id", "1", "--workers", "127.0.0.1:5000"];
    let pool = ["--pool-base", "0", "--pool-size", "8"];
    let out = emu.ctl(&[&create[..], &pool].concat());
    assert!(!out.status.success());
    let said = text(&out);
    assert!(
        said.contains("unauthorized") && said.contains("--switch-token"),
        "{said}"
    );
    let out = emu.ctl(&[&["--switch-token", "s3cret"][..], &create, &pool].concat());
    assert!(out.status.success(), "{}", text(&out));
    let out = emu.ctl(&["--switch-token", "wrong", "job", "list"]);
    fails_saying(&out, "wrong token");

    let out = Command::new(INAGG)
        .args(["emu", "--data", "127.0.0.1:0", "--control", "0.0.0.0:0"])
        .env_remove("INAGG_SWITCH_TOKEN")
        .output()
        .unwrap();
    fails_saying(&out, "off this host, without a token: pass --token");
}

#[test]
fn demo_prints_a_verified_json_report() {
    let out = Command::new(INAGG)
        .args([
            "demo",
            "--json",
            "--workers",
            "3",
            "--elements",
            "50000",
            "-k",
            "128",
            "--window",
            "64",
            "--loss",
            "0.01",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["verified"], true);
    assert_eq!(r["workers"], 3);
    assert_eq!(r["elements"], 50_000);
    for field in ["seconds", "goodput_gbps", "retransmissions"] {
        assert!(r[field].is_number(), "{field} in {r}");
    }
    assert_eq!(r["dtype"], "f32");
    // The 16-bit formats, checked against their own bounds.
    for dtype in ["f16", "bf16"] {
        let out = Command::new(INAGG)
            .args(["demo", "--json", "--workers", "3", "--elements", "20000"])
            .args(["-k", "256", "--loss", "0.02", "--dtype", dtype])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(
            (&r["dtype"], &r["element_bytes"]),
            (&dtype.into(), &2.into())
        );
        assert_eq!(r["stats"]["payload_bytes"], 20_000 * 2, "{r}");
    }
    // int32: the sum must be exact, under loss, with the contributions
    // dropped each owed one retransmission at most.
    let out = Command::new(INAGG)
        .args(["demo", "--json", "--workers", "3", "--elements", "20000"])
        .args(["-k", "256", "--loss", "0.05", "--dtype", "i32"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (&r["verified"], &r["dtype"]),
        (&true.into(), &"i32".into()),
        "{r}"
    );
    assert_eq!(r["stats"]["payload_bytes"], 20_000 * 4, "{r}");
    assert!(r["lost_contributions"].as_u64().unwrap() > 0, "{r}");
}

/// The demo gives the emulator's data plane a CPU of its own where there
/// are two or more, and says where everything ran; `--no-pin` leaves it.
#[cfg(target_os = "linux")]
#[test]
fn demo_pins_the_data_plane_apart_from_the_workers() {
    let cpus = inagg_emu::affinity::allowed().unwrap();
    let demo = |extra: &[&str]| {
        let out = Command::new(INAGG)
            .args(["demo", "--json", "--workers", "2", "--elements", "20000"])
            .args(["-k", "256", "--loss", "0"])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let r = demo(&[]);
    assert_eq!(r["verified"], true, "{r}");
    match inagg_emu::affinity::Placement::split(&cpus) {
        Some(p) => {
            assert_eq!(r["switch_cpu"], p.switch, "{r}");
            assert_eq!(r["worker_cpus"], serde_json::json!(p.workers), "{r}");
        }
        None => assert!(r["switch_cpu"].is_null(), "one CPU: {r}"),
    }
    let r = demo(&["--no-pin"]);
    assert_eq!(r["verified"], true, "{r}");
    assert!(r["switch_cpu"].is_null(), "{r}");
    assert_eq!(r["worker_cpus"], serde_json::json!([]), "{r}");
    let refused = Command::new(INAGG)
        .args(["emu", "--data", "127.0.0.1:0", "--control", "127.0.0.1:0"])
        .args(["--cpu", "4096"])
        .output()
        .unwrap();
    fails_saying(&refused, "CPU 4096: this process may run only on CPUs ");
}

#[test]
fn bad_arguments_get_clear_errors_not_panics() {
    let run = |args: &[&str]| Command::new(INAGG).args(args).output().unwrap();
    let out = run(&["demo", "--loss", "1.5"]);
    assert!(
        !out.status.success() && text(&out).contains("--loss 1.5 must be in [0, 1)"),
        "{}",
        text(&out)
    );
    // bmv2 options with the emulator target are a mistake, said before
    // connecting.
    let out = run(&["ctl", "--topology", "topology.toml", "info"]);
    fails_saying(&out, "use them with --target bmv2 or tofino");
    // bmv2's program files with the Tofino target; no bf_switchd there.
    let out = run(&["ctl", "--target", "tofino", "--p4info", "x.bin", "info"]);
    fails_saying(&out, "give the program with --program");
    let out = run(&[
        "ctl",
        "--target",
        "tofino",
        "--addr",
        "127.0.0.1:1",
        "job",
        "list",
    ]);
    assert!(
        !out.status.success()
            && text(&out).contains("cannot reach BF Runtime server at 127.0.0.1:1")
            && text(&out).contains("is bf_switchd running?"),
        "{}",
        text(&out)
    );
    let out = run(&["demo", "--workers", "100"]);
    assert!(
        !out.status.success()
            && text(&out).contains("--workers 100: a job on one switch has at most 64 workers"),
        "{}",
        text(&out)
    );
    let out = run(&[
        "emu",
        "--reorder",
        "2",
        "--data",
        "127.0.0.1:0",
        "--control",
        "127.0.0.1:0",
    ]);
    fails_saying(&out, "reorder = 2 is not a probability");
    // Shared memory goes with the socket backend, unpaced.
    let shm = std::env::temp_dir().join(format!("inagg-cli-badshm-{}.sock", std::process::id()));
    let shm = shm.to_str().unwrap();
    let emu = [
        "emu",
        "--data",
        "127.0.0.1:0",
        "--control",
        "127.0.0.1:0",
        "--shm",
        shm,
    ];
    let out = run(&[&emu[..], &["--line-rate", "1"]].concat());
    fails_saying(&out, "do not go together");
    let out = run(&[&emu[..], &["--backend", "dpdk"]].concat());
    fails_saying(&out, "--shm serves beside the socket backend");
    let out = run(&[
        "agent",
        "--bind",
        "127.0.0.1:1",
        "--job",
        "1",
        "--worker",
        "0",
        "--workers",
        "2",
        "--pool-size",
        "8",
        "--backend",
        "dpdk",
        "--shm",
        shm,
    ]);
    fails_saying(&out, "--shm goes with the socket backend");
    let out = run(&["ctl", "--addr", "127.0.0.1:1", "job", "list"]);
    fails_saying(&out, "is it running?");
    // The OS error is in the message once, not again as its cause.
    assert_eq!(text(&out).matches("refused").count(), 1, "{}", text(&out));
    let out = run(&["ctl", "job", "create", "--id", "70000"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = run(&[
        "agent",
        "--bind",
        "127.0.0.1:0",
        "--job",
        "1",
        "--worker",
        "3",
        "--workers",
        "2",
        "--pool-size",
        "4",
        "--len",
        "5",
    ]);
    fails_saying(&out, "worker id 3 is not below");
    // A tensor file must hold whole elements of the --dtype.
    let odd = std::env::temp_dir().join(format!("inagg-odd-{}.bin", std::process::id()));
    std::fs::write(&odd, [1u8, 2, 3]).unwrap();
    let out = run(&[
        "agent",
        "--bind",
        "127.0.0.1:0",
        "--job",
        "1",
        "--worker",
        "0",
        "--workers",
        "1",
        "--pool-size",
        "4",
        "--dtype",
        "bf16",
        "--input",
        odd.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&odd);
    assert!(
        !out.status.success()
            && text(&out).contains("3 bytes is not a whole number of 2-byte elements"),
        "{}",
        text(&out)
    );
    // NetStorm's benches check their arguments before starting any site.
    for (args, why) in [
        (&["bench", "--netstorm", "--aux", "gird"][..], "nor grid"),
        (&["bench", "--netstorm", "--aux", "2/x"][..], "nor grid"),
        (
            &["bench", "--netstorm", "--ablation", "--repeat", "1"][..],
            "--repeat must be at least 2",
        ),
        (&["bench", "--ablation"][..], "--netstorm"),
        (&["bench", "--flood", "--loss"][..], "cannot be used with"),
        (
            &["bench", "--netstorm", "--ablation", "--aux"][..],
            "cannot be used with",
        ),
    ] {
        let out = run(args);
        assert!(
            !out.status.success() && text(&out).contains(why),
            "{args:?}: {}",
            text(&out)
        );
    }
    for out in [
        run(&["demo", "--loss", "1.5"]),
        run(&["ctl", "job", "create", "--id", "70000"]),
    ] {
        assert!(!text(&out).contains("panicked"), "{}", text(&out));
    }
}

/// Endless and oversized inputs are refused before they are held: a
/// cluster file past its 4 MiB limit, a tensor from a device whose length
/// is not stated; a stated length reads exactly that much; --verify has
/// nothing to check a file against. Each fails at once, in a few MiB at
/// most, rather than grow until the kernel kills it.
#[test]
fn endless_inputs_are_refused_by_their_limits() {
    let run = |args: &[&str]| Command::new(INAGG).args(args).output().unwrap();
    for endless in ["/dev/zero", "/dev/urandom"] {
        let out = run(&["ctl", "apply", "-f", endless]);
        assert!(
            !out.status.success()
                && text(&out).contains(&format!(
                    "{endless}: cannot read: it yields more than the 4.0 MiB allowed"
                )),
            "{}",
            text(&out)
        );
    }
    let agent = |extra: &[&str]| {
        let mut args = vec![
            "agent",
            "--bind",
            "127.0.0.1:0",
            "--switch",
            "127.0.0.1:1",
            "--job",
            "1",
            "--worker",
            "0",
            "--workers",
            "2",
            "--pool-size",
            "4",
            "--timeout",
            "0.2",
        ];
        args.extend_from_slice(extra);
        run(&args)
    };
    let out = agent(&["--input", "/dev/zero"]);
    assert!(
        !out.status.success()
            && text(&out).contains(
                "/dev/zero is not a regular file, so its length is unknown: give --len N"
            ),
        "{}",
        text(&out)
    );
    let out = agent(&["--input", "/dev/null", "--len", "10"]);
    fails_saying(&out, "/dev/null: 0 bytes, where --len asks for 40");
    // Exactly 1000 elements read from /dev/zero: the agent gets as far as
    // the switch (none there: it says so).
    let out = agent(&["--input", "/dev/zero", "--len", "1000"]);
    fails_saying(&out, "no result from the switch at 127.0.0.1:1");
    let out = agent(&["--input", "/dev/zero", "--len", "10", "--verify"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("--verify"), "{}", text(&out));
}

/// `inagg emu --metrics ADDR`: a Prometheus scrape shows the job, its
/// counters and the drops by reason, as `ctl counters` does.
#[test]
fn the_emulator_serves_prometheus_metrics() {
    let metrics = inagg_testbed::ports::tcp();
    let emu = Emu::start(&["--metrics", &metrics.to_string()]);
    let ok = emu.create_job("4", "127.0.0.1:5000", "0", "8", &[]);
    assert!(ok.status.success(), "{}", text(&ok));
    // A datagram that is not inagg: counted as malformed.
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(b"junk", emu.data).unwrap();
    let scrape = || scrape(metrics);
    let mut body = String::new();
    for _ in 0..100 {
        body = scrape();
        if body.contains("inagg_drops_total{reason=\"malformed\"} 1") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(
        body.contains("inagg_drops_total{reason=\"malformed\"} 1\n"),
        "{body}"
    );
    assert!(body.contains("inagg_rx_packets_total 1\n"), "{body}");
    assert!(
        body.contains("inagg_job_results_total{job=\"4\"} 0\n"),
        "{body}"
    );
    assert!(
        body.contains("# TYPE inagg_job_results_total counter\n"),
        "{body}"
    );
    // The value memory: the default 4 GiB, and 8 slots x 2 sets x 64 x 4 bytes.
    assert!(body.contains("inagg_memory_bytes 4294967296\n"), "{body}");
    assert!(body.contains("inagg_memory_used_bytes 4096\n"), "{body}");
}

#[test]
fn logs_have_levels_and_a_bad_filter_is_refused() {
    let out = Command::new(INAGG)
        .args(["--log", "inagg=[", "ctl", "info"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("bad log filter"), "{}", text(&out));

    let path = std::env::temp_dir().join(format!("inagg-log-{}.txt", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    let emu = Emu::start_with(&["--log", "debug"], &[], Stdio::from(file));
    let ok = emu.create_job("4", "127.0.0.1:5000", "0", "8", &[]);
    assert!(ok.status.success(), "{}", text(&ok));
    assert!(emu.ctl(&["job", "list"]).status.success());
    assert!(!emu.ctl(&["job", "delete", "9"]).status.success());
    drop(emu);
    let log = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    let line = |level: &str, what: &str| log.lines().any(|l| l.contains(level) && l.contains(what));
    assert!(line(" INFO ", "CreateJob"), "{log}");
    assert!(line(" DEBUG ", "ListJobs"), "{log}");
    assert!(line(" WARN ", "no job 9 is installed"), "{log}");
}

#[test]
fn the_agent_serves_its_counters_to_prometheus() {
    let emu = Emu::start(&[]);
    let bind = emu.one_worker_job(4);
    let metrics = inagg_testbed::ports::tcp();
    let (agent, line) = first_line(
        emu.agent(bind, ("4", 0), (1, 8))
            .args(["--dtype", "i32", "--len", "10000", "--verify"])
            .args(["--metrics", &metrics.to_string(), "--metrics-linger", "20"])
            .stderr(Stdio::null()),
    );
    // The summary line is printed when the all-reduce is done; the
    // counters are then final, and served while the agent lingers.
    assert!(line.contains("result verified"), "{line}");
    let body = scrape(metrics);
    drop(agent);
    let labels = "{job=\"4\",worker=\"0\"}";
    assert!(
        body.contains(&format!("inagg_agent_allreduces_total{labels} 1\n")),
        "{body}"
    );
    assert!(
        body.contains(&format!("inagg_agent_payload_bytes_total{labels} 40000\n")),
        "{body}"
    );
    // 10000 elements at K = 64: 159 chunks of 63 values, each sent at least once.
    let sent: u64 = body
        .lines()
        .find_map(|l| l.strip_prefix(&format!("inagg_agent_packets_sent_total{labels} ")))
        .unwrap()
        .parse()
        .unwrap();
    assert!(sent >= 159, "{body}");
}

/// `inagg sim reproduce ARGS --json --out OUT`, which must succeed: its
/// reports.
fn sim_json(args: &[&str], out: &std::path::Path) -> serde_json::Value {
    let run = Command::new(INAGG)
        .args(["sim", "reproduce"])
        .args(args)
        .args(["--json", "--out"])
        .arg(out)
        .output()
        .expect("run inagg");
    assert!(run.status.success(), "{}", text(&run));
    serde_json::from_slice(&run.stdout).expect("JSON")
}

#[test]
fn sim_reproduce_prints_json_and_writes_plots() {
    let out = std::env::temp_dir().join(format!("inagg-sim-{}", std::process::id()));
    let reports = sim_json(&["priority"], &out);
    let rows = reports[0]["rows"].as_array().expect("rows");
    assert!(rows.len() >= 4);
    for row in rows {
        assert!(
            row["name"].is_string() && row["paper"].is_string() && row["inagg"].is_number(),
            "{row}"
        );
    }
    let svg =
        std::fs::read_to_string(out.join("priority-iteration-time.svg")).expect("plot written");
    assert!(svg.starts_with("<svg") && svg.contains("Geryon"));
    let _ = std::fs::remove_dir_all(&out);
    // An unknown paper is a clear error.
    let bad = Command::new(env!("CARGO_BIN_EXE_inagg"))
        .args(["sim", "reproduce", "nope", "--out"])
        .arg(std::env::temp_dir())
        .output()
        .expect("run inagg");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("unknown paper \"nope\"") && err.contains("selmcast"),
        "{err}"
    );
    // Seeds that would wrap past u64::MAX, and no seeds at all, are refused
    // before anything runs.
    for (seed, seeds, says) in [
        ("18446744073709551615", "2", "runs past the largest seed"),
        ("1", "0", "0 is not in 1..=100"),
    ] {
        let bad = Command::new(env!("CARGO_BIN_EXE_inagg"))
            .args([
                "sim",
                "reproduce",
                "priority",
                "--seed",
                seed,
                "--seeds",
                seeds,
            ])
            .arg("--out")
            .arg(std::env::temp_dir())
            .output()
            .expect("run inagg");
        assert!(!bad.status.success());
        let err = String::from_utf8_lossy(&bad.stderr);
        assert!(err.contains(says), "{err}");
    }
}

/// `--seeds N` runs the reproduction once per seed and folds each result
/// into its median, range and the number of seeds it agrees on; printing
/// into a closed pipe is an error, not a panic.
#[test]
fn sim_reproduce_across_seeds_and_into_a_closed_pipe() {
    let out = std::env::temp_dir().join(format!("inagg-sim-seeds-{}", std::process::id()));
    let reports = sim_json(
        &[
            "dsyncps", "--quick", "--trials", "1", "--seed", "5", "--seeds", "3",
        ],
        &out,
    );
    assert_eq!(reports[0]["seeds"], serde_json::json!([5, 6, 7]));
    let rows = reports[0]["rows"].as_array().expect("rows");
    assert!(rows.len() >= 4);
    for row in rows {
        let (min, median, max) = (
            row["min"].as_f64().unwrap(),
            row["inagg"].as_f64().unwrap(),
            row["max"].as_f64().unwrap(),
        );
        assert!(min <= median && median <= max, "{row}");
        assert!(row["agreeing"].as_u64().unwrap() <= 3, "{row}");
    }
    // The membership rows hold on every seed.
    let servers = rows
        .iter()
        .find(|r| r["name"] == "servers in the table after the join")
        .expect("row");
    assert_eq!(servers["agreeing"], 3, "{servers}");
    let _ = std::fs::remove_dir_all(&out);

    let bad = Command::new(env!("CARGO_BIN_EXE_inagg"))
        .args(["sim", "reproduce", "priority", "--seeds", "0"])
        .output()
        .expect("run inagg");
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("--seeds") && err.contains("1..=100"), "{err}");

    assert_fails_into_a_closed_pipe(
        Command::new(INAGG)
            .args(["sim", "reproduce", "priority", "--out"])
            .arg(std::env::temp_dir().join(format!("inagg-sim-pipe-{}", std::process::id()))),
    );
}

/// Runs `cmd` with its reader gone before anything is printed: it must
/// end with exit 1 and "Broken pipe", not a panic. The pipe's read end is
/// closed before the command starts (closing it after the spawn raced
/// with a fast command, which could print everything into the pipe's
/// buffer first and exit 0).
fn assert_fails_into_a_closed_pipe(cmd: &mut Command) {
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let closed = cmd
        .stdout(writer)
        .stderr(Stdio::piped())
        .output()
        .expect("run inagg");
    let err = String::from_utf8_lossy(&closed.stderr);
    assert_eq!(closed.status.code(), Some(1), "{cmd:?}: {err}");
    assert!(
        err.contains("Broken pipe") && !err.contains("panicked"),
        "{cmd:?}: {err}"
    );
}

/// Every command prints through a writer: conformance, an agent that
/// prints its result, and the emulator's start line all meet a closed
/// pipe with an error.
#[test]
fn commands_print_into_a_closed_pipe_as_an_error() {
    assert_fails_into_a_closed_pipe(Command::new(INAGG).arg("conformance"));
    let emu = Emu::start(&[]);
    let bind = emu.one_worker_job(3);
    assert_fails_into_a_closed_pipe(
        Command::new(INAGG)
            .args(["agent", "--switch", &emu.data.to_string()])
            .args(["--bind", &bind.to_string(), "--job", "3", "--worker", "0"])
            .args(["--workers", "1", "--pool-size", "8"])
            .args(["--dtype", "i32", "--len", "1000"]),
    );
    assert_fails_into_a_closed_pipe(Command::new(INAGG).args([
        "emu",
        "--data",
        "127.0.0.1:0",
        "--control",
        "127.0.0.1:0",
    ]));
}

/// `inagg sim protocol ARGS`.
fn sim_protocol(args: &[&str]) -> Output {
    Command::new(INAGG)
        .args(["sim", "protocol"])
        .args(args)
        .output()
        .unwrap()
}

/// The protocol simulator from the command line: seeds that keep every
/// invariant pass and say so; a job whose workers give up too soon fails
/// and prints the command that replays a failing seed; that command replays
/// it with a readable trace; bad arguments are refused with a reason.
#[test]
fn sim_protocol_runs_seeds_and_replays_a_failing_one() {
    let ok = sim_protocol(&[
        "--seeds",
        "40",
        "--faults",
        "loss,dup,starve",
        "--threads",
        "2",
    ]);
    let out = text(&ok);
    assert!(ok.status.success(), "{out}");
    assert!(
        out.contains("40 seeds") && out.contains("0 seeds broke an invariant"),
        "{out}"
    );
    assert!(out.contains("M packets/s per core"), "{out}");
    // Control traffic against what asked for it: data lost, and rounds a
    // slow (starved) member held up.
    let line = out
        .lines()
        .find(|l| l.starts_with("data lost "))
        .unwrap_or_else(|| panic!("no control traffic line: {out}"));
    let held: u64 = line
        .split("rounds held up ")
        .nth(1)
        .and_then(|r| r.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{line}"));
    assert!(held > 0, "a starved member holds rounds up: {line}");
    assert!(line.contains("per round held up)"), "{line}");

    // A crashed worker's peers give up, as the faults allow: counted, not
    // logged, unless asked for.
    let crash = [
        "--seed",
        "6001",
        "--seeds",
        "60",
        "--faults",
        "loss,dup,jitter,starve,pause,crash",
        "--threads",
        "2",
    ];
    let quiet = sim_protocol(&crash);
    assert!(quiet.status.success(), "{}", text(&quiet));
    assert!(!text(&quiet).contains(" WARN "), "{}", text(&quiet));
    let failed: u64 = text(&quiet)
        .split(" all-reduces completed, ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    assert!(failed > 0, "no worker gave up: {}", text(&quiet));
    let loud = sim_protocol(&[&crash[..], &["--log", "warn"]].concat());
    assert!(text(&loud).contains("giving up"), "{}", text(&loud));

    // A job of its own whose workers give up sooner than recovery at
    // 30% loss needs: a broken liveness; its replay command names the job.
    let bad = sim_protocol(&[
        "--seed",
        "1",
        "--seeds",
        "1",
        "--faults",
        "loss",
        "--elements",
        "100000",
        "--loss",
        "0.3",
        "--workers",
        "2",
        "-k",
        "256",
        "--pool",
        "16",
        "--int",
        "--give-up-ms",
        "20",
    ]);
    let out = text(&bad);
    assert!(!bad.status.success(), "{out}");
    assert!(out.contains("violations: liveness"), "{out}");
    let replay = out
        .lines()
        .find_map(|l| l.trim().strip_prefix("replay: inagg "))
        .unwrap_or_else(|| panic!("no replay command: {out}"));
    let traced = Command::new(INAGG)
        .args(replay.split(' '))
        .output()
        .unwrap();
    let trace = text(&traced);
    assert!(!traced.status.success(), "{trace}");
    assert!(
        trace.contains("trace hash") && trace.contains("VIOLATION liveness:"),
        "{trace}"
    );
    assert!(trace.contains("Contribution job 7"), "{trace}");
    assert!(
        trace.contains("seed 1: 2 workers, K 256, pool 16, 100000 i32"),
        "the replay runs the same job: {trace}"
    );

    let unknown = sim_protocol(&["--faults", "flood"]);
    let job_alone = sim_protocol(&["--workers", "2"]);
    fails_saying(&job_alone, "--loss");
    fails_saying(&unknown, "unknown fault \"flood\"");
    let loss_alone = sim_protocol(&["--loss", "0.05"]);
    fails_saying(&loss_alone, "--elements");
    let not_a_rate = sim_protocol(&["--elements", "64", "--loss", "2"]);
    fails_saying(&not_a_rate, "not a probability");
}
