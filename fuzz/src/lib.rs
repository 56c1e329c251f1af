//! Fuzz targets for every parser of untrusted input in inagg, with their
//! seed corpora.
//!
//! | target | input | what must hold |
//! |---|---|---|
//! | [`header`] | an inagg datagram | no panic; a datagram that parses is canonical: its `Repr` emits its header bytes again |
//! | [`frame`] | an Ethernet frame (the DPDK data paths) | no panic; the fast path and smoltcp's views agree wherever the fast path answers; a UDP payload lies inside the frame |
//! | [`switch`] | datagrams from members, parents, relays and strangers, at a switch holding every kind of table entry | no panic; every datagram counted in and every drop under its one reason; whatever leaves is a well-formed packet of the job's K, or the datagram verbatim |
//! | [`control`] | lines of the emulator's control protocol (JSON) | no panic; pools stay inside the switch and disjoint; each job still takes a contribution and answers well-formed |
//! | [`config`] | a C API configuration string (`key=value ...`) | no panic; every refusal says why |
//! | [`controller`] | lines of `inagg controller`'s API, to a real controller that owns two emulators (a switch and a fallback) | no panic; every line answered, a refusal with its reason; each job the controller reports installed is on its aggregator as granted, the aggregators hold nothing else, and grants lie inside each aggregator, disjoint, with the free slots it reports the rest |
//! | [`sessions`] | datagrams of any kind and fields from one of a job's idle worker endpoints, then a session of real workers | no panic; the session sums its own values exactly, in a bounded number of packets |
//! | [`cluster`] | a cluster file (TOML), applied to a real emulator holding a job | no panic; a refusal names the file and leaves the switch as it was; an accepted file reads back the same once written, its plan executes without error, the switch then holds exactly the file's jobs, and a second application changes nothing |
//!
//! Each target is a plain function, run two ways:
//! - `tests/replay.rs` runs it on its seeds ([`seeds::of`]), on seeded
//!   mutations of them ([`mutate`]) and on every input in
//!   `fuzz/regressions/TARGET/` on each `cargo test`, on stable Rust;
//! - `fuzz/run TARGET [SECONDS]` runs it under libFuzzer, built with
//!   coverage instrumentation (cargo-fuzz's flags, on stable Rust, with
//!   overflow checks on), starting from the same seeds. An input that
//!   fails goes to `fuzz/artifacts/TARGET/`; once fixed it belongs in
//!   `fuzz/regressions/TARGET/`.
//!
//! A failed check is a panic: that is how both drivers see it.

mod cluster;
mod controller;
mod live;
pub mod mutate;
pub mod sample;
pub mod seeds;
mod sessions;
mod targets;

pub use cluster::cluster;
pub use controller::controller;
pub use sessions::sessions;
pub use targets::{config, control, frame, header, switch};

/// A target: any bytes in, a panic only when a check fails.
pub type Target = fn(&[u8]);

/// Every target, by the name its binary and directories have.
pub const TARGETS: [(&str, Target); 8] = [
    ("header", header),
    ("frame", frame),
    ("switch", switch),
    ("control", control),
    ("config", config),
    ("cluster", cluster),
    ("controller", controller),
    ("sessions", sessions),
];

/// The target named `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|&(_, f)| f)
}
