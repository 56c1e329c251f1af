//! Hostile input at the switch: whatever a network delivers, it neither
//! panics nor loses count. A seeded storm of packets (valid headers with random
//! fields, flipped bytes, truncations, trailing bytes and pure noise) from
//! every kind of sender a switch knows (members, a parent, a relay's
//! previous hop, a detour's last hop) and from strangers hits a switch
//! holding every kind of table entry (`inagg_fuzz::sample::switch`: a
//! flat job with its multicast group, a tree job with an auxiliary path, a
//! job that takes detours, and a relay entry). The `switch` fuzz target
//! holds the same switch to the same checks under libFuzzer.
//!
//! What must hold (docs/PROTOCOL.md, "Drops"):
//! - every packet is counted in, and every drop under exactly one reason;
//! - whatever the switch sends is a well-formed packet of the job's K;
//! - packets from strangers change nothing: all are dropped, and the jobs
//!   then sum exactly as if the storm had not happened.

use std::collections::BTreeMap;

use inagg_emu::switch::{Action, Switch};
use inagg_emu::DropReason;
use inagg_fuzz::sample::{addr, check_output, role, senders, switch, K, STRANGERS};
use inagg_wire::{payload, Kind, Packet, Repr};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// A well-formed header, most often the one `from`'s role calls for (so
/// many packets get deep into the checks), with its other fields near what
/// the switch holds or anywhere, and a payload of `elements` values.
fn plausible(rng: &mut ChaCha8Rng, from: u16) -> Vec<u8> {
    let kinds = [
        Kind::Contribution,
        Kind::Result,
        Kind::Multicast,
        Kind::Detour,
    ];
    let near_or_any = |rng: &mut ChaCha8Rng, near: u16| {
        if rng.random_bool(0.8) {
            rng.random_range(0..=near)
        } else {
            rng.random()
        }
    };
    let elements = if rng.random_bool(0.8) {
        K
    } else {
        rng.random_range(0..=70)
    };
    let (kind, job, worker) = match role(from) {
        Some(r) if rng.random_bool(0.6) => r,
        _ => (
            kinds[rng.random_range(0..kinds.len())],
            near_or_any(rng, 8),
            near_or_any(rng, 4),
        ),
    };
    let repr = Repr {
        kind,
        set: rng.random_range(0..=1),
        priority: rng.random_range(0..8),
        job,
        slot: near_or_any(rng, 30),
        worker,
        generation: if rng.random_bool(0.9) {
            0
        } else {
            rng.random()
        },
        exponent: rng.random(),
        count: near_or_any(rng, 4),
        elements,
        packet_id: rng.random(),
    };
    let mut buf = vec![0; repr.buffer_len()];
    let mut p = Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut p);
    let values: Vec<i32> = (0..elements).map(|_| rng.random()).collect();
    payload::write_i32s(p.payload_mut(), &values);
    buf
}

/// A plausible packet, then maybe damaged: bytes flipped, cut short,
/// bytes appended; or pure noise.
fn hostile(rng: &mut ChaCha8Rng, from: u16) -> Vec<u8> {
    if rng.random_bool(0.1) {
        let len = rng.random_range(0..400);
        return (0..len).map(|_| rng.random()).collect();
    }
    let mut buf = plausible(rng, from);
    if rng.random_bool(0.2) {
        for _ in 0..rng.random_range(1..4) {
            let i = rng.random_range(0..buf.len());
            buf[i] ^= 1 << rng.random_range(0..8);
        }
    }
    if rng.random_bool(0.1) {
        buf.truncate(rng.random_range(0..buf.len()));
    }
    if rng.random_bool(0.05) {
        let extra = rng.random_range(1..64);
        buf.extend((0..extra).map(|_| rng.random::<u8>()));
    }
    buf
}

