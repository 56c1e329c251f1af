//! SELMCAST on the stack: a manager that picks each sender's receivers
//! every round with [`inagg_sched::selmcast`] and installs
//! them as the switch's multicast groups, and the peers that multicast
//! their updates through those groups (docs/PAPERS.md, "SELMCAST").
//!
//! One BSP round:
//! 1. Every peer tells the manager it is ready, with its port bandwidths
//!    (bytes/s: `uplink` is what it can send, the paper's b^I; `downlink`
//!    what it can receive, b^E) and its update's length.
//! 2. With all n ready, the manager runs the selector (Algorithm 1, or the
//!    Orpheus baseline) with the consistency rule's forced pairs, replaces
//!    last round's groups with one group per sender (member 0 the sender,
//!    then its receivers), and sends every peer its plan: the group to send
//!    through and the senders to expect.
//! 3. Each sender multicasts its update once (float bits in int32 group
//!    datagrams, the chunk index as packet id): the switch copies each
//!    datagram to the receivers, the L3 multicast the policy assumes.
//! 4. Group datagrams are best effort. A receiver reports each sender as
//!    complete, or, after `repair_after` without a datagram from it, the
//!    chunks it lacks; the manager forwards those to the sender, which multicasts
//!    them again (the other receivers ignore the duplicates). When every
//!    selected pair is complete the manager ends the round.
//!
//! A peer that leaves ends the run: a BSP round needs all n, so the others
//! get an error naming it rather than waiting.

use inagg_netio::stream::Stream;
use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossbeam_channel::{Receiver, RecvTimeoutError};
use inagg_host_agent::group::GroupSocket;
use inagg_sched::selmcast::{orpheus, selmcast_bsp, History, Multicast, Round, Selection};
use inagg_switch_api::GroupSpec;
use inagg_switch_control::target::Target;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::lines::{self, Client, Event};
use crate::report::error_text;

pub(crate) mod inbox;

use inbox::{check_chunks, chunks, packet_id, Inbox};

/// Who picks the receivers.
#[derive(Debug, Clone, Copy)]
pub enum Selector {
    /// Algorithm 1: the lightest-loaded receivers, then the Pareto step.
    Selmcast,
    /// The baseline: random receivers, honouring k.
    Orpheus {
        /// Seed of the random choice.
        seed: u64,
    },
}

/// The manager's knobs.
#[derive(Debug, Clone)]
pub struct ManagerConfig {
    /// Peers (n).
    pub workers: usize,
    /// Least receivers per sender.
    pub p: usize,
    /// Every pair is served at least once every k + 1 rounds.
    pub k: u32,
    /// The selector.
    pub selector: Selector,
    /// Sender i multicasts through group `first_group + i`.
    pub first_group: u16,
    /// Values per datagram.
    pub elements: u16,
}

impl ManagerConfig {
    fn check(&self) -> Result<()> {
        check_peers(self.workers, self.p, self.first_group, self.elements)
    }
}

/// The checks both managers' (BSP and SSP) configurations get: n, p, the
/// group ids (one per peer) and the values per datagram.
pub(crate) fn check_peers(workers: usize, p: usize, first_group: u16, elements: u16) -> Result<()> {
    if workers < 2 {
        bail!("{workers} peers: multicast needs at least 2");
    }
    if p == 0 || p >= workers {
        bail!("p = {p} receivers must be 1 to n - 1 = {}", workers - 1);
    }
    let last = usize::from(first_group) + workers - 1;
    if first_group == 0 || last > usize::from(u16::MAX) {
        bail!("group ids {first_group}..={last} must be 1 to 65535");
    }
    if elements == 0 || usize::from(elements) > inagg_wire::MAX_ELEMENTS {
        bail!(
            "{elements} values per datagram: 1 to {}",
            inagg_wire::MAX_ELEMENTS
        );
    }
    Ok(())
}

/// Fails when one of the peers' groups (`first_group`, one per peer) is
/// installed on the switch already.
pub(crate) fn check_groups_free(
    target: &mut dyn Target,
    first_group: u16,
    workers: usize,
) -> Result<()> {
    let ours = u32::from(first_group)..u32::from(first_group) + workers as u32;
    for g in target.groups().context("list the switch's groups")? {
        if ours.contains(&u32::from(g.id)) {
            bail!("group {} is in use; the peers need groups {ours:?}", g.id);
        }
    }
    Ok(())
}

