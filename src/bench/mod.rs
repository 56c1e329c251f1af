//! `inagg bench`: measurements, not tests. Prints, from one run:
//! quantize+dequantize throughput next to a plain copy of the same buffer;
//! the emulator's aggregation rate (the switch logic alone, in process);
//! end-to-end all-reduce goodput through the emulator for 2, 4 and 8
//! workers; and, on the same tensors in the same run, a host-only ring
//! all-reduce over TCP loopback, with what each costs the workers in CPU
//! time per GB all-reduced (the emulator's apart).

mod cpu;
#[cfg(feature = "dpdk")]
mod dpdk;
mod flood;
mod loss;
mod netstorm;
mod netstorm_aux;
mod priority;
mod ring;
mod torch;

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Result;
use clap::Args;
use inagg_emu::{FaultConfig, JobSpec, Switch, SwitchConfig};
use inagg_host_agent::float::Float;
use inagg_host_agent::quant::{block_exponent, dequantize, quantize, Quantizer};
use inagg_host_agent::{bf16, f16};
use inagg_wire::{Packet, Repr};
use serde::Serialize;

use crate::args::PoolArgs;
use crate::backend::Backend;
use crate::bench::ring::ring_allreduce;
use inagg_testbed::local::{run_all, JobParams, LocalCluster};
use inagg_testbed::verify::{check_f32, gradient};

/// Options of `inagg bench`.
#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Float elements per tensor.
    #[arg(long, default_value_t = 4 << 20)]
    pub elements: usize,
    // K and window of the all-reduce runs (K also sizes the quantize chunks).
    #[command(flatten)]
    pub pool: PoolArgs,
    /// Repetitions of each measurement: the best for the single-core
    /// kernels, the median of interleaved runs for the all-reduces.
    #[arg(long, default_value_t = 5)]
    pub repeat: usize,
    /// Worker counts for the all-reduce runs.
    #[arg(long, value_delimiter = ',', default_values_t = [2u16, 4, 8])]
    pub workers: Vec<u16>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    /// Data path: sockets (the default figures) or DPDK (the agent's fast
    /// path against the vdev's raw burst rate, and an all-reduce over memif;
    /// both at K = 64 and a window of 64, whatever -k and --window say).
    #[arg(long, value_enum, default_value_t = Backend::Socket)]
    pub backend: Backend,
    /// Measure priorities instead: an urgent job next to a bulk one on
    /// shared paced links (priorities on and off), and FIFO, P3 and
    /// ByteScheduler within one job.
    #[arg(long)]
    pub priority: bool,
    /// Measure NetStorm's awareness instead: four sites over paced links
    /// with one slow link, iteration times as the scheduler learns the
    /// links (--repeat iterations).
    #[arg(long, conflicts_with = "priority")]
    pub netstorm: bool,
    /// Measure goodput under loss instead: 4 and 8 workers, float and
    /// int32, at 0-30% loss per direction (and 1% with 5% duplication and
    /// reordering) next to lossless, for K = 16370 (pool 8) and K = 64
    /// (pool 512), with the data lost, retransmissions, spurious ones,
    /// queries and timeouts.
    #[arg(long, conflicts_with_all = ["priority", "netstorm"])]
    pub loss: bool,
    /// With --loss: leave the emulator's data plane and the workers
    /// wherever the OS runs them (as `demo --no-pin`; by default the data
    /// plane has a CPU of its own).
    #[arg(long, requires = "loss")]
    pub no_pin: bool,
    /// PyTorch: DDP training steps with inagg's hook next to gloo, 2 and 4
    /// ranks, and the all-reduce alone for ResNet-50's 25.6M parameters
    /// (needs a Python with torch: $INAGG_TORCH_PYTHON or the one
    /// scripts/test makes; it builds the release C library itself).
    #[arg(long, conflicts_with_all = ["priority", "netstorm"])]
    pub torch: bool,
    /// No lock-out: how long a client with the token waits (connect and
    /// one request; p50, p99, max of --repeat, at least 100) while 1,000
    /// strangers flood the controller's API and an emulator's control
    /// endpoint, next to quiet.
    #[arg(long, conflicts_with_all = ["priority", "netstorm", "loss", "torch"])]
    pub flood: bool,
    /// With --netstorm: measure auxiliary paths instead, the forest with
    /// and without them, BUSY_BOUND/QUEUE_LENGTH (NetStorm's
    /// PRIMARY_BUSY_BOUND and AUXILIARY_QUEUE_LENGTH; Table II: 2/1), or
    /// `grid` for the paper's grid search (bounds 1-4 by queues 1-5).
    #[arg(long, requires = "netstorm", value_name = "BUSY_BOUND/QUEUE_LENGTH|grid", num_args = 0..=1, default_missing_value = "2/1")]
    pub aux: Option<String>,
    /// With --netstorm: NetStorm's stages one after another (Fig. 18):
    /// the first-guess forest kept, then re-planned from the probes, then
    /// with auxiliary paths too; --repeat iterations each.
    #[arg(long, requires = "netstorm", conflicts_with = "aux")]
    pub ablation: bool,
}

