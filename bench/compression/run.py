"""Gradient compression, the evidence of issue 32, one command::

    /usr/bin/python3 -m bench.compression.run                 # both parts on the emulated cluster
    /usr/bin/python3 -m bench.compression.run --parts digits  # the digits part only
    /usr/bin/python3 -m bench.compression.run --local ...     # loopback bpsrun, no namespaces
        [--compressors none,fp16,onebit,topk,randomk,dithering] [--n 4] [--k 4] [--rate 100]
        [--epochs 60] [--iters 4] [--warmup 1] [--out bench-results/compression]

Run from the repository root, as root (network namespaces, tools/testbed) unless ``--local``.

* **digits** (the main job's model and data, examples/pytorch/train_digits.py): one job per
  compressor, n workers and k servers on hosts of their own with links of ``--rate`` Mbit/s
  (the testbed's "separate" placement), the same seeds and data.  Every tensor of that model is
  under 64 KiB, the default BYTEPS_MIN_COMPRESS_BYTES, so these jobs set it to 0 (printed).
  Per run: final test accuracy, the accuracy after each epoch against the training time so far
  (training steps only, evaluation excluded), the mean iteration (optimizer step) time, and the
  payload bytes worker 0 pushes and pulls per iteration (its metrics endpoint, docs/metrics.md,
  scraped before the first and after the last step: gradients only, plus the declarations the
  first step sends).  Time to target: the first epoch whose accuracy reaches the uncompressed
  run's final accuracy minus 1 point.
* **vgg16** (bench/model_shaped: VGG-16's real gradient sizes, replayed compute dilated to the
  link rate): byteps at n workers, k servers, ``--rate`` with no compression and with onebit
  (scaling, error feedback: ``Compression.named("onebit")``), next to the replayed compute
  alone (the workload's "compute" mode: the same replay with no communication).  Reported:
  iteration times, the speedup of onebit over uncompressed and the bound on it, uncompressed
  time / compute time.

Output (``--out``): compression.json (rewritten after every run), compression.png (accuracy
against training time, one line per compressor; needs matplotlib) and the tables on stdout.
Each run's output goes to raw/<part>_<name>.log.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.compression import report  # noqa: E402
from bench.model_shaped import run_testbed  # noqa: E402

COMPRESSORS = ("none", "fp16", "onebit", "topk", "randomk", "dithering")
DIGITS = REPO / "examples" / "pytorch" / "train_digits.py"
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parts", default="digits,vgg16", help="digits, vgg16 or both (comma-separated)")
    ap.add_argument("--compressors", default=",".join(COMPRESSORS), help="digits part (none is always run first)")
    ap.add_argument("--local", action="store_true", help="loopback bpsrun on this machine instead of the "
                                                         "emulated cluster (no shaped links)")
    ap.add_argument("--n", type=int, default=4, help="workers")
    ap.add_argument("--k", type=int, default=4, help="servers")
    ap.add_argument("--rate", type=int, default=100, help="Mbit/s per host, both directions (testbed)")
    ap.add_argument("--epochs", type=int, default=60, help="digits epochs (60: at 1 %% density the error-feedback compressors need more steps than the main job's 20 epochs give them; docs/benchmarks.md)")
    ap.add_argument("--seed", type=int, default=0, help="digits seed (model init and shuffling)")
    ap.add_argument("--iters", type=int, default=4, help="vgg16 timed iterations")
    ap.add_argument("--warmup", type=int, default=1, help="vgg16 untimed iterations first")
    ap.add_argument("--credit", type=int, default=16, help="vgg16: BYTEPS_SCHEDULING_CREDIT")
    ap.add_argument("--vgg-compression", default="onebit", help="vgg16: the compressor next to none")
    ap.add_argument("--timeout", type=float, default=1800, help="per job, seconds")
    ap.add_argument("--out", default="bench-results/compression")
    ap.add_argument("--time-scale", type=float, default=1.0, help="vgg16, smoke tests only")
    ap.add_argument("--shrink", type=int, default=1, help="vgg16, smoke tests only")
    args = ap.parse_args(argv)
    args.parts = [p for p in args.parts.split(",") if p]
    if not args.parts or any(p not in ("digits", "vgg16") for p in args.parts):
        ap.error(f"--parts: digits and/or vgg16, got {','.join(args.parts)}")
    names = [c for c in args.compressors.split(",") if c]
    if any(c not in COMPRESSORS for c in names):
        ap.error(f"--compressors: each one of {', '.join(COMPRESSORS)}; got {args.compressors}")
    args.compressors = ["none"] + [c for c in names if c != "none"]  # none first: the target needs it
    if args.vgg_compression not in COMPRESSORS[1:]:
        ap.error(f"--vgg-compression: one of {', '.join(COMPRESSORS[1:])}")
    if args.n < 1 or args.k < 1 or args.epochs < 1 or args.iters < 1 or args.rate < 1:
        ap.error("--n, --k, --epochs, --iters and --rate must be at least 1")
    # What run_testbed's workload_argv / workload_env read.
    args.rate_mbit, args.defaults, args.no_tuned = args.rate, False, False
    return args


# --------------------------------------------------------------------------------------------
# One job: on the emulated cluster or through bpsrun


def launch(argv: list[str], env: dict[str, str], args: argparse.Namespace, log: Path) -> tuple[int, str]:
    """Runs ``argv`` as every worker of an n-worker, k-server job; returns (exit code, worker 0's
    output).  The whole output goes to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    if args.local:
        full = {**os.environ, **env, "PYTHONUNBUFFERED": "1"}
        cmd = [PYTHON, "-m", "byteps.launcher.bpsrun", "-n", str(args.n), "-s", str(args.k), "--timeout",
               str(int(args.timeout)), "--", *argv]
        try:
            proc = subprocess.run(cmd, env=full, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, timeout=args.timeout + 60)
            rc, out = proc.returncode, proc.stdout
        except subprocess.TimeoutExpired as err:
            rc, out = 124, (err.stdout or b"").decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        log.write_text(out)
        return rc, out
    from tools.testbed.job import hosts_needed, run_job  # noqa: PLC0415
    from tools.testbed.netns import Testbed  # noqa: PLC0415

    with Testbed(hosts_needed(args.n, args.k, "separate"), rate_mbit=args.rate) as tb:
        res = run_job(tb, args.n, args.k, argv, placement="separate", env=env, timeout=args.timeout, echo=False)
    log.write_text("".join(res.transcript))
    return res.returncode, res.output("worker:0")


