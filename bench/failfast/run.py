"""How fast a job ends when one process is configured differently, or when workers end unevenly
(issue 35's targets), on loopback::

    /usr/bin/python3 -m bench.failfast.run [--rounds 3] [--case ID ...] [--out bench-results/failfast.json]

Each case of tools/misconfig.py (a scheduler, one server, two workers; one of them configured
differently) runs ``--rounds`` times; a round records, per process, the time from its own start
to its exit, and the job's time: the slowest process. Cases known at once run with
BYTEPS_START_TIMEOUT=30 (target: the job ends within 2 s), the others with 5 (target: within the
start deadline). ``uneven-ends``: worker 0 makes 3 push_pulls and shuts down, worker 1 makes 5;
the job's time is from worker 0's ``shutdown()`` to the last process's exit (target: 2 s).

Printed: per case the median and the largest job time over the rounds, the median without the
scheduler (which stays 1 s after a job that could not form, to tell late nodes), the median time
of the process configured differently (uneven ends: worker 1, the one that waits), the bound (2 s
at once; the start timeout plus 1 s for what lies outside a process's deadline, its interpreter's
start before ``init()`` and its exit), whether every round met it, and whether every process
exited by itself with the expected message; then a JSON line. Exit status 1 when a round left a
process running or missed its message.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from tools import misconfig
from tools.progress import Progress


def _case_round(case: misconfig.Case, workdir: Path) -> tuple[float, float, float, bool]:
    exits, says = misconfig.run_case(case, workdir)
    ok = (all(not e.left_running and e.returncode != 0 for e in exits.values())
          and all(t in exits[case.odd].output for t in says))
    return (max(e.elapsed for e in exits.values()),
            max(e.elapsed for label, e in exits.items() if label != "scheduler"), exits[case.odd].elapsed, ok)


def _uneven_round(workdir: Path) -> tuple[float, float, float, bool]:
    exits, shutdown_at = misconfig.run_uneven(workdir)
    ok = all(e.returncode not in (0, None) and "worker 0 has shut down after round 3" in e.output
             for e in exits.values())
    return (max(e.ended_at for e in exits.values()) - shutdown_at,
            max(e.ended_at for label, e in exits.items() if label != "scheduler") - shutdown_at,
            exits["worker:1"].ended_at - shutdown_at, ok)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--case", action="append", help="run only these case ids (repeatable)")
    parser.add_argument("--out", type=Path, help="also write the JSON record here")
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    ucx = misconfig.ucx_built()
    chosen = [c for c in misconfig.CASES if not args.case or c.id in args.case]
    rows = []
    jobs = [(c.id, c.at_once, lambda d, c=c: _case_round(c, d)) for c in chosen if ucx or not c.needs_ucx]
    if not args.case or "uneven-ends" in args.case:
        jobs.append(("uneven-ends", True, _uneven_round))
    with tempfile.TemporaryDirectory(prefix="byteps-failfast-") as tmp, \
            Progress(len(jobs) * args.rounds, "failfast") as progress:
        for case_id, at_once, run in jobs:
            times, others, odds, oks = [], [], [], []
            for r in range(args.rounds):
                progress.step(f"{case_id} round {r + 1}/{args.rounds}")
                workdir = Path(tmp) / f"{case_id}-{r}"
                workdir.mkdir()
                t, o, odd, ok = run(workdir)
                times.append(t)
                others.append(o)
                odds.append(odd)
                oks.append(ok)
            # At once: 2 s. At the deadline: BYTEPS_START_TIMEOUT, plus 1 s for what lies outside
            # it (a worker's deadline counts from its init(), after its interpreter started).
            bound = 2.0 if at_once else misconfig.start_timeout(
                next(c for c in misconfig.CASES if c.id == case_id)) + 1.0
            rows.append({"case": case_id, "at_once": at_once, "median_s": round(statistics.median(times), 3),
                         "max_s": round(max(times), 3),
                         "median_without_scheduler_s": round(statistics.median(others), 3),
                         "median_odd_process_s": round(statistics.median(odds), 3), "bound_s": bound,
                         "met": all(t <= bound for t in times), "as_expected": all(oks),
                         "times_s": [round(t, 3) for t in times]})
    print(f"{'case':32} {'median':>7} {'max':>7} {'w/o sched':>9} {'odd one':>7} {'bound':>6}  met  as expected")
    for row in rows:
        print(f"{row['case']:32} {row['median_s']:7.2f} {row['max_s']:7.2f} {row['median_without_scheduler_s']:9.2f} "
              f"{row['median_odd_process_s']:7.2f} "
              f"{row['bound_s']:6.1f}  {'yes' if row['met'] else 'NO ':3}  {'yes' if row['as_expected'] else 'NO'}")
    record = {"benchmark": "failfast", "rounds": args.rounds, "ucx_built": ucx, "cases": rows}
    print(json.dumps(record))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0 if all(r["as_expected"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
