//! The Environment Abstraction Layer: initialised once per process.
//!
//! DPDK allows one `rte_eal_init` per process (a second call fails even after
//! the first failed), so [`Eal::init`] remembers the outcome: a later call
//! with the same arguments gets the same handle (or the same error), one
//! with other arguments gets [`Error::EalAgain`].

use std::ffi::CString;
use std::sync::Mutex;

use crate::error::{errno, strerror, Error};

/// Proof that the EAL is up; cheap to copy.
#[derive(Debug, Clone, Copy)]
pub struct Eal {
    _private: (),
}

/// What the first `init` did: its arguments and its result.
static STATE: Mutex<Option<(String, Result<(), String>)>> = Mutex::new(None);

impl Eal {
    /// Initialises the EAL with `args` (as on a DPDK command line, without
    /// the program name), for example `--no-huge -m 512 --no-pci --vdev
    /// net_null0`.
    pub fn init<S: AsRef<str>>(args: &[S]) -> Result<Eal, Error> {
        let joined = args
            .iter()
            .map(|a| a.as_ref())
            .collect::<Vec<_>>()
            .join(" ");
        let mut state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((first, outcome)) = state.as_ref() {
            if *first != joined {
                return Err(Error::EalAgain {
                    first: first.clone(),
                    second: joined,
                });
            }
            return match outcome {
                Ok(()) => Ok(Eal { _private: () }),
                Err(reason) => Err(Error::Eal {
                    args: joined,
                    reason: reason.clone(),
                }),
            };
        }
        let outcome = init_once(args);
        *state = Some((joined.clone(), outcome.clone()));
        match outcome {
            Ok(()) => Ok(Eal { _private: () }),
            Err(reason) => Err(Error::Eal {
                args: joined,
                reason,
            }),
        }
    }

    /// Splits an EAL argument string on whitespace (no quoting: EAL
    /// arguments have no spaces in practice) and initialises.
    pub fn init_str(args: &str) -> Result<Eal, Error> {
        let args: Vec<&str> = args.split_whitespace().collect();
        Eal::init(&args)
    }

    /// The handle, if the EAL is already up in this process.
    pub fn get() -> Result<Eal, Error> {
        let state = STATE.lock().unwrap_or_else(|p| p.into_inner());
        match state.as_ref() {
            Some((_, Ok(()))) => Ok(Eal { _private: () }),
            _ => Err(Error::NoEal),
        }
    }
}

fn init_once<S: AsRef<str>>(args: &[S]) -> Result<(), String> {
    let mut owned = vec![CString::new("inagg").expect("no NUL")];
    for a in args {
        owned.push(
            CString::new(a.as_ref())
                .map_err(|_| format!("argument `{}` contains a NUL byte", a.as_ref()))?,
        );
    }
    // rte_eal_init may permute argv: give it its own array of pointers.
    let mut argv: Vec<*mut libc::c_char> = owned.iter().map(|c| c.as_ptr() as *mut _).collect();
    let argc = argv.len() as i32;
    // SAFETY: argv points at NUL-terminated strings that outlive the call
    // (DPDK keeps no pointer into them after parsing, except the program
    // name, which we leak below).
    let ret = unsafe { crate::sys::rte_eal_init(argc, argv.as_mut_ptr()) };
    std::mem::forget(owned);
    if ret < 0 {
        let code = errno();
        let hint = match code {
            libc::EINVAL => " (an argument is not valid: check the spelling of each EAL option)",
            libc::EALREADY => " (the EAL was initialised before)",
            libc::ENOMEM | libc::EACCES => {
                " (memory: pass --no-huge -m 512, or reserve hugepages, and run as root)"
            }
            _ => "",
        };
        return Err(format!("{}{hint}", strerror(code)));
    }
    Ok(())
}
