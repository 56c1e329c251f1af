//! The bindings against real DPDK virtual devices (no NIC needed): frames
//! through net_ring (which loops a port's transmit queue to its receive
//! queue) and net_null, mbuf sharing, and the errors for unknown ports and
//! impossible queue counts. One EAL per process: every test here shares it.

use inagg_dpdk::{Eal, Error, Mbuf, Mempool, Port, PortConfig, RxBatch};

const EAL: &str = "--no-huge -m 256 --no-pci --no-shconf --log-level=lib.eal:error \
                   --vdev net_ring0 --vdev net_null0";

fn eal() -> Eal {
    Eal::init_str(EAL).expect("EAL with net_ring0 and net_null0")
}

fn pool() -> &'static Mempool {
    use std::sync::OnceLock;
    static POOL: OnceLock<&'static Mempool> = OnceLock::new();
    POOL.get_or_init(|| Mempool::new(eal(), 4095, 64, 2048 + 128).expect("pool"))
}

fn frame(i: u8, len: usize) -> Mbuf {
    frame_from(pool(), i, len)
}

fn frame_from(pool: &Mempool, i: u8, len: usize) -> Mbuf {
    let mut m = Mbuf::alloc(pool).expect("mbuf");
    let data = m.append(len).expect("room");
    for (j, b) in data.iter_mut().enumerate() {
        *b = i.wrapping_add(j as u8);
    }
    m
}

#[test]
fn frames_sent_on_net_ring_come_back_byte_for_byte() {
    let (port, mut rx, mut tx) =
        Port::start(eal(), "net_ring0", &PortConfig::default(), pool()).expect("start net_ring0");
    assert_eq!(port.name(), "net_ring0");
    let mut out: Vec<Mbuf> = (0..32).map(|i| frame(i, 60 + usize::from(i))).collect();
    let (sent, dropped) = tx[0].send_all(&mut out, 100);
    assert_eq!((sent, dropped), (32, 0));
    let mut batch = RxBatch::new();
    let mut got = Vec::new();
    for _ in 0..1000 {
        rx[0].burst(&mut batch);
        got.extend((0..batch.len()).map(|i| batch.data(i).to_vec()));
        if got.len() == 32 {
            break;
        }
    }
    assert_eq!(got.len(), 32);
    for (i, data) in got.iter().enumerate() {
        assert_eq!(data.len(), 60 + i);
        assert!(data
            .iter()
            .enumerate()
            .all(|(j, &b)| b == (i as u8).wrapping_add(j as u8)));
    }
    let stats = port.stats().expect("stats");
    assert_eq!(stats.tx_packets, 32);
    assert_eq!(stats.rx_packets, 32);
}

#[test]
fn a_shared_mbuf_is_read_only_until_the_other_reference_goes() {
    // A pool of its own: the tests run in parallel.
    let own = Mempool::new(eal(), 63, 0, 256).expect("pool");
    let mut m = frame_from(own, 7, 100);
    let before = own.available();
    let copy = m.share();
    assert_eq!(m.refcnt(), 2);
    assert!(m.data_mut().is_none(), "a shared mbuf must not be writable");
    assert_eq!(copy.data(), m.data());
    drop(copy);
    assert_eq!(m.refcnt(), 1);
    assert!(m.data_mut().is_some());
    assert_eq!(own.available(), before, "sharing allocates nothing");
    drop(m);
    assert_eq!(own.available(), before + 1);
}

#[test]
fn net_null_swallows_bursts() {
    let (_port, _rx, mut tx) =
        Port::start(eal(), "net_null0", &PortConfig::default(), pool()).expect("start net_null0");
    let own = Mempool::new(eal(), 127, 0, 256).expect("pool");
    let mut out: Vec<Mbuf> = (0..64).map(|i| frame_from(own, i, 64)).collect();
    assert_eq!(own.available(), 127 - 64);
    let (sent, _) = tx[0].send_all(&mut out, 10);
    assert_eq!(sent, 64);
    assert_eq!(own.available(), 127, "net_null frees what it sends");
}

#[test]
fn unknown_ports_and_too_many_queues_are_clear_errors() {
    let err = Port::start(eal(), "net_nothing9", &PortConfig::default(), pool()).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::NoPort(_)), "{text}");
    assert!(
        text.contains("net_nothing9") && text.contains("net_ring0"),
        "{text}"
    );
    let config = PortConfig {
        rx_queues: 999,
        ..PortConfig::default()
    };
    let text = Port::start(eal(), "net_ring0", &config, pool())
        .unwrap_err()
        .to_string();
    assert!(text.contains("999"), "{text}");
}

#[test]
fn appending_past_the_tailroom_is_an_error() {
    let _ = eal();
    let mut m = Mbuf::alloc(pool()).expect("mbuf");
    let room = m.tailroom();
    let text = m.append(room + 1).unwrap_err().to_string();
    assert!(text.contains("tailroom"), "{text}");
    assert_eq!(m.append(room).expect("exactly fits").len(), room);
}

#[test]
fn a_second_init_with_other_arguments_is_refused() {
    let _ = eal();
    let err = Eal::init_str("--no-huge -m 64 --no-pci").unwrap_err();
    assert!(matches!(err, Error::EalAgain { .. }), "{err}");
    assert!(err.to_string().contains("one EAL per process"), "{err}");
}

#[test]
fn a_registered_thread_is_an_lcore_until_its_guard_drops() {
    let eal = eal();
    std::thread::spawn(move || {
        assert_eq!(eal.lcore_id(), None, "a thread of our own is no lcore");
        let guard = eal.register_thread().expect("a free lcore id");
        let id = eal.lcore_id().expect("registered: an lcore id");
        // Registering again keeps the id, and so does dropping that guard.
        drop(eal.register_thread().expect("already an lcore"));
        assert_eq!(eal.lcore_id(), Some(id));
        // A second thread gets an id of its own while this one holds it.
        let other = std::thread::spawn(move || {
            let _g = eal.register_thread().expect("another free lcore id");
            eal.lcore_id()
        })
        .join()
        .expect("second thread");
        assert!(other.is_some_and(|o| o != id), "{other:?} vs {id}");
        // Mbufs move through the registered thread as through any other.
        let m = frame(7, 64);
        assert_eq!(m.data()[1], 8);
        drop(m);
        drop(guard);
        assert_eq!(eal.lcore_id(), None, "unregistered");
    })
    .join()
    .expect("registered thread");
}
