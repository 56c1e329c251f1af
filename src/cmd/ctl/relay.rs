//! `inagg ctl relay`: the relay table of a switch on an auxiliary path
//! (docs/PROTOCOL.md, "Auxiliary paths").

use std::io::Write;
use std::net::SocketAddr;

use clap::{Args, Subcommand};
use inagg_switch_api::detour::{RelayInfo, RelayKey, RelaySpec};

use super::output::{emit, table};
use inagg_switch_control::target::{Result, Target};

/// Relay-table verbs.
#[derive(Debug, Subcommand)]
pub enum RelayCommand {
    /// Forward detours (partial sums on an auxiliary path) of job JOB's
    /// member MEMBER that arrive from FROM on to TO, unchanged.
    Create {
        /// What the entry matches.
        #[command(flatten)]
        key: KeyArgs,
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
        /// What the entry matches.
        #[command(flatten)]
        key: KeyArgs,
    },
}

/// A relay entry's match fields on the command line.
#[derive(Debug, Args)]
pub struct KeyArgs {
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
}

impl From<KeyArgs> for RelayKey {
    fn from(k: KeyArgs) -> RelayKey {
        RelayKey {
            job: k.job,
            from: k.from,
            member: k.member,
        }
    }
}

/// Runs a relay verb against the switch.
pub fn run(cmd: RelayCommand, t: &mut dyn Target, json: bool, out: &mut dyn Write) -> Result<()> {
    match cmd {
        RelayCommand::Create { key, to } => {
            let key = RelayKey::from(key);
            let spec = RelaySpec {
                job: key.job,
                from: key.from,
                member: key.member,
                to,
            };
            t.create_relay(&spec)?;
            emit(out, json, &spec, |o| {
                writeln!(o, "created relay {key} -> {to}")
            })
        }
        RelayCommand::List => {
            let relays = t.relays()?;
            emit(out, json, &relays, |o| write_relays(o, &relays))
        }
        RelayCommand::Delete { key } => {
            let key = RelayKey::from(key);
            t.delete_relay(key)?;
            emit(out, json, &key, |o| writeln!(o, "deleted relay {key}"))
        }
    }
}

/// The relay table: match fields, next hop, packets.
fn write_relays(o: &mut dyn Write, relays: &[RelayInfo]) -> std::io::Result<()> {
    let header = format!(
        "{:>5}  {:>6}  {:<21}  {:<21}  {:>10}",
        "JOB", "MEMBER", "FROM", "TO", "PACKETS"
    );
    table(o, &header, relays, "(no relay entries)", |r| {
        let s = &r.spec;
        format!(
            "{:>5}  {:>6}  {:<21}  {:<21}  {:>10}",
            s.job,
            s.member,
            s.from.to_string(),
            s.to.to_string(),
            r.packets
        )
    })
}
