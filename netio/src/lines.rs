//! JSON lines over TCP: the framing of every control channel (the
//! emulator's control endpoint, the controller's API, the live policies'
//! coordinators). One message per line; a client sends a request line and
//! reads the reply line. This module is the transport, byte for byte; the
//! JSON is its users':
//!
//! - [`serve`]: the accept loop. It waits in `poll` (so a client is served
//!   the moment it connects, and a stop is seen within `poll`), admits
//!   connections through [`Conns`] (so idle or half-written connections
//!   cannot take unbounded threads) and serves each on a thread of its own;
//! - [`LineReader`]: reads one line at a time, at most a bounded length,
//!   waking every read timeout to ask whether to keep waiting (a stop, a
//!   connection whose place was taken);
//! - [`Client`]: connects with timeouts and no Nagle delay (messages are
//!   small and back to back: Nagle's algorithm and delayed
//!   acknowledgements held them up to 40 ms), sends lines, reads lines;
//! - [`Endpoint`]: which kind of endpoint a reply came from, told by the
//!   shape of its error, so a client pointed at the wrong kind says so
//!   instead of quoting the JSON parser.

use std::collections::VecDeque;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::conns::{Admit, Conn, Conns, Limits};
use crate::stream::Stream;
use crate::tls::{ClientTls, ServerTls};

/// The longest line an endpoint reads (a job with 64 endpoints is about
/// 3 KiB).
pub const MAX_LINE: u64 = 1 << 20;

/// How an endpoint accepts: its connection bounds, how often it looks at
/// the stop flag, and what it says to a connection it has no place for.
pub struct Accept<'a> {
    /// The bounds of its connection table.
    pub limits: Limits,
    /// How long it waits in `poll` for a client before looking at the
    /// stop flag.
    pub poll: Duration,
    /// The line (without its newline) a connection from this peer gets
    /// when it is refused, and why: the endpoint's own error reply (and its
    /// log line: this crate logs nothing).
    pub refusal: &'a dyn Fn(SocketAddr, Refusal) -> Vec<u8>,
    /// TLS, when the endpoint has a certificate: each admitted connection
    /// shakes hands on its own thread (a slow one holds only its place)
    /// and is dropped if that fails.
    pub tls: Option<ServerTls>,
}

/// The words of a [`Refusal::BackOff`], the same on every endpoint.
pub fn backing_off(peer: SocketAddr, wait: Duration) -> String {
    format!(
        "too many wrong tokens from {}: try again in {} s",
        peer.ip(),
        wait.as_secs() + 1
    )
}

/// Why a connection is refused before it is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Every place is held; this many connections are open.
    Busy {
        /// Connections open.
        open: usize,
    },
    /// Its address gave too many wrong credentials lately
    /// ([`Conns::backoff`]).
    BackOff {
        /// How long it must still wait.
        wait: Duration,
    },
}

/// Accepts connections on `listener` until `stop` is set, handing each
/// admitted one to `handle` on a thread of its own (blocking, with its
/// place in the connection table, after the TLS handshake if the endpoint
/// has TLS), then waits for those threads: they must end soon after
/// `stop` (a [`LineReader`] sees it within its read timeout).
pub fn serve<H>(listener: &TcpListener, stop: &AtomicBool, accept: &Accept, handle: H)
where
    H: Fn(Stream, SocketAddr, Conn) + Clone + Send + 'static,
{
    raise_backlog(listener);
    // Each turn drains the kernel's queue; a listener that cannot be made
    // non-blocking is accepted from once a turn.
    let burst = match listener.set_nonblocking(true) {
        Ok(()) => ACCEPT_BURST,
        Err(_) => 1,
    };
    let open = Conns::new(accept.limits);
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    // Accepted connections waiting for a place (Admit::Wait), oldest first.
    let mut waiting: VecDeque<(TcpStream, SocketAddr, Instant)> = VecDeque::new();
    while !stop.load(Ordering::Acquire) {
        let poll = if waiting.is_empty() {
            accept.poll
        } else {
            WAITING_POLL
        };
        if crate::udp::wait(listener, poll, false).unwrap_or(false) {
            for _ in 0..burst {
                let Some((stream, peer)) = accept_one(listener) else {
                    break;
                };
                queue(accept, &open, &mut waiting, stream, peer);
            }
        }
        while let Some((stream, peer, since)) = waiting.pop_front() {
            match open.admit(&stream) {
                Admit::In(conn) => threads.push(spawn(accept, handle.clone(), stream, peer, conn)),
                Admit::Busy => refuse_busy(accept, &open, stream, peer),
                Admit::Wait if since.elapsed() >= accept.limits.first_request => {
                    refuse_busy(accept, &open, stream, peer)
                }
                Admit::Wait => {
                    waiting.push_front((stream, peer, since));
                    break;
                }
            }
        }
        threads.retain(|t| !t.is_finished());
    }
    for t in threads {
        let _ = t.join();
    }
}

