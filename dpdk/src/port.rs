//! Ethernet ports and their queues.

use std::ffi::{CStr, CString};

use crate::eal::Eal;
use crate::error::{check, Error};
use crate::mbuf::{Mbuf, RxBatch};
use crate::mempool::Mempool;
use crate::sys;

/// How to set a port up.
#[derive(Debug, Clone)]
pub struct PortConfig {
    /// Receive queues (one per polling thread).
    pub rx_queues: u16,
    /// Transmit queues (one per sending thread).
    pub tx_queues: u16,
    /// Descriptors per receive queue.
    pub rx_desc: u16,
    /// Descriptors per transmit queue.
    pub tx_desc: u16,
    /// Set the MTU (bytes of IP packet) when given.
    pub mtu: Option<u16>,
    /// Accept frames for any destination MAC.
    pub promiscuous: bool,
}

impl Default for PortConfig {
    fn default() -> Self {
        PortConfig {
            rx_queues: 1,
            tx_queues: 1,
            rx_desc: 1024,
            tx_desc: 1024,
            mtu: None,
            promiscuous: true,
        }
    }
}

/// Packet and error counts of a port (`rte_eth_stats`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    pub rx_packets: u64,
    pub tx_packets: u64,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Packets the hardware (or vdev) dropped: receive queue full.
    pub rx_missed: u64,
    pub rx_errors: u64,
    pub tx_errors: u64,
    /// Receive mbuf allocation failures.
    pub rx_nombuf: u64,
}

/// A started port.
#[derive(Debug, Clone)]
pub struct Port {
    id: u16,
    name: String,
}

/// One receive queue of a started port; poll it from one thread only.
#[derive(Debug)]
pub struct RxQueue {
    port: u16,
    queue: u16,
}

/// One transmit queue of a started port; use it from one thread only.
#[derive(Debug)]
pub struct TxQueue {
    port: u16,
    queue: u16,
}

impl Port {
    /// Ports DPDK has (from --vdev and probed devices), in id order.
    pub fn names(_eal: Eal) -> Vec<String> {
        // SAFETY: EAL up.
        let count = unsafe { sys::rte_eth_dev_count_avail() };
        let mut names = Vec::new();
        for id in 0..u16::MAX {
            if names.len() >= usize::from(count) {
                break;
            }
            // SAFETY: any id may be asked about.
            if unsafe { sys::rte_eth_dev_is_valid_port(id) } == 1 {
                names.push(port_name(id).unwrap_or_else(|| id.to_string()));
            }
        }
        names
    }

    /// Configures and starts the port named `name` (for example
    /// `net_af_packet0`) or with that numeric id, with queues fed from
    /// `pool`, and returns it with its queues.
    pub fn start(
        eal: Eal,
        name: &str,
        config: &PortConfig,
        pool: &Mempool,
    ) -> Result<(Port, Vec<RxQueue>, Vec<TxQueue>), Error> {
        let id = find(eal, name)?;
        let port = Port {
            id,
            name: port_name(id).unwrap_or_else(|| name.to_owned()),
        };
        port.configure(config, pool)?;
        let rx = (0..config.rx_queues)
            .map(|queue| RxQueue { port: id, queue })
            .collect();
        let tx = (0..config.tx_queues)
            .map(|queue| TxQueue { port: id, queue })
            .collect();
        Ok((port, rx, tx))
    }

    /// Checks that the port named `name` (or with that id) has the queues
    /// `config` asks for, before anything is allocated for them.
    pub fn check_queues(eal: Eal, name: &str, config: &PortConfig) -> Result<(), Error> {
        let id = find(eal, name)?;
        let port = Port {
            id,
            name: port_name(id).unwrap_or_else(|| name.to_owned()),
        };
        port.check_queue_counts(config)
    }

