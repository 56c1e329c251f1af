//! Conformance vectors (`tests/conformance/`, format in its README.md): the
//! case format, and replay against the emulator's switch. The same files are
//! replayed as raw Ethernet frames against a switch on real ports (`inagg
//! conformance`), so the emulator and the P4 program are held to one
//! behaviour.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use crate::switch::{Action, Switch, SwitchConfig};
use inagg_switch_api::counters::{Counters, DropReason};
use inagg_switch_api::detour::{Detour, RelaySpec};
use inagg_switch_api::{GroupInfo, GroupSpec, JobSpec, Upstream};
use inagg_wire::status::{Status, STATUS_LEN};
use inagg_wire::{payload, Kind, Packet, Repr, HEADER_LEN, VERSION};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub description: String,
    /// The docs/PROTOCOL.md section the case pins.
    pub protocol: String,
    pub switch: SwitchSpec,
    pub jobs: Vec<JobVector>,
    /// Multicast groups made by hand (`inagg ctl group create`).
    #[serde(default)]
    pub groups: Vec<GroupVector>,
    /// Relay entries (`inagg ctl relay create`): detours this switch
    /// forwards unchanged (docs/PROTOCOL.md, "Auxiliary paths").
    #[serde(default)]
    pub relays: Vec<RelayVector>,
    #[serde(default)]
    pub priority_queues: BTreeMap<u8, u8>,
    pub packets: Vec<Step>,
    #[serde(default)]
    pub counters: Option<CounterVector>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SwitchSpec {
    pub slots: u32,
    pub elements: u16,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobVector {
    pub id: u16,
    pub pool_base: u32,
    pub pool_size: u32,
    pub elements: u16,
    #[serde(default)]
    pub generation: u16,
    /// The job's result group id, where the case sets one (it then also
    /// relays group datagrams among the job's workers).
    #[serde(default)]
    pub group: Option<u16>,
    /// The parent switch, where the job is a node of an aggregation tree.
    #[serde(default)]
    pub upstream: Option<UpstreamVector>,
    /// The relays the job takes detours from, by member.
    #[serde(default)]
    pub detours: Vec<DetourVector>,
    /// The members that are switches (a tree's child switches), one bit
    /// each.
    #[serde(default)]
    pub child_switches: u64,
    pub workers: Vec<Endpoint>,
}

/// A job's detours for one member: they arrive from `relay`, the last
/// switch of the member's auxiliary path.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetourVector {
    pub member: u16,
    pub relay: Endpoint,
}

/// A relay entry: detours of `job` naming `member` that arrive from `from`
/// go on unchanged to `to`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayVector {
    pub job: u16,
    pub from: Endpoint,
    pub member: u16,
    pub to: Endpoint,
}

impl RelayVector {
    /// The entry as the control plane installs it.
    pub fn spec(&self) -> RelaySpec {
        RelaySpec {
            job: self.job,
            from: self.from.addr,
            member: self.member,
            to: self.to.addr,
        }
    }
}

/// A tree job's parent (docs/PROTOCOL.md, "Aggregation trees"): the parent
/// switch's data-plane endpoint, its job for the tree, and this switch's
/// member id in that job.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamVector {
    pub switch: Endpoint,
    pub job: u16,
    pub member: u16,
}

/// A multicast group made by hand: member id = position.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GroupVector {
    pub id: u16,
    pub members: Vec<Endpoint>,
}

