//! `inagg sim reproduce NAME`: runs a paper's setup in the flow-level
//! simulator and prints the paper's headline figures next to inagg's.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};

/// Simulate the scheduling policies of the source papers.
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

/// Runs `inagg sim`.
pub fn run(args: &SimArgs) -> Result<()> {
    match &args.command {
        SimCommand::Reproduce(r) => reproduce(r),
    }
}

fn reproduce(args: &ReproduceArgs) -> Result<()> {
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
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("cannot create the output folder {}", args.out.display()))?;
    let mut reports = Vec::new();
    for name in names {
        let report = inagg_sim::reproduce(name, &opts).expect("a listed paper");
        for f in &report.figures {
            let path = args.out.join(&f.file);
            std::fs::write(&path, f.to_svg())
                .with_context(|| format!("cannot write {}", path.display()))?;
        }
        if !args.json {
            println!("{}", report.table());
            let files: Vec<&str> = report.figures.iter().map(|f| f.file.as_str()).collect();
            println!("plots in {}: {}\n", args.out.display(), files.join(", "));
        }
        reports.push(report);
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&reports)?);
    }
    let failed: Vec<String> = reports
        .iter()
        .flat_map(|r| {
            r.rows
                .iter()
                .filter(|row| !row.holds)
                .map(move |row| format!("{}: {}", r.paper, row.name))
        })
        .collect();
    if args.strict && !failed.is_empty() {
        bail!(
            "results that disagree with the papers: {}",
            failed.join("; ")
        );
    }
    Ok(())
}
