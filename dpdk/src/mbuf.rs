//! Owned mbufs and receive batches.

use std::ptr::NonNull;

use crate::error::Error;
use crate::mempool::Mempool;
use crate::sys;

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
    pub fn data(&self) -> &[u8] {
        // SAFETY: mtod points at data_len initialised bytes owned by the mbuf.
        unsafe {
            let p = sys::inagg_pktmbuf_mtod(self.0.as_ptr());
            std::slice::from_raw_parts(
                p as *const u8,
                usize::from(sys::inagg_pktmbuf_data_len(self.0.as_ptr())),
            )
        }
    }

    /// The packet bytes, writable, when this is the only reference to the
    /// buffer (a transmit queue may still hold a shared one).
    pub fn data_mut(&mut self) -> Option<&mut [u8]> {
        if self.refcnt() != 1 {
            return None;
        }
        // SAFETY: sole reference, so no one else reads the bytes.
        unsafe {
            let p = sys::inagg_pktmbuf_mtod(self.0.as_ptr());
            Some(std::slice::from_raw_parts_mut(
                p as *mut u8,
                usize::from(sys::inagg_pktmbuf_data_len(self.0.as_ptr())),
            ))
        }
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
    pub fn refcnt(&self) -> u16 {
        // SAFETY: valid mbuf.
        unsafe { sys::inagg_mbuf_refcnt_read(self.0.as_ptr()) }
    }

    /// A second reference to the same buffer (reference count + 1): hand
    /// one to a transmit queue and keep the other for retransmission. While
    /// both exist neither can be written ([`Mbuf::data_mut`] says `None`).
    pub fn share(&self) -> Mbuf {
        // SAFETY: valid mbuf; the count is atomic.
        unsafe { sys::inagg_mbuf_refcnt_update(self.0.as_ptr(), 1) };
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
    pub fn data(&self, i: usize) -> &[u8] {
        assert!(i < self.len, "packet {i} of a batch of {}", self.len);
        let m = self.ptrs[i];
        if m.is_null() {
            return &[];
        }
        // SAFETY: non-null entries below len are valid mbufs we own.
        unsafe {
            let p = sys::inagg_pktmbuf_mtod(m);
            std::slice::from_raw_parts(p as *const u8, usize::from(sys::inagg_pktmbuf_data_len(m)))
        }
    }

    /// Packet `i`'s bytes, writable (a received mbuf is ours alone).
    pub fn data_mut(&mut self, i: usize) -> &mut [u8] {
        assert!(i < self.len, "packet {i} of a batch of {}", self.len);
        let m = self.ptrs[i];
        if m.is_null() {
            return &mut [];
        }
        // SAFETY: as in `data`; &mut self makes the access exclusive.
        unsafe {
            let p = sys::inagg_pktmbuf_mtod(m);
            std::slice::from_raw_parts_mut(
                p as *mut u8,
                usize::from(sys::inagg_pktmbuf_data_len(m)),
            )
        }
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
