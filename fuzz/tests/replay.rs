//! Every fuzz target on stable Rust, on each `cargo test`: on its seeds,
//! on seeded mutations of them, and on every input in
//! `fuzz/regressions/TARGET/` (inputs that once failed, kept once fixed).
//! A failure names the target and prints the input in hex, so that it can
//! be saved as a regression and replayed with `fuzz/run`'s binary.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;

use inagg_fuzz::{mutate::mutate, seeds, target};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Mutations per target: enough to take every branch the seeds lead to
/// many times over, few enough for a second or two each.
const MUTATIONS: usize = 20_000;

/// Mutations of `name`: fewer for the controller, whose inputs each take a
/// dozen TCP round trips (about 1 ms) where the others take microseconds.
fn mutations(name: &str) -> usize {
    match name {
        "controller" => MUTATIONS / 4,
        // A session of real workers per input (tens of milliseconds).
        "sessions" => 150,
        _ => MUTATIONS,
    }
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

/// Runs `name` on `data`; a panic becomes one naming the input.
fn run(name: &str, data: &[u8], what: &str) {
    let f = target(name).expect("a target");
    if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(data))) {
        let why = e
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        panic!("{name} failed on {what}: {why}\ninput: {}", hex(data));
    }
}

fn replay(name: &str) {
    let seeds = seeds::of(name);
    assert!(seeds.len() >= 3, "{name}: {} seeds", seeds.len());
    for (i, seed) in seeds.iter().enumerate() {
        run(name, seed, &format!("seed {i}"));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(0x1a66);
    for i in 0..mutations(name) {
        run(name, &mutate(&mut rng, &seeds), &format!("mutation {i}"));
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("regressions")
        .join(name);
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries {
            let path = entry.unwrap().path();
            run(
                name,
                &std::fs::read(&path).unwrap(),
                &path.display().to_string(),
            );
        }
    }
}

#[test]
fn header() {
    replay("header");
}

#[test]
fn frame() {
    replay("frame");
}

#[test]
fn switch() {
    replay("switch");
}

#[test]
fn control() {
    replay("control");
}

#[test]
fn config() {
    replay("config");
}

#[test]
fn cluster() {
    replay("cluster");
}

#[test]
fn controller() {
    replay("controller");
}

#[test]
fn sessions() {
    replay("sessions");
}

/// The seeds start past the first checks: most datagrams parse, the
/// frames include UDP ones, every configuration string is accepted, and
/// most cluster files parse.
#[test]
fn the_seeds_reach_past_the_first_checks() {
    use inagg_wire::{frame, Packet, Repr};
    let datagrams = seeds::of("header");
    let parsed = datagrams
        .iter()
        .filter(|d| {
            Packet::new_checked(&d[..])
                .and_then(|p| Repr::parse(&p))
                .is_ok()
        })
        .count();
    assert!(parsed * 10 >= datagrams.len() * 8, "{parsed} parse");
    let udp = seeds::of("frame")
        .iter()
        .filter(|f| matches!(frame::parse(f), frame::Frame::Udp { .. }))
        .count();
    assert!(udp >= 8, "{udp} UDP frames");
    let configs = seeds::of("config");
    let settings = configs
        .iter()
        .filter(|c| inagg_capi::config::parse(std::str::from_utf8(c).unwrap()).is_ok())
        .count();
    assert_eq!(settings, configs.len());
    let files = seeds::of("cluster");
    let parsed = files
        .iter()
        .filter(|f| {
            let text = std::str::from_utf8(f).unwrap();
            inagg_switch_control::cluster::ClusterFile::parse("seed", text).is_ok()
        })
        .count();
    assert_eq!(
        parsed,
        files.len() - 1,
        "only the unknown target is refused"
    );
}
