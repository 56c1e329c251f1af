//! The C library (`capi/`, libinagg_capi.so) and the Python package over it,
//! end to end: Python processes and a C program as the workers of jobs on
//! the emulator, over real UDP on loopback, with loss.
//!
//! ```text
//!   python3 (ranks 0, 1 on threads) ──┐
//!   python3 (rank 2)               ───┼── UDP ──> emulator (loss) ──> results to every rank
//!   C program                      ───┘
//! ```
//!
//! The workers write each call's input and result to files; the sums are
//! checked here with the verifier the Rust suites use (int32 exactly,
//! floats within docs/PROTOCOL.md's bound).

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Stdio};

use inagg_controller_api::Client;
use inagg_controller_api::JobDecl;
use inagg_emu::{DropReason, FaultConfig, JobSpec, SwitchConfig};
use inagg_host_agent::float::Float;
use inagg_host_agent::{bf16, f16};
use inagg_netio::tls::{ClientTls, ServerTls};
use inagg_switch_control::target::install_job;
use inagg_switch_control::EmuTarget;
use inagg_testbed::local::LocalCluster;
use inagg_testbed::pki::Pki;
use inagg_testbed::verify::{check_float, check_i32};
use serde_json::{json, Value};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// libinagg_capi.so: cargo builds it beside this test's executable, as the
/// cdylib of a dev-dependency.
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let lib = exe.parent().unwrap().join("libinagg_capi.so");
    assert!(lib.exists(), "{} missing", lib.display());
    lib
}

fn python() -> Command {
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", repo().join("capi/python"))
        .env("INAGG_LIBRARY", library())
        .env("PYTHONDONTWRITEBYTECODE", "1");
    c
}

/// A scratch directory for one test's tensors.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("inagg-capi-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// One `tests/python/worker.py` process, between its two report lines.
struct PyWorkers {
    child: Child,
    stdout: BufReader<ChildStdout>,
    /// The address each rank bound.
    locals: Vec<SocketAddr>,
}

impl PyWorkers {
    /// Starts the process and waits for its workers to be bound.
    fn start(spec: Value) -> PyWorkers {
        PyWorkers::start_with(python(), spec)
    }

