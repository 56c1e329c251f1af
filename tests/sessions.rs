//! Sessions of one job, one after another (docs/PROTOCOL.md, "Sessions"):
//! a new session's workers start their round counters again on slots that
//! hold an earlier session's state (complete results, and when it stopped
//! part-way, its workers' bits and partial sums). Whatever the earlier
//! sessions left, the new one must sum its own values: int32 exactly,
//! floats within the bound. Real workers over UDP through the emulator;
//! new sessions bind the endpoints the job was installed with, as new
//! processes would.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inagg_emu::FaultConfig;
use inagg_host_agent::{AgentConfig, Stats, Worker};
use inagg_testbed::local::{run_all, JobParams, LocalCluster};
use inagg_testbed::verify::{check_f32, check_i32, gradient};

const WORKERS: u16 = 3;
const POOL: u32 = 8;
const K: u16 = 64;
/// Elements per round of every slot of the pool.
const WAVE: usize = POOL as usize * K as usize;

fn params() -> JobParams {
    JobParams {
        id: 1,
        workers: WORKERS,
        pool_base: 0,
        pool_size: POOL,
        elements: K,
    }
}

/// A session's workers: new sockets on the job's endpoints. `give_up` is
/// how long a worker waits without progress (short for sessions meant to
/// stop part-way).
fn session(cluster: &LocalCluster, endpoints: &[SocketAddr], give_up: Duration) -> Vec<Worker> {
    endpoints
        .iter()
        .enumerate()
        .map(|(w, addr)| {
            let mut c = AgentConfig::new(cluster.emu.data_addr(), 1, w as u16, WORKERS, POOL, K);
            c.bind = *addr;
            c.give_up_after = give_up;
            Worker::new(c).unwrap()
        })
        .collect()
}

/// Installs the job and returns its endpoints (the first session's workers
/// are dropped: nothing has run on it yet).
fn install(cluster: &LocalCluster) -> Vec<SocketAddr> {
    let workers = cluster.job(params(), |_| {}).unwrap();
    workers.iter().map(Worker::local_addr).collect()
}

/// Distinct int32 values per worker and seed, so that a sum holding any
/// earlier session's values is wrong.
fn ints(seed: i32, len: usize) -> Vec<Vec<i32>> {
    (0..i32::from(WORKERS))
        .map(|w| {
            (0..len as i32)
                .map(|i| i.wrapping_mul(7919) ^ (seed * 1_000_003 + w * 65_537))
                .collect()
        })
        .collect()
}

/// A complete int32 session; its per-worker statistics.
fn int_session(
    cluster: &LocalCluster,
    endpoints: &[SocketAddr],
    seed: i32,
    len: usize,
) -> Vec<Stats> {
    let mut workers = session(cluster, endpoints, Duration::from_secs(10));
    let inputs = ints(seed, len);
    let mut data = inputs.clone();
    let stats = run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d))
        .unwrap_or_else(|e| panic!("session {seed}: {e:#}"));
    check_i32(&inputs, &data).unwrap_or_else(|e| panic!("session {seed}: {e:#}"));
    stats
}

fn retries(stats: &[Stats]) -> u64 {
    stats.iter().map(|s| s.handshake_retries).sum()
}

#[test]
fn a_second_session_of_one_round_per_slot_sums_its_own_values() {
    // The case that used to go wrong silently: session 2's round ids equal
    // session 1's, and session 1's results were complete in the set
    // session 2 starts on.
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let endpoints = install(&cluster);
    let first = int_session(&cluster, &endpoints, 1, WAVE);
    assert_eq!(
        retries(&first),
        0,
        "a fresh job's handshakes succeed at once"
    );
    assert!(first.iter().all(|s| s.handshakes == u64::from(POOL)));
    int_session(&cluster, &endpoints, 2, WAVE);
    int_session(&cluster, &endpoints, 3, 3 * WAVE);
    int_session(&cluster, &endpoints, 4, WAVE / 2);
}

