//! Group relay on bmv2: the entries that let p4/v1model copy a group
//! datagram (kind 3, docs/PROTOCOL.md "Multicast groups") to every member of
//! its group but the sender.
//!
//! A group, a job's result group or one made by hand, is:
//!
//! 1. its multicast group (group id = PRE group id), one replica per
//!    member (its switch port, replication id = member id); a job's is the
//!    one its results use;
//! 2. group_receivers (group, member id) -> set_member_address(MAC,
//!    address, port);
//! 3. member_table (group, port, address, UDP port) -> set_member(member id);
//! 4. group_table (group) -> set_group(PRE group), last, so that no datagram
//!    is admitted before its copies have somewhere to go.
//!
//! A group_table entry whose id is an installed job's result group belongs
//! to that job (it is written after the job's job_table entry and removed
//! before it); any other is a group made by hand.

use std::collections::HashMap;
use std::net::{SocketAddr, SocketAddrV4};

use inagg_switch_api::{check_group, GroupInfo, GroupSpec, JobError};

use super::{
    action, endpoint_steps, entry_action, exact, group_entity, job_group, key_of, match_value,
    narrow, param, param_value, receiver_steps, room, rpc_code, table_entity, update, zero,
    Bmv2Target, Host, Step, SwitchState, GROUP_RECEIVERS, MEMBERS, NOT_FOUND,
};
use crate::bmv2::p4info::{self, Schema};
use crate::bmv2::proto::p4::v1 as p4;
use crate::target::{ControlError, Result};

/// A group_table entry.
#[derive(Debug, Clone)]
pub(super) struct GroupEntry {
    pub(super) group: u16,
    /// Its PRE group (the group id, as the control plane installs it).
    pub(super) mcast_grp: u16,
    /// The key, for deleting it.
    pub(super) key: p4::Entity,
}

impl GroupEntry {
    pub(super) fn parse(s: &Schema, e: &p4::TableEntry) -> Result<GroupEntry> {
        use p4info::names::{key, param as p, SET_GROUP};
        let t = "group_table";
        let g = &s.group_table;
        let a = entry_action(t, e, g.set_group, SET_GROUP)?;
        Ok(GroupEntry {
            group: narrow(t, key::GROUP, match_value(t, e, g.group, key::GROUP)?)?,
            mcast_grp: narrow(
                t,
                p::MCAST_GRP,
                param_value(t, a, g.mcast_grp, p::MCAST_GRP)?,
            )?,
            key: key_of(e),
        })
    }
}

impl SwitchState {
    /// The ids of the installed jobs' result groups, with their jobs.
    fn job_groups(&self) -> HashMap<u16, u16> {
        self.jobs.values().map(|j| (j.group, j.job)).collect()
    }

    /// The members of group `g` made by hand, from member_table; an error
    /// if its entries do not add up to a group.
    fn members_of(&self, g: u16) -> Result<Vec<SocketAddr>> {
        let partly = |what: String| {
            ControlError::Protocol(format!(
                "group {g} is only partly installed on the switch ({what}); \
                 `inagg ctl --target bmv2 group delete {g}` removes what is there"
            ))
        };
        let mut entries: Vec<_> = self.members.iter().filter(|m| m.job == g).collect();
        entries.sort_by_key(|m| m.worker);
        if entries.is_empty() {
            return Err(partly("no member_table entries".into()));
        }
        entries
            .iter()
            .enumerate()
            .map(|(i, m)| {
                if usize::from(m.worker) != i {
                    return Err(partly(format!("no member_table entry for member {i}")));
                }
                let r = self.group_receivers.iter().find(|r| r.job == g && r.rid == m.worker);
                match r {
                    Some(r) if r.endpoint == m.endpoint => Ok(SocketAddr::V4(m.endpoint)),
                    Some(r) => Err(partly(format!(
                        "group_receivers sends member {i}'s copies to {}, member_table has it at {}",
                        r.endpoint, m.endpoint
                    ))),
                    None => Err(partly(format!("no group_receivers entry for member {i}"))),
                }
            })
            .collect()
    }
}

