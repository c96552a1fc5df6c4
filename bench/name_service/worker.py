"""One worker of bench/name_service/run.py (run by bpsrun; not imported by the benchmark).

Usage (bpsrun passes it through): ``worker.py TENSORS TENSOR_BYTES STEPS ROUNDS``.

After a warm-up (a set of names of its own, used for ``STEPS + 1`` steps, so that connections,
threads and the start-up tuning are behind us), each round times two fresh sets of ``TENSORS``
names (float32, ``TENSOR_BYTES`` each), the two modes alternating which goes first:

* ``first-use``: step 0 is each name's first use (the name service's round trip, then the
  servers' declaration of the new key), steps 1..STEPS are steady (the cache);
* ``declared``: the names are first declared with their sizes (``declare_tensor``: the name
  service's round trips happen there, timed apart), then the same steps.

A step enqueues every tensor's push_pull (``push_pull_async``), then synchronizes them all; every
result is checked (the sum over workers of rank + 1). Prints one ``ROUNDS {json}`` line with, per
round and mode, the declare time (0 for first-use), and per step the step time and the time
spent enqueueing (a first use blocks the enqueue until the name service answers).
"""

import json
import sys
import time

import torch

import byteps.torch as bps
from byteps.torch import ops

MODES = ("first-use", "declared")


def run_set(prefix: str, count: int, elements: int, steps: int, declare: bool, expected: float) -> dict:
    names = [f"{prefix}.{i}" for i in range(count)]
    tensors = [torch.full((elements,), float(bps.rank() + 1)) for _ in range(count)]
    t0 = time.perf_counter()
    if declare:
        for name, t in zip(names, tensors):
            ops.declare_tensor(name, t)
    declare_s = time.perf_counter() - t0
    step_s, enqueue_s = [], []
    for step in range(steps + 1):
        t0 = time.perf_counter()
        handles = [bps.push_pull_async(t, average=False, name=name) for name, t in zip(names, tensors)]
        t1 = time.perf_counter()
        outs = [bps.synchronize(h) for h in handles]
        t2 = time.perf_counter()
        for name, out in zip(names, outs):
            if not bool((out == expected).all()):
                sys.exit(f"rank {bps.rank()}: step {step} of '{name}' gave {out[:4].tolist()}..., "
                         f"expected {expected} everywhere")
        step_s.append(t2 - t0)
        enqueue_s.append(t1 - t0)
    return {"declare_s": declare_s, "step_s": step_s, "enqueue_s": enqueue_s}


def main() -> None:
    count, nbytes, steps, rounds = (int(a) for a in sys.argv[1:5])
    bps.init()
    n = bps.size()
    expected = n * (n + 1) / 2
    elements = max(1, nbytes // 4)
    run_set("bench.ns.warm", count, elements, steps, False, expected)
    out = []
    for r in range(rounds):
        order = MODES if r % 2 == 0 else tuple(reversed(MODES))
        rec = {}
        for mode in order:
            rec[mode] = run_set(f"bench.ns.{mode}.{r}", count, elements, steps, mode == "declared", expected)
        out.append(rec)
    print("ROUNDS " + json.dumps({"rank": bps.rank(), "rounds": out}), flush=True)
    bps.shutdown()


if __name__ == "__main__":
    main()
