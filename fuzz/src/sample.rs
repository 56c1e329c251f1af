//! The switch the `switch` target and the hostile-input tests run against:
//! one of every kind of table entry, and the endpoints it knows.

use std::net::SocketAddr;

use inagg_emu::switch::Action;
use inagg_emu::{JobSpec, Switch, SwitchConfig};
use inagg_switch_api::detour::{AuxPath, Detour, RelaySpec};
use inagg_switch_api::Upstream;
use inagg_wire::status::STATUS_LEN;
use inagg_wire::{Kind, Packet, Repr, HEADER_LEN};

/// K of every job of the sample switch.
pub const K: u16 = 4;

/// A loopback endpoint.
pub fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

fn job(id: u16, workers: &[u16], pool_base: u32) -> JobSpec {
    JobSpec::new(
        id,
        workers.iter().map(|&p| addr(p)).collect(),
        pool_base,
        8,
        K,
    )
}

/// Job 1: flat, three workers, multicast group 5. Job 2: a tree job whose
/// partial sums go to job 7 at 9000, with an auxiliary path via 9100.
/// Job 3: takes member 2's detours from 3100. A relay entry carries job 7's
/// member 1 from 4000 on to 9000.
pub fn switch() -> Switch {
    let mut sw = Switch::new(SwitchConfig {
        slots: 64,
        max_elements: 64,
        ..SwitchConfig::default()
    });
    let installed = [
        sw.create_job(JobSpec {
            group: Some(5),
            ..job(1, &[1000, 1001, 1002], 0)
        }),
        sw.create_job(JobSpec {
            upstream: Some(Upstream {
                switch: addr(9000),
                job: 7,
                member: 0,
                aux: Some(AuxPath {
                    via: addr(9100),
                    busy_bound: 2,
                    queue_length: 1,
                }),
            }),
            ..job(2, &[2000, 2001], 8)
        }),
        sw.create_job(JobSpec {
            detours: vec![Detour {
                member: 2,
                relay: addr(3100),
            }],
            ..job(3, &[3000, 3001, 3002], 16)
        }),
        sw.create_relay(RelaySpec {
            job: 7,
            from: addr(4000),
            member: 1,
            to: addr(9000),
        }),
    ];
    for result in installed {
        result.expect("the sample switch's tables");
    }
    sw
}

/// Every endpoint the sample switch knows, in some role.
pub const KNOWN: [u16; 11] = [
    1000, 1001, 1002, 2000, 2001, 3000, 3001, 3002, 3100, 4000, 9000,
];

/// Endpoints it does not know.
pub const STRANGERS: [u16; 3] = [1003, 5555, 9100];

/// Every sender: the known endpoints, then the strangers. The `switch`
/// target's inputs name a sender by its index here.
pub fn senders() -> Vec<u16> {
    KNOWN.iter().chain(&STRANGERS).copied().collect()
}

/// The header a sender at `port` would send in its role here (kind, job,
/// worker or member id), if it has one.
pub fn role(port: u16) -> Option<(Kind, u16, u16)> {
    Some(match port {
        1000..=1002 => (Kind::Contribution, 1, port - 1000),
        2000..=2001 => (Kind::Contribution, 2, port - 2000),
        3000..=3002 => (Kind::Contribution, 3, port - 3000),
        3100 => (Kind::Detour, 3, 2),
        4000 => (Kind::Detour, 7, 1),
        9000 => (Kind::Result, 2, 0),
        _ => return None,
    })
}

/// What the switch sent for `input` must be the datagram verbatim (a
/// forward or a group copy) or a packet that parses, with K `k`.
pub fn check_output(action: Action, input: &[u8], out: &[u8], k: u16) {
    match action {
        Action::Drop(_) | Action::Absorbed => {}
        Action::Forward { .. } | Action::Replicate { .. } => {
            assert_eq!(out, input, "{action:?} must copy the datagram verbatim")
        }
        Action::Multicast { .. }
        | Action::Unicast { .. }
        | Action::Upstream { .. }
        | Action::Nudge { .. } => {
            let p = Packet::new_checked(out).expect("the switch sent a short packet");
            let repr = Repr::parse(&p).expect("the switch sent a malformed packet");
            assert_eq!(repr.elements, k, "{action:?}: {repr:?}");
            let body = match repr.kind {
                Kind::Status => STATUS_LEN,
                _ => usize::from(k) * 4,
            };
            assert_eq!(out.len(), HEADER_LEN + body, "{action:?}: {repr:?}");
        }
    }
}
