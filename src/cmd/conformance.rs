//! `inagg conformance`: replays the conformance vectors (`tests/conformance/`)
//! against a switch.
//!
//! Without `--ports` the vectors run against the emulator's state machine in
//! this process (what CI's unit test does). With `--ports` they run against a
//! real switch on real ports: each vector's jobs are installed through the
//! control plane, its input packets leave as complete Ethernet/IPv4/UDP
//! frames (etherparse) on the interface of their switch port (AF_PACKET via
//! pnet), and every UDP datagram the switch sends back on any port is
//! captured and compared with the expected output: port, destination and
//! exact payload bytes. Egress queues are not visible on a wire and are not
//! checked there; drop counters are read back through the control plane.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::cmd::ctl::{target_parser, Bmv2Args};
use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use crossbeam_channel::{Receiver, Sender};
use etherparse::{NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use inagg_emu::conformance::{self, parse_mac, Case, Sent};
use inagg_switch_control::registry::Registered;
use inagg_switch_control::target::{ControlError, Target};
use pnet_datalink::{self as datalink, Channel, DataLinkSender, NetworkInterface};

use inagg_policy::report::error_text;

/// Options of `inagg conformance`.
#[derive(Debug, Clone, Args)]
pub struct ConformanceArgs {
    /// Vector files or directories of them.
    #[arg(default_value = "tests/conformance")]
    pub paths: Vec<PathBuf>,
    /// Switch ports as INTERFACE=PORT pairs, comma-separated: replay as raw
    /// frames on these interfaces against the switch behind them.
    #[arg(long, value_delimiter = ',')]
    pub ports: Vec<String>,
    /// The switch's data-plane address (frames are sent to it).
    #[arg(long, default_value = "10.0.0.100:47000")]
    pub switch: SocketAddrV4,
    /// The MAC address frames are sent to (the switch port's).
    #[arg(long, default_value = "02:5e:00:00:00:01")]
    pub switch_mac: String,
    /// Which kind of switch programs the vectors' jobs (with --ports).
    #[arg(long, default_value = "emu", value_parser = target_parser())]
    pub target: &'static Registered,
    /// The target's control endpoint [default: 127.0.0.1:47001 for emu,
    /// 127.0.0.1:9559 for bmv2].
    #[arg(long)]
    pub addr: Option<SocketAddr>,
    /// Options of the bmv2 target.
    #[command(flatten)]
    pub bmv2: Bmv2Args,
    /// Print the bmv2 topology file (each worker's port and MAC, from the
    /// vectors) with a `# ports:` comment listing every switch port the
    /// vectors use, and exit.
    #[arg(long)]
    pub print_topology: bool,
    /// How long the switch may stay silent before a step's output is
    /// considered complete, in milliseconds.
    #[arg(long, default_value_t = 100)]
    pub quiet_ms: u64,
}

/// Runs every vector; fails with the list of failing cases.
pub fn run(args: &ConformanceArgs, out: &mut dyn Write) -> Result<()> {
    let files = vector_files(&args.paths)?;
    if files.is_empty() {
        bail!("no conformance vectors (*.json) in {:?}", args.paths);
    }
    if args.print_topology {
        return print_topology(&files, out);
    }
    let mut wire = if args.ports.is_empty() {
        None
    } else {
        Some(Wire::open(args)?)
    };
    let mut failures = Vec::new();
    for path in &files {
        let case = conformance::load(path).map_err(|e| anyhow!(e))?;
        let outcome = match &mut wire {
            None => conformance::run(&case),
            Some(w) => w.replay(&case).map_err(|e| error_text(&e)),
        };
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        match outcome {
            Ok(()) => writeln!(out, "ok    {name}")?,
            Err(e) => {
                writeln!(out, "FAIL  {name}: {e}")?;
                failures.push(name.into_owned());
            }
        }
    }
    if failures.is_empty() {
        writeln!(out, "{} vectors passed", files.len())?;
        Ok(())
    } else {
        bail!(
            "{} of {} vectors failed: {}",
            failures.len(),
            files.len(),
            failures.join(", ")
        )
    }
}

/// The topology a P4 target needs for the vectors: every job worker's port
/// and MAC by IPv4 address, and every port an input arrives on.
fn print_topology(files: &[PathBuf], out: &mut dyn Write) -> Result<()> {
    let mut workers = BTreeMap::new();
    let mut ports = std::collections::BTreeSet::new();
    for path in files {
        let case = conformance::load(path).map_err(|e| anyhow!(e))?;
        for w in case.endpoints() {
            let ip = w.addr.ip();
            if let Some((port, mac)) = workers.insert(ip, (w.port, w.mac.clone())) {
                if (port, &mac) != (w.port, &w.mac) {
                    bail!("{}: {ip} is on two ports or has two MACs", path.display());
                }
            }
            ports.insert(w.port);
        }
        ports.extend(case.packets.iter().map(|s| s.input.port));
    }
    let list: Vec<String> = ports.iter().map(u16::to_string).collect();
    writeln!(out, "# ports: {}", list.join(","))?;
    writeln!(out, "[workers]")?;
    for (ip, (port, mac)) in workers {
        writeln!(out, "\"{ip}\" = {{ port = {port}, mac = \"{mac}\" }}")?;
    }
    Ok(())
}

fn vector_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            files.extend(conformance::files(p).with_context(|| format!("read {}", p.display()))?);
        } else if p.is_file() {
            files.push(p.clone());
        } else {
            bail!("{}: no such file or directory", p.display());
        }
    }
    Ok(files)
}

