"""hvd.Adasum through byteps' servers, in ONE 2-worker job: allreduce / allreduce_ / async /
grouped / the autograd form for float16/32/64 against a NumPy float64 reference of Horovod's tree
(computed by every worker from every worker's deterministic input), prescale/postscale, a tensor
larger than BYTEPS_PARTITION_BYTES (one partition: a split tensor would give per-partition
Adasum, which differs), the local errors; and DistributedOptimizer(op=Adasum), the delta
optimizer, against a reference that replays every worker's SGD-with-momentum step in the test.
test_hvd_adasum_four.py runs the allreduce part on 4 workers."""

from __future__ import annotations

import pytest

from conftest import HVD_PRELUDE

pytestmark = pytest.mark.usefixtures("require_core")

ALLREDUCE = HVD_PRELUDE + r"""
import numpy as np

checked = [0]
TOL = {torch.float16: 5e-3, torch.float32: 2e-5, torch.float64: 1e-12}

def inp(w, shape, dtype, seed):
    g = torch.Generator().manual_seed(1000 * seed + w)
    common = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (torch.randn(shape, generator=g, dtype=torch.float64) + 0.5 * (w + 1) * common).to(dtype)

def pair(a, b):
    d, na, nb = float(a @ b), float(a @ a), float(b @ b)
    tiny = np.sqrt(np.finfo(np.float64).tiny)
    ca = 1.0 if na < tiny else 1.0 - d / (2 * na)
    cb = 1.0 if nb < tiny else 1.0 - d / (2 * nb)
    return ca * a + cb * b

def tree(gs, lo, hi):
    if hi - lo == 1:
        return gs[lo]
    mid = (lo + hi) // 2
    return pair(tree(gs, lo, mid), tree(gs, mid, hi))

def scaled(x, f):  # Horovod's scaling arithmetic (float16 in float32)
    return x if f == 1.0 else (x.float() * f).to(x.dtype) if x.dtype == torch.float16 else x * f

def reference(shape, dtype, seed, pre=1.0, post=1.0):
    gs = [scaled(inp(w, shape, dtype, seed), pre).double().flatten().numpy() for w in range(n)]
    return torch.from_numpy(tree(gs, 0, n) * post).reshape(shape)

def close(what, got, want, dtype):
    checked[0] += 1
    if got.dtype != dtype or tuple(got.shape) != tuple(want.shape):
        fails.append(f"{what}: got {got.dtype} {tuple(got.shape)}")
        return
    err = (got.double() - want).abs() / (1 + want.abs())
    if err.numel() and float(err.max()) > TOL[dtype]:
        fails.append(f"{what}: max rel error {float(err.max()):.3g} got {got.flatten()[:4].tolist()} "
                     f"want {want.flatten()[:4].tolist()}")

seed = 0
for dtype in (torch.float16, torch.float32, torch.float64):
    for shape in ((7,), (4, 3), (3000,)):  # 3000 float32 = 12000 bytes > BYTEPS_PARTITION_BYTES
        seed += 1
        tag = f"{str(dtype)[6:]} {shape}"
        close(f"allreduce {tag}", hvd.allreduce(inp(r, shape, dtype, seed), name=f"a.{seed}", op=hvd.Adasum),
              reference(shape, dtype, seed), dtype)
        t = inp(r, shape, dtype, seed)
        hvd.allreduce_(t, name=f"b.{seed}", op=hvd.Adasum)
        close(f"allreduce_ {tag}", t, reference(shape, dtype, seed), dtype)
        h = hvd.allreduce_async(inp(r, shape, dtype, seed), op=hvd.Adasum, prescale_factor=0.5,
                                postscale_factor=3.0)
        close(f"async pre/post {tag}", hvd.synchronize(h), reference(shape, dtype, seed, 0.5, 3.0), dtype)
        outs = hvd.grouped_allreduce([inp(r, shape, dtype, seed), inp(r, shape, dtype, seed + 100)],
                                     name=f"g.{seed}", op=hvd.Adasum)
        close(f"grouped[0] {tag}", outs[0], reference(shape, dtype, seed), dtype)
        close(f"grouped[1] {tag}", outs[1], reference(shape, dtype, seed + 100), dtype)

# The same name again (a second round of the key) and the autograd form's gradient (Adasum of
# the upstream gradients, which are equal on every worker: Adasum of equal vectors is the vector).
for rnd in range(2):
    close(f"round {rnd}", hvd.allreduce(inp(r, (5,), torch.float32, 77 + rnd), name="again", op=hvd.Adasum),
          reference((5,), torch.float32, 77 + rnd), torch.float32)
x = inp(r, (6,), torch.float64, 9).requires_grad_()
(hvd.allreduce(x, name="grad", op=hvd.Adasum) * torch.arange(6.0, dtype=torch.float64)).sum().backward()
close("autograd", x.grad, torch.arange(6.0, dtype=torch.float64), torch.float64)

# Local errors: Horovod's dtype table (float16/32/64 only), raised on the calling worker.
expect("int32", ValueError, "Tensor type", lambda: hvd.allreduce(torch.ones(3, dtype=torch.int32), op=hvd.Adasum))
expect("bfloat16", ValueError, "Tensor type",
       lambda: hvd.allreduce(torch.ones(3, dtype=torch.bfloat16), op=hvd.Adasum))
expect("other set", NotImplementedError, "global process set",
       lambda: hvd.allreduce(torch.ones(3), op=hvd.Adasum, process_set=hvd.ProcessSet([0])))
"""

