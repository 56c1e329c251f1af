//! NetStorm's policy consistency as a service
//! (docs/PAPERS.md, "NetStorm: policy consistency"): mixed old and new
//! trees deadlock, so before each push every worker sends a topology
//! request (TRP) and blocks; when every worker has asked, the scheduler
//! ([`Scheduler::before_push`]) reads the switches' probes, plans if
//! UPDATE_TIME has passed, rolls a changed forest out on every switch with
//! the next generation, and only then answers everyone: the forest in
//! force and its generation. A worker retargets its sockets when the
//! generation moved. This is the authors' code's reading (the reply waits
//! for every node: a per-iteration barrier).
//!
//! Protocol (JSON lines over TCP, [`crate::lines`]), one connection per
//! worker:
//! - `{"op":"hello","site":V,"worker":W}`, answered with the switch to use,
//!   the total worker count, the jobs' shape and the first forest;
//! - `{"op":"endpoints","endpoints":[ADDR, ...]}`: its socket per tree;
//! - `{"op":"topology"}` (TRP) before each push, answered at the barrier
//!   with `{"reply":"go","generation":G,"forest":...}`.
//!
//! A worker that leaves (or misbehaves) breaks the barrier: every other
//! worker is told why (`{"reply":"failed","why":...}`) and the forest's
//! jobs are removed.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use crossbeam_channel::Receiver;
use inagg_host_agent::{AgentConfig, Stats};
use inagg_sched::netstorm::Tree;
use serde::{Deserialize, Serialize};

use super::awareness::{Estimate, Scheduler};
use super::{Deployment, Forest, ForestConfig, ForestWorker, Site};
use crate::lines::{self, Client, Event, Writers};
use crate::report::error_text;

/// A forest as it travels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireForest {
    /// Per tree: its root and every site's parent.
    pub trees: Vec<(usize, Vec<Option<usize>>)>,
    /// Per tree: its share of the chunks.
    pub shares: Vec<f64>,
}

impl From<&Forest> for WireForest {
    fn from(f: &Forest) -> Self {
        WireForest {
            trees: f.trees.iter().map(|t| (t.root, t.parent.clone())).collect(),
            shares: f.shares.clone(),
        }
    }
}

