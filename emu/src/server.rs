//! The emulator as a running switch: a data-plane thread serving UDP
//! datagrams through [`Switch`] and the [`FaultInjector`], and a control
//! thread serving the JSON-lines API of [`inagg_switch_api::control`] over TCP.
//!
//! Both listen on loopback by default; exposing the control endpoint
//! elsewhere is an explicit choice of address.

use inagg_netio::conns::{Conn, Limits};
use inagg_netio::lines::{self, backing_off, Accept, LineReader, Next, Refusal, MAX_LINE};
use inagg_netio::stream::Stream;
use inagg_netio::throttle::{left_out, Throttle};
use inagg_netio::tls::ServerTls;
use inagg_netio::token::Token;
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use inagg_netio::udp::{BatchSocket, RecvBatch, SendBatch};
use inagg_wire::{HEADER_LEN, MAX_ELEMENTS};

use crate::arbitration::{Arbitration, ConnId};
use crate::egress::{check_rate, LinkConfig, PortRate, Shaper};
use crate::faults::{FaultConfig, FaultInjector};
use crate::pipeline::Pipeline;
pub use crate::pipeline::State;
use crate::shm::ShmPlane;
use crate::switch::{Switch, SwitchConfig};
use inagg_switch_api::{ApiError, Reply, Request, Response};

/// Datagrams moved per system call.
pub(crate) const BATCH: usize = 64;
/// Largest datagram accepted (a bigger one is counted as malformed).
pub(crate) const MTU: usize = HEADER_LEN + MAX_ELEMENTS * 4;
/// How long the data loop sleeps in `poll` before looking at the stop flag.
const IDLE_POLL: Duration = Duration::from_millis(50);
/// How long a reordered packet may wait for a successor.
const HOLD_POLL: Duration = Duration::from_millis(1);

/// How to run an emulator.
#[derive(Debug, Clone)]
pub struct EmulatorConfig {
    /// Data-plane UDP address.
    pub data_addr: SocketAddr,
    /// Control TCP address.
    pub control_addr: SocketAddr,
    /// Memory and limits.
    pub switch: SwitchConfig,
    /// Fault injection.
    pub faults: FaultConfig,
    /// Line rate and queue size of the ports (socket data plane); `None`:
    /// every copy leaves at once.
    pub link: Option<LinkConfig>,
    /// Ports with a rate of their own (needs `link`).
    pub port_rates: Vec<PortRate>,
    /// The control endpoint's token: a connection must present it before
    /// anything else is answered. Required off loopback.
    pub token: Option<Token>,
    /// TLS on the control endpoint; required off loopback unless
    /// `insecure`.
    pub tls: Option<ServerTls>,
    /// Listen off loopback in clear, said in so many words.
    pub insecure: bool,
    /// The CPU the data-plane thread is pinned to ([`crate::affinity`]);
    /// `None`: wherever the OS runs it.
    pub cpu: Option<usize>,
    /// A Unix socket at which workers on this host attach shared-memory
    /// channels ([`crate::shm`]), beside the UDP socket.
    pub shm: Option<PathBuf>,
}

impl Default for EmulatorConfig {
    fn default() -> Self {
        EmulatorConfig {
            data_addr: SocketAddr::from(([127, 0, 0, 1], inagg_wire::DEFAULT_DATA_PORT)),
            control_addr: SocketAddr::from(([127, 0, 0, 1], inagg_wire::DEFAULT_CONTROL_PORT)),
            switch: SwitchConfig::default(),
            faults: FaultConfig::default(),
            link: None,
            port_rates: Vec::new(),
            token: None,
            tls: None,
            insecure: false,
            cpu: None,
            shm: None,
        }
    }
}

impl EmulatorConfig {
    /// Loopback, ephemeral ports: for tests and the in-process demo.
    pub fn ephemeral() -> EmulatorConfig {
        EmulatorConfig {
            data_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            control_addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            ..EmulatorConfig::default()
        }
    }
}