/// One benchmark run's figures.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    /// memcpy of the tensor, GB/s.
    pub copy_gbs: f64,
    /// Block exponent + quantize + dequantize, GB/s of f32 input.
    pub quant_dequant_gbs: f64,
    /// The same per format, billions of elements per second: f32, and
    /// f16 and bf16 (widened to f32 on the way in, rounded back on the way out).
    pub quant_dequant_gelems: FormatRates,
    /// Switch logic alone: (K, packets/s, payload Gbit/s) at 4 workers.
    pub emulator: Vec<EmuRate>,
    /// All-reduce goodput by worker count.
    pub allreduce: Vec<AllreduceRate>,
}

/// A kernel's rate in each float format, billions of elements per second.
#[derive(Debug, Serialize)]
pub struct FormatRates {
    pub f32: f64,
    pub f16: f64,
    pub bf16: f64,
}

/// Emulator aggregation rate at one K.
#[derive(Debug, Serialize)]
pub struct EmuRate {
    /// Elements per packet.
    pub k: u16,
    /// Contributions processed per second.
    pub packets_per_second: f64,
    /// Payload aggregated, Gbit/s.
    pub payload_gbps: f64,
}

/// inagg vs ring at one worker count.
#[derive(Debug, Serialize)]
pub struct AllreduceRate {
    /// Workers.
    pub workers: u16,
    /// inagg through the emulator, Gbit/s of tensor per worker: over UDP
    /// loopback, and over shared-memory channels (`emu --shm`).
    pub inagg_gbps: f64,
    pub shm_gbps: f64,
    /// Ring over TCP loopback, Gbit/s of tensor per worker.
    pub ring_gbps: f64,
    /// CPU seconds per GB of tensor all-reduced, per worker: inagg's
    /// workers alone (their threads; the emulator's apart), and the
    /// ring's ranks (which do the additions themselves).
    pub inagg_cpu_s_per_gb: f64,
    pub shm_cpu_s_per_gb: f64,
    pub ring_cpu_s_per_gb: f64,
    /// inagg results (both carriers) checked within the bound.
    pub verified: bool,
}

fn gbs(bytes: usize, d: Duration) -> f64 {
    bytes as f64 / d.as_secs_f64() / 1e9
}

