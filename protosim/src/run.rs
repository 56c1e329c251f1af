//! One simulated run: a job on the emulator's switch, N agent cores over
//! the virtual network ([`crate::net`]), a seed's mix of faults, and the
//! invariants checked on everything the agents hand back.
//!
//! A run has up to three phases:
//!
//! 1. **Prelude** (when the mix replays): one clean all-reduce by an
//!    earlier session of every worker, whose datagrams are recorded.
//! 2. **Faulty**: new sessions run one to three all-reduces while the
//!    mix's faults act (loss, duplication, reordering, jitter, starved and
//!    paused workers, forgers, replays, a switch restart, a crash).
//! 3. **Clean**: the faults stop; once the network has drained, every
//!    worker (in a new session if any failed) runs one more all-reduce,
//!    which must complete: no slot may be left wedged.
//!
//! The workers of one phase make their all-reduce calls together (call c
//! of every worker, then call c + 1): a worker that finishes early keeps
//! taking datagrams (late copies reach it, as they reach a real one), but
//! does not start its next call before the others finish theirs.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;

use inagg_emu::{JobSpec, Switch, SwitchConfig};
use inagg_host_agent::protocol::{Agent, AllReduce};
use inagg_host_agent::{AgentConfig, Stats, Window};

pub use crate::net::LinkFaults as Links;
use inagg_wire::{Kind, Packet, Repr, HEADER_LEN};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::faults::{Fault, Faults};
use crate::net::{Event, LinkFaults, Nanos, Net, Node, Served};
use crate::trace::Who;

const MS: Nanos = 1_000_000;
const JOB: u16 = 7;
/// A round open at the switch longer than this is held up
/// ([`Outcome::held_up`]): the agent's shortest wait before it probes a
/// round with nothing sent after it.
const HELD_UP: Nanos = MS;
/// Rounds whose opening time is kept at most ([`Outcome::held_up`]).
const OPEN_ROUNDS: usize = 1 << 16;
/// Datagrams a host's socket holds before the kernel drops (about a
/// default receive buffer's worth of small datagrams).
const INBOX: usize = 4096;
/// Datagrams one receive call returns (the socket path's batch).
const BATCH: usize = 64;
/// How long a worker waits without progress before it gives up, in the
/// simulator as by default (`AgentConfig::new`): the liveness bound at up
/// to 30% loss.
const GIVE_UP: Nanos = 10_000 * MS;
/// A call still running this long after it began is a hang.
const HANG: Nanos = 60_000 * MS;
/// Script events.
const FORGE: u32 = 1;
const REPLAY: u32 = 2;
const RESTART: u32 = 3;
const REINSTALL: u32 = 4;
const CRASH: u32 = 5;
const PAUSE: u32 = 6;

/// How big a run is.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Size {
    /// A few thousand elements: what CI runs thousands of.
    Small,
    /// `elements` per worker, 4 workers, K = 64, a pool of 512.
    Large { elements: usize },
    /// A job of its own: `workers`, K, a pool of `pool` slots, `elements`
    /// per worker, one all-reduce; the mix is exactly the faults given,
    /// at loss `loss` each way.
    Job {
        workers: u16,
        k: u16,
        pool: u32,
        elements: usize,
        loss: f64,
        /// The switch's time per packet, when not the default's.
        switch_ns: Option<u64>,
        /// A float all-reduce (else int32).
        float: bool,
        /// The workers' give-up time in ms, when not the simulator's
        /// 10 s: shorter than recovery needs, every call fails.
        give_up_ms: Option<u64>,
        /// Every slot of the pool in flight whatever happens
        /// (`inagg demo --fixed-window`), not the adaptive window.
        fixed_window: bool,
    },
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The seed: the same seed, the same run.
    pub seed: u64,
    /// The faults a seed may draw from (each with probability one half).
    pub faults: Faults,
    /// Keep a readable trace.
    pub readable: bool,
    /// How big.
    pub size: Size,
}

/// The run a seed drew.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub workers: u16,
    pub k: u16,
    pub pool: u32,
    pub elements: usize,
    pub calls: usize,
    pub float: bool,
    pub mix: Faults,
    pub link: LinkFaults,
    /// The worker whose events are handled late, in bursts.
    pub starved: Option<usize>,
    /// (worker, when, how long) it stops.
    pub pause: Option<(usize, Nanos, Nanos)>,
    /// (worker, when) it crashes.
    pub crash: Option<(usize, Nanos)>,
    /// (when, for how long) the switch is down.
    pub restart: Option<(Nanos, Nanos)>,
    /// Member ids whose endpoints forgers send from.
    pub forged_members: Vec<usize>,
    /// How long a worker waits without progress before it gives up.
    pub give_up: Nanos,
    /// The workers' window.
    pub window: Window,
}

