//! Bounds on the TCP connections of a control endpoint (the emulator's,
//! the controller's): at most a fixed number open, each served by a thread
//! of its own, so that thousands of idle or half-written connections cannot
//! take thousands of threads, and strangers cannot lock out the clients
//! that hold the endpoint's credentials.
//!
//! A connection is a *stranger* until its server trusts it
//! ([`Conn::trust`]: it presented the endpoint's token, or the endpoint
//! has none and it completed a request). Strangers have a quota of their
//! own ([`Limits::strangers`], and [`Limits::per_address`] from one
//! source address), are the first to give way to a newcomer (the oldest
//! first), and are closed by their server once [`Limits::first_request`]
//! has passed without being trusted, whatever they sent meanwhile. So a
//! flood of connections that never authenticate holds at most
//! `strangers` places, and a client with the token always finds one.
//!
//! A stranger is safe from eviction until its first request has been
//! read, or its server has been reading it for [`Limits::grace`]
//! ([`Conn::started`]) and holds nothing it sent unread: long enough for a
//! client to send its credential and be read. Without it, a flood from the
//! client's own address (a NAT, a shared host) evicted the client's
//! connection before its first line was read. Neither the grace nor what
//! a client sent is counted against it while its server has not read
//! it: on a loaded machine a connection's thread may wait longer than any
//! grace to run, and a client that has spoken is owed a hearing. Strangers that
//! were heard (a request without the token, answered "unauthorized") give
//! way first. When every stranger's place is in its grace, a newcomer
//! waits ([`Admit::Wait`]): the accept loop keeps it, in arrival order,
//! until a place can be made.
//!
//! A wrong credential costs its connection (its server closes it) and
//! counts against its source address ([`Conn::wrong_credential`]): past
//! [`FREE_GUESSES`] wrong ones, each new connection from that address is
//! refused until a back-off has passed ([`Conns::backoff`]), one that
//! doubles with every further wrong guess up to [`MAX_BACKOFF`]. A client
//! that presents no credential at all is a stranger, not a guesser.
//!
//! A trusted connection is never closed for idleness alone (a controller
//! holds its claim on a switch through one connection, a manager may stay
//! quiet for minutes), only evicted under pressure after
//! [`Limits::evict_idle`]. When no connection can give way, the newcomer
//! is refused, and its server says so on the connection.

use std::collections::HashMap;
use std::net::{IpAddr, Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The bounds of one endpoint.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max: usize,
    /// Strangers (connections not trusted yet) open at once.
    pub strangers: usize,
    /// Strangers open at once from one source address.
    pub per_address: usize,
    /// A connection not trusted this long after it opened is closed.
    pub first_request: Duration,
    /// A stranger not heard yet is not evicted this soon after its server
    /// started reading it.
    pub grace: Duration,
    /// Under pressure, a trusted connection idle this long may be closed
    /// to admit a new one.
    pub evict_idle: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max: 64,
            strangers: 32,
            per_address: 16,
            first_request: Duration::from_secs(10),
            grace: Duration::from_millis(250),
            evict_idle: Duration::from_secs(60),
        }
    }
}

#[derive(Debug)]
struct Entry {
    /// A handle to shut the connection down with when it is evicted.
    stream: TcpStream,
    /// Its peer's address (strangers are counted per address).
    from: Option<IpAddr>,
    opened: Instant,
    /// When its server started reading it ([`Conn::started`]).
    started: Option<Instant>,
    /// When its last request completed, if one has.
    last_request: Option<Instant>,
    /// Whether its server holds a request it has read and not answered
    /// yet (a token being checked): not evictable meanwhile.
    in_hand: bool,
    /// Whether its server trusts it ([`Conn::trust`]).
    trusted: bool,
}

impl Entry {
    /// Whether it is a stranger of `from` (of any address when `None`).
    fn stranger_of(&self, from: Option<IpAddr>) -> bool {
        !self.trusted && (from.is_none() || self.from == from)
    }

