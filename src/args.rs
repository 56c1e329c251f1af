//! Command-line arguments shared by several subcommands: a job's packet
//! size, pool and congestion window.

use anyhow::{bail, Result};
use clap::Args;
use inagg_host_agent::{AgentConfig, Window};

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
    /// The most packets each worker keeps in flight: the window's ceiling.
    #[arg(long, default_value_t = 8)]
    pub window: u32,
    /// Slots the job's pool has beyond the window, for rounds in recovery:
    /// each round a worker asks about or resends lets another slot in, up
    /// to this many (docs/PROTOCOL.md, "Congestion window"). Default: 4
    /// for a window of at most 32 slots, none for a larger one.
    #[arg(long, value_name = "SLOTS")]
    pub spare_slots: Option<u32>,
    #[command(flatten)]
    pub congestion: WindowArgs,
}

/// Spare slots by default for a window of at most [`SPARE_WINDOW`] slots.
/// With 8 slots in flight at K = 16370, a round that loses a packet (8%
/// of them with 4 workers at 1% loss per direction, 15% with 8; a third
/// and over half at 5%) spends about 0.85 ms in recovery against 0.66 ms
/// for a whole round that loses nothing: on average about one slot in
/// recovery at 1%, two to four at 5% (docs/PERFORMANCE.md, "Goodput
/// under loss").
const DEFAULT_SPARE_SLOTS: u32 = 4;

/// The largest window given spare slots by default. In a window of 512
/// (K = 64), 4 more slots changed nothing measurable under loss, and in
/// two of several hundred lossless runs with them the workers' queries
/// went into the thousands and ended in timeouts (103 in one 0.56 s
/// all-reduce), which no run without them did; the cause is not found
/// (docs/PERFORMANCE.md, "Goodput under loss").
const SPARE_WINDOW: u32 = 32;

impl PoolArgs {
    /// The pool's spare slots: as given, or by the window's size.
    pub fn spare_slots(&self) -> u32 {
        self.spare_slots.unwrap_or(if self.window <= SPARE_WINDOW {
            DEFAULT_SPARE_SLOTS
        } else {
            0
        })
    }

    /// Slots in the job's pool: the window's and the spare ones.
    pub fn pool_size(&self) -> Result<u32> {
        let spare = self.spare_slots();
        match self.window.checked_add(spare) {
            Some(pool) if pool <= 65_536 => Ok(pool),
            _ => bail!(
                "--window {} with --spare-slots {spare}: a pool holds at most 65536 slots",
                self.window,
            ),
        }
    }

    /// What sets a worker's window and spare slots.
    pub fn tune(&self) -> Result<impl Fn(&mut AgentConfig)> {
        let window = self.congestion.window()?;
        let spare_slots = self.spare_slots();
        Ok(move |config: &mut AgentConfig| {
            config.window = window;
            config.spare_slots = spare_slots;
        })
    }
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
