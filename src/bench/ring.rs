//! The baseline a user would otherwise run: a host-only ring all-reduce
//! (reduce-scatter then all-gather, as NCCL and Gloo do) over TCP loopback.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use super::cpu::thread_cpu;

/// One ring all-reduce's cost.
#[derive(Debug, Clone, Copy)]
pub struct RingRun {
    /// The slowest rank's wall time.
    pub slowest: Duration,
    /// Every rank's CPU time (its own thread's and its writers'), summed.
    pub cpu: Duration,
}

/// Ring all-reduces `data` (one tensor per rank) in place over TCP loopback.
pub fn ring_allreduce(data: &mut [Vec<f32>]) -> Result<RingRun> {
    let n = data.len();
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<_>>()
        .context("bind ring listeners")?;
    let addrs: Vec<_> = listeners
        .iter()
        .map(|l| l.local_addr())
        .collect::<std::io::Result<_>>()?;
    let times = std::thread::scope(|s| {
        let handles: Vec<_> = data
            .iter_mut()
            .zip(listeners)
            .enumerate()
            .map(|(rank, (buf, listener))| {
                let next = addrs[(rank + 1) % n];
                s.spawn(move || -> Result<(Duration, Duration)> {
                    let to_next = TcpStream::connect(next)?;
                    let (from_prev, _) = listener.accept()?;
                    to_next.set_nodelay(true)?;
                    let (start, cpu) = (Instant::now(), thread_cpu());
                    let writers = rank_allreduce(rank, n, buf, to_next, from_prev)?;
                    Ok((start.elapsed(), thread_cpu() - cpu + writers))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .map_err(|_| anyhow::anyhow!("ring rank panicked"))?
            })
            .collect::<Result<Vec<_>>>()
    })?;
    Ok(RingRun {
        slowest: times.iter().map(|t| t.0).max().unwrap_or_default(),
        cpu: times.iter().map(|t| t.1).sum(),
    })
}

fn segment(len: usize, n: usize, i: usize) -> std::ops::Range<usize> {
    let per = len.div_ceil(n);
    (i * per).min(len)..((i + 1) * per).min(len)
}

fn rank_allreduce(
    rank: usize,
    n: usize,
    buf: &mut [f32],
    mut tx: TcpStream,
    mut rx: TcpStream,
) -> Result<Duration> {
    // The writers' CPU time: each step's send runs on a thread of its own.
    let mut writers = Duration::ZERO;
    let len = buf.len();
    let mut incoming = vec![0u8; segment(len, n, 0).len() * 4];
    for phase in 0..2 {
        for step in 0..n - 1 {
            let send = segment(len, n, (rank + n - step + phase) % n);
            let recv = segment(len, n, (rank + 2 * n - step - 1 + phase) % n);
            let out: Vec<u8> = buf[send].iter().flat_map(|v| v.to_le_bytes()).collect();
            let bytes = &mut incoming[..recv.len() * 4];
            // Send and receive at once: a ring of blocking writers deadlocks.
            std::thread::scope(|s| -> Result<()> {
                let writer = s.spawn(|| -> std::io::Result<Duration> {
                    let cpu = thread_cpu();
                    tx.write_all(&out)?;
                    Ok(thread_cpu() - cpu)
                });
                rx.read_exact(bytes)?;
                writers += writer
                    .join()
                    .map_err(|_| anyhow::anyhow!("ring writer panicked"))??;
                Ok(())
            })?;
            let target = &mut buf[recv];
            for (v, b) in target.iter_mut().zip(bytes.chunks_exact(4)) {
                let x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                if phase == 0 {
                    *v += x;
                } else {
                    *v = x;
                }
            }
        }
    }
    Ok(writers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sums_exactly_for_small_integers() {
        let mut data: Vec<Vec<f32>> = (0..4)
            .map(|r| (0..1001).map(|i| (i % 10 + r) as f32).collect())
            .collect();
        let run = ring_allreduce(&mut data).unwrap();
        assert!(run.cpu > Duration::ZERO && run.slowest > Duration::ZERO);
        for d in &data {
            for (i, v) in d.iter().enumerate() {
                assert_eq!(*v, (4 * (i % 10) + 6) as f32);
            }
        }
    }
}
