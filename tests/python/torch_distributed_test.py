"""PyTorch's own distributed test suite, run on the "inagg" backend.

torch ships the tests its backends must pass (DistributedTest in
torch.testing._internal.distributed.distributed_test; PyTorch runs them for
gloo, nccl and ucc from test/distributed/test_distributed_spawn.py). This
runs the same class with BACKEND=inagg: each test spawns WORLD_SIZE
processes, each of which makes an "inagg" process group through the
controller's job INAGG_JOB (created by the caller for WORLD_SIZE workers).
Tests that torch gates to gloo, nccl or ucc skip themselves, as they do for
any other backend.

    INAGG_CONTROLLER=127.0.0.1:47100 INAGG_JOB=judge WORLD_SIZE=2 \\
        python torch_distributed_test.py [-k PATTERN ...] [-v]

Arguments are unittest's (as torch's run_tests takes them). tests/torch.rs
runs a selection and checks that none failed.
"""

import os
import sys
import tempfile

# INAGG_JUDGE_AS=gloo: the tests run as torch runs them for gloo (its
# decorators and the tests' own branches see BACKEND "gloo"), but every
# default group they make is an "inagg" one (init_process_group is wrapped
# below): the judge of a backend that must do all gloo does on the CPU.
# Tests that compare the group's backend name with "gloo" fail for that
# reason alone.
AS = os.environ.get("INAGG_JUDGE_AS", "inagg")
os.environ["BACKEND"] = AS
os.environ.setdefault("WORLD_SIZE", "2")
# torch's runner, seeing CI set, writes XML reports through xmlrunner (not
# installed) and fetches lists of disabled tests: neither is wanted here.
os.environ.pop("CI", None)
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="inagg-judge-")

import inagg.torch  # noqa: E402

# Here, at import, so that every spawned rank (which imports this file as
# its main module) registers the backend too.
inagg.torch.register_backend(
    controller=os.environ["INAGG_CONTROLLER"],
    job=os.environ["INAGG_JOB"],
    timeout=float(os.environ.get("INAGG_TIMEOUT", "30")),
)

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


if AS != "inagg":
    import torch.distributed as dist

    _init = dist.init_process_group

    def _init_inagg(*args, backend=None, **kwargs):
        return _init(*args, backend="inagg" if backend == AS else backend, **kwargs)

    dist.init_process_group = _init_inagg


class TestInaggBackend(TestDistBackend, DistributedTest._DistTestBase):
    """torch's distributed tests, each in WORLD_SIZE spawned ranks."""

    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    sys.exit(run_tests())