impl Bmv2Target {
    /// The writes that make `group` relay among `endpoints`: its
    /// group_receivers and member_table entries, then its group_table entry
    /// (last in the list). The multicast group is the caller's.
    pub(super) fn relay_plan(
        &self,
        group: u16,
        owner: &str,
        endpoints: &[SocketAddrV4],
        hosts: &[Host],
    ) -> Result<Vec<Step>> {
        let s = &self.schema;
        let id = u64::from(group);
        let mut steps = receiver_steps(
            &s.group_receivers,
            &GROUP_RECEIVERS,
            id,
            owner,
            endpoints,
            hosts,
        )?;
        steps.extend(endpoint_steps(
            &s.member_table,
            &MEMBERS,
            id,
            owner,
            endpoints,
            hosts,
        )?);
        let g = &s.group_table;
        let what = format!("group_table entry for group {group}");
        steps.push(Step {
            entity: table_entity(
                g.id,
                vec![exact(g.group, id, &what)?],
                Some(action(g.set_group, vec![param(g.mcast_grp, id, &what)?])),
            ),
            what: format!("insert {what}"),
            replace_existing: false,
        });
        Ok(steps)
    }

    /// Deletes what group `g` has in the relay tables: its group_table
    /// entry first, then its members and receivers.
    pub(super) fn delete_group_entries(&self, state: &SwitchState, g: u16) -> Result<()> {
        let delete = |what: String, entity: p4::Entity| {
            self.client
                .write(&what, vec![update(p4::update::Type::Delete, entity)])
        };
        if let Some(e) = state.groups.get(&g) {
            delete(
                format!("delete group_table entry for group {g}"),
                e.key.clone(),
            )?;
        }
        for m in state.members.iter().filter(|m| m.job == g) {
            delete(
                format!(
                    "delete member_table entry for group {g} member {}",
                    m.worker
                ),
                m.key.clone(),
            )?;
        }
        for r in state.group_receivers.iter().filter(|r| r.job == g) {
            delete(
                format!(
                    "delete group_receivers entry for group {g} member {}",
                    r.rid
                ),
                r.key.clone(),
            )?;
        }
        Ok(())
    }

    /// Zeroes group `g`'s counters, so that a new group starts from 0 as on
    /// the emulator.
    pub(super) fn zero_group_counters(&self, g: u16) -> Result<()> {
        let updates = self.group_counter_cells(g, Some(zero()));
        if updates.is_empty() {
            return Ok(());
        }
        let updates = updates
            .into_iter()
            .map(|e| update(p4::update::Type::Modify, e))
            .collect();
        self.client
            .write(&format!("zero the counters of group {g}"), updates)
    }

    /// group_packets and group_copies at index `g` (where they have it).
    pub(super) fn group_counter_cells(
        &self,
        g: u16,
        data: Option<p4::CounterData>,
    ) -> Vec<p4::Entity> {
        let c = &self.schema.counters;
        [c.group_packets, c.group_copies]
            .iter()
            .filter(|c| i64::from(g) < c.size)
            .map(|c| super::counter_entity(c.id, g.into(), data))
            .collect()
    }

    /// Every group with its counters: the jobs' result groups and the
    /// groups made by hand, by id.
    pub(super) fn all_groups(&self) -> Result<Vec<GroupInfo>> {
        let (state, installed) = self.installed()?;
        let mut groups: Vec<GroupInfo> = installed
            .into_iter()
            .filter_map(|(spec, _)| {
                Some(GroupInfo {
                    id: u16::try_from(job_group(&spec)).ok()?,
                    job: Some(spec.id),
                    members: spec.workers,
                    packets: 0,
                    copies: 0,
                })
            })
            .collect();
        let of_jobs = state.job_groups();
        for e in state
            .groups
            .values()
            .filter(|e| !of_jobs.contains_key(&e.group))
        {
            let g = e.group;
            if e.mcast_grp != g {
                return Err(ControlError::Protocol(format!(
                    "group {g}'s group_table entry names multicast group {}; inagg installs \
                     group {g} on multicast group {g} (another writer's entry?)",
                    e.mcast_grp
                )));
            }
            groups.push(GroupInfo {
                id: g,
                job: None,
                members: state.members_of(g)?,
                packets: 0,
                copies: 0,
            });
        }
        let cells: Vec<p4::Entity> = groups
            .iter()
            .flat_map(|g| self.group_counter_cells(g.id, None))
            .collect();
        let counts = if cells.is_empty() {
            HashMap::new()
        } else {
            self.read_counters("group counters", cells)?
        };
        let c = &self.schema.counters;
        let cell = |id: u32, g: u16| {
            counts
                .get(&(id, i64::from(g)))
                .map_or(0, |d| d.packet_count.max(0) as u64)
        };
        for g in &mut groups {
            g.packets = cell(c.group_packets.id, g.id);
            g.copies = cell(c.group_copies.id, g.id);
        }
        groups.sort_by_key(|g| g.id);
        Ok(groups)
    }

