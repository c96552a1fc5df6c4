"""Training with compressed gradients (issue 32): 2 workers, 2 servers, DistributedOptimizer with
``Compression.topk(0.01, ef="vanilla")`` and ``Compression.named("onebit")`` (scaled signs, error
feedback) on a small regression model, BYTEPS_MIN_COMPRESS_BYTES=0 so that every gradient is
compressed.  Each worker checks that the loss on the whole data set went down, and reports its
parameters: they must be the same on both workers (every worker applies the same decompressed sum)
and differ from an uncompressed run's (so the compression really happened).

Needs a core with the compression pipeline (``_core.set_learning_rate``); skipped with an older one.
"""

from __future__ import annotations

import pytest

from conftest import job_results

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("require_core")

TRAIN = r"""
import json, os, sys
import torch
import byteps.torch as bps

bps.init()
rank, n = bps.rank(), bps.size()
mode = sys.argv[1]
compression = {"none": bps.Compression.none, "topk": bps.Compression.topk(0.01, ef="vanilla"),
               "onebit": bps.Compression.named("onebit")}[mode]

g = torch.Generator().manual_seed(7)
x = torch.randn(256, 32, generator=g)
teacher = torch.randn(32, 1, generator=g)
y = x @ teacher + 0.01 * torch.randn(256, 1, generator=g)
torch.manual_seed(rank)  # different initial weights: the broadcast must make them equal
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.02),
                               named_parameters=model.named_parameters(), compression=compression)
bps.broadcast_parameters(model.state_dict(), root_rank=0)
loss_fn = torch.nn.MSELoss()

def full_loss():
    with torch.no_grad():
        return float(loss_fn(model(x), y))

first = full_loss()
shard = slice(rank * 128, (rank + 1) * 128)
for step in range(60):
    opt.zero_grad()
    loss_fn(model(x[shard]), y[shard]).backward()
    opt.step()
last = full_loss()
params = [p.detach().flatten().tolist() for p in model.parameters()]
os.write(1, ("RESULT " + json.dumps({"rank": rank, "first": first, "last": last, "params": params}) + "\n").encode())
"""

ENV = {"BYTEPS_MIN_COMPRESS_BYTES": "0", "BYTEPS_TIMEOUT": "30"}


def _run(run_job, mode):
    job = run_job(2, 2, TRAIN, args=(mode,), env=ENV, timeout=120)
    assert job.returncode == 0, job
    results = sorted(job_results(job.stdout), key=lambda r: r["rank"])
    assert [r["rank"] for r in results] == [0, 1], job
    return results


def _max_diff(a, b):
    return max(abs(u - v) for pa, pb in zip(a, b) for u, v in zip(pa, pb))


@pytest.mark.parametrize("mode", ["topk", "onebit"])
def test_compressed_training_converges_and_workers_agree(run_job, mode):
    from byteps import _basics

    if not hasattr(_basics.core(), "set_learning_rate"):
        pytest.skip("this core has no compression pipeline (_core.set_learning_rate missing)")
    results = _run(run_job, mode)
    for r in results:
        assert r["last"] < 0.9 * r["first"], f"{mode}: the loss did not go down enough on worker {r['rank']}: {r}"
    assert results[0]["params"] == results[1]["params"], f"{mode}: the workers' parameters differ"
    plain = _run(run_job, "none")
    assert _max_diff(results[0]["params"], plain[0]["params"]) > 1e-6, \
        f"{mode}: the parameters equal an uncompressed run's: were the gradients compressed?"
