//! `inagg`: in-network aggregation for distributed training.

mod args;
mod backend;
mod bench;
mod cmd;
mod kernel;
mod limits;
mod tls;

use std::io::Write as _;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use cmd::ctl;
use cmd::{agent, conformance, controller, demo, emu, sim};

/// In-network aggregation: all-reduce through a (software) switch.
#[derive(Debug, Parser)]
#[command(name = "inagg", version, about)]
struct Cli {
    /// Log level or filter for messages on stderr: error, warn, info, debug,
    /// trace, or per module (`inagg_switch_control=debug,warn`). Overrides
    /// the INAGG_LOG environment variable [default: info for the daemons
    /// (emu, controller), error for the simulators (whose agents' warnings,
    /// a worker giving up after a crashed peer, are outcomes they count),
    /// warn otherwise].
    #[arg(long, global = true, value_name = "FILTER")]
    log: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// All-reduce a tensor (float or int32) through the emulator under loss and check it.
    Demo(demo::DemoArgs),
    /// Measure quantization, the emulator, and all-reduce against a TCP ring.
    Bench(bench::BenchArgs),
    /// Run the software switch.
    Emu(emu::EmuArgs),
    /// Run one worker.
    Agent(agent::AgentArgs),
    /// Program and inspect a switch, directly or through the controller.
    Ctl(ctl::CtlArgs),
    /// Run the control-plane daemon: jobs of many tenants, pools, fallback.
    Controller(controller::ControllerArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell),
    /// e.g. `inagg completions bash > /etc/bash_completion.d/inagg`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Replay the conformance vectors against the emulator or a switch on real ports.
    Conformance(conformance::ConformanceArgs),
    /// Reproduce the source papers' scheduling results in the flow-level simulator.
    Sim(sim::SimArgs),
}

/// Logs through `tracing` to stderr, filtered by `--log`, else INAGG_LOG,
/// else the command's default. A bad filter is a usage error.
fn init_logs(cli: &Cli) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let default = match cli.command {
        Command::Emu(_) | Command::Controller(_) => "info",
        Command::Sim(_) => "error",
        _ => "warn",
    };
    let filter = match (&cli.log, std::env::var("INAGG_LOG")) {
        (Some(f), _) => f.clone(),
        (None, Ok(f)) if !f.is_empty() => f,
        _ => default.to_string(),
    };
    let filter = EnvFilter::try_new(&filter)
        .map_err(|e| format!("bad log filter {filter:?}: {e} (try --log debug)"))?;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = init_logs(&cli) {
        eprintln!("inagg: error: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Demo(args) => demo::run(&args).and_then(|report| {
            let mut out = std::io::stdout().lock();
            if args.json {
                writeln!(out, "{}", serde_json::to_string(&report)?)?;
            } else {
                demo::print_summary(&report, &mut out)?;
            }
            if report.verified {
                Ok(())
            } else {
                Err(anyhow::anyhow!("the all-reduce result did not verify"))
            }
        }),
        // Not locked: the daemons and the agent run for long, and a line
        // printed from another thread must not wait for them to end.
        Command::Bench(args) => bench::run(&args, &mut std::io::stdout()),
        Command::Emu(args) => emu::run(&args, &mut std::io::stdout()),
        Command::Agent(args) => agent::run(&args, &mut std::io::stdout()),
        Command::Conformance(args) => conformance::run(&args, &mut std::io::stdout()),
        Command::Controller(args) => controller::run(&args),
        Command::Sim(args) => sim::run(&args, &mut std::io::stdout().lock()),
        Command::Completions { shell } => {
            // Into a buffer first: clap_complete panics on a write error
            // (a closed pipe), and a closed pipe is not worth a panic.
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "inagg", &mut script);
            std::io::Write::write_all(&mut std::io::stdout(), &script).map_err(anyhow::Error::from)
        }
        Command::Ctl(args) => {
            ctl::run(args, &mut std::io::stdout().lock()).map_err(anyhow::Error::from)
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // An error may quote what a tenant named or a peer sent.
            let text = inagg_policy::report::error_text(&err);
            eprintln!("inagg: error: {}", ctl::output::escape(&text));
            ExitCode::FAILURE
        }
    }
}
