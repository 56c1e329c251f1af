"""inagg for Python: all-reduce training buffers through an aggregation switch.

A thin ctypes layer over inagg's C library (libinagg_capi.so): no compiler
and no dependency. Any writable, C-contiguous buffer of float32 or int32
works (numpy arrays, array.array, memoryview, and a CPU torch tensor
through ``tensor.numpy()``, which shares its memory), and so do float16
buffers and bfloat16 ones given as their 16-bit patterns
(``w.allreduce(t.view(torch.int16).numpy(), dtype="bf16")``)::

    import numpy as np, inagg

    with inagg.Worker(switch="127.0.0.1:47000", bind="127.0.0.1:5000",
                      job=1, worker=0, workers=2, pool_size=128) as w:
        grad = np.ones(1_000_000, dtype=np.float32)
        stats = w.allreduce(grad)          # in place: grad is now the sum
        grad /= w.workers                  # the mean, if that is wanted

Every worker of a job makes the same calls with buffers of the same lengths.
The library is found through $INAGG_LIBRARY, else beside this file (where
``pip install ./capi/python`` puts the one it builds), else in the
repository's target/release/ (``cargo build --release -p inagg-capi``),
else on the system's library path.
"""

import ctypes
import ctypes.util
import json
import os
import sys
import threading

__all__ = [
    "Worker",
    "Stats",
    "Error",
    "ConfigError",
    "NetworkError",
    "TimeoutError",
    "WorkerFailed",
    "Schedule",
    "geryon_class",
    "library_path",
]

ABI_VERSION = 2

# Status codes of include/inagg.h.
_OK = 0
_E_ARGUMENT = -1
_E_CONFIG = -2
_E_IO = -3
_E_TIMEOUT = -4
_E_DPDK = -5
_E_FAILED = -6
_E_PANIC = -7


class Error(Exception):
    """An inagg call failed; ``code`` is the C library's status code."""

    def __init__(self, message, code):
        super().__init__(message)
        self.code = code


class ConfigError(Error, ValueError):
    """The configuration is unusable, or the controller refused it."""


class NetworkError(Error, OSError):
    """A socket failed, or the controller could not be reached."""


class TimeoutError(Error, TimeoutError):  # noqa: A001 (inagg.TimeoutError is a builtins.TimeoutError)
    """No progress within ``timeout`` seconds; the message says what to check."""


class WorkerFailed(Error):
    """An earlier all-reduce of this worker failed; create new workers."""


_ERRORS = {
    _E_CONFIG: ConfigError,
    _E_IO: NetworkError,
    _E_TIMEOUT: TimeoutError,
    _E_FAILED: WorkerFailed,
}


class _CStats(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "packets_sent",
            "packets_received",
            "retransmissions",
            "timeouts",
            "stale_results",
            "handshakes",
            "handshake_retries",
            "malformed",
            "foreign",
            "send_errors",
            "bytes_sent",
            "bytes_received",
            "payload_bytes",
            "elapsed_ns",
        )
    ]


class Stats:
    """Counters of one all-reduce on one worker (``inagg_stats``)."""

    __slots__ = [name for name, _ in _CStats._fields_]

    def __init__(self, c):
        for name in self.__slots__:
            setattr(self, name, getattr(c, name))

    @property
    def seconds(self):
        return self.elapsed_ns / 1e9

    def as_dict(self):
        return {name: getattr(self, name) for name in self.__slots__}

    def __repr__(self):
        return "Stats(%s)" % ", ".join("%s=%d" % kv for kv in self.as_dict().items())


