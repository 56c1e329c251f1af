//! The `controller` target: lines of `inagg controller`'s API, sent over
//! its TCP port (as `inagg ctl --controller` and registering agents send
//! them) to a real controller that owns a switch and a fallback: two
//! emulators in this process.
//!
//! After every line:
//! - the controller answers it with one reply line (it did not panic or
//!   close the connection), and a refusal says why;
//! - every job it reports installed is on the aggregator it is placed on,
//!   with the granted pool, K, worker count and generation;
//! - each aggregator holds nothing else;
//! - the grants on each aggregator lie inside it and do not overlap, and
//!   the free slots it reports are the rest.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use inagg_controller::{Connector, Controller, ControllerConfig};
use inagg_controller_api::Client;
use inagg_controller_api::{Envelope, JobStatus, Placement, Request, Response, SiteStatus};
use inagg_emu::server::Emulator;
use inagg_emu::SwitchConfig;
use inagg_switch_control::{EmuTarget, JobSpec, Target};

use crate::live;

/// Lines taken from one input.
const MAX_LINES: usize = 32;
/// Slots of each aggregator: small, so that jobs spill to the fallback
/// and wait.
const SLOTS: u32 = 256;
/// How long a reply may take (a registration waits at most 0 ms here).
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

/// The aggregators and their controller, shared by every input (a
/// controller per input would spend most of the fuzzer's time creating
/// its database) and emptied before each: its jobs and hand-made groups
/// are deleted. Its priority map is left as the last input set it.
struct World {
    /// The switch and the fallback, with connections that read what each
    /// holds.
    aggregators: [(Emulator, EmuTarget); 2],
    /// Kept alive: it is what `lines` and `client` talk to.
    _controller: Controller,
    /// The connection the input's lines go down, as they are.
    lines: Lines,
    /// The project's own client, for the checks and for emptying.
    client: Client,
}

fn world() -> &'static Mutex<World> {
    static WORLD: OnceLock<Mutex<World>> = OnceLock::new();
    WORLD.get_or_init(|| {
        let aggregator = || {
            live::emulator(SwitchConfig {
                slots: SLOTS,
                ..SwitchConfig::default()
            })
        };
        let aggregators = [aggregator(), aggregator()];
        let controller = start(
            aggregators[0].0.control_addr(),
            aggregators[1].0.control_addr(),
        );
        let lines = Lines::connect(controller.addr());
        let client = Client::connect(controller.addr(), None).expect("reach the controller");
        Mutex::new(World {
            aggregators,
            _controller: controller,
            lines,
            client,
        })
    })
}

