//! The emulator passes every conformance vector in `tests/conformance/`.

use std::path::{Path, PathBuf};

use inagg_emu::conformance::{files, load, run};

fn vectors() -> Vec<PathBuf> {
    files(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/conformance"))
        .expect("tests/conformance exists")
}

#[test]
fn emulator_passes_every_conformance_vector() {
    let files = vectors();
    assert!(
        files.len() >= 12,
        "expected the full set of vectors, found {}",
        files.len()
    );
    let mut failures = Vec::new();
    for path in &files {
        let case = load(path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!case.description.is_empty() && !case.protocol.is_empty());
        if let Err(e) = run(&case) {
            failures.push(format!("{}: {e}", path.display()));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The runner itself must be able to fail: a vector with one wrong expected
/// value is caught.
#[test]
fn a_wrong_expectation_is_reported() {
    let path = vectors()
        .into_iter()
        .find(|p| p.ends_with("02_n_workers_complete_a_slot.json"))
        .expect("vector 02");
    let mut case = load(&path).unwrap();
    let step = case.packets.iter_mut().find(|s| !s.out.is_empty()).unwrap();
    step.out[0].packet.fields.as_mut().unwrap().values[0] += 1;
    assert!(run(&case).is_err());
    // And a bad vector is an error, not a panic.
    let step = case.packets.iter_mut().find(|s| !s.out.is_empty()).unwrap();
    step.out[0].packet.fields.as_mut().unwrap().kind = "bogus".into();
    let err = run(&case).unwrap_err();
    assert!(err.contains("unknown kind \"bogus\""), "{err}");
}
