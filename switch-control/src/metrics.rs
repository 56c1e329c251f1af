//! Telemetry for Prometheus: what an aggregator counts, in the text
//! exposition format (version 0.0.4), served over HTTP on an address the
//! operator opts into (`inagg emu --metrics ADDR`, `inagg controller
//! --metrics ADDR`).
//!
//! The exporter reads the same counters `inagg ctl` shows, through the same
//! APIs, at each scrape: nothing is cached, so a scrape is as fresh as a
//! `ctl counters`. A scrape that cannot read its source answers 503 with the
//! reason, rather than stale or empty figures.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use inagg_switch_api::counters::{Counters, DropReason, JobCounters};

use crate::target::QueueReport;

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

    /// An aggregator's switch-wide counters, labelled with `site`.
    pub fn switch(&mut self, site: &[(&str, &str)], c: &Counters) {
        let help = "Packets received by the aggregator's data plane.";
        self.counter("inagg_rx_packets_total", help, site, c.rx_packets);
        let help = "Bytes received by the aggregator's data plane.";
        self.counter("inagg_rx_bytes_total", help, site, c.rx_bytes);
        let help = "Packets sent by the aggregator's data plane.";
        self.counter("inagg_tx_packets_total", help, site, c.tx_packets);
        let help = "Bytes sent by the aggregator's data plane.";
        self.counter("inagg_tx_bytes_total", help, site, c.tx_bytes);
        for r in DropReason::ALL {
            let labels = with(site, &[("reason", r.name())]);
            let help = "Packets dropped, by reason (docs/PROTOCOL.md, Admission).";
            self.counter("inagg_drops_total", help, &labels, c.dropped(r));
        }
    }

    /// One job's counters; `name` is the controller's name, if any.
    pub fn job(&mut self, site: &[(&str, &str)], id: u16, name: Option<&str>, c: &JobCounters) {
        let id = id.to_string();
        let mut labels = with(site, &[("job", &id)]);
        if let Some(n) = name {
            labels.push(("name", n));
        }
        let rows: [(&'static str, &'static str, u64); 6] = [
            (
                "inagg_job_contributions_total",
                "Contributions admitted to the job's slots.",
                c.contributions,
            ),
            (
                "inagg_job_results_total",
                "Rounds completed and multicast.",
                c.results,
            ),
            (
                "inagg_job_resent_results_total",
                "Stored results sent again, to a worker that retransmitted or queried.",
                c.resent_results,
            ),
            (
                "inagg_job_queries_total",
                "Workers' queries about their slots, answered.",
                c.queries,
            ),
            (
                "inagg_job_duplicates_total",
                "Retransmissions to a round still pending, dropped.",
                c.duplicates,
            ),
            (
                "inagg_job_dropped_total",
                "The job's packets dropped for any reason.",
                c.dropped,
            ),
        ];
        for (name, help, v) in rows {
            self.counter(name, help, &labels, v);
        }
    }

    /// Each paced port's queues.
    pub fn queues(&mut self, site: &[(&str, &str)], q: &QueueReport) {
        for port in &q.ports {
            let p = port.port.to_string();
            for (i, s) in port.queues.iter().enumerate() {
                let queue = i.to_string();
                let labels = with(site, &[("port", &p), ("queue", &queue)]);
                let help = "Packets sent from an egress queue.";
                self.counter("inagg_queue_tx_packets_total", help, &labels, s.tx_packets);
                let help = "Bytes sent from an egress queue.";
                self.counter("inagg_queue_tx_bytes_total", help, &labels, s.tx_bytes);
                let help = "Packets tail-dropped by a full egress queue.";
                self.counter("inagg_queue_drops_total", help, &labels, s.drops);
                let help = "Bytes waiting in an egress queue now.";
                self.gauge(
                    "inagg_queue_depth_bytes",
                    help,
                    &labels,
                    s.depth_bytes as u64,
                );
                let help = "The most bytes an egress queue has held.";
                let max = s.max_depth_bytes as u64;
                self.gauge("inagg_queue_max_depth_bytes", help, &labels, max);
            }
        }
    }
}

fn with<'a>(site: &[(&'a str, &'a str)], more: &[(&'a str, &'a str)]) -> Vec<(&'a str, &'a str)> {
    site.iter().chain(more).copied().collect()
}

/// Label values escape backslash, double quote and newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// An emulator's exposition, read through its control endpoint.
pub fn emulator(control: SocketAddr) -> Result<String, String> {
    use crate::target::Target;
    let mut t = crate::EmuTarget::connect(control).map_err(|e| e.to_string())?;
    let mut e = Exposition::default();
    e.switch(&[], &t.counters().map_err(|e| e.to_string())?);
    for j in t.jobs().map_err(|e| e.to_string())? {
        e.job(&[], j.spec.id, None, &j.counters);
    }
    e.queues(&[], &t.queues().map_err(|e| e.to_string())?);
    let info = t.info().map_err(|e| e.to_string())?;
    let help = "Bytes of aggregator values the pools may take (inagg emu --memory-mib).";
    e.gauge("inagg_memory_bytes", help, &[], info.memory);
    let help = "Bytes of aggregator values the installed pools take.";
    e.gauge("inagg_memory_used_bytes", help, &[], info.memory_used);
    Ok(e.render())
}