def library_path():
    """Where the C library is loaded from (see the module's doc)."""
    env = os.environ.get("INAGG_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    bundled = os.path.join(here, "libinagg_capi.so")
    if os.path.exists(bundled):
        return bundled
    repo = os.path.normpath(os.path.join(here, "..", "..", ".."))
    for sub in ("release", "debug"):
        for where in ((sub,), (sub, "deps")):
            candidate = os.path.join(repo, "target", *where, "libinagg_capi.so")
            if os.path.exists(candidate):
                return candidate
    found = ctypes.util.find_library("inagg_capi")
    if found:
        return found
    raise ImportError(
        "inagg: libinagg_capi.so not found; install the package with "
        "`pip install ./capi/python` (it builds the library), build it with "
        "`cargo build --release -p inagg-capi`, or set INAGG_LIBRARY to its path"
    )


def _load():
    lib = ctypes.CDLL(library_path())
    lib.inagg_abi_version.restype = ctypes.c_uint32
    if lib.inagg_abi_version() != ABI_VERSION:
        raise ImportError(
            "inagg: the library's ABI is version %d, this package speaks %d; "
            "rebuild the library from the same checkout"
            % (lib.inagg_abi_version(), ABI_VERSION)
        )
    lib.inagg_version.restype = ctypes.c_char_p
    lib.inagg_last_error.restype = ctypes.c_char_p
    lib.inagg_last_error_code.restype = ctypes.c_int
    lib.inagg_worker_new.argtypes = [ctypes.c_char_p]
    lib.inagg_worker_new.restype = ctypes.c_void_p
    lib.inagg_worker_free.argtypes = [ctypes.c_void_p]
    lib.inagg_worker_free.restype = None
    for name in (
        "inagg_allreduce_f32",
        "inagg_allreduce_i32",
        "inagg_allreduce_f16",
        "inagg_allreduce_bf16",
    ):
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(_CStats)]
        fn.restype = ctypes.c_int
    lib.inagg_sched_begin.argtypes = [
        ctypes.c_void_p,
        ctypes.c_char_p,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.c_size_t,
        ctypes.c_int,
    ]
    lib.inagg_sched_begin.restype = ctypes.c_int
    for name in (
        "inagg_sched_submit_f32",
        "inagg_sched_submit_i32",
        "inagg_sched_submit_f16",
        "inagg_sched_submit_bf16",
    ):
        fn = getattr(lib, name)
        fn.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_uint32,
            ctypes.c_uint8,
            ctypes.POINTER(ctypes.c_size_t),
        ]
        fn.restype = ctypes.c_int
    lib.inagg_sched_wait.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.inagg_sched_wait.restype = ctypes.c_int
    lib.inagg_sched_end.argtypes = [ctypes.c_void_p, ctypes.POINTER(_CStats), ctypes.POINTER(ctypes.c_uint64)]
    lib.inagg_sched_end.restype = ctypes.c_int
    lib.inagg_worker_info.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
    lib.inagg_worker_info.restype = ctypes.c_int
    return lib


_lib = _load()
__version__ = _lib.inagg_version().decode()


def _raise(code):
    message = _lib.inagg_last_error().decode("utf-8", "replace")
    if code == _E_ARGUMENT:
        raise ValueError("inagg: " + message)
    raise _ERRORS.get(code, Error)(message, code)


def _quote(value):
    text = str(value)
    return '"%s"' % text.replace("\\", "\\\\").replace('"', '\\"')


def _config_string(options):
    parts = []
    for key, value in options.items():
        if value is None:
            continue
        if isinstance(value, bool):
            raise ConfigError("%s=%r: not a number or an address" % (key, value), _E_CONFIG)
        parts.append("%s=%s" % (key, _quote(value)))
    return " ".join(parts)


# Byte-order prefixes of struct format codes that mean native order here.
_NATIVE = ("@", "=", "<" if sys.byteorder == "little" else ">")


_FORMATS = {"f32": (4, "f"), "i32": (4, "il"), "f16": (2, "e"), "bf16": (2, "")}
# The INAGG_DTYPE_* of each element type.
_DTYPES = {"f32": 0, "i32": 1, "f16": 2, "bf16": 3}
_BITS = "hH"  # 2-byte integers: the bit patterns of 16-bit floats


def _kind(view, dtype=None):
    """The element type ('f32', 'i32', 'f16' or 'bf16') of a buffer in
    native byte order: its own, or ``dtype`` where the buffer agrees (a
    16-bit float type also takes 2-byte integers, read as bit patterns;
    bfloat16, which Python's buffers have no code for, only those)."""
    code = view.format
    if code[:1] in _NATIVE:
        code = code[1:]
    if dtype is None:
        for kind, (size, codes) in _FORMATS.items():
            if view.itemsize == size and code and code in codes:
                return kind
    elif dtype not in _FORMATS:
        raise ValueError("inagg: dtype %r: give one of %s" % (dtype, ", ".join(_FORMATS)))
    else:
        size, codes = _FORMATS[dtype]
        bits = size == 2 and code in _BITS
        if view.itemsize == size and code and (code in codes or bits):
            return dtype
    raise TypeError(
        "inagg: reduces float32, int32, float16 or bfloat16 (as 16-bit integers "
        "with dtype='bf16') in native byte order; this buffer's items are "
        "format %r, %d bytes each%s"
        % (view.format, view.itemsize, "" if dtype is None else " (dtype %r)" % dtype)
    )


