//! `inagg agent`: one worker from the command line. The tensor comes from a
//! file (raw little-endian f32 or i32) or from a deterministic pattern whose
//! sum every worker can compute, so `--verify` checks the result without
//! any other input.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::path::Path;

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use inagg_controller_api::Client;
use inagg_host_agent::float::{is_correct, Float};
use inagg_host_agent::stats::Live;
use inagg_host_agent::{bf16, f16, AgentConfig, Stats, Worker};
use inagg_netio::metrics::MetricsServer;

use crate::backend::{Backend, DpdkArgs};
use crate::limits;

/// Element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Dtype {
    /// 32-bit floats (quantized with a block exponent).
    F32,
    /// 32-bit integers (exact).
    I32,
    /// IEEE binary16 (half precision), widened to 32-bit floats on the way
    /// in and rounded back on the way out: the packets are F32's.
    F16,
    /// bfloat16, as F16.
    Bf16,
}

impl Dtype {
    /// Bytes per element in the tensor files and in memory.
    fn size(self) -> usize {
        match self {
            Dtype::F32 | Dtype::I32 => 4,
            Dtype::F16 | Dtype::Bf16 => 2,
        }
    }
}

/// An element as the tensor files hold it: raw little-endian bytes.
trait FileElement: Copy {
    const SIZE: usize;
    fn from_le(bytes: &[u8]) -> Self;
    fn write_le(self, out: &mut Vec<u8>);
}

macro_rules! file_element {
    ($($t:ty),*) => {$(
        impl FileElement for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            fn from_le(bytes: &[u8]) -> Self {
                <$t>::from_le_bytes(bytes.try_into().expect("SIZE bytes"))
            }
            fn write_le(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
        }
    )*};
}

file_element!(i32, f32, f16, bf16);

/// Options of `inagg agent`.
#[derive(Debug, Clone, Args)]
pub struct AgentArgs {
    /// The switch's data-plane address (with --controller, the controller
    /// gives it).
    #[arg(long, default_value = "127.0.0.1:47000", conflicts_with = "controller")]
    pub switch: SocketAddr,
    /// Local address; must be the endpoint installed for this worker. With
    /// the DPDK backend: this worker's IPv4 address and UDP port on the link.
    #[arg(long)]
    pub bind: SocketAddr,
    /// Data path.
    #[arg(long, value_enum, default_value_t = Backend::Socket)]
    pub backend: Backend,
    #[command(flatten)]
    pub dpdk: DpdkArgs,
    /// Reach an emulator on this host through shared memory: attach at the
    /// Unix socket it listens on (`inagg emu --shm PATH`) as --bind, the
    /// endpoint the job lists (no socket is bound). Socket backend only.
    #[arg(long, value_name = "PATH")]
    pub shm: Option<std::path::PathBuf>,
    /// Register with this controller (`inagg controller`), which admits
    /// the worker and gives it the job's id, pool, K, generation and the
    /// aggregator's address: then only --job (the job's name), --rank and
    /// --bind are needed.
    #[arg(long, env = "INAGG_CONTROLLER", value_name = "ADDR")]
    pub controller: Option<SocketAddr>,
    /// The controller's API token.
    #[arg(long, env = "INAGG_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// TLS towards the controller.
    #[command(flatten)]
    pub tls: crate::tls::ControllerTls,
    /// Longest wait, in seconds, for the controller to admit the job (the
    /// other workers to register, slots to free).
    #[arg(long, default_value_t = 60.0)]
    pub register_wait: f64,
    /// Job: its id, or with --controller its name.
    #[arg(long)]
    pub job: String,
    /// This worker's id (its rank).
    #[arg(long, alias = "rank")]
    pub worker: u16,

