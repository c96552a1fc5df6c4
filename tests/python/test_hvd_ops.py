"""Horovod's collectives in byteps.torch (issue 29) in ONE 2-worker job per test: every op x every
dtype x 1-3 dims against a reference each worker computes from every worker's (deterministic)
input; variable-size allgather, alltoall splits, reducescatter rows, grouped and async forms;
gradients against the closed forms of the reference's section 6.  Each worker reports every
failure; the test asserts both workers printed ALL OK."""

from __future__ import annotations

import pytest

from conftest import HVD_PRELUDE

pytestmark = pytest.mark.usefixtures("require_core")

# HVD_PRELUDE plus this file's exact inputs and comparison; the other test_hvd_* files start
# their scripts with it too.
COMMON = HVD_PRELUDE + r"""
def inp(w, shape, dtype, lo=1):  # worker w's input: small values, exact in every dtype
    count = 1
    for d in shape:
        count *= d
    v = (torch.arange(count, dtype=torch.float64) % 3 + lo + w).reshape(shape)
    if dtype == torch.bool:
        return (v.long() % 2).bool()
    if dtype.is_floating_point or dtype in (torch.int32, torch.int64):
        v = v * (1 if w % 2 == 0 else -1)  # negatives too
    return v.to(dtype)

def same(what, got, want):
    if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
        fails.append(f"{what}: got {got.dtype} {tuple(got.shape)}, want {want.dtype} {tuple(want.shape)}")
    elif not torch.equal(got, want):
        fails.append(f"{what}: got {got.flatten()[:6].tolist()} want {want.flatten()[:6].tolist()}")
"""