/// A drop's reason, or the way the packet left.
fn outcome(action: Action) -> &'static str {
    match action {
        Action::Drop(reason) => reason.name(),
        Action::Absorbed => "Absorbed",
        Action::Multicast { .. } => "Multicast",
        Action::Replicate { .. } => "Replicate",
        Action::Unicast { .. } => "Unicast",
        Action::Nudge { .. } => "Nudge",
        Action::Upstream { .. } => "Upstream",
        Action::Forward { .. } => "Forward",
    }
}

fn storm(
    sw: &mut Switch,
    senders: &[u16],
    packets: usize,
    seed: u64,
) -> BTreeMap<&'static str, u64> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut seen = BTreeMap::new();
    let mut out = Vec::new();
    for _ in 0..packets {
        let port = senders[rng.random_range(0..senders.len())];
        let data = hostile(&mut rng, port);
        let from = addr(port);
        out.clear();
        let action = sw.process(&data, from, &mut out);
        check_output(action, &data, &out, K);
        *seen.entry(outcome(action)).or_default() += 1;
    }
    seen
}

#[test]
fn a_storm_from_every_sender_is_counted_and_never_panics() {
    let mut sw = switch();
    let senders = senders();
    let packets = 200_000;
    let seen = storm(&mut sw, &senders, packets, 7);
    eprintln!("{seen:?}");
    let c = sw.counters();
    assert_eq!(c.rx_packets, packets as u64);
    for reason in DropReason::ALL {
        let here = seen.get(reason.name()).copied().unwrap_or(0);
        assert_eq!(c.dropped(reason), here, "{}", reason.name());
    }
    // The storm reached every check of the switch's packet path (the
    // other reasons are the egress's and the fault injector's), and every
    // way a packet leaves it.
    let egress = [
        DropReason::InjectedIngress,
        DropReason::InjectedEgress,
        DropReason::Undeliverable,
        DropReason::QueueFull,
    ];
    let checks = DropReason::ALL.into_iter().filter(|r| !egress.contains(r));
    let ways = [
        "Absorbed",
        "Multicast",
        "Unicast",
        "Upstream",
        "Forward",
        "Replicate",
    ];
    for reached in checks.map(DropReason::name).chain(ways) {
        assert!(
            seen.get(reached).copied().unwrap_or(0) > 0,
            "{reached}: {seen:?}"
        );
    }
}

#[test]
fn a_storm_from_strangers_changes_nothing() {
    let mut sw = switch();
    let seen = storm(&mut sw, &STRANGERS, 100_000, 11);
    let kept: u64 = seen
        .iter()
        .filter(|(k, _)| DropReason::ALL.iter().all(|r| r.name() != **k))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(kept, 0, "a stranger's packet was taken: {seen:?}");
    // Job 1 then sums every slot of both sets exactly, each slot's result
    // counting its three workers.
    let mut out = Vec::new();
    for set in 0..2u8 {
        for slot in 0..8u16 {
            for worker in 0..3u16 {
                let repr = Repr::contribution(1, slot, set, worker, K, u32::from(slot));
                let mut buf = vec![0; repr.buffer_len()];
                let mut p = Packet::new_unchecked(&mut buf[..]);
                repr.emit(&mut p);
                let values = [i32::from(worker) + 1, 10, -7, i32::from(slot)];
                payload::write_i32s(p.payload_mut(), &values);
                out.clear();
                let action = sw.process(&buf, addr(1000 + worker), &mut out);
                let want = if worker == 2 {
                    Action::Multicast { job: 1 }
                } else {
                    Action::Absorbed
                };
                assert_eq!(action, want, "set {set} slot {slot} worker {worker}");
            }
            let p = Packet::new_checked(&out[..]).unwrap();
            let repr = Repr::parse(&p).unwrap();
            assert_eq!((repr.kind, repr.count), (Kind::Result, 3));
            let sums: Vec<i32> = (0..4).map(|i| p.element(i)).collect();
            assert_eq!(sums, [6, 30, -21, 3 * i32::from(slot)]);
        }
    }
}
