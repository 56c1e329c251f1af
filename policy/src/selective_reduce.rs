//! Selective reduce on the stack: a coordinator that runs
//! [`inagg_sched::selective_reduce`] live, and the worker
//! side that asks it for a group every round
//! (docs/PAPERS.md, "Selective reduce").
//!
//! A worker that has finished computing a round tells the coordinator it is
//! ready ([`GroupWorker::sync`]). The coordinator keeps the ready queue and
//! the computing workers, asks the policy which groups to launch (on every
//! arrival, every departure and every `tick` while a group is held back),
//! and launches each group as a job of its own on the switch: the job lists
//! the members' endpoints in rank order over one of a few pre-split
//! sub-pools, so a launch writes one table entry and the switch completes
//! each slot at |g| contributions and sends the result to the members only.
//! Each member averages its model with the group's (the sum over the
//! switch, divided by |g|), reports done, and computes its next round; once
//! every member is done the job is deleted and its sub-pool is free again.
//!
//! Policies ([`Policy`]): selective reduce (BAG + BPAWR with the periodic
//! full all-reduce, [`Controller`]), the baseline partial
//! reduce (the first p ready, in arrival order) and plain all-reduce.
//!
//! Choices this module makes where the paper is silent:
//! - **Uniform weights.** Members average with equal weights (the paper's
//!   weighted all-reduce weighs by sample count, which is the same for
//!   every worker here).
//! - **Nobody left to wait for.** When every live worker is waiting and the
//!   policy launches nothing (fewer than p are left once others have
//!   stopped), they are launched together; otherwise the last workers of a
//!   run would wait forever.
//! - **Bandwidth is declared.** Each worker states its bandwidth (bytes/s,
//!   `min(uplink, downlink)`) when it is ready, as the paper's controller
//!   knows each worker's; the policy's model volume is a parameter.
//! - **Compute time is measured** by the coordinator: from a worker's done
//!   (or its first contact) to its next ready. The progress model's CDF is
//!   built from these (cold start).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crossbeam_channel::Receiver;
use inagg_host_agent::{AgentConfig, Worker};
use inagg_sched::selective_reduce::{
    all_reduce, partial_reduce, Cdf, Controller, Params, Ready, Training,
};
use inagg_switch_api::validate_job;
use inagg_switch_api::JobSpec;
use inagg_switch_control::target::Target;
use serde::{Deserialize, Serialize};

use crate::lines::{self, Client, Event};

/// How long a stopping coordinator waits for the done reports of launches
/// still running.
const DRAIN: Duration = Duration::from_secs(2);

/// Which groups the coordinator launches.
#[derive(Debug, Clone)]
pub enum Policy {
    /// Selective reduce (BAG, BPAWR, a full all-reduce every `c` syncs).
    Selective(Params),
    /// Partial reduce: the first `p` ready workers, in arrival order.
    Partial {
        /// Group size.
        p: usize,
    },
    /// All-reduce: every worker, every round.
    AllReduce,
}

/// How the coordinator uses the switch.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Workers in the training job (n).
    pub workers: usize,
    /// The policy.
    pub policy: Policy,
    /// Job id of the first sub-pool; sub-pool i launches as job
    /// `first_job + i`.
    pub first_job: u16,
    /// First slot of the first sub-pool.
    pub pool_base: u32,
    /// Slots per sub-pool (each group's window).
    pub slots: u32,
    /// Sub-pools: groups that can run at once (n / p is always enough).
    pub sub_pools: usize,
    /// Elements per packet, K.
    pub elements: u16,
    /// How often a held-back group is looked at again (selective reduce's
    /// dt is a good value).
    pub tick: Duration,
}

impl CoordinatorConfig {
    /// Sub-pool `pool`'s job for a group with these members.
    fn group_job(&self, pool: usize, workers: Vec<SocketAddr>, generation: u16) -> JobSpec {
        let (id, base) = (
            self.first_job + pool as u16,
            self.pool_base + pool as u32 * self.slots,
        );
        JobSpec {
            child_switches: 0,
            generation,
            ..JobSpec::new(id, workers, base, self.slots, self.elements)
        }
    }