/// A captured frame: the port it left the switch on, and its UDP datagram.
struct Captured {
    port: u16,
    from: SocketAddrV4,
    to: SocketAddrV4,
    payload: Vec<u8>,
}

/// The switch's ports, opened as raw interfaces, and its control plane.
struct Wire {
    senders: BTreeMap<u16, Box<dyn DataLinkSender>>,
    captured: Receiver<Captured>,
    switch: SocketAddrV4,
    switch_mac: [u8; 6],
    target: Box<dyn Target>,
    quiet: Duration,
}

impl Wire {
    fn open(args: &ConformanceArgs) -> Result<Wire> {
        let interfaces = datalink::interfaces();
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut senders = BTreeMap::new();
        for pair in &args.ports {
            let (name, port) = pair
                .split_once('=')
                .ok_or_else(|| anyhow!("--ports {pair:?}: expected INTERFACE=PORT"))?;
            let port: u16 = port
                .parse()
                .map_err(|_| anyhow!("--ports {pair:?}: {port:?} is not a port number"))?;
            let iface = interfaces
                .iter()
                .find(|i| i.name == name)
                .ok_or_else(|| anyhow!("--ports: no interface named {name:?}"))?;
            senders.insert(port, open_port(iface, port, tx.clone())?);
        }
        let switch_mac = parse_mac(&args.switch_mac).map_err(|e| anyhow!(e))?;
        let target = args.target.connect(&args.bmv2.options(args.addr))?;
        Ok(Wire {
            senders,
            captured: rx,
            switch: args.switch,
            switch_mac,
            target,
            quiet: Duration::from_millis(args.quiet_ms),
        })
    }

    /// One case: fresh jobs and counters, every step, then the counters.
    fn replay(&mut self, case: &Case) -> Result<()> {
        self.install(case)?;
        let macs = worker_macs(case)?;
        for (i, step) in case.packets.iter().enumerate() {
            let from = match step.input.from {
                SocketAddr::V4(a) => a,
                SocketAddr::V6(_) => bail!("packet {i}: raw replay is IPv4 only"),
            };
            let payload = step.input.packet.bytes().map_err(|e| anyhow!(e))?;
            let src_mac = macs
                .get(&step.input.from)
                .copied()
                .unwrap_or([2, 0, 0, 0, 0, 0xee]);
            self.send(step.input.port, src_mac, from, &payload)
                .with_context(|| format!("packet {i}"))?;
            let mut got = self.collect();
            let mut want: Vec<Sent> = conformance::expected(step).map_err(|e| anyhow!(e))?;
            // Queues are not visible on the wire.
            for s in want.iter_mut() {
                s.queue = 0;
            }
            got.sort();
            want.sort();
            if got != want {
                bail!(
                    "packet {i} ({}):\n  got  {got:?}\n  want {want:?}",
                    step.note
                );
            }
        }
        self.check_counters(case)
    }

    fn install(&mut self, case: &Case) -> Result<()> {
        for job in self.target.jobs()? {
            self.target.delete_job(job.spec.id)?;
        }
        // Groups made by hand for an earlier case (a job's went with it).
        for group in self.target.groups()? {
            if group.job.is_none() {
                self.target.delete_group(group.id)?;
            }
        }
        for j in &case.jobs {
            self.target.create_job(&j.spec())?;
        }
        for g in &case.groups {
            self.target.create_group(&g.spec())?;
        }
        self.replace_relays(case)?;
        self.target.reset_counters()?;
        // Nothing from an earlier case may be taken for this one's output.
        while self.captured.try_recv().is_ok() {}
        Ok(())
    }

