//! A flood of strangers at a control endpoint: `n` connections held open,
//! each sending a request line without credentials every 50 ms, and
//! reopened when the endpoint closes one (as it evicts the oldest
//! strangers). What `docs/SECURITY.md`'s "no lock-out" is tested and
//! measured against (tests/controller.rs, `inagg bench --flood`).

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often each stranger sends its line.
const EVERY: Duration = Duration::from_millis(50);

/// A running flood; stopped (every connection closed) when dropped.
pub struct Flood {
    stop: Arc<AtomicBool>,
    lines: Arc<AtomicU64>,
    opened: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl Flood {
    /// Opens `n` connections to `addr` and keeps them sending `line` (a
    /// newline is added) until dropped.
    pub fn start(addr: SocketAddr, n: usize, line: &[u8]) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let (lines, opened) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let mut message = line.to_vec();
        message.push(b'\n');
        let thread = {
            let (stop, lines, opened) = (stop.clone(), lines.clone(), opened.clone());
            std::thread::spawn(move || {
                let mut conns: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
                while !stop.load(Ordering::Acquire) {
                    for slot in conns.iter_mut() {
                        if slot.is_none() {
                            *slot = open(addr);
                            opened.fetch_add(u64::from(slot.is_some()), Ordering::Relaxed);
                        }
                        if let Some(c) = slot {
                            if send(c, &message) {
                                lines.fetch_add(1, Ordering::Relaxed);
                            } else {
                                *slot = None;
                            }
                        }
                    }
                    std::thread::sleep(EVERY);
                }
            })
        };
        Flood {
            stop,
            lines,
            opened,
            thread: Some(thread),
        }
    }

    /// Lines sent so far.
    pub fn lines(&self) -> u64 {
        self.lines.load(Ordering::Relaxed)
    }

    /// Connections opened so far (reopened ones included).
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A stranger's connection, not blocking (the flood never waits on one).
fn open(addr: SocketAddr) -> Option<TcpStream> {
    let c = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    c.set_nonblocking(true).ok()?;
    Some(c)
}

/// Sends `message` and drains what came back; `false` once the endpoint
/// closed the connection.
fn send(c: &mut TcpStream, message: &[u8]) -> bool {
    let mut sink = [0u8; 4096];
    loop {
        match c.read(&mut sink) {
            Ok(0) => return false,
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(_) => return false,
        }
    }
    // A part left unsent (a full socket buffer) joins the next line: a
    // stranger's lines are refused whatever they say.
    match c.write_all(message) {
        Ok(()) => true,
        Err(e) => e.kind() == ErrorKind::WouldBlock,
    }
}
