//! inagg's host agent: the worker side of in-network aggregation.
//!
//! A [`Worker`] owns a UDP socket towards the switch (or the emulator) and
//! all-reduces tensors through the job's pool of aggregator slots:
//! [`Worker::allreduce_i32`] sums exactly (wrapping like the switch),
//! [`Worker::allreduce_f32`] quantizes to int32 with a block exponent
//! negotiated through the switch ([`quant`] states the error bound).
//! [`AsyncWorker`] is the same for async code.
//!
//! Every worker of a job must make the same sequence of calls with tensors
//! of the same lengths (the usual data-parallel contract): slots alternate
//! shadow sets across calls. After an error, recreate the job (or bump its
//! generation) before reusing it.
//!
//! Modules: [`quant`] (block floating point), `engine` (the self-clocking
//! window and retransmission), `codec` (what each round carries), [`stats`],
//! [`priority`] (FIFO, P3 and ByteScheduler over many tensors of one job).

mod codec;
#[cfg(feature = "dpdk")]
pub mod dpdk;
mod engine;
pub mod float;
pub mod group;
mod link;
pub mod priority;
pub mod protocol;
pub mod quant;
pub mod stats;

use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::codec::{chunk_count, FloatCodec, IntCodec, LaneData};
use crate::engine::Watchers;
use crate::float::Float;
use crate::link::{Link, ShmLink, SocketLink};
use crate::protocol::announce::LastRound;
use crate::protocol::path::Path;
pub use crate::protocol::session::HANDSHAKE_WEIGHT;
use crate::protocol::session::{SlotSession, Token};
use crate::protocol::{Codec, Lane};
pub use crate::stats::Stats;
/// The 16-bit float types [`Worker::allreduce_f16`] and [`Worker::allreduce_bf16`] take.
pub use half::{bf16, f16};

/// How a worker reaches its job on the switch.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentConfig {
    /// The switch's data-plane address.
    pub switch: SocketAddr,
    /// The local address to bind (must match the job's worker endpoint).
    pub bind: SocketAddr,
    /// Job id.
    pub job: u16,
    /// This worker's id in the job.
    pub worker: u16,
    /// Workers whose values each result sums: the job's members on one
    /// switch; across an aggregation tree, every worker of every site
    /// (each result's count must reach it, and the quantizer divides by
    /// it). Up to 65535, while `worker` is this worker's member id at its
    /// own switch (below 64, the width of a slot's bitmap).
    pub workers: u16,
    /// This worker's place among all `workers` (below it): where its token
    /// goes in a session handshake (docs/PROTOCOL.md, "Sessions"), so it
    /// must differ between any two workers whose values one result sums.
    /// [`AgentConfig::new`] makes it `worker`, which is right on one switch;
    /// across an aggregation tree, member ids repeat from site to site and
    /// each worker needs a rank of its own.
    pub rank: u16,
    /// Slots in the job's pool: the window.
    pub pool_size: u32,
    /// Elements per packet, K (the job's). A data packet carries K - 1
    /// values and its check (docs/PROTOCOL.md, "The check lane").
    pub elements: u16,
    /// Membership generation of the job.
    pub generation: u16,
    /// Priority class of this worker's packets.
    pub priority: u8,
    /// Retransmission timeout before any round trip has been measured.
    pub initial_rto: Duration,
    /// Lower bound of the adaptive timeout.
    pub min_rto: Duration,
    /// Upper bound of the timeout after backoff.
    pub max_rto: Duration,
    /// Give up when no result at all arrives for this long.
    pub give_up_after: Duration,
    /// How many slots may be in flight at once (docs/PROTOCOL.md,
    /// "Congestion window").
    pub window: Window,
    /// Slots of the pool the window leaves to rounds in recovery: the
    /// window grows to `pool_size - spare_slots` at most, and each round
    /// this worker has asked about or resent lets one more slot in, up to
    /// `spare_slots` (docs/PROTOCOL.md, "Congestion window"). 0 by default.
    pub spare_slots: u32,
}

