//! SELMCAST for SSP training, live (Algorithm 2; docs/PAPERS.md,
//! "SELMCAST for SSP"): peers multicast their updates whenever they are
//! ready, each at its own pace, and a manager admits each update as a task
//! with [`inagg_sched::selmcast_ssp::Online`], the code the
//! simulator runs.
//!
//! One task (sender i, its round r):
//! 1. The peer has computed round r and says it is ready. The manager
//!    admits it once r is at most `ssp` rounds ahead of the slowest peer's
//!    completed rounds (else it waits, blocked, until the slowest catches
//!    up).
//! 2. Admission runs Algorithm 2 over every running task with each
//!    receiver's progress (the peers report the chunks they hold). It may
//!    **preempt**: a running task loses receivers that have little of its
//!    update (less than 1 - eta of it) and are not forced by the k rule.
//!    The manager rewrites that sender's multicast group on the switch
//!    without them, so the switch stops copying to them, and tells each one
//!    to stop waiting; the sender goes on unchanged. A dropped receiver
//!    is never re-selected for that task.
//! 3. The new task's group is installed (the sender, then its receivers),
//!    the receivers are told to expect it, and the sender multicasts its
//!    chunks through it, paced at the uplink it declared, stamped with its
//!    task's priority class (7 for the first task in Algorithm 2's order L,
//!    one less for each next, 0 from the eighth on; the manager updates a
//!    running task's class when the order changes).
//! 4. Receivers report complete, or the chunks they lack after a quiet
//!    spell (forwarded to the sender, which multicasts them again). The
//!    task ends when every receiver still in it is complete: the sender is
//!    told which receivers it reached, and its round counts as completed.
//!
//! Orpheus (the baseline) admits the same way but picks forced plus random
//! receivers and never touches running tasks.
//!
//! tau_i, the time sender i would still wait for the SSP bound if its task
//! ended now, is estimated as the simulator's controller does without the
//! traces: for each round of the gap to the bound, one mean interval
//! between a peer's successive readies.
//!
//! A peer that leaves before every peer has finished ends the run: the
//! bound and the tasks that target it need all n.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use crossbeam_channel::{Receiver, Sender};
use inagg_host_agent::group::{GroupDatagram, GroupSocket};
use inagg_sched::selmcast::Multicast;
use inagg_sched::selmcast_ssp::{Online, SenderHistory, Task};
use inagg_switch_api::GroupSpec;
use inagg_switch_control::target::Target;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::lines::{self, Client, Event};
use crate::report::error_text;
use crate::selmcast::inbox::{check_chunks, chunks, packet_id, Inbox};
use crate::selmcast::{check_groups_free, check_peers, reply_reader, Selector};

/// The SSP manager's knobs.
#[derive(Debug, Clone)]
pub struct SspConfig {
    /// Peers (n).
    pub workers: usize,
    /// Least receivers per task (p).
    pub p: usize,
    /// Every sender reaches every peer at least once in any k + 1 of its
    /// rounds.
    pub k: u32,
    /// A peer's update is admitted at most `ssp` rounds ahead of the
    /// slowest peer's completed rounds.
    pub ssp: u64,
    /// A receiver lacking less than `eta` of a running task's update is
    /// never preempted.
    pub eta: f64,
    /// The selector.
    pub selector: Selector,
    /// Sender i multicasts through group `first_group + i`.
    pub first_group: u16,
    /// Values per datagram.
    pub elements: u16,
}

impl SspConfig {
    fn check(&self) -> Result<()> {
        check_peers(self.workers, self.p, self.first_group, self.elements)?;
        if !(0.0..=1.0).contains(&self.eta) {
            bail!("eta = {} must be within 0..=1", self.eta);
        }
        Ok(())
    }

