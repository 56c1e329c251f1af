//! Test support: the P4Info of p4/v1model as p4c would produce it, for tests
//! that run where p4c is not installed; the test topology and job fixtures;
//! and, where p4c and bmv2 are on PATH, p4/v1model compiled once per test
//! run ([`program`]) and real `simple_switch_grpc` processes to run it
//! ([`SimpleSwitch`]), for the tests of this crate and of the `inagg ctl`
//! command that drive a real switch.
//!
//! Names, match kinds, widths and sizes are written out here from
//! p4/README.md ("Control-plane interface"), deliberately not taken from
//! [`names`](super::p4info::names), so resolving this P4Info checks the
//! control plane's names against the documentation. Ids are assigned like
//! p4c's: the object kind in the top byte (0x01 action, 0x02 table, 0x12
//! counter, 0x16 register), then a number.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::proto::p4::config::v1 as cfg;
use super::{Bmv2Options, Bmv2Target};

fn preamble(kind: u32, n: &mut u32, name: &str) -> Option<cfg::Preamble> {
    *n += 1;
    Some(cfg::Preamble {
        id: (kind << 24) | *n,
        name: name.to_string(),
        alias: name.rsplit('.').next().unwrap_or(name).to_string(),
        annotations: Vec::new(),
    })
}

