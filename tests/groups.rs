//! Multicast groups made by hand, end to end: real UDP sockets on
//! loopback, the emulator's group table, copies lost on the way out.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use inagg_emu::FaultConfig;
use inagg_host_agent::group::GroupSocket;
use inagg_switch_api::counters::DropReason;
use inagg_switch_api::GroupSpec;
use inagg_switch_control::target::Target;
use inagg_switch_control::EmuTarget;
use inagg_testbed::local::LocalCluster;

const SENT: u32 = 200;

fn sockets(data: SocketAddr, group: u16, n: u16) -> Vec<GroupSocket> {
    (0..n)
        .map(|m| GroupSocket::bind("127.0.0.1:0".parse().unwrap(), data, group, m).unwrap())
        .collect()
}

fn values(member: u16, id: u32) -> Vec<i32> {
    vec![id as i32, -(id as i32), i32::from(member), 0x1234_5678]
}

/// Everything a socket receives until the group goes quiet.
fn drain(s: &mut GroupSocket) -> Vec<(u16, u32, Vec<i32>)> {
    let mut got = Vec::new();
    while let Some(d) = s.recv(Duration::from_millis(500)).unwrap() {
        got.push((d.sender, d.packet_id, d.values));
    }
    got
}

#[test]
fn group_datagrams_reach_every_other_member_exactly_or_are_counted_lost() {
    let cluster = LocalCluster::start(FaultConfig {
        drop_egress: 0.1,
        seed: 7,
        ..FaultConfig::default()
    })
    .unwrap();
    let data = cluster.emu.data_addr();
    let mut t = EmuTarget::connect(cluster.control_addr()).unwrap();
    let mut members = sockets(data, 4, 4);
    let spec = GroupSpec {
        id: 4,
        members: members.iter().map(|s| s.local_addr().unwrap()).collect(),
    };
    t.create_group(&spec).unwrap();

    // Every member drains its socket while members 0 and 2 send (pacing a
    // little, as a sender on a real network would).
    let senders = [0u16, 2].map(|m| (m, members[usize::from(m)].try_clone().unwrap()));
    let receivers: Vec<_> = members
        .drain(..)
        .map(|mut s| std::thread::spawn(move || drain(&mut s)))
        .collect();
    for id in 0..SENT {
        for (m, s) in &senders {
            s.send(&values(*m, id), id, 3).unwrap();
        }
        if id % 20 == 19 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let mut received = 0u64;
    for (me, r) in receivers.into_iter().enumerate() {
        let got = r.join().unwrap();
        let mut seen: BTreeMap<(u16, u32), usize> = BTreeMap::new();
        for (sender, id, v) in &got {
            assert_ne!(usize::from(*sender), me, "a sender gets no copy of its own");
            assert!([0, 2].contains(sender), "from a sender: {sender}");
            assert_eq!(*v, values(*sender, *id), "payload unchanged");
            *seen.entry((*sender, *id)).or_default() += 1;
        }
        assert!(seen.values().all(|&n| n == 1), "no copy twice");
        let senders = if me == 0 || me == 2 { 1 } else { 2 };
        // 10% loss: well over half arrives, some does not.
        assert!(
            got.len() > senders * SENT as usize / 2,
            "member {me}: {}",
            got.len()
        );
        received += got.len() as u64;
    }

    let groups = t.groups().unwrap();
    assert_eq!(groups.len(), 1);
    assert_eq!(
        (groups[0].packets, groups[0].copies),
        (2 * u64::from(SENT), 6 * u64::from(SENT))
    );
    let c = t.counters().unwrap();
    let lost = c.dropped(DropReason::InjectedEgress);
    assert!(lost > 0, "the fault injector dropped some copies");
    assert_eq!(
        received + lost,
        6 * u64::from(SENT),
        "every copy arrived or is counted lost"
    );
}

#[test]
fn strangers_and_unknown_groups_are_counted_drops() {
    let cluster = LocalCluster::start(FaultConfig::default()).unwrap();
    let data = cluster.emu.data_addr();
    let mut t = EmuTarget::connect(cluster.control_addr()).unwrap();
    let mut members = sockets(data, 6, 2);
    t.create_group(&GroupSpec {
        id: 6,
        members: members.iter().map(|s| s.local_addr().unwrap()).collect(),
    })
    .unwrap();
    // Claims to be member 1 from another socket; a group that does not exist.
    let stranger = sockets(data, 6, 2).pop().unwrap();
    stranger.send(&[1, 2], 1, 0).unwrap();
    let lost = GroupSocket::bind("127.0.0.1:0".parse().unwrap(), data, 99, 0).unwrap();
    lost.send(&[1, 2], 1, 0).unwrap();
    members[1].send(&[5], 9, 0).unwrap();
    let got = members[0].recv(Duration::from_secs(5)).unwrap().unwrap();
    assert_eq!((got.sender, got.packet_id, got.values), (1, 9, vec![5]));
    assert!(members[1]
        .recv(Duration::from_millis(200))
        .unwrap()
        .is_none());
    let c = t.counters().unwrap();
    assert_eq!(c.dropped(DropReason::UnknownWorker), 1);
    assert_eq!(c.dropped(DropReason::UnknownGroup), 1);

    // Refusals say what is wrong.
    let err = t
        .create_group(&GroupSpec {
            id: 6,
            members: vec!["127.0.0.1:9".parse().unwrap()],
        })
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "multicast group 6 is in use (made by hand); pick another id or delete it first"
    );
    t.delete_group(6).unwrap();
    assert!(t.groups().unwrap().is_empty());
    let err = t.delete_group(6).unwrap_err();
    assert_eq!(err.to_string(), "no multicast group 6 is installed");
}