    fn check(&self) -> Result<()> {
        if self.workers == 0 || self.workers > inagg_wire::MAX_WORKERS {
            bail!(
                "{} workers: a group job takes 1 to {}",
                self.workers,
                inagg_wire::MAX_WORKERS
            );
        }
        if self.sub_pools == 0 || self.slots == 0 {
            bail!("at least one sub-pool of at least one slot is needed");
        }
        let last_job = usize::from(self.first_job) + self.sub_pools - 1;
        if last_job > usize::from(u16::MAX) {
            bail!("job ids {}..={last_job} do not fit 16 bits", self.first_job);
        }
        let p = match &self.policy {
            Policy::Selective(params) => params.p,
            Policy::Partial { p } => *p,
            Policy::AllReduce => 1,
        };
        if p == 0 || p > self.workers {
            bail!("group size p = {p} must be 1 to n = {}", self.workers);
        }
        Ok(())
    }
}

/// A worker's messages to the coordinator (one JSON object per line).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Request {
    /// Done computing a round: put me in a group.
    Ready {
        worker: usize,
        bandwidth: f64,
        endpoint: SocketAddr,
        slots: u32,
        elements: u16,
    },
    /// The group's all-reduce is over for me (`ok`: with a result).
    Done { launch: u64, ok: bool },
}

/// The coordinator's answers to a ready worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum Reply {
    Assign(Assignment),
    Error { message: String },
}

/// A group launch as one member sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Assignment {
    /// Launch number (0, 1, ... in launch order).
    pub launch: u64,
    /// The group's job on the switch.
    pub job: u16,
    /// This worker's rank in the group.
    pub rank: u16,
    /// The members' worker ids, in rank order.
    pub members: Vec<usize>,
    /// The job's membership generation.
    pub generation: u16,
    /// Every live worker is in the group.
    pub full: bool,
}

/// One launch as the coordinator saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct LaunchRecord {
    /// Launch number.
    pub launch: u64,
    /// Members in rank order.
    pub members: Vec<usize>,
    /// The ready queue when it was launched, in arrival order.
    pub waiting: Vec<usize>,
    /// Live workers then.
    pub alive: usize,
    /// Every live worker is in it.
    pub full: bool,
    /// The selective-reduce controller's step this group was chosen at
    /// (its `k`: every `c`-th is a full turn); `None` for a group the
    /// controller did not choose (the other policies, and every ready
    /// worker launched when the controller chose nobody). Launch numbers
    /// and steps part when groups are cut to the free sub-pools or
    /// launched without a step, which a loaded machine makes happen.
    pub turn: Option<u64>,
    /// From the launch to the last member's done.
    pub sync_time: Duration,
    /// Every member got its result.
    pub ok: bool,
}

/// What a coordinator did, when stopped.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Every finished launch, in launch order.
    pub launches: Vec<LaunchRecord>,
    /// Launches still running when stopped (a member never reported).
    pub unfinished: usize,
}

/// The coordinator: a TCP endpoint for workers (`addr`) and a thread that
/// runs the policy and installs the groups' jobs; `finish` stops it
/// (deleting the jobs of launches still running) and returns what was
/// launched.
pub type Coordinator = lines::Server<Report>;

impl Coordinator {
    /// Checks the configuration against the switch (sub-pools within its
    /// memory, job ids and slots not in use), binds `bind` and starts.
    pub fn start(
        mut target: Box<dyn Target + Send>,
        bind: SocketAddr,
        config: CoordinatorConfig,
    ) -> Result<Coordinator> {
        config.check()?;
        check_switch(target.as_mut(), &config)?;
        let state = State::new(target, config);
        lines::Server::spawn(bind, move |rx, stop| state.run(rx, stop))
    }
}

/// The sub-pools must fit the switch's memory and collide with no
/// installed job's id or slots.
fn check_switch(target: &mut dyn Target, config: &CoordinatorConfig) -> Result<()> {
    let info = target.info().context("read the switch's memory size")?;
    let end = u64::from(config.pool_base) + u64::from(config.slots) * config.sub_pools as u64;
    if end > u64::from(info.slots) {
        bail!(
            "{} sub-pools of {} slots from slot {} end at {end}, beyond the switch's {} slots",
            config.sub_pools,
            config.slots,
            config.pool_base,
            info.slots
        );
    }
    // Each sub-pool as the job a launch will install, checked against the
    // installed jobs as any job is (ids, overlaps, K, pool size); the
    // members are not known yet, so one placeholder endpoint stands in.
    let installed: Vec<JobSpec> = target
        .jobs()
        .context("list the switch's jobs")?
        .into_iter()
        .map(|j| j.spec)
        .collect();
    let switch = info.config();
    let placeholder = SocketAddr::from(([0, 0, 0, 0], 0));
    for pool in 0..config.sub_pools {
        let spec = config.group_job(pool, vec![placeholder], 0);
        validate_job(&spec, &installed, switch)
            .with_context(|| format!("sub-pool {pool} (job {})", spec.id))?;
    }
    Ok(())
}

