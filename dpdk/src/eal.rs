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

impl Eal {
    /// Makes the calling thread an EAL thread until the guard drops.
    ///
    /// Why: a thread the EAL did not start has no lcore id, and a mempool
    /// serves such a thread from its shared ring alone (a compare-and-swap
    /// per allocation and per free). A registered thread gets an lcore id
    /// and with it the pool's per-core cache. The main thread is an lcore
    /// already; a data-plane thread of its own must register.
    ///
    /// On a thread that is an lcore already this changes nothing, and
    /// neither does dropping its guard (DPDK would give it a second id and
    /// take both away). DPDK refuses registration while a secondary process
    /// is attached, and allows none to attach afterwards.
    pub fn register_thread(self) -> Result<LcoreThread, Error> {
        if self.lcore_id().is_some() {
            return Ok(LcoreThread {
                registered: false,
                _not_send: std::marker::PhantomData,
            });
        }
        // SAFETY: the EAL is up (self proves it); registration touches only
        // this thread's per-lcore variables and the EAL's lcore table.
        let ret = unsafe { crate::sys::rte_thread_register() };
        if ret < 0 {
            let code = errno();
            let hint = match code {
                libc::ENOMEM => " (every lcore id is taken: start fewer data-path threads)",
                libc::EINVAL => {
                    " (DPDK's multi-process channel is in use: a secondary process is attached)"
                }
                _ => "",
            };
            return Err(Error::Call {
                call: "rte_thread_register".into(),
                reason: format!("{}{hint}", strerror(code)),
            });
        }
        Ok(LcoreThread {
            registered: true,
            _not_send: std::marker::PhantomData,
        })
    }

    /// The calling thread's lcore id, or `None` on a thread the EAL does not
    /// know.
    pub fn lcore_id(self) -> Option<u32> {
        // SAFETY: reads a per-thread variable.
        let id = unsafe { crate::sys::inagg_lcore_id() };
        (id != u32::MAX).then_some(id)
    }
}

/// A thread registered with the EAL ([`Eal::register_thread`]); dropping it
/// gives the lcore id back. Not `Send`: it belongs to the thread it
/// registered.
#[derive(Debug)]
pub struct LcoreThread {
    /// False on a thread that was an lcore before: nothing to give back.
    registered: bool,
    _not_send: std::marker::PhantomData<*const ()>,
}

impl Drop for LcoreThread {
    fn drop(&mut self) {
        if self.registered {
            // SAFETY: this thread registered itself (LcoreThread is not Send).
            unsafe { crate::sys::rte_thread_unregister() }
        }
    }
}