impl std::fmt::Display for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} workers, K {}, pool {}, {} {} x {} calls, faults {}",
            self.workers,
            self.k,
            self.pool,
            self.elements,
            if self.float { "f32" } else { "i32" },
            self.calls,
            self.mix
        )?;
        if self.mix.has(Fault::Loss) {
            write!(
                f,
                " (loss {:.1}% up, {:.1}% down)",
                self.link.loss_up * 100.0,
                self.link.loss_down * 100.0
            )?;
        }
        if matches!(self.window, Window::Fixed { .. }) {
            write!(f, " (fixed window)")?;
        }
        if !self.forged_members.is_empty() {
            write!(f, " (forging members {:?})", self.forged_members)?;
        }
        Ok(())
    }
}

impl Scenario {
    /// The scenario of `options.seed`.
    pub fn draw(options: &Options, rng: &mut ChaCha8Rng) -> Scenario {
        let mix = match options.size {
            Size::Job { .. } => options.faults,
            _ => options.faults.draw(rng),
        };
        let (workers, k, pool, elements) = match options.size {
            Size::Small => {
                let workers = rng.random_range(2..=5);
                let k = [4u16, 16, 64][rng.random_range(0..3)];
                let pool = [1u32, 3, 8, 40][rng.random_range(0..4)];
                let elements = rng.random_range(1..=usize::from(k) * 48);
                (workers, k, pool, elements)
            }
            Size::Large { elements } => (4, 64, 512, elements),
            Size::Job {
                workers,
                k,
                pool,
                elements,
                ..
            } => (workers, k, pool, elements),
        };
        let mut link = LinkFaults::default();
        if let (true, Size::Job { loss, .. }) = (mix.has(Fault::Loss), options.size) {
            (link.loss_up, link.loss_down) = (loss, loss);
        } else if mix.has(Fault::Loss) {
            let max = [0.01, 0.05, 0.1, 0.3][rng.random_range(0..4)];
            link.loss_up = rng.random_range(0.0..=max);
            link.loss_down = rng.random_range(0.0..=max);
        }
        if mix.has(Fault::Duplicate) {
            link.duplicate = rng.random_range(0.0..0.05);
        }
        if mix.has(Fault::Reorder) {
            link.reorder = rng.random_range(0.0..0.05);
        }
        if mix.has(Fault::Jitter) {
            link.jitter = rng.random_range(0..200_000);
        }
        let pick = |rng: &mut ChaCha8Rng| rng.random_range(0..usize::from(workers));
        let starved = mix.has(Fault::Starve).then(|| pick(rng));
        let pause = mix.has(Fault::Pause).then(|| {
            (
                pick(rng),
                rng.random_range(0..5 * MS),
                rng.random_range(MS..1_500 * MS),
            )
        });
        let crash = mix
            .has(Fault::Crash)
            .then(|| (pick(rng), rng.random_range(0..3 * MS)));
        let restart = mix.has(Fault::Restart).then(|| {
            (
                rng.random_range(0..3 * MS),
                rng.random_range(100_000..20 * MS),
            )
        });
        let forged_members = if mix.has(Fault::Forge) {
            let count = rng.random_range(0..=usize::from(workers));
            let mut ids: Vec<usize> = (0..usize::from(workers)).collect();
            for i in 0..ids.len() {
                let j = rng.random_range(i..ids.len());
                ids.swap(i, j);
            }
            ids.truncate(count);
            ids.sort();
            ids
        } else {
            Vec::new()
        };
        Scenario {
            workers,
            k,
            pool,
            elements,
            calls: match options.size {
                Size::Job { .. } => 1,
                _ => rng.random_range(1..=3),
            },
            float: match options.size {
                Size::Job { float, .. } => float,
                _ => rng.random_bool(0.25),
            },
            mix,
            link,
            starved,
            pause,
            crash,
            restart,
            forged_members,
            give_up: match options.size {
                Size::Job {
                    give_up_ms: Some(ms),
                    ..
                } => ms.saturating_mul(MS),
                _ => GIVE_UP,
            },
            window: match options.size {
                Size::Job {
                    fixed_window: true, ..
                } => Window::POOL,
                _ => Window::Adaptive { initial: 16 },
            },
        }
    }
}

/// What a run showed.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub seed: u64,
    pub scenario: String,
    /// The trace's hash: the same seed gives the same hash.
    pub hash: u64,
    /// Datagrams the network delivered.
    pub packets: u64,
    /// Virtual time the run took.
    pub virtual_ns: Nanos,
    /// Every invariant the run broke, in words.
    pub violations: Vec<String>,
    /// The links' faults in the faulty phase.
    pub link: LinkFaults,
    /// Data (contributions and results) the links lost in the faulty phase.
    pub lost_data: u64,
    /// Queries, statuses (nudges among them) and announcements the links
    /// lost in the faulty phase: each is a packet recovery must make up
    /// for too. (Handshakes are contributions: data.)
    pub lost_control: u64,
    /// Queries sent and statuses received by every worker, faulty phase.
    pub queries: u64,
    pub statuses: u64,
    /// Rounds the switch held open longer than 1 ms (the agent's shortest
    /// wait before it probes a round) from their first contribution to
    /// their completion, faulty phase: the rounds a member may rightly ask
    /// about, whether a contribution was lost or its member was slow (a
    /// starved or paused worker).
    pub held_up: u64,
    /// Every worker's statistics of the faulty phase, summed.
    pub stats: Stats,
    /// All-reduces completed and failed (every phase).
    pub completed: u64,
    pub failed: u64,
    /// The readable trace, when asked for.
    pub trace: Vec<String>,
}