    fn group_of(&self, worker: usize) -> u16 {
        self.first_group + worker as u16
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Request {
    Hello {
        worker: usize,
        endpoint: SocketAddr,
        uplink: f64,
        downlink: f64,
        values: usize,
    },
    Ready {
        round: u64,
    },
    Progress {
        sender: usize,
        round: u64,
        held: usize,
    },
    Got {
        sender: usize,
        round: u64,
        missing: Vec<u32>,
    },
    Finished,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Reply {
    /// Your round's task is admitted: multicast through `group`.
    Send {
        round: u64,
        group: u16,
        receivers: Vec<usize>,
        class: u8,
    },
    /// Your running task's priority class changed.
    Class {
        round: u64,
        class: u8,
    },
    Resend {
        round: u64,
        chunks: Vec<u32>,
    },
    /// Your task is complete: it reached `receivers`.
    Sent {
        round: u64,
        receivers: Vec<usize>,
    },
    /// Sender `sender`'s round is on its way to you through `group`.
    Expect {
        sender: usize,
        round: u64,
        group: u16,
    },
    /// You were preempted from that task: stop waiting for it.
    Dropped {
        sender: usize,
        round: u64,
    },
    /// Every peer has finished.
    AllDone,
    Error {
        message: String,
    },
}

/// One task as the manager saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    pub sender: usize,
    pub round: u64,
    /// Receivers at admission.
    pub planned: Vec<usize>,
    /// Receivers that got the whole update.
    pub receivers: Vec<usize>,
    /// Receivers preempted by later admissions.
    pub dropped: Vec<usize>,
    /// How far ahead of the slowest peer's completed rounds the task was
    /// admitted (at most `ssp`).
    pub ahead: u64,
    /// From ready to admitted (waiting for the bound).
    pub blocked: Duration,
    /// From admitted to complete.
    pub time: Duration,
    /// Resend requests forwarded.
    pub repairs: u64,
}

/// What the SSP manager did, when stopped.
#[derive(Debug, Clone, Default)]
pub struct SspReport {
    /// Every completed task, in completion order.
    pub tasks: Vec<TaskRecord>,
    /// Why the run broke off, if it did.
    pub broken: Option<String>,
}

/// The SSP manager: a TCP endpoint for peers (`addr`) and a thread that
/// admits tasks, installs and rewrites their groups, and ends them;
/// `finish` stops it and returns its report.
pub type SspManager = lines::Server<SspReport>;

impl SspManager {
    /// Checks the configuration and that its group ids are free, binds
    /// `bind` and starts.
    pub fn start(
        mut target: Box<dyn Target + Send>,
        bind: SocketAddr,
        config: SspConfig,
    ) -> Result<SspManager> {
        config.check()?;
        check_groups_free(target.as_mut(), config.first_group, config.workers)?;
        let state = State::new(target, config);
        lines::Server::spawn(bind, move |rx, stop| state.run(rx, stop))
    }
}

struct Member {
    conn: u64,
    endpoint: SocketAddr,
    uplink: f64,
    downlink: f64,
    completed: u64,
    finished: bool,
    last_ready: Option<Instant>,
}

/// A running task, by sender.
struct Live {
    round: u64,
    planned: Vec<usize>,
    pending: BTreeSet<usize>,
    dropped: Vec<usize>,
    /// Chunks each receiver holds, as last reported.
    held: Vec<usize>,
    class: u8,
    ahead: u64,
    blocked: Duration,
    admitted: Instant,
    repairs: u64,
}

struct State {
    target: Box<dyn Target + Send>,
    config: SspConfig,
    writers: lines::Writers,
    ids: BTreeMap<u64, usize>,
    members: BTreeMap<usize, Member>,
    values: Option<usize>,
    /// Algorithm 2's view, once every peer has said hello.
    online: Option<Online>,
    live: BTreeMap<usize, Live>,
    /// Readies not admitted yet: round and when.
    waiting: BTreeMap<usize, (u64, Instant)>,
    history: SenderHistory,
    rng: ChaCha8Rng,
    /// Mean interval between a peer's successive readies, seconds.
    mean_round: Option<f64>,
    all_done: bool,
    report: SspReport,
}

impl State {
    fn new(target: Box<dyn Target + Send>, config: SspConfig) -> State {
        let seed = match config.selector {
            Selector::Orpheus { seed } => seed,
            Selector::Selmcast => 0,
        };
        State {
            target,
            history: SenderHistory::new(config.workers, config.k),
            rng: ChaCha8Rng::seed_from_u64(seed),
            config,
            writers: lines::Writers::default(),
            ids: BTreeMap::new(),
            members: BTreeMap::new(),
            values: None,
            online: None,
            live: BTreeMap::new(),
            waiting: BTreeMap::new(),
            mean_round: None,
            all_done: false,
            report: SspReport::default(),
        }
    }

    fn run(mut self, rx: Receiver<Event<Request>>, stop: &AtomicBool) -> SspReport {
        lines::drive(&rx, stop, Duration::from_millis(50), |event| {
            if let Some(event) = event {
                self.handle(event);
            }
        });
        for &s in self.live.keys() {
            let _ = self.target.delete_group(self.config.group_of(s));
        }
        self.report
    }

    fn handle(&mut self, event: Event<Request>) {
        match event {
            Event::Opened { conn, writer } => self.writers.open(conn, writer),
            Event::Message { conn, request } => {
                if let Some(why) = &self.report.broken {
                    let message = why.clone();
                    self.writers.send(conn, &Reply::Error { message });
                    return;
                }
                if let Err(e) = self.request(conn, request) {
                    let message = error_text(&e);
                    self.writers.send(conn, &Reply::Error { message });
                }
            }
            Event::Closed { conn, why } => {
                self.writers.close(conn);
                if let Some(w) = self.ids.remove(&conn) {
                    self.members.remove(&w);
                    if !self.all_done && self.report.broken.is_none() {
                        self.break_off(format!("peer {w} left ({why}) before every peer finished"));
                    }
                }
            }
        }
    }

    fn request(&mut self, conn: u64, request: Request) -> Result<()> {
        if let Request::Hello {
            worker,
            endpoint,
            uplink,
            downlink,
            values,
        } = request
        {
            let member = Member {
                conn,
                endpoint,
                uplink,
                downlink,
                completed: 0,
                finished: false,
                last_ready: None,
            };
            return self.hello(worker, member, values);
        }
        let worker = *self.ids.get(&conn).context("say hello first")?;
        match request {
            Request::Hello { .. } => unreachable!("handled above"),
            Request::Ready { round } => self.ready(worker, round),
            Request::Progress {
                sender,
                round,
                held,
            } => {
                if let Some(l) = self.live.get_mut(&sender).filter(|l| l.round == round) {
                    if let Some(h) = l.held.get_mut(worker) {
                        *h = held;
                    }
                }
                Ok(())
            }
            Request::Got {
                sender,
                round,
                missing,
            } => {
                self.got(worker, sender, round, missing);
                Ok(())
            }
            Request::Finished => {
                if let Some(m) = self.members.get_mut(&worker) {
                    m.finished = true;
                }
                self.try_admit();
                if self.members.len() == self.config.workers
                    && self.members.values().all(|m| m.finished)
                {
                    self.all_done = true;
                    for conn in self.writers.conns() {
                        self.writers.send(conn, &Reply::AllDone);
                    }
                }
                Ok(())
            }
        }
    }

    fn hello(&mut self, worker: usize, member: Member, values: usize) -> Result<()> {
        let n = self.config.workers;
        if worker >= n {
            bail!(
                "peer {worker}: this run has peers 0 to {}",
                n.saturating_sub(1)
            );
        }
        if !(member.uplink > 0.0
            && member.downlink > 0.0
            && member.uplink.is_finite()
            && member.downlink.is_finite())
        {
            bail!("bandwidths must be positive bytes/s");
        }
        if values == 0 || self.values.is_some_and(|v| v != values) {
            bail!(
                "an update of {values} values; the others' have {}",
                self.values.unwrap_or(0)
            );
        }
        check_chunks(values, self.config.elements)?;
        if self.ids.contains_key(&member.conn) || self.members.contains_key(&worker) {
            bail!("peer {worker} is already connected");
        }
        self.ids.insert(member.conn, worker);
        self.values = Some(values);
        self.members.insert(worker, member);
        if self.members.len() == n {
            let m = self.members.values();
            let (up, down) = m.map(|m| (m.uplink, m.downlink)).unzip();
            self.online = Some(Online::new(up, down, Multicast::L3, self.config.eta));
            self.try_admit();
        }
        Ok(())
    }

    fn ready(&mut self, worker: usize, round: u64) -> Result<()> {
        let m = self.members.get_mut(&worker).context("say hello first")?;
        if round != m.completed || self.live.contains_key(&worker) {
            bail!(
                "peer {worker} is ready with round {round}, but has completed {} rounds{}",
                m.completed,
                if self.live.contains_key(&worker) {
                    " and its last task is still running"
                } else {
                    ""
                }
            );
        }
        if self.waiting.contains_key(&worker) {
            bail!("peer {worker} is ready twice with round {round}");
        }
        let now = Instant::now();
        if let Some(last) = m.last_ready.replace(now) {
            let dt = now.duration_since(last).as_secs_f64();
            let mean = self.mean_round.get_or_insert(dt);
            *mean = 0.875 * *mean + 0.125 * dt;
        }
        self.waiting.insert(worker, (round, now));
        self.try_admit();
        Ok(())
    }

    /// The slowest unfinished peer's completed rounds (a finished peer
    /// holds nobody back).
    fn slowest(&self) -> u64 {
        self.members
            .values()
            .filter(|m| !m.finished)
            .map(|m| m.completed)
            .min()
            .unwrap_or(u64::MAX)
    }

    /// Admits every waiting ready within the SSP bound, earliest first.
    fn try_admit(&mut self) {
        if self.online.is_none() || self.report.broken.is_some() {
            return;
        }
        loop {
            let slowest = self.slowest();
            let next = self
                .waiting
                .iter()
                .filter(|(_, &(round, _))| round <= slowest.saturating_add(self.config.ssp))
                .min_by_key(|(_, &(_, at))| at)
                .map(|(&w, &(round, at))| (w, round, at));
            let Some((worker, round, at)) = next else {
                return;
            };
            self.waiting.remove(&worker);
            let ahead = round.saturating_sub(slowest.min(round));
            if let Err(e) = self.admit(worker, round, ahead, at.elapsed()) {
                self.break_off(format!(
                    "admitting peer {worker}'s round {round}: {}",
                    error_text(&e)
                ));
                return;
            }
        }
    }

    fn admit(&mut self, sender: usize, round: u64, ahead: u64, blocked: Duration) -> Result<()> {
        self.refresh_tasks();
        let n = self.config.workers;
        let volume = (self.values.unwrap_or(0) * 4) as f64;
        let task = Task::new(
            n,
            sender,
            volume,
            self.config.p,
            self.history.forced(sender),
            self.history.since(sender),
        );
        let online = self.online.as_mut().context("not every peer is here")?;
        let order = match self.config.selector {
            Selector::Selmcast => online.admit(sender, task),
            Selector::Orpheus { .. } => online.admit_random(sender, task, &mut self.rng),
        };
        let receivers = online.tasks[sender]
            .as_ref()
            .map(|t| t.receiver_list())
            .unwrap_or_default();
        let class = class_of(&order, sender);
        self.preempt()?;
        self.install(sender, &receivers)?;
        for &j in &receivers {
            let group = self.config.group_of(sender);
            let reply = Reply::Expect {
                sender,
                round,
                group,
            };
            self.tell(j, &reply);
        }
        self.tell(
            sender,
            &Reply::Send {
                round,
                group: self.config.group_of(sender),
                receivers: receivers.clone(),
                class,
            },
        );
        self.live.insert(
            sender,
            Live {
                round,
                pending: receivers.iter().copied().collect(),
                planned: receivers,
                dropped: Vec::new(),
                held: vec![0; n],
                class,
                ahead,
                blocked,
                admitted: Instant::now(),
                repairs: 0,
            },
        );
        self.reclass(&order);
        // Tasks whose last pending receivers were all preempted are done.
        let done: Vec<usize> = self
            .live
            .iter()
            .filter(|(_, l)| l.pending.is_empty())
            .map(|(&s, _)| s)
            .collect();
        for s in done {
            self.complete(s);
        }
        Ok(())
    }

    /// Brings Algorithm 2's view of the running tasks up to date: the
    /// bytes each receiver still lacks, and each sender's tau.
    fn refresh_tasks(&mut self) {
        let elements = usize::from(self.config.elements);
        let values = self.values.unwrap_or(0);
        let slowest = self.slowest();
        let (ssp, mean) = (self.config.ssp, self.mean_round.unwrap_or(0.0));
        let Some(online) = self.online.as_mut() else {
            return;
        };
        for (&s, l) in &self.live {
            let Some(t) = online.tasks[s].as_mut() else {
                continue;
            };
            for (j, &held) in l.held.iter().enumerate() {
                let have = held.saturating_mul(elements).min(values);
                t.remaining[j] = ((values - have) * 4) as f64;
            }
            let gap = (l.round + 1).saturating_sub(slowest.saturating_add(ssp));
            t.tau = gap as f64 * mean;
        }
    }

    /// Receivers Algorithm 2 took out of running tasks: their groups are
    /// rewritten without them and they are told to stop waiting.
    fn preempt(&mut self) -> Result<()> {
        let online = self.online.as_ref().context("no tasks")?;
        let mut cut: Vec<(usize, Vec<usize>)> = Vec::new();
        for (&s, l) in &mut self.live {
            let Some(t) = online.tasks[s].as_ref() else {
                continue;
            };
            let gone: Vec<usize> = l
                .planned
                .iter()
                .copied()
                .filter(|&j| !t.receivers[j] && l.pending.contains(&j))
                .collect();
            if gone.is_empty() {
                continue;
            }
            for &j in &gone {
                l.pending.remove(&j);
                l.dropped.push(j);
            }
            cut.push((s, gone));
        }
        for (s, gone) in cut {
            let keep: Vec<usize> = self.live[&s]
                .planned
                .iter()
                .copied()
                .filter(|j| !self.live[&s].dropped.contains(j))
                .collect();
            let group = self.config.group_of(s);
            self.target
                .delete_group(group)
                .with_context(|| format!("remove sender {s}'s group {group} to rewrite it"))?;
            self.install(s, &keep)?;
            let round = self.live[&s].round;
            for j in gone {
                self.tell(j, &Reply::Dropped { sender: s, round });
            }
        }
        Ok(())
    }

    /// Installs sender `s`'s group: the sender, then `receivers`.
    fn install(&mut self, s: usize, receivers: &[usize]) -> Result<()> {
        let members = std::iter::once(s)
            .chain(receivers.iter().copied())
            .map(|w| {
                self.members
                    .get(&w)
                    .map(|m| m.endpoint)
                    .with_context(|| format!("peer {w} has left"))
            })
            .collect::<Result<_>>()?;
        let spec = GroupSpec {
            id: self.config.group_of(s),
            members,
        };
        self.target
            .create_group(&spec)
            .with_context(|| format!("install sender {s}'s group {}", spec.id))
    }

    /// Tells the senders whose position in L changed their new class.
    fn reclass(&mut self, order: &[usize]) {
        let mut changed = Vec::new();
        for (&s, l) in &mut self.live {
            let class = class_of(order, s);
            if class != l.class {
                l.class = class;
                changed.push((s, l.round, class));
            }
        }
        for (s, round, class) in changed {
            self.tell(s, &Reply::Class { round, class });
        }
    }

    /// Sends `reply` to peer `w`, if it is still here.
    fn tell(&mut self, w: usize, reply: &Reply) {
        if let Some(conn) = self.members.get(&w).map(|m| m.conn) {
            self.writers.send(conn, reply);
        }
    }

    fn got(&mut self, receiver: usize, sender: usize, round: u64, missing: Vec<u32>) {
        if missing.is_empty() {
            self.reached_anyway(receiver, sender, round);
        }
        let Some(l) = self.live.get_mut(&sender).filter(|l| l.round == round) else {
            return; // a late report of a finished task
        };
        if !l.pending.contains(&receiver) {
            return; // complete already, or dropped
        }
        if missing.is_empty() {
            // It holds everything: never preempted from now on.
            l.held[receiver] = usize::MAX;
            l.pending.remove(&receiver);
            if l.pending.is_empty() {
                self.complete(sender);
                self.try_admit();
            }
            return;
        }
        l.repairs += 1;
        let reply = Reply::Resend {
            round,
            chunks: missing,
        };
        self.tell(sender, &reply);
    }

    /// A receiver completed an update just as it was preempted (its report
    /// and the preemption crossed): it did get the update, so it counts as
    /// reached, in the running task or in the finished task's record.
    fn reached_anyway(&mut self, receiver: usize, sender: usize, round: u64) {
        let dropped = match self.live.get_mut(&sender).filter(|l| l.round == round) {
            Some(l) => &mut l.dropped,
            None => match self
                .report
                .tasks
                .iter_mut()
                .rev()
                .find(|t| t.sender == sender && t.round == round)
            {
                Some(t) if t.dropped.contains(&receiver) => {
                    t.receivers.push(receiver);
                    t.receivers.sort_unstable();
                    &mut t.dropped
                }
                _ => return,
            },
        };
        dropped.retain(|&j| j != receiver);
    }

    /// Ends sender `s`'s task: every receiver left in it is complete.
    fn complete(&mut self, s: usize) {
        let Some(l) = self.live.remove(&s) else {
            return;
        };
        let n = self.config.workers;
        let receivers: Vec<usize> = l
            .planned
            .iter()
            .copied()
            .filter(|j| !l.dropped.contains(j))
            .collect();
        let reached: Vec<bool> = (0..n).map(|j| receivers.contains(&j)).collect();
        self.history.record(s, &reached);
        if let Some(online) = self.online.as_mut() {
            online.finish(s);
        }
        let group = self.config.group_of(s);
        if let Err(e) = self.target.delete_group(group) {
            tracing::warn!(group, error = %e, "remove a finished task's group");
        }
        if let Some(m) = self.members.get_mut(&s) {
            m.completed += 1;
        }
        let reply = Reply::Sent {
            round: l.round,
            receivers: receivers.clone(),
        };
        self.tell(s, &reply);
        self.report.tasks.push(TaskRecord {
            sender: s,
            round: l.round,
            planned: l.planned,
            receivers,
            dropped: l.dropped,
            ahead: l.ahead,
            blocked: l.blocked,
            time: l.admitted.elapsed(),
            repairs: l.repairs,
        });
    }

    /// Ends the run: every peer is told why.
    fn break_off(&mut self, why: String) {
        tracing::warn!(%why, "SELMCAST SSP run broken off");
        self.report.broken = Some(why.clone());
        self.waiting.clear();
        for conn in self.writers.conns() {
            let message = why.clone();
            self.writers.send(conn, &Reply::Error { message });
        }
    }
}

/// A task's priority class from its place in L: 7 for the first, 0 from
/// the eighth on.
fn class_of(order: &[usize], sender: usize) -> u8 {
    let rank = order.iter().position(|&s| s == sender).unwrap_or(7);
    7 - rank.min(7) as u8
}

/// An update a peer received whole.
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    pub sender: usize,
    pub round: u64,
    pub values: Vec<f32>,
}

/// How one of a peer's multicasts ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Multicasted {
    pub round: u64,
    /// Receivers at admission.
    pub planned: Vec<usize>,
    /// Receivers that got it whole (the rest were preempted).
    pub receivers: Vec<usize>,
    /// Datagrams sent again on request.
    pub resent: u64,
    /// From ready to complete.
    pub time: Duration,
}