def _memory(buf, dtype=None):
    """The buffer as (ctypes array over its bytes or None if empty, element
    count, kind). The ctypes array holds the buffer exported: while it
    lives, the buffer cannot be resized or freed under the call."""
    try:
        view = memoryview(buf)
    except TypeError:
        raise TypeError(
            "inagg: %s does not expose a buffer; pass a numpy array, array.array "
            "or memoryview (a torch tensor: tensor.numpy())" % type(buf).__name__
        ) from None
    kind = _kind(view, dtype)
    if view.readonly:
        raise ValueError("inagg: the buffer is read-only; the all-reduce writes the sum into it")
    if not view.c_contiguous:
        raise ValueError("inagg: the buffer is not C-contiguous; pass a contiguous copy")
    if view.nbytes == 0:
        return None, 0, kind
    raw = view.cast("B")
    count = view.nbytes // view.itemsize
    return (ctypes.c_char * view.nbytes).from_buffer(raw), count, kind


class Worker:
    """One worker of a job: see the module's doc, and capi/README.md for
    the keys. Keyword arguments are the configuration's keys; ``None``
    leaves a key out."""

    def __init__(self, **options):
        text = _config_string(options).encode()
        handle = _lib.inagg_worker_new(text)
        if not handle:
            _raise(_lib.inagg_last_error_code())
        self._handle = handle
        self._lock = threading.Lock()
        self._schedule = None
        self._info = self._read_info()

    def _read_info(self):
        size = 512
        while True:
            out = ctypes.create_string_buffer(size)
            n = _lib.inagg_worker_info(self._handle, out, size)
            if n < 0:
                _raise(n)
            if n < size:
                return json.loads(out.value.decode())
            size = n + 1

    @property
    def info(self):
        """The worker's parameters (a dict): job, worker, rank, workers,
        pool_size, elements, generation, priority, switch, local, backend,
        timeout_s."""
        return dict(self._info)

    @property
    def workers(self):
        return self._info["workers"]

    @property
    def local(self):
        """The bound address: the endpoint the job must have for this worker."""
        return self._info["local"]

    def allreduce(self, buf, dtype=None):
        """Sums ``buf`` across the job's workers, in place; returns the
        call's Stats. The element type is the buffer's (float32, int32 or
        float16), or ``dtype`` ('f32', 'i32', 'f16', 'bf16'): bfloat16
        travels as 16-bit integers holding its bit patterns. Floats are
        within the bounds of docs/PROTOCOL.md; int32 sums are exact
        (wrapping)."""
        memory, count, kind = _memory(buf, dtype)
        address = ctypes.addressof(memory) if memory is not None else None
        stats = _CStats()
        fn = getattr(_lib, "inagg_allreduce_" + kind)
        with self._lock:
            if self._handle is None:
                raise ValueError("inagg: the worker is closed")
            # ctypes releases the GIL for the call: other threads run.
            code = fn(self._handle, address, count, ctypes.byref(stats))
        del memory
        if code != _OK:
            _raise(code)
        return Stats(stats)

    def schedule(self, tensors, policy="bytescheduler", slice=65536, credit=2, dtype="f32"):
        """A Schedule of ``tensors`` tensors on this worker (see Schedule)."""
        return Schedule(self, tensors, policy, slice, credit, dtype)

    def close(self):
        """Frees the worker (ending a schedule still running). No other
        thread may be using it or its schedule."""
        if self._schedule is not None:
            try:
                self._schedule.end()
            except Error:
                pass
        with self._lock:
            if self._handle is not None:
                _lib.inagg_worker_free(self._handle)
                self._handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        # At interpreter exit the module's globals may be gone already.
        if getattr(self, "_handle", None) is not None and _lib is not None:
            self.close()

    def __repr__(self):
        i = self._info
        return "inagg.Worker(job=%d, worker=%d of %d, switch=%s, local=%s)" % (
            i["job"],
            i["worker"],
            i["workers"],
            i["switch"],
            i["local"],
        )


