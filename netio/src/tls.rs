//! TLS on the control channels (rustls, with the ring provider): the
//! configurations a server ([`ServerTls`]) and a client ([`ClientTls`])
//! load from PEM files, and the rule that a control endpoint off loopback
//! speaks TLS unless its operator says `--insecure` ([`check_exposure`]).
//!
//! What travels on these channels is the switch's configuration and the
//! credentials that guard it; in clear, anyone on the path reads the
//! tokens. The server proves itself with a certificate the client checks
//! against a CA file or the system's roots; a server given a client CA
//! wants a certificate from every client too (mutual TLS), so a stolen
//! token alone is not enough.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Why a TLS configuration could not be built.
#[derive(Debug)]
pub struct TlsError {
    what: String,
}

impl TlsError {
    fn new(what: impl Into<String>) -> TlsError {
        TlsError { what: what.into() }
    }

    fn file(role: &str, path: &Path, e: impl fmt::Display) -> TlsError {
        TlsError::new(format!("{role} {}: {e}", path.display()))
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)
    }
}

impl std::error::Error for TlsError {}

impl From<TlsError> for io::Error {
    fn from(e: TlsError) -> io::Error {
        io::Error::new(io::ErrorKind::InvalidInput, e.what)
    }
}

/// The crypto every configuration here uses, named rather than taken from
/// the process default (which is ambiguous when a dependency enables a
/// second provider). ring, which rustls now deprecates for its lack of
/// post-quantum key exchange: aws-lc-rs would add a C build of its own to
/// every build of the project, and what these channels protect (tokens
/// valid until rotated, a switch's configuration) does not need to stay
/// secret for decades.
#[allow(deprecated)]
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The certificates of a PEM file, at least one.
fn certs(role: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| TlsError::file(role, path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::file(role, path, e))?;
    if certs.is_empty() {
        return Err(TlsError::file(role, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
fn key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| TlsError::file("key", path, e))
}

/// A store of the CA certificates in `path`.
fn roots(role: &str, path: &Path) -> Result<RootCertStore, TlsError> {
    let mut store = RootCertStore::empty();
    for cert in certs(role, path)? {
        store.add(cert).map_err(|e| TlsError::file(role, path, e))?;
    }
    Ok(store)
}

/// The files a server's TLS is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFiles {
    /// Its certificate chain (PEM), leaf first.
    pub cert: PathBuf,
    /// Its private key (PEM).
    pub key: PathBuf,
    /// When given, every client must present a certificate this CA signed.
    pub client_ca: Option<PathBuf>,
}

/// A server's TLS configuration, loaded once and shared by its connections.
#[derive(Clone)]
pub struct ServerTls {
    config: Arc<ServerConfig>,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerTls")
    }
}

impl ServerTls {
    /// Loads the certificate, key and client CA.
    pub fn load(files: &ServerFiles) -> Result<ServerTls, TlsError> {
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::new(e.to_string()))?;
        let builder = match &files.client_ca {
            Some(ca) => {
                let verifier = WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots("client CA", ca)?),
                    provider(),
                )
                .build()
                .map_err(|e| TlsError::file("client CA", ca, e))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let config = builder
            .with_single_cert(certs("certificate", &files.cert)?, key(&files.key)?)
            .map_err(|e| {
                TlsError::new(format!(
                    "certificate {} and key {}: {e}",
                    files.cert.display(),
                    files.key.display()
                ))
            })?;
        Ok(ServerTls {
            config: Arc::new(config),
        })
    }

    pub(crate) fn config(&self) -> Arc<ServerConfig> {
        self.config.clone()
    }
}

/// What a client's TLS is made of.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientFiles {
    /// The CA the server's certificate must chain to; the system's roots
    /// when absent.
    pub ca: Option<PathBuf>,
    /// This client's certificate (PEM), for a server that wants one.
    pub cert: Option<PathBuf>,
    /// This client's key (PEM), with `cert`.
    pub key: Option<PathBuf>,
    /// The name the server's certificate must carry; the address's IP
    /// when absent.
    pub name: Option<String>,
}

/// A client's TLS configuration.
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<ClientConfig>,
    name: Option<ServerName<'static>>,
}

