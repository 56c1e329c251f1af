//! `inagg demo`: the main job. Starts the emulator, installs a job through
//! the control plane, runs N workers, all-reduces a tensor under loss
//! (float: f32, f16 or bf16; or int32), checks every worker's result (a
//! float's against an f64 reference within the documented bound, an
//! int32's for the exact sum), and reports time and throughput.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Result};
use clap::{Args, ValueEnum};
use inagg_emu::affinity::{self, Placement};
use inagg_emu::{DropReason, EmulatorConfig, FaultConfig};
use inagg_host_agent::float::Float;
use inagg_host_agent::{bf16, f16, Stats, Worker};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::args::PoolArgs;
use inagg_testbed::local::{run_all, run_all_on, JobParams, LocalCluster};
use inagg_testbed::verify::{check_float, check_i32, gradient, FloatCheck};

/// Options of `inagg demo`.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Workers in the job.
    #[arg(long, default_value_t = 4)]
    pub workers: u16,
    /// Elements in the tensor.
    #[arg(long, default_value_t = 4 << 20)]
    pub elements: usize,
    /// The tensor's format: a float one (16-bit ones are widened to f32 on
    /// the way in and rounded back on the way out; the packets are the
    /// same), or int32, summed exactly with no exponent round.
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    // K and window.
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Packet loss probability, each direction.
    #[arg(long, default_value_t = 0.01)]
    pub loss: f64,
    /// Duplication probability, each direction.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Reordering probability, each direction.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Seed for the data and the faults.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object instead of the summary.
    #[arg(long)]
    pub json: bool,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Leave the emulator's data plane and the workers wherever the OS
    /// runs them. By default, with two CPUs or more, the data plane gets
    /// the last CPU this process may use and the workers share the others:
    /// a switch is a device of its own.
    #[arg(long)]
    pub no_pin: bool,
}

/// A float format of the demo's tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// 32-bit integers, summed exactly (wrapping).
    I32,
}

impl Dtype {
    fn name(self) -> &'static str {
        match self {
            Dtype::F32 => f32::NAME,
            Dtype::F16 => f16::NAME,
            Dtype::Bf16 => bf16::NAME,
            Dtype::I32 => "i32",
        }
    }

    /// Bytes per element.
    fn size(self) -> usize {
        match self {
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }
}

/// The demo's result.
#[derive(Debug, Serialize)]
pub struct DemoReport {
    /// Every element of every worker within the bound.
    pub verified: bool,
    /// Workers.
    pub workers: u16,
    /// Tensor elements.
    pub elements: usize,
    /// Their format: f32, f16 or bf16.
    pub dtype: &'static str,
    /// Bytes per element.
    pub element_bytes: usize,
    /// K.
    pub k: u16,
    /// The most slots each worker keeps in flight (the window's ceiling).
    pub window: u32,
    /// The pool's slots beyond the window, for rounds in recovery.
    pub spare_slots: u32,
    /// Loss per direction.
    pub loss: f64,
    /// Wall time of the all-reduce (slowest worker).
    pub seconds: f64,
    /// Tensor payload per second, Gbit/s.
    pub goodput_gbps: f64,
    /// Elements reduced per second.
    pub elements_per_second: f64,
    /// Retransmissions, all workers.
    pub retransmissions: u64,
    /// Packets the fault injector dropped.
    pub injected_drops: u64,
    /// Of those, contributions and results: each needs one retransmission
    /// (queries and statuses carry no values, and need none).
    pub lost_data: u64,
    /// Of those, contributions: each is owed one retransmission (a lost
    /// result's copy is asked for by query), so retransmissions beyond
    /// these were spurious.
    pub lost_contributions: u64,
    /// UDP datagrams the kernel dropped for a full receive buffer during
    /// the run (machine-wide; `None` off Linux): real losses, besides the
    /// injected ones, whose retransmissions are not spurious.
    pub kernel_drops: Option<u64>,
    /// Details of the check.
    pub check: FloatCheck,
    /// All workers' statistics, summed.
    pub stats: Stats,
    /// The CPU the emulator's data plane was pinned to (`None`: unpinned).
    pub switch_cpu: Option<usize>,
    /// The CPUs the workers shared (empty: unpinned).
    pub worker_cpus: Vec<usize>,
}