/// One forged contribution from an idle worker's endpoint before any
/// session (worker 0, slot 0, set 0, weight 1, and a packet id of epoch 1,
/// which no worker would send in set 0): two sessions after it still sum
/// their own values, in a handful of packets. The forged id used to send
/// every worker's handshake back to set 0, whose stored result sent it back
/// again at once: a storm of packets, no retransmission, no progress.
#[test]
fn a_forged_contribution_before_a_session_does_not_poison_the_slot() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let endpoints = install(&cluster);
    let forger = std::net::UdpSocket::bind(endpoints[0]).unwrap();
    let mut datagram = vec![0u8; inagg_wire::HEADER_LEN + usize::from(K) * 4];
    inagg_wire::Repr::contribution(1, 0, 0, 0, K, 1 << 16)
        .emit(&mut inagg_wire::Packet::new_unchecked(&mut datagram[..]));
    forger.send_to(&datagram, cluster.emu.data_addr()).unwrap();
    drop(forger);
    std::thread::sleep(Duration::from_millis(50));
    for seed in [1, 2] {
        let stats = int_session(&cluster, &endpoints, seed, 3 * WAVE);
        let sent: u64 = stats.iter().map(|s| s.packets_sent).sum();
        // 3 rounds and a handshake per slot per worker, a few retries.
        let rounds = u64::from(WORKERS) * u64::from(POOL) * 4;
        assert!(
            sent <= 2 * rounds,
            "session {seed}: {sent} packets for {rounds} rounds"
        );
    }
}

#[test]
fn a_session_after_a_worker_gave_up_alone_sums_its_own_values() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let endpoints = install(&cluster);
    // Worker 2 runs without the others: its handshakes sit in every slot,
    // then it gives up.
    let mut alone = session(&cluster, &endpoints, Duration::from_millis(300)).remove(2);
    let mut data = ints(9, WAVE)[2].clone();
    alone.allreduce_i32(&mut data).unwrap_err();
    drop(alone);
    let stats = int_session(&cluster, &endpoints, 1, 2 * WAVE);
    assert!(retries(&stats) > 0, "the old bits were met: {stats:?}");
}

#[test]
fn a_session_after_one_whose_workers_stopped_at_different_rounds_sums_its_own_values() {
    // Worker 0 sends one round per slot, the others three: rounds 1 and 2
    // never complete. Then the same with a float session after it.
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let endpoints = install(&cluster);
    stop_part_way(&cluster, &endpoints, &[WAVE, 3 * WAVE, 3 * WAVE]);
    let stats = int_session(&cluster, &endpoints, 1, 2 * WAVE);
    assert!(retries(&stats) > 0, "{stats:?}");
    stop_part_way(&cluster, &endpoints, &[3 * WAVE, WAVE, 2 * WAVE]);
    float_session(&cluster, &endpoints, 7, 5 * WAVE + 3);
}

/// A session in which worker w all-reduces `lens[w]` elements (a worker with
/// a shorter tensor than the others stops early; the others give up).
fn stop_part_way(cluster: &LocalCluster, endpoints: &[SocketAddr], lens: &[usize]) {
    let mut workers = session(cluster, endpoints, Duration::from_millis(300));
    let mut data: Vec<Vec<i32>> = lens.iter().map(|&n| vec![5; n]).collect();
    let _ = run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d));
}

fn float_session(cluster: &LocalCluster, endpoints: &[SocketAddr], seed: u64, len: usize) {
    let mut workers = session(cluster, endpoints, Duration::from_secs(10));
    let inputs: Vec<Vec<f32>> = (0..usize::from(WORKERS))
        .map(|w| gradient(seed, w, len))
        .collect();
    let mut data = inputs.clone();
    run_all(&mut workers, &mut data, |w, d| w.allreduce_f32(d)).unwrap();
    let check = check_f32(&inputs, &data, K.into());
    assert!(check.verified, "{check:?}");
}

/// A small deterministic generator for the trials below.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

#[test]
fn any_mix_of_unfinished_sessions_under_faults_leaves_the_next_one_exact() {
    // Each trial: one to three sessions that stop part-way (each worker
    // with its own tensor length, some not running at all), under loss,
    // duplication and reordering; then a session that must be exact.
    let faults = FaultConfig {
        drop_ingress: 0.03,
        drop_egress: 0.03,
        duplicate: 0.03,
        reorder: 0.03,
        seed: 11,
    };
    let cluster = LocalCluster::start(faults).unwrap();
    let endpoints = install(&cluster);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut moved_on = 0;
    for trial in 0..10 {
        for _ in 0..1 + rng.below(3) {
            let lens: Vec<usize> = (0..WORKERS)
                .map(|_| rng.below(4) * WAVE + rng.below(2) * rng.below(WAVE))
                .collect();
            let who: Vec<usize> = (0..usize::from(WORKERS))
                .filter(|_| rng.below(4) > 0)
                .collect();
            let mut workers: Vec<Worker> =
                session(&cluster, &endpoints, Duration::from_millis(250))
                    .into_iter()
                    .enumerate()
                    .filter(|(w, _)| who.contains(w))
                    .map(|(_, worker)| worker)
                    .collect();
            let mut data: Vec<Vec<i32>> = who.iter().map(|&w| vec![-1; lens[w]]).collect();
            let _ = run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d));
        }
        let len = 1 + rng.below(4 * WAVE);
        let stats = if trial % 2 == 0 {
            int_session(&cluster, &endpoints, 100 + trial, len)
        } else {
            float_session(&cluster, &endpoints, trial as u64, len);
            Vec::new()
        };
        moved_on += retries(&stats);
    }
    assert!(moved_on > 0, "the trials met earlier sessions' state");
}