/// The policy as the coordinator runs it.
enum Chooser {
    Selective(Controller),
    Partial(usize),
    AllReduce,
}

/// Where a worker is.
enum Phase {
    /// Computing since then.
    Training { since: Instant, first: bool },
    /// In the ready queue.
    Waiting,
    /// In a launch.
    Syncing { launch: u64 },
}

struct Member {
    conn: u64,
    bandwidth: f64,
    endpoint: SocketAddr,
    phase: Phase,
}

struct Launch {
    pool: usize,
    job: u16,
    pending: Vec<usize>,
    ok: bool,
    record: LaunchRecord,
    started: Instant,
}

/// The coordinator's state, owned by its thread.
struct State {
    target: Box<dyn Target + Send>,
    config: CoordinatorConfig,
    /// The policy, with selective reduce's loop state.
    chooser: Chooser,
    writers: lines::Writers,
    members: BTreeMap<usize, Member>,
    /// Ready workers in arrival order.
    queue: Vec<usize>,
    launches: BTreeMap<u64, Launch>,
    pool_free: Vec<bool>,
    next_launch: u64,
    /// Workers that left (the full all-reduce no longer waits for them).
    gone: BTreeSet<usize>,
    cdf: Cdf,
    report: Report,
}

impl State {
    fn new(target: Box<dyn Target + Send>, config: CoordinatorConfig) -> State {
        let chooser = match &config.policy {
            Policy::Selective(params) => Chooser::Selective(Controller::new(*params)),
            Policy::Partial { p } => Chooser::Partial(*p),
            Policy::AllReduce => Chooser::AllReduce,
        };
        State {
            target,
            chooser,
            pool_free: vec![true; config.sub_pools],
            config,
            writers: lines::Writers::default(),
            members: BTreeMap::new(),
            queue: Vec::new(),
            launches: BTreeMap::new(),
            next_launch: 0,
            gone: BTreeSet::new(),
            cdf: Cdf::default(),
            report: Report::default(),
        }
    }