/// A running emulator. Dropping it stops its threads.
#[derive(Debug)]
pub struct Emulator {
    data_addr: SocketAddr,
    control_addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Emulator {
    /// Binds both endpoints and starts serving on a UDP socket.
    pub fn start(config: EmulatorConfig) -> io::Result<Emulator> {
        validate(&config)?;
        let socket = BatchSocket::bind(config.data_addr)?;
        let data_addr = socket.local_addr()?;
        let Some(path) = config.shm.clone() else {
            return Emulator::launch(config, data_addr, move |state, stop| {
                DataPlane::new(socket, state).run(&stop)
            });
        };
        let listener = crate::shm::bind(&path)?;
        let (to_plane, new) = crate::shm::queue();
        let attached = Arc::new(Mutex::new(HashMap::new()));
        let plane_attached = attached.clone();
        let mut emulator = Emulator::launch(config, data_addr, move |state, stop| {
            ShmPlane::new(socket, state, new, plane_attached).run(&stop)
        })?;
        let stop = emulator.stop.clone();
        let accept = std::thread::Builder::new()
            .name("emu-shm-accept".into())
            .spawn(move || crate::shm::accept_loop(listener, path, attached, to_plane, &stop))?;
        emulator.threads.push(accept);
        Ok(emulator)
    }

    /// Starts the control endpoint and a data-plane thread running `data`
    /// (the socket loop, or the DPDK one) over the shared state.
    pub(crate) fn launch(
        config: EmulatorConfig,
        data_addr: SocketAddr,
        data: impl FnOnce(Arc<Mutex<State>>, Arc<AtomicBool>) + Send + 'static,
    ) -> io::Result<Emulator> {
        let listener = TcpListener::bind(config.control_addr)?;
        listener.set_nonblocking(true)?;
        let control_addr = listener.local_addr()?;
        let state = Arc::new(Mutex::new(State {
            switch: Switch::new(config.switch),
            faults: FaultInjector::new(config.faults),
            shaper: config.link.map(|link| shaper(link, &config.port_rates)),
            arbitration: Arbitration::default(),
        }));
        let stop = Arc::new(AtomicBool::new(false));
        let data = {
            let (state, stop, cpu) = (state.clone(), stop.clone(), config.cpu);
            std::thread::Builder::new()
                .name("emu-data".into())
                .spawn(move || {
                    if let Some(cpu) = cpu {
                        // Checked by `validate`: this fails only if the
                        // process's CPUs changed since.
                        if let Err(e) = crate::affinity::pin(&[cpu]) {
                            tracing::warn!(cpu, "data plane not pinned: {e}");
                        }
                    }
                    data(state, stop)
                })?
        };
        let control = {
            let (state, stop) = (state.clone(), stop.clone());
            let (token, tls) = (config.token.clone(), config.tls.clone());
            std::thread::Builder::new()
                .name("emu-control".into())
                .spawn(move || serve_control(listener, state, data_addr, (token, tls), &stop))?
        };
        Ok(Emulator {
            data_addr,
            control_addr,
            state,
            stop,
            threads: vec![data, control],
        })
    }

    /// Where the data plane listens.
    pub fn data_addr(&self) -> SocketAddr {
        self.data_addr
    }

    /// Where the control endpoint listens.
    pub fn control_addr(&self) -> SocketAddr {
        self.control_addr
    }

    /// Direct access to the switch state, for in-process tools.
    pub fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// A handle that answers read-only control requests in process (the
    /// metrics exporter's): no socket, so no token or certificate to hold.
    pub fn reader(&self) -> Reader {
        Reader {
            state: self.state.clone(),
            data_addr: self.data_addr,
        }
    }

    /// Blocks until the emulator is stopped (by a signal handler or another
    /// thread calling [`Emulator::stop`] through a shared handle).
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }

    /// Asks both threads to stop and waits for them.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Emulator {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Rejects unusable fault settings before anything is bound.
pub(crate) fn validate(config: &EmulatorConfig) -> io::Result<()> {
    let invalid = |m| io::Error::new(io::ErrorKind::InvalidInput, m);
    if config.token.is_none() && !config.control_addr.ip().is_loopback() {
        return Err(invalid(format!(
            "the control endpoint would listen on {}, off this host, without a token: \
             pass --token (or listen on 127.0.0.1)",
            config.control_addr
        )));
    }
    inagg_netio::tls::check_exposure(config.control_addr, config.tls.is_some(), config.insecure)
        .map_err(|e| invalid(format!("the control endpoint: {e}")))?;
    config.faults.validate().map_err(invalid)?;
    if let Some(link) = config.link {
        link.validate().map_err(invalid)?;
    } else if let Some(r) = config.port_rates.first() {
        return Err(invalid(format!(
            "a rate for port {} needs a line rate (paced ports)",
            r.port
        )));
    }
    for r in &config.port_rates {
        check_rate(r.rate_bps).map_err(|e| invalid(format!("port {}: {e}", r.port)))?;
    }
    if let Some(cpu) = config.cpu {
        crate::affinity::check(&[cpu])?;
    }
    if config.shm.is_some() && config.link.is_some() {
        return Err(invalid(
            "shared-memory channels (--shm) and paced ports (--line-rate) do not go together: \
             the pacing releases only to UDP"
                .into(),
        ));
    }
    Ok(())
}

/// The egress ports of `link`, with the ports' own rates (checked by
/// [`validate`]).
fn shaper(link: LinkConfig, rates: &[PortRate]) -> Shaper {
    let mut shaper = Shaper::new(link);
    for r in rates {
        let _ = shaper.set_port_rate(r.port, Some(r.rate_bps));
    }
    shaper
}

/// A poisoned lock means a panic elsewhere already reported itself; the
/// switch state is still consistent per packet, so keep serving.
pub(crate) fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|e| e.into_inner())
}

/// The socket data-plane loop and its buffers.
struct DataPlane {
    socket: BatchSocket,
    state: Arc<Mutex<State>>,
    tx: SendBatch,
    pipeline: Pipeline,
    /// Whether the ports have a line rate (fixed at start): an unpaced
    /// emulator skips the release step and its lock on every loop.
    paced: bool,
}

impl DataPlane {
    fn new(socket: BatchSocket, state: Arc<Mutex<State>>) -> DataPlane {
        let paced = lock(&state).shaper.is_some();
        DataPlane {
            socket,
            state,
            tx: SendBatch::new(),
            pipeline: Pipeline::default(),
            paced,
        }
    }

    fn run(mut self, stop: &AtomicBool) {
        if self.paced {
            precise_timers();
        }
        let mut rx = RecvBatch::new(BATCH, MTU);
        while !stop.load(Ordering::Relaxed) {
            let wait = if self.pipeline.holding() {
                HOLD_POLL
            } else {
                IDLE_POLL
            };
            let wait = if self.paced {
                self.release_paced(wait)
            } else {
                wait
            };
            let n = match self.socket.recv_batch(&mut rx, wait) {
                Ok(n) => n,
                Err(err) => {
                    tracing::warn!("receive failed: {err}");
                    std::thread::sleep(IDLE_POLL);
                    continue;
                }
            };
            self.serve_batch(&rx, n);
            if let Err(err) = self.socket.send_batch(&mut self.tx) {
                tracing::warn!("send failed: {err}");
            }
        }
    }

    /// Sends what the paced ports let go by now; returns how long the loop
    /// may wait (at most `wait`) before the next departure is due.
    fn release_paced(&mut self, wait: Duration) -> Duration {
        let mut state = lock(&self.state);
        let State {
            shaper: Some(shaper),
            switch,
            ..
        } = &mut *state
        else {
            return wait;
        };
        let now = Instant::now();
        let tx = &mut self.tx;
        shaper.release(now, |bytes, to| {
            tx.push(bytes, Some(to));
            let c = switch.counters_mut();
            c.tx_packets += 1;
            c.tx_bytes += bytes.len() as u64;
        });
        let next = shaper.next_departure();
        drop(state);
        if let Err(err) = self.socket.send_batch(&mut self.tx) {
            tracing::warn!("send failed: {err}");
        }
        next.map_or(wait, |t| t.saturating_duration_since(now).min(wait))
    }

