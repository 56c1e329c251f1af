//! Where threads run: the CPUs this process may use, and pinning a thread
//! to some of them.
//!
//! A switch is a device of its own. On one host the emulator's data plane
//! shares the cores with the workers it serves; each time the scheduler
//! puts a worker where the data plane was, every worker's round waits for
//! the switch to run again, and the data plane's batches shrink as the
//! workers' do. A data-plane thread on a core of its own (as a DPDK lcore
//! or Open vSwitch's `pmd-cpu-mask` gives a software switch) and the
//! workers on the others is the nearest one host comes to separate devices
//! ([`Placement`]). What it changes is measured in docs/PERFORMANCE.md
//! ("Goodput under loss").

use std::fmt;
use std::io;

/// The CPUs the calling thread may run on, lowest first.
#[cfg(target_os = "linux")]
pub fn allowed() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most
    // size_of::<cpu_set_t>() bytes into it, and CPU_ISSET reads within it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}

/// The CPUs the calling thread may run on (not known off Linux).
#[cfg(not(target_os = "linux"))]
pub fn allowed() -> io::Result<Vec<usize>> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "CPU affinity is read only on Linux",
    ))
}

/// Pins the calling thread to `cpus` (it runs only there from now on).
#[cfg(target_os = "linux")]
pub fn pin(cpus: &[usize]) -> io::Result<()> {
    let size = libc::CPU_SETSIZE as usize;
    if cpus.is_empty() || cpus.iter().any(|&c| c >= size) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("CPUs {}: pick some of 0-{}", List(cpus), size - 1),
        ));
    }
    // SAFETY: as in `allowed`; every index was checked below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Pins the calling thread (only on Linux).
#[cfg(not(target_os = "linux"))]
pub fn pin(_cpus: &[usize]) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "threads are pinned only on Linux",
    ))
}

/// Checks that every one of `cpus` is one this process may run on: the
/// error names the first that is not, and the ones it may.
pub fn check(cpus: &[usize]) -> io::Result<()> {
    let allowed = allowed()?;
    match cpus.iter().find(|c| !allowed.contains(c)) {
        None => Ok(()),
        Some(cpu) => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "CPU {cpu}: this process may run only on CPUs {}",
                List(&allowed)
            ),
        )),
    }
}

/// One host's stand-in for separate devices: the switch's data plane on a
/// CPU of its own, the workers on the rest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The data-plane thread's CPU.
    pub switch: usize,
    /// The CPUs the workers share.
    pub workers: Vec<usize>,
}

impl Placement {
    /// The last of `allowed` for the switch, the others for the workers;
    /// `None` with fewer than two (a switch alone on the only CPU would
    /// starve the workers).
    pub fn split(allowed: &[usize]) -> Option<Placement> {
        let (&switch, workers) = allowed.split_last()?;
        (!workers.is_empty()).then(|| Placement {
            switch,
            workers: workers.to_vec(),
        })
    }

    /// [`Placement::split`] of the CPUs the calling thread may use; `None`
    /// where they are not known.
    pub fn here() -> Option<Placement> {
        Placement::split(&allowed().ok()?)
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "switch on CPU {}, workers on CPUs {}",
            self.switch,
            List(&self.workers)
        )
    }
}

/// CPU numbers as ranges: `0-3,6`.
pub struct List<'a>(pub &'a [usize]);

impl fmt::Display for List<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut rest = self.0;
        let mut sep = "";
        while let Some(&start) = rest.first() {
            // The run of consecutive numbers from `start`.
            let len = rest
                .iter()
                .zip(start..)
                .take_while(|(&c, n)| c == *n)
                .count();
            let end = rest[len - 1];
            if start == end {
                write!(f, "{sep}{start}")?;
            } else {
                write!(f, "{sep}{start}-{end}")?;
            }
            sep = ",";
            rest = &rest[len..];
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_switch_takes_the_last_cpu_and_the_workers_the_rest() {
        assert_eq!(
            Placement::split(&[0, 1]),
            Some(Placement {
                switch: 1,
                workers: vec![0]
            })
        );
        assert_eq!(
            Placement::split(&[2, 5, 7]),
            Some(Placement {
                switch: 7,
                workers: vec![2, 5]
            })
        );
        assert_eq!(Placement::split(&[3]), None, "one CPU: nothing to split");
        assert_eq!(Placement::split(&[]), None);
    }

    #[test]
    fn cpu_lists_read_as_ranges() {
        assert_eq!(List(&[0, 1, 2, 3, 6]).to_string(), "0-3,6");
        assert_eq!(List(&[1]).to_string(), "1");
        assert_eq!(List(&[0, 2, 4, 5]).to_string(), "0,2,4-5");
        assert_eq!(List(&[]).to_string(), "");
        let p = Placement {
            switch: 3,
            workers: vec![0, 1, 2],
        };
        assert_eq!(p.to_string(), "switch on CPU 3, workers on CPUs 0-2");
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_thread_pinned_runs_only_where_it_was_put() {
        let cpus = allowed().unwrap();
        assert!(!cpus.is_empty());
        let first = cpus[0];
        std::thread::spawn(move || {
            pin(&[first]).unwrap();
            assert_eq!(allowed().unwrap(), vec![first]);
        })
        .join()
        .unwrap();
        // Only the spawned thread was pinned.
        assert_eq!(allowed().unwrap(), cpus);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn cpus_out_of_reach_are_refused_by_name() {
        let err = check(&[allowed().unwrap()[0], 100_000])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("CPU 100000: this process may run only on CPUs "),
            "{err}"
        );
        let err = pin(&[1 << 20]).unwrap_err().to_string();
        assert!(err.contains("CPUs 1048576: pick some of 0-1023"), "{err}");
        assert!(pin(&[]).is_err());
    }
}