    fn run(mut self, rx: Receiver<Event<Request>>, stop: &AtomicBool) -> Report {
        lines::drive(&rx, stop, self.config.tick, |event| {
            if let Some(event) = event {
                self.handle(event);
            }
            self.schedule();
        });
        // Members that have their result report done on their way out:
        // take those reports before calling a launch unfinished.
        let deadline = Instant::now() + DRAIN;
        while !self.launches.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(event) => self.handle(event),
                Err(_) => break,
            }
        }
        self.report.unfinished = self.launches.len();
        for launch in std::mem::take(&mut self.launches).into_values() {
            let _ = self.target.delete_job(launch.job);
        }
        self.report
    }

    fn handle(&mut self, event: Event<Request>) {
        match event {
            Event::Opened { conn, writer } => {
                self.writers.open(conn, writer);
            }
            Event::Message { conn, request } => match request {
                Request::Ready {
                    worker,
                    bandwidth,
                    endpoint,
                    slots,
                    elements,
                } => {
                    if let Err(message) =
                        self.ready(conn, worker, bandwidth, endpoint, (slots, elements))
                    {
                        self.writers.send(conn, &Reply::Error { message });
                    }
                }
                Request::Done { launch, ok } => self.done(conn, launch, ok),
            },
            Event::Closed { conn, why } => self.closed(conn, &why),
        }
    }

    /// A worker is ready; `Err` is the reason it is refused.
    fn ready(
        &mut self,
        conn: u64,
        worker: usize,
        bandwidth: f64,
        endpoint: SocketAddr,
        (slots, elements): (u32, u16),
    ) -> std::result::Result<(), String> {
        let n = self.config.workers;
        if worker >= n {
            return Err(format!(
                "worker {worker}: this job has workers 0 to {}",
                n.saturating_sub(1)
            ));
        }
        if !(bandwidth.is_finite() && bandwidth > 0.0) {
            return Err(format!("bandwidth {bandwidth} must be positive bytes/s"));
        }
        if (slots, elements) != (self.config.slots, self.config.elements) {
            return Err(format!(
                "worker {worker} has {slots} slots and K = {elements}; the groups' jobs have {} and {}",
                self.config.slots, self.config.elements
            ));
        }
        let now = Instant::now();
        match self.members.get_mut(&worker) {
            Some(m) if m.conn != conn => {
                return Err(format!("worker {worker} is already connected"));
            }
            Some(m) => match m.phase {
                Phase::Training { since, first } => {
                    if !first {
                        self.cdf.observe((now - since).as_secs_f64());
                    }
                    m.bandwidth = bandwidth;
                    m.endpoint = endpoint;
                    m.phase = Phase::Waiting;
                }
                _ => return Err(format!("worker {worker} is already waiting or syncing")),
            },
            None => {
                self.gone.remove(&worker); // back after leaving
                self.members.insert(
                    worker,
                    Member {
                        conn,
                        bandwidth,
                        endpoint,
                        phase: Phase::Waiting,
                    },
                );
            }
        }
        self.queue.push(worker);
        Ok(())
    }

    fn done(&mut self, conn: u64, launch: u64, ok: bool) {
        let Some(worker) = self.worker_of(conn) else {
            return;
        };
        let Some(l) = self.launches.get_mut(&launch) else {
            return;
        };
        if let Some(at) = l.pending.iter().position(|&w| w == worker) {
            l.pending.swap_remove(at);
            l.ok &= ok;
            if let Some(m) = self.members.get_mut(&worker) {
                m.phase = Phase::Training {
                    since: Instant::now(),
                    first: false,
                };
            }
        }
        self.finish_if_done(launch);
    }

    fn closed(&mut self, conn: u64, why: &str) {
        self.writers.close(conn);
        let Some(worker) = self.worker_of(conn) else {
            return;
        };
        tracing::debug!(worker, why, "worker left");
        let member = self.members.remove(&worker);
        self.gone.insert(worker);
        self.queue.retain(|&w| w != worker);
        if let Some(Member {
            phase: Phase::Syncing { launch },
            ..
        }) = member
        {
            if let Some(l) = self.launches.get_mut(&launch) {
                l.pending.retain(|&w| w != worker);
                l.ok = false;
            }
            self.finish_if_done(launch);
        }
    }

    fn worker_of(&self, conn: u64) -> Option<usize> {
        self.members
            .iter()
            .find(|(_, m)| m.conn == conn)
            .map(|(&w, _)| w)
    }

    /// Deletes a launch's job once no member is still running it.
    fn finish_if_done(&mut self, launch: u64) {
        if !self
            .launches
            .get(&launch)
            .is_some_and(|l| l.pending.is_empty())
        {
            return;
        }
        let Some(mut l) = self.launches.remove(&launch) else {
            return;
        };
        if let Err(e) = self.target.delete_job(l.job) {
            tracing::warn!(job = l.job, error = %e, "delete a finished group's job");
        }
        self.pool_free[l.pool] = true;
        l.record.sync_time = l.started.elapsed();
        l.record.ok = l.ok;
        self.report.launches.push(l.record);
    }

    fn alive(&self) -> usize {
        self.config.workers - self.gone.len()
    }

    /// Asks the policy for groups and launches them.
    fn schedule(&mut self) {
        let free = self.pool_free.iter().filter(|&&f| f).count();
        if free == 0 || self.queue.is_empty() {
            return;
        }
        let ready: Vec<Ready> = self
            .queue
            .iter()
            .map(|&id| Ready {
                id,
                bandwidth: self.members[&id].bandwidth,
            })
            .collect();
        let now = Instant::now();
        let training: Vec<Training> = self
            .members
            .iter()
            .filter_map(|(&id, m)| match m.phase {
                Phase::Training { since, .. } => Some(Training {
                    id,
                    bandwidth: m.bandwidth,
                    elapsed: (now - since).as_secs_f64(),
                }),
                _ => None,
            })
            .collect();
        let n = self.alive();
        let (mut groups, first_turn) = match &mut self.chooser {
            Chooser::Selective(c) => {
                let k = c.k;
                (c.step(n, &ready, &training, &self.cdf), Some(k))
            }
            Chooser::Partial(p) => (partial_reduce(&ready, *p), None),
            Chooser::AllReduce => (all_reduce(&ready, n), None),
        };
        let chosen = groups.len();
        if groups.is_empty() && ready.len() == n {
            // Nobody left to wait for (see the module's doc).
            groups.push(ready);
        }
        if groups.len() > free {
            if let Chooser::Selective(c) = &mut self.chooser {
                c.k -= (groups.len() - free) as u64;
            }
            groups.truncate(free);
        }
        for (i, g) in groups.into_iter().enumerate() {
            let turn = first_turn.filter(|_| i < chosen).map(|k| k + i as u64);
            self.launch(g.iter().map(|r| r.id).collect(), turn);
        }
    }

    fn launch(&mut self, members: Vec<usize>, turn: Option<u64>) {
        let pool = self
            .pool_free
            .iter()
            .position(|&f| f)
            .expect("a free sub-pool");
        let id = self.next_launch;
        self.next_launch += 1;
        let generation = id as u16;
        let waiting = self.queue.clone();
        self.queue.retain(|w| !members.contains(w));
        let endpoints = members.iter().map(|w| self.members[w].endpoint).collect();
        let spec = self.config.group_job(pool, endpoints, generation);
        if let Err(e) = self.target.create_job(&spec) {
            let message = format!("launch {id}: the switch refused group job {}: {e}", spec.id);
            for w in &members {
                let conn = self.members[w].conn;
                self.members.get_mut(w).expect("member").phase = Phase::Training {
                    since: Instant::now(),
                    first: true,
                };
                self.writers.send(
                    conn,
                    &Reply::Error {
                        message: message.clone(),
                    },
                );
            }
            return;
        }
        self.pool_free[pool] = false;
        let alive = self.alive();
        let full = members.len() == alive;
        for (rank, w) in members.iter().enumerate() {
            let m = self.members.get_mut(w).expect("member");
            m.phase = Phase::Syncing { launch: id };
            let conn = m.conn;
            let assignment = Assignment {
                launch: id,
                job: spec.id,
                rank: rank as u16,
                members: members.clone(),
                generation,
                full,
            };
            self.writers.send(conn, &Reply::Assign(assignment));
        }
        let record = LaunchRecord {
            launch: id,
            members: members.clone(),
            waiting,
            alive,
            full,
            turn,
            sync_time: Duration::ZERO,
            ok: false,
        };
        self.launches.insert(
            id,
            Launch {
                pool,
                job: spec.id,
                pending: members,
                ok: true,
                record,
                started: Instant::now(),
            },
        );
    }
}

