//! What the two gRPC targets (bmv2 over P4Runtime, Tofino over BF Runtime)
//! share: a current-thread runtime with a channel connected within a
//! timeout, calls bounded by it, errors on one line, and, for tests that
//! stand in for a switch, a server on its own thread.
//!
//! The [`Target`](crate::Target) trait is synchronous, so each client owns
//! its runtime and blocks on every call; every wait is bounded, so a
//! missing or silent switch is an error, not a hang.

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use inagg_netio::tls::ClientFiles;
use tokio::runtime::Runtime;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

/// An error and the chain of errors that caused it, on one line.
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let m = c.to_string();
        if !s.contains(&m) {
            s = format!("{s}: {m}");
        }
        cur = c.source();
    }
    s
}

/// A runtime and a channel to `addr`, connected within `timeout` (under
/// TLS when `tls` is given); on failure, why (for the target's "cannot
/// reach" error).
pub(crate) fn connect(
    addr: SocketAddr,
    timeout: Duration,
    tls: Option<&ClientFiles>,
) -> Result<(Runtime, Channel), String> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|e| chain(&e))?
        .connect_timeout(timeout)
        .tcp_nodelay(true);
    if let Some(files) = tls {
        endpoint = endpoint
            .tls_config(tls_config(addr, files)?)
            .map_err(|e| format!("TLS: {}", chain(&e)))?;
    }
    let channel =
        match rt.block_on(async { tokio::time::timeout(timeout, endpoint.connect()).await }) {
            Err(_) => return Err(format!("no connection within {timeout:?}")),
            Ok(Err(e)) => return Err(chain(&e)),
            Ok(Ok(c)) => c,
        };
    Ok((rt, channel))
}

/// The channel's TLS: the CA (or the system's roots), the client's
/// certificate, the name the server's certificate must carry (the
/// address's IP unless given).
fn tls_config(addr: SocketAddr, files: &ClientFiles) -> Result<ClientTlsConfig, String> {
    let read = |role: &str, path: &std::path::Path| {
        crate::files::read_limited(path, 1 << 20)
            .map_err(|e| format!("TLS {role} {}: {e}", path.display()))
    };
    let mut config = ClientTlsConfig::new()
        .domain_name(files.name.clone().unwrap_or_else(|| addr.ip().to_string()));
    config = match &files.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(read("CA", ca)?)),
        None => config.with_native_roots(),
    };
    match (&files.cert, &files.key) {
        (Some(cert), Some(key)) => Ok(config.identity(Identity::from_pem(
            read("certificate", cert)?,
            read("key", key)?,
        ))),
        (None, None) => Ok(config),
        _ => Err("a client certificate needs its key, and a key its certificate".into()),
    }
}

/// Runs `fut` on `rt` for at most `timeout`, running out as
/// DEADLINE_EXCEEDED; the timer is made inside the runtime, which it needs.
pub(crate) fn call<T>(
    rt: &Runtime,
    timeout: Duration,
    fut: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, tonic::Status> {
    rt.block_on(async { tokio::time::timeout(timeout, fut).await })
        .unwrap_or_else(|_| {
            Err(tonic::Status::deadline_exceeded(format!(
                "no answer within {timeout:?}"
            )))
        })
}

/// Reads `replies` (a StreamChannel) until `pick` takes a message: the
/// answer to the hello the client sent first, with the stream to keep.
/// A stream that closes first is UNAVAILABLE, `closed` saying why.
pub(crate) async fn first_reply<M, T>(
    mut replies: tonic::Streaming<M>,
    pick: impl Fn(M) -> Option<T>,
    closed: &'static str,
) -> Result<(T, tonic::Streaming<M>), tonic::Status> {
    loop {
        match replies.message().await? {
            Some(m) => {
                if let Some(t) = pick(m) {
                    return Ok((t, replies));
                }
            }
            None => return Err(tonic::Status::unavailable(closed)),
        }
    }
}

/// A gRPC server on 127.0.0.1 (an ephemeral port) on a thread of its own,
/// for tests that stand in for a switch; it stops when dropped.
#[derive(Debug)]
pub struct TestServer {
    /// Where it listens.
    pub addr: SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl TestServer {
    /// Serves `routes` (`tonic::service::Routes::new(SomeServer::new(..))`).
    pub fn start(routes: tonic::service::Routes) -> std::io::Result<TestServer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        std::thread::spawn(move || {
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
                let serve = tonic::transport::Server::builder()
                    .add_routes(routes)
                    .serve_with_incoming(incoming);
                tokio::select! {
                    r = serve => if let Err(e) = r {
                        eprintln!("test gRPC server on {addr}: {e}");
                    },
                    _ = stopped => {}
                }
            });
            rt.shutdown_background();
        });
        Ok(TestServer { addr, _stop: stop })
    }
}
