//! Datagrams through shared memory between a worker and an emulator on the
//! same host: the data path without the kernel's copies.
//!
//! Over loopback UDP every byte a worker sends crosses the kernel twice on
//! its way to the emulator and twice on the way back, each crossing a copy,
//! a system call per batch and a socket buffer. Here a worker and the
//! emulator share one memory region per worker (a `memfd` the emulator
//! creates and hands over a Unix socket, so a worker can never make the
//! emulator map a file of its choosing) holding two single-producer,
//! single-consumer rings of datagram slots: *up* (the worker's datagrams
//! to the switch) and *down* (the switch's to the worker). The datagrams are
//! the UDP payloads the wire format defines, byte for byte; only the carrier
//! changes.
//!
//! Waking a sleeper: the worker sleeps on a futex on the down ring's head;
//! the emulator, which serves many rings and a UDP socket, sleeps in
//! `poll` on the channels' Unix sockets, and a worker that finds the
//! emulator's "sleeping" flag set writes one byte to its socket. Both sides
//! set their flag, then look at the ring once more, then sleep (and the
//! other side stores its head, then reads the flag), so no wake is lost.
//!
//! Trust: the emulator takes nothing in the region on trust. It reads the
//! up ring's head once per batch and drops the channel if it claims more
//! than the ring holds, and copies each datagram out of the region (its
//! length checked against the slot) before the switch reads it, so a worker
//! rewriting a slot under it changes nothing the switch has seen. The
//! worker trusts the region as it trusts the switch; its check lane and
//! session key judge every result either way.

use std::ffi::CString;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::mem::{size_of, zeroed};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// The first line of a region.
const MAGIC: u64 = 0x696e_6167_6773_686d; // "inaggshm"
/// The attach request's protocol name and version.
const HELLO: &str = "inagg-shm 1";
/// Bytes before the rings: the header, each shared word on a cache line
/// of its own.
const HEADER: usize = 4096;
/// Each slot starts with the datagram's length.
const LEN: usize = size_of::<u32>();
/// Largest slot (a 64 KB datagram and its length).
pub const MAX_SLOT: usize = 65_536 + LEN;
/// Fewest and most slots per ring.
pub const MIN_SLOTS: u32 = 8;
pub const MAX_SLOTS: u32 = 4096;
/// The most memory one channel may take (both rings).
pub const MAX_REGION: usize = 256 << 20;

/// Offsets of the shared words in the header.
const OFF_MAGIC: usize = 0;
const OFF_SLOT_SIZE: usize = 8;
const OFF_SLOTS: usize = 12;
const OFF_UP_HEAD: usize = 64;
const OFF_UP_TAIL: usize = 128;
const OFF_DOWN_HEAD: usize = 192;
const OFF_DOWN_TAIL: usize = 256;
const OFF_EMU_SLEEPS: usize = 320;
const OFF_WORKER_SLEEPS: usize = 384;

/// A channel's shape: slots per ring and bytes per slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub slot_size: usize,
    pub slots: u32,
}

impl Shape {
    /// The shape for datagrams of up to `datagram` bytes and `slots` per
    /// ring, checked against the bounds above.
    pub fn new(datagram: usize, slots: u32) -> io::Result<Shape> {
        let shape = Shape {
            slot_size: (datagram + LEN).next_multiple_of(64),
            slots,
        };
        shape.check()?;
        Ok(shape)
    }

    /// The most slots, up to `wanted` (rounded up to a power of two) and
    /// at least [`MIN_SLOTS`], whose rings for datagrams of up to
    /// `datagram` bytes take at most `bytes` together (a full ring refuses
    /// a datagram, a loss the protocol recovers, so a channel need not hold
    /// a whole pool of the largest datagrams).
    pub fn slots_within(datagram: usize, wanted: usize, bytes: usize) -> u32 {
        let slot = (datagram + LEN).next_multiple_of(64);
        let mut slots = wanted
            .next_power_of_two()
            .clamp(MIN_SLOTS as usize, MAX_SLOTS as usize);
        while slots > MIN_SLOTS as usize && HEADER + 2 * slots * slot > bytes {
            slots /= 2;
        }
        slots as u32
    }

