"""Memory soak: push_pull in a loop for N minutes, the resident memory of every process sampled.

    /usr/bin/python3 -m bench.faults.soak                    # 10 minutes, 2 workers, 2 servers
    /usr/bin/python3 -m bench.faults.soak --minutes 1 --servers 1 --out DIR

A scheduler, ``--servers`` servers and 2 workers (bench/faults/worker.py in soak mode: three
tensors of 3, 1,000 and 50,000 elements, int32/float32, every sum checked exactly, no sleep
between rounds) run for ``--minutes``; every ``--interval`` seconds the VmRSS of each process
is read from /proc/<pid>/status.  The slope (MB/min) is a least-squares fit over the samples
after ``--warmup`` seconds (allocator pools and the first rounds' buffers settle there).

Output: a table (per process: RSS at the first sample after warm-up, at the end, the maximum,
and the slope) and ``DIR/soak.json`` with every sample.  Exit 0 when the job completed with
exact results; the memory figures are reported, not judged.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import job as joblib
from .job import REPO, Job

from tools.procinfo import vm_rss_kib  # job put tools/ on sys.path
from tools.progress import Progress

WORKER_SCRIPT = (Path(__file__).with_name("worker.py")).read_text()


def slope_mb_per_min(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of (seconds, KiB) points, in MB (10^6 bytes) per minute."""
    if len(points) < 2:
        return 0.0
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    var = sum((t - mx) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    kib_per_s = sum((t - mx) * (v - my) for t, v in points) / var
    return kib_per_s * 1024 * 60 / 1e6


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench.faults.soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--warmup", type=float, default=30.0, help="seconds left out of the slope")
    p.add_argument("--out", default=str(REPO / "bench-results" / "soak"))
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    joblib.use_snapshot(out / "snapshot")  # a rebuild during the soak cannot mix versions
    seconds = args.minutes * 60
    env = {"BYTEPS_PARTITION_BYTES": "16384", "BYTEPS_START_TIMEOUT": "30", "BYTEPS_TIMEOUT": "60",
           "BPS_SOAK_SECONDS": f"{seconds:g}"}
    job = Job(out / "logs", workers=args.workers, servers=args.servers, script=WORKER_SCRIPT, env=env)
    samples: dict[str, list[tuple[float, int]]] = {}
    with job, Progress(None, "soak") as progress:  # no total: start-up and shutdown add samples
        start = time.monotonic()
        job.start_all()
        deadline = start + seconds + 120  # start-up and shutdown; past it the job is stuck
        next_sample = start
        while job.poll() and time.monotonic() < deadline:
            now = time.monotonic()
            if now >= next_sample:
                progress.step(f"RSS sample at t={now - start:.0f} s of {seconds:g} s")
                for label, proc in job.procs.items():
                    rss = vm_rss_kib(proc.pid) if proc.exited is None else None
                    if rss is not None:
                        samples.setdefault(label, []).append((round(now - start, 2), rss))
                next_sample += args.interval
                line = "  ".join(f"{label} {pts[-1][1] / 1024:.1f}" for label, pts in samples.items() if pts)
                print(f"t={now - start:6.0f}s  RSS MiB: {line}", flush=True)
            time.sleep(min(0.2, max(0.0, next_sample - time.monotonic())))
        stuck = [p.label for p in job.poll()]
    outputs = {label: p.output() for label, p in job.procs.items()}
    rounds = [int(line.split("=")[1]) for text in outputs.values() for line in text.splitlines()
              if line.startswith("SOAK rounds=")]
    ok = (not stuck and all(p.returncode == 0 for p in job.procs.values())
          and all("DONE" in outputs[label] for label in outputs if label.startswith("worker")))
    rows = []
    for label, pts in samples.items():
        steady = [(t, v) for t, v in pts if t >= args.warmup] or pts
        rows.append({"process": label, "pid": job.procs[label].pid,
                     "rss_first_mib": round(pts[0][1] / 1024, 1),
                     "rss_start_mib": round(steady[0][1] / 1024, 1),
                     "rss_end_mib": round(pts[-1][1] / 1024, 1),
                     "rss_max_mib": round(max(v for _, v in pts) / 1024, 1),
                     "slope_mb_per_min": round(slope_mb_per_min(steady), 3),
                     "samples": len(pts)})
    elapsed = time.monotonic() - start
    report = {"command": " ".join(sys.argv), "minutes": args.minutes, "workers": args.workers,
              "servers": args.servers, "interval_s": args.interval, "warmup_s": args.warmup,
              "elapsed_s": round(elapsed, 1), "completed_exact": ok, "stuck": stuck,
              "returncodes": {label: p.returncode for label, p in job.procs.items()},
              "rounds": rounds[0] if rounds else None,
              "rounds_per_s": round(rounds[0] / seconds, 1) if rounds else None,
              "processes": rows, "samples": samples}
    (out / "soak.json").write_text(json.dumps(report, indent=1))
    print()
    print(f"{'process':<12}{'start MiB':>11}{'end MiB':>10}{'max MiB':>10}{'MB/min':>9}{'samples':>9}")
    for r in rows:
        print(f"{r['process']:<12}{r['rss_start_mib']:>11.1f}{r['rss_end_mib']:>10.1f}"
              f"{r['rss_max_mib']:>10.1f}{r['slope_mb_per_min']:>9.3f}{r['samples']:>9}")
    print(f"\n{report['rounds']} rounds ({report['rounds_per_s']}/s) in {elapsed:.0f}s; "
          f"{'completed with exact results' if ok else 'FAILED: ' + str(report['returncodes'])}"
          f"{'; stuck: ' + str(stuck) if stuck else ''}")
    print(f"JSON: {out / 'soak.json'}")
    if not ok:
        for label, text in outputs.items():
            print(f"--- {label} ---\n{text[-2000:]}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