    /// In an aggregation tree: this worker's place among all --workers,
    /// different for every worker of the tree (member ids repeat from
    /// switch to switch; the session handshake gives each place a field of
    /// the payload). Default: --worker
    #[arg(long)]
    pub tree_rank: Option<u16>,
    /// Workers in the job (without --controller).
    #[arg(
        long,
        required_unless_present = "controller",
        conflicts_with = "controller"
    )]
    pub workers: Option<u16>,
    /// Slots in the job's pool (without --controller).
    #[arg(
        long,
        required_unless_present = "controller",
        conflicts_with = "controller"
    )]
    pub pool_size: Option<u32>,
    /// Elements per packet (the job's K; without --controller).
    #[arg(long, default_value_t = 64, conflicts_with = "controller")]
    pub elements: u16,
    /// Membership generation (without --controller).
    #[arg(long, default_value_t = 0, conflicts_with = "controller")]
    pub generation: u16,
    /// Priority class.
    #[arg(long, default_value_t = 0)]
    pub priority: u8,
    /// Element type.
    #[arg(long, value_enum, default_value_t = Dtype::F32)]
    pub dtype: Dtype,
    /// Read the tensor from this file (raw little-endian values): all of a
    /// regular file; from a pipe or a device, exactly --len elements.
    #[arg(long)]
    pub input: Option<String>,
    /// Use the built-in pattern of this many elements (a worker's values
    /// depend on its --tree-rank, which defaults to --worker); with --input,
    /// the tensor's length (required when the input is not a regular file).
    #[arg(long)]
    pub len: Option<usize>,
    /// Write the reduced tensor here (raw little-endian values).
    #[arg(long)]
    pub output: Option<String>,
    /// Check the result against the pattern's known sum (with --len, not
    /// --input: a file's sum is not known here).
    #[arg(long, requires = "len", conflicts_with = "input")]
    pub verify: bool,
    /// Give up after this many seconds without progress.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    /// Print statistics as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub congestion: crate::args::WindowArgs,
    /// Slots of the job's pool left out of the window for rounds in
    /// recovery: each round this worker asks about or resends lets one
    /// more slot in, up to this many (docs/PROTOCOL.md, "Congestion window").
    #[arg(long, default_value_t = 0, value_name = "SLOTS")]
    pub spare_slots: u32,
    /// Serve the worker's counters in the Prometheus text format on this
    /// address (GET /metrics) while it runs.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// With --metrics: keep serving the final counters this many seconds
    /// after the all-reduce, so a scrape can collect them.
    #[arg(long, default_value_t = 0.0, requires = "metrics", value_name = "SECS")]
    pub metrics_linger: f64,
}

/// The pattern worker `w` contributes at element `i` (ints: exact sums).
fn pattern_i32(w: u16, i: usize) -> i32 {
    ((i % 1000) as i32 - 500) * (i32::from(w) + 1)
}

/// The float pattern: mixed signs and magnitudes.
fn pattern_f32(w: u16, i: usize) -> f32 {
    ((i % 97) as f32 - 48.0) * 0.01 * (f32::from(w) + 1.0) * 10f32.powi((i / 1000 % 5) as i32 - 2)
}

/// Runs one all-reduce and reports.
pub fn run(a: &AgentArgs, out: &mut dyn Write) -> Result<()> {
    let give_up_after = limits::seconds("--timeout", a.timeout, false)?;
    let linger = limits::seconds("--metrics-linger", a.metrics_linger, true)?;
    if let Some(n) = a.len {
        limits::ensure_memory(n as u128 * a.dtype.size() as u128, &format!("--len {n}"))?;
    }
    // Opened before joining, so that a path that cannot be written fails
    // now, not after the peers have spent a whole all-reduce on it.
    let mut output = open_output(&a.output)?;
    let mut config = configure(a)?;
    config.priority = a.priority;
    config.give_up_after = give_up_after;
    config.window = a.congestion.window()?;
    config.spare_slots = a.spare_slots;
    let (job, worker_id) = (config.job, config.worker);
    let mut worker = open(a, config)?;
    let metrics = serve_metrics(a, &mut worker, job, worker_id)?;
    let (stats, verified) = match a.dtype {
        Dtype::I32 => run_i32(a, &mut worker, &mut output)?,
        Dtype::F32 => run_float(a, &mut worker, &mut output, |x| x)?,
        Dtype::F16 => run_float(a, &mut worker, &mut output, f16::from_f32)?,
        Dtype::Bf16 => run_float(a, &mut worker, &mut output, bf16::from_f32)?,
    };
    let config = worker.config().clone();
    let (lanes, handed_over) = lanes(&worker);
    if a.json {
        let mut v = serde_json::to_value(&stats)?;
        v["verified"] = verified.into();
        v["goodput_gbps"] = stats.goodput_gbps().into();
        v["lanes"] = lanes.into();
        v["handed_over"] = handed_over.into();
        writeln!(out, "{v}")?;
    } else {
        let lanes = if lanes > 1 {
            format!(", {lanes} lanes ({handed_over} results handed between them)")
        } else {
            String::new()
        };
        writeln!(
            out,
            "worker {} of job {}: {} bytes in {:.3} s ({:.3} Gbit/s), {} packets sent, {} retransmissions{lanes}{}",
            config.worker,
            config.job,
            stats.payload_bytes,
            stats.elapsed.as_secs_f64(),
            stats.goodput_gbps(),
            stats.packets_sent,
            stats.retransmissions,
            match verified {
                Some(true) => ", result verified",
                Some(false) => ", RESULT WRONG",
                None => "",
            }
        )?;
    }
    if metrics.is_some() && !linger.is_zero() {
        std::thread::sleep(linger);
    }
    if verified == Some(false) {
        bail!("the reduced tensor does not match the expected sum");
    }
    Ok(())
}

