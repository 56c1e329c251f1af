//! Group relay on Tofino: the entries that let p4/tna copy a group
//! datagram (kind 3, docs/PROTOCOL.md "Multicast groups") to every member
//! of its group but the sender, as the bmv2 target writes them for
//! p4/v1model (p4/README.md, "Installing a group"):
//!
//! 1. the multicast group (`$pre.mgid` = group id, a `$pre.node` per
//!    member: its port, replication id = member id); a job's is its result
//!    group;
//! 2. group_receivers (group, member id) -> set_member_address;
//! 3. member_table (group, port, address, UDP port) -> set_member;
//! 4. group_packets and group_copies zeroed at the group id;
//! 5. group_table (group) -> set_group(group id), last.
//!
//! A group_table entry whose id is an installed job's result group is that
//! job's (written after its job_table entry, removed before it); any other
//! is a group made by hand. Each is one write, undone whole on an error.

use std::collections::{BTreeMap, HashMap};
use std::net::{SocketAddr, SocketAddrV4};

use inagg_switch_api::{check_group, GroupInfo, GroupSpec, JobError, JobSpec};

use super::{
    Endpoints, TofinoTarget, GROUP_COPIES, GROUP_PACKETS, GROUP_RECEIVERS, GROUP_TABLE,
    MEMBER_TABLE,
};
use crate::bmv2::topology::Host;
use crate::target::{ControlError, Result};
use crate::tofino::entry::update;
use crate::tofino::proto::bfrt_proto as bfrt;

use bfrt::update::Type::{Delete, Insert};

/// Where each member's copy of a group datagram goes.
const RECEIVERS: Endpoints = Endpoints {
    table: GROUP_RECEIVERS,
    key: "group",
    action: "set_member_address",
    param: "",
};

/// Which member of a group a datagram is from.
const MEMBERS: Endpoints = Endpoints {
    table: MEMBER_TABLE,
    key: "group",
    action: "set_member",
    param: "member",
};

/// PRE node ids of groups made by hand start here, above every job's.
const GROUP_NODES: u32 = 1 << 31;

/// PRE node id of group `g`'s member `i` (at most 1024 members).
fn node(g: u16, i: usize) -> u32 {
    GROUP_NODES | (u32::from(g) << 10) | i as u32
}

/// The relay tables, read back.
#[derive(Debug, Default)]
pub(super) struct Relays {
    /// group_table: group -> its PRE group.
    groups: BTreeMap<u16, u16>,
    /// member_table: group -> member id -> (endpoint, the entry's key).
    members: BTreeMap<u16, BTreeMap<u64, (SocketAddr, bfrt::Entity)>>,
    /// group_receivers: group -> member ids.
    receivers: BTreeMap<u16, Vec<u64>>,
}

impl TofinoTarget {
    /// group_table: each group's PRE group.
    pub(super) fn group_entries(&self) -> Result<BTreeMap<u16, u16>> {
        let mut groups = BTreeMap::new();
        for e in self.read_all(GROUP_TABLE)? {
            groups.insert(e.key("group")? as u16, e.get("mcast_grp")? as u16);
        }
        Ok(groups)
    }

    /// What group_table, member_table and group_receivers hold.
    pub(super) fn relay_state(&self) -> Result<Relays> {
        let mut r = Relays {
            groups: self.group_entries()?,
            ..Relays::default()
        };
        for e in self.read_all(MEMBER_TABLE)? {
            let addr = std::net::Ipv4Addr::from(e.key("src_addr")? as u32);
            let endpoint = SocketAddr::from((addr, e.key("src_port")? as u16));
            r.members
                .entry(e.key("group")? as u16)
                .or_default()
                .insert(e.get("member")?, (endpoint, e.key_entity()));
        }
        for e in self.read_all(GROUP_RECEIVERS)? {
            r.receivers
                .entry(e.key("group")? as u16)
                .or_default()
                .push(e.key("rid")?);
        }
        Ok(r)
    }

