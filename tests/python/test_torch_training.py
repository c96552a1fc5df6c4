"""Training with byteps.torch through bpsrun, compared with single-process training.

Every worker trains a small MLP on its slice of deterministic synthetic batches (the loss is a
mean, so the average of the workers' gradients is the full-batch gradient) and prints its final
state as a JSON line; this process trains the same model on the whole batches with plain torch
and compares.  The model and data code (COMMON) is shared by both sides.
"""

from __future__ import annotations

import json
import os
import re

import pytest

from conftest import clean_config_env

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.usefixtures("require_core")

COMMON = r'''
import json, sys
import torch
import torch.nn.functional as F

PER_WORKER = 4


def make_model(seed, hidden=7, extra=False):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(5, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 3)]
    if extra:
        layers += [torch.nn.Tanh(), torch.nn.Linear(3, 3)]
    return torch.nn.Sequential(*layers)


def batch(step, micro, n):
    g = torch.Generator().manual_seed(7919 * step + 31 * micro + 1)
    return torch.randn(PER_WORKER * n, 5, generator=g), torch.randn(PER_WORKER * n, 3, generator=g)


def state(model):
    return {k: v.detach().double().flatten().tolist() for k, v in model.state_dict().items()}


def train(model, opt, n, rank, steps, passes=1, clip=None, ddp=None):
    """rank None: the whole batch (the single-process reference); else this rank's slice."""
    net = model if ddp is None else ddp
    for step in range(steps):
        opt.zero_grad()
        for micro in range(passes):
            x, y = batch(step, micro, n)
            if rank is not None:
                x, y = x[rank * PER_WORKER:(rank + 1) * PER_WORKER], y[rank * PER_WORKER:(rank + 1) * PER_WORKER]
            if ddp is not None and micro < passes - 1:
                with ddp.no_sync():
                    F.mse_loss(net(x), y).backward()
            else:
                F.mse_loss(net(x), y).backward()
        if clip is None:
            opt.step()
        elif hasattr(opt, "skip_synchronize"):
            opt.synchronize()  # the averaged gradients, then clip them, then step without waiting again
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            with opt.skip_synchronize():
                opt.step()
        else:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
'''

PRELUDE = COMMON + r'''
import byteps.torch as bps
from byteps.torch.parallel import DistributedDataParallel

bps.init()
rank, n = bps.rank(), bps.size()


def emit(tag, value):
    print("RESULT " + json.dumps({"tag": tag, "value": value}), flush=True)
'''

FAST = {"BYTEPS_TIMEOUT": "15"}


def run_ns() -> dict:
    ns: dict = {}
    exec(COMMON, ns)  # noqa: S102 - our own code, shared with the workers
    return ns


def reference(n, steps, passes=1, clip=None, seed=100, lr=0.1, momentum=0.9, schedule=None):
    """Single-process training on the whole batches; ``schedule``: [(steps, passes), ...]."""
    ns = run_ns()
    model = ns["make_model"](seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for s, p in schedule or [(steps, passes)]:
        ns["train"](model, opt, n, None, s, p, clip)
    return ns["state"](model)


def results(job) -> dict:
    """{tag: {rank: value}} from the workers' RESULT lines."""
    out: dict = {}
    for line in job.stdout.splitlines():
        m = re.match(r"\[worker:(\d+)\] RESULT (.*)$", line)
        if m:
            rec = json.loads(m.group(2))
            out.setdefault(rec["tag"], {})[int(m.group(1))] = rec["value"]
    return out


def assert_state_close(got: dict, want: dict, rtol: float, atol: float, what: str) -> None:
    assert got.keys() == want.keys(), what
    for key in want:
        torch.testing.assert_close(torch.tensor(got[key], dtype=torch.float64),
                                   torch.tensor(want[key], dtype=torch.float64), rtol=rtol, atol=atol,
                                   msg=lambda m, key=key: f"{what}, {key}: {m}")


def check_training(job, n, want, rtol=1e-5, atol=1e-6, tag="model"):
    assert job.returncode == 0, job
    assert not job.leftovers, job
    got = results(job).get(tag, {})
    assert sorted(got) == list(range(n)), job
    for r in range(n):
        assert_state_close(got[r], want, rtol, atol, f"rank {r} vs single-process training")
        assert got[r] == got[0], f"rank {r} differs from rank 0"  # bitwise: same averaged gradients


# --------------------------------------------------------------------------------------------
# one process (size 1): validation, plain behaviour


@pytest.fixture
def bps(monkeypatch: pytest.MonkeyPatch):
    """byteps.torch, initialised in this process in non-distributed mode, shut down afterwards."""
    import byteps.torch as bps

    for key in set(os.environ) - set(clean_config_env(dict(os.environ))):
        monkeypatch.delenv(key)
    bps.shutdown()
    bps.init()
    yield bps
    bps.shutdown()


def test_named_parameters_validation(bps):
    model = run_ns()["make_model"](0)
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="named_parameters should be a sequence of tuples"):
        bps.DistributedOptimizer(sgd, named_parameters=[["0.weight", model[0].weight]])
    dup = [("w", model[0].weight), ("w", model[0].bias), ("2.weight", model[2].weight), ("b", model[2].bias)]
    with pytest.raises(ValueError, match="must be unique. Found duplicates: w"):
        bps.DistributedOptimizer(sgd, named_parameters=dup)
    with pytest.raises(ValueError, match="consistently be a sequence of tuples"):
        bps.DistributedOptimizer(sgd, named_parameters=[("a", model[0].weight), ("b", 3)])
    with pytest.raises(ValueError, match="2 parameter.s. of the optimizer are not in it"):
        bps.DistributedOptimizer(sgd, named_parameters=list(model.named_parameters())[:2])


