//! The `cluster` target: a cluster file (`inagg ctl apply FILE`), applied
//! to a real emulator over its control connection.
//!
//! `apply` promises that it checks the whole state a file leads to before
//! it touches the switch. So, for any file:
//! - parsing refuses it with an error that names the file, or accepts it;
//! - an accepted file reads back the same after `toml::to_string`;
//! - a plan that is refused leaves the switch as it was;
//! - a plan that is accepted executes without error, and leaves the switch
//!   holding exactly the file's jobs (plus, without `prune`, the jobs it
//!   held that the file does not name);
//! - applying the same file again changes nothing (every step is a keep).

use std::net::SocketAddr;
use std::sync::{Mutex, OnceLock};

use inagg_emu::server::Emulator;
use inagg_emu::SwitchConfig;
use inagg_switch_api::JobSpec;
use inagg_switch_control::cluster::{self, ClusterFile, Step};
use inagg_switch_control::{ControlError, EmuTarget, Target};

use crate::live::{self, jobs};

/// The name errors must carry.
const PATH: &str = "fuzz.toml";

/// The job the switch holds before each file is applied: a file may keep,
/// replace, prune or collide with it.
fn present() -> JobSpec {
    let at = |host: u8| SocketAddr::from(([10, 0, 0, host], 5000));
    JobSpec {
        child_switches: 0,
        id: 7,
        workers: vec![at(1), at(2)],
        pool_base: 0,
        pool_size: 64,
        elements: 64,
        generation: 0,
        queues: Vec::new(),
        group: None,
        upstream: None,
        detours: Vec::new(),
    }
}

/// One emulator for every input (starting one per input would make the
/// fuzzer measure thread start-up), reset before each.
fn emulator() -> &'static Mutex<(Emulator, EmuTarget)> {
    static EMU: OnceLock<Mutex<(Emulator, EmuTarget)>> = OnceLock::new();
    EMU.get_or_init(|| Mutex::new(live::emulator(SwitchConfig::default())))
}

/// The target.
pub fn cluster(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let file = match ClusterFile::parse(PATH, text) {
        Ok(file) => file,
        Err(e) => return refused(&e),
    };
    if let Ok(again) = toml::to_string(&file) {
        let back = ClusterFile::parse(PATH, &again)
            .unwrap_or_else(|e| panic!("{file:?} written as {again:?} does not read back: {e}"));
        assert_eq!(back, file, "written as {again:?}");
    }
    let mut emu = emulator().lock().unwrap_or_else(|p| p.into_inner());
    let target = &mut emu.1;
    for prune in [false, true] {
        reset(target);
        apply(&file, target, prune);
    }
}

/// A refusal is a configuration error naming the file.
fn refused(e: &ControlError) {
    assert!(matches!(e, ControlError::Config { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(PATH),
        "{e} does not name the file"
    );
}

/// Plans, executes and checks one application of `file`.
fn apply(file: &ClusterFile, target: &mut EmuTarget, prune: bool) {
    let before = jobs(target);
    let steps = match cluster::plan(file, PATH, target, prune) {
        Ok(steps) => steps,
        Err(e) => {
            refused(&e);
            assert_eq!(jobs(target), before, "a refused plan changed the switch");
            return;
        }
    };
    for step in &steps {
        let _ = step.to_string();
    }
    cluster::execute(&steps, target)
        .unwrap_or_else(|e| panic!("a checked plan {steps:?} failed (prune: {prune}): {e}"));
    let mut want: Vec<JobSpec> = file.jobs.iter().map(JobSpec::from).collect();
    if !prune {
        let kept: Vec<JobSpec> = before
            .into_iter()
            .filter(|b| !file.jobs.iter().any(|j| j.id == b.id))
            .collect();
        want.extend(kept);
    }
    want.sort_by_key(|j| j.id);
    assert_eq!(jobs(target), want, "after {steps:?} (prune: {prune})");
    let again = cluster::plan(file, PATH, target, prune).expect("the applied file plans again");
    assert!(
        again.iter().all(|s| matches!(s, Step::Keep { .. })),
        "applying the file again would change {again:?}"
    );
}

/// Back to the switch holding [`present`] alone.
fn reset(target: &mut EmuTarget) {
    for job in jobs(target) {
        target.delete_job(job.id).expect("delete a job");
    }
    target
        .create_job(&present())
        .expect("install the present job");
}
