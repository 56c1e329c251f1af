//! A throwaway public-key infrastructure for tests of TLS: a CA, a server
//! certificate for loopback (its IP and "localhost") and a client
//! certificate, written as PEM files, made with rcgen. A test that wants a
//! stranger's CA makes a second [`Pki`].

use std::path::{Path, PathBuf};

use inagg_netio::tls::{ClientFiles, ServerFiles};
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};

/// The files of one CA and the two certificates it signed.
#[derive(Debug, Clone)]
pub struct Pki {
    /// The CA's certificate.
    pub ca: PathBuf,
    /// The server's certificate (SANs 127.0.0.1, ::1, localhost) and key.
    pub server_cert: PathBuf,
    /// The server's key.
    pub server_key: PathBuf,
    /// A client's certificate and key, for mutual TLS.
    pub client_cert: PathBuf,
    /// The client's key.
    pub client_key: PathBuf,
}

impl Pki {
    /// Makes a CA and its certificates in `dir` (created if need be).
    pub fn new(dir: &Path) -> anyhow::Result<Pki> {
        std::fs::create_dir_all(dir)?;
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own, so two test CAs are told apart by name.
        let name = format!("inagg test CA {}", dir.display());
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf = |names: &[&str]| -> anyhow::Result<(String, String)> {
            let key = KeyPair::generate()?;
            let params =
                CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())?;
            Ok((params.signed_by(&key, &issuer)?.pem(), key.serialize_pem()))
        };
        let (server, server_key) = leaf(&["127.0.0.1", "::1", "localhost"])?;
        let (client, client_key) = leaf(&["inagg-client"])?;
        let write = |name: &str, text: &str| -> anyhow::Result<PathBuf> {
            let path = dir.join(name);
            std::fs::write(&path, text)?;
            Ok(path)
        };
        Ok(Pki {
            ca: write("ca.pem", &ca_cert.pem())?,
            server_cert: write("server.pem", &server)?,
            server_key: write("server.key", &server_key)?,
            client_cert: write("client.pem", &client)?,
            client_key: write("client.key", &client_key)?,
        })
    }

    /// A server's files: its certificate, and the client CA when `mutual`.
    pub fn server(&self, mutual: bool) -> ServerFiles {
        ServerFiles {
            cert: self.server_cert.clone(),
            key: self.server_key.clone(),
            client_ca: mutual.then(|| self.ca.clone()),
        }
    }

    /// A client's files: this CA, and the client certificate when `mutual`.
    pub fn client(&self, mutual: bool) -> ClientFiles {
        ClientFiles {
            ca: Some(self.ca.clone()),
            cert: mutual.then(|| self.client_cert.clone()),
            key: mutual.then(|| self.client_key.clone()),
            name: None,
        }
    }
}
