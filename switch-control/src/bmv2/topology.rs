//! The bmv2 target's topology file: for each worker host, the switch port it
//! is plugged into and its MAC address, which bmv2 needs and a job spec does
//! not carry (worker_table matches the ingress port; result_receivers
//! rewrites each multicast copy's Ethernet destination).
//!
//! ```toml
//! # Worker hosts by IPv4 address (every UDP port of the address).
//! [workers]
//! "10.0.0.1" = { port = 1, mac = "02:00:00:00:00:01" }
//! "10.0.0.2" = { port = 2, mac = "02:00:00:00:00:02" }
//! ```
//!
//! `port` is the bmv2 port number (`simple_switch_grpc -i PORT@IFACE`).
//! The switch itself needs no address here: results leave with the source
//! addresses of the packet that completed the set, which is the address the
//! workers send to.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::str::FromStr;

use serde::Deserialize;

use crate::target::{ControlError, Result};

/// The largest bmv2 port number: ports are 9 bits in v1model.
pub const MAX_PORT: u16 = 511;

/// A MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Mac(pub [u8; 6]);

impl Mac {
    /// As a 48-bit integer.
    pub fn to_u64(self) -> u64 {
        self.0.iter().fold(0, |v, &b| (v << 8) | u64::from(b))
    }

    /// From the low 48 bits of an integer.
    pub fn from_u64(v: u64) -> Mac {
        let b = v.to_be_bytes();
        Mac([b[2], b[3], b[4], b[5], b[6], b[7]])
    }
}

impl FromStr for Mac {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Mac, String> {
        let bad = || format!("{s:?} is not a MAC address (like 02:00:00:00:00:01)");
        let mut mac = [0u8; 6];
        let mut parts = s.split([':', '-']);
        for b in &mut mac {
            let p = parts.next().ok_or_else(bad)?;
            if p.len() != 2 {
                return Err(bad());
            }
            *b = u8::from_str_radix(p, 16).map_err(|_| bad())?;
        }
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Mac(mac))
    }
}

impl fmt::Display for Mac {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let m = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            m[0], m[1], m[2], m[3], m[4], m[5]
        )
    }
}

/// Where a worker host is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Host {
    /// bmv2 port number.
    pub port: u16,
    /// The host's MAC address.
    pub mac: Mac,
}

/// A parsed topology file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// The file, for errors.
    pub path: String,
    /// Worker hosts by address.
    pub workers: BTreeMap<Ipv4Addr, Host>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    workers: BTreeMap<String, HostEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostEntry {
    port: i64,
    mac: String,
}

