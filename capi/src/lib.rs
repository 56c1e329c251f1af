//! inagg's worker as a C library: `libinagg_capi.so` with
//! `include/inagg.h`, for training code outside Rust (the Python package in
//! `python/` loads it with ctypes, with no compiler involved).
//!
//! The ABI is small on purpose: a worker is created from a configuration
//! string ([`config`]), all-reduces float32 or int32 buffers in place, and
//! is freed. Every entry point returns a status code, never unwinds into
//! the caller (a panic becomes `INAGG_E_PANIC`), checks its pointers, and
//! leaves a message for `inagg_last_error` on the calling thread.
//!
//! A worker whose all-reduce failed refuses further calls: its job's slots
//! may hold that call's partial state, and the way on is a new worker, a
//! new session (docs/PROTOCOL.md, "Sessions"), for every worker of the job.

pub mod config;
mod priority;

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use inagg_host_agent::priority::Priority;
use inagg_host_agent::{bf16, f16, Error, Stats, Worker};

use crate::priority::{Dtype, Schedule};

/// The ABI's version: raised whenever a signature or a struct changes, or
/// entry points are added (2: `inagg_allreduce_f16` and `_bf16`).
pub const ABI_VERSION: u32 = 2;

/// Success.
pub const INAGG_OK: c_int = 0;
/// A null pointer, a misaligned buffer, a length too large: the caller's.
pub const INAGG_E_ARGUMENT: c_int = -1;
/// The configuration string is unusable, or the controller refused it.
pub const INAGG_E_CONFIG: c_int = -2;
/// A socket operation failed, or the controller could not be reached.
pub const INAGG_E_IO: c_int = -3;
/// No progress within the configured timeout: the switch, the job or
/// another worker is not as this worker expects (the message says which).
pub const INAGG_E_TIMEOUT: c_int = -4;
/// The DPDK data path failed.
pub const INAGG_E_DPDK: c_int = -5;
/// An earlier all-reduce of this worker failed; create a new one.
pub const INAGG_E_FAILED: c_int = -6;
/// A bug in inagg (a panic, caught at the boundary).
pub const INAGG_E_PANIC: c_int = -7;

/// Counters of one all-reduce, as in `inagg_host_agent::Stats`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InaggStats {
    pub packets_sent: u64,
    pub packets_received: u64,
    pub retransmissions: u64,
    pub timeouts: u64,
    pub stale_results: u64,
    pub handshakes: u64,
    pub handshake_retries: u64,
    pub malformed: u64,
    pub foreign: u64,
    pub send_errors: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub payload_bytes: u64,
    pub elapsed_ns: u64,
}

impl From<&Stats> for InaggStats {
    fn from(s: &Stats) -> Self {
        InaggStats {
            packets_sent: s.packets_sent,
            packets_received: s.packets_received,
            retransmissions: s.retransmissions,
            timeouts: s.timeouts,
            stale_results: s.stale_results,
            handshakes: s.handshakes,
            handshake_retries: s.handshake_retries,
            malformed: s.malformed,
            foreign: s.foreign,
            send_errors: s.send_errors,
            bytes_sent: s.bytes_sent,
            bytes_received: s.bytes_received,
            payload_bytes: s.payload_bytes,
            elapsed_ns: u64::try_from(s.elapsed.as_nanos()).unwrap_or(u64::MAX),
        }
    }
}

/// The opaque handle C holds: a worker behind a lock, so that two threads
/// calling at once wait for each other instead of racing.
pub struct InaggWorker {
    state: Mutex<State>,
}

struct State {
    /// The worker; its schedule's thread holds it while one runs.
    worker: Option<Worker>,
    /// Why an earlier all-reduce failed, once one has.
    failed: Option<String>,
    /// The schedule running, if one is.
    schedule: Option<Arc<Schedule>>,
    /// What `inagg_worker_info` writes (fixed at creation).
    info: String,
}

impl State {
    /// The worker for a call of its own: refused once a call has failed,
    /// and while a schedule runs.
    fn ready(&mut self) -> Result<&mut Worker, Failure> {
        if let Some(why) = &self.failed {
            return Err(Failure::new(
                INAGG_E_FAILED,
                format!(
                    "an earlier all-reduce of this worker failed ({why}); free it and create new \
                     workers for the job (a new session), or register again with the controller"
                ),
            ));
        }
        if self.schedule.is_some() {
            return Err(Failure::new(
                INAGG_E_ARGUMENT,
                "a schedule is running on this worker; inagg_sched_end it first",
            ));
        }
        Ok(self.worker.as_mut().expect("a worker outside a schedule"))
    }

