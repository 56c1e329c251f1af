"""Data-parallel training with DDP, gradients summed by inagg or by gloo.

A small convolutional network learns scikit-learn's bundled handwritten
digits (1,797 8x8 images; nothing is downloaded). Under torchrun each rank
trains on its shard; after each epoch rank 0 prints the mean loss, and at
the end the test accuracy and the time per step, split into computation
and communication::

    inagg emu &                                         # the switch
    inagg controller --switch 127.0.0.1:47001 --state ctl.redb &
    inagg ctl --controller 127.0.0.1:47100 job create --name digits --count 4 --slots 16 --elements 16370
    torchrun --nproc-per-node 4 examples/torch/train.py --backend inagg \\
        --controller 127.0.0.1:47100 --job digits
    torchrun --nproc-per-node 4 examples/torch/train.py --backend gloo

Communication is the time from a bucket's hand-over to its sum, summed over
buckets: it overlaps the backward pass, so computation plus communication
can exceed the step.

--json FILE writes each rank's record (losses, accuracy, parameters'
checksum, times) to FILE.RANK, for tests that compare runs.
"""

import argparse
import hashlib
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(nn.Module):
    """Two convolutions and two dense layers: about 30,000 parameters."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 4 * 4, 48)
        self.fc2 = nn.Linear(48, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(x)


def arguments():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", choices=["inagg", "gloo"], default="inagg")
    p.add_argument("--controller", help="inagg controller's API address (with --job, the name)")
    p.add_argument("--switch", help="the switch's data address (with --job as its id and --pool-size)")
    p.add_argument("--job", default="digits")
    p.add_argument("--pool-size", type=int, default=64, help="with --switch: the job's pool")
    p.add_argument("--elements", type=int, default=64, help="with --switch: the job's K")
    p.add_argument("--bind", default="127.0.0.1:47500",
                   help="with --switch: HOST:PORT of rank 0; rank r binds PORT + r (the job's endpoints)")
    p.add_argument("--token", help="the controller's token")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds without progress before a rank fails")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--batch", type=int, default=32, help="per rank")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--amp", choices=["off", "bf16", "f16"], default="off",
                   help="autocast: the buckets travel in that 16-bit format")
    p.add_argument("--bucket-dtype", choices=["f32", "f16", "bf16"], default="f32",
                   help="inagg: the format float32 buckets travel in")
    p.add_argument("--inject-inf", type=int, metavar="STEP", default=None,
                   help="rank 1 puts an inf in its gradient at this step (GradScaler must skip it)")
    p.add_argument("--die-at", type=int, metavar="STEP", default=None,
                   help="rank 1 exits at this step (the others must fail, not hang)")
    p.add_argument("--json", help="write each rank's record to JSON.RANK")
    return p.parse_args()


def data(rank, world):
    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    g = torch.Generator().manual_seed(0)
    order = torch.randperm(len(y), generator=g)
    x, y = x[order], y[order]
    split = int(len(y) * 0.8)
    train = (x[:split][rank::world], y[:split][rank::world])
    return train, (x[split:], y[split:])


def hook_for(args, model, rank, world):
    """Registers the communication hook; returns what reports its time."""
    if args.backend == "inagg":
        import inagg.torch

        dtype = {"f32": None, "f16": torch.float16, "bf16": torch.bfloat16}[args.bucket_dtype]
        options = dict(job=args.job, timeout=args.timeout, dtype=dtype)
        if args.controller:
            options.update(controller=args.controller, token=args.token)
        elif args.switch:
            host, port = args.bind.rsplit(":", 1)
            options.update(switch=args.switch, pool_size=args.pool_size, job=int(args.job),
                           elements=args.elements, bind="%s:%d" % (host, int(port) + rank))
        else:
            sys.exit("train.py: --backend inagg needs --controller (or --switch)")
        state = inagg.torch.HookState(**options)
        model.register_comm_hook(state, inagg.torch.allreduce_hook)
        return state, Timed(state)
    timed = Timed(None)

    def gloo_hook(_, bucket):
        start = time.perf_counter()
        buf = bucket.buffer().div_(world)
        fut = dist.all_reduce(buf, async_op=True).get_future()

        def done(f):
            timed.seconds += time.perf_counter() - start
            return f.value()[0]

        return fut.then(done)

    model.register_comm_hook(None, gloo_hook)
    return None, timed


class Timed:
    """Communication time: gloo's hook adds to ``seconds``; inagg's state
    keeps each bucket's Stats, whose wall time is the same measure."""

    def __init__(self, state):
        self.state = state
        self.seconds = 0.0

    def total(self):
        if self.state is None:
            return self.seconds
        return sum(s.seconds for s in self.state.stats)


def checksum(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def main():
    args = arguments()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    (x, y), (tx, ty) = data(rank, world)
    model = DDP(Net())
    state, timed = hook_for(args, model, rank, world)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    amp = {"off": None, "bf16": torch.bfloat16, "f16": torch.float16}[args.amp]
    scaler = torch.amp.GradScaler("cpu", enabled=amp is not None)
    record = {"rank": rank, "world": world, "backend": args.backend, "losses": [], "skipped": []}
    steps = 0
    step_seconds = 0.0
    per_epoch = len(y) // args.batch
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed * 1000 + epoch)
        order = torch.randperm(len(y), generator=g)
        total = 0.0
        for b in range(per_epoch):
            idx = order[b * args.batch:(b + 1) * args.batch]
            if args.die_at is not None and steps == args.die_at and rank == 1:
                os._exit(3)
            start = time.perf_counter()
            opt.zero_grad()
            with torch.autocast("cpu", dtype=amp or torch.bfloat16, enabled=amp is not None):
                loss = F.cross_entropy(model(x[idx]), y[idx])
            if args.inject_inf is not None and steps == args.inject_inf and rank == 1:
                loss = loss * float("inf")
            scale_before = scaler.get_scale() if scaler.is_enabled() else None
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            if scaler.is_enabled() and scaler.get_scale() < scale_before:
                record["skipped"].append(steps)
            step_seconds += time.perf_counter() - start
            total += loss.item() if np.isfinite(loss.item()) else 0.0
            steps += 1
        mean = torch.tensor([total / per_epoch])
        dist.all_reduce(mean)  # gloo: the process group's own
        record["losses"].append(mean.item() / world)
        if rank == 0:
            print("epoch %d: loss %.4f" % (epoch + 1, mean.item() / world), flush=True)
    model.eval()
    with torch.no_grad():
        accuracy = (model(tx).argmax(1) == ty).float().mean().item()
    comm = timed.total()
    record.update(accuracy=accuracy, checksum=checksum(model), steps=steps,
                  step_ms=1e3 * step_seconds / steps, comm_ms=1e3 * comm / steps)
    if rank == 0:
        print("test accuracy %.3f; per step %.2f ms: computation %.2f ms, communication %.2f ms (%s)"
              % (accuracy, record["step_ms"], record["step_ms"] - min(record["comm_ms"], record["step_ms"]),
                 record["comm_ms"], args.backend), flush=True)
    if args.json:
        with open("%s.%d" % (args.json, rank), "w") as f:
            json.dump(record, f)
    if state is not None:
        state.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