/// A host's socket and CPU: what the agent's driver would be.
#[derive(Debug, Default)]
struct Host {
    inbox: VecDeque<Vec<u8>>,
    busy_until: Nanos,
    wake_at: Option<Nanos>,
    wake_generation: u64,
    stalled_until: Nanos,
    crashed: bool,
}

/// A data tensor of one worker for one call.
#[derive(Debug, Clone)]
enum Tensor {
    I32(Vec<i32>),
    F32(Vec<f32>),
}

impl Tensor {
    fn len(&self) -> usize {
        match self {
            Tensor::I32(v) => v.len(),
            Tensor::F32(v) => v.len(),
        }
    }
}

/// What one element of a call's result must be ([`World::check`]).
enum Want {
    /// The exact sum.
    I32(i32),
    /// The exact sum and the bound a result may miss it by.
    F32(f64, f64),
}

impl Want {
    /// Element `e` of the sum of `inputs`; for floats, with the bound of
    /// a chunk whose largest exponent is `exponent`, over `n` workers.
    fn of(inputs: &[Tensor], e: usize, exponent: u8, n: u16) -> Want {
        match inputs.first() {
            Some(Tensor::F32(_)) => {
                let exact: f64 = inputs
                    .iter()
                    .map(|t| match t {
                        Tensor::F32(v) => f64::from(v[e]),
                        Tensor::I32(_) => 0.0,
                    })
                    .sum();
                Want::F32(
                    exact,
                    inagg_host_agent::quant::error_bound(exponent, n, exact),
                )
            }
            _ => Want::I32(inputs.iter().fold(0i32, |s, t| match t {
                Tensor::I32(v) => s.wrapping_add(v[e]),
                Tensor::F32(_) => s,
            })),
        }
    }

    /// How element `e` of `got` misses it, in words; `None` when it does not.
    fn missed_by(&self, got: &Tensor, e: usize) -> Option<String> {
        match (self, got) {
            (Want::I32(want), Tensor::I32(g)) => {
                (g[e] != *want).then(|| format!("got {}, the exact sum is {want}", g[e]))
            }
            (Want::F32(exact, bound), Tensor::F32(g)) => ((f64::from(g[e]) - exact).abs() > *bound
                || g[e].is_nan())
            .then(|| format!("got {}, exact {exact}, bound {bound}", g[e])),
            _ => Some("a result of another type".into()),
        }
    }
}

/// How each worker's part of a call ended.
#[derive(Debug)]
enum Ending {
    Done,
    Failed(String),
    Crashed,
}

/// The world of one run.
struct World {
    net: Net,
    sc: Scenario,
    spec: JobSpec,
    hosts: Vec<Host>,
    /// Datagrams workers sent, for replays.
    recorded: Vec<(SocketAddr, Vec<u8>)>,
    record: bool,
    /// Whether forgers, replays and link faults act now.
    faulty: bool,
    violations: Vec<String>,
    /// Results the switch sent in answer to queries, per (slot, set,
    /// member), since the set's round completed ([`World::bound_amplification`]).
    answered: BTreeMap<(u16, u8, u16), u32>,
    /// When each round's first contribution reached the switch, by
    /// (slot, set, packet id), until the round completes.
    opened: HashMap<(u16, u8, u32), Nanos>,
    held_up: u64,
    completed: u64,
    failed: u64,
    queries: u64,
    statuses: u64,
    stats: Stats,
}