def test_single_process_optimizer_is_the_plain_one(bps):
    ns = run_ns()
    model, plain_model = ns["make_model"](1), ns["make_model"](1)
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=model.named_parameters(), backward_passes_per_step=2)
    assert type(opt).__name__ == "SGD" and isinstance(opt, torch.optim.SGD)
    assert isinstance(bps._DistributedOptimizer, type)
    assert not opt._grad_accs and all(p.grad is None for p in model.parameters())  # no hooks with one worker
    plain = torch.optim.SGD(plain_model.parameters(), lr=0.1, momentum=0.9)
    ns["train"](model, opt, 1, None, 3, passes=2, clip=0.5)
    ns["train"](plain_model, plain, 1, None, 3, passes=2, clip=0.5)
    assert ns["state"](model) == ns["state"](plain_model)
    assert opt.state_dict()["state"].keys() == plain.state_dict()["state"].keys()
    # Without named_parameters: positional names, counters for every parameter (quirk 11.11).
    unnamed = bps.DistributedOptimizer(torch.optim.Adam(model.parameters()))
    assert sorted(unnamed._parameter_names.values())[0] == "push_pull.noname.0"
    assert len(unnamed._push_pull_delay) == 4
    unnamed.step()


def test_single_process_broadcast_optimizer_state(bps):
    model = run_ns()["make_model"](2)
    with pytest.raises(ValueError, match="LBFGS"):
        bps.broadcast_optimizer_state(torch.optim.LBFGS(model.parameters()), root_rank=0)
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5),
                                   named_parameters=model.named_parameters())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    bps.broadcast_optimizer_state(opt, root_rank=0)  # creates the state with a zero-gradient step
    assert len(opt.state_dict()["state"]) == 4 and opt.param_groups[0]["lr"] == 0.1
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    bps.broadcast_optimizer_state(torch.optim.SGD(model.parameters(), lr=0.1), root_rank=0)  # stateless


def test_single_process_ddp(bps):
    from byteps.torch.parallel import DistributedDataParallel

    model = run_ns()["make_model"](3)
    with pytest.raises(AssertionError, match="exactly one entry"):
        DistributedDataParallel(model, device_ids=[0, 1])
    ddp = DistributedDataParallel(model, device_ids=[0])
    out = ddp(torch.ones(2, 5))
    assert out.shape == (2, 3)
    out.sum().backward()
    assert model[2].bias.grad.tolist() == [2.0, 2.0, 2.0]  # the local gradient: one worker
    with ddp.no_sync():
        ddp(torch.ones(1, 5)).sum().backward()
    assert model[2].bias.grad.tolist() == [3.0, 3.0, 3.0]
    ddp.synchronize()  # nothing to do with one worker
    assert "module.0.weight" in ddp.state_dict()


# --------------------------------------------------------------------------------------------
# (a)-(d): DistributedOptimizer and DistributedDataParallel vs single-process training