    /// Remembers why a call failed: the job's slots may hold its state.
    fn fail(&mut self, e: Failure) -> Failure {
        self.failed = Some(e.message.clone());
        e
    }
}

/// A failure at the boundary: its code and what to tell the caller.
struct Failure {
    code: c_int,
    message: String,
}

impl Failure {
    fn new(code: c_int, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match e {
            Error::Config(_) => INAGG_E_CONFIG,
            Error::Dpdk(_) => INAGG_E_DPDK,
            Error::Io { .. } => INAGG_E_IO,
            Error::Timeout { .. } => INAGG_E_TIMEOUT,
        };
        Failure::new(code, e.to_string())
    }
}

thread_local! {
    /// The last failure on this thread: its code and its message.
    static LAST_ERROR: RefCell<(c_int, CString)> = RefCell::new((INAGG_OK, CString::default()));
}

fn set_last_error(code: c_int, message: &str) {
    let text = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = (code, text));
}

/// Runs `f` at the boundary: a failure or a panic becomes a code and the
/// thread's last error.
fn boundary<T>(on_error: T, f: impl FnOnce() -> Result<T, Failure>) -> (T, c_int) {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(v)) => {
            set_last_error(INAGG_OK, "");
            (v, INAGG_OK)
        }
        Ok(Err(failure)) => {
            set_last_error(failure.code, &failure.message);
            (on_error, failure.code)
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            set_last_error(
                INAGG_E_PANIC,
                &format!("inagg panicked (a bug, please report it): {what}"),
            );
            (on_error, INAGG_E_PANIC)
        }
    }
}

/// The ABI version the library was built with (`INAGG_ABI_VERSION`).
#[no_mangle]
pub extern "C" fn inagg_abi_version() -> u32 {
    ABI_VERSION
}

/// The library's version, e.g. "0.1.0".
#[no_mangle]
pub extern "C" fn inagg_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The message of the last failed call on this thread ("" after a call
/// that succeeded); valid until the thread's next inagg call.
#[no_mangle]
pub extern "C" fn inagg_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().1.as_ptr())
}

/// The code of the last call on this thread (`INAGG_OK` after success).
#[no_mangle]
pub extern "C" fn inagg_last_error_code() -> c_int {
    LAST_ERROR.with(|e| e.borrow().0)
}

/// A worker from a configuration string (see [`config`]); NULL on failure,
/// with `inagg_last_error` saying why. With `controller=`, this waits for
/// the controller to admit the job (up to `register_wait` seconds).
///
/// # Safety
/// `config` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn inagg_worker_new(config: *const c_char) -> *mut InaggWorker {
    boundary(std::ptr::null_mut(), || {
        if config.is_null() {
            return Err(Failure::new(INAGG_E_ARGUMENT, "config is NULL"));
        }
        // SAFETY: the caller passes a NUL-terminated string.
        let text = unsafe { CStr::from_ptr(config) }
            .to_str()
            .map_err(|_| Failure::new(INAGG_E_CONFIG, "config is not UTF-8"))?;
        let config_error = |m: String| Failure::new(INAGG_E_CONFIG, format!("config: {m}"));
        let settings = config::parse(text).map_err(config_error)?;
        // Checked before a controller is asked to admit the worker.
        let backend = settings.backend().map_err(config_error)?;
        let agent = settings.agent_config().map_err(|e| {
            let code = match e {
                config::SetupError::Unreachable(_) => INAGG_E_IO,
                config::SetupError::Invalid(_) | config::SetupError::Refused(_) => INAGG_E_CONFIG,
            };
            Failure::new(code, format!("config: {e}"))
        })?;
        let worker = open(agent, backend)?;
        Ok(Box::into_raw(Box::new(InaggWorker {
            state: Mutex::new(State {
                info: info(&worker),
                worker: Some(worker),
                failed: None,
                schedule: None,
            }),
        })))
    })
    .0
}

/// The worker on its data path.
fn open(agent: inagg_host_agent::AgentConfig, backend: config::Backend) -> Result<Worker, Failure> {
    match backend {
        config::Backend::Socket => Ok(Worker::new(agent)?),
        config::Backend::Shm(path) => Ok(Worker::with_shm(agent, &path)?),
        config::Backend::Dpdk(d) => open_dpdk(agent, d),
    }
}