def result_of(rc: int, out: str) -> dict:
    """The RESULT record in ``out``, or an error record with the output's last lines."""
    for line in out.splitlines():
        if "RESULT {" in line:
            r = json.loads(line.split("RESULT ", 1)[1])
            r["returncode"] = rc
            return r
    tail = [line for line in out.splitlines() if line.strip()][-6:]
    return {"error": f"exit code {rc}, no RESULT line", "tail": "\n".join(tail)}


# --------------------------------------------------------------------------------------------
# The two parts


def digits_run(name: str, args: argparse.Namespace, raw: Path) -> dict:
    argv = [PYTHON, str(DIGITS), "--epochs", str(args.epochs), "--seed", str(args.seed), "--compression", name,
            "--wire-bytes"]
    env = {"BYTEPS_MIN_COMPRESS_BYTES": "0", "OMP_NUM_THREADS": "1", "BYTEPS_PROGRESS": "0",
           "PYTHONPATH": f"{REPO / 'python'}:{REPO}", "BYTEPS_TIMEOUT": "600"}
    r = result_of(*launch(argv, env, args, raw / f"digits_{name}.log"))
    r["compressor"] = name
    return r


def vgg_run(mode: str, compression: str, args: argparse.Namespace, raw: Path) -> dict:
    args.compression = compression
    argv = run_testbed.workload_argv("vgg16", mode, args)
    argv[0] = PYTHON
    env = run_testbed.workload_env(args)
    label = "compute" if mode == "compute" else compression
    r = result_of(*launch(argv, env, args, raw / f"vgg16_{label}.log"))
    r["label"] = label
    return r


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    if not args.local:
        from tools.testbed.netns import Testbed  # noqa: PLC0415

        ok, why = Testbed.available()
        if not ok:
            print(f"compression: cannot build the emulated cluster: {why} (use --local for loopback bpsrun)",
                  file=sys.stderr)
            return 2
    out = Path(args.out)
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    where = ("local: bpsrun on loopback, no shaped links" if args.local else
             f"emulated cluster: {args.n} worker hosts + {args.k} server hosts, {args.rate} Mbit/s links")
    doc = {"setup": {"where": where, "local": args.local, "workers": args.n, "servers": args.k,
                     "rate_mbit": None if args.local else args.rate, "epochs": args.epochs, "seed": args.seed,
                     "min_compress_bytes_digits": 0, "vgg_iters": args.iters, "vgg_warmup": args.warmup,
                     "vgg_compression": args.vgg_compression, "time_scale": args.time_scale,
                     "shrink": args.shrink},
           "digits": [], "vgg16": []}
    path = out / "compression.json"
    t0 = time.monotonic()
    print(f"compression benchmark, {where}", flush=True)

    def note(text: str) -> None:
        print(f"[{time.monotonic() - t0:6.0f}s] {text}", flush=True)

    if "digits" in args.parts:
        print("digits: every tensor of the model is under 64 KiB (the largest 32 KiB), below the default "
              "BYTEPS_MIN_COMPRESS_BYTES; these runs set BYTEPS_MIN_COMPRESS_BYTES=0", flush=True)
        for name in args.compressors:
            note(f"digits {name} ...")
            r = digits_run(name, args, raw)
            doc["digits"].append(r)
            path.write_text(json.dumps(doc, indent=1))
            note(f"  -> {r.get('accuracy', r.get('error'))}")
    if "vgg16" in args.parts:
        for mode, compression in (("compute", "none"), ("byteps", "none"), ("byteps", args.vgg_compression)):
            note(f"vgg16 {mode} {compression} ...")
            r = vgg_run(mode, compression, args, raw)
            doc["vgg16"].append(r)
            path.write_text(json.dumps(doc, indent=1))
            note(f"  -> {r.get('iter_time_s', r.get('error'))}")
    report.summarise(doc)
    path.write_text(json.dumps(doc, indent=1))
    print()
    print(report.tables(doc))
    png = report.plot(doc, out / "compression.png")
    print(f"\nJSON in {path}" + (f", plot in {png}" if png else ""))
    failed = [r for r in doc["digits"] + doc["vgg16"] if "error" in r]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
