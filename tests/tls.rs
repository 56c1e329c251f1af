//! TLS on every control endpoint, as an operator runs it: `inagg emu` and
//! `inagg controller` as child processes with certificates (mutual TLS on
//! the emulator), `inagg ctl` and `inagg agent` verifying them, the
//! controller verifying its switch, two workers all-reducing a job the
//! controller admitted over TLS; clients in clear, or trusting another
//! CA, refused with what to do; endpoints off loopback in clear refused
//! unless `--insecure`.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use inagg_testbed::pki::Pki;
use inagg_testbed::process::{first_line, Running};

const INAGG: &str = env!("CARGO_BIN_EXE_inagg");

fn free_tcp() -> SocketAddr {
    inagg_testbed::ports::tcp()
}

fn free_udp() -> SocketAddr {
    inagg_testbed::ports::udp()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn inagg(args: &[&str]) -> Output {
    Command::new(INAGG).args(args).output().unwrap()
}

fn succeeds(args: &[&str]) -> String {
    let out = inagg(args);
    assert!(out.status.success(), "{args:?}: {}", text(&out));
    text(&out)
}

fn fails_saying(args: &[&str], what: &str) {
    let out = inagg(args);
    assert!(!out.status.success(), "{args:?} succeeded: {}", text(&out));
    assert!(text(&out).contains(what), "{args:?}: {}", text(&out));
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `inagg emu` with mutual TLS and a token; its data and control addresses.
fn emulator(pki: &Pki, metrics: SocketAddr) -> (Running, SocketAddr, SocketAddr) {
    let (child, line) = first_line(
        Command::new(INAGG)
            .args(["emu", "--data", "127.0.0.1:0", "--control", "127.0.0.1:0"])
            .args(["--token", "sw-secret", "--metrics", &metrics.to_string()])
            .args(["--tls-cert", path(&pki.server_cert)])
            .args(["--tls-key", path(&pki.server_key)])
            .args(["--tls-client-ca", path(&pki.ca)])
            .stderr(Stdio::null()),
    );
    let addr = |tag: &str| -> SocketAddr {
        let rest = line.split(tag).nth(1).unwrap_or_else(|| panic!("{line}"));
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    (child, addr("udp://"), addr("tcp://"))
}

/// One GET /metrics, retried while the server is not up yet.
fn scrape(at: SocketAddr) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut c) = TcpStream::connect(at) {
            write!(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
            let mut body = String::new();
            let _ = c.read_to_string(&mut body);
            return body;
        }
        assert!(Instant::now() < deadline, "no metrics at {at}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until `ctl ... whoami` (the command line `ctl` given) answers.
fn wait_for_controller(ctl: &[&str]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = inagg(&[ctl, &["whoami"]].concat());
        if out.status.success() {
            return;
        }
        assert!(Instant::now() < deadline, "{}", text(&out));
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_control_plane_runs_over_tls_end_to_end() {
    let dir = std::env::temp_dir().join(format!("inagg-tls-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let pki = Pki::new(&dir.join("ours")).unwrap();
    let stranger = Pki::new(&dir.join("theirs")).unwrap();
    let emu_metrics = free_tcp();
    let (_emu, _data, control) = emulator(&pki, emu_metrics);
    let control = control.to_string();

    // ctl straight to the emulator: with the CA and a client certificate
    // it is served; in clear, without a certificate, or trusting another
    // CA, it is not, and is told why.
    let to_emu = ["ctl", "--addr", &control, "--switch-token", "sw-secret"];
    let mutual = [
        "--switch-tls-ca",
        path(&pki.ca),
        "--switch-tls-cert",
        path(&pki.client_cert),
        "--switch-tls-key",
        path(&pki.client_key),
    ];
    let info = succeeds(&[&to_emu[..], &mutual, &["info"]].concat());
    assert!(info.contains("slots"), "{info}");
    fails_saying(&[&to_emu[..], &["info"]].concat(), "give its CA");
    fails_saying(
        &[&to_emu[..], &["--switch-tls-ca", path(&pki.ca), "info"]].concat(),
        "CertificateRequired",
    );
    fails_saying(
        &[
            &to_emu[..],
            &["--switch-tls-ca", path(&stranger.ca), "info"],
        ]
        .concat(),
        "invalid peer certificate",
    );
    // Its metrics are read in process: no certificate needed.
    assert!(scrape(emu_metrics).contains("inagg_memory_bytes"));

    // The controller: TLS on its API, mutual TLS towards the emulator.
    let api = free_tcp().to_string();
    let ctl_metrics = free_tcp();
    let state = dir.join("state.redb");
    let controller = Command::new(INAGG)
        .args(["controller", "--listen", &api, "--token", "op-secret"])
        .args(["--state", path(&state), "--switch", &control])
        .args(["--switch-token", "sw-secret"])
        .args(mutual)
        .args(["--tls-cert", path(&pki.server_cert)])
        .args(["--tls-key", path(&pki.server_key)])
        .args(["--metrics", &ctl_metrics.to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _controller = Running(controller);
    let op = ["--controller", &api, "--token", "op-secret"];
    let verified = [&["ctl"][..], &op, &["--tls-ca", path(&pki.ca)]].concat();
    wait_for_controller(&verified);
    succeeds(
        &[
            &verified[..],
            &[
                "job", "create", "--name", "tls", "--count", "2", "--slots", "8",
            ],
        ]
        .concat(),
    );
    fails_saying(
        &[&["ctl"][..], &op, &["job", "list"]].concat(),
        "give its CA",
    );
    fails_saying(
        &[
            &["ctl"][..],
            &op,
            &["--tls-ca", path(&stranger.ca), "job", "list"],
        ]
        .concat(),
        "invalid peer certificate",
    );

    // Two workers register over TLS and all-reduce exactly.
    let agents: Vec<Running> = (0..2)
        .map(|rank| {
            let mut agent = Command::new(INAGG);
            agent.arg("agent");
            // Rank 0 by flags, rank 1 by the environment (docs/GUIDE.md).
            if rank == 0 {
                agent
                    .args(["--controller", &api, "--token", "op-secret"])
                    .args(["--tls-ca", path(&pki.ca)]);
            } else {
                agent
                    .env("INAGG_CONTROLLER", &api)
                    .env("INAGG_TOKEN", "op-secret")
                    .env("INAGG_TLS_CA", &pki.ca);
            }
            let child = agent
                .args(["--job", "tls", "--worker", &rank.to_string()])
                .args(["--bind", &free_udp().to_string()])
                .args(["--dtype", "i32", "--len", "20000", "--verify"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            Running(child)
        })
        .collect();
    for mut agent in agents {
        let mut out = String::new();
        agent
            .0
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        let status = agent.0.wait().unwrap();
        let mut err = String::new();
        let _ = agent.0.stderr.take().unwrap().read_to_string(&mut err);
        assert!(status.success(), "{out}{err}");
        assert!(out.contains("result verified"), "{out}{err}");
    }
    let metrics = scrape(ctl_metrics);
    assert!(metrics.contains("name=\"tls\""), "{metrics}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn endpoints_off_loopback_want_tls_or_insecure() {
    let off = "0.0.0.0:0";
    fails_saying(
        &[
            "emu",
            "--data",
            "127.0.0.1:0",
            "--control",
            off,
            "--token",
            "t",
        ],
        "off loopback: give it a certificate (--tls-cert and --tls-key)",
    );
    fails_saying(
        &[
            "controller",
            "--listen",
            off,
            "--token",
            "t",
            "--state",
            "/nonexistent/x.redb",
        ],
        "off loopback: give it a certificate (--tls-cert and --tls-key)",
    );
    // Said in so many words, the emulator starts (and is killed here).
    let (emu, line) = first_line(
        Command::new(INAGG)
            .args(["emu", "--data", "127.0.0.1:0", "--control", off])
            .args(["--token", "t", "--insecure"])
            .stderr(Stdio::null()),
    );
    drop(emu);
    assert!(line.contains("control tcp://0.0.0.0:"), "{line}");
    // A certificate without its key is a usage error.
    fails_saying(
        &["emu", "--tls-cert", "/nonexistent/c.pem"],
        "--tls-key <FILE>",
    );
}
