//! The CPU time a thread has used: what an all-reduce costs the host that
//! runs it, apart from its wall time. On one machine the emulator's
//! additions and copies are charged to the same cores as the workers',
//! where a switch would charge the hosts nothing.

use std::time::Duration;

/// The calling thread's CPU time so far, user and system (Linux
/// `CLOCK_THREAD_CPUTIME_ID`): a worker's socket path runs on its own
/// thread, so the difference around its all-reduce is what the worker
/// cost, whatever else the process (an in-process emulator) is doing.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// CPU seconds per GB of tensor all-reduced by each of `workers`, from
/// their CPU time summed (`cpu`) and the tensor's bytes.
pub fn seconds_per_gb(cpu: Duration, workers: usize, bytes: usize) -> f64 {
    cpu.as_secs_f64() / workers.max(1) as f64 / (bytes as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_thread_is_charged_and_a_sleeping_one_is_not() {
        let t0 = thread_cpu();
        std::thread::sleep(Duration::from_millis(30));
        let slept = thread_cpu() - t0;
        let t1 = thread_cpu();
        let mut x = 0u64;
        while thread_cpu() - t1 < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(slept < Duration::from_millis(10), "{slept:?}");
        assert!(thread_cpu() - t1 >= Duration::from_millis(20));
        assert!((seconds_per_gb(Duration::from_secs(2), 4, 500_000_000) - 1.0).abs() < 1e-12);
    }
}