    /// The same, with the package found however `python` finds it.
    fn start_with(mut python: Command, spec: Value) -> PyWorkers {
        let mut child = python
            .arg(repo().join("tests/python/worker.py"))
            .arg(spec.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 (scripts/deps installs what the tests need)");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let first = read_json(&mut stdout);
        assert_eq!(first["errors"], json!([]), "{first}");
        let locals = first["locals"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().parse().unwrap())
            .collect();
        PyWorkers {
            child,
            stdout,
            locals,
        }
    }

    /// Lets the workers run their calls.
    fn go(&mut self) {
        writeln!(self.child.stdin.as_mut().unwrap(), "go").unwrap();
    }

    /// Waits for the calls to end; each rank's stats per call.
    fn finish(mut self) -> Vec<Value> {
        let last = read_json(&mut self.stdout);
        let status = self.child.wait().unwrap();
        assert_eq!(last["errors"], json!([]), "{last}");
        assert!(status.success(), "{last}");
        last["stats"].as_array().unwrap().clone()
    }
}

fn read_json(r: &mut impl BufRead) -> Value {
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
}

/// The values of `dir/RANK-NAME.EXT` for every rank (raw little-endian
/// elements of `N` bytes).
fn tensors<T, const N: usize>(
    dir: &Path,
    ranks: u16,
    name: &str,
    ext: &str,
    f: fn([u8; N]) -> T,
) -> Vec<Vec<T>> {
    (0..ranks)
        .map(|r| {
            let bytes = std::fs::read(dir.join(format!("{r}-{name}.{ext}"))).unwrap();
            bytes
                .chunks_exact(N)
                .map(|c| f(c.try_into().unwrap()))
                .collect()
        })
        .collect()
}

/// Checks the float sums of tensor `name` from the ranks' files.
fn check_float_sums<T: Float, const N: usize>(
    dir: &Path,
    ranks: u16,
    name: &str,
    len: usize,
    k: usize,
    f: fn([u8; N]) -> T,
) {
    let input = tensors(dir, ranks, name, "in", f);
    let output = tensors(dir, ranks, name, "out", f);
    assert!(input.iter().chain(&output).all(|t| t.len() == len));
    if len > 0 {
        let check = check_float(&input, &output, k);
        assert!(check.verified, "{name} ({}): {check:?}", T::NAME);
    }
}

/// Checks the sums of tensor `name` (`len` elements of `kind`) on `ranks`
/// workers from their files.
fn check_sums(dir: &Path, ranks: u16, name: &str, kind: &str, len: usize, k: usize) {
    match kind {
        "i32" => {
            let input = tensors(dir, ranks, name, "in", i32::from_le_bytes);
            let output = tensors(dir, ranks, name, "out", i32::from_le_bytes);
            assert!(input.iter().chain(&output).all(|t| t.len() == len));
            if len > 0 {
                check_i32(&input, &output).unwrap_or_else(|e| panic!("{name}: {e}"));
            }
        }
        "f32" => check_float_sums(dir, ranks, name, len, k, f32::from_le_bytes),
        "f16" => check_float_sums(dir, ranks, name, len, k, f16::from_le_bytes),
        "bf16" => check_float_sums(dir, ranks, name, len, k, bf16::from_le_bytes),
        other => panic!("kind {other}"),
    }
}

/// Checks every call of `calls` on `ranks` workers from their files.
fn check_calls(dir: &Path, ranks: u16, calls: &Value, k: usize) {
    for (c, call) in calls.as_array().unwrap().iter().enumerate() {
        let len = call["len"].as_u64().unwrap() as usize;
        let kind = call["kind"].as_str().unwrap();
        check_sums(dir, ranks, &format!("{c}"), kind, len, k);
    }
}

fn install(cluster: &LocalCluster, id: u16, workers: Vec<SocketAddr>, pool: (u32, u32), k: u16) {
    let spec = JobSpec::new(id, workers, pool.0, pool.1, k);
    let mut target = EmuTarget::connect(cluster.control_addr()).unwrap();
    install_job(&mut target, &spec).unwrap();
}

fn lossy(p: f64, seed: u64) -> LocalCluster {
    LocalCluster::start(FaultConfig {
        duplicate: 0.01,
        reorder: 0.01,
        ..FaultConfig::loss(p, seed)
    })
    .unwrap()
}

/// Three ranks in two Python processes (two on threads of one: the
/// library releases the GIL while it waits), every buffer kind the package
/// takes, 2% loss each way with duplicates and reordering.
#[test]
fn python_workers_all_reduce_every_buffer_kind_under_loss() {
    let cluster = lossy(0.02, 21);
    let dir = scratch("kinds");
    let calls = json!([
        {"kind": "i32", "container": "array", "len": 30001},
        {"kind": "f32", "container": "numpy", "len": 40000},
        {"kind": "f32", "container": "numpy2d", "len": 7000},
        {"kind": "i32", "container": "numpy", "len": 5000},
        {"kind": "f32", "container": "array", "len": 0},
        {"kind": "f32", "container": "array", "len": 100},
        {"kind": "f16", "container": "numpy", "len": 9000},
        {"kind": "bf16", "container": "numpy2d", "len": 7007},
    ]);
    let options = json!({
        "switch": cluster.emu.data_addr().to_string(),
        "job": 4, "workers": 3, "pool_size": 32, "elements": 64, "timeout": 30,
    });
    let spec = |ranks: &[u16]| {
        json!({"ranks": ranks, "options": options, "calls": calls, "seed": 5,
               "out": dir.to_str().unwrap()})
    };
    let mut a = PyWorkers::start(spec(&[0, 1]));
    let mut b = PyWorkers::start(spec(&[2]));
    let endpoints = a.locals.iter().chain(&b.locals).copied().collect();
    install(&cluster, 4, endpoints, (0, 32), 64);
    a.go();
    b.go();
    let stats: Vec<Value> = a.finish().into_iter().chain(b.finish()).collect();
    check_calls(&dir, 3, &calls, 64);

    let retransmissions: u64 = stats
        .iter()
        .flat_map(|rank| rank.as_array().unwrap())
        .map(|call| call["retransmissions"].as_u64().unwrap())
        .sum();
    assert!(retransmissions > 0, "loss was injected: {stats:?}");
    // The call of 30001 int32 at K = 64 sends 469 chunks per worker, and
    // the stats say so (retransmissions and handshakes on top).
    let first = &stats[0].as_array().unwrap()[0];
    assert_eq!(first["payload_bytes"], 30001 * 4);
    assert!(first["packets_sent"].as_u64().unwrap() >= 469, "{first}");
    let c = cluster.emu.state().switch.counters().clone();
    assert!(c.dropped(DropReason::InjectedIngress) > 0, "{c:?}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Python workers with `backend=shm` reach the emulator through shared
/// memory (`inagg emu --shm`), beside one on UDP in the same job; every
/// sum checked; a shared-memory worker with no emulator socket is an
/// exception that says so.
#[test]
fn python_workers_all_reduce_over_shared_memory() {
    let dir = scratch("shm");
    let path = dir.join("emu.sock");
    let cluster = LocalCluster::start_shm(FaultConfig::default(), &path).unwrap();
    let calls = json!([
        {"kind": "f32", "container": "numpy", "len": 40000},
        {"kind": "i32", "container": "array", "len": 20001},
    ]);
    let endpoints: Vec<SocketAddr> = (0..2)
        .map(|w| inagg_testbed::local::shm_endpoint(5, w))
        .collect();
    let shm_options = json!({
        "switch": cluster.emu.data_addr().to_string(), "backend": "shm",
        "shm": path.to_str().unwrap(),
        "job": 5, "workers": 3, "pool_size": 16, "elements": 64, "timeout": 30,
    });
    let udp_options = json!({
        "switch": cluster.emu.data_addr().to_string(),
        "job": 5, "workers": 3, "pool_size": 16, "elements": 64, "timeout": 30,
    });
    let mut a = PyWorkers::start(json!({
        "ranks": [0, 1], "options": shm_options, "calls": calls, "seed": 3,
        "binds": {"0": endpoints[0].to_string(), "1": endpoints[1].to_string()},
        "out": dir.to_str().unwrap(),
    }));
    let mut b = PyWorkers::start(json!({
        "ranks": [2], "options": udp_options, "calls": calls, "seed": 3,
        "out": dir.to_str().unwrap(),
    }));
    assert_eq!(a.locals, endpoints);
    let all = a.locals.iter().chain(&b.locals).copied().collect();
    install(&cluster, 5, all, (0, 16), 64);
    a.go();
    b.go();
    a.finish();
    b.finish();
    check_calls(&dir, 3, &calls, 64);
    let out = python()
        .arg("-c")
        .arg(format!(
            "import inagg\ntry:\n    inagg.Worker(backend='shm', shm={:?}, bind='127.0.0.1:9', job=1, pool_size=8, \
             worker=0, workers=2)\nexcept inagg.Error as e:\n    print('refused:', e)\n",
            dir.join("nobody.sock").to_str().unwrap()
        ))
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("refused:") && said.contains("shared-memory socket"),
        "{said}"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Layers' gradients handed over last layer first, as back-propagation
/// makes them, through a schedule from Python: every rank sees the sums
/// complete in the same order (the workers agree on it through the
/// switch); FIFO keeps the submission order, while P3 and ByteScheduler
/// finish the first layer before the last, large one.
#[test]
fn python_schedules_agree_on_an_order_and_p3_serves_the_first_layer_first() {
    let cluster = lossy(0.01, 31);
    // Layer 5, submitted first, is 64 slices of 2048: the bulk tensor.
    let layers = [3000usize, 5000, 20000, 100, 7000, 131072];
    for (job, policy, credit, kind) in [
        (10u16, "p3", 1, "i32"),
        (11, "fifo", 2, "f16"),
        (12, "bytescheduler", 2, "f32"),
        (13, "p3", 1, "bf16"),
    ] {
        let dir = scratch(policy);
        let mut p = PyWorkers::start(json!({
            "ranks": [0, 1],
            "options": {"switch": cluster.emu.data_addr().to_string(), "job": job,
                        "workers": 2, "pool_size": 16, "elements": 256, "timeout": 30},
            "schedule": {"policy": policy, "slice": 2048, "credit": credit, "dtype": kind,
                         "tensors": layers},
            "calls": [], "seed": u64::from(job), "out": dir.to_str().unwrap(),
        }));
        install(
            &cluster,
            job,
            p.locals.clone(),
            (u32::from(job) * 16, 16),
            256,
        );
        p.go();
        let stats = p.finish();
        for (l, &len) in layers.iter().enumerate() {
            check_sums(&dir, 2, &format!("s{l}"), kind, len, 256);
        }
        let order = |rank: usize| -> Vec<u64> {
            let o = &stats[rank].as_array().unwrap()[0]["order"];
            o.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        };
        assert_eq!(
            order(0),
            order(1),
            "{policy}: both ranks complete in one order"
        );
        let at = |layer: u64| order(0).iter().position(|&l| l == layer).unwrap();
        if policy == "fifo" {
            assert_eq!(
                order(0),
                [5, 4, 3, 2, 1, 0],
                "fifo keeps the submission order"
            );
        } else {
            assert!(at(0) < at(5), "{policy}: {:?}", order(0));
            assert_eq!(*order(0).last().unwrap(), 5, "{policy}: {:?}", order(0));
        }
        let epochs = stats[0].as_array().unwrap()[0]["epochs"].as_u64().unwrap();
        eprintln!(
            "{policy}: sums completed in layer order {:?}, {epochs} epochs",
            order(0)
        );
        assert!(epochs >= 64 / credit, "{policy}: {epochs} epochs");
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// Runs `cmd`, which must succeed; its standard output.
fn succeeds(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `python3 -m pip ARGS`, which must succeed (scripts/deps checks that
/// python3 has pip).
fn pip(args: &[&std::ffi::OsStr]) {
    succeeds(
        Command::new("python3")
            .args(["-m", "pip"])
            .args(args)
            .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
            .env("PIP_ROOT_USER_ACTION", "ignore"),
    );
}

/// python3 with the package pip installed into `site`, and neither the
/// checkout's package nor `$INAGG_LIBRARY` in sight.
fn installed_python(site: &Path) -> Command {
    let mut c = Command::new("python3");
    c.env("PYTHONPATH", site)
        .env_remove("INAGG_LIBRARY")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .current_dir(site);
    c
}

/// `pip install ./capi/python` gives a package that carries its library:
/// the wheel (here bundling the library this suite built, `-C library=`;
/// without it the backend runs cargo, which scripts/test exercises) builds
/// and installs with pip and no package index, and the installed package
/// loads the library beside it and all-reduces under loss with no path to
/// the checkout.
#[test]
fn the_wheel_installs_with_its_library_and_all_reduces() {
    let dir = scratch("wheel");
    let (wheels, site) = (dir.join("wheels"), dir.join("site"));
    let bundle = format!("library={}", library().display());
    pip(&[
        "wheel".as_ref(),
        "--no-deps".as_ref(),
        "--no-index".as_ref(),
        "-w".as_ref(),
        wheels.as_os_str(),
        repo().join("capi/python").as_os_str(),
        "-C".as_ref(),
        bundle.as_ref(),
    ]);
    let version = env!("CARGO_PKG_VERSION");
    let name = format!(
        "inagg-{version}-py3-none-linux_{}.whl",
        std::env::consts::ARCH
    );
    let built: Vec<_> = std::fs::read_dir(&wheels)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        built,
        [name.as_str()],
        "one wheel, tagged for any Python 3 on this platform"
    );
    pip(&[
        "install".as_ref(),
        "--no-deps".as_ref(),
        "--no-index".as_ref(),
        "--target".as_ref(),
        site.as_os_str(),
        wheels.join(&name).as_os_str(),
    ]);

    let stdout = succeeds(installed_python(&site).args([
        "-c",
        "import inagg; print(inagg.library_path()); print(inagg.__version__)",
    ]));
    let lines: Vec<&str> = stdout.lines().collect();
    let bundled = site.join("inagg/libinagg_capi.so");
    assert_eq!(lines, [bundled.to_str().unwrap(), version]);

    let cluster = lossy(0.01, 41);
    let calls = json!([
        {"kind": "f32", "container": "numpy", "len": 20000},
        {"kind": "i32", "container": "array", "len": 10001},
    ]);
    let mut p = PyWorkers::start_with(
        installed_python(&site),
        json!({
            "ranks": [0, 1],
            "options": {"switch": cluster.emu.data_addr().to_string(), "job": 6,
                        "workers": 2, "pool_size": 32, "elements": 64, "timeout": 30},
            "calls": calls, "seed": 6, "out": dir.to_str().unwrap(),
        }),
    );
    install(&cluster, 6, p.locals.clone(), (0, 32), 64);
    p.go();
    p.finish();
    check_calls(&dir, 2, &calls, 64);
    let _ = std::fs::remove_dir_all(dir);
}

fn free_port() -> SocketAddr {
    inagg_testbed::ports::udp()
}

/// Python workers that know only the controller, the job's name and their
/// rank: the controller admits them and gives the rest. Its API speaks
/// mutual TLS: the workers verify it against the CA and present a client
/// certificate (`tls_ca`, `tls_cert`, `tls_key`); a worker without the CA
/// is refused before it sends anything.
#[test]
fn python_workers_register_with_the_controller_over_tls() {
    let cluster = LocalCluster::start_with(
        FaultConfig::loss(0.01, 3),
        SwitchConfig {
            slots: 64,
            ..SwitchConfig::default()
        },
    )
    .unwrap();
    let state = std::env::temp_dir().join(format!("inagg-capi-ctl-{}.redb", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let dir = scratch("controller");
    let pki = Pki::new(&dir.join("pki")).unwrap();
    let server = ServerTls::load(&pki.server(true)).unwrap();
    let ctl = cluster.controller_tls(&state, Some(server)).unwrap();
    let tls = ClientTls::load(&pki.client(true)).unwrap();
    Client::connect_tls(ctl.addr(), None, Some(&tls))
        .unwrap()
        .create_job(JobDecl {
            name: "py".into(),
            workers: 2,
            slots: 16,
            elements: 128,
            fallback: false,
            endpoints: None,
            queues: Vec::new(),
        })
        .unwrap();
    let calls = json!([
        {"kind": "f32", "container": "numpy", "len": 20000},
        {"kind": "i32", "container": "array", "len": 20000},
    ]);
    let binds = [free_port(), free_port()];
    let mut p = PyWorkers::start(json!({
        "ranks": [0, 1],
        "binds": {"0": binds[0].to_string(), "1": binds[1].to_string()},
        "options": {"controller": ctl.addr().to_string(), "job": "py", "timeout": 30,
                    "register_wait": 30, "tls_ca": pki.ca, "tls_cert": pki.client_cert,
                    "tls_key": pki.client_key},
        "calls": calls, "seed": 9, "out": dir.to_str().unwrap(),
    }));
    assert_eq!(p.locals, binds);
    p.go();
    p.finish();
    check_calls(&dir, 2, &calls, 128);
    drop(ctl);
    let _ = std::fs::remove_file(state);
    let _ = std::fs::remove_dir_all(dir);
}

/// Bad configurations, bad buffers, a job the switch does not have, a
/// controller that is not there, schedules misused: each an exception of
/// its own kind that says why (`tests/python/test_errors.py`), and the
/// emulator counts the unknown job's packets.
#[test]
fn python_errors_are_exceptions_that_say_why() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let solo = free_port();
    install(&cluster, 5, vec![solo], (0, 8), 64);
    let out = python()
        .args(["-m", "unittest", "-v", "test_errors"])
        .current_dir(repo().join("tests/python"))
        .env("INAGG_TEST_SWITCH", cluster.emu.data_addr().to_string())
        .env("INAGG_TEST_SOLO_JOB", "5")
        .env("INAGG_TEST_SOLO_BIND", solo.to_string())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("Ran 12 tests"), "{stderr}");
    let c = cluster.emu.state().switch.counters().clone();
    assert!(c.dropped(DropReason::UnknownJob) > 0, "{c:?}");
}

/// `capi/examples/allreduce.c` built against the header with every warning
/// an error, two of it as a job's workers, and the header as C++.
#[test]
fn a_c_program_all_reduces_through_the_header() {
    let dir = scratch("c");
    let exe = dir.join("allreduce");
    let lib = library();
    let libdir = lib.parent().unwrap();
    let include = repo().join("capi/include");
    succeeds(
        Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(repo().join("capi/examples/allreduce.c"))
            .arg(format!("-I{}", include.display()))
            .arg(format!("-L{}", libdir.display()))
            .arg(format!("-Wl,-rpath,{}", libdir.display()))
            .arg("-linagg_capi"),
    );
    succeeds(
        Command::new("c++")
            .args([
                "-std=c++17",
                "-Wall",
                "-Wextra",
                "-Werror",
                "-fsyntax-only",
                "-x",
                "c++",
            ])
            .arg(include.join("inagg.h")),
    );

    let cluster = lossy(0.02, 8);
    let binds = [free_port(), free_port()];
    install(&cluster, 2, binds.to_vec(), (100, 16), 256);
    let run = |rank: usize| {
        let config = format!(
            "switch={} bind={} job=2 worker={rank} workers=2 pool_size=16 elements=256 timeout=30",
            cluster.emu.data_addr(),
            binds[rank]
        );
        Command::new(&exe)
            .arg(config)
            .arg("100000")
            .spawn()
            .unwrap()
    };
    let children = [run(0), run(1)];
    for mut c in children {
        let out = c.wait().unwrap();
        assert!(out.success());
    }
    let out = Command::new(&exe)
        .args(["job=1 worker=0 wokers=2", "10"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("config: unknown key \"wokers\"; the keys are switch, bind"),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
