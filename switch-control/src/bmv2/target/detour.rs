//! Auxiliary paths on bmv2 (docs/PROTOCOL.md, "Auxiliary paths"): the
//! entries that let p4/v1model send a tree job's partial sums round a busy
//! link, forward them on the way, and take them at the parent.
//!
//! - **A child** with `--aux-path` gets its detour's first switch and
//!   NetStorm's two bounds in its upstream_table entry (`set_upstream`'s
//!   `aux` parameters; target/tree.rs writes it); the program applies the
//!   sender rule on its egress queues.
//! - **A switch on the way** holds relay entries (`inagg ctl relay create`):
//!   relay_table (job, port, previous hop's address and UDP port, member)
//!   -> relay_to(index, next hop's MAC, address, UDP port, port towards
//!   it). `index` is the entry's cell of the relay_packets counter, the
//!   lowest one no other entry uses; the cell is zeroed before the entry
//!   goes in.
//! - **The parent**'s job lists its members' relays (`--detour
//!   MEMBER=RELAY`): one detour_table entry each, (job, port, relay's
//!   address and UDP port, member) -> take_detour(the member's own MAC,
//!   address, UDP port and port, where a resend goes), written before the
//!   job's job_table entry with the tree entries and deleted after it;
//!   job_table's `detours` says the job takes detours (its late-copy check
//!   is then the stricter one).
//!
//! Ports and MACs come from the topology file, as a worker's do. The rule of
//! one meaning per match is checked against what the switch holds, with the
//! emulator's own checks.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use inagg_switch_api::detour::{check_relay, Detour, RelayInfo, RelayKey, RelaySpec};
use inagg_switch_api::job::relay_meets_no_detour;
use inagg_switch_api::{ApiError, JobError, JobSpec};

use super::{
    action, counter_entity, entry_action, exact, ipv4, key_of, match_value, narrow, param,
    param_value, room, table_entity, update, zero, Bmv2Target, Host, Step, SwitchState,
};
use crate::bmv2::p4info::{self, HopTable};
use crate::bmv2::proto::p4::v1 as p4;
use crate::target::{ControlError, Result};

/// A relay_table or detour_table entry: detours of `job` naming `member`
/// from `from` go to `to` (a relay's next hop; a detour's member, for
/// resends).
#[derive(Debug, Clone)]
pub(super) struct HopEntry {
    pub(super) job: u16,
    pub(super) from: SocketAddrV4,
    pub(super) member: u16,
    pub(super) to: SocketAddrV4,
    /// relay_to's relay_packets cell.
    pub(super) index: Option<u16>,
    /// The key, for deleting it.
    pub(super) key: p4::Entity,
}

/// What a hop table and its action are called, for errors.
pub(super) struct HopNames {
    pub(super) table: &'static str,
    pub(super) action: &'static str,
    /// The endpoint parameters' prefix.
    pub(super) prefix: &'static str,
}

pub(super) const RELAYS: HopNames = HopNames {
    table: "relay_table",
    action: p4info::names::RELAY_TO,
    prefix: p4info::names::param::NEXT,
};

pub(super) const DETOURS: HopNames = HopNames {
    table: "detour_table",
    action: p4info::names::TAKE_DETOUR,
    prefix: p4info::names::param::MEMBER_ENDPOINT,
};

