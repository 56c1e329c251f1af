//! Times the DPDK agent's own per-packet path: one worker on a net_ring port
//! in loopback mode (the link answers each contribution as a one-worker
//! switch would), all-reducing the same tensor many times in a row.
//!
//! ```sh
//! sudo cargo run --release -p inagg-host-agent --features dpdk \
//!     --example dpdk_loopback -- [i32|f32] [elements]
//! ```
//!
//! Prints the minimum, 10th percentile and median nanoseconds per packet
//! over the runs (`Stats::elapsed / Stats::packets_sent`). K = 64 and a
//! window of 64, as in `inagg bench --backend dpdk`; a tensor of 256K
//! elements by default (1 MiB: cache-resident, so the figure is the path's
//! cost, not the memory's).

use inagg_host_agent::dpdk::DpdkOptions;
use inagg_host_agent::{AgentConfig, Worker};

const EAL: &str = "--no-huge -m 1024 --no-pci --no-shconf --no-telemetry \
                   --log-level=lib.eal:error --vdev net_ring0";

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let float = match args.next().as_deref() {
        None | Some("f32") => true,
        Some("i32") => false,
        Some(other) => return Err(format!("expected i32 or f32, not {other:?}").into()),
    };
    let n: usize = match args.next() {
        Some(v) => v.parse().map_err(|e| format!("elements {v:?}: {e}"))?,
        None => 1 << 18,
    };
    if n == 0 {
        return Err("elements must be at least 1".into());
    }
    let config = AgentConfig::new("10.0.0.100:47000".parse()?, 1, 0, 1, 64, 64);
    let mut options = DpdkOptions::new(EAL, "10.0.0.1:40000".parse()?);
    options.loopback = true;
    let mut worker = Worker::new_dpdk(config, &options)?;
    let ints: Vec<i32> = (0..n as i32).collect();
    let floats: Vec<f32> = (0..n).map(|i| (i as f32 * 0.01).sin()).collect();
    // About 120M elements in all, at most 3000 runs.
    let runs = (120_000_000 / n).clamp(5, 3000);
    let mut ns = Vec::with_capacity(runs);
    for _ in 0..runs {
        let stats = if float {
            worker.allreduce_f32(&mut floats.clone())?
        } else {
            worker.allreduce_i32(&mut ints.clone())?
        };
        ns.push(stats.elapsed.as_nanos() as f64 / stats.packets_sent as f64);
    }
    ns.sort_by(f64::total_cmp);
    println!(
        "{} x {n} elements, {runs} runs: ns per packet min {:.1}, p10 {:.1}, median {:.1}",
        if float { "f32" } else { "i32" },
        ns[0],
        ns[runs / 10],
        ns[runs / 2]
    );
    Ok(())
}
