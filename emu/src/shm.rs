//! The socket data plane with shared-memory channels beside it
//! (`inagg emu --shm PATH`): workers on this host attach over a Unix socket
//! and exchange datagrams through [`inagg_netio::shm`] rings instead of
//! loopback UDP, without the kernel's four copies of every byte. The same
//! pipeline serves both; a channel's datagrams come from, and its results
//! go to, the worker endpoint it attached as, so a job may mix workers on
//! UDP and on channels.
//!
//! One thread serves the UDP socket and every ring (each down ring has a
//! single producer); a second only accepts attach requests, so a client
//! that connects and says nothing delays no datagram.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use inagg_netio::shm::EmulatorChannel;
use inagg_netio::udp::{BatchSocket, RecvBatch, SendBatch, Staged};

use crate::pipeline::{Egress, Pipeline, State};
use crate::server::lock;
use crate::DropReason;

/// Most channels attached at once.
pub const MAX_CHANNELS: usize = 1024;
/// Most shared memory all channels may take together (each asks for its
/// rings' size, up to `inagg_netio::shm::MAX_REGION`; an agent asks for
/// 32 MiB at most): pages are only allocated as they are written, but a
/// worker may write all of its own.
pub const MAX_TOTAL: usize = 4 << 30;
/// Datagrams read from one ring before the next is served.
const RING_BATCH: usize = 64;
/// How long the loop sleeps with nothing to do before it looks at the
/// stop flag and for new channels.
const IDLE_POLL: Duration = Duration::from_millis(50);

/// Binds the attach socket at `path`, replacing a stale one (a socket file
/// nothing listens on) but never another file.
pub fn bind(path: &Path) -> io::Result<UnixListener> {
    use std::os::unix::fs::FileTypeExt;
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!("{} exists and is not a socket", path.display()),
            ));
        }
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("an emulator already listens on {}", path.display()),
            ));
        }
        std::fs::remove_file(path)?;
    }
    UnixListener::bind(path).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("bind the shared-memory socket {}: {e}", path.display()),
        )
    })
}

/// Accepts attach requests until `stop`, handing each channel to the data
/// plane; the endpoints attached are shared so that a second request for
/// one is refused at once.
pub(crate) fn accept_loop(
    listener: UnixListener,
    path: PathBuf,
    attached: Arc<Mutex<HashMap<SocketAddr, usize>>>,
    to_plane: SyncSender<EmulatorChannel>,
    stop: &AtomicBool,
) {
    if let Err(e) = listener.set_nonblocking(true) {
        tracing::warn!("shared-memory socket: {e}");
    }
    while !stop.load(Ordering::Relaxed) {
        let conn = match listener.accept() {
            Ok((conn, _)) => conn,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                // Asleep until a client connects, or a while (the stop flag).
                let mut pfd = libc::pollfd {
                    fd: listener.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                };
                // SAFETY: one valid pollfd for the call.
                unsafe { libc::poll(&mut pfd, 1, IDLE_POLL.as_millis() as libc::c_int) };
                continue;
            }
            Err(e) => {
                tracing::warn!("shared-memory socket: accept: {e}");
                std::thread::sleep(IDLE_POLL);
                continue;
            }
        };
        let _ = conn.set_nonblocking(false);
        let admit = |e: SocketAddr, bytes: usize| {
            admit(
                &attached.lock().unwrap_or_else(|p| p.into_inner()),
                e,
                bytes,
            )
        };
        match EmulatorChannel::accept(conn, admit) {
            Ok(channel) => {
                let endpoint = channel.endpoint();
                attached
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(endpoint, channel.bytes());
                match to_plane.try_send(channel) {
                    Ok(()) => tracing::info!(%endpoint, "shared-memory channel attached"),
                    Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                        attached
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .remove(&endpoint);
                        tracing::warn!(%endpoint, "shared-memory channel dropped: the data plane is busy");
                    }
                }
            }
            Err(e) => tracing::warn!("shared-memory attach refused: {e}"),
        }
    }
    let _ = std::fs::remove_file(&path);
}

