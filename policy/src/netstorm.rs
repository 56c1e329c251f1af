//! NetStorm on the stack: multi-root aggregation trees across switches
//! (docs/PAPERS.md, "NetStorm").
//!
//! Each site (a data centre in the paper) has a switch and workers. A
//! [`Forest`] is one aggregation tree per root over the sites: the
//! NetStorm policy's FAPTs ([`Forest::netstorm`], computed by
//! `sched::netstorm`, the code the simulator runs) or a baseline's single
//! tree ([`Forest::single`]: the star, MLNet's k-way tree, TSEngine's
//! maximum-throughput tree).
//!
//! Tree `t` is one job (id `first_job + t`) at every site: its members are
//! the site's own workers, then the switches of the site's children in
//! that tree. A site with a parent installs the job with an upstream (the
//! parent's switch, job and this site's member id there): the switch
//! forwards each complete slot's partial sum up as one contribution, and
//! multicasts the result that comes back down (docs/PROTOCOL.md,
//! "Aggregation trees"). The root completes the slot and multicasts to its
//! workers and child switches. So every worker sends each chunk once to
//! its own site's switch and receives the sum over every worker of every
//! site, whatever the tree's depth; no host relays anything.
//!
//! Chunks are shared among the trees in proportion to their roots' quality
//! (`chunk_quota`, in chunks of K elements), contiguous ranges of the
//! tensor in tree order, so every worker cuts its tensor the same way; a
//! worker runs its trees' all-reduces at once, one thread each.
//!
//! Retransmission, shadow sets and exponent negotiation are the
//! single-switch protocol's: a retransmission that reaches a switch whose
//! partial sum is still away asks the parent again, and each result's
//! count is the number of workers in the sum, so agents configured with the
//! total worker count check completeness and scale exactly as on one
//! switch. Only each switch job's members are bounded by the slot bitmap
//! (64); the total under one sum is bounded by the count field (65535).
//!
//! Network awareness is live ([`awareness`]): the switches' ports time
//! what they send back to back, and the [`awareness::Scheduler`] plans the
//! fixed roots' trees again every UPDATE_TIME from those estimates; a new
//! forest replaces the old at a barrier ([`Deployment::replace`], the next
//! generation) and agents [`ForestWorker::retarget`]. The barrier itself
//! is a service ([`consistency`]): workers ask it for the topology before
//! each push, and it answers when every worker has asked.
//!
//! Auxiliary paths are live too ([`Detours`]): each tree edge can be given
//! the next edge-disjoint path between its ends (Algorithm 3). The child's
//! switch sends a partial sum the long way round when the link to its
//! parent is busy, the switches on the way forward it unchanged by their
//! relay tables, and the parent takes it as the child's contribution
//! (docs/PROTOCOL.md, "Auxiliary paths").

use std::net::SocketAddr;

use anyhow::{bail, ensure, Context, Result};
use inagg_host_agent::{AgentConfig, Stats, Worker};
use inagg_sched::netstorm::{self, Graph, Tree};
use inagg_switch_api::{AuxPath, Detour, JobSpec, RelayKey, RelaySpec, Upstream};
use inagg_switch_control::target::Target;

pub mod awareness;
pub mod consistency;

/// One site: its switch's control target and data-plane endpoint.
pub struct Site {
    /// The switch's control plane.
    pub target: Box<dyn Target + Send>,
    /// The switch's data-plane endpoint (where its workers and its child
    /// sites' switches send).
    pub data: SocketAddr,
}

/// Aggregation trees over the sites and the share of the tensor each
/// carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Forest {
    /// One tree per root; `parent[v]` is site v's next hop to the root.
    pub trees: Vec<Tree>,
    /// Each tree's weight in the chunk split (NetStorm: its root's
    /// quality 1 / D(FAPT_r)).
    pub shares: Vec<f64>,
}

