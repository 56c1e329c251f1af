//! `inagg bench --backend dpdk`: the DPDK data path's figures.
//!
//! - **The agent's own cost**: a worker on a net_ring port in loopback mode
//!   (the link answers each contribution as a one-worker switch would, so
//!   no switch is in the loop) runs float all-reduces at K = 64: packets
//!   per second and payload Gbit/s on one core.
//! - **The I/O limit**: the raw burst rate of the same kind of vdev in the
//!   same run: the same frames sent with `rte_eth_tx_burst` and taken back
//!   with `rte_eth_rx_burst`, no other work. The ratio of the two is the
//!   share of the I/O limit the agent's fast path reaches (target: >= 0.5).
//! - **The floor**: the raw loop plus the least any agent must do with the
//!   tensor: each packet's payload copied out of the tensor into the frame
//!   and, on receipt, back into the tensor (no header, no checksum, no
//!   quantization). On a tensor larger than the caches this is memory
//!   traffic the raw loop never makes; it bounds what the agent could reach.
//! - **End to end**: an all-reduce through `inagg emu --backend dpdk` with
//!   agents in their own processes, all connected by memif (shared memory
//!   between processes, no root needed).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use inagg_dpdk::{Eal, Mbuf, Mempool, Port, PortConfig, RxBatch, BURST};
use inagg_host_agent::dpdk::DpdkOptions;
use inagg_host_agent::{AgentConfig, Worker};
use inagg_wire::frame::UdpFlow;
use serde::Serialize;

use crate::bench::BenchArgs;
use inagg_testbed::verify::gradient;

/// K of the agent-cost measurement (the reference point).
const K: u16 = 64;
/// Window of the loopback agent and of the memif all-reduce: as many
/// packets in flight as a receive burst holds, so per-burst costs are
/// shared as on a loaded link.
const WINDOW: u32 = 64;
/// EAL of the bench process: one ring port for the raw rate, one for the agent.
const EAL: &str = "--no-huge -m 1024 --no-pci --no-shconf --no-telemetry \
                   --log-level=lib.eal:error --vdev net_ring0 --vdev net_ring1 --vdev net_ring2";
/// Lanes of the multi-queue measurement (the CI machine has 2 cores).
const LANES: u16 = 2;

/// The figures.
#[derive(Debug, Serialize)]
pub struct DpdkReport {
    /// Elements per packet.
    pub k: u16,
    /// Frame bytes at that K.
    pub frame_bytes: usize,
    /// Raw tx+rx bursts on net_ring, packets/s.
    pub raw_pps: f64,
    /// The agent in loopback on net_ring, float all-reduce, packets/s (one core).
    pub agent_pps: f64,
    /// The agent's payload rate, Gbit/s of tensor (one core).
    pub agent_gbps: f64,
    /// The raw loop plus the tensor's payload copied in and out, packets/s.
    pub floor_pps: f64,
    /// floor_pps / raw_pps: the most any agent could reach of the I/O limit.
    pub floor_ratio: f64,
    /// agent_pps / raw_pps.
    pub ratio: f64,
    /// The same with an int32 all-reduce (no quantization), packets/s.
    pub agent_i32_pps: f64,
    /// agent_i32_pps / raw_pps.
    pub ratio_i32: f64,
    /// The float all-reduce on `lanes` queue pairs and threads, packets/s.
    pub agent_lanes_pps: f64,
    /// Its payload rate, Gbit/s.
    pub agent_lanes_gbps: f64,
    /// Lanes of that measurement.
    pub lanes: u16,
    /// End-to-end over memif, Gbit/s of tensor per worker, if it ran.
    pub memif_allreduce_gbps: Option<f64>,
    /// Workers in the end-to-end run.
    pub memif_workers: u16,
}

