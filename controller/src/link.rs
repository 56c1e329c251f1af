//! The controller's connection to one aggregator and what it does over
//! it: reach it and learn it (memory, K, data address), bring it in step
//! with what the book wants, read its counters. What it learns goes into
//! the aggregator's [`Site`] in the book.

use std::collections::BTreeMap;

use inagg_switch_api::{FaultConfig, GroupInfo, GroupSpec, JobSpec};

use crate::alloc::SlotAllocator;
use crate::book::Desired;
use crate::site::Site;
use inagg_controller_api::{NamedJobCounters, SiteStats};
use inagg_switch_control::target::{ControlError, Target};

/// Opens a connection to an aggregator.
pub type Connector = Box<dyn Fn() -> Result<Box<dyn Target + Send>, ControlError> + Send>;

/// The connection to one aggregator.
pub struct Link {
    connect: Connector,
    target: Option<Box<dyn Target + Send>>,
}

impl Link {
    /// Not connected yet.
    pub fn new(connect: Connector) -> Link {
        Link {
            connect,
            target: None,
        }
    }

    /// Whether it is connected.
    pub fn is_up(&self) -> bool {
        self.target.is_some()
    }

    /// The groups the aggregator holds, if it answers.
    pub fn groups(&mut self) -> Option<Vec<GroupInfo>> {
        self.target.as_mut()?.groups().ok()
    }

    /// Drops the connection (the controller is stopping: its claim on the
    /// aggregator ends with it).
    pub fn close(&mut self) {
        self.target = None;
    }

    /// Connects if not connected; on the first contact learns the memory
    /// size and the data address. Returns whether the site is up.
    pub fn ensure(&mut self, site: &mut Site) -> bool {
        if self.target.is_some() {
            return true;
        }
        let attempt = (|| {
            let mut t = (self.connect)()?;
            let info = t.info()?;
            let data = t.data_addr()?;
            Ok::<_, ControlError>((t, info, data))
        })();
        match attempt {
            Ok((t, info, data)) => {
                let slots = info.slots;
                tracing::info!(
                    "reached the {} ({}) at {}: {slots} slots",
                    site.role,
                    t.kind(),
                    site.control
                );
                site.kind = t.kind();
                self.target = Some(t);
                // Filled from the stored placements by `Core::reserve_site`.
                site.alloc = Some(SlotAllocator::new(slots));
                site.elements = Some((info.max_elements, info.fixed_elements));
                site.memory = info.memory;
                // An emulator bound to 0.0.0.0 is reached at its control host.
                site.data_addr = site.data_given.or(data.map(|mut a| {
                    if a.ip().is_unspecified() {
                        a.set_ip(site.control.ip());
                    }
                    a
                }));
                site.error = None;
                site.up = true;
                true
            }
            Err(e) => {
                self.fail(site, e);
                false
            }
        }
    }
    /// Marks the aggregator down with `e`: the connection is dropped and
    /// it holds nothing as far as the controller knows.
    pub fn fail(&mut self, site: &mut Site, e: ControlError) {
        if self.target.is_some() || site.error.is_none() {
            tracing::warn!("{} is down: {e}", site.name());
        }
        self.target = None;
        site.up = false;
        site.held.clear();
        site.error = Some(e.to_string());
    }
    /// Makes the target hold exactly `want` (jobs by id, hand-made groups
    /// by id) and the priority map. A connection error marks the site down
    /// (retried next time); a refused job or group is reported and the rest
    /// still installed.
    pub fn sync(
        &mut self,
        site: &mut Site,
        want: &Desired,
        priority: &BTreeMap<u8, u8>,
    ) -> Vec<String> {
        let mut problems = Vec::new();
        let Some(t) = self.target.as_mut() else {
            return problems;
        };
        let result = (|| {
            let have: BTreeMap<u16, JobSpec> =
                t.jobs()?.into_iter().map(|j| (j.spec.id, j.spec)).collect();
            site.held = have.clone();
            for (id, spec) in &have {
                if want.jobs.get(id) != Some(spec) {
                    t.delete_job(*id)?;
                    site.held.remove(id);
                    tracing::info!("removed job {id} from the {}", site.role);
                }
            }
            // Stale groups go before jobs are created: a job's group may
            // take a freed id.
            let groups = hand_groups(t.as_mut(), !want.groups.is_empty())?;
            for (id, spec) in &groups {
                if want.groups.get(id) != Some(spec) {
                    t.delete_group(*id)?;
                }
            }
            site.refusals.retain(|id, _| want.placed.contains(id));
            for (id, spec) in &want.jobs {
                if have.get(id) == Some(spec) {
                    continue;
                }
                match refusal(t.create_job(spec))? {
                    None => {
                        site.refusals.remove(id);
                        site.held.insert(*id, spec.clone());
                        let (base, end) = (spec.pool_base, spec.pool_end());
                        let (n, g) = (spec.workers.len(), spec.generation);
                        tracing::info!(
                            "installed job {id} on the {}: slots [{base}, {end}), {n} workers, \
                             generation {g}",
                            site.role
                        );
                    }
                    // Said once, not at every reconcile that tries again.
                    Some(why) => {
                        let refusal = (spec.generation, why);
                        if site.refusals.get(id) != Some(&refusal) {
                            problems
                                .push(format!("the {} refused job {id}: {}", site.role, refusal.1));
                            site.refusals.insert(*id, refusal);
                        }
                    }
                }
            }
            for (id, spec) in &want.groups {
                if groups.get(id) != Some(spec) {
                    problems.extend(refusal(t.create_group(spec))?);
                }
            }
            sync_priority(t.as_mut(), priority)?;
            sync_faults(t.as_mut(), site, want.faults)
        })();
        if let Err(e) = result {
            problems.push(e.to_string());
            if !matches!(e, ControlError::Job(_) | ControlError::Api(_)) {
                self.fail(site, e);
            }
        }
        problems
    }
    /// The site's counters and its jobs', named by `name_of`.
    pub fn stats(&mut self, site: &Site, name_of: impl Fn(u16) -> Option<String>) -> SiteStats {
        let read = self.target.as_mut().map(|t| {
            let counters = t.counters()?;
            let jobs = t.jobs()?;
            Ok::<_, ControlError>((counters, jobs))
        });
        let (counters, jobs) = match read {
            // Not connected: `down` says why.
            None => (Err(site.down().unwrap_or_default()), Vec::new()),
            Some(Err(e)) => (Err(e.to_string()), Vec::new()),
            Some(Ok((c, jobs))) => (
                Ok(c),
                jobs.into_iter()
                    .map(|j| NamedJobCounters {
                        name: name_of(j.spec.id),
                        id: j.spec.id,
                        counters: j.counters,
                        tenant: None,
                    })
                    .collect(),
            ),
        };
        SiteStats {
            role: site.role.into(),
            control: site.control,
            counters,
            jobs,
        }
    }
}

