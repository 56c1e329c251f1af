//! `inagg sim protocol`: runs seeds of the deterministic protocol
//! simulator (`inagg-protosim`), prints what they showed and the rate, and
//! for a failing seed the command that replays it with a readable trace.

use std::io::Write;
use std::time::Instant;

use anyhow::{bail, Result};
use clap::Args;
use inagg_protosim::{Faults, Options, Size};

#[derive(Debug, Args)]
pub struct ProtocolArgs {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Faults each seed draws its mix from (each with probability one
    /// half): loss, dup, reorder, jitter, starve, pause, forge, replay,
    /// restart, crash, comma-separated, or all, or none [default: all;
    /// loss with --loss].
    #[arg(long)]
    pub faults: Option<String>,
    /// Run one seed and print its readable trace (implies --seeds 1).
    #[arg(long)]
    pub trace: bool,
    /// Run 4 workers on ELEMENTS elements each (K = 64, a pool of 512)
    /// instead of the small random jobs of the default.
    #[arg(long)]
    pub elements: Option<usize>,
    /// With --elements: one all-reduce of a job of its own (4 workers,
    /// K = 64, a pool of 512 unless --workers, -k or --pool say
    /// otherwise) at exactly this loss each way, under exactly the faults
    /// given (loss alone unless --faults says), e.g. to time it against
    /// `inagg demo --loss` on sockets.
    #[arg(long, requires = "elements", value_parser = loss_rate)]
    pub loss: Option<f64>,
    /// With --loss: the job's workers.
    #[arg(long, requires = "loss", value_parser = clap::value_parser!(u16).range(1..=64))]
    pub workers: Option<u16>,
    /// With --loss: the job's elements per packet.
    #[arg(short, long, requires = "loss", value_parser = clap::value_parser!(u16).range(1..=16370))]
    pub k: Option<u16>,
    /// With --loss: the job's pool of slots.
    #[arg(long, requires = "loss", value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub pool: Option<u32>,
    /// With --loss: an int32 all-reduce (a float one otherwise).
    #[arg(long, requires = "loss")]
    pub int: bool,
    /// With --loss: how long a worker waits without progress before it
    /// gives up, in ms [default: 10000]. Shorter than recovery needs,
    /// calls fail, and the simulator reports them as broken liveness.
    #[arg(long, requires = "loss", value_parser = clap::value_parser!(u64).range(1..))]
    pub give_up_ms: Option<u64>,
    /// With --loss: every slot of the pool in flight whatever happens
    /// (as `inagg demo --fixed-window`), not the adaptive window.
    #[arg(long, requires = "loss")]
    pub fixed_window: bool,
    /// Threads (default: the machine's cores).
    #[arg(long)]
    pub threads: Option<usize>,
}

/// A loss probability: a number in [0, 1].
fn loss_rate(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("{v} is not a probability in [0, 1]"))
    }
}

