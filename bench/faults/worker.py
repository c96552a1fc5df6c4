"""The worker program of a fault trial / the soak (run as a script by bench.faults.job.Job).

Trial mode (default): ``BPS_TRIAL_ROUNDS`` rounds of push_pull over three tensors (int32 and
float32, 3 to 50,000 elements, so several partitions on every server), every result checked
exactly against the closed-form sum; a short sleep per round spreads the job over about a
second so that faults land mid-training too.

Soak mode (``BPS_SOAK_SECONDS`` set): the same loop until that many seconds have passed on
worker 0's clock (every round also sums a "stop" flag, so all workers stop after the same
round); prints ``SOAK rounds=N`` at the end.

Lines printed (the runner parses them): ``INIT <rank>``, ``TRAINED``, ``DONE``;
``WRONG ...`` then exit 3 on a wrong sum; ``<STAGE>_ERROR <type>: <message>`` then exit 2 when
byteps raises.
"""

import os
import sys
import time

import numpy as np

import byteps.numpy as bps

SIZES = (3, 1000, 50000)


def fail(stage: str, err: BaseException) -> None:
    print(f"{stage}_ERROR {type(err).__name__}: {err}", flush=True)
    sys.exit(2)


def main() -> None:
    rounds = int(os.environ.get("BPS_TRIAL_ROUNDS", "25"))
    pause = float(os.environ.get("BPS_TRIAL_SLEEP", "0.04"))
    soak = os.environ.get("BPS_SOAK_SECONDS")
    try:
        bps.init()
    except Exception as err:  # noqa: BLE001 - reported, then exit 2
        fail("INIT", err)
    rank, n = bps.rank(), bps.size()
    print(f"INIT {rank}", flush=True)
    stop_at = time.monotonic() + float(soak) if soak else None
    bases = [np.arange(size, dtype=np.int64) * (j + 7) for j, size in enumerate(SIZES)]
    it = 0
    try:
        while True:
            if stop_at is None:
                if it >= rounds:
                    break
            else:
                flag = np.array([1 if time.monotonic() >= stop_at else 0], np.int32)
                if bps.push_pull(flag, average=False, name="stop")[0] > 0:
                    break
            for j, base in enumerate(bases):
                dtype = np.int32 if j % 2 == 0 else np.float32
                x = ((base + it) % 1009 + rank).astype(dtype)
                out = bps.push_pull(x, average=False, name=f"t{j}")
                want = (((base + it) % 1009) * n + n * (n - 1) // 2).astype(dtype)
                if out.dtype != dtype or not np.array_equal(out, want):
                    bad = np.flatnonzero(out != want)
                    print(f"WRONG round {it} tensor t{j}: {bad.size} of {want.size} elements differ "
                          f"(first at {bad[:1].tolist()}: got {out[bad[:1]].tolist()}, "
                          f"want {want[bad[:1]].tolist()})", flush=True)
                    os._exit(3)
            it += 1
            if stop_at is None and pause > 0:
                time.sleep(pause)
    except Exception as err:  # noqa: BLE001
        fail("PUSH_PULL", err)
    print("TRAINED", flush=True)
    if soak:
        print(f"SOAK rounds={it}", flush=True)
    try:
        bps.shutdown()
    except Exception as err:  # noqa: BLE001
        fail("SHUTDOWN", err)
    print("DONE", flush=True)


if __name__ == "__main__":
    main()
