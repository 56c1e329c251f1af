"""One rank of the torch.distributed backend's collective tests
(tests/torch.rs): every collective on an "inagg" group, DDP built on it,
groups made by new_group, and errors that raise. Results go to OUT.RANK
(JSON); the test checks them.

    python3 torch_collectives.py '{"controller": ..., "job": ..., "out": ..., "mode": ...}'

mode "collectives": every collective torch.distributed offers, on the
default group (all ranks, the job "JOB"), with exact expected values
computed here from the ranks; DDP(model) on the default group with and
without inagg's hook; then groups: ranks 0 and 1 (the job "JOB.ranks-0-1",
which the test created), ranks 2 and 3 (no job: gloo), and every rank
(no job: gloo), after which the default group must still all-reduce
through the switch.

mode "dead_peer": rank 1 leaves after one all_reduce; the others'
next all_reduce must raise (dist.all_reduce, and work.wait() of an
async one), never hand back their own numbers. mode "dead_switch": the
same on every rank once the test has stopped the switch.

RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT as torchrun sets them.
"""

import faulthandler
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import inagg.torch


def summed(group=None):
    """All-reduces the summed buffers counted by the group's inagg worker
    (None when the group carries everything by gloo)."""
    pg = group if group is not None else c10d._get_default_group()
    state = getattr(pg, "_state", None)
    return None if state is None else len(state.stats)


def check(record, name, got, want):
    record["checks"].append({"name": name, "ok": got == want, "got": repr(got), "want": repr(want)})