/// The amplification bound (docs/PROTOCOL.md): a flood of 24-byte queries
/// from a member's endpoint (a forger's, as the switch cannot tell) about
/// a complete round brings that member its result twice, then statuses
/// flagged `ANSWERED`, 36 bytes each; a resend of the contribution (as
/// large as the result) still brings the result back. Real UDP sockets on
/// the job's endpoints, through the emulator.
#[test]
fn a_flood_of_spoofed_queries_brings_back_two_results_per_round() {
    use inagg_wire::status::{Status, STATUS_LEN};
    use inagg_wire::{Kind, Packet, Repr, HEADER_LEN};
    const BIG_K: u16 = 4096;
    const FLOOD: usize = 500;
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let p = JobParams {
        elements: BIG_K,
        ..params()
    };
    let workers = cluster.job(p, |_| {}).unwrap();
    let endpoints: Vec<SocketAddr> = workers.iter().map(Worker::local_addr).collect();
    drop(workers);
    let sockets: Vec<std::net::UdpSocket> = endpoints
        .iter()
        .map(|a| {
            let s = std::net::UdpSocket::bind(a).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s
        })
        .collect();
    let to = cluster.emu.data_addr();
    let datagram = |kind: Kind, w: u16| {
        let repr = Repr {
            kind,
            ..Repr::contribution(1, 0, 0, w, BIG_K, 1 << 16)
        };
        let len = if kind == Kind::Query {
            HEADER_LEN
        } else {
            HEADER_LEN + 4 * usize::from(BIG_K)
        };
        let mut d = vec![0u8; len];
        repr.emit(&mut Packet::new_unchecked(&mut d[..]));
        if kind == Kind::Contribution {
            inagg_wire::payload::write_i32s(&mut d[HEADER_LEN..], &vec![i32::from(w) + 1; 4096]);
        }
        d
    };
    for (w, s) in sockets.iter().enumerate() {
        s.send_to(&datagram(Kind::Contribution, w as u16), to)
            .unwrap();
    }
    let mut buf = vec![0u8; 65536];
    for s in &sockets {
        let n = s.recv(&mut buf).unwrap();
        let p = Packet::new_checked(&buf[..n]).unwrap();
        assert_eq!(
            (Repr::parse(&p).unwrap().kind, p.element(0)),
            (Kind::Result, 6)
        );
    }
    let flooder = &sockets[1];
    let query = datagram(Kind::Query, 1);
    let (mut results, mut statuses, mut bytes) = (0, 0, 0);
    for _ in 0..FLOOD {
        flooder.send_to(&query, to).unwrap();
        // One answer per query, read before the next (no socket buffer
        // overflows: every answer is counted).
        let n = flooder.recv(&mut buf).unwrap();
        bytes += n;
        let p = Packet::new_checked(&buf[..n]).unwrap();
        match Repr::parse(&p).unwrap().kind {
            Kind::Result => results += 1,
            Kind::Status => {
                assert_eq!(n, HEADER_LEN + STATUS_LEN);
                let status = Status::parse(p.payload()).unwrap();
                assert!(status.answered, "{status:?}");
                statuses += 1;
            }
            kind => panic!("a {kind} answered a query"),
        }
    }
    assert_eq!((results, statuses), (2, FLOOD - 2));
    let result_len = HEADER_LEN + 4 * usize::from(BIG_K);
    assert_eq!(
        bytes,
        2 * result_len + (FLOOD - 2) * (HEADER_LEN + STATUS_LEN)
    );
    // The member itself, its copy lost again: a resend brings the result.
    flooder
        .send_to(&datagram(Kind::Contribution, 1), to)
        .unwrap();
    let n = flooder.recv(&mut buf).unwrap();
    let p = Packet::new_checked(&buf[..n]).unwrap();
    assert_eq!(
        (Repr::parse(&p).unwrap().kind, n),
        (Kind::Result, result_len)
    );
    let state = cluster.emu.state();
    let counters = &state.switch.jobs()[0].counters;
    assert_eq!(
        (counters.queries, counters.resent_results),
        (FLOOD as u64, 3)
    );
}

