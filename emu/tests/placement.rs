//! The data plane on a CPU of its own (`EmulatorConfig::cpu`): the thread
//! that serves the packets is pinned there, as the kernel reports it, and
//! a CPU this process may not use is refused before anything listens.
#![cfg(target_os = "linux")]

use inagg_emu::affinity;
use inagg_emu::{Emulator, EmulatorConfig};

/// The CPUs the kernel lets the emulator's data-plane thread run on
/// (`Cpus_allowed_list` of the thread named `emu-data`), once the thread
/// has named itself.
fn data_plane_cpus() -> Option<String> {
    for task in std::fs::read_dir("/proc/self/task").ok()? {
        let dir = task.ok()?.path();
        let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        if comm.trim() != "emu-data" {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).ok()?;
        return status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .map(|l| l.trim().to_string());
    }
    None
}

#[test]
fn the_data_plane_runs_only_on_its_cpu() {
    let cpus = affinity::allowed().unwrap();
    let last = *cpus.last().unwrap();
    let emu = Emulator::start(EmulatorConfig {
        cpu: Some(last),
        ..EmulatorConfig::ephemeral()
    })
    .unwrap();
    // The thread names and pins itself as it starts: wait for it (bounded).
    let mut seen = None;
    for _ in 0..400 {
        seen = data_plane_cpus();
        if seen == Some(last.to_string()) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(seen, Some(last.to_string()));
    // This thread, and the process, keep every CPU they had.
    assert_eq!(affinity::allowed().unwrap(), cpus);
    emu.stop();
}

#[test]
fn a_cpu_out_of_reach_is_refused_with_the_ones_in_reach() {
    let cpus = affinity::allowed().unwrap();
    let err = Emulator::start(EmulatorConfig {
        cpu: Some(4096),
        ..EmulatorConfig::ephemeral()
    })
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "CPU 4096: this process may run only on CPUs {}",
            affinity::List(&cpus)
        )
    );
}