/// Runs one seed.
pub fn run(options: &Options) -> Outcome {
    let mut rng = ChaCha8Rng::seed_from_u64(options.seed);
    let sc = Scenario::draw(options, &mut rng);
    let switch_addr: SocketAddr = ([10, 0, 0, 1], 47000).into();
    let hosts: Vec<SocketAddr> = (0..sc.workers)
        .map(|i| SocketAddr::from(([10, 0, 1, i as u8 + 1], 5000)))
        .collect();
    let spec = JobSpec::new(JOB, hosts.clone(), 0, sc.pool, sc.k);
    let mut switch = Switch::new(SwitchConfig::default());
    switch
        .create_job(spec.clone())
        .expect("the simulator's job fits a default switch");
    let mut net = Net::new(switch, switch_addr, hosts, rng, options.readable);
    if let Size::Job {
        switch_ns: Some(ns),
        ..
    } = options.size
    {
        net.switch_ns = ns;
    }
    let mut world = World {
        net,
        hosts: (0..sc.workers).map(|_| Host::default()).collect(),
        spec,
        recorded: Vec::new(),
        record: false,
        faulty: false,
        violations: Vec::new(),
        answered: BTreeMap::new(),
        opened: HashMap::new(),
        held_up: 0,
        completed: 0,
        failed: 0,
        queries: 0,
        statuses: 0,
        stats: Stats::default(),
        sc,
    };
    world.phases(options.seed);
    let sc = &world.sc;
    Outcome {
        seed: options.seed,
        scenario: sc.to_string(),
        hash: world.net.trace.hash(),
        packets: world.net.counts.delivered,
        virtual_ns: world.net.now,
        violations: world.violations,
        link: sc.link,
        lost_data: world.net.counts.lost_data,
        lost_control: world.net.counts.lost_control,
        queries: world.queries,
        statuses: world.statuses,
        held_up: world.held_up,
        stats: world.stats,
        completed: world.completed,
        failed: world.failed,
        trace: world.net.trace.lines().to_vec(),
    }
}

impl World {
    fn phases(&mut self, seed: u64) {
        let mut session = 0u64;
        let mut agents = self.agents(seed, session);
        if self.sc.mix.has(Fault::Replay) {
            self.record = true;
            self.call(&mut agents, 0, false);
            self.record = false;
            session += 1;
            agents = self.agents(seed, session);
        }
        self.start_faults();
        let mut broken = false;
        for c in 0..self.sc.calls {
            let endings = self.call(&mut agents, c + 1, true);
            let any_failed = endings.iter().any(|e| !matches!(e, Ending::Done));
            if any_failed && !self.sc.mix.may_stall() {
                self.violations.push(format!(
                    "liveness: call {} failed without a fault that may stall it: {}",
                    c + 1,
                    describe(&endings)
                ));
            }
            if any_failed {
                broken = true;
                break;
            }
        }
        self.stop_faults();
        if broken {
            session += 1;
            agents = self.agents(seed, session);
            self.hosts.iter_mut().for_each(|h| h.crashed = false);
        }
        let endings = self.call(&mut agents, 100, false);
        if endings.iter().any(|e| !matches!(e, Ending::Done)) {
            self.violations.push(format!(
                "liveness: after the faults stopped, the next all-reduce failed: {}",
                describe(&endings)
            ));
        }
    }

    /// Every worker's agent for session `session`.
    fn agents(&self, seed: u64, session: u64) -> Vec<Agent> {
        (0..self.sc.workers)
            .map(|w| {
                let mut c = AgentConfig::new(
                    self.net.switch_addr,
                    JOB,
                    w,
                    self.sc.workers,
                    self.sc.pool,
                    self.sc.k,
                );
                c.bind = self.net.hosts[usize::from(w)];
                c.give_up_after = std::time::Duration::from_nanos(self.sc.give_up);
                c.window = self.sc.window;
                let key = seed
                    .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                    .wrapping_add(session << 20 | u64::from(w));
                Agent::new(c, key).expect("the simulator's configuration is valid")
            })
            .collect()
    }

    /// Tensors for call `call`: each worker's values, drawn from the run's
    /// stream.
    fn tensors(&mut self, call: usize) -> Vec<Tensor> {
        let n = self.sc.elements;
        let float = self.sc.float;
        let rng = &mut self.net.rng;
        let scale = [1e-3f32, 1.0, 1e6][call % 3];
        (0..self.sc.workers)
            .map(|_| {
                if float {
                    Tensor::F32(
                        (0..n)
                            .map(|_| rng.random_range(-1.0..1.0) * scale)
                            .collect(),
                    )
                } else {
                    Tensor::I32((0..n).map(|_| rng.random()).collect())
                }
            })
            .collect()
    }

    fn start_faults(&mut self) {
        self.faulty = true;
        self.net.faults = self.sc.link;
        let now = self.net.now;
        if self.sc.mix.has(Fault::Forge) {
            self.net.at(now + 10_000, Event::Script(FORGE));
        }
        if self.sc.mix.has(Fault::Replay) {
            self.net.at(now + 10_000, Event::Script(REPLAY));
        }
        if let Some((at, _)) = self.sc.restart {
            self.net.at(now + at, Event::Script(RESTART));
        }
        if let Some((_, at)) = self.sc.crash {
            self.net.at(now + at, Event::Script(CRASH));
        }
        if let Some((_, at, _)) = self.sc.pause {
            self.net.at(now + at, Event::Script(PAUSE));
        }
    }

