//! Runs the conformance vectors in `tests/conformance/` against the
//! emulator's switch: the same files the bmv2 runner replays against the P4
//! program, so both targets are held to one behaviour. The format is in
//! `tests/conformance/README.md`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use inagg_emu::api::JobSpec;
use inagg_emu::counters::DropReason;
use inagg_emu::switch::{Action, Switch, SwitchConfig};
use inagg_wire::{payload, Kind, Packet, Repr, HEADER_LEN, VERSION};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    description: String,
    /// The docs/PROTOCOL.md section the case pins.
    protocol: String,
    switch: SwitchSpec,
    jobs: Vec<JobVector>,
    #[serde(default)]
    priority_queues: BTreeMap<u8, u8>,
    packets: Vec<Step>,
    #[serde(default)]
    counters: Option<CounterVector>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SwitchSpec {
    slots: u32,
    elements: u16,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JobVector {
    id: u16,
    pool_base: u32,
    pool_size: u32,
    elements: u16,
    #[serde(default)]
    generation: u16,
    workers: Vec<Endpoint>,
}

/// A worker as every target identifies it: switch port, MAC, IPv4 address
/// and UDP port. The emulator only sees the address.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields)]
struct Endpoint {
    port: u16,
    mac: String,
    addr: SocketAddr,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    #[serde(default)]
    note: String,
    #[serde(rename = "in")]
    input: Input,
    out: Vec<Output>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Input {
    port: u16,
    from: SocketAddr,
    #[serde(flatten)]
    packet: PacketVector,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Output {
    port: u16,
    to: SocketAddr,
    queue: u8,
    #[serde(flatten)]
    packet: PacketVector,
}

/// A packet by fields (header defaults: version 1, reserved 0, elements =
/// number of values) or, for malformed input, as raw hex bytes.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PacketVector {
    #[serde(default)]
    hex: Option<String>,
    #[serde(default)]
    fields: Option<Fields>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fields {
    kind: String,
    job: u16,
    slot: u16,
    set: u8,
    worker: u16,
    #[serde(default)]
    generation: u16,
    #[serde(default)]
    priority: u8,
    #[serde(default)]
    exponent: u8,
    #[serde(default)]
    count: u16,
    #[serde(default)]
    elements: Option<u16>,
    #[serde(default)]
    packet_id: u32,
    values: Vec<i32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CounterVector {
    #[serde(default)]
    drops: BTreeMap<String, u64>,
    #[serde(default)]
    jobs: BTreeMap<u16, BTreeMap<String, u64>>,
}

impl PacketVector {
    fn bytes(&self) -> Vec<u8> {
        match (&self.hex, &self.fields) {
            (Some(hex), None) => decode_hex(hex),
            (None, Some(f)) => f.bytes(),
            _ => panic!("a packet needs exactly one of `hex` and `fields`"),
        }
    }
}

impl Fields {
    fn bytes(&self) -> Vec<u8> {
        let kind = match self.kind.as_str() {
            "contribution" => Kind::Contribution,
            "result" => Kind::Result,
            other => panic!("unknown kind {other:?}"),
        };
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
        let mut b = vec![0u8; HEADER_LEN + self.values.len() * 4];
        repr.emit(&mut Packet::new_unchecked(&mut b[..]));
        payload::write_i32s(&mut b[HEADER_LEN..], &self.values);
        assert_eq!(b[0], VERSION);
        b
    }
}

fn decode_hex(hex: &str) -> Vec<u8> {
    let digits: Vec<u8> = hex.bytes().filter(|c| !c.is_ascii_whitespace()).collect();
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).expect("hex byte"))
        .collect()
}

/// One datagram the switch sent: where, on which queue, what bytes.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Sent {
    port: u16,
    to: SocketAddr,
    queue: u8,
    bytes: Vec<u8>,
}

/// Replays a case; returns a description of the first difference.
fn run(case: &Case) -> Result<(), String> {
    let mut sw = Switch::new(SwitchConfig {
        slots: case.switch.slots,
        max_elements: case.switch.elements,
    });
    let mut ports: BTreeMap<SocketAddr, u16> = BTreeMap::new();
    for j in &case.jobs {
        for w in &j.workers {
            ports.insert(w.addr, w.port);
            assert!(w.mac.split(':').count() == 6, "bad MAC {}", w.mac);
        }
        sw.create_job(JobSpec {
            id: j.id,
            workers: j.workers.iter().map(|w| w.addr).collect(),
            pool_base: j.pool_base,
            pool_size: j.pool_size,
            elements: j.elements,
            generation: j.generation,
        })
        .map_err(|e| format!("job {}: {e}", j.id))?;
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
        let action = sw.process(&step.input.packet.bytes(), step.input.from, &mut result);
        let mut got = egress(&sw, action, &result, &ports);
        let mut want: Vec<Sent> = step
            .out
            .iter()
            .map(|o| Sent {
                port: o.port,
                to: o.to,
                queue: o.queue,
                bytes: o.packet.bytes(),
            })
            .collect();
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
        Action::Unicast { to } => vec![sent(to, result.to_vec())],
        Action::Absorbed | Action::Drop(_) => Vec::new(),
    }
}

fn check_counters(sw: &Switch, want: Option<&CounterVector>) -> Result<(), String> {
    let Some(want) = want else { return Ok(()) };
    for reason in DropReason::ALL {
        let expected = want.drops.get(reason.name()).copied().unwrap_or(0);
        let got = sw.counters().dropped(reason);
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
    Ok(())
}

fn vectors() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/conformance exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
}

#[test]
fn emulator_passes_every_conformance_vector() {
    let files = vectors();
    assert!(
        files.len() >= 12,
        "expected the full set of vectors, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        let text = std::fs::read_to_string(path).unwrap();
        let case: Case =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!case.description.is_empty() && !case.protocol.is_empty());
        if let Err(e) = run(&case) {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The runner itself must be able to fail: a vector with one wrong expected
/// value is caught.
#[test]
fn a_wrong_expectation_is_reported() {
    let path = vectors()
        .into_iter()
        .find(|p| p.ends_with("02_n_workers_complete_a_slot.json"))
        .expect("vector 02");
    let mut case: Case = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let step = case.packets.iter_mut().find(|s| !s.out.is_empty()).unwrap();
    step.out[0].packet.fields.as_mut().unwrap().values[0] += 1;
    assert!(run(&case).is_err());
}
