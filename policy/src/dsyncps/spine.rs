//! dSyncPS's global synchronisation with racks joining and leaving
//! mid-training: a spine manager owns the status table
//! ([`GlobalSync`], the simulator's code), decides for every rack's round
//! whether it ends in a global sync, and installs the spine switch's job
//! for the racks of each sync, a new generation whenever they change.
//!
//! A rack's leader (worker 0) asks before each round ([`SpineLink::round`])
//! and tells the rest of its rack through the rack's own all-reduce
//! ([`super::TwoTier`]); the other workers never talk to the manager.
//!
//! - **Join.** A rack listed in [`SpineConfig::initial`] is in the table
//!   from the start (its first sync after T rounds, like every other). Any
//!   other rack joins with the advance/defer rule (`GlobalSync::join`):
//!   deferred into the next sync when none is under way, or the next sync
//!   advanced to the next round when one is. Its first sync is *fresh*: it
//!   started from its own model, so it contributes nothing and takes the
//!   global model (dSyncPS: a new server overwrites its configuration with
//!   the current base); from then on it counts.
//! - **Leave.** A rack that says goodbye, or whose leader's connection
//!   closes, leaves the table and is not waited for; the next sync's job has
//!   the others only. A rack that leaves in the middle of a sync (its reply
//!   sent, its all-reduce not done) leaves the others' spine all-reduce
//!   short: they fail with the agent's timeout, not a hang.
//! - **Barrier.** A rack whose round ends in a sync waits for the reply
//!   until every rack in the table is waiting, so no rack is left behind
//!   with an old membership; requests that arrive while a sync is under
//!   way are held until it is done.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{bail, Result};
use crossbeam_channel::Receiver;
use inagg_sched::dsyncps::{GlobalSync, Join};
use inagg_switch_api::JobSpec;
use inagg_switch_control::target::Target;
use serde::{Deserialize, Serialize};

use crate::lines::{self, Event, Writers};

/// The spine's shape and the sync period.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpineConfig {
    /// Global sync every `t` local rounds.
    pub t: u32,
    /// Racks in the table from the start.
    pub initial: Vec<u32>,
    /// The spine job's id.
    pub job: u16,
    /// Its pool at the spine switch.
    pub pool_base: u32,
    /// Slots.
    pub pool_size: u32,
    /// K.
    pub elements: u16,
}

/// A rack leader's request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// A rack of `workers` workers, its leader's spine socket at `endpoint`.
    Join {
        rack: u32,
        workers: u16,
        endpoint: SocketAddr,
    },
    /// The rack starts its next round: does it end in a global sync?
    Round { rack: u32 },
    /// The rack's part of the sync is done.
    Synced { rack: u32 },
    /// The rack leaves.
    Leave { rack: u32 },
}

/// The manager's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Reply {
    /// In the table; when its first sync comes.
    Joined { first_sync: u64, advanced: bool },
    /// A local round only.
    Local,
    /// A global sync through the spine's job.
    Global(GlobalPlan),
    /// Refused (a second join, an unknown rack).
    Error { message: String },
}

/// What a rack's leader needs for one global sync.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GlobalPlan {
    /// The sync's number (1 first).
    pub sync: u64,
    /// The spine job, this rack's member id and the members.
    pub job: u16,
    pub member: u16,
    pub members: u16,
    pub generation: u16,
    /// Workers whose models the global mean is over (the racks that are
    /// not fresh).
    pub total: u32,
    /// This rack's first sync: it contributes nothing and takes the mean.
    pub fresh: bool,
}

/// One global sync as the manager ran it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncRecord {
    /// 1 first.
    pub sync: u64,
    /// The racks in it, by member id.
    pub racks: Vec<u32>,
    /// Those of them that were fresh.
    pub fresh: Vec<u32>,
    /// The spine job's generation.
    pub generation: u16,
    /// Workers the mean is over.
    pub total: u32,
}

/// What the manager did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpineReport {
    /// Every sync, in order.
    pub syncs: Vec<SyncRecord>,
    /// Racks that joined after the start: (rack, the sync it was told,
    /// advanced).
    pub joins: Vec<(u32, u64, bool)>,
    /// Racks that left: (rack, syncs done when it left).
    pub leaves: Vec<(u32, u64)>,
    /// Control-plane errors (installing or deleting the spine job).
    pub errors: Vec<String>,
}

/// A running spine manager: rack leaders connect to `addr`; `finish` stops
/// it (deleting the spine job) and returns its report.
pub type SpineManager = lines::Server<SpineReport>;

impl SpineManager {
    /// Starts the manager on `bind` with the spine switch's `target`.
    pub fn start(
        target: Box<dyn Target + Send>,
        bind: SocketAddr,
        config: SpineConfig,
    ) -> Result<SpineManager> {
        if config.t == 0 {
            bail!("the global period T must be at least 1 round");
        }
        let state = State::new(target, config);
        lines::Server::spawn(bind, move |rx, stop| state.run(rx, stop))
    }
}