impl AgentConfig {
    /// A configuration with the default timers (initial 50 ms, adaptive
    /// between 20 ms and 1 s, give up after 10 s without progress).
    pub fn new(
        switch: SocketAddr,
        job: u16,
        worker: u16,
        workers: u16,
        pool_size: u32,
        elements: u16,
    ) -> Self {
        AgentConfig {
            switch,
            bind: if switch.is_ipv4() {
                SocketAddr::from(([0, 0, 0, 0], 0))
            } else {
                SocketAddr::from(([0u16; 8], 0))
            },
            job,
            worker,
            workers,
            rank: worker,
            pool_size,
            elements,
            generation: 0,
            priority: 0,
            initial_rto: Duration::from_millis(50),
            min_rto: Duration::from_millis(20),
            max_rto: Duration::from_secs(1),
            give_up_after: Duration::from_secs(10),
            window: Window::default(),
            spare_slots: 0,
        }
    }

    /// The configuration of a worker the controller admitted, with default
    /// timers; `bind` is the local endpoint the worker registered.
    pub fn from_admission(a: &inagg_controller_api::Admission, bind: SocketAddr) -> Self {
        let mut c = AgentConfig::new(
            a.data_addr,
            a.id,
            a.worker,
            a.workers,
            a.pool_size,
            a.elements,
        );
        c.bind = bind;
        c.generation = a.generation;
        c
    }

    /// Tensor elements per packet: K less the check lane.
    pub fn values_per_packet(&self) -> usize {
        usize::from(self.elements).saturating_sub(1)
    }

    /// Bytes of one datagram: the header and K elements.
    pub fn datagram_len(&self) -> usize {
        inagg_wire::HEADER_LEN + usize::from(self.elements) * inagg_wire::ELEMENT_LEN
    }

    fn validate(&self) -> Result<()> {
        let fail = |m: String| Err(Error::Config(m));
        if self.workers == 0 {
            return fail("workers = 0: a job needs at least one worker".into());
        }
        if self.worker >= self.workers {
            return fail(format!(
                "worker id {} is not below the worker count {}",
                self.worker, self.workers
            ));
        }
        if usize::from(self.worker) >= inagg_wire::MAX_WORKERS {
            return fail(format!(
                "worker id {} is beyond a switch job's {} members (a tree puts more \
                 workers under one sum, at several switches)",
                self.worker,
                inagg_wire::MAX_WORKERS
            ));
        }
        if self.pool_size == 0 || self.pool_size > 65_536 {
            return fail(format!(
                "pool size {} must be 1 to 65536 slots",
                self.pool_size
            ));
        }
        if self.spare_slots >= self.pool_size {
            return fail(format!(
                "{} spare slots leave none of the pool's {} to the window",
                self.spare_slots, self.pool_size
            ));
        }
        if self.elements < 2 || usize::from(self.elements) > inagg_wire::MAX_ELEMENTS {
            return fail(format!(
                "elements per packet {} must be 2 to {} (each packet's last element is its \
                 check, the others carry values)",
                self.elements,
                inagg_wire::MAX_ELEMENTS
            ));
        }
        if self.rank >= self.workers {
            return fail(format!(
                "rank {} is not below the worker count {}",
                self.rank, self.workers
            ));
        }
        if Token::new(self.rank, self.workers, self.elements).is_none() {
            return fail(format!(
                "{} workers with K = {}: a session handshake gives each worker at least one bit \
                 of the payload, so K must be at least workers / 32",
                self.workers, self.elements
            ));
        }
        if self.min_rto.is_zero() || self.min_rto > self.max_rto || self.initial_rto.is_zero() {
            return fail("timeouts must be positive with min_rto <= max_rto".into());
        }
        if matches!(
            self.window,
            Window::Adaptive { initial: 0 } | Window::Fixed { slots: 0 }
        ) {
            return fail("a window holds 1 slot or more".into());
        }
        Ok(())
    }
}

/// How many of its pool's slots a worker keeps in flight
/// (docs/PROTOCOL.md, "Congestion window").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    /// Start at `initial` slots (at most the pool), grow while results come
    /// back in time, halve when one times out: what a switch that cannot
    /// keep up (a software one) needs, and free where it can.
    Adaptive {
        /// Slots in flight before the first result.
        initial: u32,
    },
    /// `slots` in flight (at most the pool), whatever happens: for
    /// measuring what a switch sustains, and for tests that need a known
    /// load. [`Window::POOL`] is the whole pool.
    Fixed {
        /// Slots in flight.
        slots: u32,
    },
}

