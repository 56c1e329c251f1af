//! Members a round apart (docs/PROTOCOL.md, "Sessions"): a scripted run
//! of two real agent cores and the emulator's switch, in virtual time, in
//! which one member loses a round's result and the switch loses it too,
//! and a catch-up round hands it over.
//!
//! The seeded simulator found this once in 30,000 runs of a 2-worker job
//! at 2% loss, duplication and reordering; a seed stops replaying it as
//! soon as anything in the protocol changes, so the run is scripted here:
//! which datagrams are held back or dropped is chosen by what they are,
//! not drawn. The script is a stand-in for the network's faults (the
//! real agents and the real switch state machine run), the only way to
//! make a 1 in 30,000 interleaving happen on every run.

use std::collections::VecDeque;
use std::net::SocketAddr;

use inagg_emu::pipeline::{Egress, Pipeline, State};
use inagg_emu::{JobSpec, Switch, SwitchConfig};
use inagg_host_agent::protocol::{Agent, AllReduce};
use inagg_host_agent::quant::error_bound;
use inagg_host_agent::{AgentConfig, Stats, Window};
use inagg_wire::{Kind, Packet, Repr};

const JOB: u16 = 7;
/// A step of virtual time: every datagram sent in a step arrives in it.
const STEP: u64 = 50_000;

/// The switch's copies of one datagram.
#[derive(Default)]
struct Copies(Vec<(SocketAddr, Vec<u8>)>, Vec<Vec<u8>>);

impl Egress for Copies {
    type Staged = usize;
    fn stage(&mut self, payload: &[u8]) -> usize {
        self.1.push(payload.to_vec());
        self.1.len() - 1
    }
    fn staged(&self, staged: &usize) -> &[u8] {
        &self.1[*staged]
    }
    fn push_parts(&mut self, head: &[u8], payload: &usize, to: SocketAddr) -> bool {
        let mut bytes = head.to_vec();
        bytes.extend_from_slice(&self.1[*payload]);
        self.0.push((to, bytes));
        true
    }
    fn push(&mut self, bytes: &[u8], to: SocketAddr) -> bool {
        self.0.push((to, bytes.to_vec()));
        true
    }
}

fn parse(bytes: &[u8]) -> Repr {
    Repr::parse(&Packet::new_checked(bytes).unwrap()).unwrap()
}

/// The script's faults, decided by what each datagram is.
#[derive(Default)]
struct Script {
    /// A copy of worker 0's first handshake, held back.
    held: Option<Vec<u8>>,
    /// The packet id of the round whose result worker 0 is not to get.
    lost: Option<u32>,
    /// Whether the held handshake has been let go.
    released: bool,
    dropped: u32,
}

impl Script {
    /// What goes up to the switch: worker 0's first handshake, a copy of
    /// it held back until the first data round completes.
    fn up(&mut self, worker: usize, bytes: Vec<u8>) -> Vec<u8> {
        let r = parse(&bytes);
        if worker == 0 && r.kind == Kind::Contribution && r.count == 2 && self.held.is_none() {
            self.held = Some(bytes.clone());
        }
        bytes
    }

    /// What comes down to worker `worker`: worker 0 loses the first data
    /// round's result, every copy of it, and the held handshake goes up
    /// right behind it.
    fn down(&mut self, worker: usize, bytes: &[u8], release: &mut Option<Vec<u8>>) -> bool {
        let r = parse(bytes);
        let data_result = r.kind == Kind::Result && r.count == 2;
        if data_result && self.lost.is_none() && self.held.is_some() {
            self.lost = Some(r.packet_id);
        }
        if data_result && Some(r.packet_id) == self.lost && !self.released {
            self.released = true;
            *release = self.held.take();
        }
        let drop = worker == 0 && r.kind == Kind::Result && Some(r.packet_id) == self.lost;
        self.dropped += u32::from(drop);
        !drop
    }
}

/// Two workers of a job of one slot and K = 8 (7 values and the check),
/// on the emulator's switch.
struct Lab {
    state: State,
    pipeline: Pipeline,
    hosts: Vec<SocketAddr>,
    agents: Vec<Agent>,
}

impl Lab {
    fn new() -> Lab {
        let switch_addr: SocketAddr = ([10, 0, 0, 1], 47000).into();
        let hosts: Vec<SocketAddr> = (0..2)
            .map(|i| SocketAddr::from(([10, 0, 1, i + 1], 5000)))
            .collect();
        let (k, pool) = (8u16, 1u32);
        let mut switch = Switch::new(SwitchConfig::default());
        switch
            .create_job(JobSpec::new(JOB, hosts.clone(), 0, pool, k))
            .unwrap();
        let agents = (0..2u16)
            .map(|w| {
                let mut c = AgentConfig::new(switch_addr, JOB, w, 2, pool, k);
                c.bind = hosts[usize::from(w)];
                c.give_up_after = std::time::Duration::from_secs(5);
                c.window = Window::Adaptive { initial: 1 };
                Agent::new(c, 11 + u64::from(w)).unwrap()
            })
            .collect();
        Lab {
            state: State::new(switch),
            pipeline: Pipeline::default(),
            hosts,
            agents,
        }
    }
}