    fn stop_faults(&mut self) {
        self.faulty = false;
        self.net.faults = LinkFaults::default();
        // The switch is back if a restart was under way.
        if self.net.state.switch.job(JOB).is_err() {
            self.reinstall();
        }
        // Let what is in flight land (and any late replay) before the
        // clean call.
        let quiet = self.net.now + 100 * MS;
        while let Some(ev) = self.peek_before(quiet) {
            self.handle(ev);
        }
        self.net.now = self.net.now.max(quiet);
        for h in &mut self.hosts {
            h.inbox.clear();
            h.stalled_until = 0;
        }
    }

    fn peek_before(&mut self, until: Nanos) -> Option<Event> {
        // Events are taken in order; one past `until` is put back.
        let ev = self.net.next_event()?;
        if self.net.now > until {
            let at = self.net.now;
            self.net.now = until;
            self.net.at(at, ev);
            return None;
        }
        Some(ev)
    }

    fn reinstall(&mut self) {
        let spec = self.spec.clone();
        if let Err(e) = self.net.state.switch.create_job(spec) {
            self.violations
                .push(format!("simulator: reinstall failed: {e}"));
        }
    }

    /// One all-reduce call of every worker; checks each result.
    fn call(&mut self, agents: &mut [Agent], call: usize, faulty: bool) -> Vec<Ending> {
        let mut tensors = self.tensors(call);
        let inputs = tensors.clone();
        let start = self.net.now;
        self.net.trace.note(start, &format!("call {call} begins"));
        let mut runs: Vec<Option<AllReduce<'_>>> = Vec::new();
        let mut endings: Vec<Option<Ending>> = Vec::new();
        for (agent, t) in agents.iter_mut().zip(tensors.iter_mut()) {
            let r = match t {
                Tensor::I32(v) => agent.allreduce_i32(v),
                Tensor::F32(v) => agent.allreduce_f32(v),
            };
            match r {
                Ok(r) => {
                    runs.push(Some(r));
                    endings.push(None);
                }
                Err(e) => {
                    runs.push(None);
                    endings.push(Some(Ending::Failed(e.to_string())));
                }
            }
        }
        for i in 0..runs.len() {
            if self.hosts[i].crashed {
                runs[i] = None;
                endings[i] = Some(Ending::Crashed);
            } else {
                self.step(i, &mut runs, &mut endings, start);
            }
        }
        while endings.iter().any(Option::is_none) {
            if self.net.now > start + HANG {
                self.violations.push(format!(
                    "liveness: call {call} still running {} ms after it began (a hang)",
                    HANG / MS
                ));
                break;
            }
            let Some(ev) = self.net.next_event() else {
                self.violations.push(format!(
                    "liveness: call {call}: nothing left to happen, workers still waiting"
                ));
                break;
            };
            self.handle_in_call(ev, &mut runs, &mut endings, start);
        }
        for (i, run) in runs.iter_mut().enumerate() {
            if let Some(r) = run.take() {
                let stats = r.finish();
                self.count(&stats, faulty);
                if endings[i].is_none() {
                    endings[i] = Some(Ending::Failed("hang".into()));
                }
            }
        }
        let endings: Vec<Ending> = endings.into_iter().map(|e| e.expect("set")).collect();
        let done: Vec<usize> = (0..endings.len())
            .filter(|&w| matches!(endings[w], Ending::Done))
            .collect();
        let found = self.check(call, &inputs, &done, &tensors);
        self.violations.extend(found);
        for e in &endings {
            match e {
                Ending::Done => self.completed += 1,
                _ => self.failed += 1,
            }
        }
        endings
    }

    fn count(&mut self, stats: &Stats, faulty: bool) {
        if faulty {
            self.queries += stats.queries;
            self.statuses += stats.statuses;
            self.stats.merge(stats);
        }
    }