/// A target's answer to an install: `None` when done, the reason when it
/// refused (the request's fault, reported while the rest goes on), or an
/// error of the connection (which marks the site down).
fn refusal(r: Result<(), ControlError>) -> Result<Option<String>, ControlError> {
    match r {
        Ok(()) => Ok(None),
        Err(
            e @ (ControlError::Job(_) | ControlError::Api(_) | ControlError::Unsupported { .. }),
        ) => Ok(Some(e.to_string())),
        Err(e) => Err(e),
    }
}

/// The hand-made groups a target holds. A target without groups holds none;
/// that is an error only when some are wanted.
fn hand_groups(t: &mut dyn Target, wanted: bool) -> Result<BTreeMap<u16, GroupSpec>, ControlError> {
    let groups = match t.groups() {
        Ok(g) => g,
        Err(ControlError::Unsupported { .. }) if !wanted => return Ok(BTreeMap::new()),
        Err(e) => return Err(e),
    };
    Ok(groups
        .into_iter()
        .filter(|g| g.job.is_none())
        .map(|g| {
            (
                g.id,
                GroupSpec {
                    id: g.id,
                    members: g.members,
                },
            )
        })
        .collect())
}

/// Installs the class -> queue entries the target lacks (targets without
/// queues are left alone).
fn sync_priority(t: &mut dyn Target, want: &BTreeMap<u8, u8>) -> Result<(), ControlError> {
    if want.is_empty() {
        return Ok(());
    }
    let have: BTreeMap<u8, u8> = match t.queues() {
        Ok(r) => r.map.iter().map(|m| (m.class, m.queue)).collect(),
        Err(ControlError::Unsupported { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    for (&class, &queue) in want {
        if have.get(&class).copied().unwrap_or(0) != queue {
            t.set_priority_queue(class, queue)?;
        }
    }
    Ok(())
}

/// Reads the aggregator's faults into `site` and, where the controller
/// holds it to others, puts those back: whoever changed them (a
/// connection that displaced the controller, anyone while the controller
/// was down), they do not outlive the controller's next look. A target
/// without faults (a P4 switch) has nothing to hold.
fn sync_faults(
    t: &mut (dyn Target + Send),
    site: &mut Site,
    want: Option<FaultConfig>,
) -> Result<(), ControlError> {
    let found = match t.faults() {
        Ok(found) => found,
        Err(ControlError::Unsupported { .. }) => return Ok(()),
        Err(e) => return Err(e),
    };
    site.faults_found = Some(found);
    match want {
        Some(want) if want != found => {
            t.set_faults(want)?;
            tracing::warn!(
                "{}: faults were {found:?}, not what the controller holds it to; put back {want:?}",
                site.name()
            );
            Ok(())
        }
        _ => Ok(()),
    }
}