OPTIMIZER = r"""
# DistributedOptimizer(op=Adasum): every worker trains a Linear on its own data with SGD +
# momentum; the reference replays each worker's optimizer (its own momentum state) and applies
# start + Adasum(tree of the workers' updates) to the shared parameters.
def data(w, step):
    g = torch.Generator().manual_seed(50 + 10 * step + w)
    return torch.randn(8, 4, generator=g, dtype=torch.float64), torch.randn(8, 2, generator=g, dtype=torch.float64)

def model():
    torch.manual_seed(3)
    return torch.nn.Linear(4, 2).double()

net = model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=net.named_parameters(), op=hvd.Adasum)
expect("skip_synchronize", AssertionError, "not supported", lambda: opt.skip_synchronize().__enter__())
refs = [model() for _ in range(n)]
ref_opts = [torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9) for m in refs]
for step in range(3):
    opt.zero_grad()
    xb, yb = data(r, step)
    torch.nn.functional.mse_loss(net(xb), yb).backward()
    opt.synchronize()  # a no-op
    opt.step()
    starts = [p.detach().clone() for p in refs[0].parameters()]
    deltas = []
    for w in range(n):
        ref_opts[w].zero_grad()
        xb, yb = data(w, step)
        torch.nn.functional.mse_loss(refs[w](xb), yb).backward()
        ref_opts[w].step()
        deltas.append([(p.detach() - s).flatten().numpy() for p, s in zip(refs[w].parameters(), starts)])
    with torch.no_grad():
        for i, s in enumerate(starts):
            new = s + torch.from_numpy(tree([d[i] for d in deltas], 0, n)).reshape(s.shape)
            for m in refs:
                list(m.parameters())[i].copy_(new)
    for (name, p), q in zip(net.named_parameters(), refs[0].parameters()):
        close(f"optimizer step {step} {name}", p.detach(), q.detach(), torch.float64)
"""

FINISH = r"""
print(f"CHECKED {checked[0]}", flush=True)  # one write: processes of a host share stdout
finish()
"""


def test_adasum_allreduce_and_delta_optimizer_on_two_workers(run_job):
    result = run_job(2, 1, ALLREDUCE + OPTIMIZER + FINISH, env={"BYTEPS_PARTITION_BYTES": "4096"}, timeout=200)
    assert result.returncode == 0, result.output
    assert result.output.count("ALL OK") == 2, result.output
    assert result.output.count("CHECKED 54") == 2, result.output