TRAIN = PRELUDE + r'''
mode = sys.argv[1]
model = make_model(seed=100 + rank)  # different on every rank until the broadcast
named = list(model.named_parameters())
if mode == "reversed_names":
    named = named[::-1]  # another order on one rank: the names match the tensors, not positions
    if rank != 1:
        named = named[::-1]
passes = 2 if mode == "passes" else 1
clip = 0.5 if mode == "passes" else None
compression = bps.Compression.fp16 if mode == "fp16" else bps.Compression.none
opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), named_parameters=named,
                               compression=compression, backward_passes_per_step=passes)
assert type(opt).__name__ == "SGD" and isinstance(opt, torch.optim.SGD)
bps.broadcast_parameters(model.state_dict(), root_rank=0)
train(model, opt, n, rank, steps=5, passes=passes, clip=clip)
emit("model", state(model))

if mode == "plain":
    # The hooks start every gradient's push_pull during backward (not in step()), earlier
    # layers with a higher priority.
    x, y = batch(0, 0, n)
    opt.zero_grad()
    F.mse_loss(model(x[:PER_WORKER]), y[:PER_WORKER]).backward()
    started = [opt._handles.get(p, (None, None))[0] for p in model.parameters()]
    assert all(h is not None for h in started), started
    priorities = [opt._priority[p] for p in model.parameters()]
    assert priorities == sorted(priorities, reverse=True) and priorities[0] == 0, priorities
    opt.synchronize()
    print("HOOKS_OK", flush=True)

if mode == "passes":
    # A third backward before step(): the hook refuses it.
    x, y = batch(0, 0, n)
    for i in range(3):
        try:
            F.mse_loss(model(x), y).backward()
        except AssertionError as err:
            assert i == 2 and "Gradients were computed more than backward_passes_per_step times" in str(err), err
            print("EXCEEDED_OK", flush=True)
    try:
        opt.zero_grad()
    except AssertionError as err:
        assert "before optimizer.step() or optimizer.synchronize()" in str(err), err
        print("ZERO_GRAD_OK", flush=True)
    opt.synchronize()  # waits for the second pass's push_pulls (started on every rank)
    opt.zero_grad()
    opt.set_backward_passes_per_step(1)
    train(model, opt, n, rank, steps=1)
    emit("after", state(model))
'''


@pytest.mark.parametrize("n,s", [(2, 1), (3, 2)])
def test_distributed_optimizer_matches_single_process(run_job, n, s):
    # (a) SGD with momentum; ranks start from different weights, rank 0's are broadcast.
    job = run_job(n, s, TRAIN, args=("plain",), env=FAST, timeout=60)
    check_training(job, n, reference(n, steps=5))
    assert job.stdout.count("HOOKS_OK") == n, job


def test_backward_passes_per_step(run_job):
    # (c) two backward passes per step, with synchronize + clipping + skip_synchronize; then a
    # third backward pass before step() is refused, and training goes on with one pass.
    n = 2
    job = run_job(n, 1, TRAIN, args=("passes",), env=FAST, timeout=60)
    check_training(job, n, reference(n, steps=5, passes=2, clip=0.5))
    assert job.stdout.count("EXCEEDED_OK") == n and job.stdout.count("ZERO_GRAD_OK") == n, job
    ns = run_ns()
    model = ns["make_model"](100)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ns["train"](model, opt, n, None, 5, 2, 0.5)
    ns["train"](model, opt, n, None, 1, 1, None)
    check_training(job, n, ns["state"](model), tag="after")


def test_fp16_compression(run_job):
    # (d) gradients travel (and are summed) as float16.
    n = 2
    job = run_job(n, 1, TRAIN, args=("fp16",), env=FAST, timeout=60)
    check_training(job, n, reference(n, steps=5), rtol=1e-2, atol=1e-3)


def test_parameter_order_differs_but_names_match(run_job):
    # named_parameters in another order on rank 1: tensors are matched by name, so the model is
    # still right (the declarations are sorted by name).
    n = 2
    job = run_job(n, 1, TRAIN, args=("reversed_names",), env=FAST, timeout=60)
    check_training(job, n, reference(n, steps=5))