/// The P4Info of p4/v1model compiled with `-DINAGG_K=k -DINAGG_SLOTS=slots`.
pub fn v1model_p4info(k: u16, slots: u32) -> cfg::P4Info {
    let mut n = 0u32;
    let mut info = cfg::P4Info {
        pkg_info: Some(cfg::PkgInfo {
            name: "inagg.p4".into(),
            version: String::new(),
            arch: "v1model".into(),
        }),
        ..Default::default()
    };

    // Actions, with their parameters (name, width).
    let actions: [(&str, &[(&str, i32)]); 18] = [
        ("NoAction", &[]),
        (
            "InaggIngress.admission.set_job",
            &[
                ("worker_count", 16),
                ("pool_base", 32),
                ("pool_size", 32),
                ("elements", 16),
                ("generation", 16),
                ("mcast_grp", 16),
                ("incarnation", 32),
                ("detours", 1),
                ("child_switches", 64),
            ],
        ),
        ("InaggIngress.admission.set_worker", &[("worker", 16)]),
        (
            "InaggEgress.result_rewrite.set_receiver",
            &[("dst_mac", 48), ("dst_addr", 32), ("dst_port", 16)],
        ),
        ("InaggEgress.result_rewrite.drop_copy", &[]),
        ("InaggIngress.queue_select.set_queue", &[("queue", 3)]),
        ("InaggIngress.l2_forwarding.forward", &[("port", 9)]),
        ("InaggIngress.l2_forwarding.flood", &[("mcast_grp", 16)]),
        ("InaggIngress.l2_forwarding.discard", &[]),
        ("InaggIngress.admission.refuse", &[("reason", 8)]),
        ("InaggIngress.group_relay.set_group", &[("mcast_grp", 16)]),
        ("InaggIngress.group_relay.set_member", &[("member", 16)]),
        (
            "InaggEgress.group_rewrite.set_member_address",
            &[("dst_mac", 48), ("dst_addr", 32), ("dst_port", 16)],
        ),
        ("InaggEgress.group_rewrite.drop_copy", &[]),
        ("InaggIngress.admission.from_parent", &[("job", 16)]),
        (
            "InaggIngress.admission.set_upstream",
            &[
                ("parent_job", 16),
                ("member", 16),
                ("parent_mac", 48),
                ("parent_addr", 32),
                ("parent_port", 16),
                ("egress_port", 9),
                ("aux", 1),
                ("via_mac", 48),
                ("via_addr", 32),
                ("via_port", 16),
                ("via_egress_port", 9),
                ("busy_bound", 16),
                ("queue_length", 16),
            ],
        ),
        (
            "InaggIngress.admission.relay_to",
            &[
                ("index", 16),
                ("next_mac", 48),
                ("next_addr", 32),
                ("next_port", 16),
                ("egress_port", 9),
            ],
        ),
        (
            "InaggIngress.admission.take_detour",
            &[
                ("member_mac", 48),
                ("member_addr", 32),
                ("member_port", 16),
                ("egress_port", 9),
            ],
        ),
    ];
    for (name, params) in actions {
        info.actions.push(cfg::Action {
            preamble: preamble(0x01, &mut n, name),
            params: params
                .iter()
                .zip(1u32..)
                .map(|(&(name, bitwidth), id)| cfg::action::Param {
                    id,
                    name: name.into(),
                    annotations: Vec::new(),
                    bitwidth,
                })
                .collect(),
        });
    }
    let action_id = |info: &cfg::P4Info, name: &str| {
        info.actions
            .iter()
            .filter_map(|a| a.preamble.as_ref())
            .find(|p| p.name == name)
            .map_or(0, |p| p.id)
    };

    // Tables: name, exact keys (name, width), actions (name, default only),
    // const default action, size.
    type TableSpec<'a> = (
        &'a str,
        &'a [(&'a str, i32)],
        &'a [(&'a str, bool)],
        Option<&'a str>,
        i64,
    );
    let hop_key: &[(&str, i32)] = &[
        ("job", 16),
        ("ingress_port", 9),
        ("src_addr", 32),
        ("src_port", 16),
        ("member", 16),
    ];
    let tables: [TableSpec; 12] = [
        (
            "InaggIngress.admission.job_table",
            &[("job", 16)],
            &[
                ("InaggIngress.admission.set_job", false),
                ("NoAction", true),
            ],
            Some("NoAction"),
            1024,
        ),
        (
            "InaggIngress.admission.worker_table",
            &[
                ("job", 16),
                ("ingress_port", 9),
                ("src_addr", 32),
                ("src_port", 16),
            ],
            &[
                ("InaggIngress.admission.set_worker", false),
                ("NoAction", true),
            ],
            Some("NoAction"),
            8192,
        ),
        (
            "InaggIngress.admission.parent_table",
            &[
                ("parent_job", 16),
                ("ingress_port", 9),
                ("src_addr", 32),
                ("src_port", 16),
            ],
            &[
                ("InaggIngress.admission.from_parent", false),
                ("NoAction", true),
            ],
            Some("NoAction"),
            1024,
        ),
        (
            "InaggIngress.admission.upstream_table",
            &[("job", 16)],
            &[
                ("InaggIngress.admission.set_upstream", false),
                ("NoAction", true),
            ],
            Some("NoAction"),
            1024,
        ),
        (
            "InaggIngress.admission.relay_table",
            hop_key,
            &[
                ("InaggIngress.admission.relay_to", false),
                ("NoAction", true),
            ],
            Some("NoAction"),
            1024,
        ),
        (
            "InaggIngress.admission.detour_table",
            hop_key,
            &[
                ("InaggIngress.admission.take_detour", false),
                ("NoAction", true),
            ],
            Some("NoAction"),
            1024,
        ),
        (
            "InaggEgress.result_rewrite.result_receivers",
            &[("job", 16), ("rid", 16)],
            &[
                ("InaggEgress.result_rewrite.set_receiver", false),
                ("InaggEgress.result_rewrite.drop_copy", true),
            ],
            Some("InaggEgress.result_rewrite.drop_copy"),
            8192,
        ),
        (
            "InaggIngress.group_relay.group_table",
            &[("group", 16)],
            &[
                ("InaggIngress.group_relay.set_group", false),
                ("NoAction", true),
            ],
            Some("NoAction"),
            1024,
        ),
        (
            "InaggIngress.group_relay.member_table",
            &[
                ("group", 16),
                ("ingress_port", 9),
                ("src_addr", 32),
                ("src_port", 16),
            ],
            &[
                ("InaggIngress.group_relay.set_member", false),
                ("NoAction", true),
            ],
            Some("NoAction"),
            8192,
        ),
        (
            "InaggEgress.group_rewrite.group_receivers",
            &[("group", 16), ("rid", 16)],
            &[
                ("InaggEgress.group_rewrite.set_member_address", false),
                ("InaggEgress.group_rewrite.drop_copy", true),
            ],
            Some("InaggEgress.group_rewrite.drop_copy"),
            8192,
        ),
        (
            "InaggIngress.queue_select.priority_to_queue",
            &[("priority", 8)],
            &[("InaggIngress.queue_select.set_queue", false)],
            None,
            256,
        ),
        (
            "InaggIngress.l2_forwarding.l2_forward",
            &[("dst_addr", 48)],
            &[
                ("InaggIngress.l2_forwarding.forward", false),
                ("InaggIngress.l2_forwarding.flood", false),
                ("InaggIngress.l2_forwarding.discard", false),
            ],
            None,
            1024,
        ),
    ];
    for (name, keys, actions, const_default, size) in tables {
        let table = cfg::Table {
            preamble: preamble(0x02, &mut n, name),
            match_fields: keys
                .iter()
                .zip(1u32..)
                .map(|(&(name, bitwidth), id)| cfg::MatchField {
                    id,
                    name: name.into(),
                    annotations: Vec::new(),
                    bitwidth,
                    r#match: Some(cfg::match_field::Match::MatchType(
                        cfg::match_field::MatchType::Exact as i32,
                    )),
                })
                .collect(),
            action_refs: actions
                .iter()
                .map(|&(a, default_only)| cfg::ActionRef {
                    id: action_id(&info, a),
                    scope: if default_only {
                        cfg::action_ref::Scope::DefaultOnly as i32
                    } else {
                        cfg::action_ref::Scope::TableAndDefault as i32
                    },
                    annotations: Vec::new(),
                })
                .collect(),
            const_default_action_id: const_default.map_or(0, |a| action_id(&info, a)),
            size,
            is_const_table: false,
        };
        info.tables.push(table);
    }

    let counters: [(&str, i64); 17] = [
        ("InaggIngress.rx", 1),
        ("InaggIngress.drops", 16),
        ("InaggIngress.job_contributions", 65_536),
        ("InaggIngress.job_results", 65_536),
        ("InaggIngress.job_resent_results", 65_536),
        ("InaggIngress.job_queries", 65_536),
        ("InaggIngress.job_duplicates", 65_536),
        ("InaggIngress.job_dropped", 65_536),
        ("InaggIngress.job_upstream", 65_536),
        ("InaggIngress.job_upstream_resent", 65_536),
        ("InaggIngress.job_detours_sent", 65_536),
        ("InaggIngress.job_detours_taken", 65_536),
        ("InaggIngress.relayed", 1),
        ("InaggIngress.relay_packets", 1024),
        ("InaggIngress.group_packets", 65_536),
        ("InaggEgress.tx", 1),
        ("InaggEgress.group_copies", 65_536),
    ];
    for (name, size) in counters {
        info.counters.push(cfg::Counter {
            preamble: preamble(0x12, &mut n, name),
            spec: Some(cfg::CounterSpec {
                unit: cfg::counter_spec::Unit::Both as i32,
            }),
            size,
        });
    }

    let sets = i32::try_from(slots.saturating_mul(2)).unwrap_or(i32::MAX);
    let mut registers: Vec<String> = [
        "incarnation",
        "bitmap",
        "contributors",
        "max_exponent",
        "round_packet_id",
        "round_priority",
        "weight",
        "away",
        "answered_once",
        "answered_twice",
    ]
    .iter()
    .map(|r| format!("InaggIngress.aggregate.{r}"))
    .collect();
    registers.extend((0..k).map(|i| format!("InaggIngress.aggregate.acc_{i:02x}")));
    for name in registers {
        info.registers.push(cfg::Register {
            preamble: preamble(0x16, &mut n, &name),
            size: sets,
        });
    }
    // Declared at the top level (detour.p4): one cell per (port, queue).
    info.registers.push(cfg::Register {
        preamble: preamble(0x16, &mut n, "queue_depth"),
        size: 512 * 8,
    });
    info
}

