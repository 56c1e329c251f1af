//! Each target's seed corpus, built from the project's own fixtures (the
//! conformance vectors, the sample switch, the C API's documented
//! configuration strings) so that a fuzzer starts deep inside each parser
//! instead of at its first length check.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;

use inagg_controller_api::{Envelope, GroupDecl, JobDecl, Request as CtlRequest};
use inagg_emu::conformance;
use inagg_switch_api::detour::RelaySpec;
use inagg_switch_api::{GroupSpec, Request};
use inagg_wire::frame::{self as eth, Endpoint, UdpFlow, MIN_FRAME};
use inagg_wire::{payload, Kind, Packet, Repr};

use crate::sample::{self, addr, K};

/// The seeds of the target `name` (none for an unknown name).
pub fn of(name: &str) -> Vec<Vec<u8>> {
    match name {
        "header" => datagrams(),
        "frame" => frames(),
        "switch" => rounds(),
        "control" => control_lines(),
        "config" => configs(),
        "cluster" => cluster_files(),
        "controller" => controller_sessions(),
        "sessions" => forgeries(),
        _ => Vec::new(),
    }
}

/// Every packet of the conformance vectors, in and out.
fn vector_packets() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance");
    let mut packets = Vec::new();
    for path in conformance::files(&dir).expect("tests/conformance") {
        let case = conformance::load(&path).expect("a conformance vector");
        for step in &case.packets {
            packets.push(step.input.packet.bytes().expect("a vector's packet"));
            for sent in conformance::expected(step).expect("a vector's output") {
                packets.push(sent.bytes);
            }
        }
    }
    packets
}

/// A datagram of `repr` with values 1, -2, 3, ...
fn datagram(repr: Repr) -> Vec<u8> {
    let mut buf = vec![0; repr.buffer_len()];
    let mut p = Packet::new_unchecked(&mut buf[..]);
    repr.emit(&mut p);
    let values: Vec<i32> = (1..=i32::from(repr.elements))
        .map(|i| if i % 2 == 0 { -i } else { i })
        .collect();
    payload::write_i32s(p.payload_mut(), &values);
    buf
}

fn datagrams() -> Vec<Vec<u8>> {
    let mut seeds = vector_packets();
    for kind in [
        Kind::Contribution,
        Kind::Result,
        Kind::Multicast,
        Kind::Detour,
    ] {
        seeds.push(datagram(Repr {
            kind,
            priority: 3,
            generation: 2,
            exponent: 7,
            count: 2,
            ..Repr::contribution(9, 5, 1, 1, 16, 77)
        }));
    }
    seeds
}

fn frames() -> Vec<Vec<u8>> {
    let flow = UdpFlow {
        src: Endpoint {
            mac: [2, 0, 0, 0, 0, 1],
            addr: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 1), 5000),
        },
        dst: Endpoint {
            mac: [2, 0, 0, 0, 0, 100],
            addr: SocketAddrV4::new(Ipv4Addr::new(10, 0, 0, 100), 47000),
        },
    };
    let mut seeds: Vec<Vec<u8>> = datagrams()
        .into_iter()
        .take(8)
        .chain([Vec::new(), vec![0xab; 3]])
        .map(|d| {
            let mut frame = vec![0; UdpFlow::frame_len(d.len())];
            flow.emit(&mut frame, d.len());
            eth::datagram_mut(&mut frame, d.len()).copy_from_slice(&d);
            eth::seal(&mut frame);
            frame
        })
        .collect();
    let us = (*flow.src.addr.ip(), flow.src.mac);
    let them = (*flow.dst.addr.ip(), flow.dst.mac);
    let mut arp = vec![0; MIN_FRAME];
    eth::arp_request(us, *flow.dst.addr.ip(), &mut arp);
    seeds.push(arp.clone());
    eth::arp_reply(them, us, &mut arp);
    seeds.push(arp);
    seeds
}

/// A record of the `switch` target's input: `[sender][length][datagram]`.
fn record(input: &mut Vec<u8>, port: u16, datagram: &[u8]) {
    let sender = sample::senders()
        .iter()
        .position(|&p| p == port)
        .expect("a sample endpoint");
    input.push(sender as u8);
    input.extend_from_slice(&(datagram.len() as u16).to_be_bytes());
    input.extend_from_slice(datagram);
}