/// A rack as the manager knows it.
#[derive(Debug, Clone)]
struct Rack {
    conn: u64,
    workers: u16,
    endpoint: SocketAddr,
    /// Not yet through its first sync (joined mid-training).
    fresh: bool,
    /// Its round ends in a sync; waiting for the reply.
    waiting: bool,
    /// Told to sync; not done yet.
    syncing: bool,
}

struct State {
    target: Box<dyn Target + Send>,
    config: SpineConfig,
    table: GlobalSync,
    racks: BTreeMap<u32, Rack>,
    writers: Writers,
    /// Rounds asked for while a sync was under way: answered after it.
    held: VecDeque<u32>,
    /// The spine job as installed: its racks and generation.
    installed: Option<(Vec<u32>, u16)>,
    generation: u16,
    report: SpineReport,
}

impl State {
    fn new(target: Box<dyn Target + Send>, config: SpineConfig) -> State {
        State {
            target,
            table: GlobalSync::new(config.t, config.initial.iter().copied()),
            config,
            racks: BTreeMap::new(),
            writers: Writers::default(),
            held: VecDeque::new(),
            installed: None,
            generation: 0,
            report: SpineReport::default(),
        }
    }

    fn run(mut self, rx: Receiver<Event<Request>>, stop: &AtomicBool) -> SpineReport {
        lines::drive(&rx, stop, Duration::from_millis(50), |event| {
            if let Some(event) = event {
                self.handle(event);
            }
        });
        if self.installed.is_some() {
            if let Err(e) = self.target.delete_job(self.config.job) {
                self.report
                    .errors
                    .push(format!("deleting the spine job: {e}"));
            }
        }
        self.report
    }

    fn handle(&mut self, event: Event<Request>) {
        match event {
            Event::Opened { conn, writer } => self.writers.open(conn, writer),
            Event::Closed { conn, .. } => {
                self.writers.close(conn);
                if let Some((&rack, _)) = self.racks.iter().find(|(_, r)| r.conn == conn) {
                    self.leave(rack);
                }
            }
            Event::Message { conn, request } => {
                if let Err(message) = self.request(conn, request) {
                    self.writers.send(conn, &Reply::Error { message });
                }
            }
        }
    }

    fn request(&mut self, conn: u64, request: Request) -> Result<(), String> {
        match request {
            Request::Join {
                rack,
                workers,
                endpoint,
            } => self.join(conn, rack, workers, endpoint),
            Request::Round { rack } => {
                self.known(conn, rack)?;
                if self.sync_under_way() {
                    self.held.push_back(rack);
                } else {
                    self.round(rack);
                }
                Ok(())
            }
            Request::Synced { rack } => {
                self.known(conn, rack)?;
                self.synced(rack);
                Ok(())
            }
            Request::Leave { rack } => {
                self.known(conn, rack)?;
                self.leave(rack);
                Ok(())
            }
        }
    }

    fn known(&self, conn: u64, rack: u32) -> Result<(), String> {
        match self.racks.get(&rack) {
            Some(r) if r.conn == conn => Ok(()),
            _ => Err(format!("rack {rack} has not joined on this connection")),
        }
    }

    fn join(
        &mut self,
        conn: u64,
        rack: u32,
        workers: u16,
        endpoint: SocketAddr,
    ) -> Result<(), String> {
        if self.racks.contains_key(&rack) {
            return Err(format!("rack {rack} has joined already"));
        }
        if workers == 0 {
            return Err(format!("rack {rack} has no workers"));
        }
        let initial = self.config.initial.contains(&rack) && self.report.syncs.is_empty();
        let (first_sync, advanced) = if initial {
            (1, false)
        } else {
            let join = self.table.join(rack);
            let (sync, advanced) = match join {
                Join::Deferred { sync } => (sync, false),
                Join::Advanced { sync } => (sync, true),
            };
            self.report.joins.push((rack, sync, advanced));
            (sync, advanced)
        };
        self.racks.insert(
            rack,
            Rack {
                conn,
                workers,
                endpoint,
                fresh: !initial,
                waiting: false,
                syncing: false,
            },
        );
        self.writers.send(
            conn,
            &Reply::Joined {
                first_sync,
                advanced,
            },
        );
        Ok(())
    }

    fn sync_under_way(&self) -> bool {
        self.racks.values().any(|r| r.syncing)
    }

    fn round(&mut self, rack: u32) {
        if self.table.local_done(rack) {
            if let Some(r) = self.racks.get_mut(&rack) {
                r.waiting = true;
            }
            self.try_sync();
        } else if let Some(r) = self.racks.get(&rack) {
            self.writers.send(r.conn, &Reply::Local);
        }
    }