/// Runs every measurement and prints the report.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<()> {
    if args.elements == 0 || args.pool.k == 0 || args.pool.window == 0 || args.repeat == 0 {
        anyhow::bail!("--elements, -k, --window and --repeat must be at least 1");
    }
    // The largest run holds two tensors per worker, 4 bytes an element.
    let most = args.workers.iter().copied().max().unwrap_or(1).max(1);
    crate::limits::ensure_memory(
        args.elements as u128 * 4 * 2 * u128::from(most),
        &format!("--elements {} at {most} workers", args.elements),
    )?;
    if let Some(n) = args
        .workers
        .iter()
        .find(|&&n| n == 0 || usize::from(n) > inagg_wire::MAX_WORKERS)
    {
        anyhow::bail!(
            "--workers {n}: each count must be 1..={}",
            inagg_wire::MAX_WORKERS
        );
    }
    if args.torch {
        return crate::bench::torch::run(args.repeat, out);
    }
    if args.flood {
        return crate::bench::flood::run(args.repeat, out);
    }
    if args.loss {
        return crate::bench::loss::run(args.elements, !args.no_pin, args.json, out);
    }
    if args.priority {
        return crate::bench::priority::run(args.repeat, args.json, out);
    }
    if let Some(bounds) = &args.aux {
        if bounds == "grid" {
            return crate::bench::netstorm_aux::run_grid(args.repeat, args.json, out);
        }
        let bad = || {
            anyhow::anyhow!(
                "--aux {bounds:?} is neither BUSY_BOUND/QUEUE_LENGTH (like 2/1) nor grid"
            )
        };
        let (b, q) = bounds.split_once('/').ok_or_else(bad)?;
        let (b, q) = (b.parse().map_err(|_| bad())?, q.parse().map_err(|_| bad())?);
        return crate::bench::netstorm_aux::run(args.repeat, b, q, args.json, out);
    }
    if args.ablation {
        return crate::bench::netstorm::run_ablation(args.repeat, args.json, out);
    }
    if args.netstorm {
        return crate::bench::netstorm::run(args.repeat, args.json, out);
    }
    if args.backend == Backend::Dpdk {
        #[cfg(feature = "dpdk")]
        return crate::bench::dpdk::run(args, out);
        #[cfg(not(feature = "dpdk"))]
        return Err(crate::backend::not_built());
    }
    let report = measure(args)?;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print(&report, args, out)?;
    }
    Ok(())
}

fn measure(args: &BenchArgs) -> Result<BenchReport> {
    let (copy_gbs, quant_dequant_gbs) = quant_rates(args)?;
    let quant_dequant_gelems = FormatRates {
        f32: format_rate::<f32>(args, |x| x),
        f16: format_rate(args, f16::from_f32),
        bf16: format_rate(args, bf16::from_f32),
    };
    let emulator = [64u16, 1024]
        .into_iter()
        .map(emu_rate)
        .collect::<Result<Vec<_>>>()?;
    let mut allreduce = Vec::new();
    for &n in &args.workers {
        allreduce.push(allreduce_rate(args, n)?);
    }
    Ok(BenchReport {
        copy_gbs,
        quant_dequant_gbs,
        quant_dequant_gelems,
        emulator,
        allreduce,
    })
}

/// Copy and quantize+dequantize of the same tensor, interleaved (a few
/// milliseconds each, so four times `repeat` runs), best of each.
fn quant_rates(args: &BenchArgs) -> Result<(f64, f64)> {
    let src = gradient(1, 0, args.elements);
    let bytes = src.len() * 4;
    let mut dst = vec![0f32; src.len()];
    let k = usize::from(args.pool.k);
    let mut wire = vec![0u8; k * 4];
    let (mut copy, mut quant) = (Duration::MAX, Duration::MAX);
    for _ in 0..args.repeat * 4 {
        let t = Instant::now();
        dst.copy_from_slice(std::hint::black_box(&src));
        copy = copy.min(t.elapsed());
        let t = Instant::now();
        for (x, y) in src.chunks(k).zip(dst.chunks_mut(k)) {
            let e = block_exponent(x);
            quantize(x, e, 4, &mut wire);
            dequantize(&wire, e, 4, y);
        }
        quant = quant.min(t.elapsed());
        std::hint::black_box(&dst);
    }
    Ok((gbs(bytes, copy), gbs(bytes, quant)))
}

/// Block exponent, quantize and dequantize of the bench's tensor in format
/// `T`, through the agent's own per-format path (`Float`), in chunks of
/// K; best of `repeat * 4` runs, billions of elements per second.
fn format_rate<T: Float>(args: &BenchArgs, from: fn(f32) -> T) -> f64 {
    let src: Vec<T> = gradient(1, 0, args.elements)
        .into_iter()
        .map(from)
        .collect();
    let mut dst = vec![T::default(); src.len()];
    let k = usize::from(args.pool.k);
    let (q, mut wire, mut scratch) = (Quantizer::new(4), vec![0u8; k * 4], Vec::new());
    let mut best = Duration::MAX;
    for _ in 0..args.repeat * 4 {
        let t = Instant::now();
        for (x, y) in src.chunks(k).zip(dst.chunks_mut(k)) {
            let e = T::block_exponent(x);
            T::quantize(&q, x, e, &mut wire, &mut scratch);
            T::dequantize(&q, &wire, e, y, &mut scratch);
        }
        best = best.min(t.elapsed());
        std::hint::black_box(&dst);
    }
    src.len() as f64 / best.as_secs_f64() / 1e9
}

