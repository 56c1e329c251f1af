//! PyTorch over inagg, end to end: `torchrun` ranks training
//! examples/torch/train.py with DDP, their gradients summed through the
//! emulator at 1% loss by the `inagg.torch` communication hook, and the
//! `inagg` torch.distributed backend against gloo's.
//!
//! ```text
//!   torchrun: 4 ranks (python, torch, gloo for everything else)
//!        │ inagg.torch hook / backend ── libinagg_capi.so ── UDP ──> emulator (1% loss)
//!        └ controller: the job by name, each rank registers
//! ```
//!
//! Needs a Python with torch: $INAGG_TORCH_PYTHON, else
//! target/torch-venv/bin/python (scripts/test makes it with pip). Without
//! one, each test says "skipped" and passes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use inagg_controller::Controller;
use inagg_controller_api::Client;
use inagg_controller_api::JobDecl;
use inagg_emu::{FaultConfig, SwitchConfig};
use inagg_netio::tls::{ClientTls, ServerTls};
use inagg_testbed::local::LocalCluster;
use inagg_testbed::pki::Pki;
use serde_json::Value;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn torch_python() -> Result<PathBuf, String> {
    inagg_testbed::torch::torch_python(repo())
}

macro_rules! python_or_skip {
    () => {
        match torch_python() {
            Ok(p) => p,
            Err(why) => {
                inagg_testbed::skip::skip("torch", &why);
                return;
            }
        }
    };
}

/// libinagg_capi.so, built beside this test's executable.
fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().join("libinagg_capi.so")
}

/// `python` with this checkout's package and the library built for this
/// test.
fn python_env(python: &Path) -> Command {
    let mut c = inagg_testbed::torch::python_here(python, repo());
    c.env("INAGG_LIBRARY", library());
    c
}

/// Held by each test while its ranks run (see [`torchrun`]).
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `torchrun --standalone --nproc-per-node N script args...`, with the
/// library cargo built for this test.
/// One at a time: each is four ranks of torch on the machine's cores; the
/// script's watchdog turns a hang into a failure with each rank's stack.
fn torchrun(python: &Path, ranks: usize, script: &str, args: &[&str]) -> Output {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    inagg_testbed::torch::torchrun(python, repo(), ranks, script)
        .env("INAGG_LIBRARY", library())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .expect("torchrun")
}

/// The emulator at `loss` and a controller holding job `name` for `count`
/// workers.
struct Site {
    /// None once [`Site::stop_switch`] stopped it.
    cluster: Option<LocalCluster>,
    controller: Controller,
    state: PathBuf,
}

impl Site {
    fn start(loss: f64, jobs: &[(&str, u16)]) -> Site {
        Site::start_tls(loss, jobs, None)
    }

    /// [`Site::start`] with TLS on the controller's API, its certificate
    /// from `pki`.
    fn start_tls(loss: f64, jobs: &[(&str, u16)], pki: Option<&Pki>) -> Site {
        Site::start_on(loss, jobs, pki, None)
    }

    /// [`Site::start_tls`] with the emulator's shared-memory socket at
    /// `shm` too.
    fn start_on(loss: f64, jobs: &[(&str, u16)], pki: Option<&Pki>, shm: Option<&Path>) -> Site {
        let cluster = LocalCluster::start_config(inagg_emu::EmulatorConfig {
            faults: FaultConfig::loss(loss, 7),
            switch: SwitchConfig {
                slots: 256,
                ..SwitchConfig::default()
            },
            shm: shm.map(Path::to_path_buf),
            ..inagg_emu::EmulatorConfig::ephemeral()
        })
        .unwrap();
        let state = std::env::temp_dir().join(format!(
            "inagg-torch-{}-{}.redb",
            std::process::id(),
            jobs[0].0
        ));
        let _ = std::fs::remove_file(&state);
        let server = pki.map(|p| ServerTls::load(&p.server(false)).unwrap());
        let controller = cluster.controller_tls(&state, server).unwrap();
        let client_tls = pki.map(|p| ClientTls::load(&p.client(false)).unwrap());
        let mut client = Client::connect_tls(controller.addr(), None, client_tls.as_ref()).unwrap();
        for &(name, workers) in jobs {
            client
                .create_job(JobDecl {
                    name: name.into(),
                    workers,
                    slots: 64,
                    elements: 64,
                    fallback: false,
                    endpoints: None,
                    queues: Vec::new(),
                })
                .unwrap();
        }
        Site {
            cluster: Some(cluster),
            controller,
            state,
        }
    }