/// Runs `inagg sim protocol`.
pub fn run(args: &ProtocolArgs, out: &mut dyn Write) -> Result<()> {
    let size = match (args.elements, args.loss) {
        (Some(0), _) => bail!("--elements must be at least 1"),
        (Some(elements), Some(loss)) => Size::Job {
            workers: args.workers.unwrap_or(4),
            k: args.k.unwrap_or(64),
            pool: args.pool.unwrap_or(512),
            elements,
            loss,
            switch_ns: None,
            float: !args.int,
            give_up_ms: args.give_up_ms,
            fixed_window: args.fixed_window,
        },
        (Some(elements), None) => Size::Large { elements },
        (None, _) => Size::Small,
    };
    let faults = match (&args.faults, args.loss) {
        (Some(f), _) => f.as_str(),
        (None, Some(_)) => "loss",
        (None, None) => "all",
    };
    let faults = Faults::parse(faults).map_err(anyhow::Error::msg)?;
    if args.trace {
        let o = inagg_protosim::run(&Options {
            seed: args.seed,
            faults,
            readable: true,
            size,
        });
        for line in &o.trace {
            writeln!(out, "{line}")?;
        }
        writeln!(out, "seed {}: {}", o.seed, o.scenario)?;
        writeln!(out, "trace hash {:016x}", o.hash)?;
        for v in &o.violations {
            writeln!(out, "VIOLATION {v}")?;
        }
        if !o.violations.is_empty() {
            bail!("seed {} broke {} invariant(s)", o.seed, o.violations.len());
        }
        return Ok(());
    }
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    let started = Instant::now();
    let outcomes = inagg_protosim::run_seeds(args.seed, args.seeds, faults, size, threads);
    let wall = started.elapsed().as_secs_f64();
    let packets: u64 = outcomes.iter().map(|o| o.packets).sum();
    let lost: u64 = outcomes.iter().map(|o| o.lost_data).sum();
    let lost_control: u64 = outcomes.iter().map(|o| o.lost_control).sum();
    let asked: u64 = outcomes.iter().map(|o| o.queries + o.statuses).sum();
    let held_up: u64 = outcomes.iter().map(|o| o.held_up).sum();
    let virtual_ms: f64 = outcomes.iter().map(|o| o.virtual_ns as f64 / 1e6).sum();
    let completed: u64 = outcomes.iter().map(|o| o.completed).sum();
    let failed: u64 = outcomes.iter().map(|o| o.failed).sum();
    let mut bad: Vec<_> = outcomes
        .iter()
        .filter(|o| !o.violations.is_empty())
        .collect();
    // Wrong sums first: they are the worst news.
    bad.sort_by_key(|o| !o.violations.iter().any(|v| v.starts_with("safety")));
    writeln!(
        out,
        "{} seeds, faults from {}: {} all-reduces completed, {} failed (as faults allow), {} seeds broke an invariant",
        outcomes.len(),
        faults,
        completed,
        failed,
        bad.len()
    )?;
    writeln!(
        out,
        "{packets} simulated packets in {wall:.2} s on {threads} thread(s): {:.2} M packets/s per core; {:.1} ms of virtual time per seed",
        packets as f64 / wall / threads as f64 / 1e6,
        virtual_ms / outcomes.len().max(1) as f64
    )?;
    writeln!(
        out,
        "data lost {lost}, control lost {lost_control}, rounds held up {held_up}, queries + statuses {asked} ({} per packet lost, {} per datum lost, {} per round held up)",
        per(asked, lost + lost_control),
        per(asked, lost),
        per(asked, held_up)
    )?;
    let mut kinds = std::collections::BTreeMap::<&str, usize>::new();
    for v in bad.iter().flat_map(|o| o.violations.iter()) {
        *kinds.entry(v.split(':').next().unwrap_or("")).or_default() += 1;
    }
    if !kinds.is_empty() {
        let tally: Vec<String> = kinds.iter().map(|(k, n)| format!("{k} {n}")).collect();
        writeln!(out, "violations: {}", tally.join(", "))?;
    }
    for o in bad.iter().take(10) {
        writeln!(out, "seed {}: {}", o.seed, o.scenario)?;
        for v in o.violations.iter().take(3) {
            writeln!(out, "  {v}")?;
        }
        writeln!(
            out,
            "  replay: inagg sim protocol --seed {} --faults {faults} --trace{}",
            o.seed,
            job_args(args)
        )?;
    }
    if !bad.is_empty() {
        bail!(
            "{} of {} seeds broke an invariant",
            bad.len(),
            outcomes.len()
        );
    }
    Ok(())
}

/// The options that chose the job, as a replay command gives them again.
fn job_args(args: &ProtocolArgs) -> String {
    let mut line = String::new();
    if let Some(e) = args.elements {
        line += &format!(" --elements {e}");
    }
    if let Some(l) = args.loss {
        line += &format!(" --loss {l}");
    }
    if let Some(w) = args.workers {
        line += &format!(" --workers {w}");
    }
    if let Some(k) = args.k {
        line += &format!(" -k {k}");
    }
    if let Some(p) = args.pool {
        line += &format!(" --pool {p}");
    }
    if args.int {
        line += " --int";
    }
    if let Some(ms) = args.give_up_ms {
        line += &format!(" --give-up-ms {ms}");
    }
    if args.fixed_window {
        line += " --fixed-window";
    }
    line
}

/// `a / b` to two places, or "-" when `b` is 0.
fn per(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.2}", a as f64 / b as f64)
    }
}