impl Forest {
    /// NetStorm's multi-root forest: the `roots` best roots by quality,
    /// each with its fastest aggregation path tree, chunks in proportion
    /// to quality.
    pub fn netstorm(graph: &Graph, roots: usize) -> Forest {
        Forest::with_roots(graph, &netstorm::select_roots(graph, roots))
    }

    /// The fastest aggregation path trees of the given roots on `graph`,
    /// chunks in proportion to quality (the roots stay; trees and shares
    /// follow the graph).
    pub fn with_roots(graph: &Graph, roots: &[usize]) -> Forest {
        let quality = netstorm::qualities(graph);
        Forest {
            trees: roots.iter().map(|&r| netstorm::fapt(graph, r)).collect(),
            shares: roots.iter().map(|&r| quality[r]).collect(),
        }
    }

    /// Whether some tree has the edge {a, b}.
    pub fn uses(&self, (a, b): (usize, usize)) -> bool {
        self.trees
            .iter()
            .any(|t| t.parent.get(a) == Some(&Some(b)) || t.parent.get(b) == Some(&Some(a)))
    }

    /// One tree carrying the whole tensor (the baselines).
    pub fn single(tree: Tree) -> Forest {
        Forest {
            trees: vec![tree],
            shares: vec![1.0],
        }
    }

    /// Checks the forest against `sites` sites: at least one tree, one
    /// share per tree (finite, not negative, not all zero), every tree
    /// spanning every site.
    pub fn check(&self, sites: usize) -> Result<()> {
        ensure!(!self.trees.is_empty(), "a forest needs at least one tree");
        ensure!(
            self.shares.len() == self.trees.len(),
            "{} shares for {} trees",
            self.shares.len(),
            self.trees.len()
        );
        ensure!(
            self.shares.iter().all(|s| s.is_finite() && *s >= 0.0)
                && self.shares.iter().sum::<f64>() > 0.0,
            "tree shares {:?} must be finite, not negative, and not all zero",
            self.shares
        );
        for (t, tree) in self.trees.iter().enumerate() {
            ensure!(
                tree.parent.len() == sites,
                "tree {t} covers {} sites, not {sites}",
                tree.parent.len()
            );
            if let Some(v) = (0..sites).find(|&v| tree.path(v).is_none()) {
                bail!("tree {t} (root {}) does not reach site {v}", tree.root);
            }
        }
        Ok(())
    }

    /// The element range of `len` each tree carries: chunks of `k`
    /// elements shared by [`netstorm::chunk_quota`], contiguous, in tree
    /// order. Every worker computes the same ranges.
    pub fn split(&self, len: usize, k: usize) -> Vec<std::ops::Range<usize>> {
        let k = k.max(1);
        let quota = netstorm::chunk_quota(len.div_ceil(k), &self.shares);
        let mut start = 0;
        quota
            .iter()
            .map(|&chunks| {
                let end = (start + chunks * k).min(len);
                let range = start..end;
                start = end;
                range
            })
            .collect()
    }
}

/// Auxiliary paths for a forest's tree edges (NetStorm's Algorithm 3) and
/// the sender's bounds.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Detours {
    /// `paths[t][v]`: the auxiliary path from site v to its parent in tree
    /// t, as sites from v to the parent with at least one between; `None`
    /// where the edge has none. Empty: no auxiliary paths at all.
    pub paths: Vec<Vec<Option<Vec<usize>>>>,
    /// PRIMARY_BUSY_BOUND (packets waiting on the primary port).
    pub busy_bound: u16,
    /// AUXILIARY_QUEUE_LENGTH (packets waiting on the detour's port).
    pub queue_length: u16,
}

impl Detours {
    /// No auxiliary paths.
    pub fn none() -> Detours {
        Detours::default()
    }

