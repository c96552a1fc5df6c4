"""What byteps.dlpack adds per call over byteps.numpy, in one run (issue 34)::

    /usr/bin/python3 -m bench.dlpack.run [--arrays 1000] [--kib 4] [--rounds 15] [--out bench-results/dlpack.json]

One job, ``bpsrun -n 1 -s 1 --force-distributed`` (every push_pull goes through the server). Each
round pushes ``--arrays`` float32 arrays of ``--kib`` KiB (each its own name) through each path in
turn, the paths' order rotating from round to round:

* ``numpy``: ``byteps.numpy.push_pull_async`` (out of place) on NumPy arrays;
* ``dlpack``: ``byteps.dlpack.push_pull_async`` on the same NumPy arrays;
* ``numpy inplace`` / ``dlpack inplace``: the in-place calls;
* ``torch`` / ``dlpack torch``: ``byteps.torch.push_pull_async`` and ``byteps.dlpack`` on torch
  tensors (for reference; the target is about NumPy).

A round times issuing every call (``issue``: the Python layer and the core's enqueue) and then
synchronizing every handle (``total``), both divided by the array count. After the job's rounds,
``layer`` times the same calls with ``_basics.start`` stubbed out (the Python layer alone: the
checks, the DLPack export and view, the output's allocation), where the core's noise cannot hide a
difference.
Printed: the median over the rounds (after 2 untimed) of each, per call in microseconds, and
dlpack's difference from numpy; then a JSON line. Exit status 1 when the job fails.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
from pathlib import Path

from tools.localjob import hermetic_env, run_bpsrun
from tools.progress import Progress

WORKER = r'''
import json, sys, time
import numpy as np
import torch
import byteps.dlpack as dl
import byteps.numpy as bnp
import byteps.torch as bt

arrays, kib, rounds = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
bnp.init()
count = max(1, int(kib * 1024 / 4))
xs = [np.full(count, i % 7, np.float32) for i in range(arrays)]
ts = [torch.full((count,), float(i % 7)) for i in range(arrays)]
PATHS = {
    "numpy": (bnp.push_pull_async, bnp.synchronize, xs),
    "dlpack": (dl.push_pull_async, dl.synchronize, xs),
    "numpy inplace": (bnp.push_pull_async_inplace, bnp.synchronize, xs),
    "dlpack inplace": (dl.push_pull_async_inplace, dl.synchronize, xs),
    "torch": (lambda x, average, name: bt.push_pull_async(x, average=average, name=name), bt.synchronize, ts),
    "dlpack torch": (dl.push_pull_async, dl.synchronize, ts),
}
order = list(PATHS)
times = {k: {"issue": [], "total": []} for k in PATHS}
for r in range(rounds + 2):
    k0 = r % len(order)
    for key in order[k0:] + order[:k0]:
        start, sync, data = PATHS[key]
        tag = key.replace(" ", "_")
        t0 = time.perf_counter()
        hs = [start(x, average=False, name=f"{tag}.{i}") for i, x in enumerate(data)]
        t1 = time.perf_counter()
        for h in hs:
            sync(h)
        t2 = time.perf_counter()
        if r >= 2:
            times[key]["issue"].append((t1 - t0) / arrays * 1e6)
            times[key]["total"].append((t2 - t0) / arrays * 1e6)
# The layer alone: the same calls with the core's enqueue stubbed out (no handle, no core work),
# so the difference is not buried in the core's noise.
from byteps import _basics
real_start, _basics.start = _basics.start, lambda *args, **kwargs: 0
layer = {k: [] for k in PATHS}
for r in range(rounds + 2):
    k0 = r % len(order)
    for key in order[k0:] + order[:k0]:
        start, _, data = PATHS[key]
        tag = key.replace(" ", "_")
        t0 = time.perf_counter()
        for i, x in enumerate(data):
            start(x, average=False, name=f"{tag}.{i}")
        t1 = time.perf_counter()
        if r >= 2:
            layer[key].append((t1 - t0) / arrays * 1e6)
_basics.start = real_start
for key in PATHS:
    times[key]["layer"] = layer[key]
out = dl.push_pull(xs[3], average=False, name="check")
if not np.array_equal(out, xs[3]):
    sys.exit("MISMATCH")
print("TIMES " + json.dumps(times), flush=True)
bnp.shutdown()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arrays", type=int, default=1000, help="arrays per round")
    ap.add_argument("--kib", type=float, default=4, help="KiB per array")
    ap.add_argument("--rounds", type=int, default=15, help="timed rounds (after 2 untimed)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    a = ap.parse_args()
    if a.arrays < 1 or a.kib <= 0 or a.rounds < 1:
        ap.error("--arrays >= 1, --kib > 0 and --rounds >= 1")
    with tempfile.TemporaryDirectory(prefix="bench-dlpack-") as work, Progress(1, "dlpack") as progress:
        progress.step(f"one job: 1 worker + 1 server, {a.arrays} arrays of {a.kib:g} KiB, {a.rounds} + 2 rounds")
        result = run_bpsrun(Path(work), 1, 1, WORKER, hermetic_env(), a.timeout, True,
                            (str(a.arrays), str(a.kib), str(a.rounds)))
    found = [json.loads(m) for m in re.findall(r"TIMES (\{.*\})", result.output)]
    if result.returncode != 0 or len(found) != 1:
        print(f"job failed (exit {result.returncode}):\n{result.output[-4000:]}", file=sys.stderr)
        return 1
    metrics = ("issue", "total", "layer")
    med = {k: {m: statistics.median(v[m]) for m in metrics} for k, v in found[0].items()}
    print(f"push_pull_async, 1 worker + 1 server (forced distributed) on loopback, {a.arrays} float32 arrays of "
          f"{a.kib:g} KiB per round, median of {a.rounds} rounds, microseconds per call")
    print(f"{'path':<16} {'issue us':>9} {'total us':>9} {'layer us':>9}")
    for k, v in med.items():
        print(f"{k:<16} {v['issue']:9.2f} {v['total']:9.2f} {v['layer']:9.2f}")
    diff = {f"{b} - {a_}": {m: med[b][m] - med[a_][m] for m in metrics}
            for a_, b in (("numpy", "dlpack"), ("numpy inplace", "dlpack inplace"), ("torch", "dlpack torch"))}
    for k, v in diff.items():
        print(f"{k:<32} issue {v['issue']:+7.2f} us, total {v['total']:+7.2f} us, layer {v['layer']:+6.2f} us per call")
    record = {"arrays": a.arrays, "kib": a.kib, "rounds": a.rounds, "median_us_per_call": med,
              "difference_us_per_call": diff}
    print("JSON " + json.dumps(record))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