/// A thread that turns the manager's reply lines into a channel, so a peer
/// can wait for a reply with a timeout or poll for one.
pub(crate) fn reply_reader<R>(mut reader: inagg_netio::lines::LineReader) -> Receiver<Result<R>>
where
    R: serde::de::DeserializeOwned + Send + 'static,
{
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || loop {
        let reply = lines::receive::<R>(&mut reader);
        let last = reply.is_err();
        if tx.send(reply).is_err() || last {
            return;
        }
    });
    rx
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Request {
    Ready {
        worker: usize,
        endpoint: SocketAddr,
        uplink: f64,
        downlink: f64,
        values: usize,
    },
    Got {
        round: u64,
        sender: usize,
        missing: Vec<u32>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Reply {
    Plan(Plan),
    Resend { round: u64, chunks: Vec<u32> },
    RoundDone { round: u64 },
    Error { message: String },
}

/// One peer's part in a round.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Round number.
    pub round: u64,
    /// The group this peer sends through (it is member 0).
    pub group: u16,
    /// Its receivers.
    pub receivers: Vec<usize>,
    /// The senders that selected it, with their groups.
    pub senders: Vec<(usize, u16)>,
    /// Values per datagram.
    pub elements: u16,
}

/// One round as the manager saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoundRecord {
    /// Round number.
    pub round: u64,
    /// Each sender's receivers.
    pub receivers: Vec<Vec<usize>>,
    /// Resend requests forwarded (lost datagrams being repaired).
    pub repairs: u64,
    /// From the plan to the last pair complete.
    pub time: Duration,
}

/// What the manager did, when stopped.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every finished round.
    pub rounds: Vec<RoundRecord>,
    /// Why the run broke off, if it did.
    pub broken: Option<String>,
}

/// The manager: a TCP endpoint for peers (`addr`) and a thread that
/// selects, installs groups and runs the rounds; `finish` stops it,
/// removes the groups, and returns the rounds run.
pub type Manager = lines::Server<Report>;

impl Manager {
    /// Checks the configuration and that its group ids are free, binds
    /// `bind` and starts.
    pub fn start(
        mut target: Box<dyn Target + Send>,
        bind: SocketAddr,
        config: ManagerConfig,
    ) -> Result<Manager> {
        config.check()?;
        check_groups_free(target.as_mut(), config.first_group, config.workers)?;
        let state = State::new(target, config);
        lines::Server::spawn(bind, move |rx, stop| state.run(rx, stop))
    }
}

struct ReadyPeer {
    conn: u64,
    endpoint: SocketAddr,
    uplink: f64,
    downlink: f64,
}

struct Running {
    pending: BTreeSet<(usize, usize)>,
    receivers: Vec<Vec<usize>>,
    repairs: u64,
    started: Instant,
}

struct State {
    target: Box<dyn Target + Send>,
    config: ManagerConfig,
    writers: lines::Writers,
    /// Worker id of each connection that has said who it is.
    ids: BTreeMap<u64, usize>,
    /// This round's ready peers.
    ready: BTreeMap<usize, ReadyPeer>,
    values: Option<usize>,
    round: u64,
    running: Option<Running>,
    history: History,
    rng: ChaCha8Rng,
    installed: Vec<u16>,
    /// Why the next round cannot run (a peer left, a plan failed).
    left: Option<String>,
    report: Report,
}

impl State {
    fn new(target: Box<dyn Target + Send>, config: ManagerConfig) -> State {
        let seed = match config.selector {
            Selector::Orpheus { seed } => seed,
            Selector::Selmcast => 0,
        };
        State {
            target,
            history: History::new(config.workers, config.k),
            rng: ChaCha8Rng::seed_from_u64(seed),
            config,
            writers: lines::Writers::default(),
            ids: BTreeMap::new(),
            ready: BTreeMap::new(),
            values: None,
            round: 0,
            running: None,
            installed: Vec::new(),
            left: None,
            report: Report::default(),
        }
    }

    fn run(mut self, rx: Receiver<Event<Request>>, stop: &AtomicBool) -> Report {
        lines::drive(&rx, stop, Duration::from_millis(50), |event| {
            if let Some(event) = event {
                self.handle(event);
            }
        });
        self.remove_groups();
        self.report
    }

