//! The `inagg controller` daemon: the server (a thread per connection, one
//! lock over the state, a reconcile thread) over `state` and `store`.

use inagg_netio::conns::{Conn, Limits};
use inagg_netio::lines::{self, backing_off, Accept, LineReader, Next, Refusal, MAX_LINE};
use inagg_netio::stream::Stream;
use inagg_netio::throttle::{left_out, Throttle};
use inagg_netio::tls::ServerTls;
use inagg_netio::token::Token;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

pub use crate::link::Connector;

use crate::book::{CoreError, JobRecord};
use crate::link::Link;
use crate::site::Site;
use crate::state::Core;
use crate::store::Store;
use inagg_controller_api::{
    Admission, Caller, Envelope, Placement, Reply, Request, Response, SiteStats, API_VERSION,
    UNVERSIONED,
};

/// Longest a registration waits for the rest of its job.
pub const MAX_WAIT: Duration = Duration::from_secs(600);

/// What the daemon runs with.
pub struct ControllerConfig {
    /// The API's address.
    pub listen: SocketAddr,
    /// Required from every client when set; needed to listen off loopback.
    pub token: Option<String>,
    /// TLS on the API; needed off loopback unless `insecure`.
    pub tls: Option<ServerTls>,
    /// Listen off loopback in clear, said in so many words.
    pub insecure: bool,
    /// The database file.
    pub state: PathBuf,
    /// The switch: its control address and how to connect.
    pub switch: (SocketAddr, Connector),
    /// Where workers send to the switch's data plane, when the target does
    /// not say (bmv2) or says otherwise.
    pub switch_data: Option<SocketAddr>,
    /// Host emulators for fallback: control address and connector.
    pub fallbacks: Vec<(SocketAddr, Connector)>,
    /// How often every aggregator is checked and brought in step.
    pub reconcile_every: Duration,
}

/// Why the daemon cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Off loopback without a token.
    #[error("the API would listen on {0}, off this host, without a token: pass --token (or listen on 127.0.0.1)")]
    NoToken(SocketAddr),
    /// Off loopback in clear, not said to be meant.
    #[error("the API: {0}")]
    Clear(String),
    /// A token of no characters, which any client would present.
    #[error("the token is empty: give a token of at least one character, or none")]
    EmptyToken,
    /// The address is taken or not ours.
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        source: std::io::Error,
    },
    /// One aggregator given twice: two sites would each remove the
    /// other's jobs from it at every reconcile.
    #[error(
        "the aggregator at {0} is given twice (as the switch and a fallback, or as two \
         fallbacks): each must be its own"
    )]
    Twice(SocketAddr),
    /// The stored state.
    #[error(transparent)]
    State(#[from] CoreError),
}

struct Shared {
    core: Mutex<Core>,
    /// Signalled on every change, for waiting registrations.
    changed: Condvar,
    /// Signalled only when stopping: the reconcile thread's periodic wait
    /// (changes are reconciled by the request that made them).
    tick: Condvar,
    token: Option<Token>,
    stop: AtomicBool,
    /// Open client connections by number, shut when the controller stops
    /// (each removes itself when it ends).
    conns: Mutex<std::collections::HashMap<u64, TcpStream>>,
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, std::collections::HashMap<u64, TcpStream>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn lock(&self) -> MutexGuard<'_, Core> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies a change, brings every aggregator in step with it at once
    /// (so a worker admitted next finds its job installed), and wakes the
    /// waiting registrations. Returns the state, still locked.
    fn change<T>(
        &self,
        f: impl FnOnce(&mut Core) -> Result<T, CoreError>,
    ) -> Result<(MutexGuard<'_, Core>, T), String> {
        let mut core = self.lock();
        let out = f(&mut core).map_err(|e| e.to_string())?;
        log(&core.reconcile());
        self.changed.notify_all();
        Ok((core, out))
    }
}

fn log(problems: &[String]) {
    for p in problems {
        tracing::warn!("{p}");
    }
}

