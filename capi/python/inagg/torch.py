"""inagg for PyTorch: a DDP communication hook, and a torch.distributed
backend, that sum gradients through an aggregation switch.

Importable only where torch is (``import inagg`` itself needs nothing)::

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import inagg.torch

    dist.init_process_group("gloo")          # torchrun's environment
    model = DDP(model)
    state = inagg.torch.HookState(controller="127.0.0.1:47100", job="resnet")
    model.register_comm_hook(state, inagg.torch.allreduce_hook)

or, for code that calls ``dist.all_reduce`` itself::

    inagg.torch.register_backend(controller="127.0.0.1:47100", job="resnet")
    dist.init_process_group("inagg")         # all_reduce SUM/AVG of floats
                                             # through the switch, the rest gloo

Each rank's worker is one inagg worker: rank and world size come from
``torch.distributed`` (or torchrun's RANK and WORLD_SIZE), and the job from
the controller by name, or from an explicit switch and job id. Buckets are
summed in the order DDP hands them over, which is the same on every rank,
by a thread of the state's own, so communication overlaps the rest of the
backward pass as DDP's own hooks do. A float16 or bfloat16 bucket (under
``torch.autocast``) travels as what it is; an inf or NaN anywhere in a
chunk of the bucket makes that chunk NaN on every rank (docs/PROTOCOL.md,
"Quantization and its error bound"), so GradScaler sees it and skips the
step on every rank. A rank that dies makes the others' all-reduces fail
within the worker's ``timeout`` (10 s by default): the hook's future then
carries the error, which DDP raises from ``backward``.
"""

import os
import queue
import socket
import threading

try:
    import torch
    import torch.distributed as dist
except ImportError as e:
    raise ImportError(
        "inagg.torch needs PyTorch (pip install torch); the rest of inagg does not: %s" % e
    ) from e

import inagg

__all__ = ["HookState", "allreduce_hook", "register_backend", "ProcessGroupInagg"]

# torch dtype -> what inagg.Worker.allreduce is told.
_KINDS = {torch.float32: None, torch.float16: None, torch.bfloat16: "bf16"}


def _rank_and_world():
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except KeyError:
        raise inagg.ConfigError(
            "inagg.torch: no rank: initialise torch.distributed, run under torchrun "
            "(RANK, WORLD_SIZE), or pass rank= and world_size=",
            inagg._E_CONFIG,
        ) from None


