//! Aggregation trees on bmv2: the entries that make a p4/v1model job a
//! node of a multi-switch tree (docs/PROTOCOL.md, "Aggregation trees").
//!
//! A job with an upstream (its parent switch) gets two entries besides an
//! ordinary job's, both written before its job_table entry (so that no
//! contribution completes a set before the switch knows where the partial
//! sum goes) and deleted after it:
//!
//! 1. upstream_table (job) -> set_upstream(parent job, member id, parent's
//!    MAC, address and UDP port, the switch port towards it);
//! 2. parent_table (parent job, port, parent's address, UDP port) ->
//!    from_parent(job): the parent's results come down as this job's.
//!
//! The parent's port and MAC come from the topology file, as a worker's do,
//! and so do those of the auxiliary path's first switch, when the job has
//! one (`set_upstream`'s `aux` parameters; target/detour.rs has the rest of
//! auxiliary paths).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use inagg_switch_api::detour::AuxPath;
use inagg_switch_api::{JobSpec, Upstream};

use super::{
    action, entry_action, exact, ipv4, key_of, match_value, narrow, param, param_value,
    table_entity, Bmv2Target, Host, Step, SwitchState, WorkerEntry,
};
use crate::bmv2::p4info::{self, Schema};
use crate::bmv2::proto::p4::v1 as p4;
use crate::target::{ControlError, Result};

/// An upstream_table entry.
#[derive(Debug, Clone)]
pub(super) struct UpstreamEntry {
    pub(super) job: u16,
    pub(super) parent: SocketAddrV4,
    pub(super) parent_job: u16,
    pub(super) member: u16,
    pub(super) aux: Option<AuxPath>,
    /// The key, for deleting it.
    pub(super) key: p4::Entity,
}

impl UpstreamEntry {
    pub(super) fn parse(s: &Schema, e: &p4::TableEntry) -> Result<UpstreamEntry> {
        use p4info::names::{key, param as p, SET_UPSTREAM};
        let t = "upstream_table";
        let u = &s.upstream_table;
        let a = entry_action(t, e, u.set_upstream.id, SET_UPSTREAM)?;
        let v = |f, n| param_value(t, a, f, n);
        let up = &u.set_upstream;
        // Checked (it must decode and fit), not kept: the spec names the
        // parent by address.
        v(up.parent_mac, p::PARENT_MAC)?;
        v(up.egress_port, p::EGRESS_PORT)?;
        let addr: u32 = narrow(t, p::PARENT_ADDR, v(up.parent_addr, p::PARENT_ADDR)?)?;
        let port: u16 = narrow(t, p::PARENT_PORT, v(up.parent_port, p::PARENT_PORT)?)?;
        v(up.via_mac, p::VIA_MAC)?;
        v(up.via_egress_port, p::VIA_EGRESS_PORT)?;
        let via_addr: u32 = narrow(t, p::VIA_ADDR, v(up.via_addr, p::VIA_ADDR)?)?;
        let via_port: u16 = narrow(t, p::VIA_PORT, v(up.via_port, p::VIA_PORT)?)?;
        let aux = if v(up.aux, p::AUX)? == 1 {
            Some(AuxPath {
                via: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::from(via_addr), via_port)),
                busy_bound: narrow(t, p::BUSY_BOUND, v(up.busy_bound, p::BUSY_BOUND)?)?,
                queue_length: narrow(t, p::QUEUE_LENGTH, v(up.queue_length, p::QUEUE_LENGTH)?)?,
            })
        } else {
            None
        };
        Ok(UpstreamEntry {
            aux,
            job: narrow(t, key::JOB, match_value(t, e, u.job, key::JOB)?)?,
            parent: SocketAddrV4::new(Ipv4Addr::from(addr), port),
            parent_job: narrow(t, p::PARENT_JOB, v(up.parent_job, p::PARENT_JOB)?)?,
            member: narrow(t, p::MEMBER, v(up.member, p::MEMBER)?)?,
            key: key_of(e),
        })
    }
}

impl SwitchState {
    /// The tree entries of job `id`, upstream_table first, then
    /// parent_table and detour_table, with what to call them: for deleting.
    pub(super) fn tree_entries(&self, id: u16) -> Vec<(String, p4::Entity)> {
        let up = self.upstreams.get(&id).map(|u| {
            (
                format!("delete upstream_table entry for job {id}"),
                u.key.clone(),
            )
        });
        let parents = self.parents.iter().filter(|p| p.worker == id).map(|p| {
            (
                format!("delete parent_table entry for job {id}"),
                p.key.clone(),
            )
        });
        let detours = self.detours.iter().filter(|d| d.job == id).map(|d| {
            (
                format!(
                    "delete detour_table entry for job {id} member {} from {}",
                    d.member, d.from
                ),
                d.key.clone(),
            )
        });
        up.into_iter().chain(parents).chain(detours).collect()
    }