    fn check(&self) -> io::Result<()> {
        let bad = |what: String| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        if self.slot_size <= LEN || self.slot_size > MAX_SLOT.next_multiple_of(64) {
            return bad(format!(
                "a shared-memory slot of {} bytes (1 to {} bytes of datagram)",
                self.slot_size,
                MAX_SLOT - LEN
            ));
        }
        if !self.slots.is_power_of_two() || !(MIN_SLOTS..=MAX_SLOTS).contains(&self.slots) {
            return bad(format!(
                "{} shared-memory slots per ring (a power of two from {MIN_SLOTS} to {MAX_SLOTS})",
                self.slots
            ));
        }
        if self.region_len() > MAX_REGION {
            return bad(format!(
                "a shared-memory channel of {} MiB (at most {} MiB)",
                self.region_len() >> 20,
                MAX_REGION >> 20
            ));
        }
        Ok(())
    }

    fn ring_len(&self) -> usize {
        self.slot_size * self.slots as usize
    }

    fn region_len(&self) -> usize {
        HEADER + 2 * self.ring_len()
    }
}

/// A mapped region.
#[derive(Debug)]
struct Region {
    base: NonNull<u8>,
    len: usize,
    shape: Shape,
    _fd: OwnedFd,
}

// SAFETY: the region is plain shared memory; every access to the words
// others write goes through atomics, and the slots are handed between
// threads by the rings' acquire/release protocol.
unsafe impl Send for Region {}

impl Region {
    /// A fresh region of `shape` (the emulator's side).
    fn create(shape: Shape) -> io::Result<Region> {
        let name = CString::new("inagg-shm").expect("no NUL");
        // SAFETY: a valid C string; the flags are memfd_create's.
        let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: memfd_create returned a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let len = shape.region_len();
        // SAFETY: a descriptor we own, a length that fits (<= MAX_REGION).
        if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let region = Region::map(fd, len, shape)?;
        region
            .word(OFF_SLOT_SIZE)
            .store(shape.slot_size as u32, Ordering::Relaxed);
        region.word(OFF_SLOTS).store(shape.slots, Ordering::Relaxed);
        // SAFETY: the header's magic word, in the mapping, aligned.
        unsafe { (region.base.as_ptr().add(OFF_MAGIC) as *mut u64).write(MAGIC) };
        Ok(region)
    }

    /// Maps `fd`, which must hold `len` bytes.
    fn map(fd: OwnedFd, len: usize, shape: Shape) -> io::Result<Region> {
        let mut st: libc::stat = unsafe { zeroed() };
        // SAFETY: a valid descriptor and a stat buffer.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        if st.st_size as usize != len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the shared-memory region has {} bytes, not {len}",
                    st.st_size
                ),
            ));
        }
        // SAFETY: mapping a descriptor of `len` bytes, shared, read-write.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Region {
            base: NonNull::new(ptr as *mut u8).expect("mmap does not return null"),
            len,
            shape,
            _fd: fd,
        })
    }

    /// The shared 32-bit word at `off` (in the header).
    fn word(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off + 4 <= HEADER && off.is_multiple_of(4));
        // SAFETY: within the mapping, 4-byte aligned (the mapping is page
        // aligned), and only ever accessed atomically.
        unsafe { &*(self.base.as_ptr().add(off) as *const AtomicU32) }
    }

    /// The start of ring `i` (0 up, 1 down).
    fn ring(&self, i: usize) -> *mut u8 {
        // SAFETY: HEADER + i * ring_len is within the mapping for i <= 1.
        unsafe { self.base.as_ptr().add(HEADER + i * self.shape.ring_len()) }
    }

    /// Slot `index` (mod slots) of ring `i`.
    fn slot(&self, i: usize, index: u32) -> *mut u8 {
        let at = (index & (self.shape.slots - 1)) as usize * self.shape.slot_size;
        // SAFETY: at + slot_size <= ring_len.
        unsafe { self.ring(i).add(at) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping what `map` mapped; nothing borrows it any more
        // (every view holds the region it reads).
        unsafe { libc::munmap(self.base.as_ptr() as *mut libc::c_void, self.len) };
    }
}