impl Window {
    /// The whole pool in flight, always.
    pub const POOL: Window = Window::Fixed { slots: u32::MAX };
}

impl Default for Window {
    /// Adaptive from 16 slots: slow start reaches a pool of 512 in five
    /// round trips.
    fn default() -> Self {
        Window::Adaptive { initial: 16 }
    }
}

/// What can go wrong in an all-reduce.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The configuration is unusable (the caller's fault).
    #[error("invalid agent configuration: {0}")]
    Config(String),
    /// The DPDK data path failed (its EAL, port or memory); the message is
    /// DPDK's.
    #[error("DPDK data path: {0}")]
    Dpdk(String),
    /// A socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What the agent was doing.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// No progress for `give_up_after`: the switch or another worker is gone,
    /// or the job is not installed as this worker believes.
    #[error(
        "no result from the switch at {switch} for job {job} (slot {slot} waiting) for {waited:?} after \
         {retransmissions} retransmissions; {}",
        timeout_advice(*switch, (*refusals, *refused_last), *handshake_weight, (*missing, *slot, *queries), *rejected)
    )]
    Timeout {
        /// The switch address.
        switch: SocketAddr,
        /// The job.
        job: u16,
        /// A slot still waiting.
        slot: u32,
        /// Time without progress.
        waited: Duration,
        /// Retransmissions so far.
        retransmissions: u64,
        /// ICMP port unreachables from the switch's address.
        refusals: u64,
        /// How long before giving up the last of them came.
        refused_last: Duration,
        /// The last result of this worker's own handshake whose weight was
        /// not 2n, with the 2n expected: (seen, expected).
        handshake_weight: Option<(u16, u32)>,
        /// The members the switch said the stuck slot's round waits for
        /// (its status to this worker's last query), as a bitmap: bit w
        /// for member w; 0 when it said no such thing.
        missing: u64,
        /// Queries this worker sent in the all-reduce, and the statuses
        /// the switch answered them with.
        queries: (u32, u32),
        /// Results that failed their check ([`Stats::rejected`]).
        rejected: u32,
    },
}

/// What to check after a timeout: nothing listening at the switch's
/// address, when its host said so (and still says so), a switch that went
/// away and came back, or else the job and the other workers.
fn timeout_advice(
    switch: SocketAddr,
    (refusals, quiet): (u64, Duration),
    weight: Option<(u16, u32)>,
    (missing, slot, (queries, statuses)): (u64, u32, (u32, u32)),
    rejected: u32,
) -> String {
    // A worker resends at least once per max_rto (1 s by default) and a
    // host refuses each (rate-limited) while nothing listens: refusals that
    // stopped this long before giving up mean something listens again.
    const BACK_AFTER: Duration = Duration::from_secs(3);
    if refusals > 0 && quiet >= BACK_AFTER {
        format!(
            "the host at {switch} answered 'port unreachable' {refusals} times, the last {:.1} s \
             before giving up, then took this worker's packets without answering: the switch \
             went away and came back (restarted?), and a restarted switch has lost the partial \
             sums and stored results this all-reduce was waiting on, so it cannot finish; run \
             it again (a controller re-installs the job)",
            quiet.as_secs_f64()
        )
    } else if refusals > 0 {
        format!(
            "the host at {switch} answered 'port unreachable' {refusals} times: nothing listens \
             there; is the switch running, at that address?"
        )
    } else if rejected > 0 {
        format!(
            "{rejected} results for this worker's rounds failed their check: the switch summed \
             contributions that are not this session's into them (an earlier session's \
             datagrams replayed, or datagrams forged from a member's endpoint), or they were \
             forged, or the members no longer agree on a slot's round (one a round behind \
             after a lost result, the member ahead gone before it could hand the round over: \
             docs/PROTOCOL.md, \"Sessions\"); none was taken. Find who else sends to the switch from the members' \
             addresses; a new session starts clean"
        )
    } else if let Some((seen, expected)) = weight {
        // A handshake weighs 2 per worker: a result with this worker's own
        // token in it and the wrong weight is the switch's count of workers.
        format!(
            "results of this worker's own handshakes weighed {seen}, not {expected}: each worker's \
             handshake weighs 2, so the switch's job looks like {} workers where this worker was \
             told {}; give every worker the job's worker count (or, in an aggregation tree, the \
             total of workers below the root)",
            seen / 2,
            expected / 2
        )
    } else if missing != 0 {
        let missing: Vec<u16> = inagg_wire::status::members(missing).collect();
        format!(
            "the switch holds this worker's contribution to slot {slot} and waits for members \
             {missing:?}: check that those workers are running (and not stalled) with the same \
             job, worker count, K and pool size"
        )
    } else if queries > 0 && statuses == 0 {
        format!(
            "the switch answered none of this worker's {queries} queries about its slots: it does \
             not have the job with this worker's endpoint, or the path to it loses everything; \
             check that the job is installed with this worker's endpoint"
        )
    } else {
        "check that the job is installed with this worker's endpoint, that every worker is \
         running with the same worker count, K and pool size, and, in an aggregation tree, that \
         each worker has a rank of its own"
            .into()
    }
}