#[cfg(feature = "dpdk")]
fn open_dpdk(
    agent: inagg_host_agent::AgentConfig,
    d: config::DpdkSettings,
) -> Result<Worker, Failure> {
    use inagg_host_agent::dpdk::DpdkOptions;
    let std::net::SocketAddr::V4(local) = agent.bind else {
        return Err(Failure::new(
            INAGG_E_CONFIG,
            format!(
                "config: bind={}: backend=dpdk needs this worker's IPv4 address and port",
                agent.bind
            ),
        ));
    };
    let mut options = DpdkOptions::new(d.eal, local);
    options.port = d.port;
    options.switch_mac = d.switch_mac;
    options.queues = d.queues;
    Ok(Worker::new_dpdk(agent, &options)?)
}

#[cfg(not(feature = "dpdk"))]
fn open_dpdk(_: inagg_host_agent::AgentConfig, _: config::DpdkSettings) -> Result<Worker, Failure> {
    Err(Failure::new(
        INAGG_E_CONFIG,
        "config: backend=dpdk: this library was built without DPDK; rebuild it with \
         `cargo build --release -p inagg-capi --features dpdk` (needs apt's libdpdk-dev)",
    ))
}

/// Frees a worker (NULL is ignored). No call on it may be running.
///
/// # Safety
/// `worker` is NULL or came from `inagg_worker_new` and was not freed.
#[no_mangle]
pub unsafe extern "C" fn inagg_worker_free(worker: *mut InaggWorker) {
    if !worker.is_null() {
        // SAFETY: the caller gives up a pointer from Box::into_raw.
        let _ = catch_unwind(AssertUnwindSafe(|| drop(unsafe { Box::from_raw(worker) })));
    }
}

/// Runs `f` on the worker's state under its lock, refusing a NULL worker
/// (whether a call may run is `State::ready`'s to say).
///
/// # Safety
/// `worker` is NULL or a live pointer from `inagg_worker_new`.
unsafe fn with_worker<T>(
    worker: *const InaggWorker,
    f: impl FnOnce(&mut State) -> Result<T, Failure>,
) -> Result<T, Failure> {
    if worker.is_null() {
        return Err(Failure::new(INAGG_E_ARGUMENT, "worker is NULL"));
    }
    // SAFETY: the caller passes a live worker.
    let handle = unsafe { &*worker };
    let mut state = handle.state.lock().unwrap_or_else(|p| p.into_inner());
    f(&mut state)
}

/// The buffer `(data, len)` as a slice, after the checks C cannot make for
/// us: not NULL (unless empty), aligned, not past the address space.
///
/// # Safety
/// `data` is NULL or points to `len` initialised elements that nothing else
/// touches during the call.
unsafe fn buffer<'a, T>(data: *mut T, len: usize) -> Result<&'a mut [T], Failure> {
    if len == 0 {
        return Ok(&mut []);
    }
    if data.is_null() {
        return Err(Failure::new(
            INAGG_E_ARGUMENT,
            format!("data is NULL with len {len}"),
        ));
    }
    let size = std::mem::size_of::<T>();
    if !data.is_aligned() {
        return Err(Failure::new(
            INAGG_E_ARGUMENT,
            format!("data at {data:p} is not aligned to {size} bytes"),
        ));
    }
    if len > isize::MAX as usize / size {
        return Err(Failure::new(
            INAGG_E_ARGUMENT,
            format!("len {len} is too large"),
        ));
    }
    // SAFETY: checked above; the caller vouches for the memory.
    Ok(unsafe { std::slice::from_raw_parts_mut(data, len) })
}

/// An all-reduce entry point's whole work: the buffer checked, the call
/// made on the worker under [`boundary`], its code returned.
///
/// # Safety
/// As the entry points': `worker` is live; `data` holds `len` elements;
/// `stats` is NULL or valid.
unsafe fn allreduce_call<T>(
    worker: *mut InaggWorker,
    data: *mut T,
    len: usize,
    stats: *mut InaggStats,
    op: fn(&mut Worker, &mut [T]) -> inagg_host_agent::Result<Stats>,
) -> c_int {
    boundary((), || {
        // SAFETY: the caller's contract.
        let data = unsafe { buffer(data, len)? };
        // SAFETY: the caller's contract.
        unsafe { with_worker(worker, |s| allreduce(s, data, stats, op)) }
    })
    .1
}

