"""The mixed placement when the CPU machines' NICs are faster than the worker machines': the split
from the start-up probe's measured rates (the default) against the formula's split for equal rates
(every node given the same BYTEPS_NIC_GBPS, which also skips the probe), on the emulated cluster.

    /usr/bin/python3 -m bench.collective.unequal_rates [--n 4] [--k 2] [--rate 1000] \\
        [--cpu-rate 2000] [--size 100M] [--iters 10] [--repeats 3] [--out bench-results/unequal]

n worker hosts at --rate with a colocated server each, k CPU hosts at --cpu-rate; every job is
``byteps-core bench`` (one push_pull of --size per iteration, median time) with default settings
otherwise.  The two placements alternate, --repeats times each, every job on a fresh testbed.
Prints a table and writes unequal_rates.json: each run's median time and the placement the
scheduler logged, the medians' ratio, and the closed forms' prediction for the two splits
(python/byteps/sim/closed_forms.py) at the configured rates.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.testbed.job import run_job  # noqa: E402  (puts the repository's python/ on sys.path)
from tools.testbed.netns import Testbed  # noqa: E402
from tools.progress import track  # noqa: E402

from byteps.launcher import corebin  # noqa: E402
from byteps.sim import closed_forms  # noqa: E402

MODES = ("measured", "formula")


def parse_size(text: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError(f"--size: expected a byte count like 100M, got {text!r}")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def predicted(n: int, k: int, rate: float, cpu_rate: float) -> dict:
    """Communication time per byte of gradient (seconds at 1 byte/s = the worker rate) of each split
    at the real rates: the measured one (optimal for them) and the formula's (equal rates)."""
    best = closed_forms.optimal_split(n, k, cpu_rate / rate, 1.0)
    eq = closed_forms.optimal_split(n, k, 1.0, 1.0)
    formula_time = max(n * eq.cpu_share / (cpu_rate / rate), 1 + (n - 2) * eq.colocated_share)
    return {"measured_split": {"cpu_share": best.cpu_share, "colocated_share": best.colocated_share,
                               "time": best.time},
            "formula_split": {"cpu_share": eq.cpu_share, "colocated_share": eq.colocated_share,
                              "time": formula_time},
            "speedup": formula_time / best.time}


def run_once(mode: str, args, out: Path, run: int) -> dict:
    core = corebin.find_core_binary(None)
    path = out / f"{mode}_{run}.json"
    argv = [core, "bench", "--min-bytes", str(args.size), "--max-bytes", str(args.size),
            "--iters", str(args.iters), "--warmup", "1", "--json", str(path)]
    env = {"BYTEPS_LOG_LEVEL": "INFO"}
    if mode == "formula":
        env["BYTEPS_NIC_GBPS"] = f"{args.rate / 1000:g}"  # every node the same: the formula's split
    with Testbed(args.n + args.k, rate_mbit=args.rate) as tb:
        for h in range(args.n, args.n + args.k):
            tb.set_rate(h, args.cpu_rate)
        res = run_job(tb, args.n, args.n + args.k, argv, placement="mixed", env=env,
                      timeout=args.timeout, echo=False)
    (out / f"{mode}_{run}.log").write_text("".join(res.transcript))
    if not res.ok or not path.exists():
        raise RuntimeError(f"{mode} run {run}: the job failed (rc {res.returncode}); "
                           f"{out / f'{mode}_{run}.log'} has its output")
    sched = res.output("scheduler")
    placements = re.findall(r"\] (?:after the start-up probe: )?(mixed placement: .*)", sched)
    data = json.loads(path.read_text())
    return {"mode": mode, "run": run, "time_s": data["rows"][0]["time_us_median"] / 1e6,
            "placement": placements[-1] if placements else "",
            "probed": "after the start-up probe" in sched}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4, help="worker hosts, each with a colocated server")
    ap.add_argument("--k", type=int, default=2, help="CPU server hosts")
    ap.add_argument("--rate", type=float, default=1000, metavar="MBIT", help="worker hosts' rate")
    ap.add_argument("--cpu-rate", type=float, default=2000, metavar="MBIT", help="CPU hosts' rate")
    ap.add_argument("--size", type=parse_size, default=100 << 20)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--out", default="bench-results/unequal")
    args = ap.parse_args(argv)
    if args.n < 2 or args.k < 1 or args.rate <= 0 or args.cpu_rate <= 0 or args.repeats < 1:
        ap.error("need --n >= 2, --k >= 1, positive rates and --repeats >= 1")
    ok, why = Testbed.available()
    if not ok:
        print(f"unequal_rates: no emulated cluster here: {why}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    runs = []
    order = [(r, mode) for r in range(args.repeats) for mode in MODES]
    for r, mode in track(order, "unequal_rates", lambda rm: f"{rm[1]} split, run {rm[0] + 1}/{args.repeats}"):
        print(f"[run {r + 1}/{args.repeats}] {mode} ...", flush=True)
        runs.append(run_once(mode, args, out, r))
        print(f"    {runs[-1]['time_s']:.4f} s  {runs[-1]['placement']}", flush=True)
    median = {m: statistics.median(x["time_s"] for x in runs if x["mode"] == m) for m in MODES}
    result = {"n": args.n, "k": args.k, "rate_mbit": args.rate, "cpu_rate_mbit": args.cpu_rate,
              "size": args.size, "iters": args.iters, "runs": runs, "median_s": median,
              "formula_over_measured": median["formula"] / median["measured"],
              "predicted": predicted(args.n, args.k, args.rate, args.cpu_rate)}
    (out / "unequal_rates.json").write_text(json.dumps(result, indent=1) + "\n")
    p = result["predicted"]
    print(f"\nn = {args.n} worker hosts at {args.rate:g} Mbit/s, k = {args.k} CPU hosts at "
          f"{args.cpu_rate:g} Mbit/s, {args.size >> 20} MiB, median of {args.repeats}")
    print(f"{'split':<10} {'median s':>9} {'predicted (s per byte x B)':>28}")
    print(f"{'measured':<10} {median['measured']:>9.4f} {p['measured_split']['time']:>28.3f}")
    print(f"{'formula':<10} {median['formula']:>9.4f} {p['formula_split']['time']:>28.3f}")
    print(f"formula / measured: {result['formula_over_measured']:.3f}x (predicted {p['speedup']:.3f}x)")
    print(f"JSON in {out / 'unequal_rates.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