    fn handle_in_call(
        &mut self,
        ev: Event,
        runs: &mut [Option<AllReduce<'_>>],
        endings: &mut [Option<Ending>],
        start: Nanos,
    ) {
        match ev {
            Event::Wake { host, generation } => {
                if self.hosts[host].wake_generation == generation {
                    self.hosts[host].wake_at = None;
                    self.step(host, runs, endings, start);
                }
            }
            Event::Script(CRASH) => {
                let (w, _) = self.sc.crash.expect("scripted");
                self.hosts[w].crashed = true;
                self.hosts[w].inbox.clear();
                if let Some(r) = runs[w].take() {
                    let stats = r.finish();
                    self.count(&stats, true);
                }
                endings[w] = Some(Ending::Crashed);
                self.net
                    .trace
                    .event(self.net.now, "crash", Who::Host(w), &[]);
            }
            ev => self.handle(ev),
        }
    }

    /// An event that needs no agent.
    fn handle(&mut self, ev: Event) {
        match ev {
            Event::Arrive {
                to: Node::Switch,
                from,
                bytes,
            } => {
                let completed = self.rounds_completed();
                let contribution = self.opens(&bytes);
                let served = self.net.switch_receives(from, &bytes);
                let round_done = self.rounds_completed() != completed;
                if let Some(key) = contribution.filter(|_| round_done) {
                    self.closes(key);
                }
                self.bound_amplification(&bytes, served, round_done);
            }
            Event::Arrive {
                to: Node::Host(i),
                from,
                bytes,
            } => {
                let h = &mut self.hosts[i];
                // The agent's socket is connected to the switch: the
                // kernel drops datagrams from anyone else.
                if from != self.net.switch_addr || h.crashed {
                    return;
                }
                self.net.counts.delivered += 1;
                self.net
                    .trace
                    .event(self.net.now, "recv", Who::Host(i), &bytes);
                if h.inbox.len() >= INBOX {
                    self.net.counts.lost_data += 1;
                    return;
                }
                h.inbox.push_back(bytes);
                let at = self.net.now.max(h.busy_until).max(h.stalled_until);
                self.schedule(i, at);
            }
            Event::Wake { host, generation } => {
                // Between calls: nothing runs, the wake is spent.
                if self.hosts[host].wake_generation == generation {
                    self.hosts[host].wake_at = None;
                }
            }
            Event::Script(FORGE) if self.faulty => {
                self.forge();
                let gap = self.net.rng.random_range(1_000..400_000);
                self.net.at(self.net.now + gap, Event::Script(FORGE));
            }
            Event::Script(REPLAY) if self.faulty => {
                self.replay();
                let gap = self.net.rng.random_range(1_000..100_000);
                self.net.at(self.net.now + gap, Event::Script(REPLAY));
            }
            Event::Script(RESTART) if self.faulty => {
                let _ = self.net.state.switch.delete_job(JOB);
                self.answered.clear();
                self.net
                    .trace
                    .event(self.net.now, "restart", Who::Switch, &[]);
                let (_, down) = self.sc.restart.expect("scripted");
                self.net.at(self.net.now + down, Event::Script(REINSTALL));
            }
            Event::Script(REINSTALL) => {
                if self.net.state.switch.job(JOB).is_err() {
                    self.reinstall();
                    self.net
                        .trace
                        .event(self.net.now, "reinstall", Who::Switch, &[]);
                }
            }
            Event::Script(PAUSE) if self.faulty => {
                let (w, _, len) = self.sc.pause.expect("scripted");
                self.hosts[w].stalled_until = self.net.now + len;
                self.net
                    .trace
                    .event(self.net.now, "pause", Who::Host(w), &[]);
            }
            Event::Script(_) => {}
        }
    }

    fn schedule(&mut self, host: usize, at: Nanos) {
        let h = &mut self.hosts[host];
        if h.wake_at.is_some_and(|w| w <= at) {
            return;
        }
        h.wake_generation += 1;
        h.wake_at = Some(at);
        let generation = h.wake_generation;
        self.net.at(at, Event::Wake { host, generation });
    }

    /// Host `i`'s agent runs: one receive batch, then what it sends.
    fn step(
        &mut self,
        i: usize,
        runs: &mut [Option<AllReduce<'_>>],
        endings: &mut [Option<Ending>],
        start: Nanos,
    ) {
        let now = self.net.now;
        let h = &mut self.hosts[i];
        if h.crashed {
            return;
        }
        if now < h.stalled_until {
            let at = h.stalled_until;
            self.schedule(i, at);
            return;
        }
        if self.faulty && self.sc.starved == Some(i) && self.net.rng.random_bool(0.05) {
            // Descheduled: everything waits, then comes in a burst.
            let len = self.net.rng.random_range(MS / 2..12 * MS);
            self.hosts[i].stalled_until = now + len;
            self.schedule(i, now + len);
            return;
        }
        let Some(run) = runs[i].as_mut() else {
            self.hosts[i].inbox.clear();
            return;
        };
        let t = now - start;
        let n = self.hosts[i].inbox.len().min(BATCH);
        let mut bytes_in = 0;
        let mut error = None;
        for _ in 0..n {
            let d = self.hosts[i].inbox.pop_front().expect("counted");
            bytes_in += d.len() as u64;
            if let Err(e) = run.on_datagram(t, &d) {
                error = Some(e.to_string());
                break;
            }
        }
        if error.is_none() {
            if let Err(e) = run.on_idle(t, n < BATCH) {
                error = Some(e.to_string());
            }
        }
        let mut out = Vec::new();
        if error.is_none() {
            if let Err(e) = run.transmit(t, |b| out.push(b.to_vec())) {
                error = Some(e.to_string());
            }
        }
        for b in &out {
            if self.record {
                self.recorded.push((self.net.hosts[i], b.clone()));
            }
            self.net.trace.event(now, "send", Who::Host(i), b);
            self.net.send_up(i, b);
        }
        let done = run.is_done();
        let wake = start + run.next_wakeup();
        if let Some(e) = error {
            let stats = runs[i].take().expect("running").finish();
            self.count(&stats, self.faulty);
            self.net.trace.note(now, &format!("worker {i} fails: {e}"));
            if endings[i].is_none() {
                endings[i] = Some(Ending::Failed(e));
            }
            return;
        }
        if done && endings[i].is_none() {
            self.net.trace.note(now, &format!("worker {i} done"));
            endings[i] = Some(Ending::Done);
        }
        let h = &mut self.hosts[i];
        h.busy_until = now + 300 * n as u64 + 500 + bytes_in / 10;
        let next = if !h.inbox.is_empty() {
            h.busy_until
        } else if done {
            return;
        } else {
            wake.max(h.busy_until)
        };
        self.schedule(i, next);
    }

    /// The safety invariant for the workers `done` of call `call`: each
    /// one's tensor is the exact sum of every worker's input (int32) or
    /// within the documented bound of it (float: the chunk's largest
    /// exponent, the workers, the sum, `quant::error_bound`), element by
    /// element; for each worker that breaks it, its first element that
    /// does, in words. One pass over the elements for all of them: each
    /// element's sum and bound are made once, not once per worker.
    fn check(&self, call: usize, inputs: &[Tensor], done: &[usize], got: &[Tensor]) -> Vec<String> {
        let k = usize::from(self.sc.k).max(1);
        let n = self.sc.workers;
        let len = inputs.first().map_or(0, Tensor::len);
        let mut broken: Vec<Option<String>> = vec![None; done.len()];
        for c in 0..len.div_ceil(k) {
            let chunk = c * k..((c + 1) * k).min(len);
            let exponent = inputs
                .iter()
                .filter_map(|t| match t {
                    Tensor::F32(v) => v[chunk.clone()]
                        .iter()
                        .map(|x| ((x.abs().to_bits() >> 23) & 0xff) as u8)
                        .max(),
                    Tensor::I32(_) => None,
                })
                .max()
                .unwrap_or(0);
            for e in chunk {
                let want = Want::of(inputs, e, exponent, n);
                for (i, &w) in done.iter().enumerate() {
                    if broken[i].is_none() {
                        broken[i] = want
                            .missed_by(&got[w], e)
                            .map(|m| format!("safety: call {call}, worker {w}, element {e}: {m}"));
                    }
                }
            }
        }
        broken.into_iter().flatten().collect()
    }

    /// A forged datagram: every kind, from a forged member's endpoint or a
    /// stranger's, with fields that are plausible or not.
    /// Rounds the job's sets have completed so far: by their last
    /// contribution, or by a member's announcement of the result.
    fn rounds_completed(&self) -> u64 {
        let job = self.net.state.switch.job(JOB);
        job.map_or(0, |j| j.counters.results + j.counters.announcements)
    }

    /// Notes when a contribution's round first reached the switch, and
    /// returns the round's key (slot, set, packet id); `None` for anything
    /// else.
    fn opens(&mut self, bytes: &[u8]) -> Option<(u16, u8, u32)> {
        if bytes.get(1).map(|&k| Kind::from(k)) != Some(Kind::Contribution) {
            return None;
        }
        let repr = Packet::new_checked(bytes)
            .and_then(|p| Repr::parse(&p))
            .ok()?;
        let key = (repr.slot, repr.set, repr.packet_id);
        if self.opened.len() >= OPEN_ROUNDS && !self.opened.contains_key(&key) {
            // Forged and replayed rounds that never complete: forgotten
            // rather than kept without bound.
            self.opened.clear();
        }
        self.opened.entry(key).or_insert(self.net.now);
        Some(key)
    }

    /// The round `key` completed: held up if it was open longer than
    /// [`HELD_UP`].
    fn closes(&mut self, key: (u16, u8, u32)) {
        if let Some(at) = self.opened.remove(&key) {
            if self.faulty && self.net.now > at + HELD_UP {
                self.held_up += 1;
            }
        }
    }

    /// The amplification bound (docs/PROTOCOL.md): a query, 24 bytes
    /// whoever sends it from a member's endpoint, brings back the set's
    /// stored result to that member at most twice per round; every other
    /// answer is a status. `round_done`: `bytes` completed a round (a
    /// round completing in the set starts its count afresh).
    fn bound_amplification(&mut self, bytes: &[u8], served: Served, round_done: bool) {
        // Most packets neither complete a round nor are a query answered
        // with a result: those are not parsed again.
        let query = bytes.get(1).map(|&k| Kind::from(k)) == Some(Kind::Query);
        let answered = query && served.results > 0;
        if !round_done && !answered {
            return;
        }
        let Ok(repr) = Packet::new_checked(bytes).and_then(|p| Repr::parse(&p)) else {
            return;
        };
        let key = (repr.slot, repr.set, repr.worker);
        if round_done {
            self.answered.retain(|k, _| (k.0, k.1) != (key.0, key.1));
        }
        if !answered {
            return;
        }
        let n = self.answered.entry(key).or_insert(0);
        *n += served.results;
        if *n == 3 {
            self.violations.push(format!(
                "amplification at {} ns: member {}'s queries about slot {} set {} brought back \
                 its result three times in one round",
                self.net.now, key.2, key.0, key.1
            ));
        }
    }

    fn forge(&mut self) {
        let rng = &mut self.net.rng;
        let members = &self.sc.forged_members;
        let (from, worker) = if !members.is_empty() && rng.random_bool(0.7) {
            let m = members[rng.random_range(0..members.len())];
            (self.net.hosts[m], m as u16)
        } else {
            let stranger: SocketAddr = ([10, 0, 9, rng.random_range(1..=250)], 5000).into();
            (stranger, rng.random_range(0..self.sc.workers))
        };
        let kind = [
            Kind::Contribution,
            Kind::Contribution,
            Kind::Contribution,
            Kind::Query,
            Kind::Result,
            Kind::Status,
        ][rng.random_range(0..6)];
        let slot = if rng.random_bool(0.9) {
            rng.random_range(0..self.sc.pool) as u16
        } else {
            rng.random()
        };
        let epoch: u32 = rng.random_range(0..8);
        let repr = Repr {
            kind,
            set: rng.random_range(0..2),
            priority: 0,
            job: JOB,
            slot,
            worker,
            generation: 0,
            exponent: rng.random(),
            count: [0u16, 0, 1, 2][rng.random_range(0..4)],
            elements: self.sc.k,
            packet_id: if rng.random_bool(0.8) {
                epoch << 16 | u32::from(slot)
            } else {
                rng.random()
            },
        };
        let len = match kind {
            Kind::Query => HEADER_LEN,
            Kind::Status => HEADER_LEN + 12,
            _ => HEADER_LEN + 4 * usize::from(self.sc.k),
        };
        let mut bytes = vec![0u8; len];
        rng.fill(&mut bytes[HEADER_LEN..]);
        repr.emit_summed(&mut bytes[..HEADER_LEN]);
        self.net.inject_up(from, &bytes);
    }

    /// A replayed datagram of an earlier session (or a burst of them),
    /// from the endpoint it first came from.
    fn replay(&mut self) {
        if self.recorded.is_empty() {
            return;
        }
        let rng = &mut self.net.rng;
        let first = rng.random_range(0..self.recorded.len());
        let burst = if rng.random_bool(0.1) { 64 } else { 1 };
        for i in first..(first + burst).min(self.recorded.len()) {
            let (from, bytes) = self.recorded[i].clone();
            self.net.inject_up(from, &bytes);
        }
    }
}

fn describe(endings: &[Ending]) -> String {
    endings
        .iter()
        .enumerate()
        .map(|(w, e)| match e {
            Ending::Done => format!("worker {w} done"),
            Ending::Crashed => format!("worker {w} crashed"),
            Ending::Failed(m) => format!("worker {w} failed: {m}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The safety check catches a result off the exact sum (int32, which
    /// wraps) or outside the float bound, a NaN and a result of the other
    /// type, and passes the right ones.
    #[test]
    fn a_result_off_the_exact_sum_or_its_bound_is_caught() {
        let ints = [Tensor::I32(vec![1, i32::MAX]), Tensor::I32(vec![2, 1])];
        let want = Want::of(&ints, 1, 0, 2);
        assert!(
            want.missed_by(&Tensor::I32(vec![0, i32::MIN]), 1).is_none(),
            "it wraps"
        );
        let off = want.missed_by(&Tensor::I32(vec![0, i32::MAX]), 1);
        assert_eq!(
            off.as_deref(),
            Some("got 2147483647, the exact sum is -2147483648")
        );
        let floats = [Tensor::F32(vec![1.0]), Tensor::F32(vec![2.0])];
        let exponent = ((2.0f32.to_bits() >> 23) & 0xff) as u8;
        let want = Want::of(&floats, 0, exponent, 2);
        let Want::F32(exact, bound) = want else {
            panic!("a float sum")
        };
        assert_eq!(exact, 3.0);
        assert!(bound > 0.0 && bound < 0.01, "{bound}");
        assert!(want.missed_by(&Tensor::F32(vec![3.0]), 0).is_none());
        let within = (3.0 + bound / 2.0) as f32;
        assert!(want.missed_by(&Tensor::F32(vec![within]), 0).is_none());
        let beyond = (3.0 + 4.0 * bound) as f32;
        assert!(want.missed_by(&Tensor::F32(vec![beyond]), 0).is_some());
        assert!(want.missed_by(&Tensor::F32(vec![f32::NAN]), 0).is_some());
        assert!(
            want.missed_by(&Tensor::I32(vec![3]), 0).is_some(),
            "the other type"
        );
    }
}
