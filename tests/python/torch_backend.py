"""One rank of the torch.distributed backend test (tests/torch.rs): the
process group "inagg" all-reduces random float32 tensors of odd sizes, and
a gloo group made beside it all-reduces copies of them; both results are
written to OUT.RANK (JSON) for the test to compare against the bound.

    python3 torch_backend.py '{"controller": ..., "job": ..., "out": ...[, "shm": PATH]}'

With "shm", the workers reach the emulator through its shared memory.

RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun sets them.
"""

import json
import sys

import torch
import torch.distributed as dist

import inagg.torch

SIZES = [1, 63, 64, 65, 1_000_007]


def main():
    spec = json.loads(sys.argv[1])
    carrier = {"backend": "shm", "shm": spec["shm"]} if spec.get("shm") else {}
    inagg.torch.register_backend(controller=spec["controller"], job=spec["job"], timeout=30,
                                 tls_ca=spec.get("tls_ca"), **carrier)
    dist.init_process_group("inagg")
    rank, world = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo")
    record = {"rank": rank, "backend": dist.get_backend(), "results": []}
    for i, n in enumerate(SIZES):
        g = torch.Generator().manual_seed(1000 * i + rank)
        t = torch.randn(n, generator=g) * (10.0 ** (i - 2))
        ours, theirs = t.clone(), t.clone()
        dist.all_reduce(ours, op=dist.ReduceOp.SUM)
        dist.all_reduce(theirs, op=dist.ReduceOp.SUM, group=gloo)
        mean = t.clone()
        dist.all_reduce(mean, op=dist.ReduceOp.AVG)
        # Bound of docs/PROTOCOL.md per chunk of K = 64: workers x 2^(e-30)
        # with 2^e above the chunk's largest |value| of any worker.
        biggest = torch.tensor([t.abs().max().item()])
        dist.all_reduce(biggest, op=dist.ReduceOp.MAX)  # gloo's: not SUM/AVG
        record["results"].append({
            "n": n,
            "max_error": (ours.double() - theirs.double()).abs().max().item(),
            "mean_error": (mean.double() - theirs.double() / world).abs().max().item(),
            "largest": biggest.item(),
        })
    ints = torch.arange(10, dtype=torch.int32) * (rank + 1)
    dist.all_reduce(ints)  # int32: gloo's
    record["ints"] = ints.tolist()
    with open("%s.%d" % (spec["out"], rank), "w") as f:
        json.dump(record, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