    /// Refuses a group id that a job's result group or another group holds.
    pub(super) fn check_group_free(&self, state: &SwitchState, g: u16) -> Result<()> {
        if let Some(&job) = state.job_groups().get(&g) {
            return Err(JobError::GroupInUse {
                group: g,
                owner: format!("job {job}"),
            }
            .into());
        }
        if state.groups.contains_key(&g) {
            return Err(JobError::GroupInUse {
                group: g,
                owner: "made by hand".into(),
            }
            .into());
        }
        Ok(())
    }

    /// Refuses a group the relay tables have no room for.
    pub(super) fn check_group_room(
        &self,
        state: &SwitchState,
        g: u16,
        members: usize,
    ) -> Result<()> {
        use p4info::names::{GROUP_RECEIVERS as RECEIVERS, GROUP_TABLE, MEMBER_TABLE};
        let s = &self.schema;
        room(
            &format!("group {g}"),
            "group",
            [
                (GROUP_TABLE, state.groups.len(), 1, s.group_table.size),
                (
                    MEMBER_TABLE,
                    state.members.len(),
                    members,
                    s.member_table.size,
                ),
                (
                    RECEIVERS,
                    state.group_receivers.len(),
                    members,
                    s.group_receivers.size,
                ),
            ],
        )
    }

    /// Installs a group made by hand: multicast group, receivers, members,
    /// counters zeroed, group_table last; a failed write undoes the ones
    /// before it.
    pub(super) fn install_group(&mut self, spec: &GroupSpec) -> Result<()> {
        check_group(spec)?;
        let state = self.read_state()?;
        self.check_group_free(&state, spec.id)?;
        self.check_group_room(&state, spec.id, spec.members.len())?;
        let topology = self.topology.as_ref().ok_or_else(|| ControlError::Config {
            path: "--topology".into(),
            message: "creating a group on bmv2 needs the topology file: each member's switch \
                      port and MAC (see `inagg ctl --help`)"
                .into(),
        })?;
        let hosts = spec
            .members
            .iter()
            .enumerate()
            .map(|(i, a)| topology.endpoint(&format!("group {} member {i}", spec.id), *a))
            .collect::<Result<Vec<Host>>>()?;
        let owner = format!("group {}", spec.id);
        let endpoints = super::ipv4_endpoints(&owner, "member", &spec.members)?;
        // Leftovers of an interrupted install (no group_table entry).
        self.delete_group_entries(&state, spec.id)?;
        let mut steps = vec![Step {
            what: format!("insert multicast group {}", spec.id),
            entity: group_entity(u32::from(spec.id), super::replicas(&hosts)),
            replace_existing: true,
        }];
        steps.extend(self.relay_plan(spec.id, &owner, &endpoints, &hosts)?);
        let last = steps.split_off(steps.len() - 1);
        self.run_install(&steps, |t| t.zero_group_counters(spec.id), &last)
    }

    /// Removes a group made by hand (a job's goes with the job).
    pub(super) fn remove_group(&mut self, g: u16) -> Result<()> {
        let state = self.read_state()?;
        if let Some(&job) = state.job_groups().get(&g) {
            return Err(JobError::GroupOfJob { group: g, job }.into());
        }
        let has_entries = state.groups.contains_key(&g)
            || state.members.iter().any(|m| m.job == g)
            || state.group_receivers.iter().any(|r| r.job == g);
        if !has_entries {
            return Err(JobError::UnknownGroup { group: g }.into());
        }
        self.delete_group_entries(&state, g)?;
        match self.client.write(
            &format!("delete multicast group {g}"),
            vec![update(
                p4::update::Type::Delete,
                group_entity(u32::from(g), Vec::new()),
            )],
        ) {
            Err(e) if rpc_code(&e) == Some(NOT_FOUND) => Ok(()),
            other => other,
        }
    }
}
