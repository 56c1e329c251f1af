//! Packet-buffer pools.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::eal::Eal;
use crate::error::{from_errno, Error};
use crate::sys;

/// A pool of mbufs (`rte_pktmbuf_pool_create`). Pools live until the
/// process exits: a port's receive ring keeps mbufs of its pool for as long
/// as the port exists, so freeing one safely would need every port stopped
/// first, and nothing in inagg needs that.
#[derive(Debug)]
pub struct Mempool {
    ptr: NonNull<sys::rte_mempool>,
    data_room: u16,
}

// SAFETY: DPDK's default mempool ops ("ring_mp_mc") are multi-producer,
// multi-consumer: any thread may allocate from and free to the pool.
unsafe impl Send for Mempool {}
// SAFETY: as above; the pool has no thread-affine state visible to us.
unsafe impl Sync for Mempool {}

/// Headroom DPDK reserves in front of each mbuf's data (RTE_PKTMBUF_HEADROOM).
pub const HEADROOM: u16 = 128;

impl Mempool {
    /// A pool of `count` mbufs with `data_room` bytes of packet space each
    /// (headroom included), and a per-core cache of `cache` mbufs.
    pub fn new(
        _eal: Eal,
        count: u32,
        cache: u32,
        data_room: u16,
    ) -> Result<&'static Mempool, Error> {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!("inagg_pool{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let cname = CString::new(name.clone()).expect("no NUL");
        // SAFETY: the EAL is initialised (we hold an Eal); the name is a
        // valid C string that DPDK copies.
        let ptr = unsafe {
            sys::rte_pktmbuf_pool_create(
                cname.as_ptr(),
                count,
                cache,
                0,
                data_room,
                sys::rte_socket_id() as i32,
            )
        };
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            from_errno(format!(
                "rte_pktmbuf_pool_create({name}, {count} mbufs of {data_room} bytes)"
            ))
        })?;
        Ok(Box::leak(Box::new(Mempool { ptr, data_room })))
    }

    /// The raw pool, for the mbuf and port calls.
    pub(crate) fn as_ptr(&self) -> *mut sys::rte_mempool {
        self.ptr.as_ptr()
    }

    /// Bytes of packet data an mbuf of this pool holds (after the headroom).
    pub fn data_capacity(&self) -> usize {
        usize::from(self.data_room.saturating_sub(HEADROOM))
    }

    /// Mbufs currently free in the pool.
    pub fn available(&self) -> u32 {
        // SAFETY: valid pool pointer.
        unsafe { sys::rte_mempool_avail_count(self.as_ptr()) }
    }
}
