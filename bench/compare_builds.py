"""Before/after benchmark of two builds of byteps, interleaved in one run on one machine::

    /usr/bin/python3 -m bench.compare_builds --base /path/to/old/checkout [--new .] [--rounds 5]

Each checkout must be built (``bash scripts/build.sh``; the base needs only the ``byteps_core``
target).  Every round runs, for the base and then the new build (alternating which goes first),
the two core figures of docs/benchmarks.md with ``bpsrun`` on loopback:

* ``loopback``: 1 worker + 1 server, 64 MiB float32 push_pull, algbw (GB/s, higher is better);
* ``small``: 1,000 tensors of 4 KiB per iteration, 1 worker + 1 server, µs per tensor (lower is
  better).

Each job runs the build's own scheduler, server and worker (its ``python/`` on PYTHONPATH).  It
prints a table of medians over the rounds with new/base ratios, and writes the rounds and the
medians as JSON (``--out``, default bench-results/compare_builds.json).  Machines are shared and
noisy: the interleaving puts both builds under the same noise, and the ratio is the figure.
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

REPO = Path(__file__).resolve().parents[1]

CASES = {
    "loopback": (["--min-bytes", "64M", "--max-bytes", "64M", "--iters", "20"], "algbw_GBps", "GB/s", True),
    "small": (["--tensors", "1000", "--tensor-bytes", "4096", "--iters", "30"], "per_tensor_us_median", "us/tensor",
              False),
}


def run_case(checkout: Path, case: str, timeout: float) -> float:
    args, field, _, _ = CASES[case]
    core = checkout / "python" / "byteps" / "_bin" / "byteps-core"
    env = {**os.environ, "PYTHONPATH": str(checkout / "python")}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "byteps.launcher.bpsrun", "--timeout", str(int(timeout)), "-n", "1", "-s", "1",
               "--force-distributed", "--", str(core), "bench", *args, "--json", str(out)]
        proc = subprocess.run(cmd, env=env, cwd=checkout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, timeout=timeout + 30)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"{case} with {checkout} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
        data = json.loads(out.read_text())
    return float(data["rows"][0][field]) if "rows" in data else float(data[field])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, type=Path, help="checkout of the build to compare against")
    ap.add_argument("--new", default=REPO, type=Path, help="checkout of the new build (default: this one)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cases", default="loopback,small")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--out", type=Path, default=REPO / "bench-results" / "compare_builds.json")
    a = ap.parse_args(argv)
    builds = {"base": a.base.resolve(), "new": a.new.resolve()}
    for name, path in builds.items():
        if not (path / "python" / "byteps" / "_bin" / "byteps-core").exists():
            ap.error(f"--{name} {path}: no python/byteps/_bin/byteps-core (build it with scripts/build.sh)")
    cases = a.cases.split(",")
    rounds = []
    with Progress(a.rounds * len(cases) * 2, "compare_builds") as progress:
        for r in range(a.rounds):
            order = ["base", "new"] if r % 2 == 0 else ["new", "base"]
            row = {}
            for case in cases:
                for b in order:
                    progress.step(f"round {r + 1}: {case}, {b} build")
                    row[f"{b}.{case}"] = run_case(builds[b], case, a.timeout)
            rounds.append(row)
            print(f"round {r + 1}: " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(row.items())), flush=True)
    medians = {k: statistics.median(rr[k] for rr in rounds) for k in rounds[0]}
    print(f"\n| case | unit | base (median) | new (median) | new/base | better |")
    print("|---|---|---|---|---|---|")
    summary = {}
    for case in cases:
        _, _, unit, higher = CASES[case]
        base, new = medians[f"base.{case}"], medians[f"new.{case}"]
        ratio = new / base
        summary[case] = {"unit": unit, "base": base, "new": new, "ratio": ratio, "higher_is_better": higher}
        print(f"| {case} | {unit} | {base:.3f} | {new:.3f} | {ratio:.3f} | {'higher' if higher else 'lower'} |")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    result = {"builds": {k: str(v) for k, v in builds.items()}, "rounds": rounds, "summary": summary}
    a.out.write_text(json.dumps(result, indent=1))
    print("JSON " + json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