DDP = PRELUDE + r'''
ddp = DistributedDataParallel(make_model(seed=100 + rank))  # broadcasts rank 0's state
model = ddp.module
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
train(model, opt, n, rank, steps=3, ddp=ddp)
train(model, opt, n, rank, steps=2, passes=2, ddp=ddp)  # first pass of each step under no_sync()
emit("model", state(model))


class WithBuffers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(2, 2)
        self.register_buffer("count", torch.zeros(3, dtype=torch.int64))
        self.register_buffer("flag", torch.zeros(2, dtype=torch.bool))

    def forward(self, x):
        return self.lin(x)


m = WithBuffers()
ddp2 = DistributedDataParallel(m)
m.count.fill_(rank + 5)
m.flag.fill_(rank == 0)
ddp2(torch.ones(1, 2)).sum().backward()  # forward broadcasts rank 0's buffers first
assert m.count.tolist() == [5, 5, 5] and m.flag.tolist() == [True, True], (m.count, m.flag)


class Branchy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(rank)
        self.a = torch.nn.Linear(3, 2)
        self.b = torch.nn.Linear(3, 2)

    def forward(self, x):
        return self.a(x)  # b gets no gradient


def shard_input(r):
    return torch.arange(6.0).reshape(2, 3) * (r + 1) - 2


br = DistributedDataParallel(Branchy())
weights = {k: v.clone() for k, v in br.module.state_dict().items()}
br(shard_input(rank)).pow(2).sum().backward()
br.synchronize()  # b never reached its hook: the count stays short of all grads
want = []
for r in range(n):
    local = Branchy()
    local.load_state_dict(weights)
    local(shard_input(r)).pow(2).sum().backward()
    want.append(local.a.weight.grad)
torch.testing.assert_close(br.module.a.weight.grad, sum(want) / n, rtol=1e-6, atol=1e-6)
assert torch.count_nonzero(br.module.b.weight.grad) == 0
print("DDP_EXTRAS_OK", flush=True)
'''


def test_distributed_data_parallel_matches_single_process(run_job):
    # (b) gradients averaged by the end of backward; no_sync() accumulation; buffer broadcast;
    # synchronize() for parameters that got no gradient.
    n = 2
    job = run_job(n, 2, DDP, env=FAST, timeout=60)
    check_training(job, n, reference(n, steps=0, schedule=[(3, 1), (2, 2)]))
    assert job.stdout.count("DDP_EXTRAS_OK") == n, job


# --------------------------------------------------------------------------------------------
# (e) broadcasts make every rank equal to the root

BROADCAST = PRELUDE + r'''
def optstate(opt):
    groups = [{k: v for k, v in g.items() if k != "params"} for g in opt.param_groups]
    states = []
    for g in opt.param_groups:
        for p in g["params"]:
            states.append({k: (v.double().flatten().tolist() if torch.is_tensor(v) else v)
                           for k, v in opt.state[p].items()})
    return {"groups": groups, "state": states}


def local_steps(model, opt, count):  # rank-specific history: different weights and state
    for step in range(count):
        x, y = batch(50 + step, rank, 1)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()


# SGD with momentum, root 0
m1 = make_model(seed=200 + rank)
o1 = torch.optim.SGD(m1.parameters(), lr=0.1 * (rank + 1), momentum=0.9)
local_steps(m1, o1, rank + 1)
bps.broadcast_parameters(m1.state_dict(), root_rank=0)
bps.broadcast_optimizer_state(o1, root_rank=0)
emit("sgd.model", state(m1))
emit("sgd.opt", optstate(o1))

# Adam, root 1: named parameters list, other prefixes
root = 1 % n
m2 = make_model(seed=300 + rank)
o2 = torch.optim.Adam(m2.parameters(), lr=0.01 * (rank + 1), betas=(0.9, 0.99 - 0.001 * rank))
local_steps(m2, o2, rank + 1)
bps.broadcast_parameters(list(m2.named_parameters()), root_rank=root, prefix="Adam.")
bps.broadcast_optimizer_state(o2, root_rank=root, prefix="AdamState.")
emit("adam.model", state(m2))
emit("adam.opt", optstate(o2))

# A fresh DistributedOptimizer(Adam): its state is created by a local zero-gradient step, then
# broadcast; training goes on afterwards.
m3 = make_model(seed=400 + rank)
o3 = bps.DistributedOptimizer(torch.optim.Adam(m3.parameters(), lr=0.001 * (rank + 1)),
                              named_parameters=m3.named_parameters())
bps.broadcast_parameters(m3.state_dict(), root_rank=0)
bps.broadcast_optimizer_state(o3, root_rank=0)
emit("dopt.fresh", optstate(o3))
train(m3, o3, n, rank, steps=2)
emit("dopt.model", state(m3))
emit("dopt.opt", optstate(o3))

# objects: the default name is the type name; sizes may change between calls of one name
emit("object", bps.broadcast_object({"rank": rank, "data": list(range(10 * (rank + 1)))}, root_rank=root))
emit("object.big", bps.broadcast_object({"rank": rank, "data": list(range(1000 * (rank + 1)))}, root_rank=root))
emit("object.none", bps.broadcast_object(("hello", rank) if rank == root else None, root_rank=root, name="hi"))
'''


