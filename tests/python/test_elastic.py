"""Elastic training across processes (BytePS's suspend/resume, the C ABI's byteps_resume): two
workers finish a job, suspend, and resume into a second job (its own scheduler and server) with
the same declarations: the keys are the same, and every sum is exact in both jobs."""

from __future__ import annotations

import pytest

from byteps.launcher.ports import free_port
from tools.localjob import CORE_BINARY, write_script

pytestmark = pytest.mark.usefixtures("require_core")

SCRIPT = r"""
import os, sys
import torch
import byteps.torch as bps
bps.init()
rank = bps.rank()
keys = [bps.declare(n) for n in ("elastic.a", "elastic.b")]
x = torch.arange(1000, dtype=torch.float64) * (rank + 1)
assert torch.equal(bps.push_pull(x, average=False, name="elastic.a"), torch.arange(1000, dtype=torch.float64) * 3)
bps.push_pull(torch.ones(7), average=False, name="elastic.c")
speed = bps.get_pushpull_speed()
bps.suspend()
print("SUSPENDED", flush=True)
os.environ["DMLC_PS_ROOT_PORT"] = sys.argv[1]  # the second job's scheduler
bps.resume(2, 1, rank)
assert bps.rank() == rank and bps.size() == 2, (bps.rank(), bps.size())
again = [bps.declare(n) for n in ("elastic.a", "elastic.b")]
assert again == keys, (again, keys)
assert bps.declare("elastic.c") == keys[1] + 1  # pushed before the suspend: replayed in its place
y = torch.full((300000,), float(rank + 1), dtype=torch.float32)
assert torch.equal(bps.push_pull(y, average=True, name="elastic.b"), torch.full((300000,), 1.5))
print("RESUMED OK", flush=True)
bps.shutdown()
"""


def test_suspend_then_resume_into_a_new_job_keeps_keys_and_sums(cluster, tmp_path):
    pytest.importorskip("torch", reason="python3-torch is not installed")
    first = cluster.env(2, 1)
    second_port = free_port()
    second = {**cluster.env(2, 1), "DMLC_PS_ROOT_PORT": str(second_port)}
    script = write_script(tmp_path, SCRIPT)
    cluster.scheduler(first)
    cluster.server(0, first)
    # The second job waits for its nodes: its scheduler and server are up before the first ends.
    cluster.start("scheduler2", [str(CORE_BINARY), "scheduler"],
                  {**second, "DMLC_ROLE": "scheduler"})
    cluster.start("server2:0", [str(CORE_BINARY), "server"],
                  {**second, "DMLC_ROLE": "server"})
    for i in range(2):
        cluster.worker(f"worker:{i}", script, {**first, "DMLC_WORKER_ID": str(i)}, args=(str(second_port),))
    procs = cluster.wait(90)
    assert not cluster.leftovers(), cluster.dump()
    for label, proc in procs.items():
        assert proc.returncode == 0, f"{label}:\n{proc.output}"
    for i in range(2):
        out = procs[f"worker:{i}"].output
        assert "SUSPENDED" in out and "RESUMED OK" in out, out
