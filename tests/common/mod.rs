//! Helpers shared by the end-to-end suites that build network namespaces
//! (`raw_conformance.rs`, `dpdk.rs`).

use std::process::{Command, Output};

/// Runs a command and fails the test, with its stderr, if it fails.
pub fn sh(args: &[&str]) -> Output {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// [`sh`] inside network namespace `ns`.
pub fn in_ns(ns: &str, args: &[&str]) -> Output {
    let mut all = vec!["ip", "netns", "exec", ns];
    all.extend_from_slice(args);
    sh(&all)
}

/// Why namespace tests cannot run here, if they cannot.
pub fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root (network namespaces need it)".into());
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return Some("iproute2 (`ip`) not installed".into());
    }
    None
}
