//! Owned mbufs and receive batches.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use crate::error::Error;
use crate::mempool::Mempool;
use crate::sys;

/// Fields of `struct rte_mbuf` read on every packet, inline rather than
/// through the shim: a call per field cost more than the work done on the
/// packet. shim.c asserts these offsets at build time against the
/// installed headers.
mod field {
    use super::*;

    const BUF_ADDR: usize = 0;
    const DATA_OFF: usize = 16;
    const REFCNT: usize = 18;
    const DATA_LEN: usize = 40;

    /// `rte_pktmbuf_mtod`: the first data byte.
    ///
    /// # Safety
    /// `m` is a valid mbuf.
    #[inline]
    pub unsafe fn mtod(m: *const sys::rte_mbuf) -> *mut u8 {
        let base = m.cast::<u8>();
        let buf = base.add(BUF_ADDR).cast::<*mut u8>().read();
        let off = base.add(DATA_OFF).cast::<u16>().read();
        buf.add(usize::from(off))
    }

    /// `rte_pktmbuf_data_len`.
    ///
    /// # Safety
    /// `m` is a valid mbuf.
    #[inline]
    pub unsafe fn data_len(m: *const sys::rte_mbuf) -> usize {
        usize::from(m.cast::<u8>().add(DATA_LEN).cast::<u16>().read())
    }

    /// The reference count, atomic as DPDK treats it.
    ///
    /// # Safety
    /// `m` is a valid mbuf that outlives the reference.
    #[inline]
    pub unsafe fn refcnt<'a>(m: *mut sys::rte_mbuf) -> &'a AtomicU16 {
        AtomicU16::from_ptr(m.cast::<u8>().add(REFCNT).cast::<u16>())
    }

    /// The packet bytes of mbuf `m`.
    ///
    /// # Safety
    /// `m` is a valid mbuf whose bytes are not written for `'a`.
    #[inline]
    pub unsafe fn bytes<'a>(m: *const sys::rte_mbuf) -> &'a [u8] {
        std::slice::from_raw_parts(mtod(m), data_len(m))
    }

    /// The packet bytes of mbuf `m`, writable.
    ///
    /// # Safety
    /// `m` is a valid mbuf nobody else reads or writes for `'a`.
    #[inline]
    pub unsafe fn bytes_mut<'a>(m: *mut sys::rte_mbuf) -> &'a mut [u8] {
        std::slice::from_raw_parts_mut(mtod(m), data_len(m))
    }
}

/// One single-segment packet buffer, owned: dropping it frees it (or drops
/// this reference to it, see [`Mbuf::share`]).
#[derive(Debug)]
#[repr(transparent)]
pub struct Mbuf(NonNull<sys::rte_mbuf>);

// SAFETY: an mbuf may move between threads; ownership is exclusive here.
unsafe impl Send for Mbuf {}

impl Mbuf {
    /// A fresh, empty mbuf from `pool`.
    pub fn alloc(pool: &Mempool) -> Result<Mbuf, Error> {
        // SAFETY: valid pool pointer.
        let m = unsafe { sys::inagg_pktmbuf_alloc(pool.as_ptr()) };
        NonNull::new(m).map(Mbuf).ok_or_else(|| {
            Error::Invalid(format!(
                "mbuf pool exhausted ({} free): more packets in flight than the pool holds",
                pool.available()
            ))
        })
    }

    /// Takes ownership of a raw mbuf pointer.
    ///
    /// # Safety
    /// `m` must be a valid mbuf that nobody else will free.
    pub unsafe fn from_raw(m: *mut sys::rte_mbuf) -> Option<Mbuf> {
        NonNull::new(m).map(Mbuf)
    }

    /// Gives up ownership (for example to a transmit queue).
    pub fn into_raw(self) -> *mut sys::rte_mbuf {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }

    /// The packet bytes (first segment).
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: mtod points at data_len initialised bytes owned by the
        // mbuf; a shared copy is only read (see `share`).
        unsafe { field::bytes(self.0.as_ptr()) }
    }

    /// The packet bytes, writable, when this is the only reference to the
    /// buffer (a transmit queue may still hold a shared one).
    #[inline]
    pub fn data_mut(&mut self) -> Option<&mut [u8]> {
        if self.refcnt() != 1 {
            return None;
        }
        // SAFETY: sole reference, so no one else reads the bytes.
        Some(unsafe { field::bytes_mut(self.0.as_ptr()) })
    }

    /// Grows the packet by `len` bytes at the tail and returns them (zeroed
    /// is not promised: write every byte).
    pub fn append(&mut self, len: usize) -> Result<&mut [u8], Error> {
        let tail = self.tailroom();
        let len16 = u16::try_from(len)
            .ok()
            .filter(|&l| usize::from(l) <= tail)
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{len} bytes do not fit the mbuf ({tail} bytes of tailroom)"
                ))
            })?;
        // SAFETY: we checked the tailroom; append returns a pointer to len
        // bytes inside the buffer.
        unsafe {
            let p = sys::inagg_pktmbuf_append(self.0.as_ptr(), len16);
            Ok(std::slice::from_raw_parts_mut(p as *mut u8, len))
        }
    }

    /// Bytes that can still be appended.
    pub fn tailroom(&self) -> usize {
        // SAFETY: valid mbuf.
        usize::from(unsafe { sys::inagg_pktmbuf_tailroom(self.0.as_ptr()) })
    }

    /// Segments in the packet; inagg sends and accepts only one.
    pub fn segments(&self) -> u16 {
        // SAFETY: valid mbuf.
        unsafe { sys::inagg_mbuf_nb_segs(self.0.as_ptr()) }
    }

    /// References to the buffer.
    #[inline]
    pub fn refcnt(&self) -> u16 {
        // SAFETY: valid mbuf (`rte_mbuf_refcnt_read`: a relaxed load).
        unsafe { field::refcnt(self.0.as_ptr()) }.load(Ordering::Relaxed)
    }

    /// A second reference to the same buffer (reference count + 1): hand
    /// one to a transmit queue and keep the other for retransmission. While
    /// both exist neither can be written ([`Mbuf::data_mut`] says `None`).
    #[inline]
    pub fn share(&self) -> Mbuf {
        // SAFETY: valid mbuf. As `rte_mbuf_refcnt_update` does: the sole
        // holder may set the count without an atomic add (nobody else can
        // touch it), otherwise the add is atomic.
        let count = unsafe { field::refcnt(self.0.as_ptr()) };
        if count.load(Ordering::Relaxed) == 1 {
            count.store(2, Ordering::Relaxed);
        } else {
            count.fetch_add(1, Ordering::AcqRel);
        }
        Mbuf(self.0)
    }
}