/// The next connection of the kernel's queue, made blocking; `None` when
/// the queue is empty or accepting failed (out of file descriptors, say:
/// after a pause, so some can close).
fn accept_one(listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    match listener.accept() {
        Ok((stream, peer)) => {
            let _ = stream.set_nonblocking(false);
            Some((stream, peer))
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
        Err(_) => {
            std::thread::sleep(Duration::from_millis(100));
            None
        }
    }
}

/// Puts an accepted connection in the waiting room, or refuses it: its
/// address backs off, or the room is full.
fn queue(
    accept: &Accept,
    open: &Conns,
    waiting: &mut VecDeque<(TcpStream, SocketAddr, Instant)>,
    mut stream: TcpStream,
    peer: SocketAddr,
) {
    match open.backoff(peer.ip()) {
        Some(wait) => {
            let back_off = (accept.refusal)(peer, Refusal::BackOff { wait });
            let _ = write_line(&mut stream, &back_off);
        }
        None if waiting.len() >= MAX_WAITING => refuse_busy(accept, open, stream, peer),
        None => waiting.push_back((stream, peer, Instant::now())),
    }
}

/// The kernel's queue of connections not accepted yet (capped by
/// net.core.somaxconn). std listens with 128: a flood of strangers fills
/// that between two turns of the loop, and a client whose connection the
/// kernel then drops waits a second for its SYN to be sent again.
const BACKLOG: libc::c_int = 4096;

/// Listens again with [`BACKLOG`] (Linux takes a second `listen` on a
/// listening socket as a new backlog). Best effort: 128 otherwise.
fn raise_backlog(listener: &TcpListener) {
    use std::os::fd::AsRawFd;
    // SAFETY: `listen` on a socket this listener owns and keeps open.
    let _ = unsafe { libc::listen(listener.as_raw_fd(), BACKLOG) };
}

/// Connections taken from the kernel's queue at one turn of the loop.
const ACCEPT_BURST: usize = 256;

/// How often the accept loop tries again to place the connections that
/// wait (a stranger's grace is 250 ms).
const WAITING_POLL: Duration = Duration::from_millis(10);

/// Connections that may wait for a place at once; past them a newcomer is
/// refused as busy.
const MAX_WAITING: usize = 1024;

fn refuse_busy(accept: &Accept, open: &Conns, mut stream: TcpStream, peer: SocketAddr) {
    let busy = Refusal::Busy { open: open.open() };
    let _ = write_line(&mut stream, &(accept.refusal)(peer, busy));
}

/// Serves an admitted connection on a thread of its own, after its TLS
/// handshake if the endpoint has TLS.
fn spawn<H>(
    accept: &Accept,
    handle: H,
    stream: TcpStream,
    peer: SocketAddr,
    conn: Conn,
) -> JoinHandle<()>
where
    H: Fn(Stream, SocketAddr, Conn) + Send + 'static,
{
    let tls = accept.tls.clone();
    std::thread::spawn(move || {
        // Its grace runs from here: this thread may start late on a
        // loaded machine.
        conn.started();
        let stream = match tls {
            None => Stream::plain(stream),
            Some(tls) => match Stream::accept(stream, &tls) {
                Ok(stream) => stream,
                // Not a TLS client, or not one we trust.
                Err(_) => return,
            },
        };
        handle(stream, peer, conn)
    })
}

/// What [`LineReader::next`] found.
#[derive(Debug)]
pub enum Next<'a> {
    /// One line, with its newline.
    Line(&'a [u8]),
    /// A line longer than the limit: the connection should be closed.
    TooLong,
    /// The peer closed the connection (a partial last line is dropped).
    Closed,
    /// Nothing within the read timeout and the caller would not wait more.
    TimedOut,
    /// The connection failed.
    Failed(io::Error),
}

/// Reads lines of at most a bounded length from one connection.
#[derive(Debug)]
pub struct LineReader {
    reader: BufReader<Stream>,
    line: Vec<u8>,
    max: u64,
    /// Whether [`LineReader::next_request`] returned a request that has
    /// not been marked answered yet.
    in_hand: bool,
}

impl LineReader {
    /// Reads from `stream`, waking every `poll` while no line completes.
    pub fn new(stream: Stream, max: u64, poll: Duration) -> io::Result<LineReader> {
        stream.set_read_timeout(Some(poll))?;
        Ok(LineReader {
            reader: BufReader::new(stream),
            line: Vec::new(),
            max,
            in_hand: false,
        })
    }

    /// The connection.
    pub fn get_ref(&self) -> &Stream {
        self.reader.get_ref()
    }

    /// The next line. While none completes it asks `keep_waiting` at every
    /// read timeout, and returns [`Next::TimedOut`] when told not to wait.
    pub fn next(&mut self, mut keep_waiting: impl FnMut() -> bool) -> Next<'_> {
        self.line.clear();
        loop {
            let room = self.max.saturating_sub(self.line.len() as u64);
            match (&mut self.reader)
                .take(room)
                .read_until(b'\n', &mut self.line)
            {
                Ok(0) if room > 0 => return Next::Closed,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    if !keep_waiting() {
                        return Next::TimedOut;
                    }
                    continue;
                }
                Err(e) => return Next::Failed(e),
            }
            if self.line.ends_with(b"\n") {
                return Next::Line(&self.line);
            }
            if self.line.len() as u64 >= self.max {
                return Next::TooLong;
            }
            // A partial line: the rest follows.
        }
    }

    /// The next line on a client's connection, within the read timeout,
    /// without its newline, or why there is none.
    pub fn reply(&mut self) -> Result<String, CallError> {
        match self.next(|| false) {
            Next::Line(line) => std::str::from_utf8(line)
                .map(|s| s.trim_end_matches(['\n', '\r']).to_string())
                .map_err(|_| CallError::NotText),
            Next::TooLong => Err(CallError::TooLong),
            Next::Closed => Err(CallError::Closed),
            Next::TimedOut => Err(CallError::TimedOut),
            Next::Failed(e) => Err(CallError::Io(e)),
        }
    }

    /// The next line on a server's connection: waits while `stop` is clear
    /// and the connection keeps its place. The request it returns is in
    /// hand ([`Conn::received`]) until the server asks for the next one,
    /// which marks it answered ([`Conn::completed`]).
    pub fn next_request(&mut self, conn: &Conn, stop: &AtomicBool) -> Next<'_> {
        if self.in_hand {
            conn.completed();
        }
        self.in_hand = true;
        let next = self.next(|| !conn.expired() && !stop.load(Ordering::Acquire));
        if matches!(next, Next::Line(_)) {
            conn.received();
        }
        next
    }
}

