"""One rank of `inagg bench --torch`'s all-reduce alone: a float32 tensor
of N elements (ResNet-50's 25.6M parameters by default) all-reduced
through the "inagg" backend and through a gloo group beside it, REPEAT
times each, interleaved; rank 0 writes both medians (seconds) as JSON.
With "shm" (the emulator's `--shm` socket path), the inagg workers reach
the emulator through shared memory instead of UDP.

    python3 allreduce_bench.py '{"controller": ..., "job": ..., "elements": N,
                                 "repeat": R, "out": FILE[, "shm": PATH]}'

RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun sets them.
"""

import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

import inagg.torch


def main():
    spec = json.loads(sys.argv[1])
    carrier = {"backend": "shm", "shm": spec["shm"]} if spec.get("shm") else {}
    inagg.torch.register_backend(
        controller=spec["controller"], job=spec["job"], timeout=60, **carrier
    )
    dist.init_process_group("inagg")
    gloo = dist.new_group(backend="gloo")
    t = torch.randn(spec["elements"], generator=torch.Generator().manual_seed(dist.get_rank()))
    times = {"inagg": [], "gloo": []}
    for _ in range(spec["repeat"]):
        for name, group in (("inagg", None), ("gloo", gloo)):
            x = t.clone()
            dist.barrier(group=gloo)
            start = time.perf_counter()
            dist.all_reduce(x, group=group)
            times[name].append(time.perf_counter() - start)
    if dist.get_rank() == 0:
        with open(spec["out"], "w") as f:
            json.dump({k: statistics.median(v) for k, v in times.items()}, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