/// Whole rounds at each job of the sample switch, each a seed: every
/// member's contribution (job 3's member 2 by its detour), the parent's
/// result for job 2, a relayed detour, a stranger.
fn rounds() -> Vec<Vec<u8>> {
    let contribution = |job, slot, worker| datagram(Repr::contribution(job, slot, 0, worker, K, 1));
    let mut seeds = Vec::new();
    for slot in [0u16, 3] {
        let mut input = Vec::new();
        for w in 0..3 {
            record(&mut input, 1000 + w, &contribution(1, slot, w));
        }
        seeds.push(input);

        let mut input = Vec::new();
        for w in 0..2 {
            record(&mut input, 2000 + w, &contribution(2, slot, w));
        }
        let down = Repr {
            kind: Kind::Result,
            count: 4,
            ..Repr::contribution(7, slot, 0, 0, K, 1)
        };
        record(&mut input, 9000, &datagram(down));
        seeds.push(input);

        let mut input = Vec::new();
        for w in 0..2 {
            record(&mut input, 3000 + w, &contribution(3, slot, w));
        }
        let detour = |job, worker| Repr {
            kind: Kind::Detour,
            ..Repr::contribution(job, slot, 0, worker, K, 1)
        };
        record(&mut input, 3100, &datagram(detour(3, 2)));
        record(&mut input, 4000, &datagram(detour(7, 1)));
        record(&mut input, 5555, &contribution(1, slot, 0));
        seeds.push(input);
    }
    seeds
}

fn control_lines() -> Vec<Vec<u8>> {
    let line = |r: &Request| serde_json::to_string(r).expect("a request serialises");
    let jobs: Vec<String> = sample::switch()
        .jobs()
        .into_iter()
        .map(|j| line(&Request::CreateJob { spec: j.spec }))
        .collect();
    let others = [
        Request::Info,
        Request::ListJobs,
        Request::Pools,
        Request::GetJob { id: 1 },
        Request::DeleteJob { id: 2 },
        Request::CreateGroup {
            group: GroupSpec {
                id: 5,
                members: vec![addr(1000), addr(1001)],
            },
        },
        Request::CreateRelay {
            relay: RelaySpec {
                job: 7,
                from: addr(4000),
                member: 1,
                to: addr(9000),
            },
        },
        Request::SetPriorityQueue { class: 3, queue: 1 },
        Request::Arbitrate { election_id: 2 },
        Request::Counters,
    ]
    .iter()
    .map(line)
    .collect::<Vec<_>>();
    vec![
        jobs.join("\n").into_bytes(),
        [jobs.join("\n"), others.join("\n")].join("\n").into_bytes(),
        others.join("\n").into_bytes(),
    ]
}