/// Runs the DPDK measurements and prints them.
pub fn run(args: &BenchArgs, out: &mut dyn Write) -> Result<()> {
    let eal = Eal::init_str(EAL).context("start DPDK for the benchmark")?;
    let frame_bytes = UdpFlow::frame_len(inagg_wire::HEADER_LEN + usize::from(K) * 4);
    let mut raw = Vec::new();
    let mut floor = Vec::new();
    let mut agent = Vec::new();
    let mut agent_i32 = Vec::new();
    let mut lanes = Vec::new();
    let mut worker = loopback_worker("net_ring1", 1)?;
    let mut multi = loopback_worker("net_ring2", LANES)?;
    let tensor = gradient(1, 0, args.elements);
    let ints: Vec<i32> = (0..args.elements as i32).collect();
    // At least one packet's worth, so the floor's walk has a whole payload.
    let floor_tensor: Vec<i32> = (0..args.elements.max(usize::from(K)) as i32).collect();
    for _ in 0..args.repeat {
        raw.push(raw_rate(eal, frame_bytes, None)?);
        floor.push(raw_rate(eal, frame_bytes, Some(&floor_tensor))?);
        agent.push(agent_rate(&mut worker, &tensor)?);
        agent_i32.push(agent_rate_i32(&mut worker, &ints)?);
        lanes.push(agent_rate(&mut multi, &tensor)?);
    }
    let best = |v: &[(f64, f64)]| {
        v.iter()
            .copied()
            .fold((0.0, 0.0), |a, b| if b.0 > a.0 { b } else { a })
    };
    let (raw_pps, _) = best(&raw);
    let (floor_pps, _) = best(&floor);
    let (agent_pps, agent_gbps) = best(&agent);
    let (agent_i32_pps, _) = best(&agent_i32);
    let (agent_lanes_pps, agent_lanes_gbps) = best(&lanes);
    let workers = 2;
    let memif = (0..args.repeat)
        .map(|_| memif_allreduce(args, workers))
        .collect::<Result<Vec<_>>>()
        .context("end-to-end all-reduce over memif")?;
    let memif = middle(memif);
    let report = DpdkReport {
        k: K,
        frame_bytes,
        raw_pps,
        floor_pps,
        floor_ratio: floor_pps / raw_pps,
        agent_pps,
        agent_gbps,
        ratio: agent_pps / raw_pps,
        agent_i32_pps,
        ratio_i32: agent_i32_pps / raw_pps,
        agent_lanes_pps,
        agent_lanes_gbps,
        lanes: LANES,
        memif_allreduce_gbps: Some(memif),
        memif_workers: workers,
    };
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print(&report, args, out)?;
    }
    Ok(())
}

fn print(r: &DpdkReport, a: &BenchArgs, out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "inagg bench --backend dpdk: K={} ({}-byte frames), window {WINDOW}, {} elements per tensor, best of {}",
        r.k, r.frame_bytes, a.elements, a.repeat
    )?;
    writeln!(
        out,
        "raw net_ring tx+rx bursts    {:>7.2} Mpkt/s   (the I/O limit)",
        r.raw_pps / 1e6
    )?;
    writeln!(
        out,
        "floor: raw + payload in/out   {:>6.2} Mpkt/s   ratio {:.2} of the I/O limit (the most an agent could reach)",
        r.floor_pps / 1e6,
        r.floor_ratio
    )?;
    writeln!(
        out,
        "agent fast path, f32 (1 core) {:>6.2} Mpkt/s   {:>6.2} Gbit/s payload   ratio {:.2} of the I/O limit, {:.2} of the floor",
        r.agent_pps / 1e6,
        r.agent_gbps,
        r.ratio,
        r.agent_pps / r.floor_pps
    )?;
    writeln!(
        out,
        "agent fast path, i32 (1 core) {:>6.2} Mpkt/s                         ratio {:.2} of the I/O limit, {:.2} of the floor",
        r.agent_i32_pps / 1e6,
        r.ratio_i32,
        r.agent_i32_pps / r.floor_pps
    )?;
    writeln!(
        out,
        "agent fast path, f32 ({} lanes)  {:>6.2} Mpkt/s   {:>6.2} Gbit/s payload   (queue pairs and threads; one core each)",
        r.lanes,
        r.agent_lanes_pps / 1e6,
        r.agent_lanes_gbps
    )?;
    if let Some(g) = r.memif_allreduce_gbps {
        writeln!(
            out,
            "all-reduce via DPDK emulator over memif, {} workers: {:.3} Gbit/s per worker (median of {})",
            r.memif_workers, g, a.repeat
        )?;
    }
    Ok(())
}

fn loopback_worker(port: &str, queues: u16) -> Result<Worker> {
    let config = AgentConfig::new("10.0.0.100:47000".parse()?, 1, 0, 1, WINDOW, K);
    let mut options = DpdkOptions::new(EAL, "10.0.0.1:40000".parse()?);
    options.port = Some(port.into());
    options.loopback = true;
    options.queues = queues;
    Ok(Worker::new_dpdk(config, &options)?)
}

/// One float all-reduce through the loopback worker: (packets/s, Gbit/s).
fn agent_rate(worker: &mut Worker, tensor: &[f32]) -> Result<(f64, f64)> {
    let mut data = tensor.to_vec();
    rates(worker.allreduce_f32(&mut data)?)
}

/// One int32 all-reduce through the loopback worker: (packets/s, Gbit/s).
fn agent_rate_i32(worker: &mut Worker, tensor: &[i32]) -> Result<(f64, f64)> {
    let mut data = tensor.to_vec();
    rates(worker.allreduce_i32(&mut data)?)
}

fn rates(stats: inagg_host_agent::Stats) -> Result<(f64, f64)> {
    let secs = stats.elapsed.as_secs_f64();
    Ok((
        stats.packets_sent as f64 / secs,
        stats.payload_bytes as f64 * 8.0 / secs / 1e9,
    ))
}