/// A running controller; stopped when dropped.
pub struct Controller {
    shared: Arc<Shared>,
    addr: SocketAddr,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Controller {
    /// Opens the state, binds the API, and starts serving and reconciling.
    pub fn start(config: ControllerConfig) -> Result<Controller, StartError> {
        let token = config
            .token
            .clone()
            .map(Token::new)
            .transpose()
            .map_err(|_| StartError::EmptyToken)?;
        if !config.listen.ip().is_loopback() && token.is_none() {
            return Err(StartError::NoToken(config.listen));
        }
        inagg_netio::tls::check_exposure(config.listen, config.tls.is_some(), config.insecure)
            .map_err(StartError::Clear)?;
        let mut seen = std::collections::HashSet::from([config.switch.0]);
        if let Some((addr, _)) = config.fallbacks.iter().find(|(a, _)| !seen.insert(*a)) {
            return Err(StartError::Twice(*addr));
        }
        // Bound before anything touches the aggregators: a second
        // controller started by mistake stops here, not after removing
        // the first one's jobs from the switch.
        let listener = TcpListener::bind(config.listen).map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
        let store = Store::open(&config.state).map_err(CoreError::from)?;
        let switch = Site::new("switch", config.switch.0).with_data_addr(config.switch_data);
        let mut sites = vec![(switch, Link::new(config.switch.1))];
        for (addr, connect) in config.fallbacks {
            sites.push((Site::new("fallback", addr), Link::new(connect)));
        }
        let mut core = Core::load(store, sites)?;
        log(&core.reconcile());
        let addr = listener.local_addr().map_err(|source| StartError::Listen {
            addr: config.listen,
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| StartError::Listen { addr, source })?;
        let shared = Arc::new(Shared {
            core: Mutex::new(core),
            changed: Condvar::new(),
            tick: Condvar::new(),
            token,
            stop: AtomicBool::new(false),
            conns: Mutex::new(std::collections::HashMap::new()),
        });
        let every = config.reconcile_every;
        let threads = vec![
            spawn_named("ctl-accept", {
                let shared = shared.clone();
                let tls = config.tls;
                move || accept_loop(&shared, &listener, tls)
            }),
            spawn_named("ctl-reconcile", {
                let shared = shared.clone();
                move || reconcile_loop(&shared, every)
            }),
        ];
        Ok(Controller {
            shared,
            addr,
            threads,
        })
    }

    /// Where the API listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A function that reads every aggregator's counters and jobs, as the
    /// API's `stats` request does, in process (the metrics exporter's: no
    /// connection, so no credential or certificate to hold).
    pub fn stats_source(&self) -> impl Fn() -> Vec<SiteStats> + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.lock().stats()
    }

    /// Runs until the process ends.
    pub fn wait(mut self) {
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.changed.notify_all();
        self.shared.tick.notify_all();
        // Shut the clients' connections first: the accept loop waits for
        // their threads, and one may be blocked writing to a client that
        // does not read.
        let conns = std::mem::take(&mut *self.shared.conns());
        for c in conns.into_values() {
            let _ = c.shutdown(std::net::Shutdown::Both);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        self.shared.lock().close();
    }
}

fn spawn_named(name: &str, f: impl FnOnce() + Send + 'static) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(f)
        .expect("spawn a controller thread")
}

/// Log lines about strangers (refused, backing off, without the token) a
/// second: a flood of them must not flood the log.
static STRANGERS: Throttle = Throttle::new(20);

/// How often the accept loop looks at the stop flag while no client comes.
const ACCEPT_POLL: Duration = Duration::from_millis(50);

/// Accepts clients until the controller stops, at most
/// [`Limits::default`]'s number at once (inagg_netio::lines).
fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener, tls: Option<ServerTls>) {
    let refusal = |peer: SocketAddr, why: Refusal| {
        let refusal = match why {
            Refusal::Busy { open } => {
                if let Some(n) = STRANGERS.allow() {
                    tracing::warn!(
                        "API connection from {peer} refused: {open} open{}",
                        left_out(n)
                    );
                }
                Response::Error(format!(
                    "busy: the controller holds {open} connections, every one at work; try \
                     again when one closes"
                ))
            }
            Refusal::BackOff { wait } => {
                if let Some(n) = STRANGERS.allow() {
                    tracing::warn!(
                        "API connection from {peer} refused: backing off{}",
                        left_out(n)
                    );
                }
                Response::Error(backing_off(peer, wait))
            }
        };
        serde_json::to_vec(&refusal).unwrap_or_default()
    };
    let accept = Accept {
        limits: Limits::default(),
        poll: ACCEPT_POLL,
        refusal: &refusal,
        tls,
    };
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let served = shared.clone();
    lines::serve(
        listener,
        &shared.stop,
        &accept,
        move |stream, peer, conn| {
            let id = next.fetch_add(1, Ordering::Relaxed);
            if let Ok(c) = stream.tcp().try_clone() {
                served.conns().insert(id, c);
            }
            serve(&served, stream, peer, &conn);
            served.conns().remove(&id);
        },
    );
}

fn reconcile_loop(shared: &Shared, every: Duration) {
    let mut last_problems = Vec::new();
    while !shared.stop.load(Ordering::Acquire) {
        let guard = shared.lock();
        let (mut core, _) = shared
            .tick
            .wait_timeout(guard, every)
            .unwrap_or_else(|p| p.into_inner());
        if shared.stop.load(Ordering::Acquire) {
            return;
        }
        let problems = core.reconcile();
        drop(core);
        // Registrations wait for installation, which reconcile does.
        shared.changed.notify_all();
        if problems != last_problems {
            log(&problems);
            last_problems = problems;
        }
    }
}

/// How often a connection's reader wakes to see whether the connection has
/// outstayed its welcome (inagg_netio::conns) or the controller stops.
const READ_POLL: Duration = Duration::from_millis(200);

/// One client connection: requests until it closes, the controller stops,
/// or its place is taken.
fn serve(shared: &Shared, stream: Stream, peer: SocketAddr, conn: &Conn) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let Ok(mut lines) = LineReader::new(stream, MAX_LINE, READ_POLL) else {
        return;
    };
    loop {
        let response = match lines.next_request(conn, &shared.stop) {
            Next::Line(line) => match std::str::from_utf8(line) {
                Err(_) => Response::Error("request is not UTF-8 JSON".into()),
                Ok(text) if text.trim().is_empty() => continue,
                // `writer` is the same socket: what `respond` peeks at
                // while a registration waits.
                Ok(text) => match respond(shared, text, peer, writer.tcp(), conn) {
                    Some(response) => response,
                    None => {
                        // One guess per connection, as at the emulator's
                        // endpoint: a guesser pays a connection a try.
                        let wrong = Response::Error(WRONG_TOKEN.into());
                        let _ = write_response(&mut writer, &wrong);
                        if let Some(n) = STRANGERS.allow() {
                            tracing::warn!(
                                "refused a request from {peer}: {WRONG_TOKEN}{}",
                                left_out(n)
                            );
                        }
                        return;
                    }
                },
            },
            Next::TooLong => {
                let too_long =
                    Response::Error(format!("request line longer than {MAX_LINE} bytes"));
                tracing::warn!("refused a request from {peer}: {MAX_LINE} bytes without a newline");
                let _ = write_response(&mut writer, &too_long);
                return;
            }
            Next::Closed | Next::TimedOut | Next::Failed(_) => return,
        };
        if let Response::Error(e) = &response {
            tracing::warn!("refused a request from {peer}: {e}");
        }
        if write_response(&mut writer, &response).is_err() {
            return;
        }
    }
}

