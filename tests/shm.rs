//! All-reduces through the emulator's shared-memory channels
//! (`inagg emu --shm`, `Worker::with_shm`): real rings in a real `memfd`
//! between real worker and emulator threads, the same datagrams as over
//! UDP. Int32 sums exact, float sums within the documented bound, under
//! the emulator's loss; a job mixing UDP and shared-memory workers; an
//! emulator that stops under its workers; a second attach of an endpoint.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use inagg_emu::{EmulatorConfig, FaultConfig};
use inagg_host_agent::{AgentConfig, Worker};
use inagg_testbed::local::{run_all, shm_endpoint, JobParams, LocalCluster};
use inagg_testbed::verify::{check_f32, check_i32, gradient};

/// A socket path of this test's own (removed when dropped).
struct SocketPath(PathBuf);

impl SocketPath {
    fn new(test: &str) -> SocketPath {
        let dir = std::env::temp_dir().join(format!("inagg-shm-{test}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        SocketPath(dir.join("emu.sock"))
    }
}

impl Drop for SocketPath {
    fn drop(&mut self) {
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn job(id: u16, workers: u16, pool_size: u32, elements: u16) -> JobParams {
    JobParams {
        id,
        workers,
        pool_base: u32::from(id) * 100,
        pool_size,
        elements,
    }
}

fn ints(workers: usize, len: usize) -> Vec<Vec<i32>> {
    (0..workers)
        .map(|w| {
            (0..len)
                .map(|i| {
                    (i as i32)
                        .wrapping_mul(7919)
                        .wrapping_add(w as i32 * 1_000_003)
                })
                .collect()
        })
        .collect()
}

#[test]
fn int_sums_are_exact_over_shared_memory_for_2_4_and_8_workers() {
    let path = SocketPath::new("ints");
    let cluster = LocalCluster::start_shm(FaultConfig::default(), &path.0).unwrap();
    for (id, n) in [(1u16, 2u16), (2, 4), (3, 8)] {
        let mut workers = cluster
            .job_shm(job(id, n, 64, 64), &path.0, |_| true, |_| {})
            .unwrap();
        assert!(workers.iter().all(|w| w.backend_name() == "shm"));
        let inputs = ints(n.into(), 50_000 + usize::from(n));
        let mut data = inputs.clone();
        run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
        check_i32(&inputs, &data).unwrap();
    }
    // Large datagrams (K = 16370, 64 KB) fit the rings' slots too.
    let mut workers = cluster
        .job_shm(job(4, 3, 8, 16370), &path.0, |_| true, |_| {})
        .unwrap();
    let inputs = ints(3, 200_000);
    let mut data = inputs.clone();
    run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
    check_i32(&inputs, &data).unwrap();
}

#[test]
fn float_sums_are_within_the_bound_over_shared_memory_at_2_percent_loss() {
    let path = SocketPath::new("floats");
    let cluster = LocalCluster::start_shm(FaultConfig::loss(0.02, 5), &path.0).unwrap();
    let p = job(1, 4, 32, 256);
    let mut workers = cluster.job_shm(p, &path.0, |_| true, |_| {}).unwrap();
    let inputs: Vec<Vec<f32>> = (0..4).map(|w| gradient(9, w, 100_000)).collect();
    let mut data = inputs.clone();
    let stats = run_all(&mut workers, &mut data, |w, d| w.allreduce_f32(d)).unwrap();
    let check = check_f32(&inputs, &data, 256);
    assert!(check.verified, "{check:?}");
    let resent: u64 = stats.iter().map(|s| s.retransmissions).sum();
    assert!(resent > 0, "the emulator's loss acted: {stats:?}");
}

#[test]
fn a_job_mixes_udp_and_shared_memory_workers() {
    let path = SocketPath::new("mixed");
    let cluster = LocalCluster::start_shm(FaultConfig::default(), &path.0).unwrap();
    let mut workers = cluster
        .job_shm(job(1, 4, 64, 64), &path.0, |w| w % 2 == 1, |_| {})
        .unwrap();
    let names: Vec<_> = workers.iter().map(Worker::backend_name).collect();
    assert_eq!(names, ["socket", "shm", "socket", "shm"]);
    let inputs = ints(4, 30_000);
    let mut data = inputs.clone();
    run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d)).unwrap();
    check_i32(&inputs, &data).unwrap();
}

/// The emulator stops under its workers: each all-reduce fails with an
/// error that says the channel closed, well before its give-up timeout,
/// and no worker hands back its own numbers as a sum.
#[test]
fn an_emulator_that_stops_fails_its_workers_with_a_clear_error() {
    let path = SocketPath::new("stop");
    let cluster = LocalCluster::start_shm(FaultConfig::default(), &path.0).unwrap();
    let p = job(1, 2, 16, 64);
    // Worker 1 never runs: worker 0's rounds wait for it.
    let mut workers = cluster.job_shm(p, &path.0, |_| true, |_| {}).unwrap();
    let mut lone = workers.remove(0);
    let runner = std::thread::spawn(move || {
        let mut data = vec![7i32; 10_000];
        let started = Instant::now();
        let result = lone.allreduce_i32(&mut data);
        (result.map(|_| ()), started.elapsed(), data)
    });
    std::thread::sleep(Duration::from_millis(300));
    let LocalCluster { emu } = cluster;
    emu.stop();
    let (result, took, data) = runner.join().unwrap();
    let err = result.unwrap_err().to_string();
    assert!(err.contains("closed the shared-memory channel"), "{err}");
    assert!(
        took < Duration::from_secs(9),
        "failed after {took:?}, not at its give-up"
    );
    assert!(
        data.iter().all(|&x| x == 7),
        "left as it was, not half summed"
    );
}

#[test]
fn an_endpoint_attaches_once_and_a_path_that_is_not_a_socket_is_refused() {
    let path = SocketPath::new("twice");
    let cluster = LocalCluster::start_shm(FaultConfig::default(), &path.0).unwrap();
    let endpoint = shm_endpoint(9, 0);
    let mut c = AgentConfig::new(cluster.emu.data_addr(), 9, 0, 2, 8, 64);
    c.bind = endpoint;
    let first = Worker::with_shm(c.clone(), &path.0).unwrap();
    let err = Worker::with_shm(c.clone(), &path.0)
        .unwrap_err()
        .to_string();
    assert!(err.contains("already has a shared-memory channel"), "{err}");
    drop(first);
    // Once the first is gone, the endpoint is free again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Worker::with_shm(c.clone(), &path.0) {
            Ok(_) => break,
            Err(e) if Instant::now() < deadline => {
                assert!(e.to_string().contains("already has"), "{e}");
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("never detached: {e}"),
        }
    }
    drop(cluster);
    // No emulator: a clear error naming the socket.
    let err = Worker::with_shm(c, &path.0).unwrap_err().to_string();
    assert!(err.contains("shared-memory socket"), "{err}");
    // A path that is a file, not a socket, is never replaced.
    let file = path.0.with_file_name("plain-file");
    std::fs::write(&file, b"keep me").unwrap();
    let err = inagg_emu::Emulator::start(EmulatorConfig {
        shm: Some(file.clone()),
        ..EmulatorConfig::ephemeral()
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("is not a socket"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep me");
}