/// One all-reduce on a worker: refused once a call has failed, and a
/// failure marks the worker.
fn allreduce<T>(
    state: &mut State,
    data: &mut [T],
    stats: *mut InaggStats,
    op: impl FnOnce(&mut Worker, &mut [T]) -> inagg_host_agent::Result<Stats>,
) -> Result<(), Failure> {
    match op(state.ready()?, data) {
        Ok(s) => {
            if !stats.is_null() {
                // SAFETY: the caller passes NULL or room for the struct.
                unsafe { stats.write(InaggStats::from(&s)) };
            }
            Ok(())
        }
        Err(e) => Err(state.fail(e.into())),
    }
}

/// Sums `data` (len floats) across the job's workers in place, quantized
/// with a block exponent (docs/PROTOCOL.md states the error bound). Every
/// worker of the job makes the same calls with the same lengths. `stats`
/// may be NULL. Returns `INAGG_OK` or an error code.
///
/// # Safety
/// `worker` is live; `data` holds `len` floats; `stats` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn inagg_allreduce_f32(
    worker: *mut InaggWorker,
    data: *mut f32,
    len: usize,
    stats: *mut InaggStats,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { allreduce_call(worker, data, len, stats, Worker::allreduce_f32) }
}

/// Sums `data` (len int32) across the job's workers in place, exactly
/// (wrapping on overflow, as the switch does). As `inagg_allreduce_f32`.
///
/// # Safety
/// `worker` is live; `data` holds `len` int32; `stats` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn inagg_allreduce_i32(
    worker: *mut InaggWorker,
    data: *mut i32,
    len: usize,
    stats: *mut InaggStats,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { allreduce_call(worker, data, len, stats, Worker::allreduce_i32) }
}

/// Sums `data` (len IEEE binary16 values, as `uint16_t` bit patterns)
/// across the job's workers in place: widened to float32, all-reduced as
/// `inagg_allreduce_f32` does (the packets are the same, so workers of one
/// job may mix the two), and rounded back to nearest-even; sums past
/// 65504 become infinite.
///
/// # Safety
/// `worker` is live; `data` holds `len` uint16_t; `stats` is NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn inagg_allreduce_f16(
    worker: *mut InaggWorker,
    data: *mut u16,
    len: usize,
    stats: *mut InaggStats,
) -> c_int {
    // SAFETY: the caller's contract; f16 is a transparent u16.
    unsafe {
        allreduce_call(
            worker,
            data.cast::<f16>(),
            len,
            stats,
            Worker::allreduce_f16,
        )
    }
}

/// `inagg_allreduce_f16` for bfloat16 values (the top halves of float32s).
///
/// # Safety
/// As `inagg_allreduce_f16`.
#[no_mangle]
pub unsafe extern "C" fn inagg_allreduce_bf16(
    worker: *mut InaggWorker,
    data: *mut u16,
    len: usize,
    stats: *mut InaggStats,
) -> c_int {
    // SAFETY: the caller's contract; bf16 is a transparent u16.
    unsafe {
        allreduce_call(
            worker,
            data.cast::<bf16>(),
            len,
            stats,
            Worker::allreduce_bf16,
        )
    }
}

/// `INAGG_DTYPE_F32`: a schedule of float32 tensors.
pub const INAGG_DTYPE_F32: c_int = 0;
/// `INAGG_DTYPE_I32`: a schedule of int32 tensors.
pub const INAGG_DTYPE_I32: c_int = 1;
/// `INAGG_DTYPE_F16`: a schedule of IEEE binary16 tensors.
pub const INAGG_DTYPE_F16: c_int = 2;
/// `INAGG_DTYPE_BF16`: a schedule of bfloat16 tensors.
pub const INAGG_DTYPE_BF16: c_int = 3;

