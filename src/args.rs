//! Command-line arguments shared by several subcommands: a job's packet
//! size, pool and congestion window.

use anyhow::{bail, Result};
use clap::Args;
use inagg_host_agent::Window;

/// Packet size and window of a job run through the emulator, as `demo` and
/// `bench` take them: by default the largest datagram, whose per-packet
/// kernel cost is amortised like TCP's 64 KiB segments on loopback, and a
/// small window, which keeps every worker's packets in cache.
#[derive(Debug, Clone, clap::Args)]
pub struct PoolArgs {
    /// Elements per packet (K): the emulator takes up to 16370 (one UDP
    /// datagram); a Tofino job uses 64.
    #[arg(short = 'k', long = "k", default_value_t = inagg_wire::MAX_ELEMENTS as u16)]
    pub k: u16,
    /// Slots in the job's pool: the most packets each worker has outstanding.
    #[arg(long, default_value_t = 8)]
    pub window: u32,
    #[command(flatten)]
    pub congestion: WindowArgs,
}

/// How many of the pool's slots a worker keeps in flight (docs/PROTOCOL.md,
/// "Congestion window").
#[derive(Args, Debug, Clone, Copy)]
pub struct WindowArgs {
    /// Slots in flight before the first result; the window then grows
    /// while results come back in time and halves when one times out.
    #[arg(long, default_value_t = 16, value_name = "SLOTS")]
    pub initial_window: u32,
    /// Keep every slot of the pool in flight, whatever the switch sustains.
    #[arg(long, conflicts_with = "initial_window")]
    pub fixed_window: bool,
}

impl WindowArgs {
    /// The agent's window setting.
    pub fn window(&self) -> Result<Window> {
        if self.fixed_window {
            return Ok(Window::POOL);
        }
        if self.initial_window == 0 {
            bail!("--initial-window 0: a window starts at 1 slot or more");
        }
        Ok(Window::Adaptive {
            initial: self.initial_window,
        })
    }
}