/// How an SSP peer paces, waits and repairs.
#[derive(Debug, Clone, Copy)]
pub struct SspTimers {
    /// Ask for a sender's missing chunks after this long without a
    /// datagram from it.
    pub repair_after: Duration,
    /// Report the chunks held of each incomplete update this often.
    pub progress_every: Duration,
    /// Give up after this long waiting with nothing happening (the bound
    /// may hold a peer back for as long as the slowest peer computes).
    pub give_up: Duration,
}

impl Default for SspTimers {
    fn default() -> Self {
        SspTimers {
            repair_after: Duration::from_millis(30),
            progress_every: Duration::from_millis(5),
            give_up: Duration::from_secs(30),
        }
    }
}

/// What the I/O thread hands the peer's owner.
enum Note {
    Sent(Multicasted),
    Update(Update),
    AllDone,
    Failed(String),
}

enum Command {
    Multicast { round: u64, chunks: Vec<Vec<i32>> },
    Finish,
}

/// An SSP peer: its I/O runs in a thread of its own (receiving, reporting,
/// repairing and pacing its own multicast), so updates arrive while the
/// owner computes.
pub struct SspPeer {
    id: usize,
    elements: u16,
    values: usize,
    round: u64,
    commands: Sender<Command>,
    notes: Receiver<Note>,
    received: Vec<Update>,
    io: Option<JoinHandle<()>>,
}