/// A worker as every target identifies it: switch port, MAC, IPv4 address
/// and UDP port. The emulator only sees the address.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    pub port: u16,
    pub mac: String,
    pub addr: SocketAddr,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Step {
    #[serde(default)]
    pub note: String,
    #[serde(rename = "in")]
    pub input: Input,
    pub out: Vec<Output>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    pub port: u16,
    pub from: SocketAddr,
    #[serde(flatten)]
    pub packet: PacketVector,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Output {
    pub port: u16,
    pub to: SocketAddr,
    pub queue: u8,
    #[serde(flatten)]
    pub packet: PacketVector,
}

/// A packet by fields (header defaults: version 1, reserved 0, elements =
/// number of values) or, for malformed input, as raw hex bytes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PacketVector {
    #[serde(default)]
    pub hex: Option<String>,
    #[serde(default)]
    pub fields: Option<Fields>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fields {
    pub kind: String,
    pub job: u16,
    pub slot: u16,
    pub set: u8,
    pub worker: u16,
    #[serde(default)]
    pub generation: u16,
    #[serde(default)]
    pub priority: u8,
    #[serde(default)]
    pub exponent: u8,
    #[serde(default)]
    pub count: u16,
    #[serde(default)]
    pub elements: Option<u16>,
    #[serde(default)]
    pub packet_id: u32,
    /// The int32 payload (none for a query or a status).
    #[serde(default)]
    pub values: Vec<i32>,
    /// A status's block (kind `status` only).
    #[serde(default)]
    pub status: Option<StatusFields>,
}

/// The block after a status's header (docs/PROTOCOL.md, "Loss recovery").
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusFields {
    pub bitmap: u64,
    pub members: u16,
    /// The `ANSWERED` flag; absent means clear.
    #[serde(default)]
    pub answered: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterVector {
    #[serde(default)]
    pub drops: BTreeMap<String, u64>,
    #[serde(default)]
    pub jobs: BTreeMap<u16, BTreeMap<String, u64>>,
    /// Per group id: `packets` (datagrams admitted), `copies`.
    #[serde(default)]
    pub groups: BTreeMap<u16, BTreeMap<String, u64>>,
    /// Detours forwarded by relay entries (the switch's `relayed`).
    #[serde(default)]
    pub relayed: Option<u64>,
}

impl JobVector {
    /// The job as the control plane installs it.
    pub fn spec(&self) -> JobSpec {
        JobSpec {
            child_switches: self.child_switches,
            upstream: self.upstream.as_ref().map(|u| Upstream {
                switch: u.switch.addr,
                job: u.job,
                member: u.member,
                aux: None,
            }),
            id: self.id,
            workers: self.workers.iter().map(|w| w.addr).collect(),
            pool_base: self.pool_base,
            pool_size: self.pool_size,
            elements: self.elements,
            generation: self.generation,
            queues: Vec::new(),
            group: self.group,
            detours: self
                .detours
                .iter()
                .map(|d| Detour {
                    member: d.member,
                    relay: d.relay.addr,
                })
                .collect(),
        }
    }
}

impl GroupVector {
    /// The group as the control plane installs it.
    pub fn spec(&self) -> GroupSpec {
        GroupSpec {
            id: self.id,
            members: self.members.iter().map(|m| m.addr).collect(),
        }
    }
}

impl Case {
    /// Every endpoint the case names: jobs' workers, parent switches and
    /// detours' relays, groups' members, and relay entries' hops.
    pub fn endpoints(&self) -> impl Iterator<Item = &Endpoint> {
        let workers = self.jobs.iter().flat_map(|j| &j.workers);
        let parents = self.jobs.iter().filter_map(|j| j.upstream.as_ref());
        let detours = self.jobs.iter().flat_map(|j| &j.detours);
        let hops = self.relays.iter().flat_map(|r| [&r.from, &r.to]);
        workers
            .chain(parents.map(|u| &u.switch))
            .chain(detours.map(|d| &d.relay))
            .chain(self.groups.iter().flat_map(|g| &g.members))
            .chain(hops)
    }
}

impl PacketVector {
    /// The packet's bytes (the UDP payload).
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        match (&self.hex, &self.fields) {
            (Some(hex), None) => decode_hex(hex),
            (None, Some(f)) => f.bytes(),
            _ => Err("a packet needs exactly one of `hex` and `fields`".into()),
        }
    }
}

impl Fields {
    fn bytes(&self) -> Result<Vec<u8>, String> {
        let kind = match self.kind.as_str() {
            "contribution" => Kind::Contribution,
            "result" => Kind::Result,
            "multicast" => Kind::Multicast,
            "detour" => Kind::Detour,
            "query" => Kind::Query,
            "status" => Kind::Status,
            "announce" => Kind::Announce,
            other => return Err(format!("unknown kind {other:?}")),
        };
        if (kind == Kind::Status) != self.status.is_some() {
            return Err("`status` is given with kind status, and only then".into());
        }
        if matches!(kind, Kind::Query | Kind::Status) && !self.values.is_empty() {
            return Err(format!("a {kind} carries no values"));
        }
        let repr = Repr {
            kind,
            set: self.set,
            priority: self.priority,
            job: self.job,
            slot: self.slot,
            worker: self.worker,
            generation: self.generation,
            exponent: self.exponent,
            count: self.count,
            elements: self.elements.unwrap_or(self.values.len() as u16),
            packet_id: self.packet_id,
        };
        let block = if kind == Kind::Status {
            STATUS_LEN
        } else {
            self.values.len() * 4
        };
        let mut b = vec![0u8; HEADER_LEN + block];
        repr.emit(&mut Packet::new_unchecked(&mut b[..]));
        match &self.status {
            Some(s) => Status {
                bitmap: s.bitmap,
                members: s.members,
                answered: s.answered,
            }
            .emit(&mut b[HEADER_LEN..]),
            None => payload::write_i32s(&mut b[HEADER_LEN..], &self.values),
        }
        debug_assert_eq!(b[0], VERSION);
        Ok(b)
    }
}

fn decode_hex(hex: &str) -> Result<Vec<u8>, String> {
    let digits: Vec<u8> = hex.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .filter(|d| d.len() == 2)
                .and_then(|d| u8::from_str_radix(d, 16).ok())
                .ok_or_else(|| format!("bad hex byte {:?}", String::from_utf8_lossy(p)))
        })
        .collect()
}