/// Bursts of the same frames out and back on net_ring0 for 300 ms:
/// (packets/s, 0). With a `tensor`, each frame's payload (K elements) is
/// first copied out of it, walking it in order, and each received payload
/// is copied back where it came from: the floor of any agent's work.
fn raw_rate(eal: Eal, frame_bytes: usize, tensor: Option<&[i32]>) -> Result<(f64, f64)> {
    use std::sync::OnceLock;
    static PORT: OnceLock<(
        &'static Mempool,
        std::sync::Mutex<(inagg_dpdk::RxQueue, inagg_dpdk::TxQueue)>,
    )> = OnceLock::new();
    let (pool, queues) = match PORT.get() {
        Some(p) => p,
        None => {
            let pool = Mempool::new(eal, 4095, 256, 2048 + 128)?;
            let (_, mut rx, mut tx) = Port::start(eal, "net_ring0", &PortConfig::default(), pool)?;
            PORT.get_or_init(|| (pool, std::sync::Mutex::new((rx.remove(0), tx.remove(0)))))
        }
    };
    let mut q = queues.lock().unwrap_or_else(|p| p.into_inner());
    let (rx, tx) = &mut *q;
    let mut frames: Vec<Mbuf> = (0..BURST)
        .map(|_| {
            let mut m = Mbuf::alloc(pool)?;
            m.append(frame_bytes)?.fill(0x5a);
            Ok(m)
        })
        .collect::<Result<_, inagg_dpdk::Error>>()?;
    let mut copy = tensor.map(|t| PayloadCopy::new(t, frame_bytes));
    let mut out = Vec::with_capacity(BURST);
    let mut batch = RxBatch::new();
    let mut packets = 0u64;
    let start = Instant::now();
    let run = Duration::from_millis(300);
    while start.elapsed() < run {
        match &mut copy {
            Some(c) => c.fill(&mut frames, &mut out),
            None => out.extend(frames.iter().map(Mbuf::share)),
        }
        let (sent, _) = tx.send_all(&mut out, 16);
        if let Some(c) = &mut copy {
            c.sent(sent);
        }
        let n = rx.burst(&mut batch);
        if let Some(c) = &mut copy {
            c.drain(&batch, n);
        }
        packets += n as u64;
        batch.clear();
    }
    if let Some(c) = copy {
        // The copies must not be optimised away: the tensor came back whole.
        if c.tensor != tensor.unwrap_or_default() {
            bail!("the floor measurement lost payload bytes");
        }
    }
    Ok((packets as f64 / start.elapsed().as_secs_f64(), 0.0))
}

/// The floor's tensor walk: payloads out of the tensor into the frames,
/// and back from the received frames into the tensor, in order.
struct PayloadCopy {
    tensor: Vec<i32>,
    /// Payload offset in a frame, bytes.
    at: usize,
    /// Where the next frame's payload comes from, elements.
    next_out: usize,
    /// Where each frame queued for sending came from.
    pending: Vec<usize>,
    /// Where each frame in flight came from (frames return in order).
    in_flight: std::collections::VecDeque<usize>,
}

impl PayloadCopy {
    fn new(tensor: &[i32], frame_bytes: usize) -> PayloadCopy {
        PayloadCopy {
            tensor: tensor.to_vec(),
            at: frame_bytes - usize::from(K) * 4,
            next_out: 0,
            pending: Vec::new(),
            in_flight: Default::default(),
        }
    }

    /// Fills every frame no longer in flight from the tensor and queues a
    /// share of it in `out`.
    fn fill(&mut self, frames: &mut [Mbuf], out: &mut Vec<Mbuf>) {
        let k = usize::from(K);
        for f in frames {
            let Some(bytes) = f.data_mut() else { continue };
            if self.next_out + k > self.tensor.len() {
                self.next_out = 0;
            }
            let src = &self.tensor[self.next_out..self.next_out + k];
            bytes[self.at..self.at + k * 4].copy_from_slice(i32_bytes(src));
            self.pending.push(self.next_out);
            self.next_out += k;
            out.push(f.share());
        }
    }

    /// The first `sent` of the queued frames went out (the rest were freed).
    fn sent(&mut self, sent: usize) {
        self.in_flight.extend(self.pending.drain(..).take(sent));
    }

    fn drain(&mut self, batch: &RxBatch, n: usize) {
        let k = usize::from(K);
        for i in 0..n {
            let Some(from) = self.in_flight.pop_front() else {
                break;
            };
            let payload = &batch.data(i)[self.at..self.at + k * 4];
            let dst = &mut self.tensor[from..from + k];
            // SAFETY: as in `i32_bytes`; every byte pattern is a valid i32.
            let dst =
                unsafe { std::slice::from_raw_parts_mut(dst.as_mut_ptr().cast::<u8>(), k * 4) };
            dst.copy_from_slice(payload);
        }
    }
}