/// Runs the demo and prints its report.
pub fn run(args: &DemoArgs) -> Result<DemoReport> {
    if args.elements == 0 || args.workers == 0 {
        bail!("--elements and --workers must be at least 1");
    }
    if usize::from(args.workers) > inagg_wire::MAX_WORKERS {
        bail!(
            "--workers {}: a job on one switch has at most {} workers",
            args.workers,
            inagg_wire::MAX_WORKERS
        );
    }
    if !(0.0..1.0).contains(&args.loss) {
        bail!("--loss {} must be in [0, 1)", args.loss);
    }
    // Each worker's gradient and its copy being reduced (the gradient is
    // made in f32 first).
    let size = (args.dtype.size() + 4) as u128;
    let bytes = args.elements as u128 * size * u128::from(args.workers);
    crate::limits::ensure_memory(
        bytes,
        &format!("--elements {} x --workers {}", args.elements, args.workers),
    )?;
    let faults = FaultConfig {
        drop_ingress: args.loss,
        drop_egress: args.loss,
        duplicate: args.duplicate,
        reorder: args.reorder,
        seed: args.seed,
    };
    let placement = if args.no_pin { None } else { Placement::here() };
    let cluster = LocalCluster::start_config(EmulatorConfig {
        faults,
        cpu: placement.as_ref().map(|p| p.switch),
        ..EmulatorConfig::ephemeral()
    })?;
    let cpus = placement.as_ref().map_or(&[][..], |p| &p.workers[..]);
    let params = JobParams {
        id: 1,
        workers: args.workers,
        pool_base: 0,
        pool_size: args.pool.pool_size()?,
        elements: args.pool.k,
    };
    let mut workers = cluster.job(params, args.pool.tune()?)?;
    let kernel_before = crate::kernel::udp_receive_buffer_errors();
    let (stats, check) = match args.dtype {
        Dtype::F32 => reduce(args, &mut workers, cpus, |x| x)?,
        Dtype::F16 => reduce(args, &mut workers, cpus, f16::from_f32)?,
        Dtype::Bf16 => reduce(args, &mut workers, cpus, bf16::from_f32)?,
        Dtype::I32 => reduce_i32(args, &mut workers, cpus)?,
    };
    let kernel_drops = crate::kernel::udp_receive_buffer_errors()
        .zip(kernel_before)
        .map(|(after, before)| after.saturating_sub(before));
    let counters = cluster.emu.state().switch.counters().clone();
    let mut sum = Stats::default();
    stats.iter().for_each(|s| sum.merge(s));
    let seconds = sum.elapsed.as_secs_f64();
    Ok(DemoReport {
        verified: check.verified,
        workers: args.workers,
        elements: args.elements,
        dtype: args.dtype.name(),
        element_bytes: args.dtype.size(),
        k: args.pool.k,
        window: args.pool.window,
        spare_slots: args.pool.spare_slots(),
        loss: args.loss,
        seconds,
        goodput_gbps: sum.goodput_gbps(),
        elements_per_second: args.elements as f64 / seconds,
        retransmissions: sum.retransmissions,
        injected_drops: counters.dropped(DropReason::InjectedIngress)
            + counters.dropped(DropReason::InjectedEgress),
        lost_data: (counters.dropped(DropReason::InjectedIngress)
            + counters.dropped(DropReason::InjectedEgress))
        .saturating_sub(counters.injected_query_drops),
        lost_contributions: counters.injected_contribution_drops,
        kernel_drops,
        check,
        stats: sum,
        switch_cpu: placement.as_ref().map(|p| p.switch),
        worker_cpus: cpus.to_vec(),
    })
}

/// Every worker's gradient in format `T`, all-reduced at once under the
/// progress bar on `cpus` (all of them if empty), and checked.
fn reduce<T: Float>(
    args: &DemoArgs,
    workers: &mut [Worker],
    cpus: &[usize],
    from: fn(f32) -> T,
) -> Result<(Vec<Stats>, FloatCheck)> {
    let inputs = gradients(args, from);
    let (stats, data) = reduce_all(args, workers, cpus, &inputs, true, |w, d| {
        w.allreduce_float(d, None)
    });
    Ok((
        stats?,
        check_float(&inputs, &data, usize::from(args.pool.k)),
    ))
}

/// Every worker's int32 tensor (its float gradient in 1/65536ths, so
/// that eight workers' sums stay within i32), all-reduced at once and
/// checked for the exact sum: the check's error is then 0 or it fails.
fn reduce_i32(
    args: &DemoArgs,
    workers: &mut [Worker],
    cpus: &[usize],
) -> Result<(Vec<Stats>, FloatCheck)> {
    let inputs = gradients(args, |x| (x * 65536.0) as i32);
    let (stats, data) = reduce_all(args, workers, cpus, &inputs, false, |w, d| {
        w.allreduce_i32(d)
    });
    let check = match check_i32(&inputs, &data) {
        Ok(()) => FloatCheck {
            verified: true,
            ..FloatCheck::default()
        },
        Err(e) => {
            tracing::error!("int32 sum wrong: {e}");
            FloatCheck {
                verified: false,
                failures: 1,
                ..FloatCheck::default()
            }
        }
    };
    Ok((stats?, check))
}