    fn handle(&mut self, event: Event<Request>) {
        match event {
            Event::Opened { conn, writer } => {
                self.writers.open(conn, writer);
            }
            Event::Message { conn, request } => {
                let answer = match request {
                    Request::Ready {
                        worker,
                        endpoint,
                        uplink,
                        downlink,
                        values,
                    } => {
                        let peer = ReadyPeer {
                            conn,
                            endpoint,
                            uplink,
                            downlink,
                        };
                        self.ready(worker, peer, values)
                    }
                    Request::Got {
                        round,
                        sender,
                        missing,
                    } => self.got(conn, round, sender, missing),
                };
                if let Err(message) = answer {
                    self.writers.send(conn, &Reply::Error { message });
                }
            }
            Event::Closed { conn, why } => {
                self.writers.close(conn);
                if let Some(w) = self.ids.remove(&conn) {
                    self.left = Some(format!("peer {w} left ({why}); a BSP round needs all n"));
                    // Between rounds with nobody waiting, the run may be
                    // over; any later round breaks off.
                    if self.running.is_some() || !self.ready.is_empty() {
                        self.break_off();
                    }
                }
            }
        }
    }

    fn ready(&mut self, worker: usize, peer: ReadyPeer, values: usize) -> Result<(), String> {
        if let Some(why) = &self.report.broken {
            return Err(why.clone());
        }
        if self.left.is_some() {
            self.break_off();
            return Ok(()); // break_off told this peer too
        }
        let n = self.config.workers;
        if worker >= n {
            return Err(format!(
                "peer {worker}: this run has peers 0 to {}",
                n.saturating_sub(1)
            ));
        }
        if !(peer.uplink > 0.0 && peer.downlink > 0.0 && peer.uplink.is_finite()) {
            return Err("bandwidths must be positive bytes/s".into());
        }
        if values == 0 || self.values.is_some_and(|v| v != values) {
            return Err(format!(
                "an update of {values} values; the others' have {}",
                self.values.unwrap_or(0)
            ));
        }
        match self.ids.get(&peer.conn) {
            Some(&w) if w != worker => return Err(format!("this connection is peer {w}")),
            None if self.ids.values().any(|&w| w == worker) => {
                return Err(format!("peer {worker} is already connected"))
            }
            _ => {}
        }
        if self.running.is_some() || self.ready.contains_key(&worker) {
            return Err(format!(
                "peer {worker} is ready twice in round {}",
                self.round
            ));
        }
        self.ids.insert(peer.conn, worker);
        self.values = Some(values);
        self.ready.insert(worker, peer);
        if self.ready.len() == n {
            if let Err(e) = self.plan() {
                self.left = Some(format!("round {}: {}", self.round, error_text(&e)));
                self.break_off();
            }
        }
        Ok(())
    }

    /// Selects, installs the groups and sends the plans.
    fn plan(&mut self) -> Result<()> {
        let n = self.config.workers;
        let v = (self.values.unwrap_or(0) * 4) as f64;
        let mut round = Round::uniform(
            self.ready.values().map(|p| p.uplink).collect(),
            self.ready.values().map(|p| p.downlink).collect(),
            v,
            self.config.p,
            Multicast::L3,
        );
        round.forced = self.history.forced();
        round.since = self.history.since();
        let selection = match self.config.selector {
            Selector::Selmcast => selmcast_bsp(&round),
            Selector::Orpheus { .. } => orpheus(&round, &mut self.rng),
        };
        self.history.record(&selection);
        self.remove_groups();
        let receivers: Vec<Vec<usize>> = (0..n).map(|i| selection.receivers(i)).collect();
        for (i, r) in receivers.iter().enumerate() {
            let spec = GroupSpec {
                id: self.group_of(i),
                members: std::iter::once(i)
                    .chain(r.iter().copied())
                    .map(|w| self.ready[&w].endpoint)
                    .collect(),
            };
            self.target
                .create_group(&spec)
                .with_context(|| format!("install sender {i}'s group {}", spec.id))?;
            self.installed.push(spec.id);
        }
        for (w, mine) in receivers.iter().enumerate() {
            let plan = Plan {
                round: self.round,
                group: self.group_of(w),
                receivers: mine.clone(),
                senders: senders_of(&selection, w)
                    .into_iter()
                    .map(|s| (s, self.group_of(s)))
                    .collect(),
                elements: self.config.elements,
            };
            self.writers.send(self.ready[&w].conn, &Reply::Plan(plan));
        }
        self.running = Some(Running {
            pending: (0..n)
                .flat_map(|i| receivers[i].iter().map(move |&j| (i, j)))
                .collect(),
            receivers,
            repairs: 0,
            started: Instant::now(),
        });
        Ok(())
    }