    fn check_queue_counts(&self, config: &PortConfig) -> Result<(), Error> {
        let info = self.info()?;
        if config.rx_queues > info.max_rx_queues || config.tx_queues > info.max_tx_queues {
            return Err(Error::Invalid(format!(
                "port {} has at most {} receive and {} transmit queues; asked for {} and {} \
                 (for af_packet, add qpairs=N to the --vdev)",
                self.name,
                info.max_rx_queues,
                info.max_tx_queues,
                config.rx_queues,
                config.tx_queues
            )));
        }
        Ok(())
    }

    fn configure(&self, config: &PortConfig, pool: &Mempool) -> Result<(), Error> {
        let (id, name) = (self.id, &self.name);
        self.check_queue_counts(config)?;
        // An all-zero rte_eth_conf is DPDK's "no offloads, no RSS" default.
        let conf = sys::rte_eth_conf::default();
        // SAFETY: the port id is valid (found above); conf outlives the call.
        let ret =
            unsafe { sys::rte_eth_dev_configure(id, config.rx_queues, config.tx_queues, &conf) };
        check(|| format!("rte_eth_dev_configure({name})"), ret)?;
        if let Some(mtu) = config.mtu {
            // SAFETY: valid port.
            let ret = unsafe { sys::rte_eth_dev_set_mtu(id, mtu) };
            check(|| format!("rte_eth_dev_set_mtu({name}, {mtu})"), ret)?;
        }
        // SAFETY: valid port.
        let socket = unsafe { sys::rte_eth_dev_socket_id(id) }.max(0) as u32;
        for q in 0..config.rx_queues {
            // SAFETY: valid port and queue index; null rx_conf = defaults;
            // the pool outlives the port (pools are never freed).
            let ret = unsafe {
                sys::rte_eth_rx_queue_setup(
                    id,
                    q,
                    config.rx_desc,
                    socket,
                    std::ptr::null(),
                    pool.as_ptr(),
                )
            };
            check(|| format!("rte_eth_rx_queue_setup({name}, queue {q})"), ret)?;
        }
        for q in 0..config.tx_queues {
            // SAFETY: as above.
            let ret = unsafe {
                sys::rte_eth_tx_queue_setup(id, q, config.tx_desc, socket, std::ptr::null())
            };
            check(|| format!("rte_eth_tx_queue_setup({name}, queue {q})"), ret)?;
        }
        // SAFETY: configured port.
        check(|| format!("rte_eth_dev_start({name})"), unsafe {
            sys::rte_eth_dev_start(id)
        })?;
        if config.promiscuous {
            // Not every vdev supports it (net_null, net_ring say ENOTSUP);
            // those accept every frame anyway.
            // SAFETY: started port.
            let _ = unsafe { sys::rte_eth_promiscuous_enable(id) };
        }
        Ok(())
    }

    fn info(&self) -> Result<sys::rte_eth_dev_info, Error> {
        let mut info = sys::rte_eth_dev_info::default();
        // SAFETY: valid port; info is a plain struct DPDK fills.
        let ret = unsafe { sys::rte_eth_dev_info_get(self.id, &mut info) };
        check(|| format!("rte_eth_dev_info_get({})", self.name), ret)?;
        Ok(info)
    }

    /// DPDK's port id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// DPDK's port name (e.g. `net_af_packet0`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The port's MAC address.
    pub fn mac(&self) -> Result<[u8; 6], Error> {
        let mut addr = sys::rte_ether_addr::default();
        // SAFETY: valid port.
        let ret = unsafe { sys::rte_eth_macaddr_get(self.id, &mut addr) };
        check(|| format!("rte_eth_macaddr_get({})", self.name), ret)?;
        Ok(addr.addr_bytes)
    }

    /// The port's MTU (largest IP packet it sends).
    pub fn mtu(&self) -> Result<u16, Error> {
        let mut mtu = 0u16;
        // SAFETY: valid port.
        let ret = unsafe { sys::rte_eth_dev_get_mtu(self.id, &mut mtu) };
        check(|| format!("rte_eth_dev_get_mtu({})", self.name), ret)?;
        Ok(mtu)
    }

