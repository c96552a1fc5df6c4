"""The per-call cost of the plugins' tensor checks, in one process, no job (issue 34)::

    PYTHONPATH=python /usr/bin/python3 -m bench.dlpack.checks [--number 200000] [--repeat 7]

Times, on a 1024-float CPU tensor / NumPy array: ``byteps.torch.ops.check_tensor``,
``ops._device_of``, ``byteps._tensor_view.check_numpy`` (in place) and the whole Python layer of
``byteps.torch.push_pull_async`` with ``_basics.start`` stubbed out (the checks, the output's
allocation, the device tuple, the attrs).  Printed: the best of ``--repeat`` runs of ``--number``
calls each, in nanoseconds per call, and a JSON line.  To compare two versions, run it with each
one's ``python/`` first on PYTHONPATH, alternately (the best-of-N is what is steady on a busy
machine; bench.dlpack.run's ``layer`` column measures the same layer inside a job).
"""

from __future__ import annotations

import argparse
import json
import timeit


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--number", type=int, default=200000, help="calls per timed run")
    ap.add_argument("--repeat", type=int, default=7, help="timed runs (the best is printed)")
    a = ap.parse_args()
    if a.number < 1 or a.repeat < 1:
        ap.error("--number >= 1 and --repeat >= 1")
    import numpy as np
    import torch

    from byteps import _basics, _tensor_view
    from byteps.torch import ops

    t, x = torch.zeros(1024), np.zeros(1024, np.float32)
    _basics.start = lambda *args, **kwargs: 0  # the Python layer alone; no job is started
    calls = {
        "torch check_tensor": lambda: ops.check_tensor(t),
        "torch _device_of": lambda: ops._device_of(t),
        "numpy check_numpy": lambda: _tensor_view.check_numpy(x, True),
        "torch push_pull_async layer": lambda: ops.push_pull_async(t, average=False, name="x"),
    }
    ns = {}
    for key, call in calls.items():
        call()  # first use: the core's codes are read
        ns[key] = min(timeit.repeat(call, number=a.number, repeat=a.repeat)) / a.number * 1e9
        print(f"{key:<28} {ns[key]:8.0f} ns per call")
    print("JSON " + json.dumps({"number": a.number, "repeat": a.repeat, "ns_per_call": ns}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
