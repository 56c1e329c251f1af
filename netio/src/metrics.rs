//! Telemetry for Prometheus: samples in the text exposition format
//! (version 0.0.4), served over HTTP on an address the operator opts into
//! (`inagg emu --metrics ADDR`, `inagg controller --metrics ADDR`, `inagg
//! agent --metrics ADDR`).
//!
//! What is counted is rendered where it is known (the switch's counters in
//! `inagg-switch-control`, an agent's in `inagg-host-agent`); this module
//! holds the format and the server. A render that cannot read its source
//! answers 503 with the reason, rather than stale or empty figures.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Samples grouped by metric family, rendered in one pass (the format wants
/// every sample of a family together, after its HELP and TYPE lines).
#[derive(Debug, Default)]
pub struct Exposition {
    families: BTreeMap<&'static str, Family>,
}

#[derive(Debug)]
struct Family {
    help: &'static str,
    kind: &'static str,
    lines: Vec<String>,
}

impl Exposition {
    /// Adds one sample of counter `name` (a name ending `_total`).
    pub fn counter(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        v: u64,
    ) {
        self.sample(name, help, "counter", labels, v);
    }

    /// Adds one sample of gauge `name`.
    pub fn gauge(
        &mut self,
        name: &'static str,
        help: &'static str,
        labels: &[(&str, &str)],
        v: u64,
    ) {
        self.sample(name, help, "gauge", labels, v);
    }

    fn sample(
        &mut self,
        name: &'static str,
        help: &'static str,
        kind: &'static str,
        labels: &[(&str, &str)],
        v: u64,
    ) {
        let family = self.families.entry(name).or_insert_with(|| Family {
            help,
            kind,
            lines: Vec::new(),
        });
        let mut line = String::from(name);
        if !labels.is_empty() {
            let inner: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
                .collect();
            let _ = write!(line, "{{{}}}", inner.join(","));
        }
        let _ = write!(line, " {v}");
        family.lines.push(line);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (name, f) in &self.families {
            let _ = writeln!(out, "# HELP {name} {}", f.help);
            let _ = writeln!(out, "# TYPE {name} {}", f.kind);
            for l in &f.lines {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

/// `site`'s labels followed by `more`.
pub fn labels<'a>(
    site: &[(&'a str, &'a str)],
    more: &[(&'a str, &'a str)],
) -> Vec<(&'a str, &'a str)> {
    site.iter().chain(more).copied().collect()
}

/// Label values escape backslash, double quote and newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The HTTP endpoint: `GET /metrics` answers the current exposition; it
/// stops when dropped.
pub struct MetricsServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serves `render` (called at each scrape) on `addr`. Each connection
    /// is read on a thread of its own, at most [`MAX_READERS`] at once, so
    /// a client that connects and sends nothing holds up no scrape.
    pub fn start(
        addr: SocketAddr,
        render: impl Fn() -> Result<String, String> + Send + Sync + 'static,
    ) -> std::io::Result<MetricsServer> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let render = Arc::new(render);
        let readers = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::Builder::new()
            .name("inagg-metrics".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    match listener.accept() {
                        Ok((s, _)) => serve(s, &render, &readers),
                        Err(_) => std::thread::sleep(Duration::from_millis(20)),
                    }
                }
            })?;
        Ok(MetricsServer {
            addr,
            stop,
            thread: Some(thread),
        })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Connections read at once; one more is closed unanswered.
pub const MAX_READERS: usize = 32;

/// Answers `s` on a thread of its own, unless [`MAX_READERS`] are busy.
fn serve<R>(s: TcpStream, render: &Arc<R>, readers: &Arc<AtomicUsize>)
where
    R: Fn() -> Result<String, String> + Send + Sync + 'static,
{
    if readers.fetch_add(1, Ordering::AcqRel) >= MAX_READERS {
        readers.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let (render, done) = (render.clone(), readers.clone());
    let spawned = std::thread::Builder::new()
        .name("inagg-metrics-conn".into())
        .spawn(move || {
            let _ = answer(s, &*render);
            done.fetch_sub(1, Ordering::AcqRel);
        });
    if spawned.is_err() {
        readers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One request: the head is read (at most 8 KiB, 2 s), then answered and
/// the connection closed.
fn answer(mut s: TcpStream, render: &impl Fn() -> Result<String, String>) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    s.set_write_timeout(Some(Duration::from_secs(2)))?;
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&head);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next(), parts.next());
    let (status, body) = match (method, path) {
        (Some("GET"), Some("/metrics")) => match render() {
            Ok(text) => ("200 OK", text),
            Err(e) => (
                "503 Service Unavailable",
                format!("cannot read the counters: {e}\n"),
            ),
        },
        _ => ("404 Not Found", "only GET /metrics is served here\n".into()),
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_grouped_labelled_and_escaped() {
        let mut e = Exposition::default();
        e.counter("inagg_x_total", "X.", &[("site", "a")], 7);
        e.gauge("inagg_depth", "Depth.", &[], 2);
        e.counter("inagg_x_total", "X.", &[("site", "b"), ("name", "x\"y")], 0);
        let text = e.render();
        assert!(text.contains("# TYPE inagg_x_total counter\n"));
        assert!(text.contains("# TYPE inagg_depth gauge\ninagg_depth 2\n"));
        assert!(text.contains(
            "inagg_x_total{site=\"a\"} 7\ninagg_x_total{site=\"b\",name=\"x\\\"y\"} 0\n"
        ));
        // Each family's HELP appears once.
        assert_eq!(text.matches("# HELP inagg_x_total").count(), 1);
    }

    #[test]
    fn the_endpoint_serves_metrics_and_refuses_other_paths() {
        let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), || {
            Ok("inagg_up 1\n".to_string())
        })
        .unwrap();
        let get = |path: &str| {
            let mut s = TcpStream::connect(server.addr()).unwrap();
            write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut out = String::new();
            s.read_to_string(&mut out).unwrap();
            out
        };
        let ok = get("/metrics");
        assert!(ok.starts_with("HTTP/1.1 200 OK"), "{ok}");
        assert!(ok.ends_with("\r\n\r\ninagg_up 1\n"), "{ok}");
        assert!(get("/other").starts_with("HTTP/1.1 404"));
        // Idle connections (each would hold a reader for its 2 s timeout)
        // do not stand between a scrape and its answer: with five of them
        // open, one reader at a time would answer after 10 s.
        let idle: Vec<TcpStream> = (0..5)
            .map(|_| TcpStream::connect(server.addr()).unwrap())
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let mut s = TcpStream::connect(server.addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 200 OK"), "{out}");
        drop(idle);
        let failing = MetricsServer::start("127.0.0.1:0".parse().unwrap(), || {
            Err("switch down".to_string())
        })
        .unwrap();
        let mut s = TcpStream::connect(failing.addr()).unwrap();
        write!(s, "GET /metrics HTTP/1.1\r\n\r\n").unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        assert!(out.starts_with("HTTP/1.1 503"), "{out}");
        assert!(out.contains("switch down"), "{out}");
    }
}
