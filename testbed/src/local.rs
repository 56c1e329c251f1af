//! A whole aggregation cluster in one process: an emulator on loopback, a job
//! installed through the control plane, and N workers on their own threads
//! and sockets. Real UDP and TCP all the way; used by the demo, the
//! benchmarks and the end-to-end tests.

use std::net::SocketAddr;

use anyhow::{Context, Result};
use inagg_controller::{Connector, Controller, ControllerConfig};
use inagg_emu::{Emulator, EmulatorConfig, FaultConfig, JobSpec, SwitchConfig};
use inagg_host_agent::{AgentConfig, Stats, Worker};
use inagg_switch_api::queues::ClassQueue;
use inagg_switch_control::target::{install_job, Target};
use inagg_switch_control::EmuTarget;

/// A job to set up: id, size, pool and K.
#[derive(Debug, Clone, Copy)]
pub struct JobParams {
    /// Job id.
    pub id: u16,
    /// Workers.
    pub workers: u16,
    /// First slot of the pool.
    pub pool_base: u32,
    /// Slots (the window).
    pub pool_size: u32,
    /// Elements per packet.
    pub elements: u16,
}

/// An emulator running in this process.
pub struct LocalCluster {
    /// The emulator.
    pub emu: Emulator,
}

impl LocalCluster {
    /// Starts an emulator on loopback ephemeral ports with these faults.
    pub fn start(faults: FaultConfig) -> Result<LocalCluster> {
        Self::start_with(faults, SwitchConfig::default())
    }

    /// Same, with a switch configuration.
    pub fn start_with(faults: FaultConfig, switch: SwitchConfig) -> Result<LocalCluster> {
        Self::start_config(EmulatorConfig {
            faults,
            switch,
            ..EmulatorConfig::ephemeral()
        })
    }

    /// An emulator whose ports send at `rate_bps` each, with queues of
    /// `queue_bytes`: a switch that cannot send faster than its links.
    pub fn paced(rate_bps: u64, queue_bytes: usize, faults: FaultConfig) -> Result<LocalCluster> {
        Self::start_config(EmulatorConfig {
            link: Some(inagg_emu::egress::LinkConfig {
                rate_bps,
                queue_bytes,
                per_host: false,
            }),
            faults,
            ..EmulatorConfig::ephemeral()
        })
    }

    /// An emulator with any configuration (line rate included).
    pub fn start_config(config: EmulatorConfig) -> Result<LocalCluster> {
        let emu = Emulator::start(config).context("start the emulator")?;
        Ok(LocalCluster { emu })
    }

    /// An emulator with shared-memory channels at `path` beside its UDP
    /// socket (`inagg emu --shm`).
    pub fn start_shm(faults: FaultConfig, path: &std::path::Path) -> Result<LocalCluster> {
        Self::start_config(EmulatorConfig {
            faults,
            shm: Some(path.to_path_buf()),
            ..EmulatorConfig::ephemeral()
        })
    }

    /// The emulator's control endpoint.
    pub fn control_addr(&self) -> SocketAddr {
        self.emu.control_addr()
    }

    /// An `inagg controller` owning this emulator (election id 1, as the
    /// daemon claims it), its API on a loopback ephemeral port, its state in
    /// `state`; it reconciles every 100 ms.
    pub fn controller(&self, state: &std::path::Path) -> Result<Controller> {
        self.controller_tls(state, None)
    }

    /// [`LocalCluster::controller`] whose API speaks TLS with `tls`.
    pub fn controller_tls(
        &self,
        state: &std::path::Path,
        tls: Option<inagg_netio::tls::ServerTls>,
    ) -> Result<Controller> {
        let addr = self.control_addr();
        let connect: Connector = Box::new(move || {
            Ok(Box::new(EmuTarget::connect_as(addr, 1)?) as Box<dyn Target + Send>)
        });
        Controller::start(ControllerConfig {
            tls,
            insecure: false,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            token: None,
            state: state.to_path_buf(),
            switch: (addr, connect),
            switch_data: None,
            fallbacks: Vec::new(),
            reconcile_every: std::time::Duration::from_millis(100),
        })
        .context("start the controller")
    }

    /// Binds the job's workers, then installs the job with their endpoints
    /// through the control plane. `tune` adjusts each worker's configuration.
    pub fn job(&self, p: JobParams, tune: impl Fn(&mut AgentConfig)) -> Result<Vec<Worker>> {
        self.job_with_queues(p, Vec::new(), tune)
    }

    /// [`LocalCluster::job`] with the job's own priority class -> queue map.
    pub fn job_with_queues(
        &self,
        p: JobParams,
        queues: Vec<ClassQueue>,
        tune: impl Fn(&mut AgentConfig),
    ) -> Result<Vec<Worker>> {
        self.job_on(p, queues, |_| None, tune)
    }

    /// [`LocalCluster::job`] whose workers `shm` says so attach to the
    /// emulator's shared-memory socket at `path` (as endpoints of their
    /// own, [`shm_endpoint`]); the others use UDP.
    pub fn job_shm(
        &self,
        p: JobParams,
        path: &std::path::Path,
        shm: impl Fn(u16) -> bool,
        tune: impl Fn(&mut AgentConfig),
    ) -> Result<Vec<Worker>> {
        self.job_on(p, Vec::new(), |w| shm(w).then_some(path), tune)
    }