    /// Removes an earlier case's relay entries and installs this one's. A
    /// target without relays is asked only when a case has some.
    fn replace_relays(&mut self, case: &Case) -> Result<()> {
        let installed = match self.target.relays() {
            Ok(relays) => relays,
            Err(ControlError::Unsupported { .. }) if case.relays.is_empty() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        for r in installed {
            self.target.delete_relay(r.spec.key())?;
        }
        for r in &case.relays {
            self.target.create_relay(&r.spec())?;
        }
        Ok(())
    }

    fn send(
        &mut self,
        port: u16,
        src_mac: [u8; 6],
        from: SocketAddrV4,
        payload: &[u8],
    ) -> Result<()> {
        let sender = self
            .senders
            .get_mut(&port)
            .ok_or_else(|| anyhow!("no interface given for switch port {port}"))?;
        let frame = udp_frame(src_mac, self.switch_mac, from, self.switch, payload)?;
        match sender.send_to(&frame, None) {
            Some(Ok(())) => Ok(()),
            Some(Err(e)) => Err(e).context("send frame"),
            None => bail!("send frame: the interface's buffer is full"),
        }
    }

    /// Everything the switch sends until it has been quiet for a while.
    fn collect(&self) -> Vec<Sent> {
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Ok(c) = self.captured.recv_timeout(self.quiet) {
            if c.from == self.switch {
                got.push(Sent {
                    port: c.port,
                    to: SocketAddr::V4(c.to),
                    queue: 0,
                    bytes: c.payload,
                });
            }
            if Instant::now() > deadline {
                break;
            }
        }
        got
    }

    fn check_counters(&mut self, case: &Case) -> Result<()> {
        let Some(want) = &case.counters else {
            return Ok(());
        };
        let counters = self.target.counters()?;
        conformance::check_drops(&counters, want).map_err(|e| anyhow!(e))?;
        conformance::check_relayed(&counters, want).map_err(|e| anyhow!(e))?;
        if want.groups.is_empty() {
            return Ok(());
        }
        let groups = self.target.groups()?;
        conformance::check_groups(&groups, want).map_err(|e| anyhow!(e))
    }
}

fn worker_macs(case: &Case) -> Result<BTreeMap<SocketAddr, [u8; 6]>> {
    let mut macs = BTreeMap::new();
    for w in case.endpoints() {
        macs.insert(w.addr, parse_mac(&w.mac).map_err(|e| anyhow!(e))?);
    }
    Ok(macs)
}

/// Opens an interface for raw frames; a thread forwards every UDP datagram
/// seen on it, tagged with its switch port.
fn open_port(
    iface: &NetworkInterface,
    port: u16,
    out: Sender<Captured>,
) -> Result<Box<dyn DataLinkSender>> {
    let config = datalink::Config {
        read_timeout: Some(Duration::from_millis(50)),
        ..Default::default()
    };
    let (tx, mut rx) = match datalink::channel(iface, config)
        .with_context(|| format!("open {} for raw frames (needs root)", iface.name))?
    {
        Channel::Ethernet(tx, rx) => (tx, rx),
        _ => bail!("{}: not an Ethernet interface", iface.name),
    };
    std::thread::Builder::new()
        .name(format!("capture-{}", iface.name))
        .spawn(move || loop {
            match rx.next() {
                Ok(frame) => {
                    if let Some(c) = parse_udp(port, frame) {
                        if out.send(c).is_err() {
                            return;
                        }
                    }
                }
                // Idle interface; the thread ends with the process.
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(_) => return,
            }
        })?;
    Ok(tx)
}

fn parse_udp(port: u16, frame: &[u8]) -> Option<Captured> {
    let p = SlicedPacket::from_ethernet(frame).ok()?;
    let Some(NetSlice::Ipv4(ip)) = p.net else {
        return None;
    };
    let Some(TransportSlice::Udp(udp)) = p.transport else {
        return None;
    };
    let h = ip.header();
    Some(Captured {
        port,
        from: SocketAddrV4::new(h.source_addr(), udp.source_port()),
        to: SocketAddrV4::new(h.destination_addr(), udp.destination_port()),
        payload: udp.payload().to_vec(),
    })
}

/// A complete Ethernet/IPv4/UDP frame with correct checksums.
fn udp_frame(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    from: SocketAddrV4,
    to: SocketAddrV4,
    payload: &[u8],
) -> Result<Vec<u8>> {
    let builder = PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(from.ip().octets(), to.ip().octets(), 64)
        .udp(from.port(), to.port());
    let mut frame = Vec::with_capacity(builder.size(payload.len()));
    builder
        .write(&mut frame, payload)
        .map_err(|e| anyhow!("build frame: {e}"))?;
    Ok(frame)
}
