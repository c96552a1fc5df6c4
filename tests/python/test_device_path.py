"""The device path through the C ABI and real processes, on the fake device backend (whose
"device memory" is host memory only its stream threads touch): byteps_push_pull_async_on with
BYTEPS_DEVICE_FAKE in a 2-worker, 2-server job sums exactly, for every dtype, in place and out of
place, averaged or not, over many partitions; allgather (uneven slices) and broadcast of device
tensors concatenate on the servers; an unknown device kind is a named error.  (CUDA
tensors themselves need a GPU: scripts/gpu-check.sh.)"""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.usefixtures("require_core")

SCRIPT = r"""
import json
import numpy as np
from byteps import _basics
import byteps.numpy as bpsnp

bpsnp.init()
core = _basics.core()
rank, size = bpsnp.rank(), bpsnp.size()
fails = []
dtypes = [np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint8]
for rnd in range(3):
    handles = []
    for k, dt in enumerate(dtypes):
        for n in (1, 1000, 50001):
            x = ((np.arange(n) % 5) * (rank + 1) + rnd).astype(dt)
            in_place = (k + n) % 2 == 0
            average = np.issubdtype(dt, np.floating) and n == 1000
            out = x if in_place else np.full_like(x, 77)
            code = getattr(core, {np.float32: "FLOAT32", np.float64: "FLOAT64", np.float16: "FLOAT16",
                                  np.int32: "INT32", np.int64: "INT64", np.int8: "INT8", np.uint8: "UINT8"}[dt])
            h = _basics.start(f"dev.{k}.{n}", x.ctypes.data, out.ctypes.data, x.nbytes, code, average, 0, x, out,
                              device=(core.DEVICE_FAKE, rank, 0))
            handles.append((h, dt, n, out, average))
    for h, dt, n, out, average in handles:
        _basics.synchronize(h)
        want = sum(((np.arange(n) % 5) * (r + 1) + rnd) for r in range(size)).astype(np.float64)
        if average:
            want = want / size
        got = out.astype(np.float64)
        tol = 0.02 * np.abs(want) + 1e-3 if dt == np.float16 else 1e-9 * np.abs(want)
        if not np.all(np.abs(got - want) <= tol):
            fails.append(f"{dt.__name__}[{n}] round {rnd}")
# Allgather (uneven slices: rank r gives r + 2 float32 values) and broadcast from rank 1.
counts = [r + 2 for r in range(size)]
mine = np.full(counts[rank], rank + 1, dtype=np.float32)
gathered = np.zeros(sum(counts), dtype=np.float32)
h = _basics.start_allgather("dev.gather", mine.ctypes.data, mine.nbytes, gathered.ctypes.data, gathered.nbytes,
                            4 * sum(counts[:rank]), core.FLOAT32, 0, mine, gathered,
                            device=(core.DEVICE_FAKE, rank, 0))
_basics.synchronize(h)
want = np.concatenate([np.full(c, r + 1, dtype=np.float32) for r, c in enumerate(counts)])
if not np.array_equal(gathered, want):
    fails.append(f"allgather {gathered.tolist()}")
b = np.arange(3000, dtype=np.int64) * (rank + 1)
h = _basics.start_broadcast("dev.bcast", b.ctypes.data, b.nbytes, core.INT64, 1, 0, b,
                            device=(core.DEVICE_FAKE, rank, 0))
_basics.synchronize(h)
if not np.array_equal(b, np.arange(3000, dtype=np.int64) * 2):
    fails.append("broadcast")
try:
    core.push_pull_async("dev.bad", 1, 1, 4, core.FLOAT32, False, 0, 9, 0, 0)
    fails.append("device kind 9 accepted")
except Exception as e:
    if "unknown device kind 9" not in str(e):
        fails.append(str(e))
print("RESULT " + json.dumps({"rank": rank, "fails": fails}), flush=True)
bpsnp.shutdown()
"""


def test_fake_device_tensors_sum_exactly_through_the_c_abi(run_job):
    r = run_job(2, 2, SCRIPT, env={"BYTEPS_PARTITION_BYTES": "16384"}, timeout=120)
    assert r.returncode == 0, r.output
    results = [json.loads(line.split("RESULT ", 1)[1]) for line in r.output.splitlines() if "RESULT " in line]
    assert sorted(x["rank"] for x in results) == [0, 1], r.output
    for x in results:
        assert x["fails"] == [], r.output
