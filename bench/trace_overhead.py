"""What the timeline costs: model-shaped training on the emulated cluster with BYTEPS_TRACE_ON=1
and without, alternating in one run, medians compared.

    python3 -m bench.trace_overhead [--model resnet50] [--n 4] [--rate 1000] [--iters 8]
        [--warmup 16] [--repeats 3] [--out bench-results/trace_overhead]

Each run is bench.model_shaped's workload (default settings: nothing set but the trace) with n
workers and n server hosts. The traced runs record every step (BYTEPS_TRACE_START_STEP=1,
BYTEPS_TRACE_END_STEP above the last), so the figure is the cost while recording, not the cost
of the untraced steps outside the window. Every worker writes to a folder of its own (the hosts
of the emulation share one file system), and the traced runs' files are checked to exist.
Prints a table and writes DIR/trace_overhead.json. The issue's target: traced throughput within
5 % of untraced.
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

MODES = ("off", "on")


def traced_argv(argv: list[str], trace_dir: Path) -> list[str]:
    """argv run through a shell that gives each worker its own BYTEPS_TRACE_DIR."""
    line = " ".join(shlex.quote(a) for a in argv)
    return ["/bin/sh", "-c", f'BYTEPS_TRACE_DIR={shlex.quote(str(trace_dir))}/worker_$DMLC_WORKER_ID exec {line}']


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
    ap.add_argument("--out", default="bench-results/trace_overhead")
    args = ap.parse_args(argv)
    if args.n < 2 or args.repeats < 1 or args.iters < 1:
        ap.error("need --n >= 2, --repeats >= 1, --iters >= 1")
    ok, why = Testbed.available()
    if not ok:
        print(f"trace_overhead: no emulated cluster here: {why}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # run_one's options (bench.model_shaped.run_testbed): default settings, no tuning.
    job = argparse.Namespace(iters=args.iters, warmup=args.warmup, rate=args.rate, credit=16, defaults=True,
                             no_tuned=False, time_scale=args.time_scale, shrink=args.shrink, timeout=args.timeout)
    runs = []
    for r in range(args.repeats):
        for mode in MODES if r % 2 == 0 else MODES[::-1]:
            print(f"[run {r + 1}/{args.repeats}] trace {mode} ...", flush=True)
            with tempfile.TemporaryDirectory(prefix="bps-trace-") as tmp:
                env, wrap = {}, None
                if mode == "on":
                    steps = args.warmup + args.iters + 10
                    env = {"BYTEPS_TRACE_ON": "1", "BYTEPS_TRACE_START_STEP": "1", "BYTEPS_TRACE_END_STEP": str(steps)}
                    wrap = lambda a, d=Path(tmp): traced_argv(a, d)  # noqa: E731
                res = run_one(args.model, args.n, "byteps", job, "n", extra_env=env, wrap_argv=wrap)
                files = sorted(Path(tmp).glob("worker_*/*/comm.json"))
                res.update({"mode": mode, "trace_files": len(files),
                            "trace_bytes": sum(f.stat().st_size for f in files)})
            runs.append(res)
            print(f"    {res.get('img_per_sec', res.get('error'))} img/s, {res['trace_files']} trace file(s)", flush=True)
            if "img_per_sec" not in res:
                print(json.dumps(res, indent=1), file=sys.stderr)
                return 1
            if mode == "on" and res["trace_files"] != args.n:
                print(f"trace_overhead: {res['trace_files']} trace files, expected {args.n}", file=sys.stderr)
                return 1
    med = {m: statistics.median(x["img_per_sec"] for x in runs if x["mode"] == m) for m in MODES}
    result = {"model": args.model, "n": args.n, "rate_mbit": args.rate, "iters": args.iters, "warmup": args.warmup,
              "runs": runs, "median_img_per_sec": med, "on_over_off": med["on"] / med["off"]}
    (out / "trace_overhead.json").write_text(json.dumps(result, indent=1))
    print(f"\n{'trace':6} {'img/s (median)':>15} {'runs':>30}")
    for m in MODES:
        each = ", ".join(f"{x['img_per_sec']:.2f}" for x in runs if x["mode"] == m)
        print(f"{m:6} {med[m]:15.2f} {each:>30}")
    print(f"traced / untraced: {med['on'] / med['off']:.3f} (target >= 0.95)")
    print(f"JSON in {out / 'trace_overhead.json'}")
    print("RESULT " + json.dumps({k: v for k, v in result.items() if k != "runs"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