def geryon_class(layer, layers, thresholds=(0.6,)):
    """Geryon's priority class of layer ``layer`` (0-based, forward order)
    of ``layers``: how many thresholds its urgency 1 - layer/layers reaches."""
    urgency = 1.0 - layer / max(layers, 1)
    return sum(1 for t in thresholds if urgency >= t)


class Schedule:
    """Many tensors per step, most urgent first: P3 ("p3", one slice of
    ``slice`` elements per epoch), ByteScheduler ("bytescheduler", ``credit``
    slices per epoch) or "fifo". Submit each gradient as back-propagation
    produces it; ``wait`` returns the number of the next tensor whose sum is
    complete (written into the buffer submitted). Every worker submits the
    same tensors (lengths, ranks, classes) in the same order::

        with w.schedule(len(grads), policy="p3", slice=65536) as s:
            for layer in reversed(range(len(grads))):
                s.submit(grads[layer], rank=layer, cls=inagg.geryon_class(layer, len(grads)))
            for _ in grads:
                layer = s.wait()        # first layer first under p3

    A submitted buffer is held (it cannot be resized or freed) until ``wait``
    reports it; touch it only after. The worker's own ``allreduce`` is
    refused while the schedule runs."""

    def __init__(self, worker, tensors, policy, slice, credit, dtype):
        if dtype not in _DTYPES:
            raise ValueError("inagg: dtype %r: give one of %s" % (dtype, ", ".join(_DTYPES)))
        # ctypes would pass a negative count as a huge size_t.
        for name, value in (("tensors", tensors), ("slice", slice), ("credit", credit)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError("inagg: %s must be an int, not %s" % (name, type(value).__name__))
            if value < 0:
                raise ValueError("inagg: %s %d: must not be negative" % (name, value))
        self._worker = worker
        self._kind = dtype
        self._held = {}
        self._done_lock = threading.Lock()
        self.transport = None
        self.epochs = None
        code = _lib.inagg_sched_begin(
            self._handle(), policy.encode(), slice, credit, tensors, _DTYPES[dtype]
        )
        if code != _OK:
            _raise(code)
        worker._schedule = self

    def _handle(self):
        handle = self._worker._handle
        if handle is None:
            raise ValueError("inagg: the worker is closed")
        return handle

    def submit(self, buf, rank=0, cls=0):
        """Hands ``buf`` to the schedule; returns its number (from 0)."""
        try:
            memory, count, kind = _memory(buf, self._kind)
        except TypeError as e:
            try:
                view = memoryview(buf)
            except TypeError:
                raise e from None  # not a buffer: _memory's message says so
            raise TypeError(
                "inagg: the schedule sums %s; this buffer's items are format %r, %d bytes each"
                % (self._kind, view.format, view.itemsize)
            ) from None
        seq = ctypes.c_size_t()
        fn = getattr(_lib, "inagg_sched_submit_" + kind)
        address = ctypes.addressof(memory) if memory is not None else None
        code = fn(self._handle(), address, count, rank, cls, ctypes.byref(seq))
        if code != _OK:
            _raise(code)
        self._held[seq.value] = (memory, buf)
        return seq.value

    def wait(self):
        """Blocks for the next completed sum; returns its tensor's number."""
        seq = ctypes.c_size_t()
        code = _lib.inagg_sched_wait(self._handle(), ctypes.byref(seq))
        if code != _OK:
            _raise(code)
        self._held.pop(seq.value, None)
        return seq.value

    def end(self):
        """Ends the schedule; sets ``transport`` (Stats over its epochs) and
        ``epochs``. An error unless every tensor was submitted and waited for."""
        stats = _CStats()
        epochs = ctypes.c_uint64()
        code = _lib.inagg_sched_end(self._handle(), ctypes.byref(stats), ctypes.byref(epochs))
        self._held.clear()
        self._worker._schedule = None
        if code != _OK:
            _raise(code)
        self.transport = Stats(stats)
        self.epochs = epochs.value
        return self.transport

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        try:
            self.end()
        except Error:
            if kind is None:
                raise
