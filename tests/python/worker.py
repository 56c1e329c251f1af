"""Workers of one Python process for tests/capi.rs.

Usage: worker.py SPEC, where SPEC is a JSON object:
  ranks:   the ranks this process runs, each on a thread of its own
  options: inagg.Worker's keyword arguments, but for worker and bind
  binds:   {rank: address} to bind (default 127.0.0.1:0)
  calls:   [{"kind": "i32" | "f32" | "f16" | "bf16", "container": "array" |
           "numpy" | "numpy2d", "len": N}], made in this order by every
           rank (16-bit kinds in numpy only: float16, and bfloat16 as the
           int16 bit patterns torch's t.view(torch.int16) gives)
  seed:    seeds the inputs; out: a directory for them
  schedule (instead of calls): {"policy", "slice", "credit", "dtype",
           "tensors": [length of layer 0, ...]}: the layers' gradients
           submitted last layer first, ranked by layer; each rank reports
           the order their sums completed in, and writes OUT/RANK-sL.in/out

Each rank writes its input of call c to OUT/RANK-C.in before the call and
the result to OUT/RANK-C.out after it (raw little-endian), so that the test
checks the sums with inagg's own verifier. Protocol on stdin/stdout: one
line {"locals": [...]} once every worker is bound, then wait for a line on
stdin (the job is installed), then one line {"stats": [[...], ...]}.
"""

import array
import json
import os
import random
import sys
import threading

import inagg


def values(kind, rank, call, seed, n):
    rng = random.Random("%d-%d-%d" % (seed, rank, call))
    if kind == "i32":
        return [rng.randint(-(2**31), 2**31 - 1) for _ in range(n)]
    # Mixed signs and magnitudes, some zeros.
    return [
        0.0 if rng.random() < 0.01 else rng.uniform(-1, 1) * 10.0 ** rng.randint(-4, 3)
        for _ in range(n)
    ]


def bfloat16_bits(vals):
    """The bfloat16 values nearest (ties to even) to vals, as int16 bit patterns."""
    import numpy as np

    bits = np.array(vals, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype(np.uint16).view(np.int16)


def container(kind, spec, vals):
    if spec == "array":
        return array.array("i" if kind == "i32" else "f", vals)
    import numpy as np

    if kind == "bf16":
        a = bfloat16_bits(vals)
    else:
        a = np.array(vals, dtype={"i32": np.int32, "f32": np.float32, "f16": np.float16}[kind])
    if spec == "numpy2d":
        rows = 7 if len(vals) % 7 == 0 else 1
        a = a.reshape(rows, -1)
    return a


def raw(buf):
    return memoryview(buf).cast("B").tobytes()


def run_schedule(spec, worker, rank, stats):
    """Back-propagation's order: the last layer's gradient first, each
    tensor ranked by its layer; records the order the sums complete in."""
    sched = spec["schedule"]
    kind, layers = sched["dtype"], sched["tensors"]
    bufs = [container(kind, "numpy", values(kind, rank, 100 + l, spec["seed"], n)) for l, n in enumerate(layers)]
    for l, buf in enumerate(bufs):
        with open(os.path.join(spec["out"], "%d-s%d.in" % (rank, l)), "wb") as f:
            f.write(raw(buf))
    order = []
    with worker.schedule(len(layers), sched["policy"], sched["slice"], sched["credit"], kind) as s:
        seqs = {}
        for l in reversed(range(len(layers))):
            seqs[s.submit(bufs[l], rank=l, cls=inagg.geryon_class(l, len(layers)))] = l
        for _ in layers:
            order.append(seqs[s.wait()])
    for l, buf in enumerate(bufs):
        with open(os.path.join(spec["out"], "%d-s%d.out" % (rank, l)), "wb") as f:
            f.write(raw(buf))
    stats.append({"order": order, "epochs": s.epochs, "transport": s.transport.as_dict()})


def run(spec, worker, rank, stats):
    if "schedule" in spec:
        return run_schedule(spec, worker, rank, stats)
    for c, call in enumerate(spec["calls"]):
        buf = container(call["kind"], call["container"], values(call["kind"], rank, c, spec["seed"], call["len"]))
        base = os.path.join(spec["out"], "%d-%d" % (rank, c))
        with open(base + ".in", "wb") as f:
            f.write(raw(buf))
        s = worker.allreduce(buf, dtype="bf16" if call["kind"] == "bf16" else None)
        with open(base + ".out", "wb") as f:
            f.write(raw(buf))
        stats.append(s.as_dict())


def main():
    spec = json.loads(sys.argv[1])
    ranks = spec["ranks"]
    binds = {int(r): a for r, a in spec.get("binds", {}).items()}
    workers, stats, errors = {}, {r: [] for r in ranks}, []
    # Workers are made on their threads: with a controller, each waits in
    # inagg.Worker() until every rank has registered.
    ready = threading.Barrier(len(ranks) + 1)
    go = threading.Event()

    def report(rank, e):
        errors.append("rank %d: %s: %s" % (rank, type(e).__name__, e))

    def body(rank):
        try:
            workers[rank] = inagg.Worker(worker=rank, bind=binds.get(rank, "127.0.0.1:0"), **spec["options"])
        except Exception as e:  # reported to the test, which fails on it
            report(rank, e)
        ready.wait()
        go.wait()
        if rank in workers:
            try:
                run(spec, workers[rank], rank, stats[rank])
            except Exception as e:
                report(rank, e)
            workers[rank].close()

    threads = [threading.Thread(target=body, args=(r,)) for r in ranks]
    for t in threads:
        t.start()
    ready.wait()
    locals_ = [workers[r].local if r in workers else None for r in ranks]
    print(json.dumps({"locals": locals_, "errors": errors}), flush=True)
    sys.stdin.readline()
    go.set()
    for t in threads:
        t.join()
    print(json.dumps({"stats": [stats[r] for r in ranks], "errors": errors}), flush=True)
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