/// One datagram the switch sent: where, on which queue, what bytes.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Sent {
    pub port: u16,
    pub to: SocketAddr,
    pub queue: u8,
    pub bytes: Vec<u8>,
}

/// Replays a case; returns a description of the first difference.
pub fn run(case: &Case) -> Result<(), String> {
    let mut sw = Switch::new(SwitchConfig {
        slots: case.switch.slots,
        max_elements: case.switch.elements,
        ..SwitchConfig::default()
    });
    let mut ports: BTreeMap<SocketAddr, u16> = BTreeMap::new();
    for w in case.endpoints() {
        ports.insert(w.addr, w.port);
        parse_mac(&w.mac)?;
    }
    for j in &case.jobs {
        // A job's errors name the job already.
        sw.create_job(j.spec()).map_err(|e| e.to_string())?;
    }
    for g in &case.groups {
        sw.create_group(g.spec())
            .map_err(|e| format!("group {}: {e}", g.id))?;
    }
    for r in &case.relays {
        sw.create_relay(r.spec())
            .map_err(|e| format!("relay {}: {e}", r.spec().key()))?;
    }
    for (&class, &queue) in &case.priority_queues {
        sw.set_queue(class, queue).map_err(|e| e.to_string())?;
    }
    let mut result = Vec::new();
    for (i, step) in case.packets.iter().enumerate() {
        if ports
            .get(&step.input.from)
            .is_some_and(|&p| p != step.input.port)
        {
            return Err(format!("packet {i}: port does not match the worker table"));
        }
        let input = step.input.packet.bytes()?;
        let action = sw.process(&input, step.input.from, &mut result);
        let mut got = egress(&sw, action, &result, &ports);
        let mut want = expected(step)?;
        // Replication order is the target's business; compare as sets.
        got.sort();
        want.sort();
        if got != want {
            return Err(format!(
                "packet {i} ({}): action {action:?}\n  got  {got:?}\n  want {want:?}",
                step.note
            ));
        }
    }
    check_counters(&sw, case.counters.as_ref())
}

/// The datagrams a step expects to leave the switch.
pub fn expected(step: &Step) -> Result<Vec<Sent>, String> {
    step.out
        .iter()
        .map(|o| {
            Ok(Sent {
                port: o.port,
                to: o.to,
                queue: o.queue,
                bytes: o.packet.bytes()?,
            })
        })
        .collect()
}

/// Parses `aa:bb:cc:dd:ee:ff` (the wire crate's parser, with the vector
/// loader's error message).
pub fn parse_mac(mac: &str) -> Result<[u8; 6], String> {
    inagg_wire::frame::parse_mac(mac).ok_or_else(|| format!("bad MAC address {mac:?}"))
}