OPS = COMMON + r"""
REDUCE = [torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64]
MOVE = REDUCE + [torch.uint8, torch.int8, torch.int16, torch.bool]
SHAPES = [(5,), (4, 3), (3, 2, 2)]

def reference(op, xs, dtype, pre=1.0, post=1.0):
    # Horovod's arithmetic: integers scaled in float64 and truncated, halves in float32.
    def scale(t, f):
        if f == 1.0:
            return t
        if not dtype.is_floating_point:
            return t.double().mul(f).trunc().to(dtype)
        if dtype in (torch.float16, torch.bfloat16):
            return t.float().mul(f).to(dtype)
        return t * f
    xs = [scale(x, pre) for x in xs]
    s = torch.stack(xs)
    if op in (hvd.Sum, hvd.Average):
        out = s.sum(0) if dtype.is_floating_point else s.sum(0).to(dtype)
        if op == hvd.Average:
            if dtype.is_floating_point:
                return scale(out, post / n)
            return torch.div(out, n, rounding_mode="trunc") if post == 1.0 else scale(out, post / n)
        return scale(out, post)
    red = {hvd.Min: lambda s: s.amin(0), hvd.Max: lambda s: s.amax(0), hvd.Product: lambda s: s[0] * s[1]}[op]
    return scale(red(s), post)

for dtype in REDUCE:
    for shape in SHAPES:
        xs = [inp(w, shape, dtype) for w in range(n)]
        for op in (hvd.Average, hvd.Sum, hvd.Min, hvd.Max, hvd.Product):
            tag = f"{op} {dtype} {shape}"
            x = xs[r].clone()
            same(f"allreduce {tag}", hvd.allreduce(x, op=op, name=f"ar.{tag}"), reference(op, xs, dtype))
            same(f"input kept {tag}", x, xs[r])
            y = xs[r].clone()
            hvd.synchronize(hvd.allreduce_async_(y, None, f"ari.{tag}", op, 2.0, 0.5))
            same(f"allreduce_async_ scaled {tag}", y, reference(op, xs, dtype, 2.0, 0.5))
        g = hvd.grouped_allreduce([xs[r], xs[r] * 2], op=hvd.Sum, name=f"gar.{dtype}.{shape}")
        same(f"grouped_allreduce {dtype} {shape} [0]", g[0], reference(hvd.Sum, xs, dtype))
        same(f"grouped_allreduce {dtype} {shape} [1]", g[1], reference(hvd.Sum, [x * 2 for x in xs], dtype))
        for op in (hvd.Sum, hvd.Average):
            full = reference(op, xs, dtype)
            d0 = shape[0]
            counts = [d0 // n + (1 if q < d0 % n else 0) for q in range(n)]
            off = sum(counts[:r])
            same(f"reducescatter {op} {dtype} {shape}", hvd.reducescatter(xs[r], op=op, name=f"rs.{op}.{dtype}.{shape}"),
                 full[off:off + counts[r]])
        gs = hvd.synchronize(hvd.grouped_reducescatter_async([xs[r], xs[r]], name=f"grs.{dtype}.{shape}", op=hvd.Sum))
        full = reference(hvd.Sum, xs, dtype)
        same(f"grouped_reducescatter {dtype} {shape}", gs[1], full[off:off + counts[r]])

# integer Average truncates toward zero: -7 over the workers
v = torch.tensor([-7 if r == 0 else 0], dtype=torch.int32)
same("int average truncates", hvd.allreduce(v, name="trunc"), torch.tensor([int(-7 / n)], dtype=torch.int32))

for dtype in MOVE:
    for shape in SHAPES:
        tag = f"{dtype} {shape}"
        # variable-size allgather: worker w gives w + 1 blocks of rows (worker 0 also 0 rows once)
        mine = torch.cat([inp(r, shape, dtype)] * (r + 1))
        want = torch.cat([torch.cat([inp(w, shape, dtype)] * (w + 1)) for w in range(n)])
        same(f"allgather {tag}", hvd.allgather(mine, name=f"ag.{tag}"), want)
        h = hvd.allgather_async(mine[:0] if r == 0 else mine, name=f"aga.{tag}")
        while not hvd.poll(h):
            pass
        same(f"allgather_async with an empty worker {tag}", hvd.synchronize(h),
             torch.cat([torch.cat([inp(w, shape, dtype)] * (w + 1)) for w in range(1, n)]))
        g0, g1 = hvd.grouped_allgather([mine, mine], name=f"gag.{tag}")
        same(f"grouped_allgather {tag}", g1, want)
        for root in range(n):
            same(f"broadcast {tag} from {root}", hvd.broadcast(inp(r, shape, dtype), root, name=f"b.{tag}.{root}"),
                 inp(root, shape, dtype))
            z = inp(r, shape, dtype)
            hvd.broadcast_(z, root, f"bi.{tag}.{root}")
            same(f"broadcast_ {tag} from {root}", z, inp(root, shape, dtype))
        # alltoall with splits: worker s sends (d + s) % 3 rows to worker d
        rows = sum((d + r) % 3 for d in range(n)) + 1  # one trailing row unsent
        data = torch.cat([inp(r * 10 + i, shape[1:] or (1,), dtype).reshape(1, *shape[1:]) for i in range(rows)])
        splits = [(d + r) % 3 for d in range(n)]
        out, received = hvd.alltoall(data, splits=torch.tensor(splits, dtype=torch.int32), name=f"a2a.{tag}")
        blocks = []
        for s in range(n):
            sdata_start = sum((d + s) % 3 for d in range(r))
            blocks += [inp(s * 10 + i, shape[1:] or (1,), dtype).reshape(1, *shape[1:])
                       for i in range(sdata_start, sdata_start + (r + s) % 3)]
        same(f"alltoall {tag}", out, torch.cat(blocks) if blocks else data[:0])
        same(f"received_splits {tag}", received, torch.tensor([(r + s) % 3 for s in range(n)], dtype=torch.int32))
        even = torch.cat([inp(r, shape, dtype)] * n)
        same(f"alltoall even {tag}", hvd.alltoall(even, name=f"a2e.{tag}"),
             torch.cat([inp(s, shape, dtype) for s in range(n)]))

objs = hvd.allgather_object({"rank": r, "pad": "x" * (r * 100)})
if [o["rank"] for o in objs] != list(range(n)) or len(objs[1]["pad"]) != 100:
    fails.append(f"allgather_object: {[o['rank'] for o in objs]}")
sp = torch.sparse_coo_tensor(torch.tensor([[r, 2]]), torch.tensor([1.0 + r, 2.0]), (4,))
dense = hvd.sparse_allreduce_async(sp, "sp", hvd.Sum)().to_dense()
want = torch.zeros(4)
for w in range(n):
    want[w] += 1.0 + w
    want[2] += 2.0
same("sparse_allreduce_async", dense, want)
hvd.barrier()
finish()
"""


