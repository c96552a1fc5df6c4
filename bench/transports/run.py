"""Loopback push_pull over each transport, interleaved in one run on this machine::

    /usr/bin/python3 -m bench.transports.run [--rounds 3] [--min-bytes 4K] [--max-bytes 256M]
                                               [--out bench-results/transports.json]

Shape: 1 worker + 1 server on this host (``bpsrun -n 1 -s 1 --force-distributed -- byteps-core
bench``), everything else at its default; the only difference between the rows is
``BYTEPS_TRANSPORT``: ``tcp`` (loopback TCP sockets) and ``auto`` (the default, which picks the
shared-memory backend for a worker and a server of one host; the row is labelled shm).  Each round runs every
transport once, in alternating order; a figure is the median over the rounds of each run's median
time per push_pull.  Two parts:

* the size sweep (``--min-bytes`` .. ``--max-bytes``, x4 steps): algorithm bandwidth, and the
  shm/tcp ratio (> 1: shared memory is faster);
* small tensors: 1,000 tensors of 4 KiB per iteration, the time per tensor.

Every job has a deadline (``--timeout``); the exit status is 1 when a job failed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "python" / "byteps" / "_bin" / "byteps-core"
TRANSPORTS = ["tcp", "shm"]
SETTING = {"tcp": "tcp", "shm": "auto"}  # BYTEPS_TRANSPORT of each row: auto, the default, picks shm here


def job(transport: str, args: list[str], timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BYTEPS_", "DMLC_", "PS_"))}
    env["BYTEPS_TRANSPORT"] = SETTING[transport]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "bench.json"
        cmd = [sys.executable, "-m", "byteps.launcher.bpsrun", "--timeout", str(int(timeout)), "-n", "1", "-s", "1",
               "--force-distributed", "--", str(CORE), "bench", *args, "--json", str(out)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout + 30)
        if r.returncode != 0 or not out.exists():
            raise RuntimeError(f"{transport}: {' '.join(cmd)} failed (rc {r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        return json.loads(out.read_text())


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--min-bytes", default="4K")
    p.add_argument("--max-bytes", default="256M")
    p.add_argument("--small-iters", type=int, default=30)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--out", type=Path, default=ROOT / "bench-results" / "transports.json")
    a = p.parse_args(argv)
    if not CORE.exists():
        print(f"no {CORE}: run scripts/build.sh first", file=sys.stderr)
        return 1
    sweep = {t: {} for t in TRANSPORTS}   # transport -> bytes -> [median us per round]
    small = {t: [] for t in TRANSPORTS}   # transport -> [us per tensor per round]
    failed = False
    for r in range(a.rounds):
        for t in (TRANSPORTS if r % 2 == 0 else TRANSPORTS[::-1]):
            try:
                d = job(t, ["--min-bytes", a.min_bytes, "--max-bytes", a.max_bytes, "--step-factor", "4"], a.timeout)
                for row in d["rows"]:
                    sweep[t].setdefault(row["bytes"], []).append(row["time_us_median"])
                s = job(t, ["--tensors", "1000", "--tensor-bytes", "4096", "--iters", str(a.small_iters)], a.timeout)
                small[t].append(s["per_tensor_us_median"] if "per_tensor_us_median" in s else s["per_tensor_us"])
            except (RuntimeError, subprocess.TimeoutExpired, KeyError) as e:
                print(f"# round {r + 1}: {e}", file=sys.stderr)
                failed = True
        print(f"# round {r + 1} of {a.rounds} done", file=sys.stderr)
    rows = []
    print(f"# loopback push_pull, 1 worker + 1 server, defaults except BYTEPS_TRANSPORT; medians of {a.rounds} rounds")
    print(f"{'size':>10} {'tcp GB/s':>10} {'shm GB/s':>10} {'shm/tcp':>8}")
    for b in sorted(set(sweep["tcp"]) & set(sweep["shm"])):
        tt, ts = statistics.median(sweep["tcp"][b]), statistics.median(sweep["shm"][b])
        row = {"bytes": b, "tcp_GBps": b / tt / 1e3, "shm_GBps": b / ts / 1e3, "shm_over_tcp": tt / ts}
        rows.append(row)
        print(f"{b:>10} {row['tcp_GBps']:>10.3f} {row['shm_GBps']:>10.3f} {row['shm_over_tcp']:>7.2f}x")
    result = {"rows": rows, "rounds": a.rounds}
    if small["tcp"] and small["shm"]:
        st, ss = statistics.median(small["tcp"]), statistics.median(small["shm"])
        result["small"] = {"tcp_us_per_tensor": st, "shm_us_per_tensor": ss}
        print(f"# 1000 x 4 KiB per iteration: tcp {st:.1f} us per tensor, shm {ss:.1f} us per tensor")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print("JSON " + json.dumps(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
