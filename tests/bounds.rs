//! Control endpoints under a flood of idle connections: the emulator's and
//! the controller's serve at most 64 at once (inagg_netio::conns), so 300
//! connections that never send a request cost at most 64 threads, and a
//! legitimate client is still served: it takes the place of a silent one.

use std::net::TcpStream;

use inagg_controller_api::Client;
use inagg_emu::FaultConfig;
use inagg_switch_control::target::Target;
use inagg_switch_control::EmuTarget;
use inagg_testbed::local::LocalCluster;

/// This process's threads (Linux).
fn threads() -> usize {
    std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

/// 300 connections to `addr` that say nothing.
fn flood(addr: std::net::SocketAddr) -> Vec<TcpStream> {
    (0..300)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect()
}

/// One test, not two: the thread count is the whole process's.
#[test]
fn control_endpoints_serve_a_client_through_a_flood_of_silent_connections() {
    emulator();
    controller();
}

fn emulator() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let before = threads();
    let _idle = flood(cluster.control_addr());
    // Let the accept loop take them all.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let during = threads();
    assert!(
        during <= before + 64,
        "{during} threads with 300 silent connections (from {before})"
    );
    let mut t = EmuTarget::connect(cluster.control_addr()).unwrap();
    assert!(t.jobs().unwrap().is_empty());
}

fn controller() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let state = std::env::temp_dir().join(format!("inagg-bounds-{}.redb", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let controller = cluster.controller(&state).unwrap();
    let before = threads();
    let _idle = flood(controller.addr());
    std::thread::sleep(std::time::Duration::from_millis(500));
    let during = threads();
    assert!(
        during <= before + 64,
        "{during} threads with 300 silent connections (from {before})"
    );
    let mut client = Client::connect(controller.addr(), None).unwrap();
    assert!(client.jobs().unwrap().is_empty());
    drop(controller);
    let _ = std::fs::remove_file(state);
}
