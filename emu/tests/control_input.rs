//! Bad input on the control endpoint (JSON lines over TCP): every bad line
//! gets a `bad_request` answer that says what the parser said, on the same
//! connection, which stays usable; an endless line is cut off at the limit
//! with its own answer; and none of it changes the switch or stops it
//! serving other clients.

use std::io::{BufRead, Write};
use std::time::Duration;

use inagg_emu::{Emulator, EmulatorConfig};
use serde_json::Value;

mod common;
use common::Client;

/// The message of a `bad_request` answer (panics on anything else).
fn bad_request(answer: &Value) -> String {
    let err = &answer["err"];
    assert_eq!(err["kind"], "bad_request", "{answer}");
    err["message"].as_str().unwrap().to_string()
}

#[test]
fn bad_lines_get_the_parsers_reason_and_the_connection_goes_on() {
    let emu = Emulator::start(EmulatorConfig::ephemeral()).unwrap();
    let mut c = Client::connect(&emu);
    let cases: [(&[u8], &str); 6] = [
        (b"hello\n", "expected value"),
        (b"{\"op\":\"list_jobs\"\n", "EOF while parsing"),
        (b"{\"op\":\"reboot\"}\n", "unknown variant `reboot`"),
        (b"{\"op\":\"delete_job\"}\n", "missing field `id`"),
        (b"{\"op\":\"delete_job\",\"id\":70000}\n", "70000"),
        (b"\xff\xfe\x00\n", "expected value"),
    ];
    for (line, says) in cases {
        let message = bad_request(&c.ask(line));
        assert!(message.contains(says), "{line:?}: {message}");
    }
    // A line that arrives in pieces is one request.
    c.writer.write_all(b"{\"op\":").unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let jobs = c.ask(b"\"list_jobs\"}\n");
    assert!(jobs["ok"].is_object(), "{jobs}");
    // A job refused for its content is a job error, not a bad request.
    let unknown = c.ask(b"{\"op\":\"delete_job\",\"id\":9}\n");
    assert_eq!(unknown["err"]["kind"], "job", "{unknown}");
    emu.stop();
}

#[test]
fn an_endless_line_is_cut_off_and_others_are_still_served() {
    let emu = Emulator::start(EmulatorConfig::ephemeral()).unwrap();
    let mut hog = Client::connect(&emu);
    let mut other = Client::connect(&emu);
    // Over the 1 MiB limit with no newline.
    let answer = hog.ask(&vec![b' '; (1 << 20) + 10]);
    assert_eq!(bad_request(&answer), "request line too long");
    let mut rest = String::new();
    let closed = hog.reader.read_line(&mut rest);
    assert!(matches!(closed, Ok(0)) || closed.is_err(), "{rest:?}");
    let counters = other.ask(b"{\"op\":\"counters\"}\n");
    assert_eq!(counters["ok"]["counters"]["rx_packets"], 0, "{counters}");
    emu.stop();
}