/// Writes one reply line.
fn write_response(writer: &mut Stream, response: &Response) -> std::io::Result<()> {
    let out = serde_json::to_vec(response)
        .unwrap_or_else(|e| format!("{{\"error\":\"cannot encode the reply: {e}\"}}").into_bytes());
    lines::write_line(writer, &out)
}

/// Whether a request may pass: the API has no token, or `given` is it
/// (compared in constant time).
fn token_ok(expected: Option<&Token>, given: Option<&str>) -> bool {
    match (expected, given) {
        (None, _) => true,
        (Some(t), Some(g)) => t.matches(g),
        (Some(_), None) => false,
    }
}

/// What a request with a wrong token (or none, where one is needed) is
/// told before its connection closes.
const WRONG_TOKEN: &str =
    "wrong or missing API token: pass the controller's --token (or INAGG_TOKEN)";

/// One request line: token check (the connection is then trusted, before
/// a registration's long wait), then the request; `None` for a wrong or
/// missing token.
fn respond(
    shared: &Shared,
    line: &str,
    peer: SocketAddr,
    stream: &TcpStream,
    conn: &Conn,
) -> Option<Response> {
    let value: serde_json::Value = match serde_json::from_str(line) {
        Err(e) => return Some(Response::Error(format!("unreadable request: {e}"))),
        Ok(v) => v,
    };
    let token = value.get("token").and_then(|t| t.as_str());
    let Some(caller) = caller_of(shared, token) else {
        // A wrong credential counts against the address; none at all
        // makes a stranger, not a guesser.
        if token.is_some() {
            conn.wrong_credential();
        }
        return None;
    };
    let env = match envelope(value) {
        Err(e) => return Some(Response::Error(e)),
        Ok(env) => env,
    };
    conn.trust();
    let (what, changes) = env.request.summary();
    let result = handle(shared, env.request, &caller, peer, stream);
    if changes {
        // The audit logs it.
        let refused = result.as_ref().err().cloned();
        shared.lock().record((&caller, peer), what, refused);
    } else {
        tracing::debug!("{what} from {peer}");
    }
    Some(match result {
        Ok(r) => Response::Ok(r),
        Err(e) => Response::Error(e),
    })
}

