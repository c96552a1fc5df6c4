"""Runs the model-shaped training comparison on the emulated cluster and prints the table of
docs/benchmarks.md: images/sec of byteps (with priority scheduling), byteps without priority, and
DDP (gloo bucketed all-reduce), n workers + n servers on separate hosts, links shaped to R.

    python3 -m bench.model_shaped.run_testbed [--models vgg16,resnet50] [--n 4,8] \
        [--modes byteps,byteps-nopriority,ddp] [--k n] [--rate 1000] [--iters 6] [--warmup 1] [--out DIR] \
        [--compression NAME]

Each (model, n, k, mode) gets a fresh testbed and one job; rank 0's RESULT line is collected.
``--k`` takes bench.collective.run's server placement tokens (comma-separated; byteps modes
only, DDP runs once per n): "n" (default: n server hosts of their own, the scheduler sharing the
first), "n/2" or a number (that many server hosts), "colocated" (a server on each worker host),
"mixed:K" / "n+K" (a server on each worker host plus K server hosts of their own; K a number,
n or n/2). Results are appended to
DIR/model_shaped.json as they come, so an interrupted run keeps what it measured.
byteps modes run with tuned settings for 1 Gbit/s-class links (docs/benchmarks.md, "Partition
size, connections and credit"): BYTEPS_PARTITION_BYTES=262144, BYTEPS_CONNECTIONS_PER_PEER=1 and
the workload's --credit; with ``--defaults`` they set nothing (what a new user gets).
``--compression NAME`` (none, fp16, onebit, topk, randomk, dithering) compresses the byteps
modes' gradients (the workload's --compression); mode "compute" replays the compute alone.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from bench.collective.model import SEPARATE, parse_k, server_count
from tools.testbed.job import hosts_needed, run_job
from tools.progress import track
from tools.testbed.netns import Testbed

REPO = Path(__file__).resolve().parents[2]
ORIGINAL = {"vgg16": 2.00, "resnet50": 1.44}  # BytePS paper: speedup over Horovod-NCCL, 20 Gbit/s TCP
TUNED = {"BYTEPS_PARTITION_BYTES": "262144", "BYTEPS_CONNECTIONS_PER_PEER": "1"}


def placement_of(token: str, n: int) -> tuple[int, str, str]:
    """(servers, testbed placement, label) of a --k token for n workers."""
    k, placement, label = parse_k(token, n)
    return server_count(n, k, placement), placement, label


def workload_argv(model: str, mode: str, args: argparse.Namespace) -> list[str]:
    """The workers' command for one job (``args``: this module's options)."""
    argv = [sys.executable, "-m", "bench.model_shaped.workload", "--model", model, "--mode", mode,
            "--iters", str(args.iters), "--warmup", str(args.warmup), "--link-gbit", str(args.rate / 1000)]
    if mode.startswith("byteps") and not args.defaults:
        argv += ["--credit", str(args.credit)]
    compression = getattr(args, "compression", "none")
    if compression != "none" and mode.startswith("byteps"):
        argv += ["--compression", compression]
    if args.time_scale != 1.0 or args.shrink != 1:  # smoke runs only: not comparable figures
        argv += ["--time-scale", str(args.time_scale), "--shrink", str(args.shrink)]
    return argv


def workload_env(args: argparse.Namespace) -> dict[str, str]:
    """The settings every process of a job gets (tuned byteps settings unless switched off)."""
    return {**({} if args.no_tuned or args.defaults else TUNED), "OMP_NUM_THREADS": "1",
            "PYTHONPATH": f"{REPO}:{REPO / 'python'}", "BYTEPS_TIMEOUT": "600"}


def run_one(model: str, n: int, mode: str, args: argparse.Namespace, k_token: str = "n",
            extra_env: dict | None = None, wrap_argv=None) -> dict:
    """One job; rank 0's RESULT. extra_env is added to every process's environment and
    wrap_argv(argv) may wrap the workers' command (bench.trace_overhead)."""
    argv = workload_argv(model, mode, args)
    env = {**workload_env(args), "GLOO_SOCKET_IFNAME": "eth0", **(extra_env or {})}
    if wrap_argv is not None:
        argv = wrap_argv(argv)
    servers, placement, _ = placement_of(k_token, n) if mode.startswith("byteps") else (n, SEPARATE, "")
    with Testbed(hosts_needed(n, servers, placement), rate_mbit=args.rate) as tb:
        res = run_job(tb, n, servers, argv, placement=placement, env=env, timeout=args.timeout,
                      echo=False)
    out = res.output("worker:0")
    for line in out.splitlines():
        if "RESULT " in line:
            r = json.loads(line.split("RESULT ", 1)[1])
            r["returncode"] = res.returncode
            return r
    return {"model": model, "mode": mode, "workers": n, "error": f"rc={res.returncode}", "tail": out[-2000:]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="vgg16,resnet50")
    ap.add_argument("--n", default="4,8")
    ap.add_argument("--modes", default="byteps,byteps-nopriority,ddp")
    ap.add_argument("--k", default="n", help="byteps server placements: n, n/2, a number, colocated, "
                                            "mixed:K or n+K (default n)")
    ap.add_argument("--rate", type=int, default=1000, help="Mbit/s per host, both directions")
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--credit", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--out", default="bench-results")
    ap.add_argument("--no-tuned", action="store_true",
                    help="byteps with its default partition size and connections (credit still --credit)")
    ap.add_argument("--defaults", action="store_true",
                    help="byteps with no BYTEPS_* setting at all (start-up and online tuning decide); use "
                         "--warmup 16 so the online tuner has settled before the timed iterations")
    ap.add_argument("--time-scale", type=float, default=1.0, help="smoke tests only")
    ap.add_argument("--shrink", type=int, default=1, help="smoke tests only")
    ap.add_argument("--compression", default="none",
                    choices=("none", "fp16", "onebit", "topk", "randomk", "dithering"),
                    help="gradient compression of the byteps modes (byteps.torch.Compression.named)")
    args = ap.parse_args(argv)
    ks = args.k.split(",")
    for n in (int(x) for x in args.n.split(",")):
        for token in ks:
            try:
                placement_of(token, n)
            except ValueError as err:
                ap.error(f"--k: {err}")
    ok, why = Testbed.available()
    if not ok:
        print(f"model_shaped: cannot build the emulated cluster: {why}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "model_shaped.json"
    rows = []
    t0 = time.monotonic()
    plan = [(model, n, token, mode, placement_of(token, n)[2] if mode.startswith("byteps") else "-")
            for model in args.models.split(",") for n in (int(x) for x in args.n.split(","))
            for i, token in enumerate(ks) for mode in args.modes.split(",")
            if mode.startswith("byteps") or not i]  # DDP does not depend on the servers
    for model, n, token, mode, label in track(plan, "model_shaped", lambda p: f"{p[0]} n={p[1]} k={p[4]} {p[3]}"):
        print(f"[{time.monotonic() - t0:6.0f}s] {model} n={n} k={label} {mode} ...", flush=True)
        r = run_one(model, n, mode, args, token)
        r.update({"model": model, "workers": n, "mode": mode, "rate_mbit": args.rate,
                  "k_label": label, "compression": args.compression if mode.startswith("byteps") else "none"})
        rows.append(r)
        path.write_text(json.dumps(rows, indent=1))
        print(f"         -> {r.get('img_per_sec', r.get('error'))}", flush=True)
    print()
    if args.compression != "none":
        print(f"byteps modes with gradient compression {args.compression}")
    print(f"{'model':9} {'n':>2} {'k':>6} {'byteps':>9} {'no-prio':>9} {'DDP':>9} {'byteps/DDP':>11} {'prio gain':>10} {'paper':>6}")
    for model in args.models.split(","):
        for n, token in ((int(x), t) for x in args.n.split(",") for t in ks):
            label = placement_of(token, n)[2]
            get = {r["mode"]: r.get("img_per_sec") for r in rows if r["model"] == model and r["workers"] == n
                   and r["k_label"] in (label, "-")}
            b, p, d = get.get("byteps"), get.get("byteps-nopriority"), get.get("ddp")
            f = lambda v: f"{v:9.1f}" if v else f"{'-':>9}"
            ratio = f"{b / d:10.2f}x" if b and d else f"{'-':>11}"
            gain = f"{b / p - 1:+9.0%}" if b and p else f"{'-':>10}"
            print(f"{model:9} {n:>2} {label:>6} {f(b)} {f(p)} {f(d)} {ratio} {gain} {ORIGINAL[model]:5.2f}x")
    print(f"\nJSON in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
