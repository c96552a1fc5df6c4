"""hvd.reducescatter pulling only each worker's rows (the servers' `scatter` key attribute) against
an allreduce of the same tensor followed by the worker's rows (byteps' reducescatter before it),
in one real job on loopback, default settings::

    /usr/bin/python3 -m bench.reducescatter.run [--workers 2] [--servers 2] [--mib 64] [--rounds 7]
        [--reps 3] [--rate MBIT] [--out bench-results/reducescatter.json]

With ``--rate`` the job runs on the emulated cluster instead (tools/testbed: one network namespace
per process, links shaped to MBIT Mbit/s both ways; needs root), else on loopback.

The two alternate which goes first each round; per round each worker's median of --reps is
taken, the slowest worker counts, and the medians over rounds are printed with their ratio, then a
JSON line (``JSON {...}``). Every result is checked. Exit status 1 when the job fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tools.localjob import hermetic_env, run_bpsrun
from tools.progress import Progress

WORKER = Path(__file__).with_name("worker.py")


def run_job(a: argparse.Namespace, args: tuple[str, ...]) -> tuple[int, str]:
    """The one job, on the emulated cluster with ``--rate``, else on loopback: (exit status, output)."""
    if a.rate > 0:
        proc = subprocess.run([sys.executable, "-m", "tools.testbed", "job", "--workers", str(a.workers), "--servers",
                               str(a.servers), "--rate", str(a.rate), "--timeout", str(a.timeout), "--",
                               sys.executable, str(WORKER), *args], capture_output=True, text=True,
                              env=hermetic_env(), timeout=a.timeout + 60)
        return proc.returncode, proc.stdout + proc.stderr
    with tempfile.TemporaryDirectory() as work:
        result = run_bpsrun(Path(work), a.workers, a.servers, WORKER.read_text(), hermetic_env(), a.timeout,
                            args=args)
    return result.returncode, result.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--rate", type=float, default=0, help="Mbit/s per link on the emulated cluster (0: loopback)")
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args()
    args = (str(a.mib), str(a.rounds), str(a.reps))
    with Progress(1, "reducescatter") as progress:
        progress.step(f"one job: {a.workers} workers, {a.servers} servers, {a.mib} MiB, {a.rounds} rounds x {a.reps}")
        rc, out = run_job(a, args)
    per_worker = [json.loads(line.split("RESULT ", 1)[1]) for line in out.splitlines() if "RESULT " in line]
    if rc != 0 or len(per_worker) != a.workers:
        print(out[-4000:], file=sys.stderr)
        return 1
    names = list(per_worker[0]["times"])
    slowest = {k: [max(w["times"][k][i] for w in per_worker) for i in range(a.rounds)] for k in names}
    med = {k: statistics.median(v) for k, v in slowest.items()}
    ratio = med["reducescatter"] / med["allreduce+rows"]
    where = f"emulated {a.rate:g} Mbit/s links" if a.rate > 0 else "loopback"
    print(f"{a.workers} workers, {a.servers} servers, {where}, {a.mib} MiB float32, {a.rounds} rounds x {a.reps}")
    print(f"{'':18}{'median s':>10}{'GB/s (tensor)':>15}")
    for k in names:
        print(f"{k:18}{med[k]:10.4f}{a.mib / 1024 / med[k]:15.2f}")
    print(f"reducescatter / allreduce+rows: {ratio:.2f}")
    record = {"workers": a.workers, "servers": a.servers, "rate_mbit": a.rate, "mib": a.mib, "rounds": a.rounds,
              "median_s": med, "ratio_reducescatter_to_allreduce_rows": ratio, "per_round_slowest_s": slowest}
    print("JSON " + json.dumps(record))
    if a.out:
        a.out.parent.mkdir(parents=True, exist_ok=True)
        a.out.write_text(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
