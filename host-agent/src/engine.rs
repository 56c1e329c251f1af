//! The protocol core ([`crate::protocol::Core`]) driven over a real
//! [`Link`] with the real clock: what the socket and DPDK workers run.
//! Everything the protocol decides is the core's; this loop only moves
//! datagrams between the link and the core, reads the time, and publishes
//! progress.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::link::Link;
use crate::protocol::time::{nanos, Nanos};
use crate::protocol::{Codec, Core, Lane};
use crate::stats::{Live, Stats};
use crate::Error;

/// Where a running all-reduce reports its progress, when someone reads it.
#[derive(Clone, Copy, Default)]
pub(crate) struct Watchers<'a> {
    /// Incremented once per result received, for progress displays.
    pub progress: Option<&'a AtomicU64>,
    /// Where the counts are published at every scan.
    pub live: Option<&'a Live>,
}

/// Runs `chunks` chunks through the pool with `codec` over `link`;
/// returns statistics.
pub(crate) fn run<L: Link, C: Codec>(
    link: &mut L,
    lane: Lane<'_>,
    codec: C,
    (chunks, payload_bytes): (usize, u64),
    watch: Watchers<'_>,
) -> Result<Stats, Error> {
    let start = Instant::now();
    let clock = || nanos(start.elapsed());
    let lanes = lane.lane;
    let kept = std::mem::take(link.spare());
    let mut core = Core::new(lane, codec, chunks, payload_bytes, kept, |len| {
        link.new_buf(len)
    })?;
    let outcome = drive(link, &mut core, clock, watch, lanes, start);
    let (mut stats, bufs) = core.finish();
    // Kept for the next call: fresh buffers cost page faults (a window of
    // 64 KiB packets is megabytes) or mbuf allocations.
    *link.spare() = bufs;
    stats.elapsed = start.elapsed();
    outcome.map(|()| stats)
}

/// The driver's loop: send, wait, hand in, until the core is done.
fn drive<L: Link, C: Codec>(
    link: &mut L,
    core: &mut Core<'_, L::Buf, C>,
    clock: impl Fn() -> Nanos,
    watch: Watchers<'_>,
    (lane, lanes): (usize, usize),
    start: Instant,
) -> Result<(), Error> {
    let mut landed = 0;
    loop {
        transmit(link, core, &clock)?;
        if core.is_done() {
            return Ok(());
        }
        let wait = Duration::from_nanos(core.next_wakeup().saturating_sub(clock()));
        let n = link.recv(wait)?;
        let now = clock();
        for i in 0..n {
            core.on_datagram(now, link.received(i))?;
        }
        if let Some(p) = watch.progress {
            p.fetch_add(core.landed() - landed, Ordering::Relaxed);
            landed = core.landed();
        }
        let scanned = core.on_idle(now, n < link.batch(), link.refusals())?;
        if let (true, Some(live)) = (scanned, watch.live) {
            let mut stats = core.stats().clone();
            stats.elapsed = start.elapsed();
            live.update(lane, lanes, &stats);
        }
    }
}

/// Sends what the core has queued: packets first (stamped with the time
/// they left), then queries.
fn transmit<L: Link, C: Codec>(
    link: &mut L,
    core: &mut Core<'_, L::Buf, C>,
    clock: impl Fn() -> Nanos,
) -> Result<(), Error> {
    let mut refused = 0;
    if core.packets().len() > 0 {
        // A refused packet (no switch listening yet, a full queue) is
        // recovered by the retransmission timer like any loss.
        refused += link.send(core.packets())?;
    }
    let left = clock();
    if core.has_queries() {
        core.build_queries(|len| link.new_buf(len))?;
        let queries: Vec<&L::Buf> = core.queries().collect();
        refused += link.send(queries.into_iter())?;
    }
    core.sent(left, refused);
    Ok(())
}