impl fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ClientTls {{ name: {:?} }}", self.name)
    }
}

impl ClientTls {
    /// Loads the CA (or the system's roots), the client's certificate and
    /// key when given, and the server's name.
    pub fn load(files: &ClientFiles) -> Result<ClientTls, TlsError> {
        let store = match &files.ca {
            Some(ca) => roots("CA", ca)?,
            None => system_roots()?,
        };
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider())
            .build()
            .map_err(|e| TlsError::new(format!("the server verifier: {e}")))?;
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::new(e.to_string()))?
            .with_webpki_verifier(verifier);
        let config = match (&files.cert, &files.key) {
            (Some(cert), Some(key_file)) => builder
                .with_client_auth_cert(certs("certificate", cert)?, key(key_file)?)
                .map_err(|e| TlsError::file("certificate", cert, e))?,
            (None, None) => builder.with_no_client_auth(),
            _ => {
                return Err(TlsError::new(
                    "a client certificate needs its key, and a key its certificate",
                ))
            }
        };
        let name = files
            .name
            .as_ref()
            .map(|n| {
                ServerName::try_from(n.clone())
                    .map_err(|e| TlsError::new(format!("server name {n:?}: {e}")))
            })
            .transpose()?;
        Ok(ClientTls {
            config: Arc::new(config),
            name,
        })
    }

    /// The name to verify a server at `addr` by.
    pub(crate) fn name_for(&self, addr: SocketAddr) -> ServerName<'static> {
        self.name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()))
    }

    pub(crate) fn config(&self) -> Arc<ClientConfig> {
        self.config.clone()
    }
}

/// The system's CA certificates (`SSL_CERT_FILE`/`SSL_CERT_DIR` or the
/// platform's store).
fn system_roots() -> Result<RootCertStore, TlsError> {
    let found = rustls_native_certs::load_native_certs();
    let mut store = RootCertStore::empty();
    let (added, _) = store.add_parsable_certificates(found.certs);
    if added == 0 {
        let why = found
            .errors
            .first()
            .map(|e| format!(": {e}"))
            .unwrap_or_default();
        return Err(TlsError::new(format!(
            "no system CA certificates found{why}; name a CA file"
        )));
    }
    Ok(store)
}

/// Whether a control endpoint may listen at `addr` as configured: on
/// loopback anything goes; elsewhere it wants TLS, or `insecure` said in
/// so many words.
pub fn check_exposure(addr: SocketAddr, tls: bool, insecure: bool) -> Result<(), String> {
    if tls || insecure || is_loopback(addr.ip()) {
        return Ok(());
    }
    Err(format!(
        "{addr} is off loopback: give it a certificate (--tls-cert and --tls-key) so tokens \
         do not travel in clear, or say --insecure"
    ))
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_loopback_an_endpoint_wants_tls_or_insecure() {
        let lo: SocketAddr = "127.0.0.1:7000".parse().unwrap();
        let out: SocketAddr = "10.0.0.1:7000".parse().unwrap();
        assert!(check_exposure(lo, false, false).is_ok());
        assert!(check_exposure(out, true, false).is_ok());
        assert!(check_exposure(out, false, true).is_ok());
        let said = check_exposure(out, false, false).unwrap_err();
        assert!(
            said.contains("off loopback") && said.contains("--insecure"),
            "{said}"
        );
    }

    #[test]
    fn missing_and_wrong_files_are_named() {
        let dir = std::env::temp_dir().join(format!("inagg-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "not a certificate\n").unwrap();
        let err = ServerTls::load(&ServerFiles {
            cert: dir.join("absent.pem"),
            key: junk.clone(),
            client_ca: None,
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("absent.pem"), "{err}");
        let err = ClientTls::load(&ClientFiles {
            ca: Some(junk.clone()),
            ..ClientFiles::default()
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("junk.pem") && err.contains("no PEM certificate"),
            "{err}"
        );
        let err = ClientTls::load(&ClientFiles {
            ca: Some(junk.clone()),
            cert: Some(junk),
            ..ClientFiles::default()
        })
        .unwrap_err()
        .to_string();
        assert!(err.contains("junk.pem"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