/// Each worker's gradient, in the tensor's format.
fn gradients<T>(args: &DemoArgs, from: impl Fn(f32) -> T) -> Vec<Vec<T>> {
    (0..args.workers as usize)
        .map(|w| {
            gradient(args.seed, w, args.elements)
                .into_iter()
                .map(&from)
                .collect()
        })
        .collect()
}

/// Copies of `inputs` all-reduced by every worker at once with `op`,
/// under the progress bar (`float`: the rounds include an exponent round
/// per slot).
fn reduce_all<T: Clone + Send>(
    args: &DemoArgs,
    workers: &mut [Worker],
    cpus: &[usize],
    inputs: &[Vec<T>],
    float: bool,
    op: impl Fn(&mut Worker, &mut [T]) -> inagg_host_agent::Result<Stats> + Sync,
) -> (Result<Vec<Stats>>, Vec<Vec<T>>) {
    let mut data = inputs.to_vec();
    let progress = Arc::new(AtomicU64::new(0));
    for w in workers.iter_mut() {
        w.set_progress(progress.clone());
    }
    let total = workers[0].rounds(args.elements, float) * u64::from(args.workers);
    let bar = progress_bar(!args.json && !args.no_progress, total, progress.clone());
    let stats = if cpus.is_empty() {
        run_all(workers, &mut data, op)
    } else {
        run_all_on(cpus, workers, &mut data, op)
    };
    bar.finish_and_clear();
    (stats, data)
}

fn progress_bar(show: bool, total: u64, done: Arc<AtomicU64>) -> Ticker {
    if !show || total < 20_000 {
        return Ticker {
            bar: None,
            stop: Arc::new(AtomicU64::new(1)),
            thread: None,
        };
    }
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} all-reduce [{bar:40}] {percent}% {elapsed_precise}",
        )
        .expect("static template")
        .progress_chars("=> "),
    );
    let stop = Arc::new(AtomicU64::new(0));
    let thread = {
        let (bar, stop) = (bar.clone(), stop.clone());
        std::thread::spawn(move || {
            while stop.load(Ordering::Relaxed) == 0 {
                bar.set_position(done.load(Ordering::Relaxed).min(total));
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    Ticker {
        bar: Some(bar),
        stop,
        thread: Some(thread),
    }
}

/// A progress bar refreshed from a counter by a helper thread.
struct Ticker {
    bar: Option<ProgressBar>,
    stop: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn finish_and_clear(mut self) {
        self.stop.store(1, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

/// The human summary, to `out` (a closed pipe is an error, not a panic).
pub fn print_summary(r: &DemoReport, out: &mut impl std::io::Write) -> std::io::Result<()> {
    let mib = (r.elements * r.element_bytes) as f64 / (1 << 20) as f64;
    writeln!(
        out,
        "inagg demo: {} workers all-reduce {} {} {} ({mib:.1} MiB) through the emulator, K={} window={} (+{} spare slots) loss={}%",
        r.workers,
        r.elements,
        r.dtype,
        if r.dtype == "i32" { "integers" } else { "floats" },
        r.k,
        r.window,
        r.spare_slots,
        r.loss * 100.0
    )?;
    if r.verified && r.dtype == "i32" {
        writeln!(out, "result:      EXACT sums on every worker")?;
    } else if r.verified {
        writeln!(
            out,
            "result:      VERIFIED on every worker (max error {:.3e}, at most {:.1}% of the documented bound)",
            r.check.max_abs_error,
            r.check.max_bound_fraction * 100.0
        )?;
    } else {
        let (w, i) = r.check.first_failure.unwrap_or_default();
        writeln!(
            out,
            "result:      FAILED: {} elements outside the bound (first: worker {w}, element {i})",
            r.check.failures
        )?;
    }
    match r.switch_cpu {
        Some(cpu) => writeln!(
            out,
            "placement:   emulator data plane on CPU {cpu}, workers on CPUs {}",
            affinity::List(&r.worker_cpus)
        )?,
        None => writeln!(out, "placement:   unpinned (--no-pin, or one CPU)")?,
    }
    writeln!(out, "time:        {:.3} s", r.seconds)?;
    writeln!(
        out,
        "throughput:  {:.3} Gbit/s of payload, {:.3e} elements/s",
        r.goodput_gbps, r.elements_per_second
    )?;
    writeln!(
        out,
        "loss:        {} packets dropped by the emulator ({} of them data), {} retransmissions \
         ({} after a status), {} queries",
        r.injected_drops,
        r.lost_data,
        r.retransmissions,
        r.stats.fast_retransmissions,
        r.stats.queries
    )?;
    Ok(())
}
