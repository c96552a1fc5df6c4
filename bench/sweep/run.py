"""byteps settings sweep, one command, one run: grid search of BYTEPS_PARTITION_BYTES x
BYTEPS_SCHEDULING_CREDIT x BYTEPS_CONNECTIONS_PER_PEER on the emulated cluster (tools/testbed),
next to byteps' defaults, its autotuner and gloo all_reduce::

    /usr/bin/python3 -m bench.sweep.run                      # every case, the 32-point grid
    /usr/bin/python3 -m bench.sweep.run --quick              # n4k4-1000, 16M, 2x2x1 grid
    /usr/bin/python3 -m bench.sweep.run [--cases n4k4-1000,...] [--sizes 100M]
        [--partitions 64K,256K,1M,4096000] [--credits 0,4,16,64] [--connections 1,2]
        [--out bench-results/sweep] [--max-minutes M] [--iters N] [--warmup W]
        [--rate-budget 12000] [--dry-run] [-v]

Run from the repository root, as root (network namespaces).  Cases (``--cases``, default all):

* n4k4-500, n4k4-1000, n4k4-2500: 4 workers, 4 servers on hosts of their own, 500 / 1000 /
  2500 Mbit/s per host requested;
* n8k8-1000: 8 workers, 8 servers; n4k2-1000: 4 workers, 2 servers (k = n/2);
  n4coloc-1000: 4 workers, server i on worker host i.

The requested rate is lowered as bench.collective does (``model.capped_rate``: hosts x R <=
``--rate-budget``, default 12000, what the two cores can shape; hosts = n + k separate, n
colocated): n4k4-2500 runs at 1500, n8k8-1000 at 750.  Every row of a case uses that one rate;
the plan, the table and results.json show the rate actually used.

For every case, in this run: gloo all_reduce once (the baseline; bench.collective.run.run_gloo),
then byteps (``byteps-core bench`` as every worker, bench.collective.run.run_byteps), each
iteration of every system timed after a barrier (the collective benchmark's ``--timing
barrier``), with

* ``defaults``: no BYTEPS_* variable at all (the runner removes any from its own environment,
  except BYTEPS_CORE_BINARY, and passes none of its own; only the job's wiring that
  tools.testbed.job.run_job sets: local rank/size and the job secret).  Where the build turns
  BYTEPS_AUTOTUNE on by default, this row is autotuned too;
* ``autotune``: only BYTEPS_AUTOTUNE=1 - skipped ("BYTEPS_AUTOTUNE not in this build") when
  ``byteps-core info`` does not list it;
* every grid point: the three variables set, nothing else (explicit values win over autotune).

Each configuration gets a fresh testbed, waits (``--wait-idle``) for the machine to be idle,
and records its CPU use (bench.collective.run.CpuMonitor) and what worker 0 says it ran with
(partition bytes, credit, the autotuner's reasoning: the bench JSON).  Iterations per size:
clamp(512 MiB / M, 5, 50) after ``--warmup`` (1); times are medians.  ``--max-minutes`` stops
starting new configurations once that much time has passed; those not started are recorded as
skipped.

Printed tables: per case every row, fastest first (* = best grid point); then the summary, per
case and size: row = gloo | best (the fastest grid point, its setting shown) | defaults |
autotune (with the partition and credit the core chose); time_s (median); best/t = t_best /
t_row (1 = as fast as the best grid point, > 1 faster); vs_gloo = t_gloo / t_row (> 1: faster
than gloo); within5% = yes when t_row <= 1.05 t_best (``--tolerance``).

Output (``--out``, default bench-results/sweep): results.json (meta, cases, configurations with
status, CPU and reported settings, every measurement, the summary; rewritten after each
configuration, so an interrupted run keeps its data), results.md (summary, each case's full
grid fastest first, what defaults/autotune chose, configurations not measured),
raw/<case>/<row>/ (each job's output and bench JSON).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.collective import model  # noqa: E402
from bench.collective import run as crun  # noqa: E402
from bench.sweep import grid  # noqa: E402
from tools.progress import Progress  # noqa: E402

DEFAULTS = {"cases": ",".join(c.name for c in grid.CASES), "sizes": "100M",
            "partitions": "64K,256K,1M,4096000", "credits": "0,4,16,64", "connections": "1,2"}
QUICK = {"cases": "n4k4-1000", "sizes": "16M", "partitions": "1M,4096000", "credits": "0,4",
         "connections": "2"}
# Testbed creation and teardown, the idle check: not in bench.collective's estimate.
SETUP_S, SETUP_PER_HOST_S = 3.0, 0.25


@dataclass
class Job:
    """One configuration: a row of a case on its own testbed."""

    case: grid.Case
    spec: grid.RowSpec
    rate_mbit: float
    estimate_s: float = 0.0
    status: str = "pending"  # pending | ok | failed | skipped
    error: str = ""
    elapsed_s: float = 0.0
    info: dict = field(default_factory=dict)

    def config(self) -> crun.Config:
        c = self.case
        if self.spec.system == "gloo":
            return crun.Config("gloo", c.n, self.rate_mbit, c.n)
        return crun.Config("byteps", c.n, self.rate_mbit, c.hosts, c.k, c.placement, c.k_label)

    @property
    def slug(self) -> str:
        return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in self.spec.label)

    def to_json(self) -> dict:
        return {"case": self.case.name, "kind": self.spec.kind, "label": self.spec.label,
                "env": dict(self.spec.env), "rate_mbit": self.rate_mbit,
                "hosts": self.config().hosts, "status": self.status, "error": self.error,
                "estimate_s": round(self.estimate_s, 1), "elapsed_s": round(self.elapsed_s, 1),
                **self.info}


# --------------------------------------------------------------------------------------------
# Plan


@functools.lru_cache(maxsize=None)
def _estimate(system: str, n: int, k: int, placement: str, rate: float, sizes: tuple,
              iters: tuple, warmup: int, part: int, conns: int) -> float:
    cfg = crun.Config(system, n, rate, 0, k, placement)
    env = {"BYTEPS_PARTITION_BYTES": str(part), "BYTEPS_CONNECTIONS_PER_PEER": str(conns)}
    return crun.estimate(cfg, list(sizes), list(iters), warmup, env)


def estimate_job(job: Job, sizes: Sequence[int], iters: Sequence[int], warmup: int) -> float:
    """bench.collective's estimate (the credit does not enter it) plus the testbed's cost."""
    cfg = job.config()
    p = job.spec.point
    part = p.partition_bytes if p else model.DEFAULT_PARTITION_BYTES
    conns = p.connections if p else model.DEFAULT_CONNECTIONS_PER_PEER
    run_s = _estimate(cfg.system, cfg.n, cfg.k or 0, cfg.placement, cfg.rate_mbit, tuple(sizes),
                      tuple(iters), warmup, part, conns)
    return run_s + SETUP_S + SETUP_PER_HOST_S * cfg.hosts


def build_plan(cases: Sequence[grid.Case], points: Sequence[grid.Point], sizes: Sequence[int],
               iters: Sequence[int], args: argparse.Namespace,
               autotune_reason: Optional[str]) -> list[Job]:
    plan = []
    for case in cases:
        rate = case.used_rate(args.rate_budget)
        for spec in grid.row_specs(points, autotune_reason):
            job = Job(case, spec, rate)
            if spec.skip_reason:
                job.status, job.error = "skipped", spec.skip_reason
            else:
                job.estimate_s = estimate_job(job, sizes, iters, args.warmup)
            plan.append(job)
    return plan


def core_info() -> str:
    """``byteps-core info`` output ("" when it cannot run)."""
    from tools.testbed.job import run_job  # noqa: F401 - puts python/ on sys.path
    from byteps.launcher import corebin

    try:
        core = corebin.find_core_binary(None)
        res = subprocess.run([core, "info"], capture_output=True, text=True, timeout=30)
        return res.stdout + res.stderr
    except Exception as err:  # noqa: BLE001 - no info: autotune counts as missing
        print(f"sweep: byteps-core info failed: {err}", file=sys.stderr)
        return ""


# --------------------------------------------------------------------------------------------
# Running


def run_one(job: Job, idx: int, sizes: list[int], iters: list[int], args: argparse.Namespace,
            raw: Path) -> dict[int, dict]:
    """Runs one configuration on a fresh testbed; returns {bytes: {time_s, iters}}."""
    from tools.testbed import Testbed

    cfg = job.config()
    opts = argparse.Namespace(warmup=args.warmup, verbose=args.verbose, timing="barrier",
                              byteps_env=dict(job.spec.env), byteps_job_env={})
    out = raw / job.case.name / job.slug
    out.mkdir(parents=True, exist_ok=True)
    if args.wait_idle > 0:
        busy, waited = crun.wait_until_idle(args.wait_idle, args.idle_threshold)
        job.info.update(busy_pct_before=round(busy, 1), waited_for_idle_s=round(waited, 1))
    with Testbed(cfg.hosts, rate_mbit=cfg.rate_mbit,
                 prefix=f"bpsts{os.getpid() % 100000}x{idx}") as tb:
        with crun.CpuMonitor(tb.namespaces) as cpu:
            measured = crun.RUNNERS[cfg.system](tb, cfg, sizes, iters, opts, out,
                                                timeout=max(120.0, 4 * job.estimate_s + 60))
    job.info["cpu"] = cpu.result
    if cfg.system == "byteps":
        job.info.update(grid.reported_settings(_bench_json(out, cfg.tag),
                                               _read(out / f"{cfg.tag}.log")))
    return measured


def _read(path: Path) -> str:
    return path.read_text(errors="replace") if path.exists() else ""


def _bench_json(out: Path, tag: str) -> Optional[dict]:
    """The JSON of the (first) ``byteps-core bench`` job of a configuration, if it wrote one."""
    try:
        return json.loads((out / f"{tag}_0.json").read_text())
    except (OSError, ValueError):
        return None


def job_rows(job: Job, measured: dict[int, dict], sizes: Sequence[int]) -> list[dict]:
    rows = []
    for m in sizes:
        got = measured.get(m, {})
        status = job.status if job.status != "ok" or got.get("time_s") else "failed"
        reason = job.error if job.status != "ok" else ("" if got.get("time_s") else "no result")
        rows.append(grid.measurement(job.case, job.spec, job.rate_mbit, m, got.get("time_s"),
                                     got.get("iters"), status, reason))
        rows[-1].update({k: v for k, v in job.info.items() if k in grid.REPORTED_KEYS})
    return rows


def write_outputs(out: Path, meta: dict, cases: Sequence[grid.Case], plan: Sequence[Job],
                  rows: list[dict], budget: float) -> None:
    doc = {"meta": {**meta, "complete": all(j.status != "pending" for j in plan)},
           "cases": [{"name": c.name, "n": c.n, "k": c.k, "placement": c.placement,
                      "hosts": c.hosts, "requested_rate_mbit": c.rate_mbit,
                      "rate_mbit": c.used_rate(budget)} for c in cases],
           "configs": [j.to_json() for j in plan],
           "rows": grid.annotate(rows, meta["tolerance"])}
    doc["summary"] = grid.summary_rows(rows, meta["tolerance"])
    tmp = out / ".results.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out / "results.json")
    (out / "results.md").write_text(grid.markdown_report(doc))


def print_plan(plan: Sequence[Job], cases: Sequence[grid.Case], points: Sequence[grid.Point],
               sizes: Sequence[int], iters: Sequence[int], budget: float) -> None:
    runnable = [j for j in plan if j.status == "pending"]
    total = sum(j.estimate_s for j in runnable)
    print(f"byteps sweep: {len(cases)} case(s) x (gloo, defaults, autotune, {len(points)} grid "
          f"points) = {len(runnable)} configurations to run, sizes "
          f"{','.join(model.format_size(m) for m in sizes)} (iterations {list(iters)}), "
          f"estimated {model.format_duration(total)}", flush=True)
    for c in cases:
        rate = c.used_rate(budget)
        est = sum(j.estimate_s for j in runnable if j.case is c)
        lowered = f" (requested {c.rate_mbit:g}: CPU budget)" if rate < c.rate_mbit else ""
        print(f"  {c.name:<13} n={c.n} k={c.k} {c.placement:<9} {c.hosts:>2} hosts at "
              f"{rate:g} Mbit/s{lowered}  ~{model.format_duration(est)}", flush=True)
    for j in plan:
        if j.status == "skipped":
            print(f"  skipped: {j.case.name} {j.spec.label}: {j.error}", flush=True)


def run_plan(plan: list[Job], sizes: list[int], iters: list[int], args: argparse.Namespace,
             out: Path, meta: dict, cases: Sequence[grid.Case]) -> list[dict]:
    rows: list[dict] = []
    for j in plan:
        if j.status == "skipped":
            rows += job_rows(j, {}, sizes)
    start = time.monotonic()
    runnable = [j for j in plan if j.status == "pending"]
    try:
        with Progress(len(runnable), "sweep") as progress:
            for idx, job in enumerate(runnable):
                elapsed = time.monotonic() - start
                if args.max_minutes and elapsed >= 60 * args.max_minutes:
                    for j in runnable[idx:]:
                        j.status, j.error = "skipped", f"--max-minutes {args.max_minutes:g} spent"
                        rows += job_rows(j, {}, sizes)
                    print(f"time budget of {args.max_minutes:g} min spent: "
                          f"{len(runnable) - idx} configurations not started", flush=True)
                    break
                progress.step(f"{job.case.name} {job.spec.label}")
                left = sum(j.estimate_s for j in runnable[idx:])
                print(f"[{idx + 1}/{len(runnable)}] {job.case.name} {job.spec.label} on "
                      f"{job.config().hosts} hosts at {job.rate_mbit:g} Mbit/s (elapsed "
                      f"{model.format_duration(elapsed)}, ~{model.format_duration(left)} left)",
                      flush=True)
                t0 = time.monotonic()
                try:
                    measured = run_one(job, idx, sizes, iters, args, out / "raw")
                    job.status = "ok"
                except Exception as err:  # noqa: BLE001 - record it, go on with the next one
                    job.status, job.error, measured = "failed", str(err), {}
                    print(f"    FAILED: {crun._tail(str(err), 15)}", flush=True)
                job.elapsed_s = time.monotonic() - t0
                new = job_rows(job, measured, sizes)
                rows += new
                for r in new:
                    if r["time_s"]:
                        print(f"    {r['size']:>5}: {r['time_s']:.4f} s, {r['pct_model']:.1f} % of "
                              f"model ({job.elapsed_s:.0f} s)", flush=True)
                write_outputs(out, meta, cases, plan, rows, args.rate_budget)
    finally:
        meta["elapsed_s"] = round(time.monotonic() - start, 1)
        write_outputs(out, meta, cases, plan, rows, args.rate_budget)
    return rows


# --------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python3 -m bench.sweep.run",
                                 description="Grid search of byteps settings on the emulated "
                                             "cluster, next to the defaults, autotune and gloo.")
    ap.add_argument("--quick", action="store_true",
                    help="preset: case n4k4-1000, size 16M, partitions 1M,4096000, credits "
                         "0,4, connections 2 (explicit options still win)")
    ap.add_argument("--cases", help=f"comma-separated (default all: {DEFAULTS['cases']})")
    ap.add_argument("--sizes", help=f"tensor sizes, K/M/G binary (default {DEFAULTS['sizes']})")
    ap.add_argument("--partitions", help=f"BYTEPS_PARTITION_BYTES values "
                                         f"(default {DEFAULTS['partitions']})")
    ap.add_argument("--credits", help=f"BYTEPS_SCHEDULING_CREDIT values, 0 = no cap "
                                      f"(default {DEFAULTS['credits']})")
    ap.add_argument("--connections", help=f"BYTEPS_CONNECTIONS_PER_PEER values "
                                          f"(default {DEFAULTS['connections']})")
    ap.add_argument("--out", default=str(REPO / "bench-results" / "sweep"))
    ap.add_argument("--max-minutes", type=float, default=0, metavar="M",
                    help="start no configuration after M minutes (0 = no limit)")
    ap.add_argument("--iters", type=int, default=None,
                    help="timed iterations per size (default clamp(512M/size, 5, 50))")
    ap.add_argument("--warmup", type=int, default=1, help="untimed iterations per size")
    ap.add_argument("--rate-budget", type=float, default=12000, metavar="MBIT",
                    help="cap on hosts x rate of one testbed (default 12000; 0 = no cap)")
    ap.add_argument("--tolerance", type=float, default=grid.TOLERANCE,
                    help="'within' threshold: t_row <= (1 + T) t_best (default 0.05)")
    ap.add_argument("--wait-idle", type=float, default=120, metavar="S",
                    help="wait up to S s before each configuration for the machine to be idle")
    ap.add_argument("--idle-threshold", type=float, default=25, metavar="PCT")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its estimate")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo every process's output")
    args = ap.parse_args(argv)
    preset = QUICK if args.quick else DEFAULTS
    for key in DEFAULTS:
        if getattr(args, key) is None:
            setattr(args, key, preset.get(key, DEFAULTS[key]))
    try:
        args.cases = grid.select_cases(crun.parse_list(args.cases))
        args.sizes = sorted(set(model.parse_size(s) for s in crun.parse_list(args.sizes)))
        args.partitions = [model.parse_size(s) for s in crun.parse_list(args.partitions)]
        args.credits = crun.parse_list(args.credits, int)
        args.connections = crun.parse_list(args.connections, int)
    except ValueError as err:
        ap.error(str(err))
    if not (args.cases and args.sizes and args.partitions and args.credits and args.connections):
        ap.error("--cases, --sizes, --partitions, --credits and --connections need a value each")
    if any(p < 4 for p in args.partitions) or any(c < 0 for c in args.credits) \
            or any(not 1 <= c <= 16 for c in args.connections):
        ap.error("partitions must be >= 4 bytes, credits >= 0, connections 1..16")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    sizes = args.sizes
    iters = [args.iters or model.iterations(m) for m in sizes]
    points = grid.expand_grid(args.partitions, args.credits, args.connections)
    reason = grid.autotune_skip_reason(core_info())
    plan = build_plan(args.cases, points, sizes, iters, args, reason)
    print_plan(plan, args.cases, points, sizes, iters, args.rate_budget)
    if args.dry_run:
        return 0
    from tools.testbed import Testbed
    ok, why = Testbed.available()
    if not ok:
        print(f"sweep: no emulated cluster here: {why}", file=sys.stderr)
        return 2
    removed = grid.strip_byteps_environment(os.environ)
    if removed:
        print(f"sweep: removed from the environment: {', '.join(removed)}", flush=True)
    out = Path(args.out)
    (out / "raw").mkdir(parents=True, exist_ok=True)
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": "python3 -m bench.sweep.run "
                       + " ".join(argv if argv is not None else sys.argv[1:]),
            "sizes": sizes, "iters": iters, "warmup": args.warmup,
            "partitions": args.partitions, "credits": args.credits,
            "connections": args.connections, "rate_budget_mbit": args.rate_budget,
            "tolerance": args.tolerance, "max_minutes": args.max_minutes,
            "autotune": reason or "available", "removed_env": removed,
            "cpus": os.cpu_count()}
    start = time.monotonic()
    rows = run_plan(plan, sizes, iters, args, out, meta, args.cases)
    for case in args.cases:
        case_rows = grid.grid_table_rows(rows, case.name, args.tolerance)
        print(f"\n{case.name} at {case.used_rate(args.rate_budget):g} Mbit/s (* = best):")
        print(model.format_table(case_rows, grid.GRID_COLUMNS))
    print("\nsummary:")
    print(grid.summary_table(rows, args.tolerance))
    print(f"results: {out / 'results.json'}, {out / 'results.md'} "
          f"({model.format_duration(time.monotonic() - start)})")
    failed = [f"{j.case.name} {j.spec.label}" for j in plan if j.status == "failed"]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