/// Which end of a channel a side is: the one that writes `produce` and
/// reads `consume`.
#[derive(Debug, Clone, Copy)]
struct Ends {
    produce: usize,
    consume: usize,
}

const UP: usize = 0;
const DOWN: usize = 1;
const HEADS: [usize; 2] = [OFF_UP_HEAD, OFF_DOWN_HEAD];
const TAILS: [usize; 2] = [OFF_UP_TAIL, OFF_DOWN_TAIL];

/// One side of a channel: pushes datagrams into one ring, takes them
/// from the other.
#[derive(Debug)]
struct Side {
    region: Region,
    ends: Ends,
    /// The next slot this side writes, and the last head it published.
    head: u32,
    published: u32,
    /// The next slot this side reads, and how many the last `poll` found.
    tail: u32,
    ready: u32,
}

impl Side {
    fn new(region: Region, ends: Ends) -> Side {
        let head = region.word(HEADS[ends.produce]).load(Ordering::Acquire);
        let tail = region.word(TAILS[ends.consume]).load(Ordering::Acquire);
        Side {
            region,
            ends,
            head,
            published: head,
            tail,
            ready: 0,
        }
    }

    /// Copies `datagram` into the next free slot; false if the ring is full
    /// (a loss, as a full socket buffer is) or the datagram too long.
    fn push(&mut self, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.region.shape.slot_size - LEN {
            return false;
        }
        let tail = self
            .region
            .word(TAILS[self.ends.produce])
            .load(Ordering::Acquire);
        if self.head.wrapping_sub(tail) >= self.region.shape.slots {
            return false;
        }
        let slot = self.region.slot(self.ends.produce, self.head);
        // SAFETY: the slot is free (behind the consumer's tail), ours until
        // the head is published, and slot_size >= LEN + len.
        unsafe {
            (slot as *mut u32).write(len as u32);
            let mut at = slot.add(LEN);
            for p in parts {
                std::ptr::copy_nonoverlapping(p.as_ptr(), at, p.len());
                at = at.add(p.len());
            }
        }
        self.head = self.head.wrapping_add(1);
        true
    }

    /// Makes the pushed datagrams visible; whether any were new.
    fn publish(&mut self) -> bool {
        if self.head == self.published {
            return false;
        }
        self.region
            .word(HEADS[self.ends.produce])
            .store(self.head, Ordering::SeqCst);
        self.published = self.head;
        true
    }

    /// How many datagrams wait in the incoming ring; an error if its head
    /// claims more than the ring holds (a corrupt or hostile peer).
    fn poll(&mut self) -> io::Result<u32> {
        let head = self
            .region
            .word(HEADS[self.ends.consume])
            .load(Ordering::Acquire);
        let ready = head.wrapping_sub(self.tail);
        if ready > self.region.shape.slots {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "the shared-memory ring's head is {ready} slots ahead of its tail \
                     (it has {})",
                    self.region.shape.slots
                ),
            ));
        }
        self.ready = ready;
        Ok(ready)
    }

    /// [`Side::poll`], taking at most `max` of what waits.
    fn poll_at_most(&mut self, max: usize) -> io::Result<u32> {
        let ready = self.poll()?.min(max.min(u32::MAX as usize) as u32);
        self.ready = ready;
        Ok(ready)
    }

    /// Datagram `i` of those the last [`Side::poll`] found, in place; None
    /// if its length does not fit its slot.
    fn get(&self, i: u32) -> Option<&[u8]> {
        debug_assert!(i < self.ready);
        let slot = self
            .region
            .slot(self.ends.consume, self.tail.wrapping_add(i));
        // SAFETY: the slot is published (before the head we read with
        // Acquire) and the producer does not touch it until we release it.
        let len = unsafe { (slot as *const u32).read_volatile() } as usize;
        if len > self.region.shape.slot_size - LEN {
            return None;
        }
        // SAFETY: as above, and len fits the slot.
        Some(unsafe { std::slice::from_raw_parts(slot.add(LEN), len) })
    }

    /// Hands the slots the last poll found back to the producer.
    fn release(&mut self) {
        if self.ready == 0 {
            return;
        }
        self.tail = self.tail.wrapping_add(self.ready);
        self.ready = 0;
        self.region
            .word(TAILS[self.ends.consume])
            .store(self.tail, Ordering::Release);
    }
}