/// Whether `endpoint` may attach a channel of `bytes` beside those
/// `attached` (endpoint -> bytes): once, and within [`MAX_CHANNELS`] and
/// [`MAX_TOTAL`].
fn admit(
    attached: &HashMap<SocketAddr, usize>,
    endpoint: SocketAddr,
    bytes: usize,
) -> Result<(), String> {
    if attached.contains_key(&endpoint) {
        return Err(format!("{endpoint} already has a shared-memory channel"));
    }
    if attached.len() >= MAX_CHANNELS {
        return Err(format!(
            "the emulator has {MAX_CHANNELS} shared-memory channels, its most"
        ));
    }
    let total: usize = attached.values().sum();
    if total + bytes > MAX_TOTAL {
        return Err(format!(
            "a channel of {} MiB would take the emulator's shared memory past {} MiB \
             ({} MiB in use): ask for fewer or smaller slots",
            bytes >> 20,
            MAX_TOTAL >> 20,
            total >> 20
        ));
    }
    Ok(())
}

/// A new attach queue between the accept thread and the data plane.
pub(crate) fn queue() -> (SyncSender<EmulatorChannel>, Receiver<EmulatorChannel>) {
    sync_channel(64)
}

/// The data plane serving the UDP socket and the channels.
pub(crate) struct ShmPlane {
    socket: BatchSocket,
    state: Arc<Mutex<State>>,
    pipeline: Pipeline,
    egress: ShmEgress,
    new: Receiver<EmulatorChannel>,
    attached: Arc<Mutex<HashMap<SocketAddr, usize>>>,
    buf: Vec<u8>,
}

/// Output for both carriers: datagrams to an attached endpoint go into its
/// down ring, the rest into the UDP batch.
struct ShmEgress {
    tx: SendBatch,
    channels: Vec<EmulatorChannel>,
    by_endpoint: HashMap<SocketAddr, usize>,
}

impl ShmEgress {
    fn channel(&mut self, to: SocketAddr) -> Option<&mut EmulatorChannel> {
        let i = *self.by_endpoint.get(&to)?;
        self.channels.get_mut(i)
    }

    fn reindex(&mut self) {
        self.by_endpoint = self
            .channels
            .iter()
            .enumerate()
            .map(|(i, c)| (c.endpoint(), i))
            .collect();
    }
}

impl Egress for ShmEgress {
    type Staged = Staged;

    fn stage(&mut self, payload: &[u8]) -> Staged {
        self.tx.stage(payload)
    }

    fn staged(&self, staged: &Staged) -> &[u8] {
        self.tx.staged(staged)
    }

    fn push_parts(&mut self, head: &[u8], payload: &Staged, to: SocketAddr) -> bool {
        if let Some(i) = self.by_endpoint.get(&to).copied() {
            let tail = self.tx.staged(payload);
            return self.channels[i].push(head, tail);
        }
        self.tx.push_parts(head, payload, Some(to));
        true
    }

    fn push(&mut self, bytes: &[u8], to: SocketAddr) -> bool {
        if let Some(c) = self.channel(to) {
            return c.push(bytes, &[]);
        }
        self.tx.push(bytes, Some(to));
        true
    }
}

impl ShmPlane {
    pub(crate) fn new(
        socket: BatchSocket,
        state: Arc<Mutex<State>>,
        new: Receiver<EmulatorChannel>,
        attached: Arc<Mutex<HashMap<SocketAddr, usize>>>,
    ) -> ShmPlane {
        ShmPlane {
            socket,
            state,
            pipeline: Pipeline::default(),
            egress: ShmEgress {
                tx: SendBatch::new(),
                channels: Vec::new(),
                by_endpoint: HashMap::new(),
            },
            new,
            attached,
            buf: Vec::with_capacity(crate::server::MTU),
        }
    }

    pub(crate) fn run(mut self, stop: &AtomicBool) {
        let mut rx = RecvBatch::new(crate::server::BATCH, crate::server::MTU);
        while !stop.load(Ordering::Relaxed) {
            self.take_new();
            if !self.serve(&mut rx) {
                self.sleep();
            }
        }
    }

    /// Adds the channels attached since the last look.
    fn take_new(&mut self) {
        let mut added = false;
        while let Ok(c) = self.new.try_recv() {
            self.egress.channels.push(c);
            added = true;
        }
        if added {
            self.egress.reindex();
        }
    }

