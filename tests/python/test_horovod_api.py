"""Horovod's calls in byteps.torch (issue 13, item 2) in a real 3-worker job, against a NumPy
reference: every worker computes what every other worker contributed (deterministic inputs), so
each result is checked exactly (integer dtypes) or to float tolerance, with uneven sizes and every
dtype, plus the calls that cannot behave like Horovod's raising an error that says so."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("require_core")

SCRIPT = r"""
import sys
import numpy as np
import torch
import byteps.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
fails = []

def npv(t):  # NumPy has no bfloat16
    return t.to(torch.float64).numpy() if t.dtype == torch.bfloat16 else t.numpy()

def check(what, got, want, exact=True):
    got = npv(got)
    ok = np.array_equal(got, want) if exact else np.allclose(got.astype(np.float64), want, rtol=1e-2, atol=1e-2)
    if not ok:
        fails.append(f"{what}: got {got.ravel()[:4]} want {np.asarray(want).ravel()[:4]}")

def inp(w, count, dtype):  # worker w's input
    return torch.arange(count, dtype=torch.float64).add(w + 1).mul(1 + w % 2).to(dtype)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.uint8, torch.int8]
for dtype in DTYPES:
    exact = dtype not in (torch.float16, torch.bfloat16)
    for count in (1, 7, 1000, 300001):
        if count > 1000 and dtype in (torch.uint8, torch.int8, torch.float16):
            continue  # sums would wrap, or pass float16's largest value
        total = sum(inp(w, count, torch.float64).numpy() for w in range(n))
        x = inp(r, count, dtype)
        before = x.clone()
        if dtype in (torch.uint8, torch.int8):  # Horovod's allreduce refuses 8-bit integers
            try:
                hvd.allreduce(x, op=hvd.Sum, name=f"s.{dtype}.{count}")
                fails.append(f"allreduce of {dtype} passed")
            except ValueError as e:
                if "is not supported" not in str(e):
                    fails.append(str(e))
        else:
            check(f"allreduce Sum {dtype} {count}", hvd.allreduce(x, op=hvd.Sum, name=f"s.{dtype}.{count}"),
                  total.astype(npv(x).dtype) if exact else total, exact)
        check(f"input untouched {dtype} {count}", x, npv(before))
        if dtype.is_floating_point:
            check(f"allreduce Average {dtype} {count}", hvd.allreduce(x, name=f"a.{dtype}.{count}"), total / n,
                  exact=False)
            h = hvd.allreduce_async(x, op=hvd.Average, name=f"aa.{dtype}.{count}", prescale_factor=2.0,
                                    postscale_factor=0.5)
            check(f"allreduce_async scaled {dtype} {count}", hvd.synchronize(h), total / n, exact=False)
        y = x.clone()
        if dtype not in (torch.uint8, torch.int8):
            out = hvd.allreduce_(y, op=hvd.Sum, name=f"i.{dtype}.{count}")
            if out.data_ptr() != y.data_ptr():
                fails.append("allreduce_ is not in place")
            check(f"allreduce_ {dtype} {count}", y, total.astype(npv(y).dtype) if exact else total, exact)
        for root in (0, n - 1):
            b = hvd.broadcast(inp(r, count, dtype), root_rank=root, name=f"b.{dtype}.{count}.{root}")
            check(f"broadcast {dtype} {count} from {root}", b, npv(inp(root, count, dtype)))
            z = inp(r, count, dtype)
            hvd.synchronize(hvd.broadcast_async_(z, root_rank=root, name=f"ba.{dtype}.{count}.{root}"))
            check(f"broadcast_async_ {dtype} {count} from {root}", z, npv(inp(root, count, dtype)))
    # allgather: worker w gives w + 1 rows of 3 columns
    g = hvd.allgather(inp(r, 3 * (r + 1), dtype).reshape(r + 1, 3), name=f"g.{dtype}")
    want = np.concatenate([npv(inp(w, 3 * (w + 1), dtype).reshape(w + 1, 3)) for w in range(n)])
    if tuple(g.shape) != (sum(range(1, n + 1)), 3):
        fails.append(f"allgather shape {tuple(g.shape)}")
    check(f"allgather {dtype}", g, want)

comp = hvd.allreduce(torch.full((64,), float(r + 1)), op=hvd.Sum, name="fp16", compression=hvd.Compression.fp16)
check("allreduce fp16 compression", comp, np.full(64, n * (n + 1) / 2), exact=False)
if comp.dtype != torch.float32:
    fails.append(f"compression changed the dtype to {comp.dtype}")

for call, needle, error in (
        (lambda: hvd.allreduce(torch.ones(2), op=hvd.Adasum, process_set=hvd.ProcessSet([0])), "global process set",
         NotImplementedError),
        (lambda: hvd.join(device="cpu"), "device must be an int", ValueError),
        (lambda: hvd.allreduce(torch.ones(2), process_set=object()), "must be a hvd.ProcessSet", ValueError),
        (lambda: hvd.allreduce(torch.ones(2), process_set=hvd.ProcessSet([0])), "is not registered", ValueError),
        (lambda: hvd.broadcast(torch.ones(2), root_rank=n), "is not a worker rank", ValueError)):
    try:
        call()
        fails.append(f"no error for {needle}")
    except error as e:
        if needle not in str(e):
            fails.append(f"{needle!r} not in {e}")
try:  # other dimensions that differ: every worker gets the same error
    hvd.allgather(torch.zeros(2, 3 + (r == 1)), name="bad")
    fails.append("allgather of mismatched shapes passed")
except hvd.HorovodInternalError as e:
    if "only the first dimension may differ" not in str(e):
        fails.append(str(e))

print("FAILS", fails[:10], flush=True) if fails else print("ALL OK", flush=True)
hvd.shutdown()
sys.exit(1 if fails else 0)
"""


def test_horovod_calls_match_a_numpy_reference_on_three_workers(run_job):
    result = run_job(3, 2, SCRIPT, timeout=240)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 3, result


OPTIMIZER = r"""
import sys
import torch
import byteps.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
fails = []

def grads_after_step(prefix, **kwargs):
    model = torch.nn.Linear(4, 1, bias=False)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.0),
                                   named_parameters=[(prefix + ".w", model.weight)], **kwargs)
    model(torch.full((1, 4), r + 1.0)).sum().backward()  # this worker's gradient: r + 1 everywhere
    opt.synchronize()
    return model.weight.grad

total = n * (n + 1) / 2
for prefix, kwargs, want in (("avg", {}, total / n), ("sum", {"op": hvd.Sum}, total),
                             ("pre", {"op": hvd.Average, "gradient_predivide_factor": 4.0}, total / n)):
    g = grads_after_step(prefix, **kwargs)
    if not torch.allclose(g, torch.full_like(g, want)):
        fails.append(f"{prefix}: {g.ravel().tolist()} != {want}")
for kwargs, needle in (({"op": hvd.Adasum, "process_set": hvd.ProcessSet([0])}, "global process set"),
                       ({"op": hvd.Sum, "gradient_predivide_factor": 2.0}, "op=Average only")):
    try:
        grads_after_step("bad", **kwargs)
        fails.append(f"no error for {kwargs}")
    except (ValueError, NotImplementedError) as e:
        if needle not in str(e):
            fails.append(str(e))
print("FAILS", fails, flush=True) if fails else print("ALL OK", flush=True)
hvd.shutdown()
sys.exit(1 if fails else 0)
"""


def test_distributed_optimizer_takes_horovods_op_and_predivide_factor(run_job):
    result = run_job(2, 1, OPTIMIZER, timeout=120)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