/// The switch logic alone: 4 workers' contributions for 256 slots, rounds
/// alternating sets, through `Switch::process`.
fn emu_rate(k: u16) -> Result<EmuRate> {
    let workers: Vec<SocketAddr> = (0..4)
        .map(|p| SocketAddr::from(([127, 0, 0, 1], 10_000 + p)))
        .collect();
    let mut sw = Switch::new(SwitchConfig::default());
    let slots = 256u16;
    sw.create_job(JobSpec {
        child_switches: 0,
        detours: Vec::new(),
        upstream: None,
        id: 1,
        workers: workers.clone(),
        pool_base: 0,
        pool_size: slots.into(),
        elements: k,
        generation: 0,
        queues: Vec::new(),
        group: None,
    })?;
    let packets: Vec<Vec<Vec<u8>>> = (0..2u8)
        .map(|set| {
            (0..slots)
                .flat_map(|slot| (0..4u16).map(move |worker| (slot, worker)))
                .map(|(slot, worker)| {
                    let repr = Repr::contribution(1, slot, set, worker, k, u32::from(set));
                    let mut b = vec![0u8; repr.buffer_len()];
                    repr.emit(&mut Packet::new_unchecked(&mut b[..]));
                    b
                })
                .collect()
        })
        .collect();
    let rounds = if k >= 1024 { 40 } else { 400 };
    let mut out = Vec::new();
    let t = Instant::now();
    let mut count = 0u64;
    for r in 0..rounds {
        for p in &packets[r % 2] {
            let worker = usize::from(Packet::new_unchecked(&p[..]).worker());
            std::hint::black_box(sw.process(p, workers[worker], &mut out));
            count += 1;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    Ok(EmuRate {
        k,
        packets_per_second: count as f64 / secs,
        payload_gbps: count as f64 * f64::from(k) * 32.0 / secs / 1e9,
    })
}

fn allreduce_rate(args: &BenchArgs, n: u16) -> Result<AllreduceRate> {
    let inputs: Vec<Vec<f32>> = (0..usize::from(n))
        .map(|w| gradient(7, w, args.elements))
        .collect();
    let bits = args.elements as f64 * 32.0;
    let path = std::env::temp_dir().join(format!("inagg-bench-{}.sock", std::process::id()));
    let cluster = LocalCluster::start_shm(FaultConfig::default(), &path)?;
    let pool_size = args.pool.pool_size()?;
    let job = |id: u16| JobParams {
        id,
        workers: n,
        pool_base: u32::from(id - 1) * pool_size,
        pool_size,
        elements: args.pool.k,
    };
    let mut udp = cluster.job(job(1), args.pool.tune()?)?;
    let mut shm = cluster.job_shm(job(2), &path, |_| true, args.pool.tune()?)?;
    // Interleaved, so that all see the same machine conditions; medians,
    // so that one lucky or unlucky run decides nothing.
    let mut verified = true;
    let (mut udp_runs, mut shm_runs, mut ring_runs) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..args.repeat {
        for (workers, runs) in [(&mut udp, &mut udp_runs), (&mut shm, &mut shm_runs)] {
            let (run, ok) = inagg_run(workers, &inputs, args.pool.k)?;
            verified &= ok;
            runs.push(run);
        }
        let mut data = inputs.clone();
        let ring = ring_allreduce(&mut data)?;
        ring_runs.push((ring.slowest, ring.cpu));
    }
    let bytes = args.elements * 4;
    let workers = usize::from(n);
    let rate = |runs: &mut Vec<(Duration, Duration)>| {
        let time = median(&mut runs.iter().map(|r| r.0).collect::<Vec<_>>());
        let cpu = median(&mut runs.iter().map(|r| r.1).collect::<Vec<_>>());
        (
            bits / time.as_secs_f64() / 1e9,
            cpu::seconds_per_gb(cpu, workers, bytes),
        )
    };
    let ((inagg_gbps, inagg_cpu), (shm_gbps, shm_cpu), (ring_gbps, ring_cpu)) = (
        rate(&mut udp_runs),
        rate(&mut shm_runs),
        rate(&mut ring_runs),
    );
    Ok(AllreduceRate {
        workers: n,
        inagg_gbps,
        shm_gbps,
        ring_gbps,
        inagg_cpu_s_per_gb: inagg_cpu,
        shm_cpu_s_per_gb: shm_cpu,
        ring_cpu_s_per_gb: ring_cpu,
        verified,
    })
}

/// One float all-reduce of `inputs` on `workers`: the slowest worker's
/// time, the workers' CPU time together, and whether the sums are within
/// the bound.
fn inagg_run(
    workers: &mut [inagg_host_agent::Worker],
    inputs: &[Vec<f32>],
    k: u16,
) -> Result<((Duration, Duration), bool)> {
    let mut data = inputs.to_vec();
    let cpu = std::sync::Mutex::new(Duration::ZERO);
    let stats = run_all(workers, &mut data, |w, d| {
        let start = cpu::thread_cpu();
        let stats = w.allreduce_f32(d);
        let used = cpu::thread_cpu() - start;
        *cpu.lock().unwrap_or_else(|e| e.into_inner()) += used;
        stats
    })?;
    let verified = check_f32(inputs, &data, usize::from(k)).verified;
    let slowest = stats.iter().map(|s| s.elapsed).max().unwrap_or_default();
    let cpu = cpu.into_inner().unwrap_or_else(|e| e.into_inner());
    Ok(((slowest, cpu), verified))
}

fn print(r: &BenchReport, a: &BenchArgs, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "inagg bench: {} floats per tensor, K={} window={}, {} runs (kernels: best; all-reduce: median)",
        a.elements, a.pool.k, a.pool.window, a.repeat
    )?;
    writeln!(
        out,
        "quantize+dequantize  {:>7.2} GB/s   (copy {:.2} GB/s; ratio {:.2})",
        r.quant_dequant_gbs,
        r.copy_gbs,
        r.quant_dequant_gbs / r.copy_gbs
    )?;
    let g = &r.quant_dequant_gelems;
    writeln!(
        out,
        "  per format           f32 {:.2}, f16 {:.2}, bf16 {:.2} Gelem/s",
        g.f32, g.f16, g.bf16
    )?;
    for e in &r.emulator {
        writeln!(
            out,
            "emulator, K={:<5}    {:>7.2} Mpkt/s  {:>7.2} Gbit/s payload (switch logic, 4 workers)",
            e.k,
            e.packets_per_second / 1e6,
            e.payload_gbps
        )?;
    }
    writeln!(
        out,
        "all-reduce goodput (Gbit/s of tensor per worker), and each worker's CPU seconds per GB all-reduced (inagg: the workers alone, the emulator's apart):"
    )?;
    writeln!(
        out,
        "  inagg through the emulator over UDP loopback (udp) and over shared memory (shm, `emu --shm`); the TCP ring"
    )?;
    writeln!(
        out,
        "  workers   Gbit/s udp     shm    ring   shm/ring   CPU s/GB udp     shm    ring   udp/ring   shm/ring   verified"
    )?;
    for x in &r.allreduce {
        writeln!(
            out,
            "  {:>7}   {:>10.3} {:>7.3} {:>7.3}   {:>8.2}   {:>12.3} {:>7.3} {:>7.3}   {:>8.2}   {:>8.2}   {}",
            x.workers,
            x.inagg_gbps,
            x.shm_gbps,
            x.ring_gbps,
            x.shm_gbps / x.ring_gbps,
            x.inagg_cpu_s_per_gb,
            x.shm_cpu_s_per_gb,
            x.ring_cpu_s_per_gb,
            x.inagg_cpu_s_per_gb / x.ring_cpu_s_per_gb,
            x.shm_cpu_s_per_gb / x.ring_cpu_s_per_gb,
            x.verified
        )?;
    }
    Ok(())
}

/// The median of some durations (the mean of the middle two for an even count).
fn median(times: &mut [Duration]) -> Duration {
    times.sort();
    let mid = times.len() / 2;
    if times.len().is_multiple_of(2) {
        (times[mid - 1] + times[mid]) / 2
    } else {
        times[mid]
    }
}