    /// For every edge of every tree of `forest` that is an overlay link,
    /// the fastest path between its ends that shares no link with the
    /// primary: Algorithm 3's first auxiliary path, with the tree edge as
    /// the primary (a tree edge need not be the fastest path between its
    /// ends, so Algorithm 3's own first path may be the detour itself).
    pub fn plan(graph: &Graph, forest: &Forest, busy_bound: u16, queue_length: u16) -> Detours {
        let paths = forest
            .trees
            .iter()
            .map(|tree| {
                (0..tree.parent.len())
                    .map(|v| {
                        let p = tree.parent[v].filter(|&p| p != v)?;
                        graph.weight(v, p)?;
                        let mut rest = graph.clone();
                        rest.edges
                            .retain(|e| (e.a, e.b) != (v, p) && (e.a, e.b) != (p, v));
                        netstorm::shortest_path(&rest, v, p)
                    })
                    .collect()
            })
            .collect();
        Detours {
            paths,
            busy_bound,
            queue_length,
        }
    }

    /// Site v's auxiliary path in tree t, if any.
    fn path(&self, t: usize, v: usize) -> Option<&[usize]> {
        self.paths.get(t)?.get(v)?.as_deref()
    }

    /// How many tree edges have an auxiliary path.
    pub fn count(&self) -> usize {
        self.paths.iter().flatten().flatten().count()
    }
}

/// The jobs' shape, the same at every site.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ForestConfig {
    /// Tree t's job id is `first_job + t` at every site.
    pub first_job: u16,
    /// Tree t's pool is `[pool_base + t * pool_size, ...)` at every site.
    pub pool_base: u32,
    /// Slots per tree (the agents' window).
    pub pool_size: u32,
    /// K.
    pub elements: u16,
    /// The trees' generation (every job of a forest has the same).
    pub generation: u16,
}

impl ForestConfig {
    /// Tree `tree`'s job id at every site.
    pub fn job(&self, tree: usize) -> Result<u16> {
        u16::try_from(usize::from(self.first_job) + tree)
            .ok()
            .context("tree job ids run past 65535; lower first_job")
    }

    fn pool_base(&self, tree: usize) -> u32 {
        self.pool_base + tree as u32 * self.pool_size
    }
}

/// The trees' jobs (and their auxiliary paths' relay entries) as
/// installed, to be removed when done.
#[derive(Debug)]
pub struct Deployment {
    /// (site, job id) of every installed job.
    installed: Vec<(usize, u16)>,
    /// (site, match fields) of every installed relay entry.
    relays: Vec<(usize, RelayKey)>,
    /// (site, match fields) under which each installed path's detours
    /// arrive at its parent.
    arrivals: Vec<(usize, RelayKey)>,
    /// Auxiliary paths left out because their detours and another path's
    /// would have matched the same fields at one site: (tree, site).
    skipped: Vec<(usize, usize)>,
}

/// Where one site's partial sums may detour, and how its parent takes them.
struct Route {
    /// At the child: the first hop of the detour.
    aux: AuxPath,
    /// At the parent: the member and the detour's last hop.
    detour: Detour,
    /// The parent site.
    parent: usize,
}

impl Deployment {
    /// Installs every tree's job at every site. `endpoints[v][t]` are the
    /// endpoints of site v's workers in tree t (worker id = position; the
    /// same workers in every tree). On an error, what was installed is
    /// removed again.
    pub fn install(
        sites: &mut [Site],
        forest: &Forest,
        config: &ForestConfig,
        endpoints: &[Vec<Vec<SocketAddr>>],
    ) -> Result<Deployment> {
        Deployment::install_with(sites, forest, &Detours::none(), config, endpoints)
    }

