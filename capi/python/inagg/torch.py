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
import sys
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


# Ports probed free by _free_port before a registration is refused as
# another rank's: see _new_worker.
_PORT_TRIES = 5


def _new_worker(rank, world_size, options):
    """inagg.Worker for this rank. A port probed free (``_free_port``) can
    be probed by another rank on the same host before either binds it; with
    a controller, the second registration of it is then refused ("is
    already rank N's") before anything is bound, and this rank tries
    another port. A ``bind`` given by the caller is never replaced."""
    tries = _PORT_TRIES if options.get("bind") is None else 1
    for attempt in range(tries):
        try:
            return inagg.Worker(**_worker_options(rank, world_size, options))
        except inagg.ConfigError as e:
            if "is already rank" not in str(e) or attempt + 1 == tries:
                raise


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
        self.worker = _new_worker(rank, world_size, options)
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
    """A collective whose future completes when inagg's worker has summed
    every tensor, or fails with the worker's error: ``wait()`` and the
    future both raise it, and no tensor is handed back as summed."""

    def __init__(self, future):
        super().__init__()
        self._future = future

    def wait(self, timeout=None):
        self._future.wait()  # raises the worker's error
        return True

    def is_completed(self):
        return self._future.done()

    def is_success(self):
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:
            return False
        return True

    def exception(self):
        try:
            self._future.value()
        except Exception as e:
            return e
        return None

    def get_future(self):
        return self._future


def _all_summed(futures, tensors):
    """A future of ``tensors`` once every one of ``futures`` succeeded; the
    first failure's error otherwise (``value()`` re-raises it)."""

    def done(f):
        for each in f.value():
            each.value()  # raises what the worker raised
        return tensors

    return torch.futures.collect_all(futures).then(done)


# The collectives a ProcessGroupInagg hands to its gloo backend, by the
# names torch.distributed calls them on a group (torch's own signatures,
# every overload: the arguments go through as they came). allreduce and
# allreduce_coalesced are the group's own; the two coalesced tensor
# collectives gloo's Python binding lacks are the group's methods too.
_GLOO_COLLECTIVES = (
    "_allgather_base",
    "_reduce_scatter_base",
    "all_gather_single",
    "all_gather_single_coalesced",
    "all_to_all_single",
    "allgather",
    "allgather_coalesced",
    "alltoall",
    "alltoall_base",
    "barrier",
    "broadcast",
    "gather",
    "gather_into_tensor",
    "gather_single",
    "monitored_barrier",
    "recv",
    "recv_anysource",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_single",
    "reduce_scatter_single_coalesced",
    "scatter",
    "send",
)


def _by_gloo(name):
    def collective(self, *args, **kwargs):
        return getattr(self._gloo, name)(*args, **kwargs)

    collective.__name__ = name
    collective.__doc__ = "gloo's %s, on the group's gloo backend." % name
    return collective


def _together(works, outputs):
    """One work for gloo's ``works``: done when all are, failing with the
    first one's error; its future holds ``outputs``. Some of gloo's works
    have no future (its reduce_scatter_tensor's): those are waited for
    here, before the call returns."""
    try:
        futures = [w.get_future() for w in works]
    except RuntimeError:  # "Work::getFuture not implemented"
        for w in works:
            w.wait()  # raises gloo's error
        done = torch.futures.Future()
        done.set_result(outputs)
        return _Done(done)
    return _Done(_all_summed(futures, outputs))