/// Writes `line` and a newline in one write.
pub fn write_line(w: &mut impl Write, line: &[u8]) -> io::Result<()> {
    let mut out = Vec::with_capacity(line.len() + 1);
    out.extend_from_slice(line);
    out.push(b'\n');
    w.write_all(&out)
}

/// Why a [`Client`] got no reply line.
#[derive(Debug)]
pub enum CallError {
    /// The peer closed the connection.
    Closed,
    /// A client in clear was cut off before any answer: what an endpoint
    /// with TLS does to it.
    ClosedInClear,
    /// No reply within the read timeout.
    TimedOut,
    /// A reply line longer than [`MAX_LINE`].
    TooLong,
    /// A reply that is not UTF-8.
    NotText,
    /// The connection failed.
    Io(io::Error),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Closed => write!(f, "closed the connection"),
            CallError::ClosedInClear => write!(
                f,
                "closed the connection before answering; an endpoint with TLS does that to a \
                 client in clear: give its CA (--tls-ca, --switch-tls-ca)"
            ),
            CallError::TimedOut => write!(f, "did not answer in time"),
            CallError::TooLong => write!(f, "answered a line longer than {MAX_LINE} bytes"),
            CallError::NotText => write!(f, "answered a line that is not UTF-8"),
            CallError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for CallError {}

/// A client's connection to a JSON-lines endpoint.
#[derive(Debug)]
pub struct Client {
    reader: LineReader,
    writer: Stream,
    /// Whether a line came back yet (a cut before it, in clear, is told
    /// as [`CallError::ClosedInClear`]).
    answered: bool,
}

impl Client {
    /// Connects within `timeout`; reads and writes then wait `timeout` at
    /// most.
    pub fn connect(addr: SocketAddr, timeout: Duration) -> io::Result<Client> {
        Client::connect_with(addr, timeout, None)
    }

