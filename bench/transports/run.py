"""Loopback push_pull over each transport, interleaved in one run on this machine::

    /usr/bin/python3 -m bench.transports.run [--rounds 3] [--min-bytes 4K] [--max-bytes 256M]
                                               [--out bench-results/transports.json]

Shape: 1 worker + 1 server on this host (``bpsrun -n 1 -s 1 --force-distributed -- byteps-core
bench``), everything else at its default; the only difference between the rows is the transport:
``tcp`` (``BYTEPS_TRANSPORT=tcp``: loopback TCP sockets), ``shm`` (``auto``, the default, which
picks the shared-memory backend for a worker and a server of one host), ``ucx``
(``BYTEPS_TRANSPORT=ucx``, UCX's own choice of transport), ``ucx_tcp`` and ``ucx_sm`` (the same
with ``UCX_TLS=tcp`` / ``sm``); the ucx rows are left out when the build has no UCX.
``--transports`` picks rows.  Each round runs every transport once, rotating the order; a figure
is the median over the rounds of each run's median time per push_pull.  Two parts:

* the size sweep (``--min-bytes`` .. ``--max-bytes``, x4 steps): algorithm bandwidth, and each
  row's ratio to tcp (> 1: faster than loopback TCP);
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

from tools.progress import Progress

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "python" / "byteps" / "_bin" / "byteps-core"
ALL = ["tcp", "shm", "ucx", "ucx_tcp", "ucx_sm"]
# The settings of each row: auto, the default, picks shared memory here.
SETTING = {"tcp": {"BYTEPS_TRANSPORT": "tcp"}, "shm": {"BYTEPS_TRANSPORT": "auto"},
           "ucx": {"BYTEPS_TRANSPORT": "ucx"},  # UCX's own choice (UCX_TLS unset)
           "ucx_tcp": {"BYTEPS_TRANSPORT": "ucx", "UCX_TLS": "tcp"},
           "ucx_sm": {"BYTEPS_TRANSPORT": "ucx", "UCX_TLS": "sm"}}


def ucx_built() -> bool:
    r = subprocess.run([str(CORE), "info"], capture_output=True, text=True, timeout=60)
    line = next((l for l in r.stdout.splitlines() if l.startswith("transports built:")), "")
    return "ucx" in line.split()


def job(transport: str, args: list[str], timeout: float) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BYTEPS_", "DMLC_", "PS_", "UCX_"))}
    env.update(SETTING[transport])
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
    p.add_argument("--transports", default=",".join(ALL), help=f"rows, from {','.join(ALL)} (tcp is always run)")
    p.add_argument("--out", type=Path, default=ROOT / "bench-results" / "transports.json")
    a = p.parse_args(argv)
    if not CORE.exists():
        print(f"no {CORE}: run scripts/build.sh first", file=sys.stderr)
        return 1
    kinds = ["tcp"] + [t for t in a.transports.split(",") if t in ALL and t != "tcp"]
    if not ucx_built() and any(t.startswith("ucx") for t in kinds):
        print("# this build has no UCX: its rows are left out", file=sys.stderr)
        kinds = [t for t in kinds if not t.startswith("ucx")]
    sweep = {t: {} for t in kinds}   # transport -> bytes -> [median us per round]
    small = {t: [] for t in kinds}   # transport -> [us per tensor per round]
    failed = False
    with Progress(a.rounds * len(kinds) * 2, "transports") as progress:  # two jobs per transport and round
        for r in range(a.rounds):
            k = r % len(kinds)
            for t in kinds[k:] + kinds[:k]:
                try:
                    progress.step(f"round {r + 1}: {t} sizes {a.min_bytes}..{a.max_bytes}")
                    d = job(t, ["--min-bytes", a.min_bytes, "--max-bytes", a.max_bytes, "--step-factor", "4"],
                            a.timeout)
                    for row in d["rows"]:
                        sweep[t].setdefault(row["bytes"], []).append(row["time_us_median"])
                    progress.step(f"round {r + 1}: {t} 1000 x 4 KiB")
                    s = job(t, ["--tensors", "1000", "--tensor-bytes", "4096", "--iters", str(a.small_iters)],
                            a.timeout)
                    small[t].append(s["per_tensor_us_median"] if "per_tensor_us_median" in s else s["per_tensor_us"])
                except (RuntimeError, subprocess.TimeoutExpired, KeyError) as e:
                    print(f"# round {r + 1}: {e}", file=sys.stderr)
                    failed = True
    rows = []
    others = [t for t in kinds if t != "tcp"]
    print(f"# loopback push_pull, 1 worker + 1 server, defaults except the transport; medians of {a.rounds} rounds")
    print(f"{'size':>10} " + " ".join(f"{t + ' GB/s':>12}" for t in kinds) + " " +
          " ".join(f"{t + '/tcp':>11}" for t in others))
    for b in sorted(set.intersection(*(set(sweep[t]) for t in kinds))):
        med = {t: statistics.median(sweep[t][b]) for t in kinds}
        row = {"bytes": b}
        for t in kinds:
            row[f"{t}_GBps"] = b / med[t] / 1e3
        for t in others:
            row[f"{t}_over_tcp"] = med["tcp"] / med[t]
        rows.append(row)
        print(f"{b:>10} " + " ".join(f"{row[t + '_GBps']:>12.3f}" for t in kinds) + " " +
              " ".join(f"{row[t + '_over_tcp']:>10.2f}x" for t in others))
    result = {"rows": rows, "rounds": a.rounds, "transports": kinds}
    if all(small[t] for t in kinds):
        result["small"] = {f"{t}_us_per_tensor": statistics.median(small[t]) for t in kinds}
        print("# 1000 x 4 KiB per iteration, us per tensor: " +
              ", ".join(f"{t} {result['small'][t + '_us_per_tensor']:.1f}" for t in kinds))
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print("JSON " + json.dumps(result))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