/// Runs `runs` (one all-reduce per worker) to the end under `script`, in
/// steps of virtual time; each worker's statistics.
fn drive(
    (state, pipeline, hosts): (&mut State, &mut Pipeline, &[SocketAddr]),
    mut runs: Vec<AllReduce<'_>>,
    script: &mut Script,
) -> Vec<Stats> {
    let mut inbox: Vec<VecDeque<Vec<u8>>> = vec![VecDeque::new(); runs.len()];
    let mut now = 0u64;
    while runs.iter().any(|r| !r.is_done()) {
        assert!(now < 20_000_000_000, "the all-reduce did not complete");
        let mut up = Vec::new();
        for (w, run) in runs.iter_mut().enumerate() {
            run.transmit(now, |d| up.push((w, d.to_vec()))).unwrap();
        }
        let mut arriving: VecDeque<(usize, Vec<u8>)> =
            up.into_iter().map(|(w, d)| (w, script.up(w, d))).collect();
        while let Some((w, bytes)) = arriving.pop_front() {
            let mut out = Copies::default();
            pipeline.serve(state, &bytes, hosts[w], &mut out);
            pipeline.idle(state, &mut out);
            for (to, copy) in out.0 {
                let h = hosts.iter().position(|&a| a == to).unwrap();
                let mut release = None;
                if script.down(h, &copy, &mut release) {
                    inbox[h].push_back(copy);
                }
                if let Some(late) = release {
                    arriving.push_back((0, late));
                }
            }
        }
        for (w, run) in runs.iter_mut().enumerate() {
            while let Some(d) = inbox[w].pop_front() {
                run.on_datagram(now, &d).unwrap();
            }
            run.on_idle(now, true).unwrap();
        }
        now += STEP;
    }
    assert!(script.released && script.dropped > 0, "the script ran");
    runs.into_iter().map(|r| r.finish()).collect()
}

/// The hole the simulator once found: worker 0 lost its copy of the first
/// data round's result, a held-back copy of its handshake took its bit
/// out of the set holding it, and worker 1's next handshake reused that
/// set. Without the catch-up round the two stay a round apart, every
/// later round failing its check until they give up (seen with the
/// catch-up taken out by hand: a timeout after 4,166 rejected rounds); with it, the sums are exact and each
/// worker counts one catch-up.
#[test]
fn a_member_that_lost_a_round_the_switch_lost_too_gets_it_from_a_catch_up_round() {
    let mut lab = Lab::new();
    // 7 values per packet, 6 rounds.
    let mut tensors: Vec<Vec<i32>> = (0..2)
        .map(|w| (0..42).map(|i| i * 10 + w).collect())
        .collect();
    let runs = lab
        .agents
        .iter_mut()
        .zip(tensors.iter_mut())
        .map(|(a, t)| a.allreduce_i32(t).unwrap())
        .collect();
    let lab_io = (&mut lab.state, &mut lab.pipeline, &lab.hosts[..]);
    let stats = drive(lab_io, runs, &mut Script::default());
    let expected: Vec<i32> = (0..42).map(|i| 20 * i + 1).collect();
    assert_eq!(tensors, [expected.clone(), expected]);
    for (w, s) in stats.iter().enumerate() {
        assert_eq!(s.catch_ups, 1, "worker {w}: {s:?}");
    }
}

/// The same with floats: the catch-up round also carries the exponent
/// the lost round agreed on for the next chunk, and the member behind
/// dequantizes the handed-over round with the exponent it quantized it
/// with.
#[test]
fn a_float_all_reduce_catches_up_within_its_bound() {
    let mut lab = Lab::new();
    let mut tensors: Vec<Vec<f32>> = (0..2)
        .map(|w| {
            (0..42)
                .map(|i| (i as f32 - 20.5) * 0.37 + w as f32)
                .collect()
        })
        .collect();
    let exact: Vec<f64> = (0..42)
        .map(|i| tensors.iter().map(|t| f64::from(t[i])).sum())
        .collect();
    let runs = lab
        .agents
        .iter_mut()
        .zip(tensors.iter_mut())
        .map(|(a, t)| a.allreduce_f32(t).unwrap())
        .collect();
    let lab_io = (&mut lab.state, &mut lab.pipeline, &lab.hosts[..]);
    let stats = drive(lab_io, runs, &mut Script::default());
    for t in &tensors {
        for (i, (&got, &want)) in t.iter().zip(&exact).enumerate() {
            // Every chunk's largest magnitude is below 2^4 (biased 131).
            let bound = error_bound(131, 2, want);
            assert!(
                (f64::from(got) - want).abs() <= bound,
                "element {i}: {got} against {want}"
            );
        }
    }
    for (w, s) in stats.iter().enumerate() {
        assert_eq!(s.catch_ups, 1, "worker {w}: {s:?}");
    }
}