/// Reads a request, its version first: a request of another version of
/// the protocol is refused by name, not misread.
fn envelope(value: serde_json::Value) -> Result<Envelope, String> {
    let version = match value.get("version") {
        None => Some(u64::from(UNVERSIONED)),
        Some(v) => v.as_u64(),
    };
    if version != Some(u64::from(API_VERSION)) {
        let theirs = version.map_or_else(|| "unreadable".to_string(), |v| v.to_string());
        return Err(format!(
            "this controller speaks API version {API_VERSION}, the request version {theirs}: \
             use the inagg release the controller runs"
        ));
    }
    serde_json::from_value(value).map_err(|e| format!("unreadable request: {e}"))
}

/// Who a request is from: a tenant whose credential `token` is, else the
/// operator where the token is the controller's (or the controller has
/// none); `None` for a wrong token or a tenant credential that no longer
/// verifies (revoked or rotated).
fn caller_of(shared: &Shared, token: Option<&str>) -> Option<Caller> {
    if let Some(t) = token {
        if let Some(name) = shared.lock().tenant_of(t) {
            return Some(Caller::Tenant { name: name.into() });
        }
        if crate::tenants::split_credential(t).is_some() && shared.token.is_none() {
            return None;
        }
    }
    token_ok(shared.token.as_ref(), token).then_some(Caller::Operator)
}

/// What a tenant may ask: its own jobs (their creation within its quota,
/// deletion, listing, its workers' registration), the priority map as it
/// stands, and who it is. Everything else (the aggregators, groups made by
/// hand, the priority map's entries, the tenants) is the operator's.
fn tenants_may(request: &Request) -> bool {
    matches!(
        request,
        Request::CreateJob { .. }
            | Request::DeleteJob { .. }
            | Request::Jobs
            | Request::Register { .. }
            | Request::Priority
            | Request::Whoami
            | Request::Events { .. }
    )
}

