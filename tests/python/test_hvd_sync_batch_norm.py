"""hvd.SyncBatchNorm (reference section 11) in ONE 2-worker job: against torch.nn.BatchNorm on the
concatenated global batch (each worker builds every worker's deterministic share): outputs,
running statistics over two steps, input gradients and the worker-averaged weight/bias gradients
for the worker-averaged loss; unequal and empty shares, 2-D/3-D/4-D inputs, affine=False,
momentum=None, float32, eval = plain local batch norm, and the local errors."""

from __future__ import annotations

import pytest

from test_hvd_ops import COMMON

pytestmark = pytest.mark.usefixtures("require_core")

SCRIPT = COMMON + r"""
def close(what, got, want, tol):
    if tuple(got.shape) != tuple(want.shape):
        fails.append(f"{what}: shape {tuple(got.shape)} want {tuple(want.shape)}")
    elif not torch.allclose(got, want, rtol=tol, atol=tol):
        fails.append(f"{what}: max diff {(got - want).abs().max().item()} (tol {tol})")

def share(w, step, b, tail, dtype):  # worker w's input at a step: deterministic, different means per channel
    g = torch.Generator().manual_seed(1000 * step + 10 * w + b)
    x = torch.randn((b, C) + tail, generator=g, dtype=torch.float64) * (w + 1) + w - 0.5
    dy = torch.randn((b, C) + tail, generator=g, dtype=torch.float64)
    return x.to(dtype), dy.to(dtype)

C = 3
CASES = [  # (label, reference class, per-worker batch sizes, spatial dims, kwargs, dtype, tolerance)
    ("4d", torch.nn.BatchNorm2d, [3, 5], (4, 2), {"momentum": 0.3}, torch.float64, 1e-10),
    ("3d_cumulative", torch.nn.BatchNorm1d, [2, 4], (5,), {"momentum": None}, torch.float64, 1e-10),
    ("2d_empty_share", torch.nn.BatchNorm1d, [6, 0], (), {}, torch.float64, 1e-10),
    ("2d_no_affine", torch.nn.BatchNorm1d, [4, 3], (), {"affine": False}, torch.float64, 1e-10),
    ("4d_float32", torch.nn.BatchNorm2d, [2, 3], (3, 3), {}, torch.float32, 1e-4),
]
for label, cls, sizes, tail, kwargs, dtype, tol in CASES:
    ref = cls(C, **kwargs).to(dtype)
    mine = hvd.SyncBatchNorm(C, **kwargs).to(dtype)
    if ref.affine:
        with torch.no_grad():
            for m in (ref, mine):
                m.weight.copy_(torch.linspace(0.5, 1.5, C))
                m.bias.copy_(torch.linspace(-1.0, 1.0, C))
    for step in range(2):
        shares = [share(w, step, b, tail, dtype) for w, b in enumerate(sizes)]
        xg = torch.cat([x for x, _ in shares]).requires_grad_()
        yg = ref(xg)
        # the worker-averaged loss: worker w's loss is (y_w * dy_w).sum()
        (sum((yg[sum(sizes[:w]):sum(sizes[:w + 1])] * dy).sum() for w, (_, dy) in enumerate(shares)) / n).backward()
        x = shares[r][0].clone().requires_grad_()
        if ref.affine:
            mine.zero_grad()
        y = mine(x)
        (y * shares[r][1]).sum().backward()
        lo, hi = sum(sizes[:r]), sum(sizes[:r + 1])
        tag = f"{label} step {step}"
        close(f"{tag} output", y.detach(), yg.detach()[lo:hi], tol)
        close(f"{tag} running_mean", mine.running_mean, ref.running_mean, tol)
        close(f"{tag} running_var", mine.running_var, ref.running_var, tol)
        if mine.num_batches_tracked.item() != ref.num_batches_tracked.item():
            fails.append(f"{tag}: num_batches_tracked {mine.num_batches_tracked.item()}")
        # each worker's input gradient is n times the averaged loss's (it backpropagates its own loss)
        close(f"{tag} input grad", x.grad / n, xg.grad[lo:hi], tol)
        if ref.affine:
            for pname in ("weight", "bias"):
                local = getattr(mine, pname).grad
                avg = hvd.allreduce(local.clone(), name=f"{label}.{pname}.{step}", op=hvd.Average)
                close(f"{tag} averaged {pname} grad", avg, getattr(ref, pname).grad, tol)
            ref.zero_grad()
    # eval: running statistics, no collective: equals torch's BatchNorm on this worker's share alone
    ref.eval(), mine.eval()
    x, _ = share(r, 7, 4, tail, dtype)
    close(f"{label} eval output", mine(x), ref(x), tol)

# the local checks
bn = hvd.SyncBatchNorm(C)
expect("1-D input", ValueError, "expected at least 2D input", lambda: bn(torch.ones(C)))
expect("wrong channels", ValueError, "has 4 channels", lambda: bn(torch.ones(2, 4)))
if not isinstance(bn, torch.nn.modules.batchnorm._BatchNorm):
    fails.append("SyncBatchNorm is not a _BatchNorm")
# one value per channel over the whole job: every worker raises the same ValueError
one = hvd.SyncBatchNorm(C)
expect("one value per channel", ValueError, "more than 1 value per channel",
       lambda: one(torch.ones(1 if r == 0 else 0, C)))
finish()
"""


def test_sync_batch_norm_equals_batch_norm_over_the_global_batch(run_job):
    result = run_job(2, 1, SCRIPT, timeout=200)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