/// A worker's end of a channel.
#[derive(Debug)]
pub struct WorkerChannel {
    side: Side,
    /// The attach connection: its closing detaches the channel, and a byte
    /// on it wakes a sleeping emulator.
    conn: UnixStream,
    /// Datagrams the emulator could not take (its ring was full).
    pub refused: u64,
}

impl WorkerChannel {
    /// Attaches to the emulator listening at `path` as the worker endpoint
    /// `endpoint` (the address its job lists it under), for datagrams of
    /// up to `datagram` bytes and `slots` per ring.
    pub fn attach(
        path: &Path,
        endpoint: SocketAddr,
        datagram: usize,
        slots: u32,
    ) -> io::Result<WorkerChannel> {
        let shape = Shape::new(datagram, slots)?;
        let mut conn = UnixStream::connect(path).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "connect to the emulator's shared-memory socket {}: {e} \
                     (is `inagg emu --shm {}` running?)",
                    path.display(),
                    path.display()
                ),
            )
        })?;
        conn.set_read_timeout(Some(Duration::from_secs(10)))?;
        writeln!(
            conn,
            "{HELLO} {endpoint} {} {}",
            shape.slot_size - LEN,
            shape.slots
        )?;
        let (line, fd) = recv_line_with_fd(&conn)?;
        let line = line.trim_end();
        if line != "ok" {
            return Err(io::Error::new(
                io::ErrorKind::ConnectionRefused,
                format!("the emulator refused the shared-memory channel: {line}"),
            ));
        }
        let fd = fd.ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "the emulator sent no region")
        })?;
        let region = Region::map(fd, shape.region_len(), shape)?;
        // SAFETY: the header's magic word, in the mapping, aligned.
        let magic = unsafe { (region.base.as_ptr().add(OFF_MAGIC) as *const u64).read_volatile() };
        if magic != MAGIC {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "the shared-memory region is not an inagg channel",
            ));
        }
        conn.set_read_timeout(None)?;
        conn.set_nonblocking(true)?;
        Ok(WorkerChannel {
            side: Side::new(
                region,
                Ends {
                    produce: UP,
                    consume: DOWN,
                },
            ),
            conn,
            refused: 0,
        })
    }

    /// Sends `datagrams` to the switch; returns how many the ring refused.
    pub fn send<'a>(&mut self, datagrams: impl Iterator<Item = &'a [u8]>) -> io::Result<u64> {
        let mut refused = 0;
        for d in datagrams {
            if !self.side.push(&[d]) {
                refused += 1;
            }
        }
        self.refused += refused;
        if self.side.publish() {
            self.wake_emulator()?;
        }
        Ok(refused)
    }

    /// Writes a byte to the attach socket if the emulator said it sleeps.
    fn wake_emulator(&mut self) -> io::Result<()> {
        let flag = self.side.region.word(OFF_EMU_SLEEPS);
        if flag.load(Ordering::SeqCst) != 0 && flag.swap(0, Ordering::SeqCst) != 0 {
            match (&self.conn).write(&[1]) {
                Ok(_) => {}
                // The emulator has bytes enough to wake on.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("the emulator's shared-memory channel closed: {e}"),
                    ))
                }
            }
        }
        Ok(())
    }

    /// Waits up to `wait` for datagrams from the switch; how many wait, at
    /// most `max` (read them with [`WorkerChannel::get`]; they stay until
    /// the next `recv`).
    pub fn recv(&mut self, wait: Duration, max: usize) -> io::Result<usize> {
        self.release();
        let n = self.side.poll_at_most(max)?;
        if n > 0 || wait.is_zero() {
            return Ok(n as usize);
        }
        let sleeps = self.side.region.word(OFF_WORKER_SLEEPS);
        sleeps.store(1, Ordering::SeqCst);
        let head = self.side.region.word(OFF_DOWN_HEAD);
        let seen = head.load(Ordering::SeqCst);
        if seen == self.side.tail {
            futex_wait(head, seen, wait);
        }
        sleeps.store(0, Ordering::Relaxed);
        self.detect_closed()?;
        Ok(self.side.poll_at_most(max)? as usize)
    }

    /// An error if the emulator closed the channel.
    fn detect_closed(&mut self) -> io::Result<()> {
        let mut byte = [0u8; 16];
        match (&self.conn).read(&mut byte) {
            Ok(0) => Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "the emulator closed the shared-memory channel (it stopped)",
            )),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Datagram `i` of the last [`WorkerChannel::recv`] (empty if the
    /// emulator wrote a length its slot cannot hold).
    pub fn get(&self, i: usize) -> &[u8] {
        self.side.get(i as u32).unwrap_or(&[])
    }

    fn release(&mut self) {
        self.side.release();
    }
}