    /// Runs one received batch through the pipeline, queueing output.
    fn serve_batch(&mut self, rx: &RecvBatch, n: usize) {
        let mut state = lock(&self.state);
        for i in 0..n {
            let d = rx.get(i);
            if let Some(from) = d.from {
                self.pipeline.serve(&mut state, d.data, from, &mut self.tx);
            }
        }
        if n == 0 {
            self.pipeline.idle(&mut state, &mut self.tx);
        }
    }
}

/// Asks the kernel to wake this thread on time: its default timer slack
/// (50 us) would make every paced departure late by up to that much,
/// which at 100 Mbit/s is two packets' time. Best effort: a kernel that
/// refuses leaves the default.
fn precise_timers() {
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes only
    // the calling thread's timer slack.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
    if rc != 0 {
        tracing::debug!("timer slack unchanged: {}", std::io::Error::last_os_error());
    }
}

/// Log lines about strangers (refused, backing off, without the token) a
/// second: a flood of them must not flood the log.
static STRANGERS: Throttle = Throttle::new(20);

/// Accepts control connections until stopped; one thread per connection,
/// at most [`Limits::default`]'s number (inagg_netio::conns).
fn serve_control(
    listener: TcpListener,
    state: Arc<Mutex<State>>,
    data_addr: SocketAddr,
    (token, tls): (Option<Token>, Option<ServerTls>),
    stop: &Arc<AtomicBool>,
) {
    let refusal = |peer: SocketAddr, why: Refusal| {
        let error = match why {
            Refusal::Busy { open } => {
                if let Some(n) = STRANGERS.allow() {
                    tracing::warn!(
                        "control connection from {peer} refused: {open} open{}",
                        left_out(n)
                    );
                }
                busy(open)
            }
            Refusal::BackOff { wait } => {
                if let Some(n) = STRANGERS.allow() {
                    tracing::warn!(
                        "control connection from {peer} refused: backing off{}",
                        left_out(n)
                    );
                }
                unauthorized(&backing_off(peer, wait))
            }
        };
        serde_json::to_vec(&Response::Err(error)).unwrap_or_default()
    };
    let accept = Accept {
        limits: Limits::default(),
        poll: IDLE_POLL,
        refusal: &refusal,
        tls,
    };
    let flag = stop.clone();
    lines::serve(&listener, stop, &accept, move |stream, peer, conn| {
        serve_connection(
            stream,
            peer,
            &conn,
            &state,
            data_addr,
            token.as_ref(),
            &flag,
        )
    });
}

/// The refusal of a connection that has not presented the token.
fn unauthorized(what: &str) -> ApiError {
    ApiError::Unauthorized {
        message: format!(
            "{what}: this emulator's control endpoint has a token; pass it with \
             --switch-token (or INAGG_SWITCH_TOKEN)"
        ),
    }
}

/// The refusal a connection gets when every place is held by one at work.
fn busy(open: usize) -> ApiError {
    ApiError::Busy {
        message: format!(
            "the control endpoint holds {open} connections, every one at work; try again \
             when one closes"
        ),
    }
}

/// Serves JSON-lines requests on one connection until EOF, stop, or its
/// place is taken (inagg_netio::conns), then gives up its claim on the
/// switch, if it made one.
fn serve_connection(
    stream: Stream,
    peer: SocketAddr,
    conn: &Conn,
    state: &Mutex<State>,
    data_addr: SocketAddr,
    token: Option<&Token>,
    stop: &AtomicBool,
) {
    let caller = Caller {
        conn: lock(state).arbitration.open(),
        peer,
    };
    // The socket stays open until the claim is given up, so a client that
    // waits for the close (`lines::Client::close`) knows it is.
    let held = stream.try_clone();
    serve_requests(stream, conn, state, caller, token, data_addr, stop);
    lock(state).arbitration.close(caller.conn);
    drop(held);
}