/// A controller of `switch` with `fallback`, its state on tmpfs where
/// there is one (the store syncs every change).
fn start(switch: SocketAddr, fallback: SocketAddr) -> Controller {
    let dir = std::path::Path::new("/dev/shm");
    let dir = if dir.is_dir() {
        dir.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let state = dir.join(format!("inagg-fuzz-controller-{}.redb", std::process::id()));
    let _ = std::fs::remove_file(&state);
    let connector = |addr: SocketAddr| -> Connector {
        Box::new(move || Ok(Box::new(EmuTarget::connect_as(addr, 1)?) as Box<dyn Target + Send>))
    };
    let controller = Controller::start(ControllerConfig {
        tls: None,
        insecure: false,
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        token: None,
        state: state.clone(),
        switch: (switch, connector(switch)),
        switch_data: None,
        fallbacks: vec![(fallback, connector(fallback))],
        // Only the requests reconcile: what is checked after each is what
        // that request did.
        reconcile_every: Duration::from_secs(3600),
    })
    .expect("start a controller");
    // The store keeps the file open; unlinked now, it goes when the
    // process does (the controller lives as long as the process).
    let _ = std::fs::remove_file(&state);
    controller
}

/// The target.
pub fn controller(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut world = world().lock().unwrap_or_else(|p| p.into_inner());
    world.empty();
    world.check("emptying");
    for line in text.lines().take(MAX_LINES) {
        if line.trim().is_empty() {
            continue; // the controller skips blank lines, unanswered
        }
        let reply = world.lines.send(&without_waits(line));
        if let Response::Error(why) = &reply {
            assert!(!why.is_empty(), "{line:?} refused without a reason");
        }
        world.check(line);
    }
}

/// A registration's wait cut to nothing (a fuzzer cannot wait minutes
/// for ranks that never come); any other line as it is.
fn without_waits(line: &str) -> String {
    let Ok(mut envelope) = serde_json::from_str::<Envelope>(line) else {
        return line.to_string();
    };
    match &mut envelope.request {
        Request::Register { wait_ms, .. } if *wait_ms > 0 => {
            *wait_ms = 0;
            serde_json::to_string(&envelope).expect("encode a request")
        }
        _ => line.to_string(),
    }
}

impl World {
    /// Deletes every job and every group made by hand.
    fn empty(&mut self) {
        for job in self.client.jobs().expect("list the jobs") {
            let name = job.decl.name;
            self.client.delete_job(&name).expect("delete a job");
        }
        let groups = self.client.groups().expect("list the groups");
        for group in groups.into_iter().filter(|g| g.owner == "hand") {
            self.client
                .delete_group(&group.name)
                .expect("delete a group");
        }
    }

    /// The controller's account against what the aggregators hold.
    fn check(&mut self, after: &str) {
        let jobs = self.client.jobs().expect("list the jobs");
        let sites = self.client.sites().expect("list the sites");
        assert_eq!(sites.len(), 2, "after {after:?}: {sites:?}");
        for (i, site) in sites.iter().enumerate() {
            let placed: Vec<&JobStatus> = jobs
                .iter()
                .filter(|j| on_site(&j.placement, i, site))
                .collect();
            check_grants(site, &placed, after);
            let held = live::jobs(&mut self.aggregators[i].1);
            check_installed(site, &placed, &held, after);
        }
    }
}

/// Whether a job is placed on site `i` (0: the switch).
fn on_site(p: &Placement, i: usize, site: &SiteStatus) -> bool {
    match p {
        Placement::Waiting => false,
        Placement::Switch { .. } => i == 0,
        Placement::Fallback { host, .. } => i > 0 && *host == site.control,
    }
}

/// The grants on a site lie inside it, do not overlap, and leave the free
/// slots it reports.
fn check_grants(site: &SiteStatus, placed: &[&JobStatus], after: &str) {
    let mut grants: Vec<_> = placed.iter().filter_map(|j| j.placement.grant()).collect();
    grants.sort_by_key(|g| g.base);
    for pair in grants.windows(2) {
        assert!(
            pair[0].end() <= u64::from(pair[1].base),
            "after {after:?}: overlapping grants {pair:?} on {}",
            site.control
        );
    }
    let Some(slots) = site.slots else { return };
    if let Some(last) = grants.last() {
        assert!(
            last.end() <= u64::from(slots),
            "after {after:?}: {last:?} past {slots} slots"
        );
    }
    let granted: u32 = grants.iter().map(|g| g.size).sum();
    if let Some(free) = site.free {
        assert_eq!(
            free,
            slots - granted,
            "after {after:?}: free slots of {}",
            site.control
        );
    }
}

/// Every installed job is on its site as granted, and the site holds no
/// other job.
fn check_installed(site: &SiteStatus, placed: &[&JobStatus], held: &[JobSpec], after: &str) {
    for job in placed.iter().filter(|j| j.installed) {
        let grant = job.placement.grant().expect("placed");
        let spec = held.iter().find(|s| s.id == job.id).unwrap_or_else(|| {
            panic!(
                "after {after:?}: {job:?} is not on {}: {held:?}",
                site.control
            )
        });
        let as_granted = (
            spec.pool_base,
            spec.pool_size,
            spec.elements,
            spec.generation,
        );
        let wanted = (grant.base, grant.size, job.decl.elements, job.generation);
        assert_eq!(
            as_granted, wanted,
            "after {after:?}: job {} on {}",
            job.id, site.control
        );
        assert_eq!(
            spec.workers.len(),
            usize::from(job.decl.workers),
            "after {after:?}"
        );
    }
    for spec in held {
        assert!(
            placed.iter().any(|j| j.installed && j.id == spec.id),
            "after {after:?}: {} holds job {} that the controller does not place there",
            site.control,
            spec.id
        );
    }
}

/// A connection that sends the controller lines as they are (the
/// project's [`Client`] sends only well-formed requests).
struct Lines {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Lines {
    fn connect(addr: SocketAddr) -> Lines {
        let stream = TcpStream::connect(addr).expect("reach the controller");
        stream
            .set_read_timeout(Some(REPLY_TIMEOUT))
            .expect("a timeout");
        let writer = stream.try_clone().expect("a second handle");
        Lines {
            reader: BufReader::new(stream),
            writer,
        }
    }

    /// Sends a line; its reply, which must be one.
    fn send(&mut self, line: &str) -> Response {
        self.writer
            .write_all(format!("{line}\n").as_bytes())
            .unwrap_or_else(|e| {
                panic!("the controller closed the connection before {line:?}: {e}")
            });
        let mut reply = String::new();
        let n = self
            .reader
            .read_line(&mut reply)
            .unwrap_or_else(|e| panic!("no reply to {line:?}: {e}"));
        assert!(n > 0, "the controller closed the connection after {line:?}");
        serde_json::from_str(&reply).unwrap_or_else(|e| panic!("reply {reply:?} to {line:?}: {e}"))
    }
}