impl SspPeer {
    /// Peer `id` with its declared bandwidths (bytes/s), binding `bind` for
    /// group datagrams through `switch`; its updates have `values` values
    /// in chunks of `elements`.
    pub fn connect(
        manager: SocketAddr,
        switch: SocketAddr,
        bind: SocketAddr,
        (id, uplink, downlink): (usize, f64, f64),
        (values, elements): (usize, u16),
        timers: SspTimers,
    ) -> Result<SspPeer> {
        check_chunks(values, elements)?;
        if elements == 0 || usize::from(elements) > inagg_wire::MAX_ELEMENTS {
            bail!(
                "{elements} values per datagram: 1 to {}",
                inagg_wire::MAX_ELEMENTS
            );
        }
        let socket = GroupSocket::bind(bind, switch, 0, 0)
            .with_context(|| format!("peer {id}: bind {bind}"))?;
        let mut client = Client::connect(manager, Duration::from_secs(10))?;
        client.send(&Request::Hello {
            worker: id,
            endpoint: socket.local_addr()?,
            uplink,
            downlink,
            values,
        })?;
        let (reader, writer) = client.into_parts();
        reader.get_ref().set_read_timeout(None)?;
        let replies = reply_reader(reader);
        let (commands, command_rx) = crossbeam_channel::unbounded();
        let (note_tx, notes) = crossbeam_channel::unbounded();
        let io = Io {
            id,
            socket,
            manager: writer,
            replies,
            commands: command_rx,
            notes: note_tx,
            timers,
            pace: Duration::from_secs_f64(f64::from(elements) * 4.0 / uplink),
            inbox: Inbox::new(elements, values),
            early: Early::default(),
            own: None,
            last_progress_report: Instant::now(),
        };
        let io = std::thread::spawn(move || io.run());
        Ok(SspPeer {
            id,
            elements,
            values,
            round: 0,
            commands,
            notes,
            received: Vec::new(),
            io: Some(io),
        })
    }