/// The UDP datagrams sent to `port` on loopback, captured from `lo` as a
/// hostile host on the segment captures a worker's (raw frames, AF_PACKET:
/// root only), until `stop` is set.
fn capture(
    lo: &pnet_datalink::NetworkInterface,
    port: u16,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<Vec<u8>>> {
    let config = pnet_datalink::Config {
        read_timeout: Some(Duration::from_millis(20)),
        ..Default::default()
    };
    let Ok(pnet_datalink::Channel::Ethernet(_, mut rx)) = pnet_datalink::channel(lo, config) else {
        panic!("a raw channel on lo");
    };
    std::thread::spawn(move || {
        let mut frames = Vec::new();
        while !stop.load(Ordering::Acquire) {
            let Ok(frame) = rx.next() else { continue };
            let to_port = etherparse::SlicedPacket::from_ethernet(frame)
                .ok()
                .and_then(|p| match p.transport {
                    Some(etherparse::TransportSlice::Udp(u)) => Some(u.destination_port()),
                    _ => None,
                });
            if to_port == Some(port) {
                frames.push(frame.to_vec());
            }
        }
        frames
    })
}

/// A neighbour replays a whole earlier session: every datagram its workers
/// sent, captured on loopback, sent again in a loop from their own
/// addresses (raw frames on `lo`) while three more sessions run. No worker
/// is handed a wrong sum: each ends with its session's exact int32 sums or
/// an error (docs/SECURITY.md); once the replay stops, the next session
/// completes exactly. Needs root, as the neighbour does.
#[test]
fn a_looped_replay_of_an_earlier_session_never_yields_a_wrong_sum() {
    if unsafe { libc::geteuid() } != 0 {
        inagg_testbed::skip::skip("netns", "not root: raw frames on lo need it");
        return;
    }
    let lo = pnet_datalink::interfaces()
        .into_iter()
        .find(|i| i.is_loopback())
        .expect("a loopback interface");
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let endpoints = install(&cluster);
    let port = cluster.emu.data_addr().port();
    let stop = Arc::new(AtomicBool::new(false));
    let capturing = capture(&lo, port, stop.clone());
    int_session(&cluster, &endpoints, 1, 4 * WAVE);
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Release);
    let frames = capturing.join().unwrap();
    assert!(
        frames.len() >= 3 * 4 * POOL as usize,
        "{} frames",
        frames.len()
    );

    let frames_len = frames.len();
    let received = || cluster.emu.state().switch.counters().rx_packets;
    let before = received();
    let replaying = Arc::new(AtomicBool::new(true));
    let sent = Arc::new(AtomicU64::new(0));
    let replay = {
        let (replaying, sent) = (replaying.clone(), sent.clone());
        let config = pnet_datalink::Config::default();
        let Ok(pnet_datalink::Channel::Ethernet(mut tx, _)) = pnet_datalink::channel(&lo, config)
        else {
            panic!("a raw channel on lo");
        };
        std::thread::spawn(move || {
            while replaying.load(Ordering::Acquire) {
                for f in &frames {
                    if tx.send_to(f, None).is_some_and(|r| r.is_ok()) {
                        sent.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        })
    };
    // The replay under way, a few loops of it, before the sessions start.
    let loops = |n: u64| n * frames_len as u64;
    while sent.load(Ordering::Relaxed) < loops(3) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let (mut exact, mut failed) = (0, 0);
    for seed in 2..12 {
        let workers = session(&cluster, &endpoints, Duration::from_secs(3));
        let inputs = ints(seed, 40 * WAVE);
        let sums: Vec<i32> = (0..40 * WAVE)
            .map(|i| inputs.iter().fold(0i32, |s, v| s.wrapping_add(v[i])))
            .collect();
        let ends: Vec<_> = workers
            .into_iter()
            .zip(inputs)
            .map(|(mut w, mut data)| {
                std::thread::spawn(move || w.allreduce_i32(&mut data).map(|_| data))
            })
            .collect();
        for end in ends {
            match end.join().unwrap() {
                Ok(data) => {
                    assert!(data == sums, "session {seed}: a wrong sum was handed over");
                    exact += 1;
                }
                Err(_) => failed += 1,
            }
        }
    }
    replaying.store(false, Ordering::Release);
    replay.join().unwrap();
    let sent = sent.load(Ordering::Relaxed);
    // The replay reached the switch: at least ten loops of it (the sender
    // outruns the switch's socket buffer, which drops the rest).
    let reached = received() - before;
    assert!(reached >= 10 * frames_len as u64, "{reached} of {sent}");
    eprintln!(
        "under a replay of {sent} datagrams ({reached} reached the switch; {frames_len} \
         captured): {exact} workers exact, {failed} failed with an error"
    );
    // After it, the next session sums its own values.
    int_session(&cluster, &endpoints, 9, 4 * WAVE);
}