/// Result with the agent's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    fn io(what: &'static str, source: std::io::Error) -> Error {
        Error::Io { what, source }
    }
}

/// The data path a worker runs on.
#[derive(Debug)]
enum Backend {
    Socket(SocketLink),
    Shm(ShmLink),
    #[cfg(feature = "dpdk")]
    Dpdk(Box<dpdk::DpdkPort>),
}

/// One worker of a job.
#[derive(Debug)]
pub struct Worker {
    config: AgentConfig,
    backend: Backend,
    /// Each slot's round counter and handshake state in this session.
    sessions: Vec<SlotSession>,
    /// Each slot's last result, to announce to a switch that lost it.
    last: Vec<LastRound>,
    /// This session's token (docs/PROTOCOL.md, "Sessions").
    token: Token,
    path: Path,
    progress: Option<Arc<AtomicU64>>,
    live: Option<Arc<stats::Live>>,
}

impl Worker {
    /// Binds the worker's UDP socket and connects it to the switch.
    pub fn new(config: AgentConfig) -> Result<Worker> {
        config.validate()?;
        let link = SocketLink::new(config.bind, config.switch, config.datagram_len())?;
        Ok(Worker::with_backend(config, Backend::Socket(link)))
    }

    /// A worker on `socket`, bound already (to the endpoint registered
    /// with the controller before the worker was made: a port bound and
    /// held from the start cannot be taken by another process meanwhile).
    /// `config.bind` must be its address.
    pub fn with_socket(config: AgentConfig, socket: std::net::UdpSocket) -> Result<Worker> {
        config.validate()?;
        let bound = socket
            .local_addr()
            .map_err(|e| Error::io("read the worker socket's address", e))?;
        if bound != config.bind {
            return Err(Error::Config(format!(
                "the socket is bound to {bound}, the configuration says {}",
                config.bind
            )));
        }
        let link = SocketLink::from_socket(socket, config.switch, config.datagram_len())?;
        Ok(Worker::with_backend(config, Backend::Socket(link)))
    }

    /// A worker on a shared-memory channel to an emulator on this host
    /// (`inagg emu --shm PATH`), attached as `config.bind`, the endpoint its
    /// job lists: no kernel copies, no system call while both are busy.
    pub fn with_shm(config: AgentConfig, path: &std::path::Path) -> Result<Worker> {
        config.validate()?;
        let link = ShmLink::attach(path, config.bind, config.datagram_len(), config.pool_size)?;
        Ok(Worker::with_backend(config, Backend::Shm(link)))
    }

    /// A worker on a DPDK port: raw Ethernet frames, polled, no system call
    /// on the fast path. See [`dpdk::DpdkOptions`].
    #[cfg(feature = "dpdk")]
    pub fn new_dpdk(config: AgentConfig, options: &dpdk::DpdkOptions) -> Result<Worker> {
        config.validate()?;
        let port = dpdk::DpdkPort::open(&config, options)?;
        Ok(Worker::with_backend(config, Backend::Dpdk(Box::new(port))))
    }

    fn with_backend(config: AgentConfig, backend: Backend) -> Worker {
        let token = new_token(&config);
        let path = Path::new(&config);
        Worker {
            sessions: vec![SlotSession::default(); config.pool_size as usize],
            last: vec![LastRound::default(); config.pool_size as usize],
            token,
            config,
            backend,
            path,
            progress: None,
            live: None,
        }
    }