/// Answers the control requests that change nothing, in process
/// ([`Emulator::reader`]).
#[derive(Debug, Clone)]
pub struct Reader {
    state: Arc<Mutex<State>>,
    data_addr: SocketAddr,
}

impl Reader {
    /// The answer to `request`, refused if it would change the switch.
    pub fn ask(&self, request: Request) -> Response {
        if request.changes_state() {
            return Response::Err(ApiError::BadRequest {
                message: format!("{}: an in-process reader only reads", request.summary()),
            });
        }
        // Reads are not arbitrated: any connection number does.
        let caller = Caller {
            conn: ConnId::MAX,
            peer: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        handle(request, &mut lock(&self.state), caller, self.data_addr)
    }
}

/// Who sent a control request.
#[derive(Debug, Clone, Copy)]
pub struct Caller {
    /// Its connection.
    pub conn: ConnId,
    /// Where it is connected from.
    pub peer: SocketAddr,
}

fn serve_requests(
    stream: Stream,
    conn: &Conn,
    state: &Mutex<State>,
    caller: Caller,
    token: Option<&Token>,
    data_addr: SocketAddr,
    stop: &AtomicBool,
) {
    // Without a token every connection is trusted (loopback only).
    let mut authenticated = token.is_none();
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let Ok(mut lines) = LineReader::new(stream, MAX_LINE, IDLE_POLL) else {
        return;
    };
    loop {
        let line = match lines.next_request(conn, stop) {
            Next::Line(line) => line,
            Next::TooLong => {
                let _ = reply(
                    &mut writer,
                    &Response::Err(ApiError::BadRequest {
                        message: "request line too long".into(),
                    }),
                );
                return;
            }
            Next::Closed | Next::TimedOut | Next::Failed(_) => return,
        };
        let response = match serde_json::from_slice::<Request>(line) {
            Ok(Request::Authenticate { token: given }) => {
                if token.is_some_and(|t| !t.matches(&given)) {
                    // One guess per connection.
                    if let Some(n) = STRANGERS.allow() {
                        let peer = caller.peer;
                        tracing::warn!(
                            "control connection from {peer} gave a wrong token{}",
                            left_out(n)
                        );
                    }
                    conn.wrong_credential();
                    let _ = reply(&mut writer, &Response::Err(unauthorized("wrong token")));
                    return;
                }
                authenticated = true;
                conn.trust();
                Response::Ok(Reply::Done)
            }
            Ok(request) if !authenticated => {
                // Told, then closed, as the controller's API does: a
                // stranger's place is freed at once, not at its eviction.
                if let Some(n) = STRANGERS.allow() {
                    tracing::warn!(
                        "refused {} from {}: not authenticated{}",
                        request.summary(),
                        caller.peer,
                        left_out(n)
                    );
                }
                let _ = reply(
                    &mut writer,
                    &Response::Err(unauthorized("present the token first")),
                );
                return;
            }
            Ok(request) => {
                conn.trust();
                let changes = request.changes_state();
                let summary = request.summary();
                let response = handle(request, &mut lock(state), caller, data_addr);
                log_request(changes, &summary, &response);
                response
            }
            Err(e) => {
                tracing::warn!("bad control request: {e}");
                Response::Err(ApiError::BadRequest {
                    message: e.to_string(),
                })
            }
        };
        if reply(&mut writer, &response).is_err() {
            return;
        }
    }
}

/// Changes of state at info level, reads at debug, refusals at warn.
fn log_request(changes: bool, request: &str, response: &Response) {
    match response {
        Response::Err(e) => tracing::warn!("refused {request}: {e}"),
        Response::Ok(_) if changes => tracing::info!("{request}"),
        Response::Ok(_) => tracing::debug!("{request}"),
    }
}

fn reply(writer: &mut Stream, response: &Response) -> io::Result<()> {
    let out = serde_json::to_vec(response).map_err(io::Error::other)?;
    lines::write_line(writer, &out)
}

/// Executes one control request against the switch. Changes a controller
/// keeps in step are refused unless `caller` is the primary controller, or
/// no connection has claimed the switch.
pub fn handle(
    request: Request,
    state: &mut State,
    caller: Caller,
    data_addr: SocketAddr,
) -> Response {
    if request.managed() {
        if let Err(e) = state.arbitration.may_change(caller.conn) {
            return Response::Err(e);
        }
    }
    let sw = &mut state.switch;
    let result: Result<Reply, ApiError> = match request {
        Request::Info => Ok(Reply::Info {
            info: sw.info(),
            data_addr,
        }),
        Request::CreateJob { spec } => sw.create_job(spec).map(|_| Reply::Done).map_err(Into::into),
        Request::DeleteJob { id } => sw.delete_job(id).map(|_| Reply::Done).map_err(Into::into),
        Request::GetJob { id } => sw
            .job(id)
            .map(|job| Reply::Job { job: Box::new(job) })
            .map_err(Into::into),
        Request::ListJobs => Ok(Reply::Jobs { jobs: sw.jobs() }),
        Request::CreateGroup { group } => sw
            .create_group(group)
            .map(|_| Reply::Done)
            .map_err(Into::into),
        Request::DeleteGroup { id } => sw.delete_group(id).map(|_| Reply::Done).map_err(Into::into),
        Request::ListGroups => Ok(Reply::Groups {
            groups: sw.groups(),
        }),
        Request::CreateRelay { relay } => sw
            .create_relay(relay)
            .map(|_| Reply::Done)
            .map_err(Into::into),
        Request::DeleteRelay { key } => sw
            .delete_relay(key)
            .map(|_| Reply::Done)
            .map_err(Into::into),
        Request::ListRelays => Ok(Reply::Relays {
            relays: sw.relays(),
        }),
        Request::Pools => Ok(Reply::Pools { pools: sw.pools() }),
        Request::Counters => Ok(Reply::Counters {
            counters: sw.counters().clone(),
        }),
        Request::ResetCounters => {
            sw.reset_counters();
            if let Some(shaper) = &mut state.shaper {
                shaper.reset_stats();
            }
            Ok(Reply::Done)
        }
        Request::SetPriorityQueue { class, queue } => sw
            .set_queue(class, queue)
            .map(|_| Reply::Done)
            .map_err(Into::into),
        Request::SetPortRate { port, rate_bps } => match &mut state.shaper {
            None => Err(ApiError::Invalid {
                message: "this emulator's ports are not paced: a port rate needs a line rate \
                          (inagg emu --line-rate GBPS)"
                    .into(),
            }),
            Some(shaper) => shaper
                .set_port_rate(port, rate_bps)
                .map(|_| Reply::Done)
                .map_err(|message| ApiError::Invalid { message }),
        },
        Request::Queues => Ok(Reply::Queues {
            map: sw.queue_map(),
            link: state.shaper.as_ref().map(Shaper::config),
            ports: state.shaper.as_ref().map(Shaper::stats).unwrap_or_default(),
        }),
        Request::GetFaults => Ok(Reply::Faults {
            faults: state.faults.config(),
        }),
        // Per connection, checked before a request gets here.
        Request::Authenticate { .. } => Ok(Reply::Done),
        Request::Arbitrate { election_id } => state
            .arbitration
            .claim(caller.conn, election_id, caller.peer)
            .map(|()| Reply::Done),
        Request::SetFaults { faults } => match faults.validate() {
            Ok(()) => {
                state.faults = FaultInjector::new(faults);
                Ok(Reply::Done)
            }
            Err(message) => Err(ApiError::Invalid { message }),
        },
    };
    match result {
        Ok(r) => Response::Ok(r),
        Err(e) => Response::Err(e),
    }
}
