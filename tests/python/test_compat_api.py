"""BytePS's remaining API names (issue 13, item 2): every name of the compat reference,
get_pushpull_speed (telemetry), and CrossBarrier training to the same results as
DistributedOptimizer."""

from __future__ import annotations

import time

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("require_core")


# The compat reference's section 1.2: byteps.torch's top-level names and byteps.torch.ops's
# (which are exported at the top level too), plus 1.1's get_pushpull_speed, 1.3 and 1.4.
TORCH_TOP = ("init shutdown suspend resume size local_size rank local_rank push_pull poll synchronize declare "
             "byteps_push_pull Compression DistributedOptimizer _DistributedOptimizer broadcast_parameters "
             "broadcast_optimizer_state broadcast_object get_pushpull_speed").split()
TORCH_OPS = ("push_pull_async push_pull_async_inplace push_pull_inplace push_pull_group_sync_inplace "
             "byteps_torch_set_num_grads").split()


def test_every_name_of_the_originals_torch_api_is_there():
    pytest.importorskip("torch", reason="python3-torch is not installed")
    import byteps.torch as bps
    import byteps.torch.ops as ops
    from byteps.torch.cross_barrier import CrossBarrier
    from byteps.torch.parallel import DistributedDataParallel

    missing = [n for n in TORCH_TOP + TORCH_OPS if not callable(getattr(bps, n, None)) and n != "Compression"]
    missing += [f"ops.{n}" for n in TORCH_OPS if not callable(getattr(ops, n, None))]
    assert not missing, missing
    assert set(TORCH_TOP + TORCH_OPS) <= set(bps.__all__), set(TORCH_TOP + TORCH_OPS) - set(bps.__all__)
    assert bps.Compression.none is not None and bps.Compression.fp16 is not None
    assert callable(CrossBarrier) and callable(DistributedDataParallel)


def test_get_pushpull_speed_samples_completed_bytes_per_10_s_window(standalone):
    # The core samples (byteps_get_pushpull_speed): one sample per window of at least 10 s, as in
    # BytePS (the window's arithmetic and BYTEPS_TELEMETRY_ON=0: tests/unit/speed_telemetry_test.cc).
    bps = standalone("byteps.numpy")
    assert bps.get_pushpull_speed() == (0, -5.0)  # nothing yet, as in BytePS
    x = np.ones(1 << 20, dtype=np.float32)  # 4 MiB per push_pull
    bps.push_pull(x, name="speed.0")
    assert bps.get_pushpull_speed() == (0, -5.0)  # the window is still open
    time.sleep(10.2)
    before_ms = int(time.time() * 1000)
    bps.push_pull(x, name="speed.0")  # closes the window: 2 x 4 MiB in about 10.3 s
    ms, mbps = bps.get_pushpull_speed()
    assert abs(ms - before_ms) < 5000, (ms, before_ms)
    assert 2 * 4.194304 / 12 < mbps < 2 * 4.194304 / 10.2, mbps
    assert bps.get_pushpull_speed() == (0, -5.0)  # consumed


CROSS = r"""
import sys
import torch
import byteps.torch as bps
from byteps.torch.cross_barrier import CrossBarrier

bps.init()
r = bps.rank()

def train(make, prefix, opt_cls, finish=None, **opt_kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = make(model, opt_cls(model.parameters(), **opt_kw),
               [(prefix + n, p) for n, p in model.named_parameters()])
    g = torch.Generator().manual_seed(100 + r)
    overlapped = []
    for step in range(5):
        x = torch.randn(32, 8, generator=g)
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        overlapped.append(getattr(opt, "_overlap", False))
    if finish:
        finish(opt)  # CrossBarrier: the last updates may still be in flight
    return torch.cat([p.detach().ravel() for p in model.parameters()]), overlapped

fails = []
for opt_cls, kw in ((torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}), (torch.optim.Adam, {"lr": 0.01}),
                    (torch.optim.RMSprop, {"lr": 0.01}), (torch.optim.SGD, {"lr": 0.05, "weight_decay": 0.1,
                                                                             "nesterov": True, "momentum": 0.5})):
    tag = opt_cls.__name__ + str(len(kw))
    plain, _ = train(lambda m, o, n: bps.DistributedOptimizer(o, named_parameters=n), f"plain.{tag}.", opt_cls, **kw)
    # num_steps reached at the last step: it waits and stops overlapping by itself
    ended, flags = train(lambda m, o, n: CrossBarrier(m, o, named_parameters=n, num_steps=5), f"ended.{tag}.",
                         opt_cls, **kw)
    if flags != [True] * 4 + [False]:
        fails.append(f"{tag}: overlap flags {flags} with num_steps=5")
    # still overlapping: synchronize() waits for the updates in flight
    synced, flags = train(lambda m, o, n: CrossBarrier(m, o, named_parameters=n), f"synced.{tag}.", opt_cls,
                          finish=lambda o: o.synchronize(), **kw)
    if flags != [True] * 5:
        fails.append(f"{tag}: overlap flags {flags}")
    for what, got in (("num_steps", ended), ("synchronize", synced)):
        if not torch.allclose(plain, got, rtol=1e-5, atol=1e-6):
            fails.append(f"{tag} ({what}): CrossBarrier differs by {float((plain - got).abs().max())}")
try:
    CrossBarrier(torch.nn.Linear(2, 2), torch.optim.Adagrad(torch.nn.Linear(2, 2).parameters()))
    fails.append("Adagrad accepted")
except ValueError as e:
    if "SGD, Adam and RMSprop" not in str(e):
        fails.append(str(e))
print("FAILS", fails, flush=True) if fails else print("ALL OK", flush=True)
bps.shutdown()
sys.exit(1 if fails else 0)
"""


def test_cross_barrier_trains_to_distributed_optimizers_results(run_job):
    result = run_job(2, 1, CROSS, timeout=180)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result


def test_the_c_abis_lazy_init_checks_the_configuration_now_and_joins_on_first_use(monkeypatch):
    import os

    from byteps import _basics
    from tools.localjob import clean_config_env

    for key in set(os.environ) - set(clean_config_env(dict(os.environ))):
        monkeypatch.delenv(key)  # a one-worker job of its own
    core = _basics.core()
    _basics.shutdown()
    monkeypatch.setenv("BYTEPS_PARTITION_BYTES", "lots")
    with pytest.raises(ValueError, match="BYTEPS_PARTITION_BYTES"):
        core.lazy_init()  # a bad value is an error at once, not at the first push_pull
    assert not core.is_initialized()
    monkeypatch.delenv("BYTEPS_PARTITION_BYTES")
    try:
        core.lazy_init()
        assert core.is_initialized()
        assert core.rank() == 0 and core.size() == 1  # the first use joins
        import byteps.numpy as bps

        x = np.arange(5, dtype=np.float32)
        assert np.array_equal(bps.push_pull(x, average=False, name="lazy.x"), x)
    finally:
        _basics.shutdown()
    assert not core.is_initialized()