    /// Whether it may give way to a newcomer, as far as the table tells: a
    /// stranger with no request in hand, heard already or read for its
    /// grace. One not heard must also hold nothing unread ([`unread`], a
    /// system call, asked last).
    fn may_give_way(&self, now: Instant, grace: Duration) -> bool {
        let waited = |s: Instant| now.saturating_duration_since(s) >= grace;
        !self.trusted
            && !self.in_hand
            && (self.last_request.is_some() || self.started.is_some_and(waited))
    }
}

/// Whether bytes the peer sent wait on `stream`, unread by its server.
fn unread(stream: &TcpStream) -> bool {
    use std::os::fd::AsRawFd;
    let mut byte = 0u8;
    // SAFETY: a one-byte peek into a local on a socket `stream` keeps open.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            (&mut byte as *mut u8).cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    n > 0
}

/// What [`Conns::admit`] decided.
#[derive(Debug)]
pub enum Admit {
    /// Admitted: its place.
    In(Conn),
    /// No place can be made now, but one will (strangers in their grace):
    /// try again shortly, in arrival order.
    Wait,
    /// Every place is held by a trusted connection at work: refuse it.
    Busy,
}

impl Admit {
    /// The place, if admitted.
    pub fn into_conn(self) -> Option<Conn> {
        match self {
            Admit::In(conn) => Some(conn),
            Admit::Wait | Admit::Busy => None,
        }
    }
}

/// The open connections of one endpoint.
pub struct Conns {
    limits: Limits,
    table: Mutex<(u64, HashMap<u64, Entry>)>,
    guesses: Mutex<Guesses>,
    /// The time now: `Instant::now`, or a test's virtual clock.
    clock: Clock,
}

/// Where [`Conns`] reads the time.
pub type Clock = Box<dyn Fn() -> Instant + Send + Sync>;

impl std::fmt::Debug for Conns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns")
            .field("limits", &self.limits)
            .field("open", &self.open())
            .finish_non_exhaustive()
    }
}

/// Wrong credentials an address may give before it backs off (typos).
pub const FREE_GUESSES: u32 = 5;
/// The first back-off; each further wrong guess doubles it.
pub const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest back-off.
pub const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// An address whose last wrong guess is this old starts afresh.
pub const FORGET: Duration = Duration::from_secs(600);
/// Addresses remembered at most (the one guessed longest ago goes first),
/// so a spread of sources cannot grow the table without bound.
pub const MAX_ADDRESSES: usize = 4096;

/// Wrong credentials by source address: how many, and the last one's time.
#[derive(Debug, Default)]
pub struct Guesses {
    by: HashMap<IpAddr, (u32, Instant)>,
}

impl Guesses {
    /// Counts a wrong credential from `from` at `now`.
    pub fn wrong(&mut self, from: IpAddr, now: Instant) {
        let entry = self.by.entry(from).or_insert((0, now));
        if now.saturating_duration_since(entry.1) > FORGET {
            entry.0 = 0;
        }
        entry.0 = entry.0.saturating_add(1);
        entry.1 = now;
        if self.by.len() > MAX_ADDRESSES {
            let oldest = self.by.iter().min_by_key(|(_, e)| e.1).map(|(&a, _)| a);
            if let Some(a) = oldest {
                self.by.remove(&a);
            }
        }
    }