/// The configuration strings capi/README.md and the tests use.
fn configs() -> Vec<Vec<u8>> {
    [
        "switch=10.0.0.1:47000 bind=10.0.0.2:5000 job=1 worker=0 workers=4 pool_size=128 elements=256",
        "controller=10.0.0.1:47100 job=resnet rank=3 bind=10.0.0.2:5000 token=\"s3cret\"",
        "job=1 worker=1 workers=2 pool_size=16 timeout=0.5 priority=3 tree_rank=1 generation=2",
        "backend=dpdk eal=\"--no-huge -m 512 --no-pci --vdev net_af_packet0,iface=eth1\" \
         switch_mac=02:00:00:00:00:64 queues=2 dpdk_port=net_af_packet0 job=1 worker=0 \
         workers=2 pool_size=8 bind=10.0.0.2:5000 switch=10.0.0.1:47000",
        "token=\"a \\\"quoted\\\" \\\\ value\" job=1",
    ]
    .into_iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Cluster files: docs/GUIDE.md's and the module's examples, and files that keep,
/// replace or collide with the job the `cluster` target's switch holds.
fn cluster_files() -> Vec<Vec<u8>> {
    [
        r#"[switch]
target = "emu"
control = "127.0.0.1:47001"

[[job]]
id = 1
workers = ["127.0.0.1:5000", "127.0.0.1:5001"]
pool_base = 0
pool_size = 256
elements = 64
generation = 0
"#,
        r#"[[job]]
id = 7
workers = ["10.0.0.1:5000", "10.0.0.2:5000"]
pool_base = 0
pool_size = 64
"#,
        r#"[[job]]
id = 7
workers = ["10.0.0.1:5000", "10.0.0.2:5000", "10.0.0.3:5000"]
pool_base = 64
pool_size = 128
elements = 256
generation = 1

[[job]]
id = 2
workers = ["10.0.1.1:6000"]
pool_base = 512
pool_size = 32
queues = [{ class = 5, queue = 7 }, { class = 1, queue = 0 }]
group = 9
"#,
        r#"[switch]
target = "bmv2"

[[job]]
id = 3
workers = ["192.168.0.1:5000", "192.168.0.2:5000"]
pool_base = 32
pool_size = 64
"#,
        r#"[[job]]
id = 4
workers = ["10.0.0.1:5000"]
pool_base = 8000
pool_size = 192
elements = 1024
"#,
        "[switch]\ntarget = \"netfpga\"\n",
        "",
    ]
    .into_iter()
    .map(|s| s.as_bytes().to_vec())
    .collect()
}

/// Sessions with `inagg controller`: jobs with and without endpoints,
/// registrations, jobs that spill to the fallback or wait, groups, the
/// priority map, and lines it must refuse.
fn controller_sessions() -> Vec<Vec<u8>> {
    let at = |host: u8, port: u16| std::net::SocketAddr::from(([10, 0, 0, host], port));
    let job =
        |name: &str, workers: u16, slots: u32, endpoints: Option<Vec<_>>| CtlRequest::CreateJob {
            decl: JobDecl {
                name: name.into(),
                workers,
                slots,
                elements: 64,
                fallback: true,
                endpoints,
                queues: Vec::new(),
            },
        };
    let register = |job: &str, rank: u16, endpoint| CtlRequest::Register {
        job: job.into(),
        rank,
        endpoint,
        port: Some(5000 + rank),
        wait_ms: 100,
    };
    let sessions: Vec<Vec<CtlRequest>> = vec![
        vec![
            job("a", 2, 64, Some(vec![at(1, 5000), at(2, 5000)])),
            CtlRequest::Jobs,
            CtlRequest::Sites,
            CtlRequest::DeleteJob { name: "a".into() },
        ],
        vec![
            job("b", 2, 32, None),
            register("b", 0, None),
            register("b", 1, Some(at(3, 6000))),
            CtlRequest::Stats,
            CtlRequest::DeleteJob { name: "b".into() },
        ],
        vec![
            job("c", 1, 200, Some(vec![at(1, 5000)])),
            job("d", 1, 200, Some(vec![at(2, 5000)])),
            job("e", 1, 200, Some(vec![at(3, 5000)])),
            CtlRequest::DeleteJob { name: "c".into() },
            CtlRequest::Jobs,
        ],
        vec![
            CtlRequest::CreateGroup {
                decl: GroupDecl {
                    name: "g".into(),
                    id: Some(9),
                    members: vec![at(1, 5000), at(2, 5000)],
                },
            },
            CtlRequest::Groups,
            CtlRequest::SetPriority { class: 5, queue: 7 },
            CtlRequest::Priority,
            CtlRequest::DeleteGroup { name: "g".into() },
        ],
    ];
    let mut out: Vec<Vec<u8>> = sessions
        .into_iter()
        .map(|requests| {
            let mut text = String::new();
            for request in requests {
                let envelope = Envelope {
                    version: inagg_controller_api::API_VERSION,
                    token: None,
                    request,
                };
                text += &serde_json::to_string(&envelope).expect("encode a request");
                text.push('\n');
            }
            text.into_bytes()
        })
        .collect();
    out.push(
        b"not json\n{\"request\":{\"op\":\"reboot\"}}\n\
          {\"token\":\"x\",\"request\":{\"op\":\"jobs\"}}\n\
          {\"request\":{\"op\":\"register\",\"job\":\"none\",\"rank\":0,\"wait_ms\":0}}\n"
            .to_vec(),
    );
    out
}

/// Forged datagrams for the `sessions` target, 14 bytes each (see
/// `sessions::forged`; all from the endpoint the first one names): none;
/// the contribution that once poisoned every later session (worker 0,
/// slot 0, set 0, an id of epoch 1); session handshakes (weight 2) in both
/// sets; results and detours from a worker's endpoint; a storm of
/// contributions with ids of many epochs.
fn forgeries() -> Vec<Vec<u8>> {
    let record = |kind: u8, set_from: u8, slot: u8, worker: u8, count: u16, id: u32| {
        let mut r = vec![kind, set_from, 0, slot, worker, 0];
        r.extend_from_slice(&count.to_le_bytes());
        r.extend_from_slice(&id.to_le_bytes());
        r.extend_from_slice(&[7, 1]);
        r
    };
    let mut storm = Vec::new();
    for i in 0..32u32 {
        storm.extend(record(
            0,
            (i % 2) as u8 | ((i % 4 / 2) as u8) << 7,
            (i % 4) as u8,
            (i % 2) as u8,
            0,
            i << 16 | (i % 4),
        ));
    }
    vec![
        Vec::new(),
        record(0, 0, 0, 0, 0, 1 << 16),
        [
            record(0, 0, 1, 0, 2, 5 << 16 | 1),
            record(0, 0x81, 1, 1, 2, 6 << 16 | 1),
            record(0, 1, 2, 0, 2, 9 << 16 | 2),
        ]
        .concat(),
        [record(5, 0, 0, 0, 4, 1 << 16), record(7, 0x80, 3, 1, 1, 0)].concat(),
        storm,
    ]
}
