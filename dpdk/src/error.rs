//! Errors that say what DPDK said.

use std::ffi::CStr;

/// A DPDK call that failed, with DPDK's own explanation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `rte_eal_init` refused the arguments or the environment.
    #[error("DPDK EAL initialisation failed with arguments `{args}`: {reason} (DPDK's log above says which argument or resource)")]
    Eal { args: String, reason: String },
    /// The EAL was already initialised in this process with other arguments.
    #[error("DPDK EAL already initialised in this process with `{first}`; one EAL per process (asked for `{second}`)")]
    EalAgain { first: String, second: String },
    /// A call that needs the EAL came before it was initialised.
    #[error("DPDK EAL not initialised: call Eal::init first")]
    NoEal,
    /// No port of that name (or id).
    #[error(
        "no DPDK port `{0}`; ports are created by --vdev or by probing devices (EAL arguments)"
    )]
    NoPort(String),
    /// Any other DPDK call, with the call and DPDK's error string.
    #[error("{call} failed: {reason}")]
    Call { call: String, reason: String },
    /// A request DPDK would accept but inagg cannot serve.
    #[error("{0}")]
    Invalid(String),
}

/// DPDK's text for an errno value (positive or negative).
pub fn strerror(code: i32) -> String {
    // SAFETY: rte_strerror returns a pointer to a static or thread-local
    // string that stays valid until the next call on this thread; we copy it.
    unsafe {
        let p = crate::sys::rte_strerror(code.abs());
        if p.is_null() {
            return format!("error {code}");
        }
        CStr::from_ptr(p).to_string_lossy().into_owned()
    }
}

/// The current `rte_errno`.
pub fn errno() -> i32 {
    // SAFETY: reads a per-thread variable.
    unsafe { crate::sys::inagg_errno() }
}

/// Turns a DPDK return code (negative errno on failure) into a result.
pub(crate) fn check(call: impl FnOnce() -> String, ret: i32) -> Result<i32, Error> {
    if ret < 0 {
        Err(Error::Call {
            call: call(),
            reason: strerror(ret),
        })
    } else {
        Ok(ret)
    }
}

/// A failed call that reported through `rte_errno` (a null pointer or -1).
pub(crate) fn from_errno(call: impl Into<String>) -> Error {
    Error::Call {
        call: call.into(),
        reason: strerror(errno()),
    }
}