    /// Serves what waits on the socket and in every ring; whether there
    /// was any.
    fn serve(&mut self, rx: &mut RecvBatch) -> bool {
        let n = match self.socket.recv_batch(rx, Duration::ZERO) {
            Ok(n) => n,
            Err(err) => {
                tracing::warn!("receive failed: {err}");
                0
            }
        };
        let mut state = lock(&self.state);
        for i in 0..n {
            let d = rx.get(i);
            if let Some(from) = d.from {
                self.pipeline
                    .serve(&mut state, d.data, from, &mut self.egress);
            }
        }
        let mut served = n;
        let mut broken = Vec::new();
        for c in 0..self.egress.channels.len() {
            let ready = match self.egress.channels[c].poll() {
                Ok(r) => r.min(RING_BATCH),
                Err(e) => {
                    tracing::warn!(endpoint = %self.egress.channels[c].endpoint(), "shared-memory channel dropped: {e}");
                    broken.push(c);
                    continue;
                }
            };
            for i in 0..ready {
                let from = self.egress.channels[c].endpoint();
                if self.egress.channels[c].copy_out(i, &mut self.buf) {
                    self.pipeline
                        .serve(&mut state, &self.buf, from, &mut self.egress);
                } else {
                    state.switch.counters_mut().drop(DropReason::Malformed);
                }
            }
            self.egress.channels[c].release();
            served += ready;
        }
        if served == 0 {
            self.pipeline.idle(&mut state, &mut self.egress);
        }
        drop(state);
        self.flush();
        self.drop_channels(broken);
        served > 0
    }

    /// Sends the UDP batch and publishes every ring.
    fn flush(&mut self) {
        if let Err(err) = self.socket.send_batch(&mut self.egress.tx) {
            tracing::warn!("send failed: {err}");
        }
        for c in &mut self.egress.channels {
            c.flush();
        }
    }

    /// Sleeps until the socket or a doorbell has something, or a while:
    /// says so in every ring first, then looks once more (a worker that
    /// published before it saw the flag rings no bell).
    fn sleep(&mut self) {
        for c in &self.egress.channels {
            c.sleeping(true);
        }
        let waiting = self
            .egress
            .channels
            .iter_mut()
            .any(|c| c.poll().map_or(true, |n| n > 0));
        if !waiting {
            let wait = if self.pipeline.holding() {
                Duration::from_millis(1)
            } else {
                IDLE_POLL
            };
            let mut fds: Vec<libc::pollfd> = std::iter::once(self.socket.socket().as_raw_fd())
                .chain(self.egress.channels.iter().map(|c| c.fd()))
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: a valid array of pollfds for the call.
            unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    wait.as_millis() as libc::c_int,
                )
            };
        }
        let mut gone = Vec::new();
        for (i, c) in self.egress.channels.iter_mut().enumerate() {
            c.sleeping(false);
            if !c.drain_doorbell() {
                gone.push(i);
            }
        }
        self.drop_channels(gone);
    }

    /// Detaches channels `which` (ascending): their workers left, or broke
    /// the ring.
    fn drop_channels(&mut self, which: Vec<usize>) {
        if which.is_empty() {
            return;
        }
        let mut attached = self.attached.lock().unwrap_or_else(|p| p.into_inner());
        for i in which.into_iter().rev() {
            let c = self.egress.channels.swap_remove(i);
            attached.remove(&c.endpoint());
            tracing::info!(endpoint = %c.endpoint(), "shared-memory channel detached");
        }
        drop(attached);
        self.egress.reindex();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An endpoint attaches once; the channels' count and their memory
    /// together are bounded, and a refusal says which bound.
    #[test]
    fn attaching_is_bounded_in_count_and_memory() {
        let at = |i: u32| SocketAddr::from(([10, 0, (i >> 8) as u8, i as u8], 5000));
        let mut attached = HashMap::new();
        assert_eq!(admit(&attached, at(1), 1 << 20), Ok(()));
        attached.insert(at(1), 1 << 20);
        let twice = admit(&attached, at(1), 1 << 20).unwrap_err();
        assert!(twice.contains("already has"), "{twice}");
        let big = admit(&attached, at(2), MAX_TOTAL).unwrap_err();
        assert!(big.contains("past 4096 MiB (1 MiB in use)"), "{big}");
        for i in 2..=MAX_CHANNELS as u32 {
            attached.insert(at(i), 4096);
        }
        let many = admit(&attached, at(5000), 4096).unwrap_err();
        assert!(many.contains("1024 shared-memory channels"), "{many}");
    }
}