def collectives(record, rank, world):
    """Every collective, with the exact values each rank must hold."""
    ranks = list(range(world))
    t = torch.full((5,), float(rank + 1))
    dist.all_reduce(t)  # through the switch (float32 SUM)
    check(record, "all_reduce sum", t.tolist(), [float(sum(r + 1 for r in ranks))] * 5)
    t = torch.full((3,), float(rank + 1))
    dist.all_reduce(t, op=dist.ReduceOp.AVG)
    check(record, "all_reduce avg", t.tolist(), [sum(r + 1 for r in ranks) / world] * 3)
    for dtype in (torch.float16, torch.bfloat16):
        t = torch.full((7,), float(rank + 1), dtype=dtype)
        dist.all_reduce(t)
        check(record, "all_reduce %s" % dtype, t.float().tolist(), [float(sum(r + 1 for r in ranks))] * 7)
    t = torch.tensor([rank * 10 + 1], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # gloo's
    check(record, "all_reduce max int64", t.tolist(), [(world - 1) * 10 + 1])
    t = torch.tensor([float(rank + 2)])
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    want = 1.0
    for r in ranks:
        want *= r + 2
    check(record, "all_reduce product", t.tolist(), [want])

    t = torch.tensor([rank * 1.0, 7.0]) if rank == 1 else torch.zeros(2)
    dist.broadcast(t, src=1)
    check(record, "broadcast", t.tolist(), [1.0, 7.0])

    out = [torch.zeros(2) for _ in ranks]
    dist.all_gather(out, torch.tensor([float(rank), float(-rank)]))
    check(record, "all_gather", [o.tolist() for o in out], [[float(r), float(-r)] for r in ranks])

    flat = torch.zeros(2 * world)
    dist.all_gather_into_tensor(flat, torch.tensor([float(rank), 1.0]))
    check(record, "all_gather_into_tensor", flat.tolist(), sum(([float(r), 1.0] for r in ranks), []))

    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "name": "r%d" % rank})
    check(record, "all_gather_object", objs, [{"rank": r, "name": "r%d" % r} for r in ranks])

    dist.barrier()
    check(record, "barrier", True, True)

    out = torch.zeros(1)
    dist.reduce_scatter(out, [torch.tensor([float(rank * i)]) for i in ranks])
    check(record, "reduce_scatter", out.tolist(), [float(sum(r * rank for r in ranks))])

    out = torch.zeros(2)
    dist.reduce_scatter_tensor(out, torch.arange(2 * world, dtype=torch.float32) + rank)
    want = [float(sum(2 * rank + j + r for r in ranks)) for j in range(2)]
    check(record, "reduce_scatter_tensor", out.tolist(), want)

    t = torch.tensor([float(rank + 1)])
    dist.reduce(t, dst=0)
    if rank == 0:
        check(record, "reduce", t.tolist(), [float(sum(r + 1 for r in ranks))])

    gathered = [torch.zeros(1) for _ in ranks] if rank == 0 else None
    dist.gather(torch.tensor([float(rank * 3)]), gathered, dst=0)
    if rank == 0:
        check(record, "gather", [g.tolist() for g in gathered], [[float(r * 3)] for r in ranks])

    out = torch.zeros(1)
    pieces = [torch.tensor([float(100 + r)]) for r in ranks] if rank == 0 else None
    dist.scatter(out, pieces, src=0)
    check(record, "scatter", out.tolist(), [float(100 + rank)])

    out = torch.zeros(world)
    dist.all_to_all_single(out, torch.tensor([float(rank * 10 + r) for r in ranks]))
    check(record, "all_to_all_single", out.tolist(), [float(r * 10 + rank) for r in ranks])

    outs = [torch.zeros(1) for _ in ranks]
    dist.all_to_all(outs, [torch.tensor([float(rank * 10 + r)]) for r in ranks])
    check(record, "all_to_all", [o.tolist() for o in outs], [[float(r * 10 + rank)] for r in ranks])

    objs = [{"from": 2}] if rank == 2 else [None]
    dist.broadcast_object_list(objs, src=2)
    check(record, "broadcast_object_list", objs, [{"from": 2}])

    if rank < 2:
        t = torch.tensor([float(rank + 40)])
        if rank == 0:
            dist.send(t, dst=1)
        else:
            dist.recv(t, src=0)
            check(record, "send/recv", t.tolist(), [40.0])

    # The coalesced forms torch's coalescing manager calls on the group.
    pg = c10d._get_default_group()
    ts = [torch.full((2,), float(rank + 1)), torch.full((3,), float(rank + 1), dtype=torch.float16)]
    pg.allreduce_coalesced(ts, dist.AllreduceCoalescedOptions()).wait()  # through the switch
    total = float(sum(r + 1 for r in ranks))
    check(record, "allreduce_coalesced", [t.float().tolist() for t in ts], [[total] * 2, [total] * 3])
    outs = [torch.zeros(world), torch.zeros(2 * world)]
    ins = [torch.tensor([float(rank)]), torch.tensor([float(rank), 5.0])]
    pg.allgather_into_tensor_coalesced(outs, ins).wait()
    want = [[float(r) for r in ranks], sum(([float(r), 5.0] for r in ranks), [])]
    check(record, "allgather_into_tensor_coalesced", [o.tolist() for o in outs], want)
    outs = [torch.zeros(1), torch.zeros(2)]
    ins = [torch.arange(world, dtype=torch.float32), torch.ones(2 * world)]
    opts = dist.ReduceScatterOptions()
    opts.reduceOp = dist.ReduceOp.SUM
    pg.reduce_scatter_tensor_coalesced(outs, ins, opts).wait()
    check(record, "reduce_scatter_tensor_coalesced", [o.tolist() for o in outs], [[float(rank * world)], [float(world)] * 2])


