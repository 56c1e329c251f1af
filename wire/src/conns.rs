//! Bounds on the TCP connections of a control endpoint (the emulator's,
//! the controller's): at most a fixed number open, each served by a thread
//! of its own, so that thousands of idle or half-written connections cannot
//! take thousands of threads.
//!
//! When the table is full, a new connection takes the place of one that
//! is doing nothing useful, so a legitimate client is still served:
//! first one that has not completed a request (oldest first), then one
//! idle for longer than [`Limits::evict_idle`]. When none qualifies, the
//! newcomer is refused, and its server says so on the connection. A
//! connection that has not completed its first request within
//! [`Limits::first_request`] (a half-written line, or a client that
//! connects and says nothing) is closed by its server. One that has is
//! never closed for idleness alone (a controller holds its claim on a
//! switch through one connection, a manager may stay quiet for minutes),
//! only evicted under pressure after [`Limits::evict_idle`].

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The bounds of one endpoint.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max: usize,
    /// A connection that has not completed a request this long after it
    /// opened is closed.
    pub first_request: Duration,
    /// Under pressure, an established connection idle this long may be
    /// closed to admit a new one.
    pub evict_idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max: 64,
            first_request: Duration::from_secs(10),
            evict_idle: Duration::from_secs(60),
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// A handle to shut the connection down with when it is evicted.
    stream: TcpStream,
    opened: Instant,
    /// When its last request completed, if one has.
    last_request: Option<Instant>,
}

/// The open connections of one endpoint.
#[derive(Debug)]
pub struct Conns {
    limits: Limits,
    table: Mutex<(u64, HashMap<u64, Entry>)>,
}

/// One admitted connection; dropping it frees its place.
#[derive(Debug)]
pub struct Conn {
    id: u64,
    conns: Arc<Conns>,
}

impl Conns {
    /// An empty table with these bounds.
    pub fn new(limits: Limits) -> Arc<Conns> {
        Arc::new(Conns {
            limits,
            table: Mutex::new((0, HashMap::new())),
        })
    }

    fn table(&self) -> MutexGuard<'_, (u64, HashMap<u64, Entry>)> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.table().1.len()
    }

    /// Admits `stream`, evicting a useless connection if the table is full;
    /// `None` when every place is held by a connection at work.
    pub fn admit(self: &Arc<Self>, stream: &TcpStream) -> Option<Conn> {
        let handle = stream.try_clone().ok()?;
        let now = Instant::now();
        let mut table = self.table();
        if table.1.len() >= self.limits.max {
            let victim = self.victim(&table.1, now)?;
            if let Some(entry) = table.1.remove(&victim) {
                let _ = entry.stream.shutdown(Shutdown::Both);
            }
        }
        let id = table.0;
        table.0 += 1;
        table.1.insert(
            id,
            Entry {
                stream: handle,
                opened: now,
                last_request: None,
            },
        );
        Some(Conn {
            id,
            conns: self.clone(),
        })
    }

    /// The connection to close for a newcomer: the oldest that never
    /// completed a request, else the longest idle past `evict_idle`.
    fn victim(&self, open: &HashMap<u64, Entry>, now: Instant) -> Option<u64> {
        let silent = open
            .iter()
            .filter(|(_, e)| e.last_request.is_none())
            .min_by_key(|(_, e)| e.opened)
            .map(|(&id, _)| id);
        silent.or_else(|| {
            open.iter()
                .filter_map(|(&id, e)| e.last_request.map(|t| (id, t)))
                .filter(|&(_, t)| now.duration_since(t) >= self.limits.evict_idle)
                .min_by_key(|&(_, t)| t)
                .map(|(id, _)| id)
        })
    }
}

impl Conn {
    /// A request was completed on this connection.
    pub fn completed(&self) {
        if let Some(e) = self.conns.table().1.get_mut(&self.id) {
            e.last_request = Some(Instant::now());
        }
    }

    /// Whether the connection has taken too long to complete a request
    /// (or was evicted): its server should close it.
    pub fn expired(&self) -> bool {
        let table = self.conns.table();
        match table.1.get(&self.id) {
            None => true,
            Some(e) => {
                e.last_request.is_none() && e.opened.elapsed() > self.conns.limits.first_request
            }
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        self.conns.table().1.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    #[test]
    fn a_full_table_evicts_silent_connections_first_then_refuses() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conns = Conns::new(Limits {
            max: 2,
            first_request: Duration::from_secs(10),
            evict_idle: Duration::from_secs(3600),
        });
        let (_c1, s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let a = conns.admit(&s1).unwrap();
        let b = conns.admit(&s2).unwrap();
        a.completed();
        b.completed();
        // Both at work: a third is refused.
        let (_c3, s3) = pair(&listener);
        assert!(conns.admit(&s3).is_none());
        assert_eq!(conns.open(), 2);
        // b's place freed; a silent newcomer takes it, and is the first
        // evicted for the next.
        drop(b);
        let c = conns.admit(&s3).unwrap();
        let (_c4, s4) = pair(&listener);
        let d = conns.admit(&s4).unwrap();
        assert!(c.expired(), "the silent connection was evicted");
        assert!(!a.expired() && !d.expired());
        drop((a, c, d));
        assert_eq!(conns.open(), 0);
    }

    #[test]
    fn a_connection_that_completes_no_request_in_time_expires() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conns = Conns::new(Limits {
            max: 4,
            first_request: Duration::from_millis(20),
            evict_idle: Duration::from_secs(3600),
        });
        let (_c1, s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let silent = conns.admit(&s1).unwrap();
        let working = conns.admit(&s2).unwrap();
        working.completed();
        std::thread::sleep(Duration::from_millis(40));
        assert!(silent.expired());
        assert!(
            !working.expired(),
            "established connections do not expire for idleness"
        );
    }

    #[test]
    fn under_pressure_a_long_idle_established_connection_gives_way() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conns = Conns::new(Limits {
            max: 1,
            first_request: Duration::from_secs(10),
            evict_idle: Duration::from_millis(20),
        });
        let (_c1, s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let old = conns.admit(&s1).unwrap();
        old.completed();
        assert!(conns.admit(&s2).is_none(), "not idle long enough yet");
        std::thread::sleep(Duration::from_millis(40));
        let new = conns.admit(&s2).unwrap();
        assert!(old.expired() && !new.expired());
    }
}
