//! Every target this build can drive, in one table: its name (what
//! `--target` and a cluster file's `[switch] target` say), its default
//! control endpoint, the files it needs, and how it connects from the
//! options the command line gathers.
//!
//! A target registers once, here, with a [`Registered`] its own module
//! defines; `inagg ctl`, `inagg controller`, `inagg conformance` and cluster
//! files find it by name. Adding a target is its module plus one line in
//! [`TARGETS`].

use inagg_netio::tls::ClientFiles;
use std::net::SocketAddr;
use std::path::PathBuf;

use crate::target::{ControlError, Result, Target};

/// A connected target, whichever it is.
pub type BoxedTarget = Box<dyn Target + Send>;

/// What the command line may say about the target to connect to. Each
/// target takes the options it understands and refuses the others by name,
/// rather than ignore them.
#[derive(Debug, Clone, Default)]
pub struct ConnectOptions {
    /// The control endpoint [default: the target's [`Registered::default_addr`]].
    pub addr: Option<SocketAddr>,
    /// The device id (P4 targets).
    pub device_id: Option<u64>,
    /// The election id to claim the switch with (bmv2, the emulator).
    pub election_id: Option<u64>,
    /// Claim nothing when no election id is given: the caller only reads.
    pub observe: bool,
    /// The emulator's control token.
    pub switch_token: Option<String>,
    /// TLS towards the switch's control endpoint (the emulator's, bmv2's
    /// P4Runtime server), verified against these files; in clear when
    /// `None`.
    pub tls: Option<ClientFiles>,
    /// bmv2: a binary P4Info.
    pub p4info: Option<PathBuf>,
    /// bmv2: the pipeline's JSON, pushed with the P4Info.
    pub bmv2_json: Option<PathBuf>,
    /// P4 targets: the topology file (workers' ports and MACs).
    pub topology: Option<PathBuf>,
    /// Tofino: the directory bf-p4c wrote, pushed to the switch.
    pub program: Option<PathBuf>,
    /// Tofino: the BF Runtime client id.
    pub client_id: Option<u32>,
}

impl ConnectOptions {
    /// Whether any option only the P4 targets take is given.
    pub fn any_p4(&self) -> bool {
        self.device_id.is_some()
            || self.program.is_some()
            || self.client_id.is_some()
            || self.p4info.is_some()
            || self.bmv2_json.is_some()
            || self.topology.is_some()
    }
}

/// One target's entry in the registry.
#[derive(Debug)]
pub struct Registered {
    /// Its name on the command line and in cluster files.
    pub name: &'static str,
    /// What it is, in a line.
    pub about: &'static str,
    /// Where its control endpoint listens unless told.
    pub default_addr: SocketAddr,
    /// The files it needs from the operator, in a line (for help and
    /// errors).
    pub files: &'static str,
    /// Whether the switch says where its data plane is (a P4 switch does
    /// not: workers must be told with `--switch-data`).
    pub says_data_addr: bool,
    /// Connects with `options`; `options.addr` is already filled.
    pub connect: fn(&ConnectOptions) -> Result<BoxedTarget>,
}

impl Registered {
    /// Connects, at `options.addr` or this target's default.
    pub fn connect(&self, options: &ConnectOptions) -> Result<BoxedTarget> {
        let options = ConnectOptions {
            addr: Some(options.addr.unwrap_or(self.default_addr)),
            ..options.clone()
        };
        (self.connect)(&options)
    }
}

/// Every target of this build, the default first.
pub const TARGETS: &[Registered] = &[
    crate::emu::REGISTERED,
    #[cfg(feature = "bmv2")]
    crate::bmv2::REGISTERED,
    #[cfg(feature = "tofino")]
    crate::tofino::REGISTERED,
];

/// The target named `name`.
pub fn find(name: &str) -> Result<&'static Registered> {
    TARGETS.iter().find(|t| t.name == name).ok_or_else(|| {
        let known: Vec<String> = TARGETS.iter().map(|t| format!("{:?}", t.name)).collect();
        ControlError::Protocol(format!(
            "unknown target {name:?}; this build has {} (the bmv2 and tofino targets take \
             the cargo features of the same names)",
            known.join(", ")
        ))
    })
}

/// The default target: the emulator.
pub fn default_target() -> &'static Registered {
    &TARGETS[0]
}

/// The names, for `--target`'s possible values.
pub fn names() -> Vec<&'static str> {
    TARGETS.iter().map(|t| t.name).collect()
}

/// The error for options `target` does not take.
pub(crate) fn refuse(target: &'static str, what: &'static str) -> ControlError {
    ControlError::Unsupported { target, what }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_is_found_by_its_name_once() {
        for t in TARGETS {
            assert_eq!(find(t.name).unwrap().name, t.name);
            assert_eq!(TARGETS.iter().filter(|o| o.name == t.name).count(), 1);
        }
        assert_eq!(default_target().name, "emu");
        let e = find("tofino3").unwrap_err().to_string();
        assert!(
            e.contains("unknown target \"tofino3\"") && e.contains("\"emu\""),
            "{e}"
        );
    }

    #[test]
    fn the_emulator_refuses_the_p4_targets_options() {
        let options = ConnectOptions {
            addr: Some("127.0.0.1:1".parse().unwrap()),
            p4info: Some("inagg.p4info.bin".into()),
            ..ConnectOptions::default()
        };
        let e = find("emu").unwrap().connect(&options).err().unwrap();
        assert!(e.to_string().contains("--p4info"), "{e}");
    }
}