/// An agent's exposition: its counts so far (finished all-reduces and the
/// running one), labelled with its job and worker id.
pub fn agent(live: &inagg_host_agent::stats::Live, job: u16, worker: u16) -> String {
    let (s, allreduces) = live.snapshot();
    let (job, worker) = (job.to_string(), worker.to_string());
    let labels = [("job", job.as_str()), ("worker", worker.as_str())];
    let mut e = Exposition::default();
    let rows: [(&'static str, &'static str, u64); 17] = [
        (
            "inagg_agent_allreduces_total",
            "All-reduces completed.",
            allreduces,
        ),
        (
            "inagg_agent_packets_sent_total",
            "Packets sent, retransmissions included.",
            s.packets_sent,
        ),
        (
            "inagg_agent_packets_received_total",
            "Datagrams received.",
            s.packets_received,
        ),
        (
            "inagg_agent_retransmissions_total",
            "Contributions sent again (after a status, or a timeout).",
            s.retransmissions,
        ),
        (
            "inagg_agent_fast_retransmissions_total",
            "Contributions sent again because the switch's status said it lacked them.",
            s.fast_retransmissions,
        ),
        (
            "inagg_agent_queries_total",
            "Queries sent about slots suspected lost.",
            s.queries,
        ),
        (
            "inagg_agent_timeouts_total",
            "Slot timeouts (queries unanswered, or a set held too long).",
            s.timeouts,
        ),
        (
            "inagg_agent_stale_results_total",
            "Results that were not the one awaited.",
            s.stale_results,
        ),
        (
            "inagg_agent_handshakes_total",
            "Slots whose session handshake succeeded.",
            s.handshakes,
        ),
        (
            "inagg_agent_handshake_retries_total",
            "Handshakes sent again in a slot's other set (an earlier session's state there).",
            s.handshake_retries,
        ),
        (
            "inagg_agent_rejected_total",
            "Results that failed their check lane (replayed or forged contributions in the sum).",
            s.rejected,
        ),
        (
            "inagg_agent_malformed_total",
            "Datagrams that did not parse.",
            s.malformed,
        ),
        (
            "inagg_agent_foreign_total",
            "Packets for another job or of the wrong kind.",
            s.foreign,
        ),
        (
            "inagg_agent_send_errors_total",
            "Sends the kernel or NIC refused (retried).",
            s.send_errors,
        ),
        (
            "inagg_agent_bytes_sent_total",
            "Bytes sent (inagg header and payload).",
            s.bytes_sent,
        ),
        (
            "inagg_agent_bytes_received_total",
            "Bytes received.",
            s.bytes_received,
        ),
        (
            "inagg_agent_payload_bytes_total",
            "Tensor bytes all-reduced.",
            s.payload_bytes,
        ),
    ];
    for (name, help, v) in rows {
        e.counter(name, help, &labels, v);
    }
    let help = "Time spent in all-reduces, milliseconds.";
    let ms = u64::try_from(s.elapsed.as_millis()).unwrap_or(u64::MAX);
    e.counter(
        "inagg_agent_allreduce_milliseconds_total",
        help,
        &labels,
        ms,
    );
    e.render()
}

/// A controller's exposition: every aggregator's counters (labelled with
/// its role and control address) and each job's under its name, read
/// through the controller's API.
pub fn controller(api: SocketAddr, token: Option<String>) -> Result<String, String> {
    let mut c = crate::controller::Client::connect(api, token).map_err(|e| e.to_string())?;
    let mut e = Exposition::default();
    for s in c.stats().map_err(|e| e.to_string())? {
        let addr = s.control.to_string();
        let site = [("role", s.role.as_str()), ("site", addr.as_str())];
        let help = "Whether the controller could read the aggregator's counters.";
        e.gauge("inagg_site_up", help, &site, u64::from(s.counters.is_ok()));
        if let Ok(counters) = &s.counters {
            e.switch(&site, counters);
        }
        for j in &s.jobs {
            e.job(&site, j.id, j.name.as_deref(), &j.counters);
        }
    }
    Ok(e.render())
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
        let mut c = Counters {
            rx_packets: 7,
            ..Counters::default()
        };
        c.drop(DropReason::UnknownJob);
        e.switch(&[("site", "a")], &c);
        e.switch(&[("site", "b")], &Counters::default());
        let jc = JobCounters {
            results: 3,
            ..JobCounters::default()
        };
        e.job(&[("site", "a")], 5, Some("x\"y"), &jc);
        let text = e.render();
        assert!(text.contains("# TYPE inagg_rx_packets_total counter\n"));
        assert!(text.contains(
            "inagg_rx_packets_total{site=\"a\"} 7\ninagg_rx_packets_total{site=\"b\"} 0\n"
        ));
        assert!(text.contains("inagg_drops_total{site=\"a\",reason=\"unknown_job\"} 1\n"));
        assert!(text.contains("inagg_job_results_total{site=\"a\",job=\"5\",name=\"x\\\"y\"} 3\n"));
        // Each family's HELP appears once.
        assert_eq!(text.matches("# HELP inagg_drops_total").count(), 1);
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