def ddp(record, rank, world):
    """DDP(model) on the default group, without and with inagg's hook: the
    parameters stay identical on every rank (the step's gradients are the
    mean of the ranks')."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    for hooked in (False, True):
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(8, 3))
        if hooked:
            state = inagg.torch.HookState(
                controller=record["spec"]["controller"], job=record["spec"]["job"] + ".hook"
            )
            model.register_comm_hook(state, inagg.torch.allreduce_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(4, 8, generator=g)).square().sum().backward()
            opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        every = [torch.zeros_like(flat) for _ in range(world)]
        dist.all_gather(every, flat)
        spread = max((e - every[0]).abs().max().item() for e in every)
        check(record, "ddp hook=%s ranks agree" % hooked, spread == 0.0, True)
        if hooked:
            check(record, "ddp hook buckets through inagg", len(state.stats) > 0, True)
            state.close()


def groups(record, rank, world):
    """new_group: a subset with a job of its own, a subset and the whole
    world without one (gloo), and the default group undisturbed."""
    before = summed()
    pair = dist.new_group([0, 1])
    other = dist.new_group([2, 3])
    everyone = dist.new_group(list(range(world)))
    mine = pair if rank < 2 else other
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t, group=mine)
    members = [0, 1] if rank < 2 else [2, 3]
    check(record, "group all_reduce", t.tolist(), [float(sum(r + 1 for r in members))] * 4)
    check(record, "group through inagg", summed(mine) is not None, rank < 2)
    t = torch.full((2,), float(rank))
    dist.all_reduce(t, group=everyone)
    check(record, "whole-world group", t.tolist(), [float(sum(range(world)))] * 2)
    out = [torch.zeros(1) for _ in members]
    dist.all_gather(out, torch.tensor([float(rank)]), group=mine)
    check(record, "group all_gather", [o.tolist() for o in out], [[float(r)] for r in members])
    t = torch.full((3,), 1.0)
    dist.all_reduce(t)
    check(record, "default group after groups", t.tolist(), [float(world)] * 3)
    check(record, "default group still through inagg", summed() == before + 1, True)


def dead_peer(record, rank):
    t = torch.ones(4)
    dist.all_reduce(t)
    record["first"] = t.tolist()
    if rank == 1:
        return
    fails(record, rank)


def dead_switch(record, rank, out):
    """After one all_reduce, each rank says so (OUT.ready.RANK) and waits
    for OUT.go, which the test writes once it has stopped the switch."""
    t = torch.ones(4)
    dist.all_reduce(t)
    record["first"] = t.tolist()
    open("%s.ready.%d" % (out, rank), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(out + ".go"):
        if time.monotonic() > deadline:
            raise RuntimeError("the test never stopped the switch")
        time.sleep(0.05)
    fails(record, rank)


def fails(record, rank):
    """The next all_reduce, sync and async: each must raise, and leave the
    tensor as it was."""
    started = time.monotonic()
    t = torch.full((4,), float(rank + 1))
    try:
        dist.all_reduce(t)
        record["raised"] = None
    except Exception as e:  # the worker's error
        record["raised"] = "%s: %s" % (type(e).__name__, e)
    record["seconds"] = time.monotonic() - started
    record["after"] = t.tolist()
    work = dist.all_reduce(torch.ones(2), async_op=True)
    try:
        work.wait()
        record["wait_raised"] = None
    except Exception as e:
        record["wait_raised"] = "%s: %s" % (type(e).__name__, e)


def main():
    # A rank that hangs prints where, and exits: the test fails, not waits.
    faulthandler.dump_traceback_later(240, exit=True)
    spec = json.loads(sys.argv[1])
    inagg.torch.register_backend(controller=spec["controller"], job=spec["job"], timeout=spec.get("timeout", 30))
    dist.init_process_group("inagg")
    rank, world = dist.get_rank(), dist.get_world_size()
    record = {"rank": rank, "spec": spec, "checks": []}
    if spec["mode"] == "collectives":
        collectives(record, rank, world)
        ddp(record, rank, world)
        groups(record, rank, world)
        record["summed"] = summed()
    elif spec["mode"] == "dead_switch":
        dead_switch(record, rank, spec["out"])
    else:
        dead_peer(record, rank)
    with open("%s.%d" % (spec["out"], rank), "w") as f:
        json.dump(record, f)
    if spec["mode"] == "collectives":
        dist.destroy_process_group()
    else:
        sys.stdout.flush()
        os._exit(0)  # the group's peers are gone: no orderly teardown


if __name__ == "__main__":
    main()
