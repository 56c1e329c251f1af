//! `inagg bench --torch`: PyTorch DDP training with gradients summed by
//! inagg's communication hook next to gloo's ring all-reduce, same model
//! (examples/torch/train.py), same machine, same run; and the all-reduce
//! alone for ResNet-50's 25.6M float32 parameters.
//!
//! The emulator runs lossless in this process, with a controller that
//! holds one job per rank count, with the emulator's own packet size and a
//! small pool (`inagg demo`'s choice: the largest datagram, K = 16370, and
//! 16 slots, whose packets stay in cache). The ranks run under `torchrun` with the Python that has
//! torch ([`torch_python`]).

use std::io::Write;
use std::path::Path;
use std::process::Stdio;

use anyhow::{bail, Context, Result};
use inagg_controller_api::Client;
use inagg_controller_api::JobDecl;
use inagg_emu::FaultConfig;
use serde_json::Value;

use inagg_testbed::local::LocalCluster;
use inagg_testbed::torch::{torch_python, torchrun};

/// ResNet-50's parameters.
const RESNET50: usize = 25_557_032;

/// The C library the ranks load, built in release first (cargo does
/// nothing when it is up to date): the test command builds the debug one,
/// and an older build would measure older code.
fn capi_library(repo: &Path) -> Result<std::path::PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(&cargo)
        .args(["build", "--release", "--quiet", "-p", "inagg-capi"])
        .current_dir(repo)
        .status()
        .with_context(|| {
            format!("inagg bench --torch: running {cargo:?} to build the C library")
        })?;
    if !status.success() {
        bail!("inagg bench --torch: cargo build --release -p inagg-capi failed ({status})");
    }
    let library = repo.join("target/release/libinagg_capi.so");
    if !library.exists() {
        bail!(
            "inagg bench --torch: {} is missing after the build",
            library.display()
        );
    }
    Ok(library)
}

/// Runs the benchmark and prints its table.
pub fn run(repeat: usize, out: &mut dyn Write) -> Result<()> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = torch_python(repo).map_err(|e| anyhow::anyhow!("inagg bench --torch: {e}"))?;
    let library = capi_library(repo)?;
    let scratch = std::env::temp_dir().join(format!("inagg-bench-torch-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let shm = scratch.join("emu.sock");
    let cluster = LocalCluster::start_shm(FaultConfig::default(), &shm)?;
    let controller = cluster.controller(&scratch.join("controller.redb"))?;
    let mut client = Client::connect(controller.addr(), None)?;
    for ranks in [2u16, 4] {
        for job in ["train", "alone", "shm"] {
            client.create_job(JobDecl {
                name: format!("{job}{ranks}"),
                workers: ranks,
                slots: 16,
                elements: inagg_wire::MAX_ELEMENTS as u16,
                fallback: false,
                endpoints: None,
                queues: Vec::new(),
            })?;
        }
    }
    let addr = controller.addr().to_string();
    writeln!(
        out,
        "DDP on examples/torch/train.py (4 epochs), per step, ms:"
    )?;
    writeln!(
        out,
        "| ranks | backend | step | computation | communication (overlaps) |"
    )?;
    writeln!(out, "|---:|---|---:|---:|---:|")?;
    for ranks in [2usize, 4] {
        for backend in ["inagg", "gloo"] {
            let prefix = scratch.join(format!("{backend}{ranks}"));
            let status = torchrun(&python, repo, ranks, "examples/torch/train.py")
                .env("INAGG_LIBRARY", &library)
                .arg(format!("--backend={backend}"))
                .arg(format!("--controller={addr}"))
                .arg(format!("--job=train{ranks}"))
                .arg("--epochs=4")
                .arg(format!("--json={}", prefix.display()))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .context("torchrun")?;
            if !status.success() {
                bail!("training with {backend} on {ranks} ranks failed ({status})");
            }
            let r = record(&format!("{}.0", prefix.display()))?;
            let (step, comm) = (f(&r, "step_ms"), f(&r, "comm_ms"));
            writeln!(
                out,
                "| {ranks} | {backend} | {step:.2} | {:.2} | {comm:.2} |",
                (step - comm).max(0.0)
            )?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "all_reduce of {RESNET50} float32 (ResNet-50), median of {repeat}, s:"
    )?;
    writeln!(
        out,
        "| ranks | inagg backend (UDP) | gloo | inagg backend (shared memory) | gloo | shm / gloo |"
    )?;
    writeln!(out, "|---:|---:|---:|---:|---:|---:|")?;
    for ranks in [2usize, 4] {
        let alone = |job: &str, shm: Option<&Path>| -> Result<Value> {
            let file = scratch.join(format!("{job}{ranks}.json"));
            let spec = serde_json::json!({
                "controller": addr, "job": format!("{job}{ranks}"), "elements": RESNET50,
                "repeat": repeat, "out": file, "shm": shm,
            });
            let status = torchrun(&python, repo, ranks, "examples/torch/allreduce_bench.py")
                .env("INAGG_LIBRARY", &library)
                .arg(spec.to_string())
                .stdout(Stdio::null())
                .status()
                .context("torchrun")?;
            if !status.success() {
                bail!("the all-reduce alone on {ranks} ranks ({job}) failed ({status})");
            }
            record(&file.display().to_string())
        };
        let (udp, over_shm) = (alone("alone", None)?, alone("shm", Some(&shm))?);
        writeln!(
            out,
            "| {ranks} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} |",
            f(&udp, "inagg"),
            f(&udp, "gloo"),
            f(&over_shm, "inagg"),
            f(&over_shm, "gloo"),
            f(&over_shm, "inagg") / f(&over_shm, "gloo")
        )?;
    }
    let _ = std::fs::remove_dir_all(scratch);
    Ok(())
}

fn record(path: &str) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {path}"))?;
    Ok(serde_json::from_str(&text)?)
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or(f64::NAN)
}