    /// Multicasts this round's update to the receivers the manager picks
    /// and returns once the task is complete (after waiting for the SSP
    /// bound, if this peer is too far ahead). Updates that arrive meanwhile
    /// are kept for [`SspPeer::received`].
    pub fn multicast(&mut self, update: &[f32]) -> Result<Multicasted> {
        if update.len() != self.values {
            bail!(
                "peer {}: an update of {} values; this run's have {}",
                self.id,
                update.len(),
                self.values
            );
        }
        let round = self.round;
        let command = Command::Multicast {
            round,
            chunks: chunks(update, self.elements),
        };
        if self.commands.send(command).is_err() {
            return Err(self.io_thread_gone());
        }
        loop {
            match self.next_note()? {
                Note::Sent(m) if m.round == round => {
                    self.round += 1;
                    return Ok(m);
                }
                Note::AllDone => bail!("peer {}: the run ended while multicasting", self.id),
                _ => {}
            }
        }
    }

    /// Every update received whole since the last call.
    pub fn received(&mut self) -> Vec<Update> {
        while let Ok(note) = self.notes.try_recv() {
            self.keep(note);
        }
        std::mem::take(&mut self.received)
    }

    /// Says this peer is done multicasting and keeps receiving until every
    /// peer is; returns the updates received since the last call.
    pub fn finish(mut self) -> Result<Vec<Update>> {
        let _ = self.commands.send(Command::Finish);
        loop {
            if let Note::AllDone = self.next_note()? {
                break;
            }
        }
        if let Some(io) = self.io.take() {
            let _ = io.join();
        }
        Ok(std::mem::take(&mut self.received))
    }