impl HopEntry {
    pub(super) fn parse(h: &HopTable, n: &HopNames, e: &p4::TableEntry) -> Result<HopEntry> {
        use p4info::names::{key, param as p};
        let t = n.table;
        let a = entry_action(t, e, h.action.id, n.action)?;
        let m = |f, name| match_value(t, e, f, name);
        let v = |f, name: &str| param_value(t, a, f, name);
        let addr: u32 = narrow(t, key::SRC_ADDR, m(h.src_addr, key::SRC_ADDR)?)?;
        let port: u16 = narrow(t, key::SRC_PORT, m(h.src_port, key::SRC_PORT)?)?;
        // Checked (it must decode and fit), not kept: endpoints are
        // reported by address.
        v(h.action.mac, &format!("{}_mac", n.prefix))?;
        v(h.action.egress_port, p::EGRESS_PORT)?;
        let to_addr = format!("{}_addr", n.prefix);
        let to_port = format!("{}_port", n.prefix);
        let to_ip: u32 = narrow(t, &to_addr, v(h.action.addr, &to_addr)?)?;
        let to_udp: u16 = narrow(t, &to_port, v(h.action.port, &to_port)?)?;
        let index = match h.action.index {
            Some(f) => Some(narrow(t, p::INDEX, v(f, p::INDEX)?)?),
            None => None,
        };
        Ok(HopEntry {
            job: narrow(t, key::JOB, m(h.job, key::JOB)?)?,
            from: SocketAddrV4::new(Ipv4Addr::from(addr), port),
            member: narrow(t, key::MEMBER, m(h.member, key::MEMBER)?)?,
            to: SocketAddrV4::new(Ipv4Addr::from(to_ip), to_udp),
            index,
            key: key_of(e),
        })
    }

    fn relay_key(&self) -> RelayKey {
        RelayKey {
            job: self.job,
            from: SocketAddr::V4(self.from),
            member: self.member,
        }
    }
}

impl SwitchState {
    /// Job `job`'s detours, from its detour_table entries, by member.
    pub(super) fn detours_of(&self, job: u16) -> Vec<Detour> {
        let mut detours: Vec<Detour> = self
            .detours
            .iter()
            .filter(|d| d.job == job)
            .map(|d| Detour {
                member: d.member,
                relay: SocketAddr::V4(d.from),
            })
            .collect();
        detours.sort_by_key(|d| (d.member, d.relay));
        detours
    }

    /// The relay entry installed under `key`.
    fn relay(&self, key: &RelayKey) -> Option<&HopEntry> {
        self.relays.iter().find(|r| r.relay_key() == *key)
    }

    /// Whether a relay entry is installed under `key`.
    pub(super) fn relayed(&self, key: &RelayKey) -> bool {
        self.relay(key).is_some()
    }

    /// The lowest relay_packets cell no relay entry uses, below `cells`.
    fn free_relay_index(&self, cells: i64) -> Option<u16> {
        (0..cells.clamp(0, i64::from(u16::MAX)) as u16)
            .find(|i| !self.relays.iter().any(|r| r.index == Some(*i)))
    }
}

impl Bmv2Target {
    /// The detour_table entries of `spec`: one per detour it lists.
    pub(super) fn detour_steps(&self, spec: &JobSpec) -> Result<Vec<Step>> {
        spec.detours
            .iter()
            .map(|d| {
                let member = spec.workers[usize::from(d.member)];
                let what = format!(
                    "detour_table entry for job {} member {} from {}",
                    spec.id, d.member, d.relay
                );
                self.hop_step(
                    &self.schema.detour_table,
                    (spec.id, d.relay, d.member),
                    member,
                    None,
                    what,
                )
            })
            .collect()
    }

    /// An entry of a hop table: (job, `from`'s port, address and UDP port,
    /// member) -> `to`'s MAC, address, UDP port and port (and relay_to's
    /// counter cell).
    fn hop_step(
        &self,
        t: &HopTable,
        (job, from, member): (u16, SocketAddr, u16),
        to: SocketAddr,
        index: Option<u16>,
        what: String,
    ) -> Result<Step> {
        let topology = self.topology()?;
        let from_host = topology.endpoint(&format!("{what}: the previous hop"), from)?;
        let to_host: Host = topology.endpoint(&format!("{what}: where it goes"), to)?;
        let from = ipv4(from, &format!("{what}: the previous hop"))?;
        let to = ipv4(to, &format!("{what}: where it goes"))?;
        let a = &t.action;
        let mut params = Vec::new();
        if let (Some(f), Some(i)) = (a.index, index) {
            params.push(param(f, i.into(), &what)?);
        }
        params.extend([
            param(a.mac, to_host.mac.to_u64(), &what)?,
            param(a.addr, u32::from(*to.ip()).into(), &what)?,
            param(a.port, to.port().into(), &what)?,
            param(a.egress_port, to_host.port.into(), &what)?,
        ]);
        Ok(Step {
            entity: table_entity(
                t.id,
                vec![
                    exact(t.job, job.into(), &what)?,
                    exact(t.ingress_port, from_host.port.into(), &what)?,
                    exact(t.src_addr, u32::from(*from.ip()).into(), &what)?,
                    exact(t.src_port, from.port().into(), &what)?,
                    exact(t.member, member.into(), &what)?,
                ],
                Some(action(a.id, params)),
            ),
            what: format!("insert {what}"),
            replace_existing: false,
        })
    }