/// The topology the bmv2 target's tests use: three workers on ports 1-3
/// and a parent switch (or relay) on port 9.
pub const TOPOLOGY: &str = r#"
[workers]
"10.0.0.1" = { port = 1, mac = "02:00:00:00:00:01" }
"10.0.0.2" = { port = 2, mac = "02:00:00:00:00:02" }
"10.0.0.3" = { port = 3, mac = "02:00:00:00:00:03" }
"10.0.9.1" = { port = 9, mac = "02:00:00:00:00:09" }
"#;

/// [`TOPOLOGY`], parsed.
pub fn topology() -> super::Topology {
    super::Topology::parse("topology.toml", TOPOLOGY).expect("the test topology parses")
}

/// A job of K = 64 with the given workers ("ADDR:PORT") and pool, nothing
/// else set.
pub fn job(id: u16, workers: &[&str], pool_base: u32, pool_size: u32) -> inagg_switch_api::JobSpec {
    let workers = workers
        .iter()
        .map(|w| w.parse().expect("a worker endpoint"))
        .collect();
    inagg_switch_api::JobSpec::new(id, workers, pool_base, pool_size, 64)
}

/// p4/v1model compiled by p4c-bm2-ss.
#[derive(Debug)]
pub struct Program {
    /// The binary P4Info.
    pub p4info: PathBuf,
    /// The bmv2 JSON.
    pub json: PathBuf,
}

