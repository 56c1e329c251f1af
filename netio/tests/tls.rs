//! TLS on the JSON-lines transport, over real loopback sockets with real
//! certificates: a verified server answers; a server the client's CA did
//! not sign, a client in clear, and (under mutual TLS) a client without a
//! certificate get nothing; a reader thread and a writer share a session.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use inagg_netio::conns::Limits;
use inagg_netio::lines::{self, Accept, CallError, Client, LineReader, Next};
use inagg_netio::tls::{ClientTls, ServerTls};
use inagg_testbed::pki::Pki;

const WAIT: Duration = Duration::from_secs(10);

/// An echo server (each line back, upper-cased) with `tls`.
struct Echo {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Echo {
    fn start(tls: ServerTls) -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let accept = Accept {
                limits: Limits::default(),
                poll: Duration::from_millis(20),
                refusal: &|_, _| b"busy".to_vec(),
                tls: Some(tls),
            };
            let stop = flag.clone();
            lines::serve(&listener, &flag, &accept, move |stream, _, conn| {
                let mut writer = stream.try_clone().unwrap();
                let mut lines =
                    LineReader::new(stream, 1 << 20, Duration::from_millis(20)).unwrap();
                while let Next::Line(l) = lines.next_request(&conn, &stop) {
                    conn.trust();
                    if writer.write_all(&l.to_ascii_uppercase()).is_err() {
                        return;
                    }
                }
            });
        });
        Echo {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Echo {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn pki(name: &str) -> Pki {
    let dir = std::env::temp_dir().join(format!("inagg-netio-tls-{}-{name}", std::process::id()));
    Pki::new(&dir).unwrap()
}

#[test]
fn a_verified_server_answers_and_a_session_splits_into_reader_and_writer() {
    let pki = pki("split");
    let echo = Echo::start(ServerTls::load(&pki.server(false)).unwrap());
    let tls = ClientTls::load(&pki.client(false)).unwrap();
    let mut c = Client::connect_with(echo.addr, WAIT, Some(&tls)).unwrap();
    assert_eq!(c.call(b"hello").unwrap(), "HELLO");
    // A line longer than a TLS record (16 KiB) crosses several.
    let long = vec![b'a'; 100_000];
    assert_eq!(c.call(&long).unwrap(), "A".repeat(100_000));
    // A reader thread waits while the writer sends on the same session.
    let (mut reader, mut writer) = c.into_parts();
    let read =
        std::thread::spawn(move || (0..50).map(|_| reader.reply().unwrap()).collect::<Vec<_>>());
    for i in 0..50 {
        std::thread::sleep(Duration::from_millis(2));
        lines::write_line(&mut writer, format!("line {i}").as_bytes()).unwrap();
    }
    let got = read.join().unwrap();
    assert_eq!(got.len(), 50);
    assert_eq!(got[49], "LINE 49");
}

#[test]
fn a_server_another_ca_signed_is_refused_by_name() {
    let (ours, theirs) = (pki("ours"), pki("theirs"));
    let echo = Echo::start(ServerTls::load(&theirs.server(false)).unwrap());
    let tls = ClientTls::load(&ours.client(false)).unwrap();
    let said = Client::connect_with(echo.addr, WAIT, Some(&tls))
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("TLS handshake") && said.contains("certificate"),
        "{said}"
    );
    // And a name the certificate does not carry.
    let mut files = ours.client(false);
    files.name = Some("switch.example".into());
    let echo = Echo::start(ServerTls::load(&ours.server(false)).unwrap());
    let tls = ClientTls::load(&files).unwrap();
    let said = Client::connect_with(echo.addr, WAIT, Some(&tls))
        .unwrap_err()
        .to_string();
    assert!(
        said.contains("not valid for name \"switch.example\""),
        "{said}"
    );
}

#[test]
fn a_client_in_clear_gets_no_answer() {
    let pki = pki("clear");
    let echo = Echo::start(ServerTls::load(&pki.server(false)).unwrap());
    let mut c = Client::connect(echo.addr, Duration::from_secs(3)).unwrap();
    // Its line is no TLS record: the server drops the connection, and the
    // client says what that likely means.
    match c.call(b"hello") {
        Err(e @ CallError::ClosedInClear) => {
            assert!(e.to_string().contains("give its CA"), "{e}")
        }
        other => panic!("a client in clear got {other:?}"),
    }
}

#[test]
fn under_mutual_tls_a_client_needs_a_certificate_the_ca_signed() {
    let (pki, stranger) = (pki("mutual"), pki("stranger"));
    let echo = Echo::start(ServerTls::load(&pki.server(true)).unwrap());
    let with = ClientTls::load(&pki.client(true)).unwrap();
    let mut c = Client::connect_with(echo.addr, WAIT, Some(&with)).unwrap();
    assert_eq!(c.call(b"mine").unwrap(), "MINE");
    // Without a certificate, or with one another CA signed: no answer,
    // and the server's alert says why (in TLS 1.3 the client hears of it
    // at its first read).
    let mut other = pki.client(true);
    other.cert = Some(stranger.client_cert.clone());
    other.key = Some(stranger.client_key.clone());
    for (files, alert) in [
        (pki.client(false), "CertificateRequired"),
        (other, "UnknownCA"),
    ] {
        let tls = ClientTls::load(&files).unwrap();
        let answer = Client::connect_with(echo.addr, WAIT, Some(&tls))
            .map_err(|e| e.to_string())
            .and_then(|mut c| c.call(b"let me in").map_err(|e| e.to_string()));
        let said = answer.unwrap_err();
        assert!(said.contains(alert), "{said}");
    }
}