    fn job_on<'p>(
        &self,
        p: JobParams,
        queues: Vec<ClassQueue>,
        shm: impl Fn(u16) -> Option<&'p std::path::Path>,
        tune: impl Fn(&mut AgentConfig),
    ) -> Result<Vec<Worker>> {
        let workers = (0..p.workers)
            .map(|w| {
                let mut c = AgentConfig::new(
                    self.emu.data_addr(),
                    p.id,
                    w,
                    p.workers,
                    p.pool_size,
                    p.elements,
                );
                c.bind = SocketAddr::from(([127, 0, 0, 1], 0));
                if let Some(path) = shm(w) {
                    c.bind = shm_endpoint(p.id, w);
                    tune(&mut c);
                    return Worker::with_shm(c, path)
                        .with_context(|| format!("attach worker {w} over shared memory"));
                }
                tune(&mut c);
                Worker::new(c).with_context(|| format!("start worker {w}"))
            })
            .collect::<Result<Vec<_>>>()?;
        let spec = JobSpec {
            child_switches: 0,
            detours: Vec::new(),
            upstream: None,
            id: p.id,
            workers: workers.iter().map(Worker::local_addr).collect(),
            pool_base: p.pool_base,
            pool_size: p.pool_size,
            elements: p.elements,
            generation: 0,
            queues,
            group: None,
        };
        let mut target = EmuTarget::connect(self.control_addr())?;
        install_job(&mut target, &spec).with_context(|| format!("install job {}", p.id))?;
        Ok(workers)
    }
}

/// The endpoint worker `w` of job `job` attaches to a shared-memory
/// channel as: an address no socket on this host uses (127.0.100.0/24),
/// distinct per job and worker.
pub fn shm_endpoint(job: u16, w: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 100, (job % 250) as u8 + 1], 1000 + w))
}

/// Runs one all-reduce on every worker at once, each on its own thread,
/// named `worker-N` (so that a profile tells the workers' time from the
/// in-process emulator's, `emu-data`, and the caller's).
pub fn run_all<T: Send>(
    workers: &mut [Worker],
    data: &mut [Vec<T>],
    op: impl Fn(&mut Worker, &mut [T]) -> inagg_host_agent::Result<Stats> + Sync,
) -> Result<Vec<Stats>> {
    let op = &op;
    std::thread::scope(|s| {
        let handles = workers
            .iter_mut()
            .zip(data.iter_mut())
            .enumerate()
            .map(|(i, (w, d))| {
                std::thread::Builder::new()
                    .name(format!("worker-{i}"))
                    .spawn_scoped(s, move || op(w, d.as_mut_slice()))
                    .with_context(|| format!("start worker {i}'s thread"))
            })
            .collect::<Result<Vec<_>>>()?;
        join_workers(handles)
    })
}

/// [`run_all`] with every worker's thread pinned to `cpus`: with the
/// emulator's data plane pinned elsewhere (`EmulatorConfig::cpu`), one
/// host's stand-in for a switch and workers on devices of their own
/// ([`inagg_emu::affinity`]).
pub fn run_all_on<T: Send>(
    cpus: &[usize],
    workers: &mut [Worker],
    data: &mut [Vec<T>],
    op: impl Fn(&mut Worker, &mut [T]) -> inagg_host_agent::Result<Stats> + Sync,
) -> Result<Vec<Stats>> {
    inagg_emu::affinity::check(cpus).context("the workers' CPUs")?;
    run_all(workers, data, |w, d| {
        inagg_emu::affinity::pin(cpus).map_err(|source| inagg_host_agent::Error::Io {
            what: "pin the worker's thread",
            source,
        })?;
        op(w, d)
    })
}

/// Joins one thread per worker, in worker order; the first failure (or
/// panic) names its worker.
pub fn join_workers<T>(
    handles: Vec<std::thread::ScopedJoinHandle<'_, inagg_host_agent::Result<T>>>,
) -> Result<Vec<T>> {
    handles
        .into_iter()
        .enumerate()
        .map(|(i, h)| match h.join() {
            Ok(r) => r.with_context(|| format!("worker {i}")),
            Err(_) => Err(anyhow::anyhow!("worker {i} panicked")),
        })
        .collect()
}

/// Runs two jobs' int32 all-reduces at once, `a`'s workers on `inputs_a`
/// and `b`'s on `inputs_b`, and checks both sums exact.
pub fn allreduce_i32_side_by_side(
    a: &mut [Worker],
    inputs_a: &[Vec<i32>],
    b: &mut [Worker],
    inputs_b: &[Vec<i32>],
) -> Result<()> {
    let (mut da, mut db) = (inputs_a.to_vec(), inputs_b.to_vec());
    std::thread::scope(|s| {
        let ta = s.spawn(|| run_all(a, &mut da, |w, d| w.allreduce_i32(d)));
        let tb = s.spawn(|| run_all(b, &mut db, |w, d| w.allreduce_i32(d)));
        let ra = ta
            .join()
            .map_err(|_| anyhow::anyhow!("job a's all-reduce panicked"))?;
        let rb = tb
            .join()
            .map_err(|_| anyhow::anyhow!("job b's all-reduce panicked"))?;
        ra.context("job a")?;
        rb.context("job b")
    })?;
    crate::verify::check_i32(inputs_a, &da).map_err(|e| anyhow::anyhow!("job a: {e}"))?;
    crate::verify::check_i32(inputs_b, &db).map_err(|e| anyhow::anyhow!("job b: {e}"))
}
