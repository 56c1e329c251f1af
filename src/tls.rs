//! The TLS options of the command line: an endpoint's certificate
//! ([`ServeTls`]: `inagg emu`, `inagg controller`), and how a client
//! verifies the controller ([`ControllerTls`]: `ctl --controller`, `agent
//! --controller`) or the switch ([`SwitchTls`]: `ctl` to a switch, the
//! controller to its switch and fallbacks). docs/GUIDE.md, "TLS".

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use inagg_netio::tls::{ClientFiles, ClientTls, ServerFiles, ServerTls};

/// TLS on an endpoint this process serves.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "TLS")]
pub struct ServeTls {
    /// The endpoint's certificate chain (PEM), with --tls-key: clients
    /// then speak TLS to it.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The endpoint's private key (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Mutual TLS: every client must present a certificate this CA (PEM)
    /// signed.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_client_ca: Option<PathBuf>,
    /// Listen off loopback without TLS: tokens and credentials then travel
    /// in clear. Refused unless said.
    #[arg(long)]
    pub insecure: bool,
}

impl ServeTls {
    /// The loaded configuration, if TLS is on.
    pub fn load(&self) -> Result<Option<ServerTls>> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let files = ServerFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: self.tls_client_ca.clone(),
        };
        Ok(Some(
            ServerTls::load(&files).context("--tls-cert/--tls-key")?,
        ))
    }
}

/// How a client verifies the controller's API.
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "TLS to the controller")]
pub struct ControllerTls {
    /// Speak TLS to the controller, verifying it against the system's CA
    /// certificates (implied by the other --tls options).
    #[arg(long, global = true, env = "INAGG_TLS")]
    pub tls: bool,
    /// The CA (PEM) the controller's certificate must chain to.
    #[arg(long, global = true, env = "INAGG_TLS_CA", value_name = "FILE")]
    pub tls_ca: Option<PathBuf>,
    /// This client's certificate (PEM), for a controller with a client CA.
    #[arg(long, global = true, env = "INAGG_TLS_CERT", value_name = "FILE")]
    pub tls_cert: Option<PathBuf>,
    /// This client's key (PEM).
    #[arg(long, global = true, env = "INAGG_TLS_KEY", value_name = "FILE")]
    pub tls_key: Option<PathBuf>,
    /// The name the controller's certificate must carry [default: the
    /// address's IP].
    #[arg(long, global = true, env = "INAGG_TLS_NAME", value_name = "NAME")]
    pub tls_name: Option<String>,
}

impl ControllerTls {
    /// The files, if TLS is on.
    pub fn files(&self) -> Option<ClientFiles> {
        let (ca, cert) = (self.tls_ca.clone(), self.tls_cert.clone());
        let (key, name) = (self.tls_key.clone(), self.tls_name.clone());
        on_or_given(
            self.tls,
            ClientFiles {
                ca,
                cert,
                key,
                name,
            },
        )
    }

    /// The loaded configuration, if TLS is on.
    pub fn load(&self) -> Result<Option<ClientTls>> {
        load(self.files(), "--tls-ca/--tls-cert/--tls-key")
    }
}

/// How a client verifies a switch's control endpoint (an emulator's, or
/// bmv2's P4Runtime server).
#[derive(Debug, Clone, Default, Args)]
#[command(next_help_heading = "TLS to the switch")]
pub struct SwitchTls {
    /// Speak TLS to the switch, verifying it against the system's CA
    /// certificates (implied by the other --switch-tls options).
    #[arg(long, global = true, env = "INAGG_SWITCH_TLS")]
    pub switch_tls: bool,
    /// The CA (PEM) the switch's certificate must chain to.
    #[arg(long, global = true, env = "INAGG_SWITCH_TLS_CA", value_name = "FILE")]
    pub switch_tls_ca: Option<PathBuf>,
    /// This client's certificate (PEM), for a switch that wants one.
    #[arg(
        long,
        global = true,
        env = "INAGG_SWITCH_TLS_CERT",
        value_name = "FILE"
    )]
    pub switch_tls_cert: Option<PathBuf>,
    /// This client's key (PEM).
    #[arg(long, global = true, env = "INAGG_SWITCH_TLS_KEY", value_name = "FILE")]
    pub switch_tls_key: Option<PathBuf>,
    /// The name the switch's certificate must carry [default: the
    /// address's IP].
    #[arg(
        long,
        global = true,
        env = "INAGG_SWITCH_TLS_NAME",
        value_name = "NAME"
    )]
    pub switch_tls_name: Option<String>,
}

impl SwitchTls {
    /// The files, if TLS is on.
    pub fn files(&self) -> Option<ClientFiles> {
        let (ca, cert) = (self.switch_tls_ca.clone(), self.switch_tls_cert.clone());
        let (key, name) = (self.switch_tls_key.clone(), self.switch_tls_name.clone());
        on_or_given(
            self.switch_tls,
            ClientFiles {
                ca,
                cert,
                key,
                name,
            },
        )
    }
}

/// A client's files: TLS is on when asked for, or when any file or name is
/// given.
fn on_or_given(on: bool, files: ClientFiles) -> Option<ClientFiles> {
    (on || files != ClientFiles::default()).then_some(files)
}

fn load(files: Option<ClientFiles>, flags: &str) -> Result<Option<ClientTls>> {
    files
        .map(|f| ClientTls::load(&f).with_context(|| flags.to_string()))
        .transpose()
}