fn handle(
    shared: &Shared,
    request: Request,
    caller: &Caller,
    peer: SocketAddr,
    conn: &TcpStream,
) -> Result<Reply, String> {
    let tenant = match caller {
        Caller::Operator => None,
        Caller::Tenant { name } => Some(name.as_str()),
    };
    if tenant.is_some() && !tenants_may(&request) {
        return Err(format!(
            "{} is the operator's to do: this credential is {caller}'s",
            request.summary().0
        ));
    }
    match request {
        Request::SetFaults { site, faults } => {
            let set_by = inagg_controller_api::FaultsSetBy {
                caller: caller.clone(),
                peer,
                at_ms: crate::audit::now_ms(),
            };
            drop(shared.change(|c| c.set_faults(site, faults, set_by))?);
            Ok(Reply::Done)
        }
        Request::Faults => Ok(Reply::Faults {
            sites: shared.lock().site_faults(),
        }),
        Request::Events { last } => {
            let events = shared
                .lock()
                .events(caller, last)
                .map_err(|e| e.to_string())?;
            Ok(Reply::Events { events })
        }
        Request::CreateJob { decl } => {
            let (core, ()) = shared.change(|c| c.create(decl.clone(), tenant).map(drop))?;
            // The status after reconciling (a waiting job may have been placed).
            let job = core.status(&core.jobs[&decl.name]);
            Ok(Reply::Job { job })
        }
        Request::DeleteJob { name } => {
            drop(shared.change(|c| {
                c.job_of(&name, tenant)?;
                c.delete(&name)
            })?);
            Ok(Reply::Done)
        }
        Request::Jobs => {
            let core = shared.lock();
            let jobs = core
                .jobs
                .values()
                .filter(|j| tenant.is_none() || j.tenant.as_deref() == tenant)
                .map(|j| core.status(j))
                .collect();
            Ok(Reply::Jobs { jobs })
        }
        Request::Whoami => Ok(Reply::Caller {
            caller: caller.clone(),
        }),
        Request::CreateTenant { decl } => {
            let name = decl.name.clone();
            let (core, credential) = shared.change(|c| c.create_tenant(decl))?;
            tenant_reply(&core, &name, credential)
        }
        Request::RotateTenant { name } => {
            let (core, credential) = shared.change(|c| c.rotate_tenant(&name))?;
            tenant_reply(&core, &name, credential)
        }
        Request::DeleteTenant { name } => {
            drop(shared.change(|c| c.delete_tenant(&name))?);
            Ok(Reply::Done)
        }
        Request::Tenants => Ok(Reply::Tenants {
            tenants: shared.lock().tenant_status(),
        }),

        Request::CreateGroup { decl } => {
            let (mut core, record) = shared.change(|c| c.create_group(decl))?;
            let group = core
                .group_status()
                .into_iter()
                .find(|g| g.id == record.id && g.owner == "hand");
            Ok(Reply::Groups {
                groups: group.into_iter().collect(),
            })
        }
        Request::DeleteGroup { name } => {
            drop(shared.change(|c| c.delete_group(&name))?);
            Ok(Reply::Done)
        }
        Request::Groups => Ok(Reply::Groups {
            groups: shared.lock().group_status(),
        }),
        Request::Sites => {
            let core = shared.lock();
            Ok(Reply::Sites {
                sites: core.site_status(),
            })
        }
        Request::Stats => Ok(Reply::Stats {
            sites: shared.lock().stats(),
        }),
        Request::Priority => Ok(Reply::Priority {
            map: shared
                .lock()
                .priority
                .iter()
                .map(|(&class, &queue)| inagg_switch_api::queues::ClassQueue { class, queue })
                .collect(),
        }),
        Request::SetPriority { class, queue } => {
            let mut core = shared.lock();
            core.set_priority(class, queue).map_err(|e| e.to_string())?;
            let problems = core.reconcile();
            if let Some(p) = problems.first() {
                return Err(format!("stored, but not installed everywhere yet: {p}"));
            }
            Ok(Reply::Done)
        }
        Request::Register {
            job,
            rank,
            endpoint,
            port,
            wait_ms,
        } => {
            let endpoint = match (endpoint, port) {
                (Some(e), _) => e,
                (None, Some(p)) => SocketAddr::new(peer.ip(), p),
                (None, None) => {
                    return Err("registration needs an endpoint or a port".into());
                }
            };
            register(
                shared,
                tenant,
                &job,
                rank,
                endpoint,
                Duration::from_millis(wait_ms),
                conn,
            )
        }
    }
}

/// A tenant's reply: its status and its credential.
fn tenant_reply(core: &Core, name: &str, credential: String) -> Result<Reply, String> {
    let tenant = core
        .tenant_status()
        .into_iter()
        .find(|t| t.decl.name == name)
        .ok_or_else(|| format!("tenant {name:?} vanished"))?;
    Ok(Reply::Tenant { tenant, credential })
}

/// Why a registered worker's job cannot run as things stand, so that the
/// worker is told at once rather than when its wait runs out: its
/// aggregator refused this session's install, no aggregator it may run on
/// takes its K, or its aggregator does not say where workers send.
fn cannot_run(core: &Core, job: &JobRecord) -> Option<String> {
    let site = core.site_of(job);
    if let Some(why) = site.and_then(|s| s.refused(job.id, job.generation)) {
        return Some(format!(
            "cannot run where it is placed: {why}; \
             delete it and create it again with settings that aggregator takes"
        ));
    }
    if job.placement == Placement::Waiting {
        return core
            .too_wide(&job.decl)
            .map(|why| format!("cannot be placed: {why}"));
    }
    site.filter(|s| s.lacks_data_addr()).map(|s| {
        format!(
            "is on {}, which does not say where workers send their packets: start the \
             controller with --switch-data ADDR (an address routed through the switch, at \
             inagg's UDP port)",
            s.name()
        )
    })
}

/// How often a waiting registration looks whether its worker is still
/// connected.
const GONE_POLL: Duration = Duration::from_millis(200);

