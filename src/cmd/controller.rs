//! `inagg controller`: the multi-tenant control-plane daemon.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cmd::ctl::{target_parser, Bmv2Args};
use anyhow::{bail, Context, Result};
use clap::Args;
use inagg_controller::{Connector, Controller, ControllerConfig};
use inagg_netio::metrics::MetricsServer;
use inagg_switch_control::registry::Registered;

/// Options of `inagg controller`.
#[derive(Debug, Clone, Args)]
pub struct ControllerArgs {
    /// Where the API listens. Off loopback it needs --token.
    #[arg(long, default_value = inagg_controller_api::DEFAULT_ADDR)]
    pub listen: SocketAddr,
    /// A token every client must present (`inagg ctl --token`, `inagg agent
    /// --token`, or INAGG_TOKEN).
    #[arg(long, env = "INAGG_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// TLS on the API.
    #[command(flatten)]
    pub tls: crate::tls::ServeTls,
    /// The database holding jobs, pools and the priority map across restarts.
    #[arg(long, default_value = "inagg-controller.redb")]
    pub state: PathBuf,
    /// Which kind of switch.
    #[arg(long, default_value = "emu", value_parser = target_parser())]
    pub target: &'static Registered,
    /// The switch's control endpoint [default: 127.0.0.1:47001 for emu,
    /// 127.0.0.1:9559 for bmv2, 127.0.0.1:50052 for tofino].
    #[arg(long)]
    pub switch: Option<SocketAddr>,
    /// Where workers send to reach the switch's data plane, e.g.
    /// 10.0.0.254:47000. Needed with --target bmv2: a P4 switch takes
    /// inagg's UDP port at any address routed through it, so it cannot say
    /// which one workers use. With emu it overrides what the emulator says.
    #[arg(long, value_name = "ADDR")]
    pub switch_data: Option<SocketAddr>,
    /// Options of the bmv2 target.
    #[command(flatten)]
    pub bmv2: Bmv2Args,
    /// Control endpoint of an `inagg emu` on a host, used for jobs that do
    /// not fit on the switch (repeat for more).
    #[arg(long = "fallback", value_name = "ADDR")]
    pub fallbacks: Vec<SocketAddr>,
    /// How often every aggregator is checked and brought in step, ms.
    #[arg(long, default_value_t = 500)]
    pub reconcile_ms: u64,
    /// Serve Prometheus metrics (every aggregator's counters, jobs by name)
    /// on this address, e.g. 127.0.0.1:9470. Off by default.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<SocketAddr>,
}

/// Runs the daemon until the process is killed.
pub fn run(a: &ControllerArgs) -> Result<()> {
    if a.reconcile_ms == 0 {
        bail!("--reconcile-ms must be at least 1");
    }
    let kind = a.target;
    let switch = a.switch.unwrap_or(kind.default_addr);
    // The controller claims every aggregator it manages, so that a second
    // controller pointed at them by mistake is refused, not obeyed.
    let election_id = Some(a.bmv2.election_id.unwrap_or(1));
    let bmv2 = Bmv2Args {
        election_id,
        ..a.bmv2.clone()
    };
    let switch_connect: Connector = Box::new(move || kind.connect(&bmv2.options(Some(switch))));
    let fallbacks = a
        .fallbacks
        .iter()
        .map(|&addr| {
            let claim = Bmv2Args {
                election_id,
                switch_token: a.bmv2.switch_token.clone(),
                tls: a.bmv2.tls.clone(),
                ..Bmv2Args::default()
            };
            let emu = &inagg_switch_control::emu::REGISTERED;
            let c: Connector = Box::new(move || emu.connect(&claim.options(Some(addr))));
            (addr, c)
        })
        .collect();
    let controller = Controller::start(ControllerConfig {
        listen: a.listen,
        token: a.token.clone(),
        tls: a.tls.load()?,
        insecure: a.tls.insecure,
        state: a.state.clone(),
        switch: (switch, switch_connect),
        switch_data: a.switch_data,
        fallbacks,
        reconcile_every: Duration::from_millis(a.reconcile_ms),
    })?;
    eprintln!(
        "inagg controller: API on {}, switch {switch} ({}), {} fallback(s), state in {}",
        controller.addr(),
        kind.name,
        a.fallbacks.len(),
        a.state.display()
    );
    if !kind.says_data_addr && a.switch_data.is_none() {
        eprintln!(
            "inagg controller: without --switch-data, workers that register cannot be told where \
             the switch's data plane is (a P4 switch does not say); they are refused with that advice"
        );
    }
    let _metrics = match a.metrics {
        Some(addr) => {
            let stats = controller.stats_source();
            let m = MetricsServer::start(addr, move || {
                Ok(inagg_controller::metrics::controller(&stats()))
            })
            .with_context(|| format!("serve metrics on {addr}"))?;
            eprintln!("inagg controller: metrics on http://{}/metrics", m.addr());
            Some(m)
        }
        None => None,
    };
    controller.wait();
    Ok(())
}