    /// The local address: the endpoint to install in the job.
    pub fn local_addr(&self) -> SocketAddr {
        match &self.backend {
            Backend::Socket(link) => link.local_addr(),
            Backend::Shm(link) => link.local_addr(),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(port) => SocketAddr::V4(port.local()),
        }
    }

    /// Lanes (threads, each with its own queue pair) an all-reduce runs on.
    pub fn lanes(&self) -> usize {
        match &self.backend {
            Backend::Socket(_) | Backend::Shm(_) => 1,
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(port) => port.lane_count(),
        }
    }

    /// The DPDK port, when the worker runs on one (its counters, MAC).
    #[cfg(feature = "dpdk")]
    pub fn dpdk_port(&self) -> Option<&dpdk::DpdkPort> {
        match &self.backend {
            Backend::Dpdk(port) => Some(port),
            _ => None,
        }
    }

    /// Which data path the worker uses: "socket", "shm" or "dpdk".
    pub fn backend_name(&self) -> &'static str {
        match &self.backend {
            Backend::Socket(_) => "socket",
            Backend::Shm(_) => "shm",
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(_) => "dpdk",
        }
    }

    /// The configuration.
    pub fn config(&self) -> &AgentConfig {
        &self.config
    }

    /// Moves this worker, socket or port and all, to another job on the
    /// same switch with the same pool size and packet size, as a controller
    /// that installs a job per group launch hands out (selective reduce's
    /// partial groups). The rank becomes the member id (one switch; see
    /// [`Worker::rerank`] for a tree). A new session: the slots' round
    /// counters start again at 0 and each slot shakes hands again; the
    /// measured round trip is kept (same path). An invalid rank or worker
    /// count is refused and leaves the worker as it was.
    pub fn retarget(&mut self, job: u16, worker: u16, workers: u16, generation: u16) -> Result<()> {
        self.reconfigure(AgentConfig {
            job,
            worker,
            workers,
            rank: worker,
            generation,
            ..self.config.clone()
        })
    }

    /// Gives the worker another rank ([`AgentConfig::rank`]: its place in
    /// the sums of an aggregation tree) and starts a new session.
    pub fn rerank(&mut self, rank: u16) -> Result<()> {
        self.reconfigure(AgentConfig {
            rank,
            ..self.config.clone()
        })
    }

    /// Takes `config`, if valid, as a new session's.
    fn reconfigure(&mut self, config: AgentConfig) -> Result<()> {
        config.validate()?;
        self.token = new_token(&config);
        self.config = config;
        self.sessions.fill(SlotSession::default());
        self.last.fill(LastRound::default());
        Ok(())
    }

    /// A counter the worker increments once per result it receives (one
    /// packet round of one slot), for progress displays.
    pub fn set_progress(&mut self, counter: Arc<AtomicU64>) {
        self.progress = Some(counter);
    }

    /// Publishes the worker's counts to `live` as it runs (read with
    /// [`stats::Live::snapshot`], e.g. by a metrics exporter).
    pub fn set_live(&mut self, live: Arc<stats::Live>) {
        self.live = Some(live);
    }

    /// Packets (rounds) an all-reduce of `len` elements takes per worker:
    /// one per chunk, plus one exponent round per slot for floats. An int32
    /// all-reduce also sends a handshake per slot the session has not used
    /// yet (docs/PROTOCOL.md, "Sessions"), which is not counted here.
    pub fn rounds(&self, len: usize, float: bool) -> u64 {
        let chunks = chunk_count(len, self.config.values_per_packet());
        let extra = if float {
            chunks.min(self.config.pool_size as usize)
        } else {
            0
        };
        (chunks + extra) as u64
    }

    /// The window of an all-reduce of `chunks` chunks (at least 1, so a
    /// tensor can always be split into lanes).
    fn window(&self, chunks: usize) -> usize {
        chunks.min(self.config.pool_size as usize).max(1)
    }

    /// Runs `chunks` chunks through the window on this worker's data path,
    /// with one codec per lane.
    fn run<C: Codec + Send>(
        &mut self,
        mut codecs: Vec<C>,
        chunks: usize,
        bytes: u64,
    ) -> Result<Stats> {
        let config = &self.config;
        let sessions = (&mut self.sessions[..], &mut self.last[..]);
        let path = &mut self.path;
        let progress = self.progress.as_deref();
        let live = self.live.as_deref();
        let shared = Shared {
            config,
            token: self.token,
            progress,
            live,
            chunks,
            bytes,
        };
        let result = match &mut self.backend {
            Backend::Socket(link) => shared.run_lane(link, &mut codecs[0], sessions, path, (0, 1)),
            Backend::Shm(link) => shared.run_lane(link, &mut codecs[0], sessions, path, (0, 1)),
            #[cfg(feature = "dpdk")]
            Backend::Dpdk(port) => match port.lanes_mut() {
                [link] => {
                    dpdk::on_lcore(|| shared.run_lane(link, &mut codecs[0], sessions, path, (0, 1)))
                }
                links => shared.run_lanes(links, codecs, sessions, path),
            },
        };
        if let Some(live) = live {
            live.finish(result.as_ref().ok());
        }
        result
    }

    /// Sums `data` across the job's workers in place, exactly (int32 adds
    /// wrap, as on the switch).
    pub fn allreduce_i32(&mut self, data: &mut [i32]) -> Result<Stats> {
        self.allreduce_i32_classes(data, None)
    }

    /// [`Worker::allreduce_i32`] with a priority class per chunk of
    /// [`AgentConfig::values_per_packet`] elements (`classes[c]` tags chunk `c`'s packets; chunks past the end
    /// of `classes` use the worker's class): several tensors of different
    /// urgency can share one all-reduce and still leave the switch by their
    /// own queues.
    pub fn allreduce_i32_classes(
        &mut self,
        data: &mut [i32],
        classes: Option<&[u8]>,
    ) -> Result<Stats> {
        let k = self.config.values_per_packet();
        let chunks = chunk_count(data.len(), k);
        let bytes = data.len() as u64 * 4;
        let codecs = LaneData::split(data, k, self.window(chunks), self.lanes())
            .into_iter()
            .map(|data| IntCodec { data, classes })
            .collect();
        self.run(codecs, chunks, bytes)
    }

    /// Sums `data` across the job's workers in place, within the bound of
    /// [`quant::error_bound`]; chunks holding NaN or Inf on any worker come
    /// back as NaN on every worker.
    pub fn allreduce_f32(&mut self, data: &mut [f32]) -> Result<Stats> {
        self.allreduce_f32_classes(data, None)
    }

    /// [`Worker::allreduce_f32`] with a priority class per chunk, as
    /// [`Worker::allreduce_i32_classes`].
    pub fn allreduce_f32_classes(
        &mut self,
        data: &mut [f32],
        classes: Option<&[u8]>,
    ) -> Result<Stats> {
        self.allreduce_float(data, classes)
    }

    /// Sums IEEE binary16 `data` across the job's workers in place, within
    /// the bound of [`Float::error_bound`]: as [`Worker::allreduce_f32`],
    /// with each result rounded to nearest-even into binary16 (sums past
    /// its range become infinite). The packets are those of a binary32
    /// all-reduce, so workers of one job may mix the two.
    pub fn allreduce_f16(&mut self, data: &mut [f16]) -> Result<Stats> {
        self.allreduce_float(data, None)
    }

    /// [`Worker::allreduce_f16`] for bfloat16 tensors.
    pub fn allreduce_bf16(&mut self, data: &mut [bf16]) -> Result<Stats> {
        self.allreduce_float(data, None)
    }

    /// A float all-reduce of any [`Float`] format, with a priority class
    /// per chunk when `classes` is given.
    pub fn allreduce_float<T: Float>(
        &mut self,
        data: &mut [T],
        classes: Option<&[u8]>,
    ) -> Result<Stats> {
        let k = self.config.values_per_packet();
        let chunks = chunk_count(data.len(), k);
        let bytes = std::mem::size_of_val(data) as u64;
        let workers = self.config.workers;
        let codecs = LaneData::split(data, k, self.window(chunks), self.lanes())
            .into_iter()
            .map(|data| FloatCodec::new(data, workers, classes))
            .collect();
        self.run(codecs, chunks, bytes)
    }
}

