//! `inagg sim reproduce NAME`: runs a paper's setup in the flow-level
//! simulator and prints the paper's headline figures next to inagg's.
//! `inagg sim protocol`: the deterministic protocol simulator
//! ([`super::protosim`]).

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

/// Simulate the scheduling policies of the source papers, or the protocol
/// itself under faults.
#[derive(Debug, Args)]
pub struct SimArgs {
    #[command(subcommand)]
    pub command: SimCommand,
}

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Reproduce a paper's headline results: selective-reduce, selmcast,
    /// netstorm, dsyncps, priority (or all).
    Reproduce(ReproduceArgs),
    /// Run the protocol (the emulator's switch and real agent cores) in
    /// virtual time over seeded faults, checking its invariants.
    Protocol(super::protosim::ProtocolArgs),
}

#[derive(Debug, Args)]
pub struct ReproduceArgs {
    /// Which paper: selective-reduce, selmcast, netstorm, dsyncps, priority, all.
    pub paper: String,
    /// Trials per setting (medians are reported).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1000))]
    pub trials: u64,
    /// Base seed: the same seed gives the same figures.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Run seeds SEED to SEED + SEEDS - 1 and print, for each result, the
    /// median over them, the range, and on how many seeds it agrees (plots
    /// and notes from the base seed alone). --strict then judges the
    /// medians.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub seeds: u64,
    /// A smaller sweep (fewer settings).
    #[arg(long)]
    pub quick: bool,
    /// Folder for the SVG plots (created if missing).
    #[arg(long, default_value = "sim-out")]
    pub out: PathBuf,
    /// Print the tables as JSON (one array of reports).
    #[arg(long)]
    pub json: bool,
    /// Exit non-zero when a result does not agree with its paper's claim.
    #[arg(long)]
    pub strict: bool,
}

/// Runs `inagg sim`, printing to `out` (a closed pipe is an error, not a
/// panic).
pub fn run(args: &SimArgs, out: &mut dyn Write) -> Result<()> {
    match &args.command {
        SimCommand::Reproduce(r) => reproduce(r, out),
        SimCommand::Protocol(p) => super::protosim::run(p, out),
    }
}

fn reproduce(args: &ReproduceArgs, out: &mut dyn Write) -> Result<()> {
    let names: Vec<&str> = if args.paper == "all" {
        inagg_sim::PAPERS.to_vec()
    } else if inagg_sim::PAPERS.contains(&args.paper.as_str()) {
        vec![args.paper.as_str()]
    } else {
        bail!(
            "unknown paper {:?}: expected one of {}, all",
            args.paper,
            inagg_sim::PAPERS.join(", ")
        );
    };
    let opts = inagg_sim::Options {
        trials: args.trials,
        seed: args.seed,
        quick: args.quick,
    };
    check_seeds(args.seed, args.seeds)?;
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create the output folder {}", args.out.display()))?;
    if args.seeds > 1 {
        return across_seeds(args, &names, &opts, out);
    }
    let mut reports = Vec::new();
    for name in names {
        let report = inagg_sim::reproduce(name, &opts).expect("a listed paper");
        if !args.json {
            writeln!(out, "{}", report.table())?;
        }
        write_plots(args, &report, out)?;
        reports.push(report);
    }
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&reports)?)?;
    }
    let failed = reports.iter().flat_map(|r| {
        r.rows
            .iter()
            .filter(|row| !row.holds)
            .map(move |row| format!("{}: {}", r.paper, row.name))
    });
    judge(args, failed.collect())
}

/// Writes a report's figures to the output folder and, in text mode, says
/// where.
fn write_plots(
    args: &ReproduceArgs,
    report: &inagg_sim::Report,
    out: &mut dyn Write,
) -> Result<()> {
    for f in &report.figures {
        let path = args.out.join(&f.file);
        std::fs::write(&path, f.to_svg())
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    if !args.json {
        let files: Vec<&str> = report.figures.iter().map(|f| f.file.as_str()).collect();
        writeln!(
            out,
            "plots in {}: {}\n",
            args.out.display(),
            files.join(", ")
        )?;
    }
    Ok(())
}

/// `--seeds` runs seeds SEED..=SEED + SEEDS - 1 (SEEDS >= 1, clap checks):
/// none may be past `u64::MAX` (wrapping round to seed 0 would repeat other
/// runs' figures under the wrong name).
fn check_seeds(seed: u64, seeds: u64) -> Result<()> {
    if seed.checked_add(seeds - 1).is_none() {
        bail!(
            "--seed {seed} --seeds {seeds} runs past the largest seed ({}): give a smaller --seed or fewer --seeds",
            u64::MAX
        );
    }
    Ok(())
}

/// `--seeds N`: each paper once per seed, folded row by row.
fn across_seeds(
    args: &ReproduceArgs,
    names: &[&str],
    opts: &inagg_sim::Options,
    out: &mut dyn Write,
) -> Result<()> {
    let seeds: Vec<u64> = (0..args.seeds).map(|i| args.seed + i).collect();
    let mut folded = Vec::new();
    for name in names {
        let reports: Vec<inagg_sim::Report> = seeds
            .iter()
            .map(|&seed| {
                let opts = inagg_sim::Options { seed, ..*opts };
                inagg_sim::reproduce(name, &opts).expect("a listed paper")
            })
            .collect();
        let report = inagg_sim::report::SeedReport::new(&seeds, &reports);
        if !args.json {
            writeln!(out, "{}", report.table())?;
        }
        write_plots(args, &reports[0], out)?;
        folded.push(report);
    }
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&folded)?)?;
    }
    let failed = folded.iter().flat_map(|r| {
        r.rows
            .iter()
            .filter(|row| !row.holds)
            .map(move |row| format!("{}: {}", r.paper, row.name))
    });
    judge(args, failed.collect())
}

/// With --strict, fails naming the results that disagree.
fn judge(args: &ReproduceArgs, failed: Vec<String>) -> Result<()> {
    if args.strict && !failed.is_empty() {
        bail!(
            "results that disagree with the papers: {}",
            failed.join("; ")
        );
    }
    Ok(())
}
