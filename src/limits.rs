//! Checks of sizes and durations from the command line, made before any
//! work starts, so that a number too large for this machine or for a
//! `Duration` is a clear error instead of an abort or a panic halfway.

use std::time::Duration;

use anyhow::{bail, Result};

/// The longest duration a flag may give: far beyond any real timeout, and
/// far enough below `Duration`'s and `Instant`'s limits that adding it to
/// the current time cannot overflow.
const MAX_SECONDS: f64 = 1e9;

/// `value` seconds of flag `flag` as a `Duration`: positive and finite, or
/// also zero where `zero_ok`, and at most about 31 years.
pub fn seconds(flag: &str, value: f64, zero_ok: bool) -> Result<Duration> {
    let allowed = if zero_ok { value >= 0.0 } else { value > 0.0 };
    if !(allowed && value.is_finite()) {
        let what = if zero_ok {
            "zero or a positive"
        } else {
            "a positive"
        };
        bail!("{flag} must be {what} number of seconds, not {value}");
    }
    if value > MAX_SECONDS {
        bail!("{flag} {value} s is more than the {MAX_SECONDS:e} s allowed");
    }
    Ok(Duration::from_secs_f64(value))
}

/// Fails when `bytes` of memory for `what` is more than this machine has
/// available (Linux's MemAvailable; no check where it cannot be read).
pub fn ensure_memory(bytes: u128, what: &str) -> Result<()> {
    let Some(available) = available_memory() else {
        return Ok(());
    };
    if bytes > u128::from(available) {
        bail!(
            "{what} needs {:.1} GiB of memory, and this machine has {:.1} GiB available",
            bytes as f64 / GIB,
            available as f64 / GIB
        );
    }
    Ok(())
}

const GIB: f64 = (1u64 << 30) as f64;

/// MemAvailable from /proc/meminfo, bytes.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_are_checked_before_they_are_made() {
        assert_eq!(
            seconds("--t", 1.5, false).unwrap(),
            Duration::from_millis(1500)
        );
        assert_eq!(seconds("--t", 0.0, true).unwrap(), Duration::ZERO);
        let err = |v: f64, zero_ok| seconds("--t", v, zero_ok).unwrap_err().to_string();
        assert!(
            err(0.0, false).contains("--t must be a positive number"),
            "{}",
            err(0.0, false)
        );
        assert!(err(-1.0, true).contains("zero or a positive"));
        assert!(err(f64::NAN, true).contains("NaN"));
        assert!(
            err(1e20, false).contains("more than"),
            "{}",
            err(1e20, false)
        );
    }

    #[test]
    fn more_memory_than_the_machine_has_is_refused() {
        assert!(ensure_memory(1, "a byte").is_ok());
        let err = ensure_memory(u128::from(u64::MAX) * 4, "the tensor").unwrap_err();
        assert!(err.to_string().starts_with("the tensor needs"), "{err}");
    }
}
