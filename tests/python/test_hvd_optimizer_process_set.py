"""DistributedOptimizer(process_set=...) (reference sections 8 and 12) in ONE 3-worker job with
the set {0, 1}: the members train a small model with SGD-with-momentum whose gradients are
averaged over the two members (not the three workers), worker 2 trains with its own gradients
only (no hooks: a plain local optimizer), each against a reference every worker replays in the
script; then op=Sum and gradient_predivide_factor on the set, the members' parameter-mismatch
ValueError, and Adasum on a set (NotImplementedError, on members and non-members alike)."""

from __future__ import annotations

import pytest

from test_hvd_ops import COMMON

pytestmark = pytest.mark.usefixtures("require_core")

SCRIPT = COMMON.replace("hvd.init()", "PS = hvd.ProcessSet([0, 1])\nhvd.init(process_sets=[PS])") + r"""
STEPS = 3
member = PS.included()

def model():
    lin = torch.nn.Linear(3, 2)
    with torch.no_grad():
        lin.weight.copy_(torch.arange(6.0).reshape(2, 3) / 10)
        lin.bias.fill_(0.1)
    return lin

def loss(m, w, step):  # worker w's batch at this step
    x = (torch.arange(12.0).reshape(4, 3) % 5 + w + step) / 7
    y = torch.stack([x.sum(1), x[:, 0] - x[:, 2]], 1) * (w + 1)
    return ((m(x) - y) ** 2).mean()

def gradients(m, w, step):
    m.zero_grad(set_to_none=True)
    loss(m, w, step).backward()
    return [p.grad.clone() for p in m.parameters()]

def reference(workers):  # SGD with momentum on the average of `workers`' gradients, replayed here
    ref = model()
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        grads = [gradients(ref, w, step) for w in workers]
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] for g in grads) / len(workers)
        opt.step()
    return torch.cat([p.detach().flatten() for p in ref.parameters()])

net = model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=net.named_parameters(), process_set=PS)
if bool(opt._grad_accs) != member:
    fails.append(f"gradient hooks registered: {bool(opt._grad_accs)}, member of the set: {member}")
for step in range(STEPS):
    opt.zero_grad()
    loss(net, r, step).backward()
    opt.step()
mine = torch.cat([p.detach().flatten() for p in net.parameters()])
same("parameters vs reference", mine, reference(PS.ranks if member else [r]))
rows = hvd.allgather(mine.unsqueeze(0))  # every worker's parameters, in rank order
same("members end equal", rows[PS.ranks[1]], rows[PS.ranks[0]])
outsider = [w for w in range(n) if w not in PS.ranks][0]
if torch.equal(rows[outsider], rows[PS.ranks[0]]):
    fails.append(f"worker {outsider} (outside the set) ended with the members' parameters")
if member:
    g = {w: gradients(model(), w, 0) for w in PS.ranks}
    total = lambda i: sum(g[w][i] for w in PS.ranks)  # noqa: E731
    for kwargs, want in (({"op": hvd.Sum}, total),
                         ({"gradient_predivide_factor": 2.0}, lambda i: total(i) / len(PS.ranks))):
        m = model()
        o = hvd.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), named_parameters=m.named_parameters(),
                                     process_set=PS, **kwargs)
        loss(m, r, 0).backward()
        o.synchronize()
        for i, p in enumerate(m.parameters()):
            same(f"{kwargs} grad {i}", p.grad, want(i))
    q = torch.nn.Parameter(torch.ones(2 + r))  # the members disagree on its shape
    expect("members with different parameters", ValueError, "parameter 'q'",
           lambda: hvd.DistributedOptimizer(torch.optim.SGD([q], lr=0.1), named_parameters=[("q", q)],
                                            process_set=PS))
expect("Adasum on a set", NotImplementedError, "global process set",
       lambda: hvd.DistributedOptimizer(torch.optim.SGD(net.parameters(), lr=0.1),
                                        named_parameters=net.named_parameters(), op=hvd.Adasum, process_set=PS))
hvd.barrier()
finish()
"""


def test_optimizer_on_a_set_averages_among_members_and_is_local_elsewhere(run_job):
    result = run_job(3, 1, SCRIPT, timeout=60)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 3, result