    /// Connects within `timeout`, under TLS when `tls` is given (the
    /// server's certificate verified); reads and writes then wait `timeout`
    /// at most.
    pub fn connect_with(
        addr: SocketAddr,
        timeout: Duration,
        tls: Option<&ClientTls>,
    ) -> io::Result<Client> {
        let tcp = TcpStream::connect_timeout(&addr, timeout)?;
        tcp.set_write_timeout(Some(timeout))?;
        let _ = tcp.set_nodelay(true);
        let stream = match tls {
            None => Stream::plain(tcp),
            Some(tls) => Stream::connect(tcp, addr, tls)?,
        };
        let writer = stream.try_clone()?;
        Ok(Client {
            reader: LineReader::new(stream, MAX_LINE, timeout)?,
            writer,
            answered: false,
        })
    }

    /// How long a read waits from now on.
    pub fn set_read_timeout(&self, wait: Duration) -> io::Result<()> {
        self.writer.set_read_timeout(Some(wait))
    }

    /// This end of the connection.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.writer.local_addr()
    }

    /// Sends one line (a newline is added).
    pub fn send(&mut self, line: &[u8]) -> io::Result<()> {
        write_line(&mut self.writer, line)
    }

    /// The next line, within the read timeout, without its newline.
    pub fn receive(&mut self) -> Result<String, CallError> {
        let reply = self.reader.reply();
        let cut = match &reply {
            Err(CallError::Closed) => true,
            Err(CallError::Io(e)) => e.kind() == io::ErrorKind::ConnectionReset,
            _ => false,
        };
        if cut && !self.answered && !self.writer.is_tls() {
            return Err(CallError::ClosedInClear);
        }
        self.answered |= reply.is_ok();
        reply
    }

    /// Sends a request line and reads the reply line.
    pub fn call(&mut self, request: &[u8]) -> Result<String, CallError> {
        self.send(request).map_err(CallError::Io)?;
        self.receive()
    }

    /// Closes the connection and waits up to `wait` for the server to close
    /// its end: a server that lets go of what the connection held (a claim
    /// on the switch) before it closes has done so when this returns
    /// `true`.
    pub fn close(&mut self, wait: Duration) -> bool {
        if self.writer.shutdown(std::net::Shutdown::Write).is_err()
            || self.writer.set_read_timeout(Some(wait)).is_err()
        {
            return false;
        }
        let deadline = std::time::Instant::now() + wait;
        while std::time::Instant::now() < deadline {
            match self.reader.reply() {
                Ok(_) => continue,
                Err(CallError::Closed) => return true,
                Err(_) => return false,
            }
        }
        false
    }

    /// The connection's read and write sides, for a reader thread.
    pub fn into_parts(self) -> (LineReader, Stream) {
        (self.reader, self.writer)
    }
}

/// The kinds of JSON-lines endpoint, each with its own shape of error
/// reply: the emulator's control endpoint answers `{"err": {...}}`, the
/// controller `{"error": "..."}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// An emulator's control endpoint (`inagg emu --control`).
    Emulator,
    /// The controller's API (`inagg controller`).
    Controller,
}

