//! The controller's state as it runs: the [`Book`] (pure bookkeeping), a
//! [`Link`] to each aggregator, and the database. Every change to the book
//! is written before the request that made it is answered; `reconcile`
//! brings the aggregators in step with the book.

use crate::audit::Audit;
use inagg_controller_api::{Caller, Event};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::Deref;

use inagg_switch_api::GroupInfo;

use crate::book::{Book, CoreError, Dirty, GroupRecord, JobRecord};
use crate::link::Link;
use crate::site::Site;
use crate::store::Store;
use inagg_controller_api::{GroupDecl, GroupStatus, JobDecl, JobStatus, SiteStats, TenantDecl};

const GENERATION_KEY: &str = "next_generation";
const PRIORITY_KEY: &str = "priority";
const GROUPS_KEY: &str = "groups";
const TENANTS_KEY: &str = "tenants";
const FAULTS_KEY: &str = "faults";

/// Everything the controller holds, behind one lock. Reads go to the
/// book (`Deref`); changes go through the methods here, which write them.
pub struct Core {
    book: Book,
    links: Vec<Link>,
    store: Store,
    audit: Audit,
}

impl Deref for Core {
    type Target = Book;

    fn deref(&self) -> &Book {
        &self.book
    }
}

impl Core {
    /// Loads the stored state; pools are re-reserved when each aggregator
    /// is first reached.
    pub fn load(store: Store, sites: Vec<(Site, Link)>) -> Result<Core, CoreError> {
        let jobs: BTreeMap<String, JobRecord> = store
            .jobs::<JobRecord>()?
            .into_iter()
            .map(|j| (j.decl.name.clone(), j))
            .collect();
        let next_generation = store.meta(GENERATION_KEY)?.unwrap_or(1);
        let priority = store.meta(PRIORITY_KEY)?.unwrap_or_default();
        let groups = store.meta(GROUPS_KEY)?.unwrap_or_default();
        let (sites, links) = sites.into_iter().unzip();
        let mut book = Book::new(jobs, groups, priority, next_generation, sites)?;
        book.tenants = store.meta(TENANTS_KEY)?.unwrap_or_default();
        book.faults = store.meta(FAULTS_KEY)?.unwrap_or_default();
        let audit = Audit::load(&store)?;
        let mut core = Core {
            book,
            links,
            store,
            audit,
        };
        core.save()?;
        Ok(core)
    }

    /// Records a change asked of the controller in the audit; a failure
    /// to write it is logged, not the request's.
    pub fn record(&mut self, who: (&Caller, SocketAddr), what: String, refused: Option<String>) {
        match self.audit.record(&self.store, who, what, refused) {
            Ok(e) => tracing::info!(
                seq = e.seq,
                "{} from {}: {} ({})",
                e.caller,
                e.peer,
                e.what,
                e.refused.as_deref().unwrap_or("done")
            ),
            Err(e) => tracing::warn!("audit entry not written: {e}"),
        }
    }

    /// The last `last` audit entries `caller` may read, oldest first.
    pub fn events(&self, caller: &Caller, last: u32) -> Result<Vec<Event>, CoreError> {
        Ok(Audit::read(&self.store, caller, last)?)
    }

    /// Writes what the book changed.
    fn save(&mut self) -> Result<(), CoreError> {
        let Dirty {
            jobs,
            generation,
            priority,
            groups,
            tenants,
            faults,
        } = self.book.take_dirty();
        if faults {
            self.store.set_meta(FAULTS_KEY, &self.book.faults)?;
        }
        for name in jobs {
            match self.book.jobs.get(&name) {
                Some(job) => self.store.put_job(&name, job)?,
                None => self.store.delete_job(&name)?,
            }
        }
        if generation {
            self.store
                .set_meta(GENERATION_KEY, &self.book.next_generation())?;
        }
        if priority {
            self.store.set_meta(PRIORITY_KEY, &self.book.priority)?;
        }
        if groups {
            self.store.set_meta(GROUPS_KEY, &self.book.groups)?;
        }
        if tenants {
            self.store.set_meta(TENANTS_KEY, &self.book.tenants)?;
        }
        Ok(())
    }

    /// Runs a change on the book and writes it (also what a failed change
    /// did change: a generation it took, say).
    fn change<T>(
        &mut self,
        f: impl FnOnce(&mut Book) -> Result<T, CoreError>,
    ) -> Result<T, CoreError> {
        let out = f(&mut self.book);
        self.save()?;
        out
    }

    /// Admits a job for `tenant` (None: the operator): checks it and the
    /// tenant's quota, gives it an id, places its pool.
    pub fn create(&mut self, decl: JobDecl, tenant: Option<&str>) -> Result<JobStatus, CoreError> {
        self.change(|b| b.create_as(decl, tenant))
    }

