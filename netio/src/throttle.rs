//! A bound on how often a kind of log line is written: a flood of
//! strangers at a control endpoint (each refused, each worth a line on its
//! own) must not become a flood of log lines, which costs the endpoint
//! CPU and the operator's disk. At most so many lines a second pass;
//! the next line that passes says how many were left out.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The lines of one kind a second, and those left out.
#[derive(Debug)]
pub struct Throttle {
    per_second: u32,
    window: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    start: Option<Instant>,
    passed: u32,
    left_out: u64,
}

impl Throttle {
    /// At most `per_second` lines a second.
    pub const fn new(per_second: u32) -> Throttle {
        Throttle {
            per_second,
            window: Mutex::new(Window {
                start: None,
                passed: 0,
                left_out: 0,
            }),
        }
    }

    /// Whether a line may be written now: `Some(n)` with the lines left
    /// out before it (to say so), `None` to leave this one out.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(Instant::now())
    }

    /// [`Throttle::allow`] at `now`.
    pub fn allow_at(&self, now: Instant) -> Option<u64> {
        let mut w = self.window.lock().unwrap_or_else(|p| p.into_inner());
        let fresh = w
            .start
            .is_none_or(|s| now.saturating_duration_since(s) >= Duration::from_secs(1));
        if fresh {
            w.start = Some(now);
            w.passed = 0;
        }
        if w.passed >= self.per_second {
            w.left_out += 1;
            return None;
        }
        w.passed += 1;
        Some(std::mem::take(&mut w.left_out))
    }
}

/// " (N like it left out)" after a line that passed, or nothing.
pub fn left_out(n: u64) -> String {
    if n == 0 {
        String::new()
    } else {
        format!(" ({n} lines like it left out)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_of_lines_is_cut_to_the_rate_and_counted() {
        let t = Throttle::new(3);
        let t0 = Instant::now();
        let passed: Vec<Option<u64>> = (0..10).map(|_| t.allow_at(t0)).collect();
        assert_eq!(&passed[..3], &[Some(0), Some(0), Some(0)]);
        assert!(passed[3..].iter().all(Option::is_none));
        // A second later the next line passes and says 7 were left out.
        assert_eq!(t.allow_at(t0 + Duration::from_secs(1)), Some(7));
        assert_eq!(t.allow_at(t0 + Duration::from_secs(1)), Some(0));
        assert_eq!(left_out(7), " (7 lines like it left out)");
        assert_eq!(left_out(0), "");
    }
}