    fn addr(&self) -> String {
        self.controller.addr().to_string()
    }

    /// Stops the emulator: the switch is gone, the controller stays.
    fn stop_switch(&mut self) {
        if let Some(cluster) = self.cluster.take() {
            cluster.emu.stop();
        }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.state);
    }
}

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("inagg-torch-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Each rank's record from train.py --json.
fn records(prefix: &Path, ranks: usize) -> Vec<Value> {
    (0..ranks)
        .map(|r| {
            let file = format!("{}.{r}", prefix.display());
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap()
        })
        .collect()
}

fn losses(record: &Value) -> Vec<f64> {
    record["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect()
}

/// Four ranks train the example's network through the emulator at 1% loss
/// and through gloo, from the same seed. Every inagg rank ends with the
/// same parameters, bit for bit (each all-reduce hands every rank the same
/// sum); the loss curve follows gloo's within 1e-3 per epoch and the test
/// accuracy within 0.03. Where the 1e-3 comes from: a float sum through
/// inagg is off by at most 4 n^2 m / 2^31 + 2^-23 |sum| (docs/PROTOCOL.md,
/// m the block's largest gradient), gloo's by its own f32 rounding, so one
/// step's parameters differ by about 2^-22 of the update at most; SGD with
/// momentum 0.9 sums such differences over about 10 steps, and a hundred
/// steps over four epochs keep the network's loss within 1e-4 in the runs
/// measured, which 1e-3 covers tenfold.
#[test]
fn ddp_training_through_inagg_follows_gloo_at_one_percent_loss() {
    let python = python_or_skip!();
    let site = Site::start(0.01, &[("digits", 4)]);
    let dir = scratch("train");
    let ours = dir.join("inagg");
    let out = torchrun(
        &python,
        4,
        "examples/torch/train.py",
        &[
            "--backend=inagg",
            &format!("--controller={}", site.addr()),
            "--job=digits",
            "--epochs=4",
            &format!("--json={}", ours.display()),
        ],
    );
    assert_ok(&out, "training through inagg");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("epoch 4: loss") && stdout.contains("test accuracy"),
        "{stdout}"
    );
    let theirs = dir.join("gloo");
    let out = torchrun(
        &python,
        4,
        "examples/torch/train.py",
        &[
            "--backend=gloo",
            "--epochs=4",
            &format!("--json={}", theirs.display()),
        ],
    );
    assert_ok(&out, "training through gloo");
    let ours = records(&ours, 4);
    let theirs = records(&theirs, 4);
    for r in &ours[1..] {
        assert_eq!(
            r["checksum"], ours[0]["checksum"],
            "ranks' parameters differ"
        );
    }
    let (a, b) = (losses(&ours[0]), losses(&theirs[0]));
    assert_eq!(a.len(), 4);
    for (x, y) in a.iter().zip(&b) {
        assert!(
            (x - y).abs() <= 1e-3,
            "loss curves part: inagg {a:?}, gloo {b:?}"
        );
    }
    assert!(a[3] < a[0], "the loss did not fall: {a:?}");
    let (x, y) = (
        ours[0]["accuracy"].as_f64().unwrap(),
        theirs[0]["accuracy"].as_f64().unwrap(),
    );
    assert!((x - y).abs() <= 0.03, "accuracy: inagg {x}, gloo {y}");
    let _ = std::fs::remove_dir_all(dir);
}

/// Mixed precision: buckets summed as float16 and as bfloat16
/// (HookState(dtype=...)), under autocast with GradScaler; rank 1 makes
/// its loss infinite at step 3, the bucket's chunks come back NaN on every
/// rank, and every rank's scaler skips that step: the ranks stay equal.
#[test]
fn sixteen_bit_buckets_and_an_inf_on_one_rank_skip_the_step_everywhere() {
    let python = python_or_skip!();
    let site = Site::start(0.01, &[("f16", 4), ("bf16", 4)]);
    let dir = scratch("amp");
    for (job, dtype) in [("f16", "f16"), ("bf16", "bf16")] {
        let prefix = dir.join(job);
        let out = torchrun(
            &python,
            4,
            "examples/torch/train.py",
            &[
                "--backend=inagg",
                &format!("--controller={}", site.addr()),
                &format!("--job={job}"),
                "--epochs=1",
                "--amp=f16",
                &format!("--bucket-dtype={dtype}"),
                "--inject-inf=3",
                &format!("--json={}", prefix.display()),
            ],
        );
        assert_ok(&out, job);
        let records = records(&prefix, 4);
        for r in &records {
            assert_eq!(r["checksum"], records[0]["checksum"], "{job}: ranks differ");
            assert_eq!(
                r["skipped"], records[0]["skipped"],
                "{job}: ranks skipped differently"
            );
            let skipped = r["skipped"].as_array().unwrap();
            assert!(
                skipped.iter().any(|s| s.as_u64() == Some(3)),
                "{job}: step 3 not skipped: {skipped:?}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A rank that dies mid-epoch: the other ranks' next all-reduce fails
/// within the workers' timeout (5 s here), with inagg's message, and each
/// exits non-zero instead of hanging. Started by hand, not with torchrun
/// (which would stop the others itself).
#[test]
fn a_killed_rank_makes_the_others_fail_within_the_timeout() {
    let python = python_or_skip!();
    let site = Site::start(0.0, &[("dies", 4)]);
    let port = inagg_testbed::ports::tcp().port();
    let mut ranks: Vec<_> = (0..4)
        .map(|r| {
            python_env(&python)
                .arg(repo().join("examples/torch/train.py"))
                .args([
                    "--backend=inagg",
                    &format!("--controller={}", site.addr()),
                    "--job=dies",
                    "--epochs=3",
                    "--timeout=5",
                    "--die-at=5",
                ])
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("WORLD_SIZE", "4")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let died = ranks.remove(1).wait().unwrap();
    let at = Instant::now();
    assert_eq!(died.code(), Some(3), "rank 1 should have exited at step 5");
    for (i, rank) in ranks.into_iter().enumerate() {
        let out = rank.wait_with_output().unwrap();
        let waited = at.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "rank {i} succeeded without rank 1");
        // Bounded, not timed: twelve times the 5 s timeout, room for a
        // busy machine's start-up; a rank that hung would never come.
        assert!(
            waited < Duration::from_secs(60),
            "rank {i} took {waited:?} to fail"
        );
        assert!(
            stderr.contains("no result from the switch"),
            "rank {i} failed without inagg's message: {stderr}"
        );
    }
}

/// The registered backend: `init_process_group("inagg")`, all_reduce SUM
/// and AVG of float32 tensors of 1, 63, 64, 65 and 10^6 + 7 elements through
/// the switch, against gloo's on the same tensors, within the bound of
/// docs/PROTOCOL.md plus gloo's own rounding: 4 n^2 m / 2^31 + 2^-23 |sum|
/// for inagg, (n - 1) 2^-23 n m for gloo's ring, m the largest magnitude.
/// An int32 all_reduce (gloo's, through the same group) is exact. The
/// ranks register over TLS (`register_backend(..., tls_ca=...)`).
#[test]
fn the_inagg_backend_all_reduces_like_gloo() {
    let python = python_or_skip!();
    let dir = scratch("backend");
    let pki = Pki::new(&dir.join("pki")).unwrap();
    let site = Site::start_tls(0.01, &[("backend", 4)], Some(&pki));
    let out_prefix = dir.join("rank");
    let spec = serde_json::json!({
        "controller": site.addr(), "job": "backend", "out": out_prefix.to_str().unwrap(),
        "tls_ca": pki.ca,
    });
    let out = torchrun(
        &python,
        4,
        "tests/python/torch_backend.py",
        &[&spec.to_string()],
    );
    assert_ok(&out, "the backend script");
    check_backend_records(&out_prefix);
    let _ = std::fs::remove_dir_all(dir);
}

/// The same script with the ranks' workers on the emulator's shared
/// memory (`register_backend(..., backend="shm", shm=PATH)`), at 1% loss.
#[test]
fn the_inagg_backend_all_reduces_over_shared_memory() {
    let python = python_or_skip!();
    let dir = scratch("backend-shm");
    let shm = dir.join("emu.sock");
    let site = Site::start_on(0.01, &[("backendshm", 4)], None, Some(&shm));
    let out_prefix = dir.join("rank");
    let spec = serde_json::json!({
        "controller": site.addr(), "job": "backendshm", "out": out_prefix.to_str().unwrap(),
        "shm": shm,
    });
    let out = torchrun(
        &python,
        4,
        "tests/python/torch_backend.py",
        &[&spec.to_string()],
    );
    assert_ok(&out, "the backend script over shared memory");
    check_backend_records(&out_prefix);
    let _ = std::fs::remove_dir_all(dir);
}

/// Each rank's record of tests/python/torch_backend.py: the inagg group's
/// sums within the bound of the gloo group's, AVG too, and the int64
/// all-reduce (through gloo) exact.
fn check_backend_records(out_prefix: &Path) {
    let n = 4.0f64;
    for record in records(out_prefix, 4) {
        assert_eq!(record["backend"], "inagg");
        let results = record["results"].as_array().unwrap();
        assert_eq!(results.len(), 5);
        for r in results {
            let m = r["largest"].as_f64().unwrap();
            let bound = m * (4.0 * n * n / 2f64.powi(31) + n * 2f64.powi(-23))
                + (n - 1.0) * n * m * 2f64.powi(-23);
            let err = r["max_error"].as_f64().unwrap();
            assert!(err <= bound, "{r}: error {err} above {bound}");
            let mean_err = r["mean_error"].as_f64().unwrap();
            assert!(
                mean_err <= bound / n,
                "{r}: AVG error {mean_err} above {}",
                bound / n
            );
        }
        let ints: Vec<i64> = record["ints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect();
        assert_eq!(ints, (0..10).map(|i| i * 10).collect::<Vec<i64>>());
    }
}

/// Every collective on an "inagg" group (tests/python/torch_collectives.py):
/// all_reduce SUM and AVG of float32, float16 and bfloat16 through the
/// switch, MAX and PRODUCT and int64 through gloo, broadcast, the gathers,
/// reduce_scatter, reduce, scatter, all_to_all, barrier, the object
/// collectives and send/recv, each with the exact values every rank must
/// hold; DDP(model) built on the group, with and without inagg's hook,
/// every rank's parameters identical after three steps; groups: ranks 0
/// and 1 through their own job, ranks 2 and 3 and the whole world through
/// gloo (no job for them), and the default group's all_reduce still
/// through the switch afterwards; the coalesced forms torch's coalescing
/// manager calls on the group.
///
/// On a loaded machine this is where a group that left gloo's collectives
/// to torch's dispatch hangs every rank in gloo: see `ProcessGroupInagg`
/// in capi/python/inagg/torch.py.
#[test]
fn every_collective_works_on_an_inagg_group() {
    let python = python_or_skip!();
    let site = Site::start(0.0, &[("coll", 4), ("coll.ranks-0-1", 2), ("coll.hook", 4)]);
    let dir = scratch("collectives");
    let out_prefix = dir.join("rank");
    let spec = serde_json::json!({
        "controller": site.addr(), "job": "coll", "out": out_prefix.to_str().unwrap(),
        "mode": "collectives",
    });
    let out = torchrun(
        &python,
        4,
        "tests/python/torch_collectives.py",
        &[&spec.to_string()],
    );
    assert_ok(&out, "the collectives script");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("the group of ranks [2, 3] goes through gloo: job 'coll.ranks-2-3'"),
        "{stderr}"
    );
    for record in records(&out_prefix, 4) {
        let checks = record["checks"].as_array().unwrap();
        let failed: Vec<_> = checks.iter().filter(|c| c["ok"] != true).collect();
        assert!(failed.is_empty(), "rank {}: {failed:?}", record["rank"]);
        // 29 on every rank; reduce and gather are checked on rank 0 and
        // send/recv on rank 1, where they land.
        let want = match record["rank"].as_u64().unwrap() {
            0 => 31,
            1 => 30,
            _ => 29,
        };
        assert_eq!(checks.len(), want, "rank {}: {checks:?}", record["rank"]);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A peer gone: the other ranks' next `dist.all_reduce` on the inagg group
/// raises within the workers' timeout (3 s here) with inagg's message, and
/// leaves the tensor as it was, never reduced in part; an async
/// all_reduce's `wait()` raises too (the group's worker has failed).
#[test]
fn a_failed_all_reduce_raises_on_every_rank() {
    let python = python_or_skip!();
    let site = Site::start(0.0, &[("gone", 4)]);
    let dir = scratch("dead-peer");
    let out_prefix = dir.join("rank");
    let spec = serde_json::json!({
        "controller": site.addr(), "job": "gone", "out": out_prefix.to_str().unwrap(),
        "mode": "dead_peer", "timeout": 3,
    });
    let out = torchrun(
        &python,
        4,
        "tests/python/torch_collectives.py",
        &[&spec.to_string()],
    );
    assert_ok(&out, "the dead-peer script");
    for record in records(&out_prefix, 4) {
        assert_eq!(record["first"], serde_json::json!([4.0, 4.0, 4.0, 4.0]));
        if record["rank"] != 1 {
            assert_raised(&record);
        }
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// A rank's record after a failed all_reduce: raised with inagg's message
/// within a bound, its tensor its own, and an async all_reduce's `wait()`
/// raised too.
fn assert_raised(record: &Value) {
    let rank = record["rank"].as_u64().unwrap();
    let raised = record["raised"]
        .as_str()
        .unwrap_or_else(|| panic!("rank {rank}: all_reduce returned without a sum: {record}"));
    assert!(raised.contains("no result from the switch"), "{raised}");
    let own = (rank + 1) as f64;
    assert_eq!(record["after"], serde_json::json!([own, own, own, own]));
    // Bounded, not timed: the 3 s timeout, with room for a busy machine.
    assert!(record["seconds"].as_f64().unwrap() < 60.0, "{record}");
    let wait = record["wait_raised"]
        .as_str()
        .unwrap_or_else(|| panic!("rank {rank}: wait() succeeded after a failure: {record}"));
    assert!(wait.contains("no result from the switch"), "{wait}");
}

/// The switch stopped after one all_reduce: every rank's next
/// `dist.all_reduce` and async `wait()` raise within the timeout, and no
/// rank's tensor is handed back as a sum.
#[test]
fn a_stopped_switch_makes_every_rank_raise() {
    let python = python_or_skip!();
    let mut site = Site::start(0.0, &[("stopped", 4)]);
    let dir = scratch("dead-switch");
    let out_prefix = dir.join("rank");
    let spec = serde_json::json!({
        "controller": site.addr(), "job": "stopped", "out": out_prefix.to_str().unwrap(),
        "mode": "dead_switch", "timeout": 3,
    });
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let child =
        inagg_testbed::torch::torchrun(&python, repo(), 4, "tests/python/torch_collectives.py")
            .env("INAGG_LIBRARY", library())
            .arg(spec.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("torchrun");
    let ready = |r: usize| PathBuf::from(format!("{}.ready.{r}", out_prefix.display()));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    while !(0..4).all(|r| ready(r).exists()) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    site.stop_switch();
    std::fs::write(format!("{}.go", out_prefix.display()), b"").unwrap();
    let out = child.wait_with_output().expect("torchrun");
    assert_ok(&out, "the dead-switch script");
    for record in records(&out_prefix, 4) {
        assert_eq!(record["first"], serde_json::json!([4.0, 4.0, 4.0, 4.0]));
        assert_raised(&record);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// PyTorch's own distributed tests (torch.testing's DistributedTest, which
/// PyTorch runs for gloo, nccl and ucc) on the "inagg" backend, two ranks
/// per test through the controller's job, by tests/python/
/// torch_distributed_test.py: a selection of the collectives and DDP tests
/// that torch does not gate to its own backends, every one passing. The
/// whole class is run by hand (docs/GUIDE.md, "PyTorch").
#[test]
fn pytorchs_distributed_tests_pass_on_the_inagg_backend() {
    let python = python_or_skip!();
    if !inagg_testbed::torch::imports(&python, "expecttest") {
        let why = format!(
            "{} has no expecttest (scripts/test installs it)",
            python.display()
        );
        inagg_testbed::skip::skip("torch", &why);
        return;
    }
    let site = Site::start(0.0, &[("judge", 2)]);
    let temp = scratch("judge");
    let mut command = python_env(&python);
    command
        .arg(repo().join("tests/python/torch_distributed_test.py"))
        .env("INAGG_CONTROLLER", site.addr())
        .env("INAGG_JOB", "judge")
        .env("WORLD_SIZE", "2")
        .env("TEMP_DIR", &temp);
    for pattern in JUDGED {
        command.args(["-k", pattern]);
    }
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let out = command.output().expect("python");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let ran: usize = stderr
        .lines()
        .find_map(|l| l.strip_prefix("Ran ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no summary: {stderr}"));
    let skipped: usize = stderr
        .lines()
        .find_map(|l| {
            l.split("skipped=")
                .nth(1)?
                .trim_end_matches(')')
                .parse()
                .ok()
        })
        .unwrap_or(0);
    eprintln!("torch's distributed tests: {ran} ran, {skipped} of them skipped");
    assert!(
        ran - skipped >= JUDGED_AT_LEAST,
        "{ran} ran, {skipped} skipped: {stderr}"
    );
    let _ = std::fs::remove_dir_all(temp);
}

/// The tests of torch's DistributedTest that
/// [`pytorchs_distributed_tests_pass_on_the_inagg_backend`] runs (`-k`
/// patterns: substrings of test names): all_reduce through the switch
/// (sync, async, complex, the whole group, a subgroup), the collectives
/// gloo carries, send/recv, DDP on the CPU, destroying groups.
const JUDGED: &[&str] = &[
    "test_all_reduce_sum",
    "test_all_reduce_full_group_sum",
    "test_all_reduce_group_sum",
    "test_all_reduce_max",
    "test_all_gather_full_group",
    "test_broadcast_full_group",
    "test_reduce_sum",
    "test_scatter_full_group",
    "test_gather_full_group",
    "test_barrier_full_group",
    "test_send_recv_with_tag",
    "test_DistributedDataParallelCPU",
    "test_static_graph_api_cpu",
    "test_ddp_native_mixed_precision_ignored_params",
    "test_destroy_full_group",
];
/// Of them, how many must run rather than skip (torch gates the others to
/// its own backends or to CUDA).
const JUDGED_AT_LEAST: usize = 19;