/// Whether `tool` is a file in one of PATH's directories.
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// Compiles p4/v1model (K = 64, 8192 slots) into `build_dir` once per
/// process, or says why a test that needs the real switch skips: p4c-bm2-ss
/// or simple_switch_grpc not on PATH.
///
/// # Panics
/// When p4/build.sh fails: the program no longer compiles.
pub fn program(build_dir: &Path) -> Result<&'static Program, &'static str> {
    static PROGRAM: OnceLock<Result<Program, &'static str>> = OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            if !on_path("p4c-bm2-ss") {
                return Err("p4c-bm2-ss not on PATH");
            }
            if !on_path("simple_switch_grpc") {
                return Err("simple_switch_grpc not on PATH");
            }
            let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
            let out = Command::new("bash")
                .arg(repo.join("p4/build.sh"))
                .arg("v1model")
                .env("P4_BUILD_DIR", build_dir)
                .env("K", "64")
                .env("SLOTS", "8192")
                .output()
                .expect("run bash p4/build.sh");
            assert!(
                out.status.success(),
                "p4/build.sh v1model: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(Program {
                p4info: build_dir.join("v1model/inagg.p4info.bin"),
                json: build_dir.join("v1model/inagg.json"),
            })
        })
        .as_ref()
        .map_err(|why| *why)
}

/// Two distinct free local ports (both listeners are held until both are
/// chosen: one at a time, the kernel may hand out the same port twice).
fn free_ports() -> [u16; 2] {
    let bind = || TcpListener::bind("127.0.0.1:0").expect("a free local port");
    let (a, b) = (bind(), bind());
    let port = |l: &TcpListener| l.local_addr().expect("a bound port").port();
    [port(&a), port(&b)]
}

/// A simple_switch_grpc process with no ports, P4Runtime and Thrift on free
/// local ports; killed when dropped.
#[derive(Debug)]
pub struct SimpleSwitch {
    child: Child,
    /// Its P4Runtime server.
    pub addr: SocketAddr,
}

impl SimpleSwitch {
    /// Starts one with no program; returns once P4Runtime accepts
    /// connections.
    ///
    /// # Panics
    /// When it cannot be started or does not listen within 20 s.
    pub fn start() -> SimpleSwitch {
        SimpleSwitch::start_with(&[])
    }

    /// [`SimpleSwitch::start`] with more of the target's own options
    /// (after `--`: its gRPC server's, such as `--grpc-server-ssl`).
    ///
    /// # Panics
    /// As [`SimpleSwitch::start`].
    pub fn start_with(grpc: &[&str]) -> SimpleSwitch {
        let [grpc_port, thrift] = free_ports();
        let addr = SocketAddr::from(([127, 0, 0, 1], grpc_port));
        let mut child = Command::new("simple_switch_grpc")
            .args(["--device-id", "0", "--no-p4"])
            .args(["--thrift-port", &thrift.to_string()])
            .args(["--", "--grpc-server-addr", &addr.to_string()])
            .args(grpc)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start simple_switch_grpc");
        let started = Instant::now();
        while TcpStream::connect(addr).is_err() {
            assert!(
                matches!(child.try_wait(), Ok(None)),
                "simple_switch_grpc exited"
            );
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "simple_switch_grpc did not open {addr}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        SimpleSwitch { child, addr }
    }

    /// Options that push `program` and know the test [`topology`].
    pub fn options(&self, program: &Program) -> Bmv2Options {
        Bmv2Options {
            addr: self.addr,
            p4info: Some(program.p4info.clone()),
            bmv2_json: Some(program.json.clone()),
            topology: Some(topology()),
            timeout: Duration::from_secs(10),
            ..Bmv2Options::default()
        }
    }

    /// Connects with [`SimpleSwitch::options`].
    ///
    /// # Panics
    /// When the connection or the push fails.
    pub fn connect(&self, program: &Program) -> Bmv2Target {
        Bmv2Target::connect(self.options(program)).expect("connect to simple_switch_grpc")
    }

    /// Connects with its own election id, pushing nothing new.
    ///
    /// # Panics
    /// When the connection fails.
    pub fn connect_as(&self, program: &Program, election_id: u128) -> Bmv2Target {
        Bmv2Target::connect(Bmv2Options {
            election_id: Some(election_id),
            ..self.options(program)
        })
        .expect("connect to simple_switch_grpc")
    }
}

impl Drop for SimpleSwitch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