    /// Every relay entry with its relay_packets cell.
    pub(super) fn relay_infos(&self) -> Result<Vec<RelayInfo>> {
        let state = self.read_state()?;
        let c = self.schema.counters.relay_packets;
        let cells: Vec<p4::Entity> = state
            .relays
            .iter()
            .filter_map(|r| r.index)
            .map(|i| counter_entity(c.id, i.into(), None))
            .collect();
        let cells = if cells.is_empty() {
            Default::default()
        } else {
            self.read_counters("relay_packets", cells)?
        };
        Ok(state
            .relays
            .iter()
            .map(|r| RelayInfo {
                spec: RelaySpec {
                    job: r.job,
                    from: SocketAddr::V4(r.from),
                    member: r.member,
                    to: SocketAddr::V4(r.to),
                },
                packets: r
                    .index
                    .and_then(|i| cells.get(&(c.id, i64::from(i))))
                    .map_or(0, |d| d.packet_count.max(0) as u64),
            })
            .collect())
    }

    /// Installs a relay entry: the emulator's checks, room, a counter cell
    /// zeroed, then the entry.
    pub(super) fn install_relay(&self, spec: &RelaySpec) -> Result<()> {
        check_relay(spec)?;
        let state = self.read_state()?;
        let key = spec.key();
        if state.relayed(&key) {
            return Err(JobError::RelayInUse {
                key: key.to_string(),
            }
            .into());
        }
        let job = match state.jobs.get(&spec.job) {
            Some(j) => Some(state.spec(j)?),
            None => None,
        };
        relay_meets_no_detour(spec, job.as_ref())?;
        let t = &self.schema.relay_table;
        let cells = self.schema.counters.relay_packets.size;
        room(
            &format!("relay {key}"),
            "relay entry",
            [(p4info::names::RELAY_TABLE, state.relays.len(), 1, t.size)],
        )?;
        let index = state.free_relay_index(cells).ok_or_else(|| {
            ControlError::Api(ApiError::Invalid {
                message: format!(
                    "relay {key}: all {cells} cells of relay_packets are in use; delete a relay \
                     entry or rebuild the program with INAGG_RELAY_TABLE_SIZE larger"
                ),
            })
        })?;
        let step = self.hop_step(
            t,
            (spec.job, spec.from, spec.member),
            spec.to,
            Some(index),
            format!("relay_table entry for {key}"),
        )?;
        let c = self.schema.counters.relay_packets;
        self.client.write(
            &format!("zero relay_packets cell {index}"),
            vec![update(
                p4::update::Type::Modify,
                counter_entity(c.id, index.into(), Some(zero())),
            )],
        )?;
        self.write_step(&step)
    }

    /// Deletes the relay entry under `key`.
    pub(super) fn remove_relay(&self, key: RelayKey) -> Result<()> {
        let state = self.read_state()?;
        let entry = state.relay(&key).ok_or_else(|| JobError::UnknownRelay {
            key: key.to_string(),
        })?;
        self.client.write(
            &format!("delete relay_table entry for {key}"),
            vec![update(p4::update::Type::Delete, entry.key.clone())],
        )
    }
}
