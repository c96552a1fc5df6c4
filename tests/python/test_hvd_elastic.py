"""hvd.elastic (reference section 13) in ONE 2-worker job: a TorchState (model, DistributedOptimizer
with momentum, ElasticSampler, plain attributes) trained by an ``@hvd.elastic.run`` function that
raises HorovodInternalError once on every worker mid-epoch, after an uncommitted step: the retry
starts from the last commit (checked: attributes, parameters, sampler progress), synced from rank
0 (checked: both workers equal), and training ends with exactly the parameters of the same
training without the failure.  Also: the first sync overrides worker 1's differing state,
HostsUpdatedInterrupt (no restore; skip_sync honoured), other exceptions propagate, reset
callbacks run once per reset, and ElasticSampler's split and padding."""

from __future__ import annotations

import pytest

from test_hvd_ops import COMMON

pytestmark = pytest.mark.usefixtures("require_core")

SCRIPT = COMMON + r"""
import copy

def everywhere_equal(what, t):  # t is the same on both workers
    rows = hvd.allgather(t.detach().reshape(1, -1).double(), name=f"check.{what}")
    if not torch.equal(rows[0], rows[1]):
        fails.append(f"{what}: workers differ: {rows.tolist()}")

X = torch.arange(48, dtype=torch.float32).reshape(24, 2) / 24.0
Y = (X[:, :1] * 3 - X[:, 1:] + 0.5)
DATA = torch.utils.data.TensorDataset(X, Y)
EPOCHS, BATCH = 2, 2

def train_job(tag, fail_once):
    torch.manual_seed(100 + r)  # worker 1 starts with other weights: the first sync replaces them
    model = torch.nn.Linear(2, 1)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                   named_parameters=[(f"{tag}.{k}", p) for k, p in model.named_parameters()])
    sampler = hvd.elastic.ElasticSampler(DATA, shuffle=True, seed=5)
    state = hvd.elastic.TorchState(model, opt, sampler=sampler, epoch=0, batch=99 if r else 0)
    resets, attempts, committed = [], [0], {}
    state.register_reset_callbacks([lambda: resets.append(state.batch)])

    def commit():
        state.commit()
        committed.update(epoch=state.epoch, batch=state.batch, processed=state.sampler.processed_num,
                         params=[p.detach().clone() for p in model.parameters()])

    @hvd.elastic.run
    def train(state):
        attempts[0] += 1
        if attempts[0] == 1:
            if state.batch != 0:
                fails.append(f"{tag}: first sync left batch={state.batch}")
            everywhere_equal(f"{tag}.synced.weight", state.model.weight)
        else:  # after the restore: the last commit, synced
            for k in ("epoch", "batch"):
                if getattr(state, k) != committed[k]:
                    fails.append(f"{tag}: restored {k}={getattr(state, k)}, committed {committed[k]}")
            if state.sampler.processed_num != committed["processed"]:
                fails.append(f"{tag}: restored processed_num {state.sampler.processed_num} != {committed['processed']}")
            for p, c in zip(state.model.parameters(), committed["params"]):
                if not torch.equal(p.detach(), c):
                    fails.append(f"{tag}: restored parameters differ from the committed ones")
            everywhere_equal(f"{tag}.restored.weight", state.model.weight)
            everywhere_equal(f"{tag}.restored.momentum", next(iter(state.optimizer.state.values()))["momentum_buffer"])
        loader = torch.utils.data.DataLoader(DATA, batch_size=BATCH, sampler=state.sampler)
        for state.epoch in range(state.epoch, EPOCHS):
            for x, y in loader:
                state.optimizer.zero_grad()
                torch.nn.functional.mse_loss(state.model(x), y).backward()
                state.optimizer.step()
                state.sampler.record_batch(state.batch, BATCH)
                state.batch += 1
                if fail_once and attempts[0] == 1 and state.epoch == 1 and state.batch == 3:
                    raise hvd.HorovodInternalError(f"{tag}: injected failure on rank {r}")
                if state.batch % 2 == 0:
                    commit()
            state.batch = 0
            state.sampler.set_epoch(state.epoch + 1)
            commit()
        return [p.detach().clone() for p in state.model.parameters()]

    params = train(state)
    if attempts[0] != (2 if fail_once else 1) or len(resets) != attempts[0] - 1:
        fails.append(f"{tag}: {attempts[0]} attempts, {len(resets)} resets")
    return params

failed = train_job("failing", True)
clean = train_job("clean", False)
for a, b in zip(failed, clean):
    if not torch.equal(a, b):
        fails.append(f"restore + retry ended with {a.flatten().tolist()}, the run without failure with "
                     f"{b.flatten().tolist()}")
everywhere_equal("final", failed[0])

# HostsUpdatedInterrupt: no restore; skip_sync=True keeps each worker's own uncommitted value, False syncs
# rank 0's commit (the first sync already gave worker 1 rank 0's value 0)
for skip in (True, False):
    obj = hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank, value=10 * r)
    seen = []

    @hvd.elastic.run
    def bump(state):
        seen.append(state.value)
        if len(seen) == 1:
            state.value += 1 + r
            raise hvd.elastic.HostsUpdatedInterrupt(skip)
        return state.value

    got = bump(obj)
    want = 1 + r if skip else 0
    if got != want or seen[0] != 0:
        fails.append(f"HostsUpdatedInterrupt(skip_sync={skip}): got {got}, want {want} (first seen {seen[0]})")
    if not isinstance(hvd.elastic.HostsUpdatedInterrupt(True), RuntimeError):
        fails.append("HostsUpdatedInterrupt is not a RuntimeError")

# other exceptions propagate, without a retry
calls = []

@hvd.elastic.run
def broken(state):
    calls.append(1)
    raise KeyError("user bug")

expect("KeyError propagates", KeyError, "user bug", lambda: broken(hvd.elastic.ObjectState(hvd.broadcast_object,
                                                                                          hvd.rank, a=1)))
if len(calls) != 1:
    fails.append(f"a KeyError was retried ({len(calls)} calls)")

# a failure that comes back every time, with no commit in between, is final after a bounded number of tries
tries = []

@hvd.elastic.run
def always_failing(state):
    tries.append(1)
    raise hvd.HorovodInternalError("fails every time")

expect("a failure without progress is final", hvd.HorovodInternalError, "without a state.commit() in between",
       lambda: always_failing(hvd.elastic.ObjectState(hvd.broadcast_object, hvd.rank, a=1)))
if len(tries) != hvd.elastic.MAX_FAILURES_WITHOUT_PROGRESS:
    fails.append(f"an always-failing function ran {len(tries)} times")

# ElasticSampler: 5 samples over 2 workers padded to 6, each worker every 2nd; progress drops the processed
s = hvd.elastic.ElasticSampler(list(range(5)), shuffle=False)
if list(s) != [[0, 2, 4], [1, 3, 0]][r] or len(s) != 3:
    fails.append(f"ElasticSampler split: {list(s)}")
s.record_batch(0, 1)
s.reset()
if list(s) != [[2, 4], [3, 2]][r] or s.state_dict() != {"epoch": 0, "processed_num": 2}:
    fails.append(f"ElasticSampler after one batch: {list(s)} {s.state_dict()}")
both = hvd.allgather(torch.tensor(list(hvd.elastic.ElasticSampler(list(range(9)), seed=1))), name="sampler.order")
if sorted(set(both.tolist())) != list(range(9)) or len(both) != 10:
    fails.append(f"ElasticSampler shuffled split: {both.tolist()}")
finish()
"""


def test_elastic_run_restores_the_commit_and_retries(run_job):
    result = run_job(2, 1, SCRIPT, timeout=200)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
