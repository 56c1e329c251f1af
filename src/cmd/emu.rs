//! `inagg emu`: run the software switch until killed.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::{Context, Result};
use clap::Args;
use inagg_emu::egress::{LinkConfig, PortRate};
use inagg_emu::{Emulator, EmulatorConfig, FaultConfig, SwitchConfig};
use inagg_netio::metrics::MetricsServer;
use inagg_switch_control::EmuTarget;

use crate::backend::{Backend, DpdkArgs};

/// Options of `inagg emu`.
#[derive(Debug, Clone, Args)]
pub struct EmuArgs {
    /// UDP address of the data plane. With the DPDK backend: the switch's
    /// IPv4 address and UDP port on its DPDK links.
    #[arg(long, default_value = "127.0.0.1:47000")]
    pub data: SocketAddr,
    /// Data path.
    #[arg(long, value_enum, default_value_t = Backend::Socket)]
    pub backend: Backend,
    #[command(flatten)]
    pub dpdk: DpdkArgs,
    /// TCP address of the control endpoint (loopback unless you say otherwise).
    #[arg(long, default_value = "127.0.0.1:47001")]
    pub control: SocketAddr,
    /// A token every control connection must present before anything else
    /// is answered (`ctl --switch-token`, the controller's
    /// `--switch-token`); required when --control is off loopback.
    #[arg(long, env = "INAGG_SWITCH_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// TLS on the control endpoint.
    #[command(flatten)]
    pub tls: crate::tls::ServeTls,
    /// Slots of aggregator memory.
    #[arg(long, default_value_t = 8192)]
    pub slots: u32,
    /// Largest elements per packet (K) a job may use.
    #[arg(long, default_value_t = inagg_wire::MAX_ELEMENTS as u16)]
    pub max_elements: u16,
    /// MiB of aggregator values all pools may take together (each slot
    /// holds K 32-bit values in each of its two shadow sets): a job that
    /// would pass it is refused, instead of the emulator growing until the
    /// OS kills it.
    #[arg(long, default_value_t = inagg_emu::switch::DEFAULT_MEMORY >> 20,
          value_parser = clap::value_parser!(u64).range(1..=1 << 40))]
    pub memory_mib: u64,
    /// Drop probability in both directions (shorthand).
    #[arg(long)]
    pub loss: Option<f64>,
    /// Drop probability worker -> switch.
    #[arg(long, default_value_t = 0.0)]
    pub drop_ingress: f64,
    /// Drop probability switch -> worker (per copy).
    #[arg(long, default_value_t = 0.0)]
    pub drop_egress: f64,
    /// Duplication probability, each direction.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Reordering probability, each direction.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Fault RNG seed.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Line rate of every port in Gbit/s: copies then wait in 8
    /// strict-priority queues per port (priority class -> queue set with
    /// `inagg ctl priority`). Default: no pacing.
    #[arg(long)]
    pub line_rate: Option<f64>,
    /// Bytes each egress queue holds before tail drop (with --line-rate).
    #[arg(long, default_value_t = 256 * 1024, requires = "line_rate")]
    pub queue_bytes: usize,
    /// With --line-rate: one port per host (IP address) instead of one per
    /// worker endpoint, so workers of different jobs on one host share (and
    /// compete for) its link.
    #[arg(long, requires = "line_rate")]
    pub port_per_host: bool,
    /// With --line-rate: a rate of its own for the port to one destination,
    /// ADDR=GBPS (repeat for more ports), e.g. a slow WAN link to a parent
    /// switch: `--port-rate 127.0.0.1:47001=0.05`. Changed at run time with
    /// `inagg ctl port-rate`.
    #[arg(long, value_name = "ADDR=GBPS", requires = "line_rate")]
    pub port_rate: Vec<PortRate>,
    /// Serve Prometheus metrics (counters, jobs, queues) on this address,
    /// e.g. 127.0.0.1:9471. Off by default.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
    /// Pin the data-plane thread to this CPU, so that the switch has a
    /// core of its own (keep the workers off it). Default: wherever the OS
    /// runs it.
    #[arg(long)]
    pub cpu: Option<usize>,
    /// Also serve workers on this host through shared memory: they attach
    /// at this Unix socket path (`inagg agent --shm PATH`) and exchange
    /// the same datagrams through rings, without the kernel's copies.
    /// Socket backend only, and not with --line-rate.
    #[arg(long, value_name = "PATH")]
    pub shm: Option<std::path::PathBuf>,
}