/// A worker's side: its data path to the switch and its connection to the
/// coordinator.
pub struct GroupWorker {
    id: usize,
    bandwidth: f64,
    worker: Worker,
    coordinator: Client,
}

impl GroupWorker {
    /// Worker `id` (0..n) with `bandwidth` bytes/s. `config` gives the
    /// switch, the local bind address, the sub-pools' slots and K and the
    /// timers; its job, rank and worker count are set per launch. `wait`
    /// bounds how long [`GroupWorker::sync`] waits for a group.
    pub fn connect(
        coordinator: SocketAddr,
        mut config: AgentConfig,
        id: usize,
        bandwidth: f64,
        wait: Duration,
    ) -> Result<GroupWorker> {
        (config.worker, config.workers) = (0, 1);
        let worker = Worker::new(config).with_context(|| format!("worker {id}'s data path"))?;
        Ok(GroupWorker {
            id,
            bandwidth,
            worker,
            coordinator: Client::connect(coordinator, wait)?,
        })
    }

    /// This worker's id.
    pub fn id(&self) -> usize {
        self.id
    }

    /// Waits for a group, then replaces `model` with the group's mean
    /// model. Returns the group it synchronised with.
    pub fn sync(&mut self, model: &mut [f32]) -> Result<Assignment> {
        let config = self.worker.config();
        self.coordinator.send(&Request::Ready {
            worker: self.id,
            bandwidth: self.bandwidth,
            endpoint: self.worker.local_addr(),
            slots: config.pool_size,
            elements: config.elements,
        })?;
        let reply = self
            .coordinator
            .receive()
            .with_context(|| format!("worker {} waiting for a group", self.id))?;
        let assignment = match reply {
            Reply::Assign(a) => a,
            Reply::Error { message } => {
                bail!("the coordinator refused worker {}: {message}", self.id)
            }
        };
        let result = self.average(&assignment, model);
        self.coordinator.send(&Request::Done {
            launch: assignment.launch,
            ok: result.is_ok(),
        })?;
        result.map(|()| assignment)
    }

    fn average(&mut self, a: &Assignment, model: &mut [f32]) -> Result<()> {
        let workers = u16::try_from(a.members.len()).context("group too large")?;
        self.worker
            .retarget(a.job, a.rank, workers, a.generation)
            .context("join the group's job")?;
        self.worker
            .allreduce_f32(model)
            .with_context(|| format!("launch {}: all-reduce over group job {}", a.launch, a.job))?;
        let n = f32::from(workers);
        model.iter_mut().for_each(|x| *x /= n);
        Ok(())
    }
}