    /// How long `from` must still wait at `now` before it is read again.
    pub fn wait(&self, from: IpAddr, now: Instant) -> Option<Duration> {
        let &(count, last) = self.by.get(&from)?;
        if count <= FREE_GUESSES || now.saturating_duration_since(last) > FORGET {
            return None;
        }
        let doublings = (count - FREE_GUESSES - 1).min(16);
        let backoff = (FIRST_BACKOFF * (1 << doublings)).min(MAX_BACKOFF);
        let until = last + backoff;
        (until > now).then(|| until - now)
    }
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
        Conns::with_clock(limits, Box::new(Instant::now))
    }

    /// An empty table that reads the time from `clock` (tests drive the
    /// grace and the deadlines in virtual time).
    pub fn with_clock(limits: Limits, clock: Clock) -> Arc<Conns> {
        Arc::new(Conns {
            limits,
            table: Mutex::new((0, HashMap::new())),
            guesses: Mutex::new(Guesses::default()),
            clock,
        })
    }

    fn table(&self) -> MutexGuard<'_, (u64, HashMap<u64, Entry>)> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How long a connection from `from` must wait before it is read: its
    /// address gave too many wrong credentials lately.
    pub fn backoff(&self, from: IpAddr) -> Option<Duration> {
        let guesses = self.guesses.lock().unwrap_or_else(|p| p.into_inner());
        guesses.wait(from, (self.clock)())
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.table().1.len()
    }

    /// Admits `stream` as a stranger, making room by closing a stranger
    /// of its address (when that address is at its quota) or of all (at
    /// the strangers' quota), then a useless connection if the table is
    /// full; the stranger closed is one heard already if any, else the
    /// oldest past its grace ([`Limits::grace`]). [`Admit::Wait`] when only
    /// strangers in their grace could make room, [`Admit::Busy`] when every
    /// place is held by a trusted connection at work.
    pub fn admit(self: &Arc<Self>, stream: &TcpStream) -> Admit {
        let Ok(handle) = stream.try_clone() else {
            return Admit::Busy;
        };
        let from = stream.peer_addr().ok().map(|a| a.ip());
        let now = (self.clock)();
        let mut table = self.table();
        let open = &mut table.1;
        let grace = self.limits.grace;
        let count = |from| open.values().filter(|e| e.stranger_of(from)).count();
        let (mine, all) = (count(from), count(None));
        // Strangers in their grace will be heard, or evictable, soon.
        let victim = if from.is_some() && mine >= self.limits.per_address {
            match victim(open, from, now, grace) {
                Some(v) => Some(v),
                None => return Admit::Wait,
            }
        } else if all >= self.limits.strangers {
            match victim(open, None, now, grace) {
                Some(v) => Some(v),
                None => return Admit::Wait,
            }
        } else if open.len() >= self.limits.max {
            match victim(open, None, now, grace).or_else(|| self.idle(open, now)) {
                Some(v) => Some(v),
                None if all > 0 => return Admit::Wait,
                None => return Admit::Busy,
            }
        } else {
            None
        };
        if let Some(entry) = victim.and_then(|id| open.remove(&id)) {
            let _ = entry.stream.shutdown(Shutdown::Both);
        }
        let id = table.0;
        table.0 += 1;
        table.1.insert(
            id,
            Entry {
                stream: handle,
                from,
                opened: now,
                started: None,
                last_request: None,
                in_hand: false,
                trusted: false,
            },
        );
        Admit::In(Conn {
            id,
            conns: self.clone(),
        })
    }

    /// The trusted connection idle longest past `evict_idle`, if any.
    fn idle(&self, open: &HashMap<u64, Entry>, now: Instant) -> Option<u64> {
        open.iter()
            .filter(|(_, e)| e.trusted)
            .map(|(&id, e)| (id, e.last_request.unwrap_or(e.opened)))
            .filter(|&(_, t)| now.duration_since(t) >= self.limits.evict_idle)
            .min_by_key(|&(_, t)| t)
            .map(|(id, _)| id)
    }
}

/// The stranger (of `from`, or of any address) to give way: heard
/// already before not, then the oldest. Looked for only when a place must
/// be made, and the sockets peeked at in that order until one may go: a
/// flood's admissions must not cost a system call per stranger each.
fn victim(
    open: &HashMap<u64, Entry>,
    from: Option<IpAddr>,
    now: Instant,
    grace: Duration,
) -> Option<u64> {
    let mut candidates: Vec<(bool, Instant, u64, &Entry)> = open
        .iter()
        .filter(|(_, e)| e.stranger_of(from) && e.may_give_way(now, grace))
        .map(|(&id, e)| (e.last_request.is_none(), e.opened, id, e))
        .collect();
    candidates.sort_unstable_by_key(|&(unheard, opened, id, _)| (unheard, opened, id));
    candidates
        .into_iter()
        .find(|&(unheard, _, _, e)| !unheard || !unread(&e.stream))
        .map(|(_, _, id, _)| id)
}