    /// Adds a tenant; returns its credential.
    pub fn create_tenant(&mut self, decl: TenantDecl) -> Result<String, CoreError> {
        self.change(|b| b.create_tenant(decl))
    }

    /// Gives a tenant a new credential; returns it.
    pub fn rotate_tenant(&mut self, name: &str) -> Result<String, CoreError> {
        self.change(|b| b.rotate_tenant(name))
    }

    /// Removes a tenant without jobs.
    pub fn delete_tenant(&mut self, name: &str) -> Result<(), CoreError> {
        self.change(|b| b.delete_tenant(name))
    }

    /// Removes a job, frees its pool, and places waiting jobs in the room.
    pub fn delete(&mut self, name: &str) -> Result<(), CoreError> {
        self.change(|b| b.delete(name))
    }

    /// Records a worker's endpoint (`Book::register`).
    pub fn register(
        &mut self,
        name: &str,
        rank: u16,
        endpoint: std::net::SocketAddr,
    ) -> Result<(), CoreError> {
        self.change(|b| b.register(name, rank, endpoint))
    }

    /// Takes back a registration that ended without admission
    /// (`Book::withdraw`).
    pub fn withdraw(
        &mut self,
        name: &str,
        rank: u16,
        endpoint: std::net::SocketAddr,
        generation: u16,
    ) -> Result<bool, CoreError> {
        self.change(|b| b.withdraw(name, rank, endpoint, generation))
    }

    /// Makes a group by hand (installed on the switch by the next reconcile).
    pub fn create_group(&mut self, decl: GroupDecl) -> Result<GroupRecord, CoreError> {
        self.change(|b| b.create_group(decl))
    }

    /// Removes a group made by hand.
    pub fn delete_group(&mut self, name: &str) -> Result<(), CoreError> {
        self.change(|b| b.delete_group(name))
    }

    /// Sets a class -> queue entry (installed by the next reconcile).
    pub fn set_priority(&mut self, class: u8, queue: u8) -> Result<(), CoreError> {
        self.change(|b| b.set_priority(class, queue))
    }

    /// Holds an aggregator to `faults` (put there by the next reconcile).
    pub fn set_faults(
        &mut self,
        site: Option<SocketAddr>,
        faults: inagg_switch_api::FaultConfig,
        set_by: inagg_controller_api::FaultsSetBy,
    ) -> Result<(), CoreError> {
        self.change(|b| b.set_faults(site, faults, set_by))
    }

    /// Every group, the jobs' and the hand-made ones, with the counters of
    /// the aggregators that answer.
    pub fn group_status(&mut self) -> Vec<GroupStatus> {
        let mut seen: BTreeMap<u16, GroupInfo> = BTreeMap::new();
        for link in &mut self.links {
            if let Some(groups) = link.groups() {
                seen.extend(groups.into_iter().map(|g| (g.id, g)));
            }
        }
        self.book.group_status(&seen)
    }

    /// Every aggregator's counters, jobs named.
    pub fn stats(&mut self) -> Vec<SiteStats> {
        let names = self.book.names();
        let mut stats: Vec<SiteStats> = self
            .links
            .iter_mut()
            .zip(&self.book.sites)
            .map(|(link, site)| link.stats(site, |id| names.get(&id).cloned()))
            .collect();
        for job in stats.iter_mut().flat_map(|s| s.jobs.iter_mut()) {
            let record = job.name.as_ref().and_then(|n| self.book.jobs.get(n));
            job.tenant = record.and_then(|r| r.tenant.clone());
        }
        stats
    }

    /// Closes the database and every aggregator's connection (the
    /// controller is stopping): the claims on them end with it, so a
    /// controller started next may claim them at once.
    pub fn close(&mut self) {
        self.store.close();
        for link in &mut self.links {
            link.close();
        }
    }

    /// One pass over every aggregator: reconnect what is down (re-reserving
    /// its pools from the stored placements), place waiting jobs, and make
    /// each hold exactly its installed jobs. This is what re-installs the
    /// state after the switch or the controller restarts. Returns problems
    /// worth logging.
    pub fn reconcile(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        for i in 0..self.links.len() {
            let fresh = !self.links[i].is_up();
            if self.links[i].ensure(&mut self.book.sites[i]) && fresh {
                problems.extend(self.book.reserve_site(i));
            }
        }
        problems.extend(self.book.leave_down_fallbacks());
        if let Err(e) = self.book.place_waiting() {
            problems.push(e.to_string());
        }
        if let Err(e) = self.save() {
            problems.push(e.to_string());
        }
        let priority = self.book.priority.clone();
        for i in 0..self.links.len() {
            let want = self.book.desired(i);
            problems.extend(self.links[i].sync(&mut self.book.sites[i], &want, &priority));
            self.book.adopt_faults(i);
        }
        // The faults adopted at a first contact.
        if let Err(e) = self.save() {
            problems.push(e.to_string());
        }
        problems
    }
}