/// The emulator's end of a channel.
#[derive(Debug)]
pub struct EmulatorChannel {
    side: Side,
    conn: UnixStream,
    endpoint: SocketAddr,
}

impl EmulatorChannel {
    /// Serves an attach request on `conn` (a fresh connection to the
    /// emulator's socket); `admit` is asked about the endpoint and the
    /// bytes its region would take, and says why not if it may not have
    /// them. Refusals are answered on `conn` and returned as errors.
    pub fn accept(
        conn: UnixStream,
        admit: impl Fn(SocketAddr, usize) -> Result<(), String>,
    ) -> io::Result<EmulatorChannel> {
        conn.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut line = String::new();
        BufReader::new((&conn).take(256)).read_line(&mut line)?;
        let answer = |conn: &UnixStream, msg: &str| -> io::Error {
            let _ = writeln!(&*conn, "{msg}");
            io::Error::new(io::ErrorKind::InvalidInput, msg.to_owned())
        };
        let request = parse_hello(line.trim_end()).map_err(|e| answer(&conn, &e))?;
        let (endpoint, shape) = request;
        admit(endpoint, shape.region_len()).map_err(|e| answer(&conn, &e))?;
        let region = Region::create(shape).map_err(|e| answer(&conn, &e.to_string()))?;
        send_line_with_fd(&conn, "ok\n", region._fd.as_raw_fd())?;
        conn.set_read_timeout(None)?;
        conn.set_nonblocking(true)?;
        Ok(EmulatorChannel {
            side: Side::new(
                region,
                Ends {
                    produce: DOWN,
                    consume: UP,
                },
            ),
            conn,
            endpoint,
        })
    }

    /// The worker endpoint this channel speaks for.
    pub fn endpoint(&self) -> SocketAddr {
        self.endpoint
    }

    /// The bytes its region takes.
    pub fn bytes(&self) -> usize {
        self.side.region.len
    }

    /// The attach socket, to `poll` on.
    pub fn fd(&self) -> RawFd {
        self.conn.as_raw_fd()
    }

    /// Datagrams waiting from the worker; an error means the channel is
    /// corrupt and must be dropped.
    pub fn poll(&mut self) -> io::Result<usize> {
        self.side.poll().map(|n| n as usize)
    }

    /// Copies datagram `i` of the last poll into `buf` (cleared first);
    /// false if its length does not fit its slot (a counted drop).
    pub fn copy_out(&self, i: usize, buf: &mut Vec<u8>) -> bool {
        buf.clear();
        match self.side.get(i as u32) {
            Some(d) => {
                buf.extend_from_slice(d);
                true
            }
            None => false,
        }
    }

