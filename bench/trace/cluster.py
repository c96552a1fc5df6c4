"""What observability costs on the emulated cluster: model-shaped training with nothing on, with
the timeline (BYTEPS_TRACE_ON=1), with metrics served and scraped (BYTEPS_METRICS_PORT), and
watched by `byteps top`, in one run, rotating the order, medians compared.

    python3 -m bench.trace.cluster [--model resnet50] [--n 4] [--rate 1000] [--iters 8]
        [--warmup 16] [--repeats 3] [--modes off,trace,metrics,top] [--out bench-results/observability]

Each run is bench.model_shaped's workload (default settings: nothing set but what is measured)
with n workers and n server hosts. "trace" records every step (BYTEPS_TRACE_START_STEP=1,
BYTEPS_TRACE_END_STEP above the last): the cost while recording, not that of the steps outside
the window; each worker writes to a folder of its own (the emulated hosts share one file system)
and the files are checked to exist. "metrics" serves /metrics on every worker and scrapes it every
second from the worker's host (Prometheus scrapes every 15 s by default: this is 15x that), and
checks the scrapes answered. "top" runs `byteps top` (redrawn every second) on worker 0's host for
the whole job and checks it drew the job (the heartbeats carry the nodes' summaries in every mode:
this is the cost of someone watching). Prints a table and writes DIR/observability.json. The issue's
targets: traced throughput within 5 % of "off", metrics within 1 %.
"""
from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

from bench.model_shaped.run_testbed import REPO, run_one
from tools.testbed.netns import Testbed

MODES = ("off", "trace", "metrics", "top")
CORE = REPO / "python" / "byteps" / "_bin" / "byteps-core"
METRICS_PORT = 9464  # each worker is alone on its emulated host

# Scrapes the worker's own endpoint (its host's address: the node binds DMLC_NODE_HOST) every second
# until the worker exits; the answers so far in a file.
SCRAPER = r"""
import os, sys, time, urllib.request
pid, out = int(sys.argv[1]), sys.argv[2]
ok = 0
while True:
    try:
        os.kill(pid, 0)
    except OSError:
        break
    try:
        with urllib.request.urlopen("http://%s:%d/metrics" % (sys.argv[4], int(sys.argv[3])), timeout=2) as r:
            ok += b"byteps_worker_pushed_bytes_total" in r.read()
        with open(out + ".part", "w") as f:  # after each scrape: the job's end may kill this process
            f.write(str(ok))
        os.replace(out + ".part", out)
    except OSError:
        pass
    time.sleep(1)
"""


