//! The `sessions` target: any datagrams a neighbour sends from one of a
//! job's worker endpoints while it is idle (contributions, results, group
//! datagrams and detours with any slot, set, member, generation, weight,
//! packet id and exponent), then a session of real workers on those
//! endpoints: it must sum its own values exactly, and in a bounded number
//! of packets (a slot that a forged packet spoiled must not become a
//! packet storm). Datagrams still on their way when the session starts
//! arrive during it. docs/PROTOCOL.md, "Sessions", is what makes this hold.
//!
//! One endpoint, the one the input's first datagram names: a forger who
//! sends from every member's endpoint can complete rounds in both sets of
//! a slot with every member's bit set, and then no member can start a
//! round there again (docs/SECURITY.md says so); this target found that.

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use inagg_emu::server::{Emulator, EmulatorConfig};
use inagg_host_agent::{AgentConfig, Worker};
use inagg_switch_api::JobSpec;
use inagg_switch_control::{EmuTarget, Target};
use inagg_wire::{Kind, Packet, Repr, HEADER_LEN};

const JOB: u16 = 1;
const WORKERS: u16 = 2;
const POOL: u32 = 4;
const K: u16 = 8;
/// Bytes of input per forged datagram.
const RECORD: usize = 14;
/// Forged datagrams taken from one input.
const MAX_FORGED: usize = 32;
/// Rounds of data per slot in the session.
const ROUNDS: usize = 3;

/// One emulator holding the job, shared by every input (the job stays
/// installed: leftovers of one input are part of the next one's world, as
/// they would be on a switch).
struct World {
    emu: Emulator,
    endpoints: Vec<SocketAddr>,
}

fn world() -> &'static Mutex<World> {
    static WORLD: OnceLock<Mutex<World>> = OnceLock::new();
    WORLD.get_or_init(|| {
        let emu = Emulator::start(EmulatorConfig::ephemeral()).expect("start an emulator");
        let endpoints: Vec<SocketAddr> = (0..WORKERS)
            .map(|_| {
                UdpSocket::bind("127.0.0.1:0")
                    .and_then(|s| s.local_addr())
                    .expect("a free port")
            })
            .collect();
        EmuTarget::connect(emu.control_addr())
            .and_then(|mut t| {
                t.create_job(&JobSpec {
                    child_switches: 0,
                    id: JOB,
                    workers: endpoints.clone(),
                    pool_base: 0,
                    pool_size: POOL,
                    elements: K,
                    generation: 0,
                    queues: Vec::new(),
                    group: None,
                    upstream: None,
                    detours: Vec::new(),
                })
            })
            .expect("install the job");
        Mutex::new(World { emu, endpoints })
    })
}

/// The forged datagram one record of input describes, and the endpoint it
/// leaves from.
fn forged(record: &[u8]) -> (usize, Vec<u8>) {
    let b = |i: usize| record[i];
    let kind = match b(0) % 8 {
        0..=4 => Kind::Contribution,
        5 => Kind::Result,
        6 => Kind::Multicast,
        _ => Kind::Detour,
    };
    let repr = Repr {
        kind,
        set: b(1) & 1,
        priority: b(2) & 7,
        job: if b(2) & 0x80 == 0 {
            JOB
        } else {
            u16::from(b(3))
        },
        slot: u16::from(b(3) % (POOL as u8 + 2)),
        worker: u16::from(b(4) % (WORKERS as u8 + 1)),
        generation: u16::from(b(4) >> 6),
        exponent: b(5),
        count: u16::from_le_bytes([b(6), b(7)]),
        elements: K,
        packet_id: u32::from_le_bytes([b(8), b(9), b(10), b(11)]),
    };
    let mut datagram = vec![0u8; HEADER_LEN + usize::from(K) * 4];
    repr.emit(&mut Packet::new_unchecked(&mut datagram[..]));
    for (i, v) in datagram[HEADER_LEN..].chunks_mut(4).enumerate() {
        let value = i32::from(b(12)).wrapping_mul(i as i32 + 1) ^ i32::from(b(13)) << 16;
        v.copy_from_slice(&value.to_be_bytes());
    }
    (usize::from(b(1) >> 7), datagram)
}

/// Distinct values per worker and input, so a sum that holds anything
/// forged or left over is wrong.
fn inputs(seed: u32) -> Vec<Vec<i32>> {
    let len = POOL as usize * usize::from(K) * ROUNDS;
    (0..i32::from(WORKERS))
        .map(|w| {
            (0..len as i32)
                .map(|i| i.wrapping_mul(7919) ^ (seed as i32).wrapping_mul(1_000_003) ^ (w << 20))
                .collect()
        })
        .collect()
}

/// See the module's documentation.
pub fn sessions(data: &[u8]) {
    let world = world().lock().unwrap_or_else(|e| e.into_inner());
    let switch = world.emu.data_addr();
    let mut forgeries = 0u64;
    let mut endpoint = None;
    for record in data.chunks_exact(RECORD).take(MAX_FORGED) {
        let (from, datagram) = forged(record);
        let from = *endpoint.get_or_insert(from);
        // The endpoint is idle between sessions, so anyone can bind it.
        let socket = UdpSocket::bind(world.endpoints[from]).expect("bind an idle endpoint");
        let _ = socket.send_to(&datagram, switch);
        forgeries += 1;
    }
    let seed = data.iter().fold(2_166_136_261u32, |h, &b| {
        (h ^ u32::from(b)).wrapping_mul(16_777_619)
    });
    let expected = inputs(seed);
    let mut tensors = expected.clone();
    let results: Vec<_> = std::thread::scope(|s| {
        let runs: Vec<_> = tensors
            .iter_mut()
            .enumerate()
            .map(|(w, tensor)| {
                let mut c = AgentConfig::new(switch, JOB, w as u16, WORKERS, POOL, K);
                c.bind = world.endpoints[w];
                c.give_up_after = Duration::from_secs(5);
                s.spawn(move || {
                    let mut worker = Worker::new(c).expect("a worker");
                    worker.allreduce_i32(tensor)
                })
            })
            .collect();
        runs.into_iter()
            .map(|r| r.join().expect("a worker thread"))
            .collect()
    });
    let mut sent = 0;
    for (w, r) in results.into_iter().enumerate() {
        match r {
            Ok(stats) => sent += stats.packets_sent,
            Err(e) => panic!("worker {w} failed after {forgeries} forged datagrams: {e}"),
        }
    }
    for (i, got) in tensors[0].iter().enumerate() {
        let want = expected[0][i].wrapping_add(expected[1][i]);
        assert_eq!(*got, want, "element {i} after {forgeries} forged datagrams");
        assert_eq!(tensors[1][i], want, "worker 1, element {i}");
    }
    // A handshake and the data rounds per slot per worker, a retry of
    // each, and a move on per forged datagram and worker.
    let rounds = u64::from(WORKERS) * u64::from(POOL) * (ROUNDS as u64 + 1);
    let bound = 2 * rounds + 2 * u64::from(WORKERS) * forgeries + 16;
    assert!(
        sent <= bound,
        "{sent} packets for {rounds} rounds after {forgeries} forged datagrams"
    );
}