    /// Hands the polled slots back to the worker.
    pub fn release(&mut self) {
        self.side.release();
    }

    /// Queues a datagram (`head` then `tail`) for the worker; false if its
    /// ring is full.
    pub fn push(&mut self, head: &[u8], tail: &[u8]) -> bool {
        self.side.push(&[head, tail])
    }

    /// Publishes what was pushed and wakes the worker if it sleeps.
    pub fn flush(&mut self) {
        if self.side.publish() {
            let sleeps = self.side.region.word(OFF_WORKER_SLEEPS);
            if sleeps.load(Ordering::SeqCst) != 0 {
                futex_wake(self.side.region.word(OFF_DOWN_HEAD));
            }
        }
    }

    /// Says the emulator is about to sleep (then poll the rings once more).
    pub fn sleeping(&self, yes: bool) {
        self.side
            .region
            .word(OFF_EMU_SLEEPS)
            .store(u32::from(yes), Ordering::SeqCst);
    }

    /// Reads the wake-up bytes on the attach socket; false once the worker
    /// has closed it (the channel is done).
    pub fn drain_doorbell(&mut self) -> bool {
        let mut buf = [0u8; 64];
        loop {
            match (&self.conn).read(&mut buf) {
                Ok(0) => return false,
                Ok(_) => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return false,
            }
        }
    }
}

/// Parses `inagg-shm 1 ENDPOINT DATAGRAM SLOTS`.
fn parse_hello(line: &str) -> Result<(SocketAddr, Shape), String> {
    let rest = line
        .strip_prefix(HELLO)
        .and_then(|r| r.strip_prefix(' '))
        .ok_or_else(|| format!("not an inagg shared-memory request (want `{HELLO} ...`)"))?;
    let fields: Vec<&str> = rest.split(' ').collect();
    let [endpoint, datagram, slots] = fields[..] else {
        return Err("want `ENDPOINT DATAGRAM SLOTS` after the version".into());
    };
    let endpoint: SocketAddr = endpoint
        .parse()
        .map_err(|_| format!("`{endpoint}` is not an address:port"))?;
    let datagram: usize = datagram
        .parse()
        .map_err(|_| format!("`{datagram}` is not a datagram size"))?;
    let slots: u32 = slots
        .parse()
        .map_err(|_| format!("`{slots}` is not a slot count"))?;
    let shape = Shape::new(datagram, slots).map_err(|e| e.to_string())?;
    Ok((endpoint, shape))
}

/// Room for one control message holding one descriptor.
fn control_buffer() -> Vec<u8> {
    // SAFETY: CMSG_SPACE is a pure computation.
    vec![0u8; unsafe { libc::CMSG_SPACE(size_of::<RawFd>() as u32) } as usize]
}

/// A message of one buffer, `iov`, and the control buffer `control`; both
/// must outlive its use.
fn message(iov: &mut libc::iovec, control: &mut [u8]) -> libc::msghdr {
    // SAFETY: a zeroed msghdr is valid; the pointers set are the caller's.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = control.len() as _;
    msg
}

