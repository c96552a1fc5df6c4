"""allgather through the servers' concatenation against the zero-padded sum it replaced, in one
run on loopback::

    /usr/bin/python3 -m bench.allgather.run [--n 4] [--mib 8] [--iters 10] [--out bench-results/allgather.json]

``bpsrun -n N -s N`` (no settings); every worker gives ``--mib`` MiB (float32 rows of 1 KiB) and
gets all N slices. Each iteration times, one after the other on the same tensors:

* ``concat``: ``byteps.torch.allgather`` (the shapes exchanged in a small push_pull, then each
  worker pushes only its rows and the servers concatenate: a worker sends M and receives N M);
* ``padded sum``: what allgather did before: the same shape exchange, then an output of N M bytes,
  zero but for the worker's own rows, summed by push_pull (a worker sends and receives N M, and the
  servers add N M per worker).

Printed: the median time of each over ``--iters`` iterations (after 2 untimed), per worker, the
slowest worker's median, and the ratio; and a JSON line. Exit status 1 when the job fails.
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
import torch
import byteps.torch as bps
from byteps.torch import ops
bps.init()
n, r = bps.size(), bps.rank()
rows, iters = int(sys.argv[1]), int(sys.argv[2])
x = torch.full((rows, 256), float(r + 1))
times = {"concat": [], "padded sum": []}
for it in range(iters + 2):
    t0 = time.perf_counter()
    g = bps.allgather(x, name="ag")
    t1 = time.perf_counter()
    meta = torch.zeros(n, dtype=torch.int64)
    meta[r] = rows
    meta = bps.synchronize(ops.push_pull_async_inplace(meta, average=False, name="pad.rows"))
    out = torch.zeros((int(meta.sum()), 256))
    out[r * rows:(r + 1) * rows] = x
    out = bps.synchronize(ops.push_pull_async_inplace(out, average=False, name="pad.data"))
    t2 = time.perf_counter()
    if not torch.equal(g, out):
        sys.exit("MISMATCH")
    if it >= 2:
        times["concat"].append(t1 - t0)
        times["padded sum"].append(t2 - t1)
print("TIMES " + json.dumps(times), flush=True)
bps.shutdown()
'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4, help="workers (and servers)")
    ap.add_argument("--mib", type=float, default=8, help="MiB each worker contributes")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    a = ap.parse_args()
    if a.n < 2 or a.mib <= 0 or a.iters < 1:
        ap.error("--n >= 2, --mib > 0 and --iters >= 1")
    rows = max(1, int(a.mib * 1024))
    with tempfile.TemporaryDirectory(prefix="bench-allgather-") as work, Progress(1, "allgather") as progress:
        progress.step(f"one job: n = k = {a.n}, {a.mib:g} MiB per worker, {a.iters} + 2 iterations")
        result = run_bpsrun(Path(work), a.n, a.n, WORKER, hermetic_env(), a.timeout, False, (str(rows), str(a.iters)))
    found = [json.loads(m) for m in re.findall(r"TIMES (\{.*\})", result.output)]
    if result.returncode != 0 or len(found) != a.n:
        print(f"job failed (exit {result.returncode}):\n{result.output[-4000:]}", file=sys.stderr)
        return 1
    medians = {k: max(statistics.median(w[k]) for w in found) for k in ("concat", "padded sum")}
    print(f"allgather, n = k = {a.n} on loopback, {a.mib:g} MiB per worker, {a.iters} iterations "
          f"(the slowest worker's median)")
    print(f"{'method':<12} {'median s':>9}")
    for k, v in medians.items():
        print(f"{k:<12} {v:9.4f}")
    ratio = medians["padded sum"] / medians["concat"]
    print(f"concat is {ratio:.2f}x the padded sum's speed")
    record = {"n": a.n, "mib_per_worker": a.mib, "iters": a.iters, "median_s": medians, "speedup": ratio}
    print("JSON " + json.dumps(record))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