impl From<WireForest> for Forest {
    fn from(w: WireForest) -> Self {
        Forest {
            trees: w
                .trees
                .into_iter()
                .map(|(root, parent)| Tree { root, parent })
                .collect(),
            shares: w.shares,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Request {
    Hello { site: usize, worker: u16 },
    Endpoints { endpoints: Vec<SocketAddr> },
    Topology,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
enum Reply {
    Welcome {
        switch: SocketAddr,
        rank: u16,
        total: u16,
        config: ForestConfig,
        forest: WireForest,
    },
    Go {
        generation: u16,
        forest: WireForest,
    },
    Failed {
        why: String,
    },
}

/// What the service did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ConsistencyReport {
    /// Barriers passed (pushes allowed).
    pub rounds: u64,
    /// The generation in force at the end.
    pub generation: u16,
    /// Forests rolled out after the first.
    pub rollouts: u64,
    /// Every estimate the scheduler applied, in order.
    pub estimates: Vec<Estimate>,
    /// Why the run broke, if it did.
    pub broken: Option<String>,
}

/// The scheduler's endpoint: owns the sites' control targets; workers
/// connect to `addr`; `finish` stops it, removes the forest's jobs, and
/// reports.
pub type ConsistencyService = lines::Server<ConsistencyReport>;

impl ConsistencyService {
    /// Serves `per_site[v]` workers at every site v on `bind`; the jobs'
    /// shape is `config` (its generation the first forest's).
    pub fn start(
        bind: SocketAddr,
        sites: Vec<Site>,
        per_site: Vec<u16>,
        config: ForestConfig,
        scheduler: Scheduler,
    ) -> Result<ConsistencyService> {
        ensure!(
            sites.len() == per_site.len(),
            "worker counts for {} sites; there are {}",
            per_site.len(),
            sites.len()
        );
        ensure!(
            per_site.iter().all(|&n| n > 0),
            "every site needs a worker: {per_site:?}"
        );
        let total = super::total_workers(&per_site)?;
        let state = Barrier {
            sites,
            per_site,
            total,
            config,
            scheduler,
            writers: Writers::default(),
            who: BTreeMap::new(),
            endpoints: BTreeMap::new(),
            asked: BTreeSet::new(),
            deployment: None,
            report: ConsistencyReport {
                generation: config.generation,
                ..ConsistencyReport::default()
            },
        };
        lines::Server::spawn(bind, move |rx: Receiver<Event<Request>>, stop| {
            state.run(&rx, stop)
        })
    }
}

/// The service's state, on its own thread.
struct Barrier {
    sites: Vec<Site>,
    per_site: Vec<u16>,
    total: u16,
    config: ForestConfig,
    scheduler: Scheduler,
    writers: Writers,
    /// Connection -> (site, worker id).
    who: BTreeMap<u64, (usize, u16)>,
    /// (site, worker id) -> its socket per tree.
    endpoints: BTreeMap<(usize, u16), Vec<SocketAddr>>,
    /// Connections waiting at the barrier.
    asked: BTreeSet<u64>,
    deployment: Option<Deployment>,
    report: ConsistencyReport,
}

impl Barrier {
    fn run(mut self, rx: &Receiver<Event<Request>>, stop: &AtomicBool) -> ConsistencyReport {
        lines::drive(rx, stop, Duration::from_millis(50), |event| match event {
            Some(Event::Opened { conn, writer }) => self.writers.open(conn, writer),
            Some(Event::Message { conn, request }) => {
                if let Err(e) = self.handle(conn, request) {
                    self.fail(error_text(&e));
                }
            }
            Some(Event::Closed { conn, why }) => self.closed(conn, &why),
            None => {}
        });
        if let Some(d) = self.deployment.take() {
            if let Err(e) = d.remove(&mut self.sites) {
                self.report.broken.get_or_insert(error_text(&e));
            }
        }
        self.report
    }

    fn handle(&mut self, conn: u64, request: Request) -> Result<()> {
        if let Some(why) = &self.report.broken {
            let why = why.clone();
            self.writers.send(conn, &Reply::Failed { why });
            return Ok(());
        }
        match request {
            Request::Hello { site, worker } => self.hello(conn, site, worker),
            Request::Endpoints { endpoints } => self.endpoints(conn, endpoints),
            Request::Topology => self.topology(conn),
        }
    }

    fn hello(&mut self, conn: u64, site: usize, worker: u16) -> Result<()> {
        let Some(&n) = self.per_site.get(site) else {
            return self.refuse(
                conn,
                format!("no site {site}: there are {}", self.per_site.len()),
            );
        };
        if worker >= n {
            return self.refuse(
                conn,
                format!("site {site} has workers 0-{}, not {worker}", n - 1),
            );
        }
        if self.who.values().any(|&w| w == (site, worker)) || self.who.contains_key(&conn) {
            return self.refuse(
                conn,
                format!("worker {worker} of site {site} is here already"),
            );
        }
        self.who.insert(conn, (site, worker));
        let welcome = Reply::Welcome {
            switch: self.sites[site].data,
            rank: super::rank_of(&self.per_site, site, worker),
            total: self.total,
            config: self.config,
            forest: self.scheduler.forest().into(),
        };
        self.writers.send(conn, &welcome);
        Ok(())
    }

    /// Refuses one connection's request; the run goes on without it.
    fn refuse(&mut self, conn: u64, why: String) -> Result<()> {
        self.writers.send(conn, &Reply::Failed { why });
        self.writers.close(conn);
        Ok(())
    }

    fn endpoints(&mut self, conn: u64, endpoints: Vec<SocketAddr>) -> Result<()> {
        let Some(&me) = self.who.get(&conn) else {
            return self.refuse(conn, "say hello first".into());
        };
        let trees = self.scheduler.forest().trees.len();
        if endpoints.len() != trees {
            bail!(
                "worker {} of site {} gave {} endpoints for {trees} trees",
                me.1,
                me.0,
                endpoints.len()
            );
        }
        self.endpoints.insert(me, endpoints);
        Ok(())
    }

    /// TRP: waits for every worker; the last one's request runs the
    /// scheduler and releases everyone.
    fn topology(&mut self, conn: u64) -> Result<()> {
        let Some(&me) = self.who.get(&conn) else {
            return self.refuse(conn, "say hello first".into());
        };
        ensure!(
            self.endpoints.contains_key(&me),
            "worker {} of site {} asked for the topology before giving its endpoints",
            me.1,
            me.0
        );
        self.asked.insert(conn);
        if self.asked.len() < usize::from(self.total) {
            return Ok(());
        }
        self.roll_out()?;
        let go = Reply::Go {
            generation: self.report.generation,
            forest: self.scheduler.forest().into(),
        };
        for c in std::mem::take(&mut self.asked) {
            self.writers.send(c, &go);
        }
        self.report.rounds += 1;
        Ok(())
    }

    /// At the barrier: installs the first forest, or asks the scheduler
    /// and replaces the forest when it planned a new one.
    fn roll_out(&mut self) -> Result<()> {
        let endpoints = self.site_endpoints();
        let Some(old) = self.deployment.take() else {
            let first = self.scheduler.policy();
            let d = Deployment::install_with(
                &mut self.sites,
                &first.forest,
                &first.detours,
                &self.config,
                &endpoints,
            )?;
            self.deployment = Some(d);
            return Ok(());
        };
        let (estimates, plan) = match self.scheduler.before_push(&mut self.sites, Instant::now()) {
            Ok(x) => x,
            Err(e) => {
                self.deployment = Some(old);
                return Err(e);
            }
        };
        self.report.estimates.extend(estimates);
        let Some(policy) = plan else {
            self.deployment = Some(old);
            return Ok(());
        };
        self.report.generation = self.report.generation.wrapping_add(1);
        let config = ForestConfig {
            generation: self.report.generation,
            ..self.config
        };
        self.deployment = Some(old.replace_with(
            &mut self.sites,
            &policy.forest,
            &policy.detours,
            &config,
            &endpoints,
        )?);
        self.report.rollouts += 1;
        Ok(())
    }

    /// `endpoints[site][tree][worker]`, as the workers gave them.
    fn site_endpoints(&self) -> Vec<Vec<Vec<SocketAddr>>> {
        let trees = self.scheduler.forest().trees.len();
        self.per_site
            .iter()
            .enumerate()
            .map(|(v, &n)| {
                (0..trees)
                    .map(|t| (0..n).map(|w| self.endpoints[&(v, w)][t]).collect())
                    .collect()
            })
            .collect()
    }

    fn closed(&mut self, conn: u64, why: &str) {
        self.writers.close(conn);
        self.asked.remove(&conn);
        if let Some((site, worker)) = self.who.remove(&conn) {
            if self.report.broken.is_none() {
                self.fail(format!(
                    "worker {worker} of site {site} left ({why}): the barrier needs every worker"
                ));
            }
        }
    }

    /// Breaks the run: tells everyone why.
    fn fail(&mut self, why: String) {
        tracing::warn!("netstorm consistency: {why}");
        for conn in self.writers.conns() {
            self.writers.send(conn, &Reply::Failed { why: why.clone() });
        }
        self.asked.clear();
        self.report.broken.get_or_insert(why);
    }
}

/// One worker's side: its [`ForestWorker`] and its connection to the
/// service.
pub struct ForestSession {
    client: Client,
    worker: ForestWorker,
    generation: u16,
}

impl ForestSession {
    /// Joins the service at `service` as worker `worker` of site `site`,
    /// binding its sockets on `bind` (port 0); `wait` bounds each wait for
    /// the service (the barrier included); `tune` as [`ForestWorker::bind`]'s.
    pub fn join(
        service: SocketAddr,
        site: usize,
        worker: u16,
        bind: SocketAddr,
        wait: Duration,
        tune: impl Fn(&mut AgentConfig),
    ) -> Result<ForestSession> {
        let mut client = Client::connect(service, wait)?;
        client.send(&Request::Hello { site, worker })?;
        let (switch, rank, total, config, forest) = match client.receive()? {
            Reply::Welcome {
                switch,
                rank,
                total,
                config,
                forest,
            } => (switch, rank, total, config, Forest::from(forest)),
            Reply::Failed { why } => bail!("the NetStorm service refused: {why}"),
            other => bail!("the NetStorm service answered hello with {other:?}"),
        };
        let seat = super::Seat {
            member: worker,
            rank,
            total,
        };
        let fw = ForestWorker::bind(switch, bind, &forest, &config, seat, tune)?;
        client.send(&Request::Endpoints {
            endpoints: fw.endpoints(),
        })?;
        Ok(ForestSession {
            client,
            worker: fw,
            generation: config.generation,
        })
    }

    /// TRP: blocks until every worker has asked, then takes the forest in
    /// force. Returns whether a new one took over.
    pub fn before_push(&mut self) -> Result<bool> {
        self.client.send(&Request::Topology)?;
        match self.client.receive()? {
            Reply::Go { generation, forest } => {
                if generation == self.generation {
                    return Ok(false);
                }
                self.worker.retarget(&Forest::from(forest), generation)?;
                self.generation = generation;
                Ok(true)
            }
            Reply::Failed { why } => bail!("the NetStorm run broke: {why}"),
            other => bail!("the NetStorm service answered a topology request with {other:?}"),
        }
    }

    /// The generation in force.
    pub fn generation(&self) -> u16 {
        self.generation
    }

    /// [`ForestWorker::allreduce_i32`] over the forest in force.
    pub fn allreduce_i32(&mut self, data: &mut [i32]) -> Result<Vec<Stats>> {
        self.worker.allreduce_i32(data)
    }

    /// [`ForestWorker::allreduce_f32`] over the forest in force.
    pub fn allreduce_f32(&mut self, data: &mut [f32]) -> Result<Vec<Stats>> {
        self.worker.allreduce_f32(data)
    }
}