impl Drop for Mbuf {
    fn drop(&mut self) {
        // SAFETY: we own one reference.
        unsafe { sys::inagg_pktmbuf_free(self.0.as_ptr()) }
    }
}

/// Most packets one receive burst returns.
pub const BURST: usize = 64;

/// The mbufs of one receive burst; dropping or clearing frees them.
#[derive(Debug)]
pub struct RxBatch {
    ptrs: [*mut sys::rte_mbuf; BURST],
    len: usize,
}

// SAFETY: the batch exclusively owns its mbufs.
unsafe impl Send for RxBatch {}

impl Default for RxBatch {
    fn default() -> Self {
        RxBatch {
            ptrs: [std::ptr::null_mut(); BURST],
            len: 0,
        }
    }
}

impl RxBatch {
    /// An empty batch.
    pub fn new() -> RxBatch {
        RxBatch::default()
    }

    /// Packets in the batch.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the batch is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Packet `i`'s bytes (first segment).
    #[inline]
    pub fn data(&self, i: usize) -> &[u8] {
        assert!(i < self.len, "packet {i} of a batch of {}", self.len);
        let m = self.ptrs[i];
        if m.is_null() {
            return &[];
        }
        // SAFETY: non-null entries below len are valid mbufs we own.
        unsafe { field::bytes(m) }
    }

    /// Packet `i`'s bytes, writable (a received mbuf is ours alone).
    #[inline]
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.len, "packet {i} of a batch of {}", self.len);
        let m = self.ptrs[i];
        if m.is_null() {
            return &mut [];
        }
        // SAFETY: as in `data`; &mut self makes the access exclusive.
        unsafe { field::bytes_mut(m) }
    }

    /// Takes packet `i` out of the batch (its entry is left empty and is
    /// not freed by [`RxBatch::clear`]).
    pub fn take(&mut self, i: usize) -> Option<Mbuf> {
        if i >= self.len {
            return None;
        }
        let m = std::mem::replace(&mut self.ptrs[i], std::ptr::null_mut());
        // SAFETY: the entry was a valid mbuf we owned (or null, taken before).
        unsafe { Mbuf::from_raw(m) }
    }

    /// Frees packets `which` now, in one bulk return to the pool, leaving
    /// their entries empty (the rest stay until [`RxBatch::clear`]).
    pub fn free_some(&mut self, which: &[u16]) {
        let mut ptrs = [std::ptr::null_mut(); BURST];
        let mut n = 0;
        for &i in which {
            let i = usize::from(i);
            if i < self.len && !self.ptrs[i].is_null() {
                ptrs[n] = std::mem::replace(&mut self.ptrs[i], std::ptr::null_mut());
                n += 1;
            }
        }
        // SAFETY: each pointer was a distinct mbuf we owned, now removed
        // from the batch so it cannot be freed twice.
        unsafe { sys::inagg_pktmbuf_free_bulk(ptrs.as_mut_ptr(), n as u32) };
    }

    /// Frees every packet and empties the batch (in one bulk return to the
    /// pool: per-mbuf frees cost more than the receive itself).
    pub fn clear(&mut self) {
        let live = &mut self.ptrs[..self.len];
        // SAFETY: rte_pktmbuf_free_bulk skips null entries (taken packets);
        // the others are mbufs we own.
        unsafe { sys::inagg_pktmbuf_free_bulk(live.as_mut_ptr(), live.len() as u32) };
        live.fill(std::ptr::null_mut());
        self.len = 0;
    }

    pub(crate) fn fill(&mut self, f: impl FnOnce(*mut *mut sys::rte_mbuf, u16) -> u16) {
        self.clear();
        self.len = usize::from(f(self.ptrs.as_mut_ptr(), BURST as u16)).min(BURST);
    }
}

impl Drop for RxBatch {
    fn drop(&mut self) {
        self.clear();
    }
}