impl Conn {
    /// Its server has started reading it: its grace runs from now.
    pub fn started(&self) {
        if let Some(e) = self.conns.table().1.get_mut(&self.id) {
            e.started = Some((self.conns.clock)());
        }
    }

    /// Its server has read a request and is answering it: the connection
    /// keeps its place until [`Conn::completed`] (a stranger evicted in
    /// between, its token being checked, would lose a request it was owed
    /// an answer to).
    pub fn received(&self) {
        if let Some(e) = self.conns.table().1.get_mut(&self.id) {
            e.in_hand = true;
        }
    }

    /// A request was answered on this connection.
    pub fn completed(&self) {
        if let Some(e) = self.conns.table().1.get_mut(&self.id) {
            e.last_request = Some((self.conns.clock)());
            e.in_hand = false;
        }
    }

    /// The server trusts this connection: it presented the endpoint's
    /// credentials (or the endpoint asks for none). It leaves the
    /// strangers' quota and is no longer closed for not trusting.
    pub fn trust(&self) {
        if let Some(e) = self.conns.table().1.get_mut(&self.id) {
            e.trusted = true;
        }
    }

    /// The connection presented a wrong credential (its server closes it):
    /// counted against its source address.
    pub fn wrong_credential(&self) {
        let from = self.conns.table().1.get(&self.id).and_then(|e| e.from);
        if let Some(from) = from {
            let mut guesses = self.conns.guesses.lock().unwrap_or_else(|p| p.into_inner());
            guesses.wrong(from, (self.conns.clock)());
        }
    }