class ProcessGroupInagg(dist.ProcessGroup):
    """A process group whose all_reduce of float32, float16 and bfloat16
    tensors (SUM or AVG) goes through inagg, and whose every other
    collective (other types and operations, broadcast, the gathers and
    scatters, barrier, all_to_all, send and recv, the object collectives
    built on them) is gloo's, on a gloo backend of the same store.

    Each of those is handed to gloo by name (``_GLOO_COLLECTIVES``), not
    left to torch's dispatch through the group: a call dispatched through a
    Python group holds the GIL while it queues the work in gloo, and gloo's
    worker thread, freeing the tensors of the collective it has just
    finished, waits for the GIL while it holds that queue's lock, so ranks
    hung in all_gather_into_tensor and reduce_scatter. gloo's own Python
    binding lets go of the GIL. gloo is still registered as the group's
    CPU backend, for torch's code that asks the group for its backend
    (docs/ARCHITECTURE.md, "PyTorch"). Made by :func:`register_backend`.

    ``state``: the :class:`HookState` of the group's inagg worker, or None
    for a group that carries everything by gloo (one that has no job of its
    own: see :func:`register_backend`).
    """

    def __init__(self, store, rank, size, timeout, state):
        super().__init__(rank, size)
        self._gloo = dist.ProcessGroupGloo(dist.PrefixStore("inagg-gloo", store), rank, size, timeout)
        cpu = torch.device("cpu")
        self._register_backend(cpu, dist.ProcessGroup.BackendType.GLOO, self._gloo)
        self._set_default_backend(dist.ProcessGroup.BackendType.GLOO)
        self._state = state

    def getBackendName(self):
        return "inagg"

    def allreduce(self, tensors, opts=None):
        return self._reduce(tensors, opts or dist.AllreduceOptions(), self._gloo.allreduce)

    def allreduce_coalesced(self, tensors, opts=None):
        """``all_reduce_coalesced``: as :meth:`allreduce`, tensor by tensor."""
        opts = opts or dist.AllreduceCoalescedOptions()
        return self._reduce(tensors, opts, self._gloo.allreduce_coalesced)

    def _reduce(self, tensors, opts, by_gloo):
        """Sums ``tensors`` through inagg when the switch can: a SUM or AVG
        of dense tensors of the kinds it sums, on a group with a job of its
        own (a sparse tensor is gloo's: torch's own distributed tests found
        it sent to the worker, which takes dense buffers only); else
        ``by_gloo(tensors, opts)``."""
        # A ReduceOp, whose .op is the RedOpType (ReduceOp.SUM and the
        # like; `in` a tuple of those does not match a ReduceOp).
        op = getattr(opts.reduceOp, "op", opts.reduceOp)
        ours = (
            self._state is not None
            and op in (dist.ReduceOp.SUM, dist.ReduceOp.AVG)
            and all(t.dtype in _KINDS and t.layout == torch.strided for t in tensors)
        )
        if not ours:
            return by_gloo(tensors, opts)
        futures = [self._state.submit(t, mean=op == dist.ReduceOp.AVG) for t in tensors]
        return _Done(_all_summed(futures, tensors))

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        """all_gather_into_tensor of each pair, by gloo, as one work."""
        opts = opts or dist.distributed_c10d.AllgatherOptions()
        works = [self._gloo.all_gather_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _together(works, outputs)

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        """reduce_scatter_tensor of each pair, by gloo, as one work."""
        opts = opts or dist.ReduceScatterOptions()
        works = [self._gloo.reduce_scatter_single(o, i, opts) for o, i in zip(outputs, inputs)]
        return _together(works, outputs)

    def shutdown(self):
        if self._state is not None:
            self._state.close()


for _name in _GLOO_COLLECTIVES:
    setattr(ProcessGroupInagg, _name, _by_gloo(_name))
del _name


def _group_job(job, ranks):
    """The controller's job for the process group of global ``ranks``: the
    default group's is ``job`` itself; a group made by ``new_group`` has
    one of its own, named from ``job`` and its ranks, so that it never
    takes the default group's place (both would register the same ranks
    of one job, and each registration ends the other's session)."""
    if not ranks:
        return job
    return "%s.ranks-%s" % (job, "-".join(str(r) for r in sorted(ranks)))


def register_backend(**options):
    """Registers the torch.distributed backend "inagg" on the CPU, whose
    workers are made with ``options`` (HookState's keys) for each process
    group: ``dist.init_process_group("inagg")``.

    The default group's all_reduce goes through ``options``' job. A group
    made by ``dist.new_group`` goes through a job of its own: with a
    controller, the job named ``<job>.ranks-<r0>-<r1>-...`` (its global
    ranks) when the operator created one; else (no such job, or no
    controller) the group carries everything by gloo, and says so once on
    standard error."""

    def create(backend_opts, _backend_options):
        ranks = list(backend_opts.global_ranks_in_group)
        rank, size = backend_opts.group_rank, backend_opts.group_size
        store, timeout = backend_opts.store, backend_opts.timeout
        mine = dict(options)
        job = _group_job(mine.get("job"), ranks)
        state = None
        if ranks and mine.get("controller") is None:
            why = "a group's job needs a controller (the switch's job is the default group's)"
        else:
            mine["job"] = job
            try:
                state = HookState(rank=rank, world_size=size, **mine)
            except inagg.Error as e:
                if not ranks:
                    raise
                why = "job %r: %s" % (job, e)
        if state is None and rank == 0:
            print("inagg.torch: the group of ranks %s goes through gloo: %s" % (ranks, why),
                  file=sys.stderr, flush=True)
        return ProcessGroupInagg(store, rank, size, timeout, state)

    dist.Backend.register_backend("inagg", create, extended_api=True, devices=["cpu"])