def test_broadcasts_make_ranks_equal_to_root(run_job):
    n = 3
    job = run_job(n, 1, BROADCAST, env=FAST, timeout=60)
    assert job.returncode == 0 and not job.leftovers, job
    got = results(job)
    roots = {"sgd": 0, "adam": 1, "dopt": 0, "object": 1}
    for tag, per_rank in got.items():
        assert sorted(per_rank) == list(range(n)), (tag, job)
        root = roots[tag.split(".")[0]]
        for r in range(n):
            assert per_rank[r] == per_rank[root], f"{tag}: rank {r} differs from root {root}"
    # The root's values, not somebody else's:
    assert got["sgd.opt"][2]["groups"][0]["lr"] == 0.1 and got["sgd.opt"][2]["groups"][0]["momentum"] == 0.9
    adam = got["adam.opt"][0]
    assert adam["groups"][0]["lr"] == 0.02 and adam["groups"][0]["betas"] == [0.9, 0.989]
    assert adam["state"][0]["step"] == [2.0]  # the root took 2 local steps
    assert {"exp_avg", "exp_avg_sq"} <= set(adam["state"][0])
    fresh = got["dopt.fresh"][1]
    assert fresh["groups"][0]["lr"] == 0.001 and fresh["state"][0]["step"] == [1.0]
    assert got["dopt.opt"][2]["state"][0]["step"] == [3.0]
    assert got["object"][0] == {"rank": 1, "data": list(range(20))}
    assert got["object.big"][2] == {"rank": 1, "data": list(range(2000))}
    assert got["object.none"][0] == ["hello", 1]
    # Distributed Adam after the broadcast stays equal on all ranks and equals a local run.
    ns = run_ns()
    model = ns["make_model"](400)
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()  # what broadcast_optimizer_state did to create the state
    ns["train"](model, opt, n, None, 2)
    assert_state_close(got["dopt.model"][0], ns["state"](model), 1e-5, 1e-6, "distributed Adam")


# --------------------------------------------------------------------------------------------
# (f) workers that disagree about the parameters: an error naming one, quickly, on every rank

MISMATCH = PRELUDE + r'''
mode = sys.argv[1]
model = make_model(seed=0, hidden=8 if (mode == "shapes" and rank == 1) else 7,
                   extra=(mode in ("sets", "ddp") and rank == 1))
try:
    if mode == "order":  # unnamed parameters, in another order on rank 1
        params = list(model.parameters())
        opt = bps.DistributedOptimizer(torch.optim.SGD(params[::-1] if rank == 1 else params, lr=0.1))
    elif mode == "ddp":
        ddp = DistributedDataParallel(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
    else:
        opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                       named_parameters=model.named_parameters())
    train(model, opt, n, rank, steps=2)
except Exception as err:
    print(f"TRAINING_ERROR {type(err).__name__}: {err}", flush=True)
    sys.exit(2)
emit("model", state(model))
'''


@pytest.mark.parametrize("mode,s,names", [
    ("sets", 1, ["'4.weight'", "is not on rank 0"]),
    ("shapes", 2, ["'0.weight'", "shape [8, 5]", "shape [7, 5]"]),
    ("order", 1, ["'push_pull.noname.0'"]),
    ("ddp", 1, ["'4.bias'"]),
])
def test_mismatched_parameters_fail_naming_the_tensor(run_job, mode, s, names):
    n = 2
    job = run_job(n, s, MISMATCH, args=(mode,), timeout=40, env=FAST)
    assert job.returncode != 0, job
    assert "RESULT" not in job.stdout, job  # nobody trained a wrong model
    errors = [line for line in job.stdout.splitlines() if "TRAINING_ERROR ValueError" in line]
    assert errors, job
    assert any(all(name in line for name in names) for line in errors), job
    assert job.elapsed < 30, job  # an error at construction, not a timeout