    /// Why the I/O thread has stopped: the failure it reported before it
    /// went, if any. A command sent after the thread failed finds the
    /// channel closed while the failure still waits among the notes (a
    /// peer leaving reached one peer that way as "its I/O thread is gone"
    /// instead of naming the peer that left).
    fn io_thread_gone(&mut self) -> anyhow::Error {
        for note in self.notes.try_iter() {
            match note {
                Note::Failed(why) => return anyhow!("peer {}: {why}", self.id),
                Note::Update(u) => self.received.push(u),
                _ => {}
            }
        }
        anyhow!("peer {}: its I/O thread is gone", self.id)
    }

    /// The next note that is not an update (updates are kept).
    fn next_note(&mut self) -> Result<Note> {
        loop {
            let Ok(note) = self.notes.recv() else {
                return Err(self.io_thread_gone());
            };
            match note {
                Note::Failed(why) => bail!("peer {}: {why}", self.id),
                Note::Update(u) => self.received.push(u),
                other => return Ok(other),
            }
        }
    }

    fn keep(&mut self, note: Note) {
        if let Note::Update(u) = note {
            self.received.push(u);
        }
    }
}

/// This peer's running multicast.
struct Own {
    round: u64,
    chunks: Vec<Vec<i32>>,
    ready_at: Instant,
    /// Admitted: group, class, receivers at admission.
    admitted: Option<(u16, u8, Vec<usize>)>,
    /// Chunks to send, in order (the first pass, then repairs).
    queue: std::collections::VecDeque<u32>,
    next_send: Instant,
    resent: u64,
}