    /// The port's counters.
    pub fn stats(&self) -> Result<PortStats, Error> {
        let mut s = sys::rte_eth_stats::default();
        // SAFETY: valid port.
        let ret = unsafe { sys::rte_eth_stats_get(self.id, &mut s) };
        check(|| format!("rte_eth_stats_get({})", self.name), ret)?;
        Ok(PortStats {
            rx_packets: s.ipackets,
            tx_packets: s.opackets,
            rx_bytes: s.ibytes,
            tx_bytes: s.obytes,
            rx_missed: s.imissed,
            rx_errors: s.ierrors,
            tx_errors: s.oerrors,
            rx_nombuf: s.rx_nombuf,
        })
    }
}

fn port_name(id: u16) -> Option<String> {
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: buf has room for RTE_ETH_NAME_MAX_LEN (64) bytes.
    let ret = unsafe { sys::rte_eth_dev_get_name_by_port(id, buf.as_mut_ptr()) };
    // SAFETY: DPDK wrote a NUL-terminated string.
    (ret == 0).then(|| {
        unsafe { CStr::from_ptr(buf.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    })
}

/// A port id from a name or a decimal id.
fn find(eal: Eal, name: &str) -> Result<u16, Error> {
    if let Ok(id) = name.parse::<u16>() {
        // SAFETY: any id may be asked about.
        if unsafe { sys::rte_eth_dev_is_valid_port(id) } == 1 {
            return Ok(id);
        }
    }
    let cname = CString::new(name).map_err(|_| Error::NoPort(name.to_owned()))?;
    let mut id = 0u16;
    // SAFETY: valid C string and out pointer.
    let ret = unsafe { sys::rte_eth_dev_get_port_by_name(cname.as_ptr(), &mut id) };
    if ret == 0 {
        Ok(id)
    } else {
        let have = Port::names(eal);
        Err(Error::NoPort(
            format!(
                "{name}` (ports: {}",
                if have.is_empty() {
                    "none".to_owned()
                } else {
                    have.join(", ")
                }
            ) + "`",
        ))
    }
}

impl RxQueue {
    /// Receives up to a burst into `batch` (freeing what it held); returns
    /// the count. Never blocks.
    pub fn burst(&mut self, batch: &mut RxBatch) -> usize {
        let (port, queue) = (self.port, self.queue);
        // SAFETY: the queue is set up and polled only through this handle;
        // DPDK writes at most n pointers.
        batch.fill(|ptrs, n| unsafe { sys::inagg_rx_burst(port, queue, ptrs, n) });
        batch.len()
    }
}

impl TxQueue {
    /// Hands as many of `mbufs` (from the front) to the queue as it takes;
    /// they leave the vector. Returns how many went.
    pub fn burst(&mut self, mbufs: &mut Vec<Mbuf>) -> usize {
        let n = u16::try_from(mbufs.len()).unwrap_or(u16::MAX);
        // SAFETY: Mbuf is a transparent wrapper of a valid mbuf pointer, so
        // the vector's buffer is an array of rte_mbuf pointers. DPDK takes
        // ownership of the first `sent`.
        let sent = unsafe {
            sys::inagg_tx_burst(
                self.port,
                self.queue,
                mbufs.as_mut_ptr() as *mut *mut sys::rte_mbuf,
                n,
            )
        };
        let sent = usize::from(sent);
        for m in mbufs.drain(..sent) {
            std::mem::forget(m);
        }
        sent
    }

    /// Sends all of `mbufs`, retrying a full queue up to `tries` times;
    /// frees and counts what still did not fit. Returns (sent, dropped).
    pub fn send_all(&mut self, mbufs: &mut Vec<Mbuf>, tries: usize) -> (usize, usize) {
        let mut sent = 0;
        for _ in 0..tries.max(1) {
            sent += self.burst(mbufs);
            if mbufs.is_empty() {
                break;
            }
            std::hint::spin_loop();
        }
        let dropped = mbufs.len();
        mbufs.clear();
        (sent, dropped)
    }
}