impl Topology {
    /// Parses a file's text; `path` names it in errors.
    pub fn parse(path: &str, text: &str) -> Result<Topology> {
        let err = |message: String| ControlError::Config {
            path: path.into(),
            message,
        };
        let file: File = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        let mut workers = BTreeMap::new();
        for (addr, entry) in file.workers {
            let ip: Ipv4Addr = addr.parse().map_err(|_| {
                err(format!(
                    "workers: {addr:?} is not an IPv4 address (the bmv2 program matches IPv4 only)"
                ))
            })?;
            let port = u16::try_from(entry.port)
                .ok()
                .filter(|p| *p <= MAX_PORT)
                .ok_or_else(|| {
                    err(format!(
                        "workers.\"{addr}\": port {} is not a bmv2 port number (0 to {MAX_PORT})",
                        entry.port
                    ))
                })?;
            let mac = entry
                .mac
                .parse()
                .map_err(|e| err(format!("workers.\"{addr}\": {e}")))?;
            workers.insert(ip, Host { port, mac });
        }
        Ok(Topology {
            path: path.into(),
            workers,
        })
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Topology> {
        let name = path.display().to_string();
        let text =
            crate::files::read_text_limited(path, crate::files::CONFIG_LIMIT).map_err(|e| {
                ControlError::Config {
                    path: name.clone(),
                    message: format!("cannot read: {e}"),
                }
            })?;
        Self::parse(&name, &text)
    }

    /// Where worker `index` of job `job`, at `addr`, is plugged in.
    pub fn host(&self, job: u16, index: usize, addr: SocketAddr) -> Result<Host> {
        self.endpoint(&format!("job {job} worker {index}"), addr)
    }

    /// Where the endpoint `who` (a job's worker, a group's member), at
    /// `addr`, is plugged in.
    pub fn endpoint(&self, who: &str, addr: SocketAddr) -> Result<Host> {
        let err = |message: String| ControlError::Config {
            path: self.path.clone(),
            message,
        };
        let SocketAddr::V4(v4) = addr else {
            return Err(err(format!(
                "{who} ({addr}): the bmv2 target handles IPv4 workers only"
            )));
        };
        self.workers.get(v4.ip()).copied().ok_or_else(|| {
            err(format!(
                "no entry for {who} ({addr}); add \
                 \"{}\" = {{ port = N, mac = \"..\" }} under [workers]",
                v4.ip()
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[workers]
"10.0.0.1" = { port = 1, mac = "02:00:00:00:00:01" }
"10.0.0.2" = { port = 511, mac = "02-00-00-00-00-0A" }
"#;

    #[test]
    fn parses_and_looks_up() {
        let t = Topology::parse("t.toml", FILE).unwrap();
        let h = t.host(1, 0, "10.0.0.1:5000".parse().unwrap()).unwrap();
        assert_eq!(h.port, 1);
        assert_eq!(h.mac.to_string(), "02:00:00:00:00:01");
        assert_eq!(h.mac.to_u64(), 0x0200_0000_0001);
        assert_eq!(Mac::from_u64(h.mac.to_u64()), h.mac);
        let h = t.host(1, 1, "10.0.0.2:7".parse().unwrap()).unwrap();
        assert_eq!((h.port, h.mac.0[5]), (511, 0x0a));
    }

    #[test]
    fn a_worker_without_an_entry_is_named() {
        let t = Topology::parse("t.toml", FILE).unwrap();
        let msg = t
            .host(3, 2, "10.0.0.9:5002".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "t.toml: no entry for job 3 worker 2 (10.0.0.9:5002); add \"10.0.0.9\" = \
             { port = N, mac = \"..\" } under [workers]"
        );
        let msg = t
            .host(3, 0, "[::1]:5000".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("IPv4 workers only"), "{msg}");
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let cases = [
            (
                "[workers]\n\"10.0.0.1\" = { port = 512, mac = \"02:00:00:00:00:01\" }",
                "port 512 is not a bmv2 port number",
            ),
            (
                "[workers]\n\"10.0.0.1\" = { port = -1, mac = \"02:00:00:00:00:01\" }",
                "port -1",
            ),
            (
                "[workers]\n\"10.0.0.1\" = { port = 1, mac = \"02:00:00:00:01\" }",
                "is not a MAC address",
            ),
            (
                "[workers]\n\"10.0.0.1\" = { port = 1, mac = \"02:00:00:00:00:0g\" }",
                "is not a MAC address",
            ),
            (
                "[workers]\n\"host1\" = { port = 1, mac = \"02:00:00:00:00:01\" }",
                "\"host1\" is not an IPv4 address",
            ),
            ("[workers]\n\"10.0.0.1\" = { port = 1 }", "mac"),
            ("[switches]\n", "switches"),
        ];
        for (text, want) in cases {
            let msg = Topology::parse("t.toml", text).unwrap_err().to_string();
            assert!(
                msg.starts_with("t.toml: ") && msg.contains(want),
                "{text}: {msg}"
            );
        }
        let msg = Topology::load(Path::new("/nonexistent/t.toml"))
            .unwrap_err()
            .to_string();
        assert!(msg.contains("cannot read"), "{msg}");
    }
}