/// Sends `line` with descriptor `fd` attached (SCM_RIGHTS).
fn send_line_with_fd(conn: &UnixStream, line: &str, fd: RawFd) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: line.as_ptr() as *mut libc::c_void,
        iov_len: line.len(),
    };
    let mut control = control_buffer();
    let msg = message(&mut iov, &mut control);
    // SAFETY: the control buffer has room for one cmsg with one fd.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<RawFd>() as u32) as _;
        (libc::CMSG_DATA(cmsg) as *mut RawFd).write_unaligned(fd);
    }
    // SAFETY: msg is valid for the call.
    let n = unsafe { libc::sendmsg(conn.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Reads one short line (the emulator's answer) and the descriptor sent
/// with it, if any.
fn recv_line_with_fd(conn: &UnixStream) -> io::Result<(String, Option<OwnedFd>)> {
    let mut buf = [0u8; 512];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let mut control = control_buffer();
    let mut msg = message(&mut iov, &mut control);
    // SAFETY: msg is valid for the call; MSG_CMSG_CLOEXEC marks any fd.
    let n = unsafe { libc::recvmsg(conn.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the emulator closed the shared-memory socket without an answer",
        ));
    }
    let mut fd = None;
    // SAFETY: walking the control messages recvmsg filled in.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let raw = (libc::CMSG_DATA(cmsg) as *const RawFd).read_unaligned();
                fd = Some(OwnedFd::from_raw_fd(raw));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    let line = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
    Ok((line, fd))
}

/// Sleeps until `word` is no longer `seen`, a wake, or `wait` passes.
fn futex_wait(word: &AtomicU32, seen: u32, wait: Duration) {
    let ts = libc::timespec {
        tv_sec: wait.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: wait.subsec_nanos() as libc::c_long,
    };
    // SAFETY: a shared (not private) futex wait on a word in a shared
    // mapping, with a relative timeout; spurious returns are fine.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            seen,
            &ts as *const libc::timespec,
        );
    }
}