/// Starts the metrics server of `--metrics`, fed by the worker's live counts.
fn serve_metrics(
    a: &AgentArgs,
    worker: &mut Worker,
    job: u16,
    id: u16,
) -> Result<Option<MetricsServer>> {
    let Some(addr) = a.metrics else {
        return Ok(None);
    };
    let live = std::sync::Arc::new(Live::default());
    worker.set_live(live.clone());
    let server = MetricsServer::start(addr, move || Ok(live.exposition(job, id)))
        .with_context(|| format!("serve metrics on {addr}"))?;
    eprintln!("inagg agent: metrics on http://{}/metrics", server.addr());
    Ok(Some(server))
}

/// The job's parameters: from the controller that admits this worker, or
/// from the command line.
fn configure(a: &AgentArgs) -> Result<AgentConfig> {
    if let Some(addr) = a.controller {
        let register_wait = limits::seconds("--register-wait", a.register_wait, false)?;
        let tls = a.tls.load()?;
        let mut client = Client::connect_tls(addr, a.token.clone(), tls.as_ref())?;
        let admission = client
            .register(&a.job, a.worker, a.bind, register_wait)
            .with_context(|| format!("register rank {} of job {:?}", a.worker, a.job))?;
        return Ok(AgentConfig::from_admission(&admission, a.bind));
    }
    let job: u16 = a.job.parse().with_context(|| {
        format!(
            "--job {:?}: without --controller the job is its numeric id (0-65535)",
            a.job
        )
    })?;
    let mut config = AgentConfig::new(
        a.switch,
        job,
        a.worker,
        a.workers
            .context("--workers is needed without --controller")?,
        a.pool_size
            .context("--pool-size is needed without --controller")?,
        a.elements,
    );
    config.bind = a.bind;
    config.generation = a.generation;
    config.rank = a.tree_rank.unwrap_or(a.worker);
    Ok(config)
}

/// Lanes of the worker and results handed between them.
fn lanes(worker: &Worker) -> (usize, u64) {
    #[cfg(feature = "dpdk")]
    if let Some(port) = worker.dpdk_port() {
        return (port.lane_count(), port.counters().handed_over);
    }
    (worker.lanes(), 0)
}

/// The worker on the chosen data path.
fn open(a: &AgentArgs, config: AgentConfig) -> Result<Worker> {
    match (a.backend, &a.shm) {
        (Backend::Socket, None) => Ok(Worker::new(config)?),
        (Backend::Socket, Some(path)) => Ok(Worker::with_shm(config, path)?),
        (Backend::Dpdk, Some(_)) => bail!("--shm goes with the socket backend, not --backend dpdk"),
        (Backend::Dpdk, None) => open_dpdk(a, config),
    }
}

#[cfg(feature = "dpdk")]
fn open_dpdk(a: &AgentArgs, config: AgentConfig) -> Result<Worker> {
    use inagg_host_agent::dpdk::DpdkOptions;
    let SocketAddr::V4(local) = a.bind else {
        bail!("--bind {}: the DPDK data path speaks IPv4", a.bind);
    };
    let mut options = DpdkOptions::new(a.dpdk.eal()?, local);
    options.port = a.dpdk.one_port()?;
    options.switch_mac = a.dpdk.switch_mac()?;
    options.queues = a.dpdk.queues;
    Ok(Worker::new_dpdk(config, &options)?)
}

#[cfg(not(feature = "dpdk"))]
fn open_dpdk(_: &AgentArgs, _: AgentConfig) -> Result<Worker> {
    Err(crate::backend::not_built())
}

fn load<T: FileElement>(
    a: &AgentArgs,
    rank: u16,
    pattern: impl Fn(u16, usize) -> T,
) -> Result<Vec<T>> {
    match (&a.input, a.len) {
        (Some(path), len) => {
            let bytes = read_input(path, len.map(|n| n as u64 * T::SIZE as u64))?;
            if bytes.len() % T::SIZE != 0 {
                bail!(
                    "{path}: {} bytes is not a whole number of {}-byte elements",
                    bytes.len(),
                    T::SIZE
                );
            }
            Ok(bytes.chunks_exact(T::SIZE).map(T::from_le).collect())
        }
        (None, Some(n)) => Ok((0..n).map(|i| pattern(rank, i)).collect()),
        (None, None) => bail!("give the tensor with --input FILE or --len N"),
    }
}