    /// [`Deployment::install`] with auxiliary paths: for every path of
    /// `detours`, relay entries at the sites between, the child's job sending
    /// to it when its primary link is busy and the parent's job taking its
    /// detours. Detours are matched by (job, previous hop, member), first
    /// by the relay table, so a path is left out ([`Deployment::skipped`])
    /// when its detours and another path's would match the same fields at
    /// one site: two paths of one tree entering a site from the same
    /// neighbour for members of the same id, or one path's relay entry where
    /// the other's detours arrive at their parent.
    pub fn install_with(
        sites: &mut [Site],
        forest: &Forest,
        detours: &Detours,
        config: &ForestConfig,
        endpoints: &[Vec<Vec<SocketAddr>>],
    ) -> Result<Deployment> {
        forest.check(sites.len())?;
        ensure!(
            endpoints.len() == sites.len(),
            "worker endpoints for {} sites; there are {}",
            endpoints.len(),
            sites.len()
        );
        let mut deployment = Deployment {
            installed: Vec::new(),
            relays: Vec::new(),
            arrivals: Vec::new(),
            skipped: Vec::new(),
        };
        let result = deployment.install_all(sites, forest, detours, config, endpoints);
        if let Err(e) = result {
            deployment.remove(sites).ok();
            return Err(e);
        }
        Ok(deployment)
    }

    /// The auxiliary paths left out (tree, site), see
    /// [`Deployment::install_with`].
    pub fn skipped(&self) -> &[(usize, usize)] {
        &self.skipped
    }

    /// Relay entries installed, over every site.
    pub fn relay_entries(&self) -> usize {
        self.relays.len()
    }

    fn install_all(
        &mut self,
        sites: &mut [Site],
        forest: &Forest,
        detours: &Detours,
        config: &ForestConfig,
        endpoints: &[Vec<Vec<SocketAddr>>],
    ) -> Result<()> {
        let datas: Vec<SocketAddr> = sites.iter().map(|s| s.data).collect();
        for (t, tree) in forest.trees.iter().enumerate() {
            let job = config.job(t)?;
            let routes: Vec<Option<Route>> = (0..sites.len())
                .map(|v| self.install_route(sites, detours, tree, t, job, v, endpoints))
                .collect::<Result<_>>()?;
            for (v, site) in sites.iter_mut().enumerate() {
                let workers = endpoints[v]
                    .get(t)
                    .with_context(|| format!("site {v} has no worker endpoints for tree {t}"))?;
                let mut spec = tree_job(tree, t, v, config, &datas, workers, endpoints)?;
                if let (Some(up), Some(r)) = (&mut spec.upstream, &routes[v]) {
                    up.aux = Some(r.aux);
                }
                spec.detours = routes
                    .iter()
                    .flatten()
                    .filter(|r| r.parent == v)
                    .map(|r| r.detour)
                    .collect();
                site.target.create_job(&spec).with_context(|| {
                    format!("installing tree {t}'s job {} at site {v}", spec.id)
                })?;
                self.installed.push((v, spec.id));
            }
        }
        Ok(())
    }

    /// Replaces this deployment by `forest`'s at a barrier: the old jobs
    /// go, the new ones come with `config`'s generation (give the next
    /// one: late packets of the old forest are then dropped as stale).
    pub fn replace(
        self,
        sites: &mut [Site],
        forest: &Forest,
        config: &ForestConfig,
        endpoints: &[Vec<Vec<SocketAddr>>],
    ) -> Result<Deployment> {
        self.replace_with(sites, forest, &Detours::none(), config, endpoints)
    }

    /// [`Deployment::replace`] with the new forest's auxiliary paths.
    pub fn replace_with(
        self,
        sites: &mut [Site],
        forest: &Forest,
        detours: &Detours,
        config: &ForestConfig,
        endpoints: &[Vec<Vec<SocketAddr>>],
    ) -> Result<Deployment> {
        self.remove(sites)
            .context("removing the old forest's jobs")?;
        Deployment::install_with(sites, forest, detours, config, endpoints)
    }

    /// Deletes every job this deployment installed (all are tried; the
    /// first error is returned).
    pub fn remove(self, sites: &mut [Site]) -> Result<()> {
        let mut first = None;
        for (v, key) in self.relays {
            if let Err(e) = sites[v].target.delete_relay(key) {
                first.get_or_insert(
                    anyhow::Error::from(e).context(format!("deleting relay {key} at site {v}")),
                );
            }
        }
        for (v, job) in self.installed {
            if let Err(e) = sites[v].target.delete_job(job) {
                first.get_or_insert(
                    anyhow::Error::from(e).context(format!("deleting job {job} at site {v}")),
                );
            }
        }
        first.map_or(Ok(()), Err)
    }

