//! JSON lines over TCP between a coordinator and its workers: the plumbing
//! the live policies share (`selective`, `selmcast`). One connection per
//! worker; a thread per connection turns each line into an [`Event`] on
//! one channel, so the coordinator's own thread owns all the state and
//! handles one event at a time.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use crossbeam_channel::{Receiver, Sender};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// What a connection thread hands the coordinator.
pub enum Event<R> {
    /// A worker connected; replies go to `writer`.
    Opened { conn: u64, writer: TcpStream },
    /// One request.
    Message { conn: u64, request: R },
    /// Unreadable input or a closed connection.
    Closed { conn: u64, why: String },
}

/// The coordinator's write side of every connection.
#[derive(Default)]
pub struct Writers(BTreeMap<u64, TcpStream>);

impl Writers {
    /// A connection opened.
    pub fn open(&mut self, conn: u64, writer: TcpStream) {
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
    thread: Option<JoinHandle<T>>,
}

impl<T: Send + 'static> Server<T> {
    /// Binds `bind` and starts accepting, with `run` on its own thread.
    pub fn start<R, F>(bind: SocketAddr, run: F) -> Result<Server<T>>
    where
        R: DeserializeOwned + Send + 'static,
        F: FnOnce(Receiver<Event<R>>, &AtomicBool) -> T + Send + 'static,
    {
        let listener = TcpListener::bind(bind).with_context(|| format!("bind {bind}"))?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = crossbeam_channel::unbounded();
        spawn_acceptor(listener, tx, stop.clone());
        let flag = stop.clone();
        let thread = std::thread::spawn(move || run(rx, &flag));
        Ok(Server {
            addr,
            stop,
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
        wake(self.addr);
        self.thread.take()?.join().ok()
    }
}

impl<T> Drop for Server<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        wake(self.addr);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts connections on `listener` until `stop` is set (then one more
/// connection, e.g. [`wake`], lets it see the flag).
fn spawn_acceptor<R: DeserializeOwned + Send + 'static>(
    listener: TcpListener,
    tx: Sender<Event<R>>,
    stop: Arc<AtomicBool>,
) {
    std::thread::spawn(move || {
        for (conn, stream) in (0u64..).zip(listener.incoming()) {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let Ok(stream) = stream else { continue };
            // Messages are small and often back to back (a plan to every
            // worker): without this, Nagle's algorithm holds each one after
            // the first until the previous is acknowledged, and a delayed
            // acknowledgement makes that up to 40 ms.
            let _ = stream.set_nodelay(true);
            let Ok(writer) = stream.try_clone() else {
                continue;
            };
            if tx.send(Event::Opened { conn, writer }).is_err() {
                return;
            }
            let tx = tx.clone();
            std::thread::spawn(move || read_requests(conn, stream, &tx));
        }
    });
}

/// Lets a stopping acceptor see its flag.
fn wake(addr: SocketAddr) {
    let _ = TcpStream::connect_timeout(&addr, Duration::from_millis(200));
}

fn read_requests<R: DeserializeOwned>(conn: u64, stream: TcpStream, tx: &Sender<Event<R>>) {
    for line in BufReader::new(stream).lines() {
        let event = match line {
            Err(e) => Event::Closed {
                conn,
                why: e.to_string(),
            },
            Ok(line) => match serde_json::from_str::<R>(&line) {
                Ok(request) => Event::Message { conn, request },
                Err(e) => Event::Closed {
                    conn,
                    why: format!("unreadable request {line:?}: {e}"),
                },
            },
        };
        let closed = matches!(event, Event::Closed { .. });
        if tx.send(event).is_err() || closed {
            return;
        }
    }
    let _ = tx.send(Event::Closed {
        conn,
        why: "closed".into(),
    });
}

/// Writes one message as a line.
pub fn send<T: Serialize>(w: &mut TcpStream, message: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_string(message).map_err(std::io::Error::other)?;
    line.push('\n');
    w.write_all(line.as_bytes())
}

/// A worker's connection to a coordinator.
pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    /// Connects (5 s at most); `wait` bounds every [`Client::receive`].
    pub fn connect(coordinator: SocketAddr, wait: Duration) -> Result<Client> {
        let stream = TcpStream::connect_timeout(&coordinator, Duration::from_secs(5))
            .with_context(|| format!("connect to the coordinator at {coordinator}"))?;
        stream.set_read_timeout(Some(wait))?;
        // As on the coordinator's side: no Nagle delay on small messages.
        stream.set_nodelay(true)?;
        Ok(Client {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        })
    }

    /// The connection's read and write sides (the read side for a reader
    /// thread).
    pub fn into_parts(self) -> (BufReader<TcpStream>, TcpStream) {
        (self.reader, self.writer)
    }

    /// Sends one request.
    pub fn send<T: Serialize>(&mut self, message: &T) -> Result<()> {
        send(&mut self.writer, message).context("write to the coordinator")
    }

    /// The next reply; an error after the wait limit, on a close or on
    /// unreadable input.
    pub fn receive<T: DeserializeOwned>(&mut self) -> Result<T> {
        receive(&mut self.reader)
    }
}

/// Reads one reply line.
pub fn receive<T: DeserializeOwned>(reader: &mut BufReader<TcpStream>) -> Result<T> {
    let mut line = String::new();
    match reader.read_line(&mut line) {
        Ok(0) => bail!("the coordinator closed the connection"),
        Ok(_) => serde_json::from_str(&line)
            .with_context(|| format!("unreadable reply from the coordinator: {line:?}")),
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ) =>
        {
            bail!("no word from the coordinator within the wait limit")
        }
        Err(e) => Err(e).context("read from the coordinator"),
    }
}
