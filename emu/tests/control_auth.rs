//! The control endpoint's token (`inagg emu --token`): a connection that has
//! not presented it gets nothing but refusals (no job made or deleted, no
//! claim on the switch, no fault set); a wrong token ends the connection;
//! the right one opens it. An emulator will not listen off loopback
//! without a token.

use std::net::SocketAddr;

use inagg_emu::{Emulator, EmulatorConfig};
use inagg_netio::token::Token;
use serde_json::{json, Value};

mod common;
use common::Client;

/// Sends one request as a JSON line (None: the connection closed).
fn ask(c: &mut Client, request: Value) -> Option<Value> {
    let mut line = serde_json::to_vec(&request).unwrap();
    line.push(b'\n');
    c.try_ask(&line)
}

fn kind(answer: &Value) -> &str {
    answer["err"]["kind"].as_str().unwrap_or("ok")
}

fn job(id: u16) -> Value {
    json!({"op": "create_job", "spec": {
        "id": id, "workers": ["127.0.0.1:5000"], "pool_base": 0, "pool_size": 8,
        "elements": 64, "generation": 0
    }})
}

fn with_token() -> Emulator {
    Emulator::start(EmulatorConfig {
        token: Some(Token::new("s3cret").unwrap()),
        ..EmulatorConfig::ephemeral()
    })
    .unwrap()
}

#[test]
fn without_the_token_a_connection_changes_nothing() {
    let emu = with_token();
    let mut owner = Client::connect(&emu);
    let done = ask(&mut owner, json!({"op": "authenticate", "token": "s3cret"})).unwrap();
    assert_eq!(kind(&done), "ok", "{done}");
    assert_eq!(kind(&ask(&mut owner, job(1)).unwrap()), "ok");
    let claim = ask(&mut owner, json!({"op": "arbitrate", "election_id": 1})).unwrap();
    assert_eq!(kind(&claim), "ok", "{claim}");

    // A neighbour without the token: every request is refused, says what
    // to do, and ends the connection, the highest election id included.
    for request in [
        json!({"op": "arbitrate", "election_id": 1u64 << 63}),
        json!({"op": "delete_job", "id": 1}),
        job(2),
        json!({"op": "set_faults", "faults": {"drop_ingress": 1.0, "drop_egress": 1.0}}),
        json!({"op": "list_jobs"}),
    ] {
        let mut stranger = Client::connect(&emu);
        let answer = ask(&mut stranger, request.clone()).unwrap();
        assert_eq!(kind(&answer), "unauthorized", "{request}: {answer}");
        let message = answer["err"]["message"].as_str().unwrap();
        assert!(message.contains("--switch-token"), "{message}");
        assert!(ask(&mut stranger, request).is_none(), "closed after it");
    }
    // Nothing changed: the job is there, the owner still holds the switch,
    // no fault is set.
    let state = emu.state();
    assert_eq!(state.switch.jobs().len(), 1);
    assert!(!state.faults.config().any());
    drop(state);
    assert_eq!(
        kind(&ask(&mut owner, json!({"op": "delete_job", "id": 1})).unwrap()),
        "ok"
    );

    // A wrong token is refused and ends the connection: one guess each.
    let mut guesser = Client::connect(&emu);
    let answer = ask(
        &mut guesser,
        json!({"op": "authenticate", "token": "s3cre"}),
    )
    .unwrap();
    assert_eq!(kind(&answer), "unauthorized", "{answer}");
    assert!(ask(&mut guesser, json!({"op": "list_jobs"})).is_none());
}

#[test]
fn off_loopback_the_control_endpoint_needs_a_token() {
    let config = EmulatorConfig {
        control_addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        ..EmulatorConfig::ephemeral()
    };
    let err = Emulator::start(config.clone()).unwrap_err().to_string();
    assert!(
        err.contains("off this host, without a token: pass --token"),
        "{err}"
    );
    // With a token, it still wants TLS, or to be told it may do without.
    let with_token = EmulatorConfig {
        token: Some(Token::new("t").unwrap()),
        ..config
    };
    let err = Emulator::start(with_token.clone()).unwrap_err().to_string();
    assert!(
        err.contains("off loopback: give it a certificate") && err.contains("--insecure"),
        "{err}"
    );
    let emu = Emulator::start(EmulatorConfig {
        insecure: true,
        ..with_token
    })
    .unwrap();
    assert!(emu.control_addr().port() != 0);
}

#[test]
fn without_a_token_on_loopback_every_connection_is_trusted() {
    let emu = Emulator::start(EmulatorConfig::ephemeral()).unwrap();
    let mut c = Client::connect(&emu);
    assert_eq!(kind(&ask(&mut c, job(1)).unwrap()), "ok");
    // Presenting a token to an emulator without one is harmless.
    let answer = ask(&mut c, json!({"op": "authenticate", "token": "x"})).unwrap();
    assert_eq!(kind(&answer), "ok", "{answer}");
}

/// Strangers cannot lock the token's holders out: 80 connections that
/// never present the token, each sending an unauthenticated request (and
/// kept open), hold at most the strangers' quota; a client with the token
/// still gets a place and is answered, and keeps it while more strangers
/// come.
#[test]
fn a_flood_of_strangers_does_not_lock_out_the_token() {
    let emu = with_token();
    let mut flood = Vec::new();
    for _ in 0..80 {
        let mut stranger = Client::connect(&emu);
        // Refused ("present the token first") or closed when a newer
        // stranger took its place.
        if let Some(answer) = ask(&mut stranger, json!({"op": "info"})) {
            assert_eq!(kind(&answer), "unauthorized", "{answer}");
        }
        flood.push(stranger);
    }
    let mut owner = Client::connect(&emu);
    let done = ask(&mut owner, json!({"op": "authenticate", "token": "s3cret"}))
        .expect("a place for the token's holder");
    assert_eq!(kind(&done), "ok", "{done}");
    for _ in 0..80 {
        let mut stranger = Client::connect(&emu);
        let _ = ask(&mut stranger, json!({"op": "info"}));
        flood.push(stranger);
    }
    let info = ask(&mut owner, json!({"op": "info"})).expect("the holder kept its place");
    assert_eq!(kind(&info), "ok", "{info}");
    // Of the 160, at most the strangers' quota from one address still open.
    let open = flood
        .iter_mut()
        .map(|c| ask(c, json!({"op": "info"})))
        .filter(Option::is_some)
        .count();
    assert!(open <= 16, "{open} strangers still served");
}

/// Past five wrong tokens, the address backs off: every connection from it
/// is refused, the right token too, with the wait said, until the back-off
/// has passed (its doubling is `inagg_netio::conns`'s, tested in virtual
/// time there).
#[test]
fn wrong_tokens_make_their_address_back_off() {
    let emu = with_token();
    let authenticate = |token: &str| {
        let mut c = Client::connect(&emu);
        ask(&mut c, json!({"op": "authenticate", "token": token})).unwrap()
    };
    for _ in 0..inagg_netio::conns::FREE_GUESSES {
        assert_eq!(kind(&authenticate("guess")), "unauthorized");
    }
    assert_eq!(kind(&authenticate("s3cret")), "ok", "five typos are free");
    assert_eq!(kind(&authenticate("guess")), "unauthorized");
    let answer = authenticate("s3cret");
    let message = answer["err"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("too many wrong tokens from 127.0.0.1: try again in"),
        "{answer}"
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while kind(&authenticate("s3cret")) != "ok" {
        assert!(std::time::Instant::now() < deadline, "still refused");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
