"""What the worker's timeline (BYTEPS_TRACE_ON, docs/tracing.md) costs: many small push_pulls with
tracing off and on, interleaved in one run on this machine::

    /usr/bin/python3 -m bench.trace.run [--rounds 5] [--tensors 1000] [--iters 30]
                                          [--out bench-results/trace.json]

Shape: 1 worker + 1 server on this host (``bpsrun -n 1 -s 1 --force-distributed -- byteps-core
bench --tensors N --tensor-bytes 4096``), defaults otherwise. The "on" rows trace every step of
every tensor (start step 1, end step past the run: the recorder records throughout and writes at
shutdown, its worst case). Each round runs off and on once, alternating which goes first; a figure
is the median over rounds of each job's median time per tensor, and the ratio on/off is the
median of the rounds' ratios. Every job has a deadline (``--timeout``); exit status 1 when one failed.
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

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "python" / "byteps" / "_bin" / "byteps-core"


def job(traced: bool, tensors: int, iters: int, timeout: float) -> float:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BYTEPS_", "DMLC_", "PS_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "python"), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as d:
        if traced:
            env.update({"BYTEPS_TRACE_ON": "1", "BYTEPS_TRACE_DIR": str(Path(d) / "trace"),
                        "BYTEPS_TRACE_START_STEP": "1", "BYTEPS_TRACE_END_STEP": "1000000"})
        out = Path(d) / "bench.json"
        cmd = [sys.executable, "-m", "byteps.launcher.bpsrun", "--timeout", str(int(timeout)), "-n", "1", "-s", "1",
               "--force-distributed", "--", str(CORE), "bench", "--tensors", str(tensors), "--tensor-bytes", "4096",
               "--iters", str(iters), "--json", str(out)]
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout + 30)
        if r.returncode != 0 or not out.exists():
            raise RuntimeError(f"{' '.join(cmd)} failed (rc {r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-3000:]}")
        if traced and not list((Path(d) / "trace").glob("worker0/0/comm.json")):  # bpsrun: <dir>/worker<i>
            raise RuntimeError("the traced job wrote no timeline")
        s = json.loads(out.read_text())
        return float(s["per_tensor_us_median"] if "per_tensor_us_median" in s else s["per_tensor_us"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--tensors", type=int, default=1000)
    p.add_argument("--iters", type=int, default=30)
    p.add_argument("--timeout", type=float, default=300)
    p.add_argument("--out", type=Path, default=ROOT / "bench-results" / "trace.json")
    a = p.parse_args(argv)
    if not CORE.exists():
        print(f"no {CORE}: run scripts/build.sh first", file=sys.stderr)
        return 1
    off, on, ratios = [], [], []
    for r in range(a.rounds):
        order = [False, True] if r % 2 == 0 else [True, False]
        got = {}
        try:
            for traced in order:
                got[traced] = job(traced, a.tensors, a.iters, a.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"# round {r + 1}: {e}", file=sys.stderr)
            return 1
        off.append(got[False])
        on.append(got[True])
        ratios.append(got[True] / got[False])
        print(f"# round {r + 1} of {a.rounds}: off {got[False]:.2f} us, on {got[True]:.2f} us per tensor", file=sys.stderr)
    result = {"tensors": a.tensors, "tensor_bytes": 4096, "iters": a.iters, "rounds": a.rounds,
              "off_us_per_tensor": statistics.median(off), "on_us_per_tensor": statistics.median(on),
              "on_over_off": statistics.median(ratios)}
    print(f"# {a.tensors} x 4 KiB per iteration, 1 worker + 1 server, medians of {a.rounds} rounds")
    print(f"{'tracing':>8} {'us/tensor':>10}")
    print(f"{'off':>8} {result['off_us_per_tensor']:>10.2f}")
    print(f"{'on':>8} {result['on_us_per_tensor']:>10.2f}")
    print(f"# on/off: {result['on_over_off']:.3f} (median of the rounds' ratios)")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=2) + "\n")
    print("JSON " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