/// An i32 slice's bytes in memory order.
fn i32_bytes(v: &[i32]) -> &[u8] {
    // SAFETY: i32 has no padding and any byte is a valid u8; the length
    // covers exactly the slice's memory.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), std::mem::size_of_val(v)) }
}

/// Processes of one end-to-end run, killed when dropped.
struct Procs {
    children: Vec<Child>,
    dir: PathBuf,
}

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
        // The EAL runtime directories of the --file-prefix processes.
        let prefix = format!("inagg-bench-{}-", std::process::id());
        if let Ok(entries) = std::fs::read_dir("/var/run/dpdk") {
            for e in entries.flatten() {
                if e.file_name().to_string_lossy().starts_with(&prefix) {
                    let _ = std::fs::remove_dir_all(e.path());
                }
            }
        }
    }
}

/// `workers` agent processes and a DPDK emulator, joined by memif; returns
/// the mean goodput per worker.
fn memif_allreduce(args: &BenchArgs, workers: u16) -> Result<f64> {
    let exe = std::env::current_exe()?;
    let dir = std::env::temp_dir().join(format!("inagg-bench-memif-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut procs = Procs {
        children: Vec::new(),
        dir: dir.clone(),
    };
    let sock = |i: u16| dir.join(format!("m{i}.sock")).display().to_string();
    // memif needs DPDK's multi-process channel (no --no-shconf): each
    // process gets its own runtime directory instead.
    let pid = std::process::id();
    let base = |who: &str| {
        format!("--no-huge -m 512 --no-pci --file-prefix inagg-bench-{pid}-{who} --no-telemetry --log-level=lib.eal:error")
    };
    let vdevs: String = (0..workers)
        .map(|i| format!(" --vdev net_memif{i},role=server,socket={}", sock(i)))
        .collect();
    let control = "127.0.0.1:47091";
    procs.children.push(
        Command::new(&exe)
            .args([
                "emu",
                "--backend",
                "dpdk",
                "--data",
                "10.0.0.100:47000",
                "--control",
                control,
            ])
            .args([
                "--max-elements",
                "256",
                "--eal",
                &format!("{}{vdevs}", base("emu")),
            ])
            .stdout(Stdio::null())
            .spawn()?,
    );
    wait_for_control(&exe, control)?;
    let endpoints: Vec<String> = (0..workers)
        .map(|i| format!("10.0.0.{}:40000", i + 1))
        .collect();
    let out = Command::new(&exe)
        .args([
            "ctl",
            "--addr",
            control,
            "job",
            "create",
            "--id",
            "1",
            "--workers",
            &endpoints.join(","),
        ])
        .args([
            "--pool-base",
            "0",
            "--pool-size",
            &WINDOW.to_string(),
            "--elements",
            &K.to_string(),
        ])
        .output()?;
    if !out.status.success() {
        bail!("job create: {}", String::from_utf8_lossy(&out.stderr));
    }
    let agents: Vec<Child> = (0..workers)
        .map(|i| {
            Command::new(&exe)
                .args(["agent", "--backend", "dpdk", "--switch", "10.0.0.100:47000"])
                .args([
                    "--bind",
                    &endpoints[usize::from(i)],
                    "--job",
                    "1",
                    "--worker",
                    &i.to_string(),
                ])
                .args([
                    "--workers",
                    &workers.to_string(),
                    "--pool-size",
                    &WINDOW.to_string(),
                ])
                .args([
                    "--elements",
                    &K.to_string(),
                    "--len",
                    &args.elements.to_string(),
                    "--json",
                ])
                .args([
                    "--eal",
                    &format!(
                        "{} --vdev net_memif0,role=client,socket={}",
                        base(&format!("w{i}")),
                        sock(i)
                    ),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
        })
        .collect::<std::io::Result<_>>()?;
    let mut rates = Vec::new();
    for (i, a) in agents.into_iter().enumerate() {
        let out = a.wait_with_output()?;
        if !out.status.success() {
            bail!("agent {i}: {}", String::from_utf8_lossy(&out.stderr));
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
            format!("agent {i} output: {}", String::from_utf8_lossy(&out.stdout))
        })?;
        rates.push(v["goodput_gbps"].as_f64().unwrap_or(0.0));
    }
    drop(procs);
    Ok(rates.iter().sum::<f64>() / rates.len() as f64)
}

/// The median of `rates` (the upper one of an even count).
fn middle(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}

fn wait_for_control(exe: &std::path::Path, control: &str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let ok = Command::new(exe)
            .args(["ctl", "--addr", control, "info"])
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("the DPDK emulator did not answer on {control}")
}