    /// Whether detours matching `key` at its site are already spoken for,
    /// by a relay entry or as another path's arrival. The switch looks its
    /// relay table up first, so a relay entry with a path's arrival fields
    /// would carry that path's detours past its parent, on to a job that
    /// takes them as another member's.
    fn matches(&self, key: &(usize, RelayKey)) -> bool {
        self.relays.contains(key) || self.arrivals.contains(key)
    }

    /// Site v's auxiliary path in tree t: its relay entries installed at the
    /// sites between, and what its job and its parent's need (`None`: no
    /// path, or one left out for a clash).
    #[allow(clippy::too_many_arguments)]
    fn install_route(
        &mut self,
        sites: &mut [Site],
        detours: &Detours,
        tree: &Tree,
        t: usize,
        job: u16,
        v: usize,
        endpoints: &[Vec<Vec<SocketAddr>>],
    ) -> Result<Option<Route>> {
        let Some(path) = detours.path(t, v) else {
            return Ok(None);
        };
        let parent = *path.last().context("an empty auxiliary path")?;
        ensure!(
            path.len() >= 3 && path[0] == v && tree.parent[v] == Some(parent),
            "tree {t}: {path:?} is not an auxiliary path from site {v} to its parent"
        );
        let member = member_id(tree, t, v, parent, endpoints)?;
        let entries: Vec<(usize, RelaySpec)> = path
            .windows(3)
            .map(|w| {
                let spec = RelaySpec {
                    job,
                    from: sites[w[0]].data,
                    member,
                    to: sites[w[2]].data,
                };
                (w[1], spec)
            })
            .collect();
        // What the parent's job lists, and where the detours arrive: the
        // parent matches them by the same fields, after its relay table.
        let detour = Detour {
            member,
            relay: sites[path[path.len() - 2]].data,
        };
        let arrival = detour.key(job);
        let mut keys = entries.iter().map(|(x, e)| (*x, e.key()));
        if keys.any(|k| self.matches(&k)) || self.matches(&(parent, arrival)) {
            self.skipped.push((t, v));
            return Ok(None);
        }
        for (x, spec) in entries {
            sites[x]
                .target
                .create_relay(&spec)
                .with_context(|| format!("installing relay {} at site {x}", spec.key()))?;
            self.relays.push((x, spec.key()));
        }
        self.arrivals.push((parent, arrival));
        Ok(Some(Route {
            aux: AuxPath {
                via: sites[path[1]].data,
                busy_bound: detours.busy_bound,
                queue_length: detours.queue_length,
            },
            detour,
            parent,
        }))
    }
}

/// Site v's member id in its parent p's job of tree t: after p's workers,
/// in the order of p's children.
fn member_id(
    tree: &Tree,
    t: usize,
    v: usize,
    p: usize,
    endpoints: &[Vec<Vec<SocketAddr>>],
) -> Result<u16> {
    let place = tree.children(p).iter().position(|&c| c == v);
    let workers = endpoints[p].get(t).map_or(0, Vec::len);
    let member = workers + place.context("a site that is not its parent's child")?;
    u16::try_from(member).context("member id beyond 16 bits")
}

