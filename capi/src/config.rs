//! The configuration string of `inagg_worker_new`: `key=value` entries
//! separated by white space, the keys named after `inagg agent`'s flags.
//!
//! ```text
//! switch=10.0.0.1:47000 bind=10.0.0.2:5000 job=1 worker=0 workers=4 pool_size=128 elements=256
//! controller=10.0.0.1:47100 job=resnet rank=3 bind=10.0.0.2:5000 token="s3cret"
//! controller=10.0.0.1:47100 job=resnet rank=3 bind=10.0.0.2:5000 tls_ca=/etc/inagg/ca.pem
//! ```
//!
//! A string, not a C struct, so that keys can be added without breaking
//! the ABI and every language can build one; a value holding spaces or
//! quotes goes in double quotes, with `\"` and `\\` inside.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use inagg_controller_api::client::ClientError;
use inagg_controller_api::Client;
use inagg_host_agent::{AgentConfig, Window};
use inagg_netio::tls::{ClientFiles, ClientTls};

/// The keys, in the order the error for an unknown key lists them.
const KEYS: &[&str] = &[
    "switch",
    "bind",
    "job",
    "worker",
    "rank",
    "workers",
    "tree_rank",
    "pool_size",
    "elements",
    "generation",
    "priority",
    "timeout",
    "window",
    "spare_slots",
    "controller",
    "token",
    "tls",
    "tls_ca",
    "tls_cert",
    "tls_key",
    "tls_name",
    "register_wait",
    "backend",
    "eal",
    "dpdk_port",
    "switch_mac",
    "queues",
    "shm",
];

/// Keys that only mean something with `backend=dpdk`.
const DPDK_KEYS: &[&str] = &["eal", "dpdk_port", "switch_mac", "queues"];

/// Keys of TLS towards the controller (`inagg agent --tls-*`).
const TLS_KEYS: &[&str] = &["tls", "tls_ca", "tls_cert", "tls_key", "tls_name"];

/// Keys that the controller gives, so that a configuration with
/// `controller` must not give them too.
const FROM_CONTROLLER: &[&str] = &["switch", "workers", "pool_size", "elements", "generation"];

/// The switch's data-plane address when none is given (`inagg emu`'s).
const DEFAULT_SWITCH: &str = "127.0.0.1:47000";

/// Why no agent configuration came out of the settings.
#[derive(Debug, Clone, PartialEq)]
pub enum SetupError {
    /// The string is unusable: the caller's.
    Invalid(String),
    /// The controller could not be reached or answered nonsense: the
    /// environment's.
    Unreachable(String),
    /// The controller refused the registration; its message says why.
    Refused(String),
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SetupError::Invalid(m) | SetupError::Unreachable(m) | SetupError::Refused(m) => {
                f.write_str(m)
            }
        }
    }
}

impl From<String> for SetupError {
    fn from(m: String) -> Self {
        SetupError::Invalid(m)
    }
}

impl From<&str> for SetupError {
    fn from(m: &str) -> Self {
        SetupError::Invalid(m.into())
    }
}

/// A parsed configuration: where the job's parameters come from, and the
/// worker's own settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    entries: BTreeMap<String, String>,
}

/// Splits `text` into its `key=value` entries, refusing unknown and
/// repeated keys.
pub fn parse(text: &str) -> Result<Settings, String> {
    let mut entries = BTreeMap::new();
    let mut rest = text.trim_start();
    while !rest.is_empty() {
        let (key, value, after) = entry(rest)?;
        if !KEYS.contains(&key) {
            return Err(format!(
                "unknown key {key:?}; the keys are {}",
                KEYS.join(", ")
            ));
        }
        let key = if key == "rank" { "worker" } else { key };
        if entries.insert(key.to_string(), value).is_some() {
            return Err(format!(
                "{key} is given twice (worker and rank are one key)"
            ));
        }
        rest = after.trim_start();
    }
    Ok(Settings { entries })
}