/// Checks drop counters against a vector: every reason it lists, and zero
/// for every reason it does not. Any target's counters can be checked.
pub fn check_drops(counters: &Counters, want: &CounterVector) -> Result<(), String> {
    for reason in DropReason::ALL {
        let expected = want.drops.get(reason.name()).copied().unwrap_or(0);
        let got = counters.dropped(reason);
        if got != expected {
            return Err(format!(
                "drops[{}]: got {got}, want {expected}",
                reason.name()
            ));
        }
    }
    if let Some(name) = want
        .drops
        .keys()
        .find(|n| !DropReason::ALL.iter().any(|r| r.name() == *n))
    {
        return Err(format!("unknown drop reason {name:?} in the vector"));
    }
    Ok(())
}

/// What leaves the switch for an action: the multicast copies (each
/// rewritten for its receiver, as the P4 egress does) or the unicast resend.
fn egress(
    sw: &Switch,
    action: Action,
    result: &[u8],
    ports: &BTreeMap<SocketAddr, u16>,
) -> Vec<Sent> {
    let queue = |bytes: &[u8]| sw.queue_of(Packet::new_unchecked(bytes).priority());
    let sent = |to: SocketAddr, bytes: Vec<u8>| Sent {
        port: ports.get(&to).copied().unwrap_or(u16::MAX),
        to,
        queue: queue(&bytes),
        bytes,
    };
    match action {
        Action::Multicast { job } => sw
            .workers(job)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(|(id, &to)| {
                let mut copy = result.to_vec();
                Packet::new_unchecked(&mut copy[..]).set_worker(id as u16);
                sent(to, copy)
            })
            .collect(),
        Action::Nudge { job, members } => sw
            .workers(job)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .filter(|&(id, _)| id < 64 && members & (1u64 << id) != 0)
            .map(|(_, &to)| sent(to, result.to_vec()))
            .collect(),
        // No paced ports here, so a partial sum always takes the primary.
        Action::Unicast { to } | Action::Upstream { to, .. } | Action::Forward { to } => {
            vec![sent(to, result.to_vec())]
        }
        Action::Replicate { group, sender } => sw
            .members(group)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .filter(|&(id, _)| id != usize::from(sender))
            .map(|(_, &to)| sent(to, result.to_vec()))
            .collect(),
        Action::Absorbed | Action::Drop(_) => Vec::new(),
    }
}

pub fn check_counters(sw: &Switch, want: Option<&CounterVector>) -> Result<(), String> {
    let Some(want) = want else { return Ok(()) };
    check_drops(sw.counters(), want)?;
    check_relayed(sw.counters(), want)?;
    for (&id, fields) in &want.jobs {
        let info = sw.job(id).map_err(|e| e.to_string())?;
        let c = serde_json::to_value(&info.counters).map_err(|e| e.to_string())?;
        for (field, &expected) in fields {
            let got = c.get(field).and_then(|v| v.as_u64());
            if got != Some(expected) {
                return Err(format!("job {id} {field}: got {got:?}, want {expected}"));
            }
        }
    }
    check_groups(&sw.groups(), want)
}

/// Checks the switch's `relayed` counter, where the vector gives it. Any
/// target's counters can be checked.
pub fn check_relayed(counters: &Counters, want: &CounterVector) -> Result<(), String> {
    match want.relayed {
        Some(n) if counters.relayed != n => {
            Err(format!("relayed: got {}, want {n}", counters.relayed))
        }
        _ => Ok(()),
    }
}

/// Checks group counters against a vector (`packets`, `copies` by group
/// id). Any target's group listing can be checked.
pub fn check_groups(groups: &[GroupInfo], want: &CounterVector) -> Result<(), String> {
    for (&id, fields) in &want.groups {
        let g = groups
            .iter()
            .find(|g| g.id == id)
            .ok_or_else(|| format!("group {id}: not installed"))?;
        for (field, &expected) in fields {
            let got = match field.as_str() {
                "packets" => g.packets,
                "copies" => g.copies,
                other => return Err(format!("unknown group counter {other:?} in the vector")),
            };
            if got != expected {
                return Err(format!("group {id} {field}: got {got}, want {expected}"));
            }
        }
    }
    Ok(())
}

/// The vector files of a directory, sorted by name.
pub fn files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    Ok(files)
}

/// Reads and parses one vector file.
pub fn load(path: &Path) -> Result<Case, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}