/// The bytes of `--input`: exactly `want` of them when the length is
/// stated (--len), else the whole of a regular file, which must fit in
/// memory twice (the bytes and the tensor). A pipe or a device has no size
/// to check first, so it needs --len: `--input /dev/zero` is refused, not
/// read until memory runs out.
fn read_input(path: &str, want: Option<u64>) -> Result<Vec<u8>> {
    let meta = std::fs::metadata(path).with_context(|| format!("read {path}"))?;
    let limit = match want {
        Some(n) => n,
        None if meta.is_file() => meta.len(),
        None => bail!(
            "{path} is not a regular file, so its length is unknown: give --len N (elements) \
             to read N elements from it"
        ),
    };
    limits::ensure_memory(2 * u128::from(limit), &format!("--input {path}"))?;
    let Some(n) = want else {
        return inagg_switch_control::files::read_limited(Path::new(path), limit)
            .with_context(|| format!("read {path}"));
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(n).read_to_end(&mut bytes))
        .with_context(|| format!("read {path}"))?;
    if bytes.len() as u64 != n {
        bail!("{path}: {} bytes, where --len asks for {n}", bytes.len());
    }
    Ok(bytes)
}

/// `--output`, opened for writing (created where missing) before the
/// all-reduce; what it held is replaced only once there is a result.
struct Output {
    path: String,
    file: std::fs::File,
}

fn open_output(path: &Option<String>) -> Result<Option<Output>> {
    path.as_ref()
        .map(|p| {
            let file = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .open(p)
                .with_context(|| format!("open --output {p} for writing"))?;
            Ok(Output {
                path: p.clone(),
                file,
            })
        })
        .transpose()
}

fn save<T: FileElement>(output: &mut Option<Output>, data: &[T]) -> Result<()> {
    if let Some(o) = output {
        let mut out = Vec::with_capacity(data.len() * T::SIZE);
        data.iter().for_each(|v| v.write_le(&mut out));
        o.file
            .set_len(0)
            .and_then(|()| o.file.write_all(&out))
            .with_context(|| format!("write {}", o.path))?;
    }
    Ok(())
}

fn run_i32(
    a: &AgentArgs,
    worker: &mut Worker,
    output: &mut Option<Output>,
) -> Result<(Stats, Option<bool>)> {
    let (rank, workers) = (worker.config().rank, worker.config().workers);
    let mut data = load(a, rank, pattern_i32)?;
    let stats = worker.allreduce_i32(&mut data)?;
    save(output, &data)?;
    let verified = a.verify.then(|| {
        data.iter()
            .enumerate()
            .all(|(i, v)| *v == (0..workers).fold(0i32, |s, w| s.wrapping_add(pattern_i32(w, i))))
    });
    Ok((stats, verified))
}

/// A float all-reduce of the tensor in format `T` (the pattern is the
/// binary32 one rounded with `from`), verified within `T`'s bound.
fn run_float<T: Float + FileElement>(
    a: &AgentArgs,
    worker: &mut Worker,
    output: &mut Option<Output>,
    from: fn(f32) -> T,
) -> Result<(Stats, Option<bool>)> {
    let c = worker.config();
    let (rank, workers, k) = (c.rank, c.workers, c.values_per_packet());
    let pattern = |w: u16, i: usize| from(pattern_f32(w, i));
    let mut data = load(a, rank, pattern)?;
    let stats = worker.allreduce_float(&mut data, None)?;
    save(output, &data)?;
    let verified = a.verify.then(|| {
        data.chunks(k).enumerate().all(|(c, chunk)| {
            let start = c * k;
            let e = (0..workers)
                .map(|w| {
                    let theirs: Vec<T> = (start..start + chunk.len())
                        .map(|i| pattern(w, i))
                        .collect();
                    T::block_exponent(&theirs)
                })
                .max()
                .unwrap_or(0);
            chunk.iter().enumerate().all(|(j, y)| {
                let exact: f64 = (0..workers)
                    .map(|w| f64::from(pattern(w, start + j).to_f32()))
                    .sum();
                is_correct(*y, exact, T::error_bound(e, workers, exact))
            })
        })
    });
    Ok((stats, verified))
}