/// The peer's I/O thread.
struct Io {
    id: usize,
    socket: GroupSocket,
    manager: inagg_netio::stream::Stream,
    replies: Receiver<Result<Reply>>,
    commands: Receiver<Command>,
    notes: Sender<Note>,
    timers: SspTimers,
    /// Time on the uplink per datagram's payload.
    pace: Duration,
    inbox: Inbox,
    early: Early,
    own: Option<Own>,
    last_progress_report: Instant,
}

/// Datagrams of groups this peer was not (yet) told to expect. The sender
/// hears "send" and its receivers "expect" at the same moment, so the
/// first datagrams can overtake the receivers' word; they are kept a
/// while and taken when the word comes, instead of being repaired.
#[derive(Default)]
struct Early(std::collections::VecDeque<(Instant, GroupDatagram)>);

impl Early {
    /// At most this many kept; the oldest go first.
    const CAPACITY: usize = 4096;
    /// Kept this long.
    const KEEP: Duration = Duration::from_millis(500);

    fn keep(&mut self, d: GroupDatagram) {
        let now = Instant::now();
        while self.0.front().is_some_and(|(at, _)| {
            now.duration_since(*at) > Self::KEEP || self.0.len() >= Self::CAPACITY
        }) {
            self.0.pop_front();
        }
        self.0.push_back((now, d));
    }

    fn take(&mut self, group: u16) -> Vec<GroupDatagram> {
        let (mine, rest) = std::mem::take(&mut self.0)
            .into_iter()
            .partition(|(_, d)| d.group == group);
        self.0 = rest;
        mine.into_iter().map(|(_, d)| d).collect()
    }
}

impl Io {
    fn run(mut self) {
        if let Err(e) = self.serve() {
            let _ = self.notes.send(Note::Failed(error_text(&e)));
        }
        let _ = self.manager.shutdown(std::net::Shutdown::Both);
    }

    fn serve(&mut self) -> Result<()> {
        let mut quiet_since = Instant::now();
        loop {
            match self.commands.try_recv() {
                Ok(Command::Multicast { round, chunks }) => {
                    self.tell(&Request::Ready { round })?;
                    self.own = Some(Own {
                        round,
                        chunks,
                        ready_at: Instant::now(),
                        admitted: None,
                        queue: Default::default(),
                        next_send: Instant::now(),
                        resent: 0,
                    });
                }
                Ok(Command::Finish) => self.tell(&Request::Finished)?,
                Err(crossbeam_channel::TryRecvError::Empty) => {}
                // The owner is gone: so is this peer.
                Err(crossbeam_channel::TryRecvError::Disconnected) => return Ok(()),
            }
            while let Ok(reply) = self.replies.try_recv() {
                quiet_since = Instant::now();
                if !self.reply(reply?)? {
                    return Ok(());
                }
            }
            self.send_due()?;
            let wait = self.own_wait().min(Duration::from_millis(1));
            if let Some(d) = self.socket.recv_any(wait.max(Duration::from_micros(50)))? {
                if self.inbox.take(d.group, d.packet_id, &d.values) {
                    quiet_since = Instant::now();
                } else {
                    self.early.keep(d);
                }
            }
            self.report()?;
            let waiting = self.own.is_some() || self.inbox.waiting();
            if waiting && quiet_since.elapsed() > self.timers.give_up {
                bail!(
                    "nothing happened for {:?} (own round running: {}; updates incomplete from {:?})",
                    self.timers.give_up,
                    self.own.is_some(),
                    self.inbox.incomplete()
                );
            }
        }
    }

