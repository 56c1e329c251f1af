//! A running emulator, reached over its TCP control port as `inagg ctl`
//! reaches one: what the `cluster` and `controller` targets drive.

use inagg_emu::server::{Emulator, EmulatorConfig};
use inagg_emu::SwitchConfig;
use inagg_switch_api::JobSpec;
use inagg_switch_control::{EmuTarget, Target};

/// An emulator on loopback with `switch`'s memory, and a connection to it.
pub fn emulator(switch: SwitchConfig) -> (Emulator, EmuTarget) {
    let emu = Emulator::start(EmulatorConfig {
        switch,
        ..EmulatorConfig::ephemeral()
    })
    .expect("start an emulator");
    let target = EmuTarget::connect(emu.control_addr()).expect("reach its control port");
    (emu, target)
}

/// The jobs an emulator holds, by id.
pub fn jobs(target: &mut EmuTarget) -> Vec<JobSpec> {
    let mut jobs: Vec<JobSpec> = target
        .jobs()
        .expect("list the jobs")
        .into_iter()
        .map(|j| j.spec)
        .collect();
    jobs.sort_by_key(|j| j.id);
    jobs
}