/// Wakes the sleepers on `word`.
fn futex_wake(word: &AtomicU32) {
    // SAFETY: a shared futex wake on a word in a shared mapping.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    fn pair(slots: u32) -> (WorkerChannel, EmulatorChannel, tempdir::Dir) {
        let dir = tempdir::Dir::new();
        let path = dir.0.join("shm.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            EmulatorChannel::accept(conn, |_, _| Ok(())).unwrap()
        });
        let endpoint: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let worker = WorkerChannel::attach(&path, endpoint, 100, slots).unwrap();
        let emu = server.join().unwrap();
        assert_eq!(emu.endpoint(), endpoint);
        (worker, emu, dir)
    }

    /// A throwaway directory for the socket.
    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                let p = std::env::temp_dir().join(format!(
                    "inagg-shm-test-{}-{:?}",
                    std::process::id(),
                    std::thread::current().id()
                ));
                let _ = std::fs::remove_dir_all(&p);
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    /// Datagrams go up and down byte for byte, a full ring refuses (a
    /// counted loss), and a released slot is reused.
    #[test]
    fn datagrams_cross_both_rings_and_a_full_ring_refuses() {
        let (mut w, mut e, _dir) = pair(8);
        let sent: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let refused = w.send(sent.iter().map(|d| &d[..])).unwrap();
        assert_eq!(refused, 2, "8 slots");
        assert_eq!(w.refused, 2);
        assert_eq!(e.poll().unwrap(), 8);
        let mut buf = Vec::new();
        for (i, d) in sent.iter().take(8).enumerate() {
            assert!(e.copy_out(i, &mut buf));
            assert_eq!(&buf, d);
        }
        e.release();
        assert_eq!(e.poll().unwrap(), 0);
        assert!(e.push(b"head", b"tail"));
        e.flush();
        assert_eq!(w.recv(Duration::ZERO, 64).unwrap(), 1);
        assert_eq!(w.get(0), b"headtail");
        assert_eq!(w.send([&b"again"[..]].into_iter()).unwrap(), 0);
        assert_eq!(e.poll().unwrap(), 1);
        assert!(e.copy_out(0, &mut buf));
        assert_eq!(buf, b"again");
        assert!(!e.push(&[0; 200], b""), "longer than a slot");
    }

    /// A channel's slots: enough for what is wanted, within its memory.
    #[test]
    fn slots_fit_the_memory_given() {
        assert_eq!(Shape::slots_within(280, 512 + 64, 32 << 20), 1024);
        assert_eq!(Shape::slots_within(280, 5, 32 << 20), MIN_SLOTS);
        assert_eq!(Shape::slots_within(65_504, 8192 + 64, 32 << 20), 128);
        assert_eq!(Shape::slots_within(65_504, 8 + 64, 32 << 20), 128);
        assert_eq!(Shape::slots_within(65_504, 72, 1 << 20), MIN_SLOTS);
        let shape = Shape::new(65_504, Shape::slots_within(65_504, 100_000, MAX_REGION)).unwrap();
        assert!(shape.region_len() <= MAX_REGION);
    }

    /// A sleeping worker wakes when the emulator publishes; a sleeping
    /// emulator learns of the worker's datagrams on the doorbell; the
    /// worker's wait is bounded when nothing comes.
    #[test]
    fn sleepers_are_woken_and_waits_are_bounded() {
        let (mut w, mut e, _dir) = pair(8);
        assert_eq!(
            w.recv(Duration::from_millis(30), 64).unwrap(),
            0,
            "nothing sent"
        );
        let waker = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            assert!(e.push(b"result", b""));
            e.flush();
            e
        });
        let t = std::time::Instant::now();
        let mut n = 0;
        while n == 0 && t.elapsed() < Duration::from_secs(10) {
            n = w.recv(Duration::from_secs(10), 64).unwrap();
        }
        assert_eq!(n, 1);
        assert_eq!(w.get(0), b"result");
        let mut e = waker.join().unwrap();
        e.sleeping(true);
        w.send([&b"x"[..]].into_iter()).unwrap();
        let mut pfd = libc::pollfd {
            fd: e.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut pfd, 1, 5000) };
        assert_eq!(ready, 1, "the doorbell rang");
        assert!(e.drain_doorbell());
        assert_eq!(e.poll().unwrap(), 1);
    }

    /// A worker that writes a head beyond its ring, or a length beyond its
    /// slot, gets an error or a refused datagram, never a read outside the
    /// region; a closed channel is seen by both ends.
    #[test]
    fn a_hostile_ring_is_refused_and_a_closed_channel_is_seen() {
        let (w, mut e, _dir) = pair(8);
        w.side
            .region
            .word(OFF_UP_HEAD)
            .store(1000, Ordering::SeqCst);
        let err = e.poll().unwrap_err();
        assert!(err.to_string().contains("ahead of its tail"), "{err}");
        w.side.region.word(OFF_UP_HEAD).store(1, Ordering::SeqCst);
        // SAFETY: the first up slot's length word, in the region.
        unsafe { (w.side.region.slot(UP, 0) as *mut u32).write(1 << 20) };
        assert_eq!(e.poll().unwrap(), 1);
        let mut buf = Vec::new();
        assert!(!e.copy_out(0, &mut buf), "a length past the slot");
        drop(w);
        assert!(!e.drain_doorbell(), "the worker is gone");
        let (mut w, e, _dir2) = pair(8);
        drop(e);
        let err = w.recv(Duration::from_millis(10), 64).unwrap_err();
        assert!(err.to_string().contains("closed"), "{err}");
    }

    /// Bad requests are refused with a reason, on the socket and as errors.
    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        for (line, want) in [
            ("hello", "not an inagg shared-memory request"),
            ("inagg-shm 1 nowhere 100 8", "is not an address"),
            ("inagg-shm 1 10.0.0.1:1 100 7", "power of two"),
            ("inagg-shm 1 10.0.0.1:1 100000 8", "bytes of datagram"),
            ("inagg-shm 1 10.0.0.1:1 65536 4096", "MiB"),
            ("inagg-shm 1 10.0.0.1:1 100", "ENDPOINT DATAGRAM SLOTS"),
        ] {
            let err = parse_hello(line).unwrap_err();
            assert!(err.contains(want), "{line}: {err}");
        }
        let dir = tempdir::Dir::new();
        let path = dir.0.join("taken.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let server = std::thread::spawn(move || {
            let (conn, _) = listener.accept().unwrap();
            EmulatorChannel::accept(conn, |e, _| {
                Err(format!("{e} already has a shared-memory channel"))
            })
            .unwrap_err()
        });
        let err = WorkerChannel::attach(&path, "10.0.0.3:1".parse().unwrap(), 100, 8)
            .unwrap_err()
            .to_string();
        assert!(err.contains("already has a shared-memory channel"), "{err}");
        server.join().unwrap();
    }
}