def wrapped_argv(argv: list[str], mode: str, tmp: Path) -> list[str]:
    """argv run through a shell that sets this mode up for the worker it starts."""
    line = " ".join(shlex.quote(a) for a in argv)
    if mode == "trace":
        return ["/bin/sh", "-c", f'BYTEPS_TRACE_DIR={shlex.quote(str(tmp))}/worker_$DMLC_WORKER_ID exec {line}']
    if mode == "top":  # worker 0's host watches the job with the job's own environment
        top = f"{shlex.quote(str(CORE))} top --interval 1 > {shlex.quote(str(tmp))}/top.txt 2>&1"
        return ["/bin/sh", "-c", f'{line} & pid=$!; if [ "$DMLC_WORKER_ID" = 0 ]; then {top} & watch=$!; fi; '
                                 f'wait $pid; rc=$?; [ -n "$watch" ] && kill $watch; exit $rc']
    scraper = shlex.quote(SCRAPER)
    return ["/bin/sh", "-c",
            f"BYTEPS_METRICS_PORT={METRICS_PORT} {line} & pid=$!; {shlex.quote(sys.executable)} -c {scraper} $pid "
            f"{shlex.quote(str(tmp))}/scrapes_$DMLC_WORKER_ID {METRICS_PORT} $DMLC_NODE_HOST & wait $pid"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="resnet50", help="vgg16 or resnet50 (161 tensors: the per-tensor cost shows)")
    ap.add_argument("--n", type=int, default=4)
    ap.add_argument("--rate", type=int, default=1000, help="Mbit/s per host")
    ap.add_argument("--iters", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--time-scale", type=float, default=1.0, help="smoke tests only")
    ap.add_argument("--shrink", type=int, default=1, help="smoke tests only")
    ap.add_argument("--modes", default=",".join(MODES), help="a comma-separated choice of off, trace, metrics, top")
    ap.add_argument("--out", default="bench-results/observability")
    args = ap.parse_args(argv)
    if args.n < 2 or args.repeats < 1 or args.iters < 1:
        ap.error("need --n >= 2, --repeats >= 1, --iters >= 1")
    ok, why = Testbed.available()
    if not ok:
        print(f"observability: no emulated cluster here: {why}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # run_one's options (bench.model_shaped.run_testbed): default settings, no tuning.
    job = argparse.Namespace(iters=args.iters, warmup=args.warmup, rate=args.rate, credit=16, defaults=True,
                             no_tuned=False, time_scale=args.time_scale, shrink=args.shrink, timeout=args.timeout)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        ap.error(f"--modes: a comma-separated choice of {', '.join(MODES)}")
    runs = []
    for r in range(args.repeats):
        for mode in modes[r % len(modes):] + modes[:r % len(modes)]:  # each mode first in turn
            print(f"[run {r + 1}/{args.repeats}] {mode} ...", flush=True)
            with tempfile.TemporaryDirectory(prefix="bps-obs-") as tmp:
                env = {}
                if mode == "trace":
                    steps = args.warmup + args.iters + 10
                    # The servers trace too (into tmp); each worker's wrapper gives it a folder of its own.
                    env = {"BYTEPS_TRACE_ON": "1", "BYTEPS_TRACE_START_STEP": "1", "BYTEPS_TRACE_END_STEP": str(steps),
                           "BYTEPS_TRACE_DIR": tmp}
                # "metrics": the workers only (their wrapper): servers and the scheduler share hosts here.
                wrap = None if mode == "off" else (lambda a, m=mode, d=Path(tmp): wrapped_argv(a, m, d))
                res = run_one(args.model, args.n, "byteps", job, "n", extra_env=env, wrap_argv=wrap)
                files = sorted(Path(tmp).glob("worker_*/*/comm.json"))
                scrapes = [int(p.read_text() or 0) for p in Path(tmp).glob("scrapes_*")]
                top = Path(tmp, "top.txt").read_text(errors="replace") if Path(tmp, "top.txt").exists() else ""
                res.update({"mode": mode, "trace_files": len(files), "scrapes": scrapes,
                            "top_frames": top.count("byteps top - job ")})
            runs.append(res)
            print(f"    {res.get('img_per_sec', res.get('error'))} img/s", flush=True)
            if "img_per_sec" not in res:
                print(json.dumps(res, indent=1), file=sys.stderr)
                return 1
            if mode == "trace" and res["trace_files"] != args.n:
                print(f"observability: {res['trace_files']} trace files, expected {args.n}", file=sys.stderr)
                return 1
            if mode == "top" and res["top_frames"] < 1:
                print("observability: byteps top drew nothing", file=sys.stderr)
                return 1
            if mode == "metrics" and (len(scrapes) != args.n or min(scrapes) < 1):
                print(f"observability: scrapes answered per worker: {scrapes}", file=sys.stderr)
                return 1
    med = {m: statistics.median(x["img_per_sec"] for x in runs if x["mode"] == m) for m in modes}
    ratios = {f"{m}_over_off": med[m] / med["off"] for m in modes if m != "off" and "off" in med}
    result = {"model": args.model, "n": args.n, "rate_mbit": args.rate, "iters": args.iters, "warmup": args.warmup,
              "runs": runs, "median_img_per_sec": med, **ratios}
    (out / "observability.json").write_text(json.dumps(result, indent=1))
    print(f"\n{'mode':8} {'img/s (median)':>15} {'runs':>30}")
    for m in modes:
        each = ", ".join(f"{x['img_per_sec']:.2f}" for x in runs if x["mode"] == m)
        print(f"{m:8} {med[m]:15.2f} {each:>30}")
    for k, v in ratios.items():
        print(f"{k}: {v:.3f} (target >= {0.95 if k.startswith('trace') else 0.99})")
    print(f"JSON in {out / 'observability.json'}")
    print("RESULT " + json.dumps({k: v for k, v in result.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