    /// Whether the connection has stayed a stranger too long (or was
    /// evicted): its server should close it.
    pub fn expired(&self) -> bool {
        let now = (self.conns.clock)();
        let table = self.conns.table();
        match table.1.get(&self.id) {
            None => true,
            Some(e) => {
                !e.trusted
                    && now.saturating_duration_since(e.opened) > self.conns.limits.first_request
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

    /// Five wrong guesses are free; then each connection waits a back-off
    /// that doubles per guess up to a minute; ten minutes without a wrong
    /// guess forgets the address. In virtual time.
    #[test]
    fn wrong_guesses_back_off_per_address_and_are_forgotten() {
        let t0 = Instant::now();
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut g = Guesses::default();
        for _ in 0..FREE_GUESSES {
            g.wrong(a, t0);
        }
        assert_eq!(g.wait(a, t0), None, "typos are free");
        g.wrong(a, t0);
        assert_eq!(g.wait(a, t0), Some(FIRST_BACKOFF));
        assert_eq!(g.wait(b, t0), None, "per address");
        assert_eq!(g.wait(a, t0 + FIRST_BACKOFF), None, "waited out");
        g.wrong(a, t0);
        assert_eq!(g.wait(a, t0), Some(2 * FIRST_BACKOFF));
        for _ in 0..20 {
            g.wrong(a, t0);
        }
        assert_eq!(g.wait(a, t0), Some(MAX_BACKOFF));
        let later = t0 + FORGET + Duration::from_secs(1);
        assert_eq!(g.wait(a, later), None);
        g.wrong(a, later);
        assert_eq!(g.wait(a, later), None, "forgotten: one guess of five");
        for i in 0..(MAX_ADDRESSES as u32 + 10) {
            g.wrong(IpAddr::from(i.to_be_bytes()), t0);
        }
        assert!(g.by.len() <= MAX_ADDRESSES);
    }
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A virtual clock the tests move by hand.
    #[derive(Clone)]
    struct Virtual(Arc<(Instant, std::sync::atomic::AtomicU64)>);

    impl Virtual {
        fn new() -> Virtual {
            Virtual(Arc::new((Instant::now(), 0.into())))
        }
        fn advance(&self, by: Duration) {
            let ms = by.as_millis() as u64;
            self.0
                 .1
                .fetch_add(ms, std::sync::atomic::Ordering::Relaxed);
        }
        fn conns(&self, limits: Limits) -> Arc<Conns> {
            let v = self.clone();
            Conns::with_clock(
                limits,
                Box::new(move || {
                    let ms = v.0 .1.load(std::sync::atomic::Ordering::Relaxed);
                    v.0 .0 + Duration::from_millis(ms)
                }),
            )
        }
    }

    /// Admits `stream` and starts serving it, as `lines::serve` does.
    fn serve(conns: &Arc<Conns>, stream: &TcpStream) -> Conn {
        let conn = conns.admit(stream).into_conn().expect("admitted");
        conn.started();
        conn
    }

    fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    fn limits(max: usize, strangers: usize, per_address: usize) -> Limits {
        Limits {
            max,
            strangers,
            per_address,
            first_request: Duration::from_secs(10),
            // No grace: these tests are about the order of eviction.
            grace: Duration::ZERO,
            evict_idle: Duration::from_secs(3600),
        }
    }

    #[test]
    fn a_full_table_evicts_strangers_first_then_refuses() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conns = Virtual::new().conns(limits(2, 2, 2));
        let (_c1, s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let a = serve(&conns, &s1);
        let b = serve(&conns, &s2);
        a.trust();
        b.trust();
        // Both trusted and at work: a third is refused.
        let (_c3, s3) = pair(&listener);
        assert!(matches!(conns.admit(&s3), Admit::Busy));
        assert_eq!(conns.open(), 2);
        // b's place freed; a stranger takes it, and is the first evicted
        // for the next.
        drop(b);
        let c = serve(&conns, &s3);
        let (_c4, s4) = pair(&listener);
        let d = serve(&conns, &s4);
        assert!(c.expired(), "the stranger was evicted");
        assert!(!a.expired() && !d.expired());
        drop((a, c, d));
        assert_eq!(conns.open(), 0);
    }

    /// Strangers that keep sending requests without presenting the token
    /// hold at most their quota, the oldest giving way: a client with the
    /// token always gets a place, and keeps it once trusted.
    #[test]
    fn strangers_cannot_lock_out_trusted_clients() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let conns = Virtual::new().conns(limits(8, 4, 3));
        let mut flood = Vec::new();
        for _ in 0..20 {
            let (c, s) = pair(&listener);
            let conn = serve(&conns, &s);
            conn.completed(); // an "unauthorized" request: still a stranger
            flood.push((c, conn));
        }
        let alive = flood.iter().filter(|(_, c)| !c.expired()).count();
        assert_eq!(alive, 3, "one address holds at most per_address strangers");
        let mut trusted = Vec::new();
        for _ in 0..5 {
            let (c, s) = pair(&listener);
            let conn = serve(&conns, &s);
            conn.trust();
            trusted.push((c, conn));
        }
        for _ in 0..20 {
            let (c, s) = pair(&listener);
            flood.push((c, serve(&conns, &s)));
        }
        assert!(trusted.iter().all(|(_, c)| !c.expired()));
        assert!(conns.open() <= 8);
    }

    #[test]
    fn a_connection_not_trusted_in_time_expires_whatever_it_sent() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let clock = Virtual::new();
        let conns = clock.conns(Limits {
            first_request: Duration::from_millis(20),
            ..limits(4, 4, 4)
        });
        let (_c1, s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let (_c3, s3) = pair(&listener);
        let silent = serve(&conns, &s1);
        let chatty = serve(&conns, &s2);
        let working = serve(&conns, &s3);
        chatty.completed();
        working.completed();
        working.trust();
        clock.advance(Duration::from_millis(20));
        assert!(!silent.expired() && !chatty.expired(), "not yet");
        clock.advance(Duration::from_millis(1));
        assert!(silent.expired());
        assert!(
            chatty.expired(),
            "requests without the token do not make it trusted"
        );
        assert!(
            !working.expired(),
            "trusted connections do not expire for idleness"
        );
    }

    #[test]
    fn under_pressure_a_long_idle_trusted_connection_gives_way() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let clock = Virtual::new();
        let conns = clock.conns(Limits {
            evict_idle: Duration::from_millis(20),
            ..limits(1, 1, 1)
        });
        let (_c1, s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let old = serve(&conns, &s1);
        old.completed();
        old.trust();
        clock.advance(Duration::from_millis(19));
        assert!(
            matches!(conns.admit(&s2), Admit::Busy),
            "not idle long enough yet"
        );
        clock.advance(Duration::from_millis(1));
        let new = serve(&conns, &s2);
        assert!(old.expired() && !new.expired());
    }

    /// A stranger not heard yet keeps its place for its grace, counted
    /// from when its server started reading it, so a flood from its own
    /// address cannot evict it before its first line is read, however
    /// late its thread runs: newcomers wait. One heard already (refused)
    /// gives way first.
    #[test]
    fn a_stranger_is_not_evicted_before_it_could_be_heard() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let clock = Virtual::new();
        let conns = clock.conns(Limits {
            grace: Duration::from_millis(50),
            ..limits(8, 2, 2)
        });
        let (_c1, s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let (_c3, s3) = pair(&listener);
        let holder = conns.admit(&s1).into_conn().unwrap();
        let flood = serve(&conns, &s2);
        // The holder's thread has not run yet: however long that takes,
        // its grace has not begun.
        clock.advance(Duration::from_secs(5));
        holder.started();
        flood.started();
        assert!(
            matches!(conns.admit(&s3), Admit::Wait),
            "both in their grace"
        );
        flood.received();
        flood.completed(); // answered, and still a stranger: it goes first
        let next = serve(&conns, &s3);
        assert!(flood.expired() && !holder.expired());
        holder.trust();
        let (_c4, s4) = pair(&listener);
        let (_c5, s5) = pair(&listener);
        let fourth = serve(&conns, &s4);
        clock.advance(Duration::from_millis(49));
        assert!(
            matches!(conns.admit(&s5), Admit::Wait),
            "two strangers in their grace"
        );
        clock.advance(Duration::from_millis(1));
        let _fifth = serve(&conns, &s5);
        assert!(
            next.expired(),
            "past its grace, unheard, oldest: it gives way"
        );
        assert!(!fourth.expired());
        assert!(!holder.expired(), "trusted");
    }

    /// A stranger whose line waits unread (its server's thread has not
    /// run to read it), or is read and being answered, keeps its place
    /// past its grace; once answered, and still a stranger, it gives way.
    #[test]
    fn a_stranger_that_spoke_is_heard_before_it_is_evicted() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let clock = Virtual::new();
        let conns = clock.conns(Limits {
            grace: Duration::from_millis(50),
            ..limits(8, 1, 1)
        });
        let (mut c1, s1) = pair(&listener);
        let (_c2, s2) = pair(&listener);
        let spoke = serve(&conns, &s1);
        c1.write_all(b"{\"authenticate\":\"...\"}\n").unwrap();
        clock.advance(Duration::from_secs(5));
        let deadline = Instant::now() + Duration::from_secs(10);
        while !unread(&s1) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            matches!(conns.admit(&s2), Admit::Wait),
            "its line is unread"
        );
        let mut line = [0u8; 64];
        let _ = (&s1).read(&mut line).unwrap();
        assert!(!unread(&s1));
        spoke.received();
        assert!(
            matches!(conns.admit(&s2), Admit::Wait),
            "read, and its answer not given yet (its token being checked)"
        );
        spoke.completed();
        let _next = serve(&conns, &s2);
        assert!(spoke.expired(), "answered, still a stranger: it gives way");
    }
}