/// Tree t's job at site v: v's workers, then its children's switches; an
/// upstream to the parent unless v is the root.
fn tree_job(
    tree: &Tree,
    t: usize,
    v: usize,
    config: &ForestConfig,
    datas: &[SocketAddr],
    workers: &[SocketAddr],
    endpoints: &[Vec<Vec<SocketAddr>>],
) -> Result<JobSpec> {
    ensure!(
        !workers.is_empty(),
        "site {v} has no workers: every site of a NetStorm overlay trains"
    );
    let job = config.job(t)?;
    let mut members = workers.to_vec();
    members.extend(tree.children(v).iter().map(|&c| datas[c]));
    // Members workers.len().. are switches: no statuses for them.
    let child_switches = (workers.len()..members.len().min(64)).fold(0u64, |m, i| m | 1 << i);
    let upstream = match tree.parent[v] {
        Some(p) if v != tree.root => Some(Upstream {
            switch: datas[p],
            job,
            member: member_id(tree, t, v, p, endpoints)?,
            aux: None,
        }),
        _ => None,
    };
    Ok(JobSpec {
        child_switches,
        detours: Vec::new(),
        id: job,
        workers: members,
        pool_base: config.pool_base(t),
        pool_size: config.pool_size,
        elements: config.elements,
        generation: config.generation,
        queues: Vec::new(),
        group: None,
        upstream,
    })
}

/// Binds `per_site[v]` workers (ids 0, 1, ...) at every site v for
/// `forest`, in site-major order, each counting every site's workers in
/// its sums; `tune` as [`ForestWorker::bind`]'s. Loopback sockets.
pub fn bind_workers(
    sites: &[Site],
    per_site: &[u16],
    forest: &Forest,
    config: &ForestConfig,
    tune: impl Fn(&mut AgentConfig),
) -> Result<Vec<ForestWorker>> {
    let total = total_workers(per_site)?;
    let bind = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut out = Vec::new();
    for (v, (site, &n)) in sites.iter().zip(per_site).enumerate() {
        for member in 0..n {
            let seat = Seat {
                member,
                rank: rank_of(per_site, v, member),
                total,
            };
            out.push(ForestWorker::bind(
                site.data, bind, forest, config, seat, &tune,
            )?);
        }
    }
    Ok(out)
}

/// Where a worker sits in a NetStorm run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seat {
    /// Its member id at its own site's switch.
    pub member: u16,
    /// Its place among every site's workers, sites in order: member ids
    /// repeat from site to site, and a session handshake needs a place
    /// per worker in the sum (`AgentConfig::rank`).
    pub rank: u16,
    /// Every site's workers together.
    pub total: u16,
}

/// The rank of member `member` of site `site`: the workers of the sites
/// before it come first.
pub(crate) fn rank_of(per_site: &[u16], site: usize, member: u16) -> u16 {
    per_site[..site].iter().sum::<u16>() + member
}

/// Every site's workers together: the count each sum must reach.
fn total_workers(per_site: &[u16]) -> Result<u16> {
    let total = per_site.iter().try_fold(0u16, |a, &n| a.checked_add(n));
    total.context("more than 65535 workers in all")
}

/// Partial sums that `forest`'s jobs have sent round an auxiliary path,
/// over every site (read before the jobs go: the counters go with them).
pub fn detours_sent(sites: &mut [Site], forest: &Forest, config: &ForestConfig) -> Result<u64> {
    let mut sum = 0;
    for (v, site) in sites.iter_mut().enumerate() {
        for t in 0..forest.trees.len() {
            let job = config.job(t)?;
            let info = site
                .target
                .job(job)
                .with_context(|| format!("reading job {job} at site {v}"))?;
            sum += info.counters.detours_sent;
        }
    }
    Ok(sum)
}

/// `endpoints[site][tree][worker]` of workers bound as [`bind_workers`]
/// binds them, as [`Deployment::install`] takes them.
pub fn site_endpoints(workers: &[ForestWorker], per_site: &[u16]) -> Vec<Vec<Vec<SocketAddr>>> {
    let mut it = workers.iter();
    per_site
        .iter()
        .map(|&n| {
            let mine: Vec<Vec<SocketAddr>> = it
                .by_ref()
                .take(usize::from(n))
                .map(ForestWorker::endpoints)
                .collect();
            let trees = mine.first().map_or(0, Vec::len);
            (0..trees)
                .map(|t| mine.iter().map(|e| e[t]).collect())
                .collect()
        })
        .collect()
}