def test_every_op_dtype_and_rank_on_two_workers(run_job):
    result = run_job(2, 1, OPS, timeout=400)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result


GRADS = COMMON + r"""
def grad_of(fn, x):
    x = x.clone().requires_grad_(True)
    out = fn(x)
    outs = out if isinstance(out, (list, tuple)) else [out]
    torch.autograd.backward([o for o in outs if o.requires_grad], [torch.ones_like(o) for o in outs if o.requires_grad])
    return x.grad

x = torch.arange(6, dtype=torch.float64).reshape(3, 2) + r
ones = torch.ones(3, 2, dtype=torch.float64)
same("allreduce Sum grad", grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum, name="g1"), x), ones * n)
same("allreduce Average grad", grad_of(lambda t: hvd.allreduce(t, name="g2"), x), ones)
same("allreduce scaled grad", grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum, name="g3", prescale_factor=2.0,
                                                               postscale_factor=0.25), x), ones * n * 0.5)
same("grouped_allreduce grad", grad_of(lambda t: hvd.grouped_allreduce([t, t * 3], op=hvd.Sum, name="g4"), x),
     ones * n * 4)
# allgather: worker w gives w + 1 rows; upstream all ones -> gradient = mean over workers of ones = 1
xr = torch.ones(r + 1, 2, dtype=torch.float64)
same("allgather grad", grad_of(lambda t: hvd.allgather(t, name="g5"), xr), torch.ones(r + 1, 2, dtype=torch.float64))
# weighted upstream: out * weights, weights differ per worker -> average of the weights' rows
def ag_weighted(t):
    out = hvd.allgather(t, name="g6")
    return [(out * (r + 1)).sum()]
same("allgather weighted grad", grad_of(ag_weighted, xr), torch.full((r + 1, 2), (n + 1) / 2, dtype=torch.float64))
same("grouped_allgather grad", grad_of(lambda t: hvd.grouped_allgather([t, t], name="g7"), xr),
     torch.full((r + 1, 2), 2.0, dtype=torch.float64))
same("broadcast grad", grad_of(lambda t: hvd.broadcast(t, 1, name="g8"), x), ones * (1.0 if r == 1 else 0.0))
# alltoall: each block goes back to its source with the upstream gradient (here ones)
data = torch.arange(4, dtype=torch.float64).reshape(4, 1) + r
same("alltoall grad", grad_of(lambda t: hvd.alltoall(t, splits=[1, 3] if r == 0 else [2, 2], name="g9")[0], data),
     torch.ones(4, 1, dtype=torch.float64))
rs = torch.ones(5, 2, dtype=torch.float64)
same("reducescatter Sum grad", grad_of(lambda t: hvd.reducescatter(t, op=hvd.Sum, name="g10"), rs), rs * n)
same("reducescatter Average grad", grad_of(lambda t: hvd.reducescatter(t, name="g11", prescale_factor=3.0), rs),
     rs * 3.0)
same("grouped_reducescatter grad", grad_of(lambda t: hvd.grouped_reducescatter([t, t], op=hvd.Sum, name="g12"), rs),
     rs * 2 * n)
# compression: the gradient flows back through the casts
same("allreduce fp16 compression grad",
     grad_of(lambda t: hvd.allreduce(t, op=hvd.Sum, name="g13", compression=hvd.Compression.fp16), x), ones * n)
# gradcheck-style: d/dx of sum(allreduce(x)^2 weights) computed by finite differences matches
w = torch.tensor([1.0, -2.0], dtype=torch.float64)
g = grad_of(lambda t: [(hvd.allreduce(t, op=hvd.Sum, name="g14") * w).sum()], x[0])
same("allreduce closed form with weights", g, w * n)
finish()
"""


def test_gradients_match_the_closed_forms(run_job):
    result = run_job(2, 1, GRADS, timeout=200)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
