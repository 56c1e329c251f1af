//! `inagg ctl relay`: the relay table of a switch on an auxiliary path
//! (docs/PROTOCOL.md, "Auxiliary paths").

use std::io::Write;
use std::net::SocketAddr;

use clap::Subcommand;
use inagg_emu::detour::{RelayInfo, RelayKey, RelaySpec};

use super::emit;
use crate::target::{Result, Target};

/// Relay-table verbs.
#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Forward detours (partial sums on an auxiliary path) of job JOB's
    /// member MEMBER that arrive from FROM on to TO, unchanged.
    Create {
        /// The job id the detours carry (the parent switch's).
        #[arg(long)]
        job: u16,
        /// The previous hop's data-plane endpoint.
        #[arg(long)]
        from: SocketAddr,
        /// The member id the detours carry (the child switch's, at the
        /// parent).
        #[arg(long)]
        member: u16,
        /// The next hop's data-plane endpoint.
        #[arg(long)]
        to: SocketAddr,
    },
    /// List every relay entry with the detours it forwarded.
    #[command(alias = "ls")]
    List,
    /// Remove a relay entry.
    #[command(alias = "rm")]
    Delete {
        /// The detours' job id.
        #[arg(long)]
        job: u16,
        /// The previous hop.
        #[arg(long)]
        from: SocketAddr,
        /// The detours' member id.
        #[arg(long)]
        member: u16,
    },
}

/// Runs a relay verb against the switch.
pub fn run(cmd: RelayCommand, t: &mut dyn Target, json: bool, out: &mut dyn Write) -> Result<()> {
    match cmd {
        RelayCommand::Create {
            job,
            from,
            member,
            to,
        } => {
            let spec = RelaySpec {
                job,
                from,
                member,
                to,
            };
            t.create_relay(&spec)?;
            emit(out, json, &spec, |o| {
                writeln!(o, "created relay {} -> {to}", spec.key())
            })
        }
        RelayCommand::List => {
            let relays = t.relays()?;
            emit(out, json, &relays, |o| write_relays(o, &relays))
        }
        RelayCommand::Delete { job, from, member } => {
            let key = RelayKey { job, from, member };
            t.delete_relay(key)?;
            emit(out, json, &key, |o| writeln!(o, "deleted relay {key}"))
        }
    }
}

/// The relay table: match fields, next hop, packets.
fn write_relays(o: &mut dyn Write, relays: &[RelayInfo]) -> std::io::Result<()> {
    writeln!(
        o,
        "{:>5}  {:>6}  {:<21}  {:<21}  {:>10}",
        "JOB", "MEMBER", "FROM", "TO", "PACKETS"
    )?;
    for r in relays {
        let s = &r.spec;
        writeln!(
            o,
            "{:>5}  {:>6}  {:<21}  {:<21}  {:>10}",
            s.job,
            s.member,
            s.from.to_string(),
            s.to.to_string(),
            r.packets
        )?;
    }
    if relays.is_empty() {
        writeln!(o, "(no relay entries)")?;
    }
    Ok(())
}