/// Records the worker, then waits until its job is installed with this
/// worker in it, and tells it where and how to run. A registration that
/// ends otherwise (its wait runs out, the job cannot run, the worker closes
/// its connection: killed while it waited) is taken back, so that it does
/// not complete a session for the others.
#[allow(clippy::too_many_arguments)]
fn register(
    shared: &Shared,
    tenant: Option<&str>,
    name: &str,
    rank: u16,
    endpoint: SocketAddr,
    wait: Duration,
    conn: &TcpStream,
) -> Result<Reply, String> {
    // A tenant registers ranks of its own jobs only: another tenant's job
    // is unknown to it, so its ranks cannot be squatted.
    let (core, ()) = shared.change(|c| {
        c.job_of(name, tenant)?;
        c.register(name, rank, endpoint)
    })?;
    let this = Registration {
        name,
        rank,
        endpoint,
        generation: core.jobs[name].generation,
        wait,
        deadline: Instant::now() + wait.min(MAX_WAIT),
    };
    let (mut core, outcome) = admission(shared, core, &this, conn);
    if outcome.is_err() {
        match core.withdraw(name, rank, endpoint, this.generation) {
            Ok(true) => {
                tracing::info!("job {name:?}: rank {rank} at {endpoint} left before admission");
                shared.changed.notify_all();
            }
            Ok(false) => {}
            Err(e) => tracing::warn!("job {name:?}: rank {rank} left, but: {e}"),
        }
    }
    outcome
}

/// A registration waiting for admission.
struct Registration<'a> {
    name: &'a str,
    rank: u16,
    endpoint: SocketAddr,
    /// The session it joined.
    generation: u16,
    /// As asked, for the message.
    wait: Duration,
    deadline: Instant,
}

/// Waits for a registration's admission; returns the state, still locked.
fn admission<'a>(
    shared: &'a Shared,
    mut core: MutexGuard<'a, Core>,
    this: &Registration<'_>,
    conn: &TcpStream,
) -> (MutexGuard<'a, Core>, Result<Reply, String>) {
    let Registration {
        name,
        rank,
        endpoint,
        generation,
        wait,
        deadline,
    } = *this;
    loop {
        let Some(job) = core.jobs.get(name) else {
            return (
                core,
                Err(format!("job {name:?} was deleted while rank {rank} waited")),
            );
        };
        if job.generation != generation {
            let e = format!(
                "job {name:?}: rank {rank} registered again elsewhere, starting a new session"
            );
            return (core, Err(e));
        }
        // A rank registering again while this one waited (a restarted
        // worker) takes its place.
        if let Some(other) = job.endpoints[usize::from(rank)].filter(|&e| e != endpoint) {
            let e = format!(
                "job {name:?}: rank {rank} registered again from {other} while this \
                 registration waited; that one takes its place"
            );
            return (core, Err(e));
        }
        if let Some(why) = cannot_run(&core, job) {
            return (core, Err(format!("job {name:?} {why}")));
        }
        if let Some(admission) = admitted(&core, job, rank) {
            return (core, Ok(Reply::Admitted { admission }));
        }
        let now = Instant::now();
        if now >= deadline || shared.stop.load(Ordering::Acquire) {
            let e = format!(
                "job {name:?} not ready after {:.1} s: {}",
                wait.as_secs_f64(),
                core.why_waiting(job)
            );
            return (core, Err(e));
        }
        if closed(conn) {
            return (
                core,
                Err(format!("job {name:?}: rank {rank}'s worker went away")),
            );
        }
        core = shared
            .changed
            .wait_timeout(core, (deadline - now).min(GONE_POLL))
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

/// The admission of rank `rank`, once its job is installed.
fn admitted(core: &Core, job: &JobRecord, rank: u16) -> Option<Admission> {
    let status = core.status(job);
    let grant = job.placement.grant()?;
    if !status.installed {
        return None;
    }
    Some(Admission {
        job: job.decl.name.clone(),
        id: job.id,
        worker: rank,
        workers: job.decl.workers,
        pool_size: grant.size,
        elements: job.decl.elements,
        generation: job.generation,
        data_addr: status.data_addr?,
        fallback: matches!(job.placement, Placement::Fallback { .. }),
    })
}

/// Whether the client closed its connection (a worker killed while it
/// waited). The API is request and reply: a client that shuts its sending
/// side has no more to ask, so end of stream is taken as the client gone.
fn closed(conn: &TcpStream) -> bool {
    if conn.set_nonblocking(true).is_err() {
        return false;
    }
    let peeked = conn.peek(&mut [0u8; 1]);
    let _ = conn.set_nonblocking(false);
    match peeked {
        Ok(n) => n == 0,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
        ),
    }
}
