//! The targets: each takes any bytes and panics only when a check fails.

use inagg_emu::arbitration::Arbitration;
use inagg_emu::faults::FaultInjector;
use inagg_emu::server::{handle, Caller, State};
use inagg_emu::switch::Action;
use inagg_emu::{FaultConfig, Switch, SwitchConfig};
use inagg_switch_api::Request;
use inagg_wire::frame::{self as eth, Frame};
use inagg_wire::{payload, Packet, Repr, HEADER_LEN};

use crate::sample::{self, addr, check_output};

/// An inagg datagram: a datagram that parses is canonical (its `Repr`
/// emits its header bytes again), and the header's checksum sum, taken
/// from the registers it is built in, is the sum of those bytes.
pub fn header(data: &[u8]) {
    let Ok(packet) = Packet::new_checked(data) else {
        return;
    };
    let shown = packet.to_string();
    let Ok(repr) = Repr::parse(&packet) else {
        return;
    };
    assert_eq!(repr.buffer_len(), data.len(), "{repr}: length");
    let mut again = vec![0u8; HEADER_LEN];
    let sum = repr.emit_summed(&mut again);
    assert_eq!(
        again,
        data[..HEADER_LEN],
        "{repr} ({shown}) is not canonical"
    );
    assert_eq!(
        eth::fold(sum),
        eth::fold(eth::ones_sum_native(&again)),
        "{repr}: emit_summed"
    );
    let _ = repr.to_string();
}

/// An Ethernet frame: the fast path of `frame::parse` agrees with smoltcp's
/// views wherever it answers, and a UDP payload lies inside the frame.
pub fn frame(data: &[u8]) {
    let fast = eth::parse(data);
    let general = eth::parse_general(data);
    assert_eq!(fast, general, "the fast path and smoltcp's views disagree");
    if let Frame::Udp { payload, .. } = fast {
        let start = payload.as_ptr() as usize - data.as_ptr() as usize;
        assert!(
            start + payload.len() <= data.len(),
            "a payload past the frame"
        );
    }
}

/// Splits the input into datagrams, each `[sender][length: u16 BE][bytes]`
/// (the last one takes what is left when its length runs past the end).
fn records(mut data: &[u8]) -> impl Iterator<Item = (u8, &[u8])> {
    std::iter::from_fn(move || {
        let (&sender, rest) = data.split_first()?;
        let len = match rest {
            [hi, lo, ..] => usize::from(u16::from_be_bytes([*hi, *lo])),
            _ => rest.len(),
        };
        let rest = rest.get(2..).unwrap_or_default();
        let (datagram, after) = rest.split_at(len.min(rest.len()));
        data = after;
        Some((sender, datagram))
    })
}

/// Datagrams at the sample switch ([`sample::switch`]): each is counted in,
/// each drop under its reason, and what leaves is well-formed.
pub fn switch(data: &[u8]) {
    let mut sw = sample::switch();
    let senders = sample::senders();
    let (mut received, mut drops) = (0u64, [0u64; 16]);
    let mut out = Vec::new();
    for (sender, datagram) in records(data) {
        let from = addr(senders[usize::from(sender) % senders.len()]);
        out.clear();
        let action = sw.process(datagram, from, &mut out);
        check_output(action, datagram, &out, sample::K);
        received += 1;
        if let Action::Drop(reason) = action {
            drops[reason as usize] += 1;
        }
    }
    assert_eq!(sw.counters().rx_packets, received);
    assert_eq!(sw.counters().drops, drops, "drops by reason");
}

/// Lines of the emulator's control protocol, each handled as the control
/// endpoint would: the pools stay inside the switch and disjoint, and
/// every job installed at the end takes its worker 0's contribution and
/// answers with a well-formed packet.
pub fn control(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut state = State {
        switch: Switch::new(SwitchConfig {
            slots: 256,
            max_elements: 256,
            ..SwitchConfig::default()
        }),
        faults: FaultInjector::new(FaultConfig::default()),
        shaper: None,
        arbitration: Arbitration::default(),
    };
    let caller = Caller {
        conn: state.arbitration.open(),
        peer: addr(7000),
    };
    for line in text.lines().take(64) {
        if let Ok(request) = serde_json::from_str::<Request>(line) {
            let _ = handle(request, &mut state, caller, addr(47000));
            check_pools(&state.switch);
        }
    }
    let mut out = Vec::new();
    for job in state.switch.jobs() {
        let Some(&from) = job.spec.workers.first() else {
            continue;
        };
        let k = job.spec.elements;
        let repr = Repr {
            generation: job.spec.generation,
            ..Repr::contribution(job.spec.id, 0, 0, 0, k, 1)
        };
        let mut buf = vec![0; repr.buffer_len()];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        repr.emit(&mut p);
        payload::write_i32s(p.payload_mut(), &vec![1; usize::from(k)]);
        out.clear();
        let action = state.switch.process(&buf, from, &mut out);
        check_output(action, &buf, &out, k);
    }
}

/// The pool map covers the switch's slots in order, without overlaps.
fn check_pools(sw: &Switch) {
    let map = sw.pools();
    let mut at = 0u64;
    for r in &map.ranges {
        assert_eq!(
            u64::from(r.base),
            at,
            "pools overlap or leave a gap: {map:?}"
        );
        at += u64::from(r.size);
    }
    assert_eq!(at, u64::from(map.slots), "pools past the switch: {map:?}");
}

/// A C API configuration string: parsed into settings, a backend and an
/// agent configuration (short of registering with a controller, which
/// would reach the network), or refused with a message.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let settings = match inagg_capi::config::parse(text) {
        Ok(s) => s,
        Err(why) => return assert!(!why.is_empty(), "a refusal without a reason"),
    };
    if let Err(why) = settings.backend() {
        assert!(!why.is_empty(), "a backend refused without a reason");
    }
    match settings.controller() {
        Ok(None) => {
            if let Err(e) = settings.agent_config() {
                assert!(!e.to_string().is_empty(), "{e:?} without a reason");
            }
        }
        Ok(Some(_)) => {}
        Err(why) => assert!(!why.is_empty(), "a controller refused without a reason"),
    }
}