/// Starts a schedule of `tensors` tensors of `dtype` on the worker:
/// `policy` is "fifo", "p3" or "bytescheduler", `slice` the elements per
/// slice and `credit` the slices committed per epoch (1 for p3). The
/// worker's own all-reduces are refused until `inagg_sched_end`.
///
/// # Safety
/// `worker` is live; `policy` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn inagg_sched_begin(
    worker: *mut InaggWorker,
    policy: *const c_char,
    slice: usize,
    credit: usize,
    tensors: usize,
    dtype: c_int,
) -> c_int {
    boundary((), || {
        if policy.is_null() {
            return Err(Failure::new(INAGG_E_ARGUMENT, "policy is NULL"));
        }
        // SAFETY: a NUL-terminated string.
        let name = unsafe { CStr::from_ptr(policy) }.to_string_lossy();
        let policy = priority::policy(&name, slice, credit)?;
        let tensors = priority::tensor_count(tensors)?;
        let dtype = match dtype {
            INAGG_DTYPE_F32 => Dtype::F32,
            INAGG_DTYPE_I32 => Dtype::I32,
            INAGG_DTYPE_F16 => Dtype::F16,
            INAGG_DTYPE_BF16 => Dtype::Bf16,
            other => {
                return Err(Failure::new(
                    INAGG_E_ARGUMENT,
                    format!("dtype {other}: give INAGG_DTYPE_F32, _I32, _F16 or _BF16"),
                ))
            }
        };
        // SAFETY: the caller's contract.
        unsafe {
            with_worker(worker, |s| {
                s.ready()?;
                let w = s.worker.take().expect("ready checked it");
                s.schedule = Some(Arc::new(Schedule::start(w, dtype, policy, tensors)));
                Ok(())
            })
        }
    })
    .1
}

/// The running schedule of a worker, out of its lock (submitting and
/// waiting must not hold the worker's lock while they block).
///
/// # Safety
/// `worker` is NULL or live.
unsafe fn schedule_of(worker: *const InaggWorker) -> Result<Arc<Schedule>, Failure> {
    // SAFETY: the caller's contract.
    unsafe {
        with_worker(worker, |s| {
            s.schedule.clone().ok_or_else(|| {
                Failure::new(
                    INAGG_E_ARGUMENT,
                    "no schedule is running; inagg_sched_begin one",
                )
            })
        })
    }
}

/// Submits a tensor to the running schedule; `*seq` (if not NULL) gets its
/// number, counted from 0 in submission order. Every worker submits the
/// same tensors (lengths, ranks, classes) in the same order. `rank` orders
/// service (lower first: the layer's place in the forward pass), `class`
/// is the packets' priority class. The buffer must stay valid, and
/// untouched, until `inagg_sched_wait` reports its number; the sum is
/// written into it then.
///
/// # Safety
/// As `inagg_allreduce_f32`, and `data` outlives its report.
#[no_mangle]
pub unsafe extern "C" fn inagg_sched_submit_f32(
    worker: *mut InaggWorker,
    data: *mut f32,
    len: usize,
    rank: u32,
    class: u8,
    seq: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { submit(worker, Dtype::F32, data, len, Priority { rank, class }, seq) }
}

/// `inagg_sched_submit_f32` for int32 tensors.
///
/// # Safety
/// As `inagg_sched_submit_f32`.
#[no_mangle]
pub unsafe extern "C" fn inagg_sched_submit_i32(
    worker: *mut InaggWorker,
    data: *mut i32,
    len: usize,
    rank: u32,
    class: u8,
    seq: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { submit(worker, Dtype::I32, data, len, Priority { rank, class }, seq) }
}

/// `inagg_sched_submit_f32` for binary16 tensors (their bit patterns).
///
/// # Safety
/// As `inagg_sched_submit_f32`.
#[no_mangle]
pub unsafe extern "C" fn inagg_sched_submit_f16(
    worker: *mut InaggWorker,
    data: *mut u16,
    len: usize,
    rank: u32,
    class: u8,
    seq: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { submit(worker, Dtype::F16, data, len, Priority { rank, class }, seq) }
}

/// `inagg_sched_submit_f32` for bfloat16 tensors (their bit patterns).
///
/// # Safety
/// As `inagg_sched_submit_f32`.
#[no_mangle]
pub unsafe extern "C" fn inagg_sched_submit_bf16(
    worker: *mut InaggWorker,
    data: *mut u16,
    len: usize,
    rank: u32,
    class: u8,
    seq: *mut usize,
) -> c_int {
    // SAFETY: the caller's contract.
    unsafe {
        submit(
            worker,
            Dtype::Bf16,
            data,
            len,
            Priority { rank, class },
            seq,
        )
    }
}

