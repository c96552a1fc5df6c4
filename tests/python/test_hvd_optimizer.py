"""DistributedOptimizer's Horovod arguments (reference section 8) in one 2-worker job: groups,
num_groups (deprecated), op=Max, sparse_as_dense, the validation errors, and the UserWarning of
step() after synchronize()."""

from __future__ import annotations

import pytest

from test_hvd_ops import COMMON

pytestmark = pytest.mark.usefixtures("require_core")

SCRIPT = COMMON + r"""
def grads(prefix, sparse=False, **kwargs):
    emb = torch.nn.Embedding(4, 2, sparse=sparse)
    lin = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        emb.weight.fill_(1.0)
        lin.weight.fill_(1.0)
    named = [(f"{prefix}.emb", emb.weight), (f"{prefix}.lin", lin.weight)]
    opt = hvd.DistributedOptimizer(torch.optim.SGD([emb.weight, lin.weight], lr=0.0), named_parameters=named,
                                   **kwargs)
    (lin(emb(torch.tensor([r]))).sum() * (r + 1)).backward()
    opt.synchronize()
    return emb.weight.grad, lin.weight.grad, opt

# this worker's gradients: emb row r = (r + 1), lin = (r + 1)
emb_avg = torch.zeros(4, 2)
for w in range(n):
    emb_avg[w] = (w + 1) / n
lin_avg = torch.full((1, 2), sum(1.0 * (w + 1) for w in range(n)) / n)
for prefix, kwargs in (("plain", {}), ("groups1", {"groups": 1})):
    ge, gl, _ = grads(prefix, **kwargs)
    same(f"{prefix} emb", ge, emb_avg)
    same(f"{prefix} lin", gl, lin_avg)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    ge, gl, opt = grads("numgroups", num_groups=2)
    if not any(issubclass(w.category, DeprecationWarning) for w in caught):
        fails.append("no DeprecationWarning for num_groups")
    opt.step()
    if not any(issubclass(w.category, UserWarning) and str(w.message).startswith(
            "optimizer.step() called without optimizer.skip_synchronize() context after optimizer.synchronize()")
            for w in caught):
        fails.append("no UserWarning for step() after synchronize()")
same("num_groups lin", gl, lin_avg)
ge, gl, _ = grads("max", op=hvd.Max)
same("op=Max lin", gl, torch.full((1, 2), float(n)))
ge, gl, _ = grads("sparse", sparse=True, sparse_as_dense=True)
# (byteps gives every hooked parameter a dense zero gradient first, so it accumulates densely)
same("sparse_as_dense emb", ge.to_dense() if ge.is_sparse else ge, emb_avg)
ge, gl, _ = grads("sparse_ag", sparse=True)
same("sparse embedding emb", ge.to_dense() if ge.is_sparse else ge, emb_avg)
p = torch.nn.Parameter(torch.ones(2))
for kwargs, error, needle in (({"backward_passes_per_step": 0}, ValueError, "backward_passes_per_step"),
                              ({"op": hvd.Sum, "gradient_predivide_factor": 2.0}, ValueError, "op=Average only"),
                              ({"groups": 0}, ValueError, "groups must be > 0"),
                              ({"groups": [[p, p]]}, ValueError, "more than one group"),
                              ({"groups": [["x"]]}, ValueError, "must hold tensors"),
                              ({"op": hvd.Adasum, "process_set": hvd.ProcessSet([0])}, NotImplementedError,
                               "global process set"),
                              ({"process_set": hvd.ProcessSet([0])}, ValueError, "is not registered")):
    expect(f"DistributedOptimizer {kwargs}", error, needle,
           lambda: hvd.DistributedOptimizer(torch.optim.SGD([p], lr=0.1), named_parameters=[("p", p)], **kwargs))
finish()
"""


def test_distributed_optimizer_takes_horovods_arguments(run_job):
    result = run_job(2, 1, SCRIPT, timeout=200)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result


def test_bad_named_parameters_are_a_value_error_before_init():
    """Horovod validates named_parameters first, so a script that builds its optimizer before
    hvd.init() learns of duplicate or missing names as ValueError, not as "not initialized"."""
    import torch

    import byteps.torch as hvd

    if hvd.is_initialized():
        pytest.skip("this process has a byteps job running (another test left it); the check needs none")
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(list(a.parameters()) + list(b.parameters()), lr=0.1)
    dup = list(a.named_parameters()) + list(b.named_parameters())  # 'weight' and 'bias' twice
    with pytest.raises(ValueError, match="must be unique. Found duplicates: bias, weight"):
        hvd.DistributedOptimizer(opt, named_parameters=dup)
    with pytest.raises(ValueError, match="not in it"):
        hvd.DistributedOptimizer(opt, named_parameters=list(a.named_parameters()))
    with pytest.raises(ValueError, match="sequence of tuples"):
        hvd.DistributedOptimizer(opt, named_parameters=[["w", a.weight]])