impl Endpoint {
    /// The kind of endpoint whose error reply `answer` is, if it is one.
    pub fn of_error(answer: &str) -> Option<Endpoint> {
        let body = answer.trim_start().strip_prefix('{')?.trim_start();
        if body.starts_with("\"err\"") {
            Some(Endpoint::Emulator)
        } else if body.starts_with("\"error\"") {
            Some(Endpoint::Controller)
        } else {
            None
        }
    }

    /// What a client that expected `self` says when `answer` came from
    /// another kind of endpoint; `None` when it did not.
    pub fn misdirected(self, answer: &str) -> Option<String> {
        let other = Endpoint::of_error(answer).filter(|k| *k != self)?;
        let answer = answer.trim_end();
        Some(match other {
            Endpoint::Controller => format!(
                "this endpoint is an inagg controller, not an emulator's control port: use \
                 `ctl --controller ADDR` for it (it answered {answer})"
            ),
            Endpoint::Emulator => format!(
                "this endpoint is an emulator's control port, not an inagg controller: program \
                 it with `ctl --addr ADDR` (no --controller) (it answered {answer})"
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn endpoints_are_told_apart_by_their_error_replies() {
        let emu = r#"{"err":{"kind":"bad_request","message":"x"}}"#;
        let ctl = r#"{ "error": "unreadable request" }"#;
        assert_eq!(Endpoint::of_error(emu), Some(Endpoint::Emulator));
        assert_eq!(Endpoint::of_error(ctl), Some(Endpoint::Controller));
        assert_eq!(Endpoint::of_error(r#"{"ok":"done"}"#), None);
        assert_eq!(Endpoint::Emulator.misdirected(emu), None);
        let said = Endpoint::Emulator.misdirected(ctl).unwrap();
        assert!(
            said.contains("is an inagg controller, not an emulator's"),
            "{said}"
        );
        let said = Endpoint::Controller.misdirected(emu).unwrap();
        assert!(
            said.contains("is an emulator's control port, not an inagg"),
            "{said}"
        );
    }

    /// An echo server on `serve`: each line back, upper-cased; at most
    /// `max` connections.
    fn echo(max: usize) -> (SocketAddr, Arc<AtomicBool>, JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let accept = Accept {
                limits: Limits {
                    max,
                    ..Limits::default()
                },
                poll: Duration::from_millis(20),
                refusal: &|_, why| match why {
                    Refusal::Busy { open } => format!("busy {open}").into_bytes(),
                    Refusal::BackOff { wait } => format!("back off {wait:?}").into_bytes(),
                },
                tls: None,
            };
            let stop = flag.clone();
            serve(&listener, &flag, &accept, move |stream, _, conn| {
                let mut writer = stream.try_clone().unwrap();
                let mut lines = LineReader::new(stream, 16, Duration::from_millis(20)).unwrap();
                loop {
                    match lines.next_request(&conn, &stop) {
                        Next::Line(l) => {
                            // No credentials here: trusted at its first line.
                            conn.trust();
                            let _ = writer.write_all(&l.to_ascii_uppercase());
                        }
                        Next::TooLong => {
                            let _ = write_line(&mut writer, b"too long");
                            return;
                        }
                        _ => return,
                    }
                }
            });
        });
        (addr, stop, thread)
    }

    #[test]
    fn lines_are_answered_bounded_and_connections_counted() {
        let (addr, stop, thread) = echo(1);
        let wait = Duration::from_secs(5);
        let mut a = Client::connect(addr, wait).unwrap();
        // A line in two writes is one request.
        a.writer.write_all(b"hel").unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(a.call(b"lo").unwrap(), "HELLO");
        // The table is full: a second client is refused, and told so.
        let mut b = Client::connect(addr, wait).unwrap();
        assert_eq!(b.receive().unwrap(), "busy 1");
        // A line past the bound ends the connection.
        assert_eq!(a.call(&[b'x'; 40]).unwrap(), "too long");
        assert!(matches!(
            a.receive(),
            Err(CallError::Closed | CallError::Io(_))
        ));
        stop.store(true, Ordering::Release);
        thread.join().unwrap();
    }

    #[test]
    fn a_silent_peer_times_out_a_client() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut c =
            Client::connect(listener.local_addr().unwrap(), Duration::from_millis(50)).unwrap();
        assert!(matches!(c.call(b"anyone?"), Err(CallError::TimedOut)));
    }
}