/// One worker's side: a [`Worker`] per tree, all at its own site's switch.
pub struct ForestWorker {
    workers: Vec<Worker>,
    forest: Forest,
}

impl ForestWorker {
    /// Binds one socket per tree of `forest` on `bind`'s address (port 0:
    /// any) for the worker at `seat`, whose site's switch is at `switch`;
    /// the seat's total is the sum's count and the quantizer's divisor. `tune` adjusts each tree's
    /// agent configuration (timeouts) before its socket is made.
    pub fn bind(
        switch: SocketAddr,
        bind: SocketAddr,
        forest: &Forest,
        config: &ForestConfig,
        seat: Seat,
        tune: impl Fn(&mut AgentConfig),
    ) -> Result<ForestWorker> {
        let Seat {
            member: worker,
            rank,
            total,
        } = seat;
        let workers = (0..forest.trees.len())
            .map(|t| {
                let mut agent = AgentConfig::new(
                    switch,
                    config.job(t)?,
                    worker,
                    total,
                    config.pool_size,
                    config.elements,
                );
                agent.bind = bind;
                agent.rank = rank;
                agent.generation = config.generation;
                tune(&mut agent);
                Worker::new(agent).with_context(|| format!("worker {worker}, tree {t}"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ForestWorker {
            workers,
            forest: forest.clone(),
        })
    }

    /// This worker's endpoint in each tree's job, in tree order.
    pub fn endpoints(&self) -> Vec<SocketAddr> {
        self.workers.iter().map(Worker::local_addr).collect()
    }

    /// Moves every tree's socket to a new forest of the same tree count
    /// (the jobs reinstalled with generation `generation`).
    pub fn retarget(&mut self, forest: &Forest, generation: u16) -> Result<()> {
        ensure!(
            forest.trees.len() == self.workers.len(),
            "a forest of {} trees for a worker bound to {}",
            forest.trees.len(),
            self.workers.len()
        );
        for w in &mut self.workers {
            let c = w.config().clone();
            w.retarget(c.job, c.worker, c.workers, generation)?;
            w.rerank(c.rank)?;
        }
        self.forest = forest.clone();
        Ok(())
    }

    /// Sums `data` over every worker of every site, exactly; one statistic
    /// per tree.
    pub fn allreduce_i32(&mut self, data: &mut [i32]) -> Result<Vec<Stats>> {
        self.run(data, |w, part| w.allreduce_i32(part))
    }

    /// Sums `data` over every worker of every site, within the quantizer's
    /// bound for the total worker count; one statistic per tree.
    pub fn allreduce_f32(&mut self, data: &mut [f32]) -> Result<Vec<Stats>> {
        self.run(data, |w, part| w.allreduce_f32(part))
    }

    /// Each tree's range through its worker, the trees at once.
    fn run<T: Send>(
        &mut self,
        data: &mut [T],
        op: impl Fn(&mut Worker, &mut [T]) -> inagg_host_agent::Result<Stats> + Sync,
    ) -> Result<Vec<Stats>> {
        let k = self.workers[0].config().values_per_packet();
        let ranges = self.forest.split(data.len(), k);
        let mut parts: Vec<&mut [T]> = Vec::with_capacity(ranges.len());
        let mut rest = data;
        for r in &ranges {
            let (part, tail) = rest.split_at_mut(r.len());
            parts.push(part);
            rest = tail;
        }
        let op = &op;
        std::thread::scope(|s| {
            let handles: Vec<_> = self
                .workers
                .iter_mut()
                .zip(parts)
                .enumerate()
                .map(|(t, (w, part))| {
                    s.spawn(move || {
                        if part.is_empty() {
                            return Ok(Stats::default());
                        }
                        op(w, part).with_context(|| format!("tree {t}"))
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("tree thread panicked"))
                .collect()
        })
    }
}