/// The ports' pacing, from --line-rate and --queue-bytes.
fn link(args: &EmuArgs) -> Result<Option<LinkConfig>> {
    let Some(gbps) = args.line_rate else {
        return Ok(None);
    };
    if !(gbps.is_finite() && gbps > 0.0) {
        anyhow::bail!("--line-rate {gbps}: give a positive number of Gbit/s, e.g. 10 or 0.5");
    }
    let link = LinkConfig {
        rate_bps: (gbps * 1e9) as u64,
        queue_bytes: args.queue_bytes,
        per_host: args.port_per_host,
    };
    link.validate().map_err(anyhow::Error::msg)?;
    Ok(Some(link))
}

/// Starts the emulator, prints where it listens, serves until killed.
pub fn run(args: &EmuArgs, out: &mut dyn Write) -> Result<()> {
    let faults = FaultConfig {
        drop_ingress: args.loss.unwrap_or(args.drop_ingress),
        drop_egress: args.loss.unwrap_or(args.drop_egress),
        duplicate: args.duplicate,
        reorder: args.reorder,
        seed: args.seed,
    };
    faults
        .validate()
        .map_err(anyhow::Error::msg)
        .context("fault settings")?;
    if args.slots == 0
        || args.max_elements == 0
        || usize::from(args.max_elements) > inagg_wire::MAX_ELEMENTS
    {
        anyhow::bail!(
            "--slots must be positive and --max-elements between 1 and {}",
            inagg_wire::MAX_ELEMENTS
        );
    }
    let config = EmulatorConfig {
        data_addr: args.data,
        control_addr: args.control,
        switch: SwitchConfig {
            slots: args.slots,
            max_elements: args.max_elements,
            memory: args.memory_mib << 20,
        },
        faults,
        link: link(args)?,
        port_rates: args.port_rate.clone(),
        token: args
            .token
            .clone()
            .map(inagg_netio::token::Token::new)
            .transpose()
            .map_err(anyhow::Error::msg)
            .context("--token")?,
        tls: args.tls.load()?,
        insecure: args.tls.insecure,
        cpu: args.cpu,
        shm: args.shm.clone(),
    };
    let emu = start(args, config)
        .with_context(|| format!("start the emulator on {} / {}", args.data, args.control))?;
    // One line: a caller that reads only the first (as the tests do) must
    // not make a second write fail.
    let shm = match &args.shm {
        Some(path) => format!("  shared memory {}", path.display()),
        None => String::new(),
    };
    writeln!(
        out,
        "inagg emu: data plane udp://{} ({:?} backend)  control tcp://{}{shm}",
        emu.data_addr(),
        args.backend,
        emu.control_addr()
    )?;
    let _metrics = match args.metrics {
        Some(addr) => {
            let reader = emu.reader();
            let m = MetricsServer::start(addr, move || {
                let reader = reader.clone();
                let mut t = EmuTarget::local(move |request| reader.ask(request));
                inagg_switch_control::metrics::emulator(&mut t)
            })
            .with_context(|| format!("serve metrics on {addr}"))?;
            eprintln!("inagg emu: metrics on http://{}/metrics", m.addr());
            Some(m)
        }
        None => None,
    };
    emu.wait();
    Ok(())
}

fn start(args: &EmuArgs, config: EmulatorConfig) -> Result<Emulator> {
    match args.backend {
        Backend::Socket => Ok(Emulator::start(config)?),
        Backend::Dpdk if args.shm.is_some() => {
            anyhow::bail!("--shm serves beside the socket backend, not --backend dpdk")
        }
        Backend::Dpdk => start_dpdk(args, config),
    }
}

#[cfg(feature = "dpdk")]
fn start_dpdk(args: &EmuArgs, config: EmulatorConfig) -> Result<Emulator> {
    if args.dpdk.queues != 1 {
        anyhow::bail!(
            "--queues {}: the emulator polls one queue per port; --queues is for agents",
            args.dpdk.queues
        );
    }
    let ports = inagg_emu::dpdk::DpdkPorts {
        eal: args.dpdk.eal()?.to_owned(),
        ports: args.dpdk.dpdk_port.clone(),
    };
    Ok(Emulator::start_dpdk(config, &ports)?)
}

#[cfg(not(feature = "dpdk"))]
fn start_dpdk(_: &EmuArgs, _: EmulatorConfig) -> Result<Emulator> {
    Err(crate::backend::not_built())
}
