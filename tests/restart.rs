//! A switch that loses its state mid all-reduce (docs/PROTOCOL.md, "A
//! switch that lost its state"), on real sockets: the emulator's job is
//! deleted and installed again while four workers run an all-reduce at
//! 5% loss. The workers resume (those that hold a round's result announce
//! it to the members that lost it) and every sum is exact.
//!
//! The protocol's rule is checked over thousands of seeds in virtual
//! time (protosim, `--faults restart`); this is the same on the real
//! emulator and kernel sockets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use inagg_emu::FaultConfig;
use inagg_testbed::local::{run_all, JobParams, LocalCluster};
use inagg_testbed::verify::check_i32;

#[test]
fn a_restart_mid_allreduce_at_5_percent_loss_is_resumed_and_exact() {
    let cluster = LocalCluster::start(FaultConfig::loss(0.05, 17)).unwrap();
    let p = JobParams {
        id: 1,
        workers: 4,
        pool_base: 0,
        pool_size: 16,
        elements: 64,
    };
    let mut workers = cluster.job(p, |_| {}).unwrap();
    let len = 2_000_000;
    let inputs: Vec<Vec<i32>> = (0..4)
        .map(|w| {
            (0..len)
                .map(|i: i32| i.wrapping_mul(40_503) ^ (w << 20))
                .collect()
        })
        .collect();
    let mut data = inputs.clone();
    let done = AtomicBool::new(false);
    let restarted_mid_run = std::thread::scope(|scope| {
        let restart = scope.spawn(|| {
            // Once a few hundred rounds have completed: the restart.
            let started = Instant::now();
            loop {
                let results = cluster.emu.state().switch.jobs()[0].counters.results;
                if results > 300 || started.elapsed() > Duration::from_secs(60) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            let spec = cluster.emu.state().switch.delete_job(1).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            cluster.emu.state().switch.create_job(spec).unwrap();
            !done.load(Ordering::Acquire)
        });
        let stats = run_all(&mut workers, &mut data, |w, d| w.allreduce_i32(d));
        done.store(true, Ordering::Release);
        stats.unwrap();
        restart.join().unwrap()
    });
    assert!(restarted_mid_run, "the all-reduce ended before the restart");
    check_i32(&inputs, &data).unwrap();
}