def _free_port(host):
    """A UDP port free on ``host`` now (the worker binds it right after)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _worker_options(rank, world_size, options):
    """inagg.Worker's keys for this rank: with ``controller``, the job's
    name and this rank; else the switch, the job id and the pool, with
    this rank as the worker id and the world size as the worker count."""
    options = dict(options)
    host = options.pop("host", "127.0.0.1")
    if options.get("bind") is None:
        options["bind"] = "%s:%d" % (host, _free_port(host))
    if options.get("controller") is not None:
        options.setdefault("rank", rank)
    else:
        options.setdefault("worker", rank)
        options.setdefault("workers", world_size)
    return options


def _as_inagg(tensor):
    """(the CPU buffer inagg sums in place, its dtype for inagg, the tensor
    to copy back into or None when the buffer is the tensor's own memory)."""
    if tensor.dtype not in _KINDS:
        raise TypeError(
            "inagg.torch: sums float32, float16 and bfloat16 tensors, not %s" % tensor.dtype
        )
    work = tensor
    if work.device.type != "cpu" or not work.is_contiguous():
        work = work.detach().to("cpu", copy=True).contiguous()
    kind = _KINDS[tensor.dtype]
    buf = work.view(torch.int16).numpy() if kind == "bf16" else work.detach().numpy()
    return buf, kind, (None if work is tensor else work)


def _sum_into(worker, tensor):
    """Sums ``tensor`` over the job's workers in place (any device: a copy
    through the host where it is not on the CPU)."""
    buf, kind, copy = _as_inagg(tensor)
    stats = worker.allreduce(buf, dtype=kind)
    if copy is not None:
        tensor.copy_(copy)
    return stats


class HookState:
    """The state of :func:`allreduce_hook`: this rank's inagg worker and the
    thread that sums DDP's buckets in the order they come.

    Keyword arguments are inagg.Worker's keys (capi/README.md): either
    ``controller`` and ``job`` (the job's name; the controller gives the
    rest), or ``switch``, ``job`` (its id) and ``pool_size`` (and
    ``elements``, ``timeout``, ...). ``bind`` is this rank's endpoint
    (default: a free port on ``host``, itself 127.0.0.1 by default).
    ``rank`` and ``world_size`` default to torch.distributed's. ``dtype``
    (torch.float16 or torch.bfloat16) sends float32 buckets in that format,
    half the bytes, as torch's fp16_compress_hook does; the sum comes back
    rounded to it."""

    def __init__(self, rank=None, world_size=None, dtype=None, **options):
        if dtype is not None and dtype not in (torch.float16, torch.bfloat16):
            raise TypeError("inagg.torch: dtype is torch.float16 or torch.bfloat16, not %s" % dtype)
        self.dtype = dtype
        if rank is None or world_size is None:
            r, w = _rank_and_world()
            rank = r if rank is None else rank
            world_size = w if world_size is None else world_size
        self.rank = rank
        self.world_size = world_size
        self.worker = inagg.Worker(**_worker_options(rank, world_size, options))
        self.stats = []  # one inagg.Stats per bucket summed
        self.failed = None
        self._queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="inagg-ddp", daemon=True)
        self._thread.start()

    def submit(self, tensor, mean=True):
        """A future of ``tensor`` summed (or averaged) over the job, in
        place; buckets are summed in the order they are submitted."""
        future = torch.futures.Future()
        if self.failed is not None:
            future.set_exception(self.failed)
        else:
            self._queue.put((tensor, mean, future))
        return future

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            tensor, mean, future = item
            if self.failed is not None:
                future.set_exception(self.failed)
                continue
            try:
                if self.dtype is not None and tensor.dtype == torch.float32:
                    wire = tensor.to(self.dtype)
                    self.stats.append(_sum_into(self.worker, wire))
                    tensor.copy_(wire)
                else:
                    self.stats.append(_sum_into(self.worker, tensor))
                if mean:
                    tensor.div_(self.world_size)
            except Exception as e:  # handed to DDP, which raises it in backward
                # The worker's slots are out of step with the other ranks'
                # after a failure: every later bucket fails with it.
                self.failed = e
                future.set_exception(e)
                continue
            future.set_result(tensor)

    def close(self):
        """Stops the thread and frees the worker."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        self.worker.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __getstate__(self):
        raise TypeError("inagg.torch.HookState holds a live worker; it cannot be pickled")


def allreduce_hook(state, bucket):
    """A DDP communication hook (``model.register_comm_hook(state,
    allreduce_hook)``): the bucket's mean over every rank, summed through
    inagg. Returns at once; ``state``'s thread completes the future."""
    return state.submit(bucket.buffer(), mean=True)


class _Done(dist._Work if hasattr(dist, "_Work") else object):
    """A finished (or failed) collective, as torch.distributed hands back."""

    def __init__(self, future):
        super().__init__()
        self._future = future

    def wait(self, timeout=None):
        self._future.wait()
        return True

    def is_completed(self):
        return self._future.done()

    def get_future(self):
        return self._future


class ProcessGroupInagg(dist.ProcessGroup):
    """A process group whose all_reduce of floats (SUM or AVG) goes through
    inagg; every other collective, and all_reduce of other types or
    operations, is gloo's. Made by :func:`register_backend`."""

    def __init__(self, store, rank, size, timeout, options):
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("inagg-gloo", store), rank, size, timeout)
        self._state = HookState(rank=rank, world_size=size, **options)

    def getBackendName(self):
        return "inagg"

    def allreduce(self, tensors, opts):
        # A ReduceOp, whose .op is the RedOpType (ReduceOp.SUM and the
        # like; `in` a tuple of those does not match a ReduceOp).
        op = getattr(opts.reduceOp, "op", opts.reduceOp)
        ours = op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG) and all(
            t.dtype in _KINDS for t in tensors
        )
        if not ours:
            return self._gloo.allreduce(tensors, opts)
        mean = op == dist.ReduceOp.AVG
        futures = [self._state.submit(t, mean=mean) for t in tensors]
        return _Done(torch.futures.collect_all(futures).then(lambda f: [t for t in tensors]))

    def __getattr__(self, name):
        # Every other collective (broadcast, barrier, allgather, ...): gloo.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._gloo, name)

    def shutdown(self):
        self._state.close()


def register_backend(**options):
    """Registers the torch.distributed backend "inagg" on the CPU, whose
    workers are made with ``options`` (HookState's keys) for each process
    group: ``dist.init_process_group("inagg")``."""

    def create(store, rank, size, timeout):
        return ProcessGroupInagg(store, rank, size, timeout, options)

    dist.Backend.register_backend("inagg", create, devices=["cpu"])