/// One entry at the start of `text`: its key, its value unquoted, and
/// what follows it.
fn entry(text: &str) -> Result<(&str, String, &str), String> {
    let end = text.find(char::is_whitespace).unwrap_or(text.len());
    let Some(eq) = text[..end].find('=') else {
        return Err(format!(
            "{:?} is not key=value",
            &text[..end.min(text.len())]
        ));
    };
    let key = &text[..eq];
    let after_eq = &text[eq + 1..];
    if let Some(quoted) = after_eq.strip_prefix('"') {
        let (value, after) = unquote(quoted).map_err(|e| format!("{key}: {e}"))?;
        if after.starts_with(|c: char| !c.is_whitespace()) {
            return Err(format!(
                "{key}: text follows the closing quote without a space"
            ));
        }
        return Ok((key, value, after));
    }
    let end = after_eq.find(char::is_whitespace).unwrap_or(after_eq.len());
    if after_eq[..end].contains('"') {
        return Err(format!(
            "{key}: a quote inside an unquoted value; quote the whole value"
        ));
    }
    Ok((key, after_eq[..end].to_string(), &after_eq[end..]))
}

/// The value of a quoted string whose opening quote is gone, and the text
/// after its closing quote.
fn unquote(text: &str) -> Result<(String, &str), String> {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((value, &text[i + 1..])),
            '\\' => match chars.next() {
                Some((_, e @ ('"' | '\\'))) => value.push(e),
                Some((_, e)) => return Err(format!("unknown escape \\{e} (only \\\" and \\\\)")),
                None => break,
            },
            c => value.push(c),
        }
    }
    Err("a quoted value has no closing quote".into())
}

/// The data path a worker runs on.
#[derive(Debug, Clone, PartialEq)]
pub enum Backend {
    /// Kernel UDP sockets.
    Socket,
    /// A DPDK port: raw Ethernet, polled.
    Dpdk(DpdkSettings),
    /// Shared-memory rings to an emulator on this host, attached at this
    /// Unix socket (`inagg emu --shm PATH`).
    Shm(std::path::PathBuf),
}

/// `backend=dpdk`'s settings, as `inagg agent --backend dpdk` takes them.
#[derive(Debug, Clone, PartialEq)]
pub struct DpdkSettings {
    /// EAL arguments, split at white space.
    pub eal: String,
    /// The port's name or id (default: the first).
    pub port: Option<String>,
    /// The switch's MAC (default: learned with ARP).
    pub switch_mac: Option<[u8; 6]>,
    /// Queue pairs, one thread each.
    pub queues: u16,
}