/// What every lane of one all-reduce shares.
#[derive(Clone, Copy)]
struct Shared<'a> {
    config: &'a AgentConfig,
    token: Token,
    progress: Option<&'a AtomicU64>,
    live: Option<&'a stats::Live>,
    chunks: usize,
    bytes: u64,
}

impl Shared<'_> {
    /// One lane's engine over `link`.
    fn run_lane<L: Link, C: Codec>(
        self,
        link: &mut L,
        codec: &mut C,
        (sessions, last): (&mut [SlotSession], &mut [LastRound]),
        path: &mut Path,
        lane: (usize, usize),
    ) -> Result<Stats> {
        let lane = Lane {
            config: self.config,
            sessions,
            token: self.token,
            path,
            last,
            lane,
        };
        let watch = Watchers {
            progress: self.progress,
            live: self.live,
        };
        engine::run(link, lane, codec, (self.chunks, self.bytes), watch)
    }

    /// One thread per lane; each lane's slots' sessions and last results
    /// come back from it, the statistics are summed and the first error is
    /// returned.
    #[cfg(feature = "dpdk")]
    fn run_lanes<L: Link + Send, C: Codec + Send>(
        self,
        links: &mut [L],
        codecs: Vec<C>,
        (sessions, last): (&mut [SlotSession], &mut [LastRound]),
        path: &mut Path,
    ) -> Result<Stats> {
        let lanes = links.len();
        // All results may arrive on one lane's queue (one flow hashes to
        // one queue), so a lane that is done keeps receiving and handing
        // results over until every lane is.
        let running = std::sync::atomic::AtomicUsize::new(lanes);
        let running = &running;
        let outcomes: Vec<_> = std::thread::scope(|scope| {
            let handles: Vec<_> = links
                .iter_mut()
                .zip(codecs)
                .enumerate()
                .map(|(lane, (link, mut codec))| {
                    let (mut sessions, mut path) = (sessions.to_vec(), *path);
                    let mut last = last.to_vec();
                    scope.spawn(move || {
                        dpdk::on_lcore(|| {
                            let r = self.run_lane(
                                link,
                                &mut codec,
                                (&mut sessions, &mut last),
                                &mut path,
                                (lane, lanes),
                            );
                            running.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
                            while running.load(std::sync::atomic::Ordering::Acquire) > 0 {
                                if link.forward() == 0 {
                                    std::thread::yield_now();
                                }
                            }
                            (r, (sessions, last), path)
                        })
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
                .collect()
        });
        let mut total: Option<Stats> = None;
        let mut error = None;
        for (lane, (r, (lane_sessions, mut lane_last), lane_path)) in
            outcomes.into_iter().enumerate()
        {
            for s in (lane..sessions.len()).step_by(lanes) {
                sessions[s] = lane_sessions[s];
                last[s] = std::mem::take(&mut lane_last[s]);
            }
            if lane == 0 {
                *path = lane_path;
            }
            match r {
                Ok(stats) => match &mut total {
                    Some(t) => t.merge(&stats),
                    None => total = Some(stats),
                },
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        match error {
            Some(e) => Err(e),
            None => Ok(total.unwrap_or_default()),
        }
    }
}

/// The session token of a worker with a validated `config`.
fn new_token(config: &AgentConfig) -> Token {
    Token::new(config.rank, config.workers, config.elements)
        .expect("AgentConfig::validate checks that the token has room")
}

/// A [`Worker`] for async code: each all-reduce runs on tokio's blocking
/// pool (the data path is a tight batched-syscall loop that must not stall
/// the async executor), and the future completes with the reduced tensor.
#[derive(Debug, Clone)]
pub struct AsyncWorker {
    inner: Arc<Mutex<Worker>>,
}

impl AsyncWorker {
    /// Wraps a worker.
    pub fn new(worker: Worker) -> AsyncWorker {
        AsyncWorker {
            inner: Arc::new(Mutex::new(worker)),
        }
    }

    /// Async [`Worker::allreduce_f32`]: takes the tensor and gives it back reduced.
    pub async fn allreduce_f32(&self, mut data: Vec<f32>) -> Result<(Vec<f32>, Stats)> {
        let inner = self.inner.clone();
        run_blocking(move || {
            let stats = lock(&inner).allreduce_f32(&mut data)?;
            Ok((data, stats))
        })
        .await
    }

    /// Async [`Worker::allreduce_float`]: any float format (f32, f16, bf16).
    pub async fn allreduce_float<T: Float>(&self, mut data: Vec<T>) -> Result<(Vec<T>, Stats)> {
        let inner = self.inner.clone();
        run_blocking(move || {
            let stats = lock(&inner).allreduce_float(&mut data, None)?;
            Ok((data, stats))
        })
        .await
    }

    /// Async [`Worker::allreduce_i32`].
    pub async fn allreduce_i32(&self, mut data: Vec<i32>) -> Result<(Vec<i32>, Stats)> {
        let inner = self.inner.clone();
        run_blocking(move || {
            let stats = lock(&inner).allreduce_i32(&mut data)?;
            Ok((data, stats))
        })
        .await
    }
}

fn lock(w: &Mutex<Worker>) -> std::sync::MutexGuard<'_, Worker> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(Error::io(
            "run the all-reduce task",
            std::io::Error::other(e.to_string()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker on a socket bound already takes it only with the
    /// configuration that names its address.
    #[test]
    fn a_worker_takes_a_bound_socket_its_configuration_names() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let bound = socket.local_addr().unwrap();
        let switch: SocketAddr = "127.0.0.1:47000".parse().unwrap();
        let mut config = AgentConfig::new(switch, 1, 0, 1, 8, 64);
        config.bind = "127.0.0.1:1".parse().unwrap();
        let Err(e) = Worker::with_socket(config.clone(), socket.try_clone().unwrap()) else {
            panic!("taken with another address");
        };
        let e = e.to_string();
        assert!(
            e.contains(&format!("the socket is bound to {bound}")),
            "{e}"
        );
        config.bind = bound;
        let w = Worker::with_socket(config, socket).unwrap();
        assert_eq!(w.local_addr(), bound);
    }

    /// A timeout's advice tells a switch that is not there from one that
    /// went away and came back (a restart, which loses what it held).
    #[test]
    fn timeout_advice_tells_a_missing_switch_from_a_restarted_one() {
        let switch: SocketAddr = "127.0.0.1:47000".parse().unwrap();
        let quiet = (0, 3, (0, 0));
        let still = timeout_advice(switch, (40, Duration::from_millis(300)), None, quiet, 0);
        assert!(still.contains("nothing listens there"), "{still}");
        let back = timeout_advice(switch, (40, Duration::from_secs(12)), None, quiet, 0);
        assert!(
            back.contains("the last 12.0 s before giving up")
                && back.contains("came back (restarted?)")
                && back.contains("run it again"),
            "{back}"
        );
        let never = timeout_advice(switch, (0, Duration::ZERO), None, quiet, 0);
        assert!(never.contains("check that the job is installed"), "{never}");
    }

    #[test]
    fn spare_slots_must_leave_the_window_a_slot() {
        let mut c = AgentConfig::new("127.0.0.1:47000".parse().unwrap(), 1, 0, 2, 8, 64);
        c.spare_slots = 7;
        assert!(c.validate().is_ok());
        c.spare_slots = 8;
        let err = c.validate().unwrap_err().to_string();
        assert!(
            err.contains("8 spare slots leave none of the pool's 8 to the window"),
            "{err}"
        );
    }

    /// What the switch said about the stuck slot names the members it
    /// waits for, or that it said nothing.
    #[test]
    fn timeout_advice_names_the_members_the_switch_waits_for() {
        let switch: SocketAddr = "127.0.0.1:47000".parse().unwrap();
        let waits = timeout_advice(switch, (0, Duration::ZERO), None, (0b1010, 5, (9, 9)), 0);
        assert!(
            waits.contains(
                "holds this worker's contribution to slot 5 and waits for members [1, 3]"
            ),
            "{waits}"
        );
        let mute = timeout_advice(switch, (0, Duration::ZERO), None, (0, 5, (9, 0)), 0);
        assert!(
            mute.contains("answered none of this worker's 9 queries"),
            "{mute}"
        );
        let forged = timeout_advice(switch, (0, Duration::ZERO), None, (0b10, 5, (9, 9)), 3);
        assert!(
            forged.contains("3 results for this worker's rounds failed their check"),
            "{forged}"
        );
    }
}