    /// Acts on a manager's reply; false once every peer is done.
    fn reply(&mut self, reply: Reply) -> Result<bool> {
        match reply {
            Reply::Error { message } => bail!("{message}"),
            Reply::AllDone => {
                let _ = self.notes.send(Note::AllDone);
                return Ok(false);
            }
            Reply::Send {
                round,
                group,
                receivers,
                class,
            } => {
                if let Some(own) = self.own.as_mut().filter(|o| o.round == round) {
                    own.queue.extend(0..own.chunks.len() as u32);
                    own.admitted = Some((group, class, receivers));
                    own.next_send = Instant::now();
                    self.socket.set_group(group, 0);
                }
            }
            Reply::Class { round, class } => {
                if let Some((_, c, _)) = self
                    .own
                    .as_mut()
                    .filter(|o| o.round == round)
                    .and_then(|o| o.admitted.as_mut())
                {
                    *c = class;
                }
            }
            Reply::Resend { round, chunks } => {
                if let Some(own) = self.own.as_mut().filter(|o| o.round == round) {
                    for c in chunks {
                        // Several receivers may lack the same chunk: one
                        // multicast repairs them all.
                        if !own.queue.contains(&c) {
                            own.resent += 1;
                            own.queue.push_back(c);
                        }
                    }
                }
            }
            Reply::Sent { round, receivers } => {
                if let Some(own) = self.own.take_if(|o| o.round == round) {
                    let planned = own.admitted.map(|a| a.2).unwrap_or_default();
                    let done = Multicasted {
                        round,
                        planned,
                        receivers,
                        resent: own.resent,
                        time: own.ready_at.elapsed(),
                    };
                    let _ = self.notes.send(Note::Sent(done));
                }
            }
            Reply::Expect {
                sender,
                round,
                group,
            } => {
                self.inbox.expect(sender, round, group);
                for d in self.early.take(group) {
                    self.inbox.take(d.group, d.packet_id, &d.values);
                }
            }
            Reply::Dropped { sender, round } => {
                // Whatever came of it is discarded; if it was complete it
                // has been delivered already and is no longer expected.
                self.inbox.forget_update(sender, round);
            }
        }
        Ok(true)
    }

    /// How long until the next paced datagram is due (long when none is).
    fn own_wait(&self) -> Duration {
        match &self.own {
            Some(o) if o.admitted.is_some() && !o.queue.is_empty() => {
                o.next_send.saturating_duration_since(Instant::now())
            }
            _ => Duration::from_secs(1),
        }
    }

    /// Sends this peer's datagrams that are due at its uplink's pace.
    fn send_due(&mut self) -> Result<()> {
        let Some(own) = self.own.as_mut() else {
            return Ok(());
        };
        let Some((_, class, _)) = own.admitted.as_ref() else {
            return Ok(());
        };
        let now = Instant::now();
        while own.next_send <= now {
            let Some(c) = own.queue.pop_front() else {
                break;
            };
            if let Some(chunk) = own.chunks.get(c as usize) {
                self.socket
                    .send(chunk, packet_id(own.round, c as usize), *class)?;
                own.next_send += self.pace;
            }
        }
        if own.queue.is_empty() {
            own.next_send = own.next_send.max(now);
        }
        Ok(())
    }

    /// Complete updates, repairs and progress to the manager; complete
    /// updates to the owner.
    fn report(&mut self) -> Result<()> {
        for due in self.inbox.reports(self.timers.repair_after) {
            let complete = due.missing.is_empty();
            self.tell(&Request::Got {
                sender: due.sender,
                round: due.round,
                missing: due.missing,
            })?;
            if complete {
                self.deliver(due.sender, due.round);
            }
        }
        if self.last_progress_report.elapsed() >= self.timers.progress_every {
            self.last_progress_report = Instant::now();
            let progress: Vec<Request> = self
                .inbox
                .updates()
                .filter(|s| !s.complete())
                .map(|s| Request::Progress {
                    sender: s.sender,
                    round: s.round,
                    held: s.held(),
                })
                .collect();
            for p in progress {
                self.tell(&p)?;
            }
        }
        Ok(())
    }

    fn deliver(&mut self, sender: usize, round: u64) {
        if let Some(s) = self.inbox.forget_update(sender, round) {
            let update = Update {
                sender,
                round,
                values: s.values,
            };
            let _ = self.notes.send(Note::Update(update));
        }
    }

    fn tell(&mut self, request: &Request) -> Result<()> {
        lines::send(&mut self.manager, request)
            .with_context(|| format!("peer {}: write to the manager", self.id))
    }
}