/// # Safety
/// As `inagg_sched_submit_f32`.
unsafe fn submit<T>(
    worker: *mut InaggWorker,
    dtype: Dtype,
    data: *mut T,
    len: usize,
    priority: Priority,
    seq: *mut usize,
) -> c_int {
    boundary((), || {
        // SAFETY: the caller's contract (checked for NULL and alignment).
        let data = unsafe { buffer(data, len)? };
        // SAFETY: the caller's contract.
        let schedule = unsafe { schedule_of(worker)? };
        // SAFETY: the caller keeps the buffer until its report.
        let n = unsafe { schedule.submit(dtype, data.as_mut_ptr() as usize, len, priority)? };
        if !seq.is_null() {
            // SAFETY: the caller passes NULL or room for a size_t.
            unsafe { seq.write(n) };
        }
        Ok(())
    })
    .1
}

/// Blocks until the next tensor's sum is complete (in the order the sums
/// complete, which the policy decides), writes it into the tensor's buffer
/// and sets `*seq` to its number. Refused, instead of blocking for ever,
/// when every submitted tensor has been reported.
///
/// # Safety
/// `worker` is live; `seq` is NULL or room for a size_t.
#[no_mangle]
pub unsafe extern "C" fn inagg_sched_wait(worker: *mut InaggWorker, seq: *mut usize) -> c_int {
    boundary((), || {
        // SAFETY: the caller's contract.
        let schedule = unsafe { schedule_of(worker)? };
        let n = schedule.wait()?;
        if !seq.is_null() {
            // SAFETY: as above.
            unsafe { seq.write(n) };
        }
        Ok(())
    })
    .1
}

/// Ends the running schedule and gives the worker back for plain
/// all-reduces: `transport` (if not NULL) gets the data path's counters
/// summed over the schedule's epochs, `epochs` (if not NULL) the epochs
/// run. A schedule ended before every tensor was submitted and reported,
/// or whose data path failed, is an error, and the worker is then failed.
///
/// # Safety
/// `worker` is live; `transport` and `epochs` are NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn inagg_sched_end(
    worker: *mut InaggWorker,
    transport: *mut InaggStats,
    epochs: *mut u64,
) -> c_int {
    boundary((), || {
        // SAFETY: the caller's contract.
        let schedule = unsafe { schedule_of(worker)? };
        let ended = schedule.end();
        // SAFETY: the caller's contract.
        unsafe {
            with_worker(worker, |s| {
                s.schedule = None;
                let Some((w, result)) = ended else {
                    return Err(s.fail(Failure::new(
                        INAGG_E_PANIC,
                        "the schedule's thread panicked (a bug, please report it)",
                    )));
                };
                s.worker = Some(w);
                let stats = result.map_err(|e| s.fail(e))?;
                if !transport.is_null() {
                    transport.write(InaggStats::from(&stats.transport));
                }
                if !epochs.is_null() {
                    epochs.write(stats.epochs);
                }
                Ok(())
            })
        }
    })
    .1
}

/// What the worker runs as, in JSON: job, worker, rank, workers, pool_size,
/// elements, generation, priority, switch, local (the bound address: the
/// endpoint to install), backend, timeout_s. Written like snprintf: at most
/// `size` bytes with the NUL, and the return value is the JSON's length
/// (write again with a larger buffer when it is not below `size`), or a
/// negative error code.
///
/// # Safety
/// `worker` is live; `out` is NULL (with `size` 0) or has `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn inagg_worker_info(
    worker: *const InaggWorker,
    out: *mut c_char,
    size: usize,
) -> c_int {
    let (written, code) = boundary(0, || {
        if out.is_null() && size > 0 {
            return Err(Failure::new(INAGG_E_ARGUMENT, "out is NULL with a size"));
        }
        // SAFETY: the caller's contract.
        let json = unsafe { with_worker(worker, |s| Ok(s.info.clone())) }?;
        let bytes = json.as_bytes();
        if size > 0 {
            let n = bytes.len().min(size - 1);
            // SAFETY: out has size bytes, n + 1 <= size.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.cast::<u8>(), n);
                *out.add(n) = 0;
            }
        }
        Ok(c_int::try_from(bytes.len()).unwrap_or(c_int::MAX))
    });
    if code == INAGG_OK {
        written
    } else {
        code
    }
}

