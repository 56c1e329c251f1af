//! inagg's deterministic protocol simulator.
//!
//! The real switch state machine (the emulator's [`inagg_emu::pipeline`])
//! and N real agent cores ([`inagg_host_agent::protocol`]) exchange
//! datagrams over a virtual network in virtual time, in one thread, with a
//! seed's mix of faults: loss per direction, duplication, reordering,
//! delay and jitter, a starved worker and a paused one, forgers on member
//! endpoints and strangers', replays of earlier sessions, a switch restart
//! and a worker crash. One seed replays one run exactly (the same trace
//! hash twice). Every run is checked for the protocol's invariants
//! (docs/PROTOCOL.md, "What the simulator checks"): safety (no worker is
//! handed a wrong sum), liveness (with no stalling fault every all-reduce
//! completes, and after the faults stop the next one completes: no
//! wedged slot) and bounded control traffic.
//!
//! As FoundationDB's and TigerBeetle's simulators, it finds what a test
//! on real sockets only meets by luck, and replays it on demand: `inagg
//! sim protocol --seeds N` runs seeds and prints, for a failing one, the
//! command that replays it with a readable trace.

pub mod faults;
pub mod net;
pub mod run;
pub mod trace;

pub use faults::{Fault, Faults};
pub use run::{run, Options, Outcome, Size};

/// Runs seeds `first..first + count` with `faults` on `threads` threads;
/// returns every outcome, in seed order.
pub fn run_seeds(
    first: u64,
    count: u64,
    faults: Faults,
    size: Size,
    threads: usize,
) -> Vec<Outcome> {
    let threads = threads.max(1) as u64;
    let mut outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || {
                    (first + t..first + count)
                        .step_by(threads as usize)
                        .map(|seed| {
                            run(&Options {
                                seed,
                                faults,
                                readable: false,
                                size,
                            })
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    });
    outcomes.sort_by_key(|o| o.seed);
    outcomes
}
