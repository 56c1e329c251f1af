//! JSON lines over TCP between a coordinator and its workers: the plumbing
//! the live policies share, on the transport every control channel uses
//! (`inagg_netio::lines`: bounded connections and lines, a poll-driven
//! accept loop). One connection per worker; a thread per connection turns
//! each line into an [`Event`] on one channel, so the coordinator's own
//! thread owns all the state and handles one event at a time.

use inagg_netio::stream::Stream;
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use crossbeam_channel::{Receiver, Sender};
use inagg_netio::conns::{Conn, Limits};
use inagg_netio::lines::{
    self, backing_off, Accept, CallError, LineReader, Next, Refusal, MAX_LINE,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The bounds of a coordinator's connections: one per worker, and a worker
/// may connect a while before its first message (it connects, then
/// starts its all-reduce).
const LIMITS: Limits = Limits {
    max: 256,
    // No credentials here: a connection is trusted at its first request,
    // and every worker of a job may connect from one host at once.
    strangers: 256,
    per_address: 256,
    first_request: Duration::from_secs(60),
    grace: Duration::from_millis(250),
    evict_idle: Duration::from_secs(60),
};

/// How often the accept loop and each connection's reader look at the
/// stop flag.
const POLL: Duration = Duration::from_millis(50);

/// What a connection thread hands the coordinator.
pub enum Event<R> {
    /// A worker connected; replies go to `writer`.
    Opened { conn: u64, writer: Stream },
    /// One request.
    Message { conn: u64, request: R },
    /// Unreadable input or a closed connection.
    Closed { conn: u64, why: String },
}

/// The coordinator's write side of every connection.
#[derive(Default)]
pub struct Writers(BTreeMap<u64, Stream>);

impl Writers {
    /// A connection opened.
    pub fn open(&mut self, conn: u64, writer: Stream) {
        self.0.insert(conn, writer);
    }

    /// A connection closed.
    pub fn close(&mut self, conn: u64) {
        self.0.remove(&conn);
    }

    /// Every open connection.
    pub fn conns(&self) -> Vec<u64> {
        self.0.keys().copied().collect()
    }

    /// Sends `message` on `conn`. A connection that cannot take it is
    /// dropped here; its reader reports the close.
    pub fn send<T: Serialize>(&mut self, conn: u64, message: &T) {
        if let Some(w) = self.0.get_mut(&conn) {
            if send(w, message).is_err() {
                self.0.remove(&conn);
            }
        }
    }
}

/// A coordinator's event loop: hands `handle` each event, or `None` after
/// `tick` without one, until `stop` is set or no connection and no
/// acceptor is left to send events.
pub fn drive<R>(
    rx: &Receiver<Event<R>>,
    stop: &AtomicBool,
    tick: Duration,
    mut handle: impl FnMut(Option<Event<R>>),
) {
    while !stop.load(Ordering::SeqCst) {
        match rx.recv_timeout(tick) {
            Ok(event) => handle(Some(event)),
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => handle(None),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// A coordinator's endpoint and the thread that owns its state: `run`
/// gets every connection's events on one channel and returns its report
/// when the stop flag is set.
pub struct Server<T> {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
    thread: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Server<T> {
    /// Binds `bind` and starts accepting, with `run` on its own thread.
    /// (Each policy's coordinator is a `Server` of its own report, with a
    /// `start` that checks its configuration and then calls this.)
    pub fn spawn<R, F>(bind: SocketAddr, run: F) -> Result<Server<T>>
    where
        R: DeserializeOwned + Send + 'static,
        F: FnOnce(Receiver<Event<R>>, &AtomicBool) -> T + Send + 'static,
    {
        let listener = TcpListener::bind(bind).with_context(|| format!("bind {bind}"))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = crossbeam_channel::unbounded();
        let acceptor = spawn_acceptor(listener, tx, stop.clone());
        let flag = stop.clone();
        let thread = std::thread::spawn(move || run(rx, &flag));
        Ok(Server {
            addr,
            stop,
            acceptor: Some(acceptor),
            thread: Some(thread),
        })
    }

    /// Where workers connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the thread and returns its report (`None`: stopped before,
    /// or it panicked).
    pub fn stop(&mut self) -> Option<T> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        self.thread.take()?.join().ok()
    }

    /// Stops and returns the report, or says the coordinator's thread
    /// panicked.
    pub fn finish(mut self) -> Result<T> {
        self.stop()
            .ok_or_else(|| anyhow::anyhow!("the coordinator's thread panicked"))
    }
}

impl<T> Drop for Server<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(a) = self.acceptor.take() {
            let _ = a.join();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts workers on `listener` until `stop` is set, each connection's
/// lines turned into events on `tx` by a thread of its own.
fn spawn_acceptor<R: DeserializeOwned + Send + 'static>(
    listener: TcpListener,
    tx: Sender<Event<R>>,
    stop: Arc<AtomicBool>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        let refusal = |peer: SocketAddr, why: Refusal| {
            tracing::warn!("coordinator connection from {peer} refused: {why:?}");
            match why {
                Refusal::Busy { open } => {
                    format!("{{\"error\":\"busy: {open} connections open\"}}").into_bytes()
                }
                Refusal::BackOff { wait } => {
                    let why = backing_off(peer, wait);
                    serde_json::json!({ "error": why }).to_string().into_bytes()
                }
            }
        };
        let accept = Accept {
            limits: LIMITS,
            poll: POLL,
            refusal: &refusal,
            // The coordinators run inside a training cluster, beside its
            // data plane: in clear, as the data plane is.
            tls: None,
        };
        let next = Arc::new(AtomicU64::new(0));
        let flag = stop.clone();
        lines::serve(&listener, &stop, &accept, move |stream, _, conn| {
            let id = next.fetch_add(1, Ordering::Relaxed);
            let Ok(writer) = stream.try_clone() else {
                return;
            };
            if tx.send(Event::Opened { conn: id, writer }).is_ok() {
                read_requests(id, stream, &conn, &tx, &flag);
            }
        });
    })
}

/// Turns one connection's lines into events until it closes or the
/// coordinator stops.
fn read_requests<R: DeserializeOwned>(
    id: u64,
    stream: Stream,
    conn: &Conn,
    tx: &Sender<Event<R>>,
    stop: &AtomicBool,
) {
    let closed = |why: String| Event::Closed { conn: id, why };
    let Ok(mut lines) = LineReader::new(stream, MAX_LINE, POLL) else {
        let _ = tx.send(closed("cannot read the connection".into()));
        return;
    };
    loop {
        let event = match lines.next_request(conn, stop) {
            Next::Line(line) => match serde_json::from_slice::<R>(line) {
                Ok(request) => {
                    conn.trust();
                    Event::Message { conn: id, request }
                }
                Err(e) => closed(format!(
                    "unreadable request {:?}: {e}",
                    String::from_utf8_lossy(line).trim_end()
                )),
            },
            Next::TooLong => closed(format!("a line longer than {MAX_LINE} bytes")),
            Next::Failed(e) => closed(e.to_string()),
            Next::Closed | Next::TimedOut => closed("closed".into()),
        };
        let last = matches!(event, Event::Closed { .. });
        if tx.send(event).is_err() || last {
            return;
        }
    }
}

/// Writes one message as a line.
pub fn send<T: Serialize>(w: &mut Stream, message: &T) -> std::io::Result<()> {
    let line = serde_json::to_vec(message).map_err(std::io::Error::other)?;
    lines::write_line(w, &line)
}

/// A worker's connection to a coordinator.
pub struct Client {
    lines: lines::Client,
}

impl Client {
    /// Connects (5 s at most); `wait` bounds every [`Client::receive`].
    pub fn connect(coordinator: SocketAddr, wait: Duration) -> Result<Client> {
        let lines = lines::Client::connect(coordinator, Duration::from_secs(5))
            .with_context(|| format!("connect to the coordinator at {coordinator}"))?;
        lines.set_read_timeout(wait)?;
        Ok(Client { lines })
    }

    /// The connection's read and write sides (the read side for a reader
    /// thread).
    pub fn into_parts(self) -> (LineReader, Stream) {
        self.lines.into_parts()
    }

    /// Sends one request.
    pub fn send<T: Serialize>(&mut self, message: &T) -> Result<()> {
        let line = serde_json::to_vec(message)?;
        self.lines.send(&line).context("write to the coordinator")
    }

    /// The next reply; an error after the wait limit, on a close or on
    /// unreadable input.
    pub fn receive<T: DeserializeOwned>(&mut self) -> Result<T> {
        parse(self.lines.receive())
    }
}

/// Reads one reply line from a connection's read side.
pub fn receive<T: DeserializeOwned>(reader: &mut LineReader) -> Result<T> {
    parse(reader.reply())
}

/// A reply line as a message, or what went wrong, in the worker's words.
fn parse<T: DeserializeOwned>(line: std::result::Result<String, CallError>) -> Result<T> {
    match line {
        Ok(line) => serde_json::from_str(&line)
            .with_context(|| format!("unreadable reply from the coordinator: {line:?}")),
        Err(CallError::Closed | CallError::ClosedInClear) => {
            bail!("the coordinator closed the connection")
        }
        Err(CallError::TimedOut) => bail!("no word from the coordinator within the wait limit"),
        Err(CallError::Io(e)) => Err(e).context("read from the coordinator"),
        Err(e) => bail!("the coordinator {e}"),
    }
}