fn info(worker: &Worker) -> String {
    let c = worker.config();
    serde_json::json!({
        "job": c.job,
        "worker": c.worker,
        "rank": c.rank,
        "workers": c.workers,
        "pool_size": c.pool_size,
        "elements": c.elements,
        "generation": c.generation,
        "priority": c.priority,
        "switch": c.switch.to_string(),
        "local": worker.local_addr().to_string(),
        "backend": worker.backend_name(),
        "timeout_s": c.give_up_after.as_secs_f64(),
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    fn last_error() -> String {
        // SAFETY: inagg_last_error returns a live NUL-terminated string.
        unsafe { CStr::from_ptr(inagg_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    /// A worker whose switch is a bound UDP socket that never answers.
    fn silent_worker(timeout: &str) -> (*mut InaggWorker, UdpSocket) {
        let switch = UdpSocket::bind("127.0.0.1:0").unwrap();
        let config = CString::new(format!(
            "switch={} bind=127.0.0.1:0 job=1 worker=0 workers=1 pool_size=4 timeout={timeout}",
            switch.local_addr().unwrap()
        ))
        .unwrap();
        // SAFETY: a NUL-terminated string.
        let w = unsafe { inagg_worker_new(config.as_ptr()) };
        assert!(!w.is_null(), "{}", last_error());
        (w, switch)
    }

    #[test]
    fn null_and_misaligned_arguments_are_refused_by_name() {
        // SAFETY: every pointer below is NULL, live or deliberately bad in
        // a way the functions check before use.
        unsafe {
            assert!(inagg_worker_new(std::ptr::null()).is_null());
            assert_eq!(
                (inagg_last_error_code(), last_error()),
                (INAGG_E_ARGUMENT, "config is NULL".into())
            );
            let bad = CString::new("job=1 wokers=2").unwrap();
            assert!(inagg_worker_new(bad.as_ptr()).is_null());
            assert_eq!(inagg_last_error_code(), INAGG_E_CONFIG);
            assert!(last_error().starts_with("config: unknown key \"wokers\""));

            let mut v = [0f32; 4];
            let code = inagg_allreduce_f32(
                std::ptr::null_mut(),
                v.as_mut_ptr(),
                4,
                std::ptr::null_mut(),
            );
            assert_eq!(
                (code, last_error()),
                (INAGG_E_ARGUMENT, "worker is NULL".into())
            );

            let (w, _switch) = silent_worker("5");
            let code = inagg_allreduce_i32(w, std::ptr::null_mut(), 3, std::ptr::null_mut());
            assert_eq!(
                (code, last_error()),
                (INAGG_E_ARGUMENT, "data is NULL with len 3".into())
            );
            let mut bytes = [0u32; 3];
            let odd = bytes.as_mut_ptr().cast::<u8>().add(1).cast::<i32>();
            assert_eq!(
                inagg_allreduce_i32(w, odd, 2, std::ptr::null_mut()),
                INAGG_E_ARGUMENT
            );
            assert!(
                last_error().ends_with("is not aligned to 4 bytes"),
                "{}",
                last_error()
            );
            let huge = inagg_allreduce_i32(
                w,
                bytes.as_mut_ptr().cast(),
                usize::MAX,
                std::ptr::null_mut(),
            );
            assert_eq!(
                (huge, last_error()),
                (INAGG_E_ARGUMENT, format!("len {} is too large", usize::MAX))
            );
            // None of those reached the worker: an empty call still works.
            let mut stats = InaggStats::default();
            assert_eq!(
                inagg_allreduce_f32(w, std::ptr::null_mut(), 0, &mut stats),
                INAGG_OK
            );
            assert_eq!((stats.packets_sent, last_error()), (0, String::new()));
            inagg_worker_free(w);
            inagg_worker_free(std::ptr::null_mut());
        }
    }

    #[test]
    fn info_is_written_like_snprintf() {
        let (w, switch) = silent_worker("5");
        // SAFETY: buffers of the sizes given.
        unsafe {
            let len = inagg_worker_info(w, std::ptr::null_mut(), 0);
            assert!(len > 0);
            let mut small = [0x55 as c_char; 8];
            assert_eq!(inagg_worker_info(w, small.as_mut_ptr(), 8), len);
            assert_eq!(
                CStr::from_ptr(small.as_ptr()).to_bytes(),
                b"{\"backe",
                "7 bytes and the NUL"
            );
            let mut full = vec![0 as c_char; len as usize + 1];
            assert_eq!(inagg_worker_info(w, full.as_mut_ptr(), full.len()), len);
            let info: serde_json::Value =
                serde_json::from_slice(CStr::from_ptr(full.as_ptr()).to_bytes()).unwrap();
            assert_eq!(info["switch"], switch.local_addr().unwrap().to_string());
            assert_eq!(
                (info["job"].as_u64(), info["workers"].as_u64()),
                (Some(1), Some(1))
            );
            assert_eq!(
                inagg_worker_info(w, std::ptr::null_mut(), 4),
                INAGG_E_ARGUMENT
            );
            assert_eq!(
                inagg_worker_info(std::ptr::null(), full.as_mut_ptr(), 4),
                INAGG_E_ARGUMENT
            );
            inagg_worker_free(w);
        }
    }

    #[test]
    fn a_failed_worker_refuses_further_calls() {
        let (w, _switch) = silent_worker("0.2");
        let mut v = [1i32; 10];
        // SAFETY: a live worker and a buffer of 10.
        unsafe {
            let code = inagg_allreduce_i32(w, v.as_mut_ptr(), 10, std::ptr::null_mut());
            assert_eq!(code, INAGG_E_TIMEOUT, "{}", last_error());
            assert!(
                last_error().starts_with("no result from the switch"),
                "{}",
                last_error()
            );
            let again = inagg_allreduce_i32(w, v.as_mut_ptr(), 10, std::ptr::null_mut());
            assert_eq!(again, INAGG_E_FAILED);
            assert!(
                last_error().starts_with("an earlier all-reduce of this worker failed (no result")
            );
            inagg_worker_free(w);
        }
        assert_eq!(v, [1; 10], "a failed call leaves the buffer alone");
    }

    #[test]
    fn schedule_calls_without_a_schedule_are_refused() {
        let (w, _switch) = silent_worker("5");
        let p3 = CString::new("p3").unwrap();
        let mut v = [0f32; 4];
        let mut seq = 0usize;
        // SAFETY: a live worker, live buffers, NUL-terminated strings.
        unsafe {
            assert_eq!(
                inagg_sched_begin(w, std::ptr::null(), 64, 1, 2, INAGG_DTYPE_F32),
                INAGG_E_ARGUMENT
            );
            assert_eq!(last_error(), "policy is NULL");
            assert_eq!(
                inagg_sched_begin(w, p3.as_ptr(), 64, 1, 2, 7),
                INAGG_E_ARGUMENT
            );
            assert_eq!(
                last_error(),
                "dtype 7: give INAGG_DTYPE_F32, _I32, _F16 or _BF16"
            );
            let none = "no schedule is running; inagg_sched_begin one";
            let submitted = inagg_sched_submit_f32(w, v.as_mut_ptr(), 4, 0, 0, &mut seq);
            assert_eq!((submitted, last_error()), (INAGG_E_ARGUMENT, none.into()));
            assert_eq!(
                (inagg_sched_wait(w, &mut seq), last_error()),
                (INAGG_E_ARGUMENT, none.into())
            );
            let ended = inagg_sched_end(w, std::ptr::null_mut(), std::ptr::null_mut());
            assert_eq!((ended, last_error()), (INAGG_E_ARGUMENT, none.into()));
            assert_eq!(
                inagg_sched_wait(std::ptr::null_mut(), &mut seq),
                INAGG_E_ARGUMENT
            );
            inagg_worker_free(w);
        }
    }

    #[test]
    fn the_version_strings_are_the_crates() {
        // SAFETY: a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(inagg_version()) };
        assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
        assert_eq!(inagg_abi_version(), ABI_VERSION);
        let header = include_str!("../include/inagg.h");
        assert!(header.contains(&format!("#define INAGG_ABI_VERSION {ABI_VERSION}u")));
        for (name, code) in [
            ("INAGG_DTYPE_F32", INAGG_DTYPE_F32),
            ("INAGG_DTYPE_I32", INAGG_DTYPE_I32),
            ("INAGG_DTYPE_F16", INAGG_DTYPE_F16),
            ("INAGG_DTYPE_BF16", INAGG_DTYPE_BF16),
            ("INAGG_E_ARGUMENT", INAGG_E_ARGUMENT),
            ("INAGG_E_CONFIG", INAGG_E_CONFIG),
            ("INAGG_E_IO", INAGG_E_IO),
            ("INAGG_E_TIMEOUT", INAGG_E_TIMEOUT),
            ("INAGG_E_DPDK", INAGG_E_DPDK),
            ("INAGG_E_FAILED", INAGG_E_FAILED),
            ("INAGG_E_PANIC", INAGG_E_PANIC),
        ] {
            let define = |v: String| header.contains(&format!("#define {name} {v}\n"));
            assert!(
                define(format!("({code})")) || define(code.to_string()),
                "{name}"
            );
        }
    }
}