    fn group_of(&self, worker: usize) -> u16 {
        self.config.first_group + worker as u16
    }

    fn got(
        &mut self,
        conn: u64,
        round: u64,
        sender: usize,
        missing: Vec<u32>,
    ) -> Result<(), String> {
        let receiver = *self.ids.get(&conn).ok_or("say ready first")?;
        let Some(run) = self.running.as_mut().filter(|_| round == self.round) else {
            return Ok(()); // a late report of a finished round
        };
        if !run.pending.contains(&(sender, receiver)) {
            return Ok(()); // complete already, or not selected
        }
        if missing.is_empty() {
            run.pending.remove(&(sender, receiver));
            if run.pending.is_empty() {
                self.end_round();
            }
            return Ok(());
        }
        run.repairs += 1;
        let to = self.ready[&sender].conn;
        self.writers.send(
            to,
            &Reply::Resend {
                round,
                chunks: missing,
            },
        );
        Ok(())
    }

    fn end_round(&mut self) {
        let Some(run) = self.running.take() else {
            return;
        };
        self.report.rounds.push(RoundRecord {
            round: self.round,
            receivers: run.receivers,
            repairs: run.repairs,
            time: run.started.elapsed(),
        });
        let conns: Vec<u64> = self.ready.values().map(|p| p.conn).collect();
        for conn in conns {
            self.writers
                .send(conn, &Reply::RoundDone { round: self.round });
        }
        self.ready.clear();
        self.round += 1;
    }

    /// Ends the run: every peer is told why (`left`).
    fn break_off(&mut self) {
        let why = self.left.clone().unwrap_or_default();
        tracing::warn!(%why, "SELMCAST run broken off");
        self.report.broken = Some(why.clone());
        self.running = None;
        self.ready.clear();
        let conns = self.writers.conns();
        for conn in conns {
            self.writers.send(
                conn,
                &Reply::Error {
                    message: why.clone(),
                },
            );
        }
    }

    fn remove_groups(&mut self) {
        for g in std::mem::take(&mut self.installed) {
            if let Err(e) = self.target.delete_group(g) {
                tracing::warn!(group = g, error = %e, "remove a sender's group");
            }
        }
    }
}

fn senders_of(selection: &Selection, receiver: usize) -> Vec<usize> {
    (0..selection.x.len())
        .filter(|&i| selection.x[i][receiver])
        .collect()
}

/// What one peer got out of a round.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    /// The round's plan for this peer.
    pub plan: Plan,
    /// Each sender's update, bit for bit.
    pub received: BTreeMap<usize, Vec<f32>>,
    /// Datagrams this peer sent again on request.
    pub resent: u64,
}

/// How a peer waits and repairs.
#[derive(Debug, Clone, Copy)]
pub struct PeerTimers {
    /// Longest wait for a plan (the others may still be computing).
    pub plan_wait: Duration,
    /// Ask for a sender's missing chunks after this long without a
    /// datagram from it.
    pub repair_after: Duration,
    /// Give up a round after this long without any progress.
    pub give_up: Duration,
}

impl Default for PeerTimers {
    fn default() -> Self {
        PeerTimers {
            plan_wait: Duration::from_secs(60),
            repair_after: Duration::from_millis(30),
            give_up: Duration::from_secs(10),
        }
    }
}

/// A peer: its group socket and its connection to the manager.
pub struct Peer {
    id: usize,
    uplink: f64,
    downlink: f64,
    socket: GroupSocket,
    manager: Stream,
    replies: Receiver<Result<Reply>>,
    timers: PeerTimers,
}