    /// Starts the sync when every rack in the table waits for it (a rack
    /// listed as initial that has not joined yet is waited for too).
    fn try_sync(&mut self) {
        let all_here = self
            .table
            .servers()
            .iter()
            .all(|id| self.racks.get(id).is_some_and(|r| r.waiting && !r.syncing));
        if !all_here || !self.table.all_ready() {
            return;
        }
        let ids: Vec<u32> = self.racks.keys().copied().collect();
        if let Err(e) = self.install(&ids) {
            self.report.errors.push(e.clone());
            for r in self.racks.values() {
                self.writers.send(
                    r.conn,
                    &Reply::Error {
                        message: format!("the spine job could not be installed: {e}"),
                    },
                );
            }
            return;
        }
        let counted: u32 = self
            .racks
            .values()
            .filter(|r| !r.fresh)
            .map(|r| u32::from(r.workers))
            .sum();
        // Only fresh racks (every initial one left): the mean is theirs.
        let everyone_fresh = counted == 0;
        let total = if everyone_fresh {
            self.racks.values().map(|r| u32::from(r.workers)).sum()
        } else {
            counted
        };
        let fresh: Vec<u32> = self
            .racks
            .iter()
            .filter(|(_, r)| r.fresh && !everyone_fresh)
            .map(|(&id, _)| id)
            .collect();
        let sync = self.table.done + 1;
        for (member, (id, r)) in self.racks.iter_mut().enumerate() {
            let plan = GlobalPlan {
                sync,
                job: self.config.job,
                member: member as u16,
                members: ids.len() as u16,
                generation: self.generation,
                total,
                fresh: fresh.contains(id),
            };
            r.waiting = false;
            r.syncing = true;
            self.writers.send(r.conn, &Reply::Global(plan));
        }
        self.report.syncs.push(SyncRecord {
            sync,
            racks: ids,
            fresh,
            generation: self.generation,
            total,
        });
    }

    /// Installs the spine job for `racks` unless it is installed for them
    /// already; a change of racks is a new generation.
    fn install(&mut self, racks: &[u32]) -> Result<(), String> {
        if self.installed.as_ref().is_some_and(|(r, _)| r == racks) {
            return Ok(());
        }
        if let Some((_, generation)) = self.installed.take() {
            self.target
                .delete_job(self.config.job)
                .map_err(|e| format!("deleting the spine job: {e}"))?;
            self.generation = generation.wrapping_add(1);
        }
        let c = &self.config;
        let workers = racks.iter().map(|id| self.racks[id].endpoint).collect();
        let spec = JobSpec {
            child_switches: 0,
            generation: self.generation,
            ..JobSpec::new(c.job, workers, c.pool_base, c.pool_size, c.elements)
        };
        self.target
            .create_job(&spec)
            .map_err(|e| format!("installing the spine job: {e}"))?;
        self.installed = Some((racks.to_vec(), self.generation));
        Ok(())
    }

    fn synced(&mut self, rack: u32) {
        if let Some(r) = self.racks.get_mut(&rack) {
            r.syncing = false;
            r.fresh = false;
        }
        if !self.sync_under_way() {
            self.finish_sync();
        }
    }

    /// Every rack of the sync is done: reset the table and answer the
    /// rounds held meanwhile.
    fn finish_sync(&mut self) {
        self.table.finish();
        while let Some(rack) = self.held.pop_front() {
            self.round(rack);
        }
    }

    fn leave(&mut self, rack: u32) {
        let Some(r) = self.racks.remove(&rack) else {
            return;
        };
        self.table.leave(rack);
        self.held.retain(|&h| h != rack);
        self.report.leaves.push((rack, self.table.done));
        if self.sync_under_way() {
            return;
        }
        if r.syncing {
            // It was the last of a sync to finish.
            self.finish_sync();
        } else {
            self.try_sync();
        }
    }
}

/// A rack leader's connection to the spine manager.
pub struct SpineLink {
    client: lines::Client,
    rack: u32,
}

impl SpineLink {
    /// Joins rack `rack` of `workers` workers, whose leader's spine socket
    /// is `endpoint`; `wait` bounds every reply (a sync waits for the
    /// slowest rack). Returns the link and (first sync, advanced).
    pub fn join(
        manager: SocketAddr,
        rack: u32,
        workers: u16,
        endpoint: SocketAddr,
        wait: Duration,
    ) -> Result<(SpineLink, (u64, bool))> {
        let mut client = lines::Client::connect(manager, wait)?;
        client.send(&Request::Join {
            rack,
            workers,
            endpoint,
        })?;
        match client.receive::<Reply>()? {
            Reply::Joined {
                first_sync,
                advanced,
            } => Ok((SpineLink { client, rack }, (first_sync, advanced))),
            Reply::Error { message } => bail!("rack {rack}: {message}"),
            other => bail!("rack {rack}: unexpected reply to a join: {other:?}"),
        }
    }

    /// Whether this round ends in a global sync, and how.
    pub fn round(&mut self) -> Result<Option<GlobalPlan>> {
        self.client.send(&Request::Round { rack: self.rack })?;
        match self.client.receive::<Reply>()? {
            Reply::Local => Ok(None),
            Reply::Global(plan) => Ok(Some(plan)),
            Reply::Error { message } => bail!("rack {}: {message}", self.rack),
            other => bail!("rack {}: unexpected reply to a round: {other:?}", self.rack),
        }
    }

    /// This rack's part of the sync is done.
    pub fn synced(&mut self) -> Result<()> {
        self.client.send(&Request::Synced { rack: self.rack })
    }

    /// Leaves the table (also what closing the connection does).
    pub fn leave(mut self) -> Result<()> {
        self.client.send(&Request::Leave { rack: self.rack })
    }
}