impl Settings {
    /// The data path: `backend=socket` (the default), `backend=dpdk`
    /// with `eal` and, optionally, `dpdk_port`, `switch_mac`, `queues`, or
    /// `backend=shm` with `shm` (the emulator's socket path).
    pub fn backend(&self) -> Result<Backend, String> {
        let backend = self.get("backend").unwrap_or("socket");
        if backend != "shm" && self.get("shm").is_some() {
            return Err("shm goes with backend=shm".into());
        }
        match backend {
            "socket" | "shm" => match DPDK_KEYS.iter().find(|k| self.get(k).is_some()) {
                Some(key) => Err(format!("{key} goes with backend=dpdk")),
                None if backend == "socket" => Ok(Backend::Socket),
                None => {
                    let path = self.get("shm").ok_or(
                        "backend=shm needs shm=PATH, the Unix socket `inagg emu --shm PATH` \
                         listens on",
                    )?;
                    if self.get("bind").is_none() {
                        return Err("backend=shm needs bind: the endpoint the job lists for \
                                    this worker"
                            .into());
                    }
                    Ok(Backend::Shm(path.into()))
                }
            },
            "dpdk" => {
                let eal = self.get("eal").ok_or(
                    "backend=dpdk needs eal=\"...\" (for example eal=\"--no-huge -m 512 --no-pci \
                     --vdev net_af_packet0,iface=eth1\")",
                )?;
                let switch_mac = self
                    .get("switch_mac")
                    .map(|m| {
                        inagg_wire::frame::parse_mac(m).ok_or_else(|| {
                            format!("switch_mac={m:?}: six hex bytes like 02:00:00:00:00:64")
                        })
                    })
                    .transpose()?;
                let queues: u16 = self.value("queues", "a queue count (1-64)")?.unwrap_or(1);
                if !(1..=64).contains(&queues) {
                    return Err(format!("queues={queues}: give 1 to 64"));
                }
                Ok(Backend::Dpdk(DpdkSettings {
                    eal: eal.to_string(),
                    port: self.get("dpdk_port").map(str::to_string),
                    switch_mac,
                    queues,
                }))
            }
            other => Err(format!("backend={other:?}: give socket, shm or dpdk")),
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.entries.get(key).map(String::as_str)
    }

    /// The value of `key` parsed as a `T`, if given; the error names the
    /// key and the type wanted.
    fn value<T: std::str::FromStr>(&self, key: &str, what: &str) -> Result<Option<T>, String> {
        self.get(key)
            .map(|v| v.parse().map_err(|_| format!("{key}={v:?}: not {what}")))
            .transpose()
    }

    fn required<T: std::str::FromStr>(&self, key: &str, what: &str) -> Result<T, String> {
        self.value(key, what)?
            .ok_or_else(|| format!("{key} is needed (without controller)"))
    }

    /// A duration in seconds, finite and above zero.
    fn seconds(&self, key: &str, default: f64) -> Result<Duration, String> {
        let s: f64 = self.value(key, "a number of seconds")?.unwrap_or(default);
        if !(s.is_finite() && s > 0.0 && s <= 1e9) {
            return Err(format!(
                "{key}={s}: give a number of seconds above 0 (and at most 1e9)"
            ));
        }
        Ok(Duration::from_secs_f64(s))
    }

    /// The controller's address, when the job comes from one.
    pub fn controller(&self) -> Result<Option<SocketAddr>, String> {
        self.value("controller", "an address like 10.0.0.1:47100")
    }

    /// The agent's configuration: registered with the controller (which
    /// waits for the job's other workers), or from the keys.
    pub fn agent_config(&self) -> Result<AgentConfig, SetupError> {
        let worker: u16 = self
            .value("worker", "a worker id (0-65535)")?
            .ok_or("worker (or rank) is needed: this worker's id in the job")?;
        let bind: Option<SocketAddr> = self.value("bind", "an address like 127.0.0.1:5000")?;
        let mut config = match self.controller()? {
            Some(addr) => self.register(addr, worker, bind)?,
            None => self.direct(worker, bind)?,
        };
        if let Some(rank) = self.value("tree_rank", "a rank (0-65535)")? {
            config.rank = rank;
        }
        config.priority = self
            .value("priority", "a priority class (0-255)")?
            .unwrap_or(0);
        config.give_up_after = self.seconds("timeout", 10.0)?;
        config.window = self.window()?;
        config.spare_slots = self
            .value("spare_slots", "a slot count (0-65535)")?
            .unwrap_or(0);
        Ok(config)
    }

    /// `window`: `adaptive` (the default, from 16 slots), `adaptive:N`
    /// (from N), `fixed` (the whole pool) or `fixed:N` (N slots).
    fn window(&self) -> Result<Window, String> {
        let Some(text) = self.get("window") else {
            return Ok(Window::default());
        };
        let bad = || {
            format!(
                "window={text:?}: expected adaptive, adaptive:N, fixed or fixed:N (N slots, 1 or more)"
            )
        };
        let (kind, slots) = match text.split_once(':') {
            Some((kind, n)) => (
                kind,
                Some(n.parse::<u32>().ok().filter(|&n| n > 0).ok_or_else(bad)?),
            ),
            None => (text, None),
        };
        match (kind, slots) {
            ("adaptive", None) => Ok(Window::default()),
            ("adaptive", Some(initial)) => Ok(Window::Adaptive { initial }),
            ("fixed", None) => Ok(Window::POOL),
            ("fixed", Some(slots)) => Ok(Window::Fixed { slots }),
            _ => Err(bad()),
        }
    }

    /// Without a controller: every parameter of the job from the keys.
    fn direct(&self, worker: u16, bind: Option<SocketAddr>) -> Result<AgentConfig, String> {
        if self.get("token").is_some() || self.get("register_wait").is_some() {
            return Err("token and register_wait go with controller".into());
        }
        if let Some(key) = TLS_KEYS.iter().find(|k| self.get(k).is_some()) {
            return Err(format!(
                "{key} goes with controller (the data plane has no TLS)"
            ));
        }
        let switch: SocketAddr = self
            .value("switch", "an address like 127.0.0.1:47000")?
            .unwrap_or_else(|| DEFAULT_SWITCH.parse().expect("a valid address"));
        let job: u16 = self
            .value("job", "a job id (0-65535); a job name needs controller")?
            .ok_or("job is needed: the job's id")?;
        let mut config = AgentConfig::new(
            switch,
            job,
            worker,
            self.required("workers", "a worker count (1-65535)")?,
            self.required("pool_size", "a slot count")?,
            self.value("elements", "an element count (1-65535)")?
                .unwrap_or(64),
        );
        if let Some(bind) = bind {
            config.bind = bind;
        }
        config.generation = self
            .value("generation", "a generation (0-65535)")?
            .unwrap_or(0);
        Ok(config)
    }

    /// TLS towards the controller: `tls=on` verifies it against the
    /// system's CA certificates, `tls_ca` against a CA file; `tls_cert` and
    /// `tls_key` present a client certificate, `tls_name` names the
    /// certificate's server. Any of them turns TLS on; `tls=off` with them
    /// is a contradiction.
    fn tls(&self) -> Result<Option<ClientTls>, SetupError> {
        let on = match self.get("tls") {
            None => None,
            Some("on") => Some(true),
            Some("off") => Some(false),
            Some(other) => return Err(format!("tls={other:?}: on or off").into()),
        };
        let path = |key| self.get(key).map(std::path::PathBuf::from);
        let files = ClientFiles {
            ca: path("tls_ca"),
            cert: path("tls_cert"),
            key: path("tls_key"),
            name: self.get("tls_name").map(str::to_string),
        };
        let any = files != ClientFiles::default();
        match on {
            Some(false) if any => Err("tls=off with other tls_ keys: drop one".into()),
            Some(false) => Ok(None),
            None if !any => Ok(None),
            _ => ClientTls::load(&files)
                .map(Some)
                .map_err(|e| SetupError::Invalid(format!("tls: {e}"))),
        }
    }

    /// With a controller: registers `worker` of the named job, waiting for
    /// the controller to admit it.
    fn register(
        &self,
        addr: SocketAddr,
        worker: u16,
        bind: Option<SocketAddr>,
    ) -> Result<AgentConfig, SetupError> {
        if let Some(key) = FROM_CONTROLLER.iter().find(|k| self.get(k).is_some()) {
            return Err(format!(
                "{key} comes from the controller; give only job, rank, bind (and token, \
                 tls_*, register_wait, tree_rank, priority, timeout)"
            )
            .into());
        }
        let job = self.get("job").ok_or("job is needed: the job's name")?;
        let bind = bind.ok_or(
            "bind is needed with controller: the endpoint the controller installs for this worker",
        )?;
        let wait = self.seconds("register_wait", 60.0)?;
        let tls = self.tls()?;
        let admission =
            Client::connect_tls(addr, self.get("token").map(str::to_string), tls.as_ref())
                .and_then(|mut c| c.register(job, worker, bind, wait))
                .map_err(|e| {
                    let m = format!("register rank {worker} of job {job:?} at {addr}: {e}");
                    match e {
                        ClientError::Refused(_) => SetupError::Refused(m),
                        _ => SetupError::Unreachable(m),
                    }
                })?;
        Ok(AgentConfig::from_admission(&admission, bind))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_split_on_white_space_and_quotes_hold_spaces() {
        let s = parse("  job=3\tworker=1 token=\"a b \\\"c\\\" \\\\\"\nworkers=2 ").unwrap();
        assert_eq!(s.get("job"), Some("3"));
        assert_eq!(s.get("worker"), Some("1"));
        assert_eq!(s.get("token"), Some("a b \"c\" \\"));
        assert_eq!(s.get("workers"), Some("2"));
        assert_eq!(parse("").unwrap().entries.len(), 0);
    }

    #[test]
    fn tls_keys_are_checked_before_anything_is_sent() {
        let tls = |t: &str| parse(t).unwrap().tls().map(|c| c.is_some());
        assert_eq!(tls("job=a"), Ok(false));
        assert_eq!(tls("tls=off"), Ok(false));
        let refused = |t: &str| tls(t).unwrap_err().to_string();
        assert!(refused("tls=yes").contains("tls=\"yes\": on or off"));
        assert!(refused("tls=off tls_ca=/x").contains("tls=off with other tls_ keys"));
        let said = refused("tls_ca=/nonexistent/ca.pem");
        assert!(said.contains("tls: CA /nonexistent/ca.pem"), "{said}");
        let said = refused("tls_ca=/nonexistent/ca.pem tls_cert=/c.pem");
        assert!(said.contains("/nonexistent/ca.pem"), "{said}");
        // The data plane has no TLS: the keys need a controller.
        let direct = parse("job=1 workers=2 pool_size=8 tls_ca=/x")
            .unwrap()
            .direct(0, None)
            .unwrap_err();
        assert!(direct.contains("tls_ca goes with controller"), "{direct}");
    }

    #[test]
    fn bad_strings_are_refused_by_name() {
        let err = |t: &str| parse(t).unwrap_err();
        assert!(err("wokers=2").contains("unknown key \"wokers\"; the keys are switch"));
        assert!(err("job=1 job=2").contains("job is given twice"));
        assert!(err("worker=1 rank=1").contains("worker is given twice"));
        assert!(err("job").contains("\"job\" is not key=value"));
        assert!(err("token=\"abc").contains("token: a quoted value has no closing quote"));
        assert!(err("token=\"a\"b").contains("text follows the closing quote"));
        assert!(err("token=a\"b").contains("quote the whole value"));
        assert!(err("token=\"\\n\"").contains("unknown escape \\n"));
    }

    #[test]
    fn a_direct_configuration_takes_the_keys_and_the_defaults() {
        let c = parse("bind=127.0.0.1:5001 job=7 rank=1 workers=3 pool_size=16 timeout=2.5")
            .unwrap()
            .agent_config()
            .unwrap();
        assert_eq!(c.switch, "127.0.0.1:47000".parse().unwrap());
        assert_eq!(c.bind, "127.0.0.1:5001".parse().unwrap());
        assert_eq!((c.job, c.worker, c.rank, c.workers), (7, 1, 1, 3));
        assert_eq!((c.pool_size, c.elements, c.generation), (16, 64, 0));
        assert_eq!(c.give_up_after, Duration::from_millis(2500));
        let c = parse("job=7 worker=1 workers=3 pool_size=16 tree_rank=2 priority=5")
            .unwrap()
            .agent_config()
            .unwrap();
        assert_eq!((c.worker, c.rank, c.priority), (1, 2, 5));
        assert_eq!(c.window, Window::default());
        assert_eq!(c.spare_slots, 0);
        let c = parse("job=7 worker=1 workers=3 pool_size=16 spare_slots=4")
            .unwrap()
            .agent_config()
            .unwrap();
        assert_eq!((c.pool_size, c.spare_slots), (16, 4));
    }

    #[test]
    fn the_window_key_takes_adaptive_or_fixed_with_an_optional_count() {
        let window = |w: &str| {
            parse(&format!("job=7 worker=1 workers=3 pool_size=16 window={w}"))
                .unwrap()
                .agent_config()
                .map(|c| c.window)
        };
        assert_eq!(window("adaptive"), Ok(Window::default()));
        assert_eq!(window("adaptive:4"), Ok(Window::Adaptive { initial: 4 }));
        assert_eq!(window("fixed"), Ok(Window::POOL));
        assert_eq!(window("fixed:2"), Ok(Window::Fixed { slots: 2 }));
        for bad in ["fixed:0", "adaptive:x", "tcp", "fixed:"] {
            let err = window(bad).unwrap_err().to_string();
            assert!(
                err.contains("expected adaptive, adaptive:N, fixed or fixed:N"),
                "{err}"
            );
        }
    }

    #[test]
    fn the_dpdk_keys_go_with_backend_dpdk() {
        let backend = |t: &str| parse(t).unwrap().backend();
        assert_eq!(backend("job=1"), Ok(Backend::Socket));
        let eal = "backend=dpdk eal=\"--no-huge --vdev net_null0\"";
        assert_eq!(
            backend(&format!(
                "{eal} dpdk_port=1 switch_mac=02:00:00:00:00:64 queues=2"
            )),
            Ok(Backend::Dpdk(DpdkSettings {
                eal: "--no-huge --vdev net_null0".into(),
                port: Some("1".into()),
                switch_mac: Some([2, 0, 0, 0, 0, 0x64]),
                queues: 2,
            }))
        );
        let err = |t: &str| backend(t).unwrap_err();
        assert!(err("backend=dpdk").contains("backend=dpdk needs eal="));
        assert!(err("eal=x").contains("eal goes with backend=dpdk"));
        assert!(err("backend=rdma").contains("backend=\"rdma\": give socket, shm or dpdk"));
        assert_eq!(
            backend("backend=shm shm=/run/inagg.sock bind=127.0.0.1:5000"),
            Ok(Backend::Shm("/run/inagg.sock".into()))
        );
        assert!(err("backend=shm bind=127.0.0.1:5000").contains("backend=shm needs shm=PATH"));
        assert!(err("backend=shm shm=/x").contains("backend=shm needs bind"));
        assert!(err("shm=/x").contains("shm goes with backend=shm"));
        assert!(
            err("backend=shm shm=/x bind=127.0.0.1:1 queues=2").contains("goes with backend=dpdk")
        );
        assert!(err(&format!("{eal} switch_mac=02:00")).contains("switch_mac=\"02:00\""));
        assert!(err(&format!("{eal} queues=0")).contains("queues=0: give 1 to 64"));
    }

    #[test]
    fn bad_values_name_their_key() {
        let err = |t: &str| parse(t).unwrap().agent_config().unwrap_err().to_string();
        let base = "job=1 worker=0 workers=2 pool_size=8";
        assert!(err("job=1 workers=2 pool_size=8").contains("worker (or rank) is needed"));
        assert!(err("job=1 worker=0 pool_size=8").contains("workers is needed"));
        assert!(err("job=1 worker=0 workers=2").contains("pool_size is needed"));
        assert!(err("job=x worker=0 workers=2 pool_size=8").contains("job=\"x\": not a job id"));
        assert!(err(&format!("{base} elements=70000")).contains("elements=\"70000\""));
        assert!(err(&format!("{base} switch=nowhere")).contains("switch=\"nowhere\""));
        assert!(err(&format!("{base} timeout=0")).contains("timeout=0: give a number"));
        assert!(err(&format!("{base} timeout=NaN")).contains("timeout=NaN"));
        assert!(err(&format!("{base} token=x")).contains("token and register_wait go with"));
        let ctl = "controller=127.0.0.1:1 job=a rank=0";
        assert!(err(&format!("{ctl} workers=2")).contains("workers comes from the controller"));
        assert!(err(ctl).contains("bind is needed with controller"));
        let unreachable = parse(&format!("{ctl} bind=127.0.0.1:5000"))
            .unwrap()
            .agent_config()
            .unwrap_err();
        assert!(
            matches!(&unreachable, SetupError::Unreachable(m)
                if m.contains("cannot reach the controller at 127.0.0.1:1")),
            "{unreachable:?}"
        );
    }
}
