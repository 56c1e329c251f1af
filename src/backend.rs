//! The data-path choice shared by `inagg agent`, `inagg emu` and `inagg
//! bench`: kernel sockets (always built) or DPDK (cargo feature `dpdk`).

use clap::{Args, ValueEnum};

/// Which data path to run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum)]
pub enum Backend {
    /// Kernel UDP sockets (recvmmsg/sendmmsg).
    #[default]
    Socket,
    /// DPDK ports (raw Ethernet, polled); needs a build with `--features dpdk`.
    Dpdk,
}

/// DPDK options (used with `--backend dpdk`).
#[derive(Debug, Clone, Default, Args)]
pub struct DpdkArgs {
    /// EAL arguments, e.g. "--no-huge -m 512 --no-pci --vdev net_af_packet0,iface=eth1".
    #[arg(long, allow_hyphen_values = true)]
    pub eal: Option<String>,
    /// DPDK port names or ids, comma-separated (default: the agent uses
    /// the first port, the emulator serves all).
    #[arg(long = "dpdk-port", value_delimiter = ',')]
    pub dpdk_port: Vec<String>,
    /// The switch's MAC address (default: learned with ARP).
    #[arg(long)]
    pub switch_mac: Option<String>,
    /// Queue pairs for the agent, one thread (core) each, splitting the
    /// job's slots between them (the port needs that many queues:
    /// af_packet's --vdev takes qpairs=N).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub queues: u16,
}

// Read only by the DPDK data paths, which a build without the `dpdk`
// feature leaves out.
#[cfg_attr(not(feature = "dpdk"), allow(dead_code))]
impl DpdkArgs {
    /// The EAL arguments, required with the DPDK backend.
    pub fn eal(&self) -> anyhow::Result<&str> {
        self.eal
            .as_deref()
            .ok_or_else(|| anyhow::anyhow!("--backend dpdk needs --eal \"...\" (for example \"--no-huge -m 512 --no-pci --vdev net_af_packet0,iface=eth1\")"))
    }

    /// The one port an agent uses, if given.
    pub fn one_port(&self) -> anyhow::Result<Option<String>> {
        match self.dpdk_port.as_slice() {
            [] => Ok(None),
            [p] => Ok(Some(p.clone())),
            more => anyhow::bail!(
                "an agent uses one DPDK port; --dpdk-port names {}",
                more.len()
            ),
        }
    }

    /// The switch MAC, parsed.
    pub fn switch_mac(&self) -> anyhow::Result<Option<[u8; 6]>> {
        self.switch_mac
            .as_deref()
            .map(|m| {
                inagg_wire::frame::parse_mac(m).ok_or_else(|| {
                    anyhow::anyhow!(
                        "--switch-mac {m}: expected six hex bytes like 02:00:00:00:00:64"
                    )
                })
            })
            .transpose()
    }
}

/// The error for `--backend dpdk` in a build without DPDK.
#[cfg(not(feature = "dpdk"))]
pub fn not_built() -> anyhow::Error {
    anyhow::anyhow!(
        "this inagg was built without DPDK: rebuild with `cargo build --release --features dpdk` \
         (needs apt's dpdk-dev, libdpdk-dev, pkg-config and libclang-dev)"
    )
}