    /// Steps 2-5 for group `g` among `hosts` (member i at `hosts[i]`).
    pub(super) fn relay_entries(
        &self,
        g: u16,
        hosts: &[(SocketAddrV4, Host)],
    ) -> Result<Vec<bfrt::Update>> {
        let id = u64::from(g);
        let mut updates = self.receiver_entries(&RECEIVERS, id, hosts)?;
        updates.extend(self.sender_entries(&MEMBERS, id, hosts)?);
        for counter in [GROUP_PACKETS, GROUP_COPIES] {
            if id < self.info.table(counter)?.size {
                updates.push(self.zero_counter(counter, id)?);
            }
        }
        let entry = self
            .info
            .entry(GROUP_TABLE)?
            .key("group", id)?
            .action("set_group")?
            .set("mcast_grp", id)?;
        updates.push(update(Insert, entry.build()));
        Ok(updates)
    }

    /// Deletes of what group `g` has in the relay tables, its group_table
    /// entry first.
    pub(super) fn relay_deletes(&self, r: &Relays, g: u16) -> Result<Vec<bfrt::Update>> {
        let id = u64::from(g);
        let mut updates = Vec::new();
        if r.groups.contains_key(&g) {
            let entry = self.info.entry(GROUP_TABLE)?.key("group", id)?;
            updates.push(update(Delete, entry.build()));
        }
        for (_, key) in r.members.get(&g).into_iter().flat_map(|m| m.values()) {
            updates.push(update(Delete, key.clone()));
        }
        for &rid in r.receivers.get(&g).into_iter().flatten() {
            let entry = self
                .info
                .entry(GROUP_RECEIVERS)?
                .key("group", id)?
                .key("rid", rid)?;
            updates.push(update(Delete, entry.build()));
        }
        Ok(updates)
    }

    /// Refuses group id `g` if a job's result group or a group made by hand
    /// holds it.
    pub(super) fn check_group_free(
        jobs: &[JobSpec],
        groups: &BTreeMap<u16, u16>,
        g: u16,
    ) -> Result<()> {
        let owner = match jobs.iter().find(|j| Self::group(j) == g) {
            Some(j) => format!("job {}", j.id),
            None if groups.contains_key(&g) => "made by hand".into(),
            None => return Ok(()),
        };
        Err(JobError::GroupInUse { group: g, owner }.into())
    }