impl Peer {
    /// Peer `id`, binding `bind` for group datagrams through `switch`.
    pub fn connect(
        manager: SocketAddr,
        switch: SocketAddr,
        bind: SocketAddr,
        (id, uplink, downlink): (usize, f64, f64),
        timers: PeerTimers,
    ) -> Result<Peer> {
        let socket = GroupSocket::bind(bind, switch, 0, 0)
            .with_context(|| format!("peer {id}: bind {bind}"))?;
        let (reader, writer) = Client::connect(manager, timers.plan_wait)?.into_parts();
        reader.get_ref().set_read_timeout(None)?;
        let replies = reply_reader(reader);
        Ok(Peer {
            id,
            uplink,
            downlink,
            socket,
            manager: writer,
            replies,
            timers,
        })
    }

    /// One round: multicasts `update` to the receivers the manager picks
    /// and returns what the senders that picked this peer sent.
    pub fn exchange(&mut self, update: &[f32]) -> Result<Exchange> {
        self.tell(&Request::Ready {
            worker: self.id,
            endpoint: self.socket.local_addr()?,
            uplink: self.uplink,
            downlink: self.downlink,
            values: update.len(),
        })?;
        let plan = match self.next_reply(self.timers.plan_wait)? {
            Some(Reply::Plan(plan)) => plan,
            Some(other) => bail!("peer {}: expected a plan, got {other:?}", self.id),
            None => bail!(
                "peer {}: no plan within {:?}",
                self.id,
                self.timers.plan_wait
            ),
        };
        self.socket.set_group(plan.group, 0);
        check_chunks(update.len(), plan.elements)?;
        let chunks = chunks(update, plan.elements);
        if !plan.receivers.is_empty() {
            for (c, chunk) in chunks.iter().enumerate() {
                self.socket.send(chunk, packet_id(plan.round, c), 0)?;
            }
        }
        let mut inbox = Inbox::new(plan.elements, update.len());
        for &(sender, group) in &plan.senders {
            inbox.expect(sender, plan.round, group);
        }
        let resent = self.run_round(&plan, &chunks, &mut inbox)?;
        Ok(Exchange {
            received: inbox.into_updates(),
            plan,
            resent,
        })
    }

    /// Receives, reports and repairs until the manager ends the round.
    fn run_round(&mut self, plan: &Plan, chunks: &[Vec<i32>], inbox: &mut Inbox) -> Result<u64> {
        let mut resent = 0;
        let mut progress = Instant::now();
        loop {
            while let Some(reply) = self.next_reply(Duration::ZERO)? {
                progress = Instant::now();
                match reply {
                    Reply::RoundDone { round } if round == plan.round => return Ok(resent),
                    Reply::Resend { round, chunks: ids } if round == plan.round => {
                        for id in ids {
                            if let Some(c) = chunks.get(id as usize) {
                                self.socket.send(c, packet_id(plan.round, id as usize), 0)?;
                                resent += 1;
                            }
                        }
                    }
                    _ => {}
                }
            }
            if let Some(d) = self.socket.recv_any(Duration::from_millis(2))? {
                if inbox.take(d.group, d.packet_id, &d.values) {
                    progress = Instant::now();
                }
            }
            for due in inbox.reports(self.timers.repair_after) {
                self.tell(&Request::Got {
                    round: plan.round,
                    sender: due.sender,
                    missing: due.missing,
                })?;
            }
            if progress.elapsed() > self.timers.give_up {
                bail!(
                    "peer {} round {}: no progress for {:?} (still missing from senders {:?})",
                    self.id,
                    plan.round,
                    self.timers.give_up,
                    inbox.incomplete()
                );
            }
        }
    }

    fn tell(&mut self, request: &Request) -> Result<()> {
        lines::send(&mut self.manager, request).context("write to the manager")
    }

    /// The next reply, waiting up to `wait`; `None` when none came. An
    /// error reply or a lost manager is an error.
    fn next_reply(&mut self, wait: Duration) -> Result<Option<Reply>> {
        match self.replies.recv_timeout(wait) {
            Ok(Ok(Reply::Error { message })) => bail!("peer {}: {message}", self.id),
            Ok(Ok(reply)) => Ok(Some(reply)),
            Ok(Err(e)) => Err(e.context(format!("peer {}", self.id))),
            Err(RecvTimeoutError::Timeout) => Ok(None),
            Err(RecvTimeoutError::Disconnected) => bail!("peer {}: the manager is gone", self.id),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        // The reader thread holds the connection's other handle: shut the
        // socket itself down so that the manager sees this peer leave.
        let _ = self.manager.shutdown(std::net::Shutdown::Both);
    }
}
