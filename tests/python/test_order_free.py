"""Order-free naming (issue 29, item 7): operations pair up across workers by name, never by call
order.  Each worker runs 8 Python threads, each push_pulling its own tensor many times, started in
a different order and with different pauses on each worker, plus a training loop whose gradients
become ready in a data-dependent order; every sum must be exact and nothing may hang."""

from __future__ import annotations

SCRIPT = r"""
import random, threading, time
import torch
import byteps.torch as hvd

hvd.init()
me, n = hvd.rank(), hvd.size()
rng = random.Random(1000 + me)
errors = []

def worker(i, rounds):
    try:
        for r in range(rounds):
            if rng.random() < 0.3:
                time.sleep(rng.random() * 0.004)
            t = torch.full((1000 + 37 * i,), float(me + 1) * (r + 1) + i, dtype=torch.float32)
            got = hvd.allreduce(t, op=hvd.Sum, name=f"thread.{i}")
            want = sum(float(w + 1) * (r + 1) + i for w in range(n))
            if not torch.all(got == want):
                errors.append(f"thread {i} round {r}: got {got[:3].tolist()}, want {want}")
                return
    except Exception as e:  # reported below, on this worker
        errors.append(f"thread {i}: {type(e).__name__}: {e}")

order = list(range(8))
if me % 2:
    order.reverse()
threads = [threading.Thread(target=worker, args=(i, 40)) for i in order]
for t in threads:
    t.start()
    time.sleep(rng.random() * 0.01)
for t in threads:
    t.join(timeout=120)
assert not any(t.is_alive() for t in threads), "a thread did not finish"
assert not errors, errors

# Gradients ready in a data-dependent order: each worker issues its async allreduces in its own
# (random) order every step, then waits for all of them.
shapes = [(64,), (3, 5), (128, 7), (1,), (9, 9, 2)]
for step in range(25):
    idx = list(range(len(shapes)))
    rng.shuffle(idx)
    handles = {i: hvd.allreduce_async(torch.full(shapes[i], float(me + step + i)), name=f"grad.{i}", op=hvd.Sum)
               for i in idx}
    for i, h in handles.items():
        got = hvd.synchronize(h)
        want = sum(float(w + step + i) for w in range(n))
        assert torch.all(got == want), (step, i, got.flatten()[:3], want)
print("ALL OK", flush=True)
hvd.shutdown()
"""


def test_threads_and_data_dependent_order_pair_by_name(run_job):
    result = run_job(2, 2, SCRIPT, timeout=180)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
