//! `inagg bench --flood`: how long a client with the token waits while a
//! thousand strangers flood the control endpoint (docs/SECURITY.md, "No
//! lock-out"): connect and one request, `--repeat` times (at least 100),
//! quiet and under the flood, at the controller's API and at an emulator's
//! control endpoint, on loopback in this process. The strangers come from
//! the same address as the client, the case where the endpoint can tell
//! them apart only by what they send.

use std::io::Write;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use inagg_controller::{Controller, ControllerConfig};
use inagg_controller_api::Client;
use inagg_emu::{Emulator, EmulatorConfig};
use inagg_netio::token::Token;
use inagg_switch_control::target::Target;
use inagg_switch_control::EmuTarget;
use inagg_testbed::flood::Flood;

/// Strangers in the flood.
const STRANGERS: usize = 1000;

/// Runs the benchmark and prints its table.
pub fn run(repeat: usize, out: &mut dyn Write) -> Result<()> {
    let n = repeat.max(100);
    let token = Token::new("bench").map_err(anyhow::Error::msg)?;
    let emu = Emulator::start(EmulatorConfig {
        token: Some(token.clone()),
        ..EmulatorConfig::ephemeral()
    })?;
    let state = std::env::temp_dir().join(format!("inagg-bench-flood-{}.redb", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let control = emu.control_addr();
    let switch_token = token.clone();
    let controller = Controller::start(ControllerConfig {
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        token: Some("bench".into()),
        tls: None,
        insecure: false,
        state: state.clone(),
        switch: (
            control,
            Box::new(move || {
                Ok(Box::new(EmuTarget::connect_with(
                    control,
                    Some(&switch_token),
                    Some(1),
                )?) as Box<dyn Target + Send>)
            }),
        ),
        switch_data: None,
        fallbacks: Vec::new(),
        reconcile_every: Duration::from_millis(500),
    })
    .context("start the controller")?;
    let api = controller.addr();
    let ask_controller = || -> Result<()> {
        Client::connect(api, Some("bench".into()))?.jobs()?;
        Ok(())
    };
    let ask_emulator = || -> Result<()> {
        EmuTarget::connect_with(control, Some(&token), None)?.info()?;
        Ok(())
    };
    writeln!(
        out,
        "A client with the token: connect and one request, {n} times 10 ms apart, quiet \
         and while {STRANGERS} strangers each send a request without it every 50 ms (ms)"
    )?;
    writeln!(
        out,
        "{:<22} {:>8} {:>8} {:>8} {:>8}",
        "endpoint", "", "p50", "p99", "max"
    )?;
    for (name, addr, line, ask) in [
        (
            "controller API",
            api,
            &br#"{"request":{"op":"jobs"}}"#[..],
            &ask_controller as &dyn Fn() -> Result<()>,
        ),
        (
            "emulator control",
            control,
            &br#"{"op":"info"}"#[..],
            &ask_emulator,
        ),
    ] {
        let quiet = waits(n, ask)?;
        let flood = Flood::start(addr, STRANGERS, line);
        while flood.lines() < 2 * STRANGERS as u64 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let before = flood.lines();
        let flooded = waits(n, ask)?;
        let sent = flood.lines() - before;
        drop(flood);
        for (when, w) in [("quiet", quiet), ("flood", flooded)] {
            writeln!(
                out,
                "{name:<22} {when:>8} {:>8.2} {:>8.2} {:>8.2}",
                ms(w[n / 2]),
                ms(w[n * 99 / 100]),
                ms(w[n - 1])
            )?;
        }
        writeln!(out, "{:<22} {sent} stranger lines while measured", "")?;
    }
    drop(controller);
    let _ = std::fs::remove_file(&state);
    Ok(())
}

/// `n` waits of `ask`, one every 10 ms (so the flood runs throughout),
/// sorted; every one must succeed.
fn waits(n: usize, ask: &dyn Fn() -> Result<()>) -> Result<Vec<Duration>> {
    let mut w = Vec::with_capacity(n);
    for i in 0..n {
        std::thread::sleep(Duration::from_millis(10));
        let start = Instant::now();
        ask().with_context(|| format!("request {i} of a client with the token"))?;
        w.push(start.elapsed());
    }
    w.sort();
    Ok(w)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
