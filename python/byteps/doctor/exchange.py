"""Sharing small values among the workers through byteps itself.

A push_pull sums: when each worker writes its own slot of a zeroed buffer and leaves the others
at zero, the sum is every worker's value.  Each call uses fresh tensor names (a counter), so the
workers must make the same calls in the same order, as with every push_pull.
"""

from __future__ import annotations

import itertools
import time
from typing import Optional

import numpy as np

from .. import _basics
from .. import numpy as bps

_counter = itertools.count()


def _sum(array: np.ndarray, what: str, timeout: float) -> np.ndarray:
    handle = bps.push_pull_async(array, average=False, name=f"doctor.{what}.{next(_counter)}")
    return bps.synchronize(handle, timeout=timeout)


def gather_floats(value: float, timeout: float) -> list[float]:
    """Every worker's *value*, in rank order."""
    buf = np.zeros(bps.size(), np.float64)
    buf[bps.rank()] = value
    return [float(v) for v in _sum(buf, "floats", timeout)]


def gather_bytes(payload: bytes, timeout: float) -> list[bytes]:
    """Every worker's *payload*, in rank order (two push_pulls: the lengths, then the bytes)."""
    n, me = bps.size(), bps.rank()
    lengths = np.zeros(n, np.int64)
    lengths[me] = len(payload)
    lengths = _sum(lengths, "lengths", timeout)
    width = max(int(lengths.max()), 1)
    buf = np.zeros((n, width), np.uint8)
    buf[me, :len(payload)] = np.frombuffer(payload, np.uint8)
    buf = _sum(buf, "bytes", timeout)
    return [bytes(buf[r, :int(lengths[r])]) for r in range(n)]


def timed_rounds(name: str, nbytes: int, rounds: int, timeout: float, server: Optional[int] = None,
                 passes: int = 3) -> float:
    """Seconds the workers took to push_pull *rounds* tensors of *nbytes*, all started at once so
    that the pulls of one overlap the pushes of the next (as in training), placed on server
    *server* only (the declaration attribute ``server=<rank>``) or, for None, spread over all
    servers as the core places them.  An untimed first pass declares the tensors; the workers
    then start each of *passes* timed passes together.  A pass lasts as long as its slowest
    worker; the fastest pass counts (the others may have met a busy CPU).  Same on every worker."""
    bufs = [np.ones(max(nbytes // 4, 1), np.float32) for _ in range(rounds)]
    attrs = "" if server is None else f"server={server}"
    c = _basics.core()

    def one_pass() -> None:
        handles = []
        for r, buf in enumerate(bufs):
            ptr = buf.ctypes.data
            handles.append(_basics.start_reduce(f"doctor.{name}.{r}", ptr, ptr, buf.nbytes, c.FLOAT32, c.OP_SUM,
                                                False, 0, attrs=attrs, pending=_basics.Pending(buf, buf, "")))
        for h in handles:  # the sums grow as n^passes: harmless for timing
            _basics.wait(h, timeout)

    one_pass()
    took = []
    for _ in range(passes):
        gather_floats(0.0, timeout)  # everyone has finished the pass before
        start = time.monotonic()
        one_pass()
        took.append(max(gather_floats(time.monotonic() - start, timeout)))
    return min(took)
