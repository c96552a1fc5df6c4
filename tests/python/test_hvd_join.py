"""Horovod's join() in byteps.torch (issue 29): a worker that ran out of data joins; the others'
allreduces go on with its share counted as zeros on the servers (Average still divides by the
job's size), their allgathers, broadcasts, alltoalls and reducescatters fail with
HorovodInternalError, join returns the last rank to join on every worker, and afterwards every
worker runs every op again.  ONE 3-worker, 2-server job with default settings runs: uneven steps
that cross the online tuner's partition phase (uses 6 and 11), each op family while some worker
has joined, two joins in a row with a different last rank, and a DistributedOptimizer loop with
uneven batches checked against a reference the test computes."""

from __future__ import annotations

import pytest

from test_hvd_ops import COMMON

pytestmark = pytest.mark.usefixtures("require_core")

# The script's uneven steps: phase 1's, 3's and 4's per rank, and the last rank to join in each.
THREE = dict(BASE1=[3, 8, 14], LAST1=2, BASE3=[5, 1, 2], LAST3=0, BATCHES=[4, 7, 2], LAST4=1)


def params(p):
    return "".join(f"{k} = {v!r}\n" for k, v in p.items())


JOIN = COMMON + r"""
import math
assert n == len(BASE1)

def steps_of(w, base):  # uneven data: worker w has base[w] steps
    return base[w]

# Phase 1: worker 0 has 3 steps, worker 1 has 8, worker 2 has 14 (the tuner's uses 6 and 11 are
# crossed while others sit out).
base = BASE1
for s in range(base[r]):
    active = [w for w in range(n) if s < base[w]]
    x = torch.arange(6, dtype=torch.float32) + s
    same(f"sum step {s}", hvd.allreduce(x * (r + 1), name="grad", op=hvd.Sum),
         sum(x * (w + 1) for w in active))
    avg = hvd.allreduce(x * (r + 1), name="avg")  # divides by the job's size, joined workers included
    if not torch.allclose(avg, sum(x * (w + 1) for w in active) / n):
        fails.append(f"average step {s}: got {avg.tolist()}")
    ix = torch.arange(1, 5, dtype=torch.int32) + r + s  # positive: a joined worker's zero is the min
    want_min = torch.zeros(4, dtype=torch.int32) if len(active) < n else torch.stack(
        [torch.arange(1, 5, dtype=torch.int32) + w + s for w in active]).amin(0)
    same(f"min step {s}", hvd.allreduce(ix, name="imin", op=hvd.Min), want_min)
    neg = -(torch.arange(1, 5, dtype=torch.int64) + r + s)  # negative: a joined worker's zero is the max
    want_max = torch.zeros(4, dtype=torch.int64) if len(active) < n else torch.stack(
        [-(torch.arange(1, 5, dtype=torch.int64) + w + s) for w in active]).amax(0)
    same(f"max step {s}", hvd.allreduce(neg, name="imax", op=hvd.Max), want_max)
    want_prod = torch.zeros(3) if len(active) < n else torch.full((3,), float(math.prod(w + 2 for w in active)))
    same(f"product step {s}", hvd.allreduce(torch.full((3,), float(r + 2)), name="prod", op=hvd.Product), want_prod)
    if len(active) == 1:
        # Adasum of one vector and zero vectors is that vector.
        v = torch.tensor([1.0, -2.0, 3.0], dtype=torch.float64) * (s + 1)
        same(f"adasum alone step {s}", hvd.allreduce(v, name="ada", op=hvd.Adasum), v)
    if len(active) < n:
        expect(f"allgather while joined {s}", hvd.HorovodInternalError, "had joined",
               lambda: hvd.allgather(torch.ones(2, 2), name=f"ag{s}"))
        expect(f"broadcast while joined {s}", hvd.HorovodInternalError, "had joined",
               lambda: hvd.broadcast(torch.ones(3), root_rank=active[0], name=f"bc{s}"))
        expect(f"reducescatter while joined {s}", hvd.HorovodInternalError, "sparse_as_dense",
               lambda: hvd.reducescatter(torch.ones(4, 2), name=f"rs{s}"))
        # The unnamed counter stays in step: an allgather the others cannot make is not lost.
        same(f"allreduce after a failed op {s}", hvd.allreduce(torch.ones(2), name=f"after{s}", op=hvd.Sum),
             torch.full((2,), float(len(active))))
last = hvd.join()
same("phase 1 last", torch.tensor([last]), torch.tensor([LAST1]))

# Phase 2: everyone again, on the same names (their rounds now map past those the early joiners sat out).
for s in range(4):
    x = torch.arange(6, dtype=torch.float32) + s
    same(f"phase 2 sum {s}", hvd.allreduce(x * (r + 1), name="grad", op=hvd.Sum), x * (n * (n + 1) // 2))
    same(f"phase 2 min {s}", hvd.allreduce(torch.arange(1, 5, dtype=torch.int32) + r, name="imin", op=hvd.Min),
         torch.arange(1, 5, dtype=torch.int32))
same("phase 2 allgather", hvd.allgather(torch.full((r + 1, 2), float(r)), name="gather"),
     torch.cat([torch.full((w + 1, 2), float(w)) for w in range(n)]))
same("phase 2 broadcast", hvd.broadcast(torch.full((3,), float(r)), root_rank=1, name="bcast"), torch.full((3,), 1.0))

# Phase 3: worker 0 runs longest; a second join returns 0.
for s in range(BASE3[r]):
    active = [w for w in range(n) if s < BASE3[w]]
    same(f"phase 3 step {s}", hvd.allreduce(torch.ones(4) * (r + 1), name="grad3", op=hvd.Sum),
         torch.full((4,), float(sum(w + 1 for w in active))))
last = hvd.join()
same("phase 3 last", torch.tensor([last]), torch.tensor([LAST3]))

# Phase 4: DistributedOptimizer with uneven batches, then the last joiner's parameters everywhere.
torch.manual_seed(7)
model = torch.nn.Linear(4, 1, bias=True)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
ref = torch.nn.Linear(4, 1, bias=True)
ref.load_state_dict(model.state_dict())
lr = 0.1
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=lr), named_parameters=model.named_parameters())
batches = BATCHES

def batch(w, b):
    g = torch.Generator().manual_seed(1000 * w + b)
    return torch.randn(8, 4, generator=g), torch.randn(8, 1, generator=g)

for b in range(batches[r]):
    xb, yb = batch(r, b)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(xb), yb).backward()
    opt.step()
last = hvd.join()
same("phase 4 last", torch.tensor([last]), torch.tensor([LAST4]))
hvd.broadcast_parameters(model.state_dict(), root_rank=last)
# The reference: each step averages over all n workers, a finished worker's gradient being zero.
for b in range(max(batches)):
    grads = []
    for w in range(n):
        if b >= batches[w]:
            continue
        ref.zero_grad()
        xb, yb = batch(w, b)
        torch.nn.functional.mse_loss(ref(xb), yb).backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    with torch.no_grad():
        for i, p in enumerate(ref.parameters()):
            p -= lr * sum(g[i] for g in grads) / n
for (name, p), q in zip(model.named_parameters(), ref.parameters()):
    if not torch.allclose(p.detach(), q.detach(), atol=1e-5):
        fails.append(f"optimizer {name}: got {p.detach().flatten().tolist()} want {q.detach().flatten().tolist()}")
hvd.barrier()
finish()
"""

SOLO = r"""
import sys
import byteps.torch as hvd
hvd.init()
got = hvd.join()
print("ALL OK" if got == hvd.rank() == 0 else f"FAILS join returned {got}", flush=True)
hvd.shutdown()
"""


def test_join_with_uneven_data_every_op_family_and_an_optimizer(run_job):
    result = run_job(3, 2, params(THREE) + JOIN, timeout=240)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 3, result


def test_join_alone_returns_its_own_rank(run_job):
    result = run_job(1, 1, SOLO, timeout=60)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 1, result
