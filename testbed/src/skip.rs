//! What a test did not run, said where a person and a script both see it.
//!
//! A test that needs something this machine lacks (root, DPDK hugepages,
//! p4c and simple_switch_grpc, bf-p4c, PyTorch) calls [`skip`] and returns:
//! the reason goes to stderr, and, when `INAGG_SKIP_LOG` names a file, one
//! line `SUITE<TAB>TEST<TAB>REASON` is appended to it, which `scripts/test`
//! turns into its closing table of suites run and skipped. A suite listed
//! in `INAGG_REQUIRE` (comma-separated, e.g. `dpdk,torch`, which `.ci/run`
//! sets) may not skip: the test fails with the reason instead of passing.

use std::io::Write;

/// The suites a test may skip, as `INAGG_REQUIRE` and the table name them.
pub const SUITES: &[&str] = &["dpdk", "netns", "bmv2", "tofino", "torch"];

/// Records that the calling test skips `suite` because of `why`; panics
/// instead when `INAGG_REQUIRE` lists the suite.
pub fn skip(suite: &str, why: &str) {
    debug_assert!(SUITES.contains(&suite), "unknown suite {suite}");
    let test = std::thread::current()
        .name()
        .unwrap_or("(unnamed)")
        .to_string();
    if required(suite, std::env::var("INAGG_REQUIRE").ok().as_deref()) {
        panic!("the {suite} suite is required here (INAGG_REQUIRE) but {test} cannot run: {why}");
    }
    eprintln!("skipped: {why}");
    if let Some(path) = std::env::var_os("INAGG_SKIP_LOG") {
        let line = format!("{suite}\t{test}\t{}\n", one_line(why));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path);
        // One write of a short line with O_APPEND: lines of tests running
        // at once do not interleave.
        if let Err(e) = file.and_then(|mut f| f.write_all(line.as_bytes())) {
            eprintln!("skipped, and not logged to {}: {e}", path.to_string_lossy());
        }
    }
}

/// Whether `require` (INAGG_REQUIRE's value) lists `suite`.
fn required(suite: &str, require: Option<&str>) -> bool {
    require.is_some_and(|r| r.split(',').any(|s| s.trim() == suite))
}

/// A reason on one line, without the table's separators.
fn one_line(why: &str) -> String {
    why.chars()
        .map(|c| {
            if c == '\t' || c == '\n' || c == '\r' {
                ' '
            } else {
                c
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn require_lists_suites_by_name() {
        assert!(required("torch", Some("dpdk,torch")));
        assert!(required("dpdk", Some(" dpdk , torch")));
        assert!(!required("bmv2", Some("dpdk,torch")));
        assert!(!required("torch", Some("")));
        assert!(!required("torch", None));
        assert_eq!(one_line("a\tb\nc"), "a b c");
    }
}