    /// Job `job`'s upstream, from its upstream_table and parent_table
    /// entries (`None`: neither exists); `partly` words the error when they
    /// do not add up.
    pub(super) fn upstream_of(
        &self,
        job: u16,
        partly: impl Fn(String) -> ControlError,
    ) -> Result<Option<Upstream>> {
        let up = self.upstreams.get(&job);
        let parent = self.parents.iter().find(|p| p.worker == job);
        match (up, parent) {
            (None, None) => Ok(None),
            (Some(_), None) => Err(partly(
                "an upstream_table entry without parent_table's".into(),
            )),
            (None, Some(_)) => Err(partly(
                "a parent_table entry without upstream_table's".into(),
            )),
            (Some(u), Some(p)) if (p.job, p.endpoint) != (u.parent_job, u.parent) => {
                Err(partly(format!(
                    "upstream_table sends partial sums to job {} at {}, parent_table takes \
                     results from job {} at {}",
                    u.parent_job, u.parent, p.job, p.endpoint
                )))
            }
            (Some(u), Some(_)) => Ok(Some(Upstream {
                switch: SocketAddr::V4(u.parent),
                job: u.parent_job,
                member: u.member,
                aux: u.aux,
            })),
        }
    }
}

impl Bmv2Target {
    /// The writes that make `spec` a tree node: upstream_table, then
    /// parent_table (none for a job without an upstream).
    pub(super) fn tree_plan(&self, spec: &JobSpec) -> Result<Vec<Step>> {
        let Some(up) = spec.upstream else {
            return Ok(Vec::new());
        };
        let parent = ipv4(up.switch, &format!("job {}: parent switch", spec.id))?;
        let host = self
            .topology()?
            .endpoint(&format!("job {}'s parent switch", spec.id), up.switch)?;
        Ok(vec![
            self.upstream_step(spec.id, &up, parent, host)?,
            self.parent_step(spec.id, &up, parent, host)?,
        ])
    }

    fn upstream_step(
        &self,
        job: u16,
        up: &Upstream,
        parent: SocketAddrV4,
        host: Host,
    ) -> Result<Step> {
        let t = &self.schema.upstream_table;
        let a = &t.set_upstream;
        let what = format!("upstream_table entry for job {job}");
        // Without an auxiliary path its parameters are 0, as the program
        // never reads them.
        let (via, via_host, busy_bound, queue_length) = match up.aux {
            Some(aux) => (
                ipv4(aux.via, &format!("job {job}: auxiliary path"))?,
                self.topology()?
                    .endpoint(&format!("job {job}'s auxiliary path"), aux.via)?,
                aux.busy_bound,
                aux.queue_length,
            ),
            None => (
                SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                Host {
                    port: 0,
                    mac: crate::bmv2::topology::Mac([0; 6]),
                },
                0,
                0,
            ),
        };
        Ok(Step {
            entity: table_entity(
                t.id,
                vec![exact(t.job, job.into(), &what)?],
                Some(action(
                    a.id,
                    vec![
                        param(a.parent_job, up.job.into(), &what)?,
                        param(a.member, up.member.into(), &what)?,
                        param(a.parent_mac, host.mac.to_u64(), &what)?,
                        param(a.parent_addr, u32::from(*parent.ip()).into(), &what)?,
                        param(a.parent_port, parent.port().into(), &what)?,
                        param(a.egress_port, host.port.into(), &what)?,
                        param(a.aux, u64::from(up.aux.is_some()), &what)?,
                        param(a.via_mac, via_host.mac.to_u64(), &what)?,
                        param(a.via_addr, u32::from(*via.ip()).into(), &what)?,
                        param(a.via_port, via.port().into(), &what)?,
                        param(a.via_egress_port, via_host.port.into(), &what)?,
                        param(a.busy_bound, busy_bound.into(), &what)?,
                        param(a.queue_length, queue_length.into(), &what)?,
                    ],
                )),
            ),
            what: format!("insert {what}"),
            replace_existing: false,
        })
    }

    fn parent_step(
        &self,
        job: u16,
        up: &Upstream,
        parent: SocketAddrV4,
        host: Host,
    ) -> Result<Step> {
        let t = &self.schema.parent_table;
        let what = format!("parent_table entry for job {job}");
        Ok(Step {
            entity: table_entity(
                t.id,
                vec![
                    exact(t.job, up.job.into(), &what)?,
                    exact(t.ingress_port, host.port.into(), &what)?,
                    exact(t.src_addr, u32::from(*parent.ip()).into(), &what)?,
                    exact(t.src_port, parent.port().into(), &what)?,
                ],
                Some(action(
                    t.set_worker.id,
                    vec![param(t.set_worker.worker, job.into(), &what)?],
                )),
            ),
            what: format!("insert {what}"),
            replace_existing: false,
        })
    }
}

/// parent_table's names. Its entries are read as `WorkerEntry`s with the
/// roles renamed: `job` is the parent's job, `worker` the local job.
pub(super) const PARENTS: super::EndpointNames = super::EndpointNames {
    table: "parent_table",
    member: "parent",
    owner: p4info::names::key::PARENT_JOB,
    action: p4info::names::FROM_PARENT,
    id: p4info::names::param::JOB,
};

/// A parent_table entry, read back.
pub(super) fn parse_parent(s: &Schema, e: &p4::TableEntry) -> Result<WorkerEntry> {
    WorkerEntry::parse(&s.parent_table, &PARENTS, e)
}