    /// Installs a group made by hand, in one write.
    pub(super) fn install_group(&self, spec: &GroupSpec) -> Result<()> {
        check_group(spec)?;
        let relays = self.relay_state()?;
        Self::check_group_free(&self.installed()?, &relays.groups, spec.id)?;
        let topology = self.topology()?;
        let hosts = spec
            .members
            .iter()
            .enumerate()
            .map(|(i, &addr)| {
                let who = format!("group {} member {i}", spec.id);
                let host = topology.endpoint(&who, addr)?;
                match addr {
                    SocketAddr::V4(v4) => Ok((v4, host)),
                    SocketAddr::V6(_) => Err(super::invalid(format!(
                        "{who} at {addr}: p4/tna matches IPv4 sources"
                    ))),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let nodes: Vec<(u32, u16)> = hosts
            .iter()
            .enumerate()
            .map(|(i, (_, h))| (node(spec.id, i), h.port))
            .collect();
        // Leftovers of a group without a group_table entry go first.
        let mut updates = self.relay_deletes(&relays, spec.id)?;
        updates.extend(self.pre_entries(spec.id, &nodes)?);
        updates.extend(self.relay_entries(spec.id, &hosts)?);
        self.client
            .write(&format!("install group {}", spec.id), updates)
    }

    /// Removes a group made by hand (a job's goes with the job).
    pub(super) fn remove_group(&self, g: u16) -> Result<()> {
        if let Some(job) = self.installed()?.iter().find(|j| Self::group(j) == g) {
            return Err(JobError::GroupOfJob {
                group: g,
                job: job.id,
            }
            .into());
        }
        let relays = self.relay_state()?;
        let members = relays.members.get(&g).map_or(0, BTreeMap::len);
        let held =
            relays.groups.contains_key(&g) || members > 0 || relays.receivers.contains_key(&g);
        if !held {
            return Err(JobError::UnknownGroup { group: g }.into());
        }
        let mut updates = self.relay_deletes(&relays, g)?;
        let count = members.max(relays.receivers.get(&g).map_or(0, Vec::len));
        updates.extend(self.pre_deletes(g, (0..count).map(|i| node(g, i)))?);
        self.client.write(&format!("delete group {g}"), updates)
    }

    /// Every group with its counters: the jobs' result groups and the
    /// groups made by hand, by id.
    pub(super) fn all_groups(&self) -> Result<Vec<GroupInfo>> {
        let jobs = self.installed()?;
        let relays = self.relay_state()?;
        let of_jobs: HashMap<u16, &JobSpec> = jobs.iter().map(|j| (Self::group(j), j)).collect();
        let mut groups: Vec<GroupInfo> = jobs
            .iter()
            .map(|j| GroupInfo {
                id: Self::group(j),
                job: Some(j.id),
                members: j.workers.clone(),
                packets: 0,
                copies: 0,
            })
            .collect();
        for &g in relays.groups.keys().filter(|g| !of_jobs.contains_key(g)) {
            groups.push(GroupInfo {
                id: g,
                job: None,
                members: members_of(&relays, g)?,
                packets: 0,
                copies: 0,
            });
        }
        let mut cells = Vec::new();
        for counter in [GROUP_PACKETS, GROUP_COPIES] {
            let size = self.info.table(counter)?.size;
            cells.extend(
                groups
                    .iter()
                    .filter(|g| u64::from(g.id) < size)
                    .map(|g| (counter, u64::from(g.id))),
            );
        }
        let counts: HashMap<(&str, u64), u64> = if cells.is_empty() {
            HashMap::new()
        } else {
            let values = self.read_counters(&cells)?;
            cells
                .into_iter()
                .zip(values)
                .map(|(c, v)| (c, v.0))
                .collect()
        };
        for g in &mut groups {
            let id = u64::from(g.id);
            g.packets = counts.get(&(GROUP_PACKETS, id)).copied().unwrap_or(0);
            g.copies = counts.get(&(GROUP_COPIES, id)).copied().unwrap_or(0);
        }
        groups.sort_by_key(|g| g.id);
        Ok(groups)
    }
}

/// The members of group `g` made by hand, from member_table; an error if
/// its entries do not add up to a group.
fn members_of(r: &Relays, g: u16) -> Result<Vec<SocketAddr>> {
    let partly = |what: String| {
        ControlError::Protocol(format!(
            "group {g} is only partly installed on the switch ({what}); \
             `inagg ctl --target tofino group delete {g}` removes what is there"
        ))
    };
    if r.groups.get(&g) != Some(&g) {
        return Err(partly(format!(
            "its group_table entry names multicast group {:?}",
            r.groups.get(&g)
        )));
    }
    let members = r.members.get(&g).cloned().unwrap_or_default();
    let receivers = r.receivers.get(&g).cloned().unwrap_or_default();
    if members.is_empty() {
        return Err(partly("no member_table entries".into()));
    }
    let mut out = Vec::new();
    for (i, (id, (addr, _))) in members.into_iter().enumerate() {
        if id != i as u64 {
            return Err(partly(format!("no member_table entry for member {i}")));
        }
        if !receivers.contains(&id) {
            return Err(partly(format!("no group_receivers entry for member {i}")));
        }
        out.push(addr);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn group_nodes_are_above_every_jobs() {
        let highest_job_node = super::TofinoTarget::node(u16::MAX, 63);
        assert!(super::node(1, 0) > highest_job_node);
        assert_eq!(super::node(u16::MAX, 1023), (1 << 31) + (1 << 26) - 1);
        assert_ne!(super::node(2, 0), super::node(1, 1023));
    }
}
