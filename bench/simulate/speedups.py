"""Predicted against measured speedup over gloo's ring all-reduce, per bench/collective case.

    python3 -m bench.simulate.speedups [--out bench-results/simulate] [--json]

For every byteps case of validate.COLLECTIVE_CASES that has a gloo figure at the same n, size and
rate in the same section of docs/benchmarks.md (k = n, k = n/2, colocated, mixed):

* measured speedup  = measured t_gloo / measured t_byteps;
* predicted speedup = the simulator's t_gloo / its t_byteps (validate.collective, the testbed's
  constants), which is what ``byteps plan`` reports as "x over ring";
* ratio = predicted / measured speedup (issue 33's target: within 10 % on every case).

Cases that stay off by more than 10 % are listed in MISSED with the cause; the test
(bench/simulate/test_simulate.py) checks that every other case is within 10 % and that these are
still off, so the list stays true.  Writes speedups.md and speedups.json under --out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

from bench.simulate import validate

TOLERANCE = 0.10

# (n, placement, MiB, Mbit/s) -> why the speedup stays off by more than 10 % (docs/simulator.md
# gives the evidence for each)
_CPU4 = "testbed CPU-bound (8 emulated hosts on 2 vCPUs, 85-91 % busy)"
_CPU8 = "testbed CPU-bound (16 emulated hosts on 2 vCPUs, 93 % busy)"
MISSED = {
    (4, "k=4", 16, 1000): _CPU4,
    (4, "k=4", 64, 1000): _CPU4,
    (8, "k=8", 16, 750): _CPU8,
    (8, "k=8", 64, 750): _CPU8,
    (8, "k=8", 256, 750): _CPU8,
    (8, "mixed:4", 100, 1000): "testbed CPU-bound (12 emulated hosts on 2 vCPUs; one run)",
}


def speedup_rows(rs: Optional[list[dict]] = None) -> list[dict]:
    """One row per byteps collective case with a gloo figure beside it.  *rs*: validate.rows()'s
    output, to reuse its predictions (default: computed here)."""
    cases = validate.COLLECTIVE_CASES
    if rs is None:
        times = [validate.collective(*c[:4]) for c in cases]
    else:
        times = [r["predicted"] for r in rs if r["bench"] == "collective"]
        if len(times) != len(cases):
            raise ValueError(f"speedup_rows: {len(times)} collective rows for {len(cases)} cases")
    source = lambda c: c[5] if len(c) > 5 else validate.COLLECTIVE
    gloo = {(c[0], c[2], c[3], source(c)): (c[4], t) for c, t in zip(cases, times) if c[1] == "gloo"}
    out = []
    for c, t in zip(cases, times):
        n, placement, mib, mbit, measured = c[:5]
        ref = gloo.get((n, mib, mbit, source(c)))
        if placement == "gloo" or ref is None:
            continue
        measured_speedup, predicted_speedup = ref[0] / measured, ref[1] / t
        ratio = predicted_speedup / measured_speedup
        key = (n, placement, mib, mbit)
        out.append({"case": f"n={n} {placement} {mib} MiB @ {mbit:g} Mbit/s", "n": n, "placement": placement,
                    "mib": mib, "mbit": mbit, "measured_s": measured, "predicted_s": t,
                    "gloo_measured_s": ref[0], "gloo_predicted_s": ref[1],
                    "measured_speedup": measured_speedup, "predicted_speedup": predicted_speedup, "ratio": ratio,
                    "within": abs(ratio - 1) <= TOLERANCE, "cause": MISSED.get(key, ""), "source": source(c)})
    return out


def markdown(rows: list[dict]) -> str:
    lines = ["| case | measured speedup over gloo | predicted | predicted / measured | within 10 % |",
             "|---|---:|---:|---:|---|"]
    for r in rows:
        verdict = "yes" if r["within"] else f"**missed**: {r['cause'] or 'not explained'}"
        lines.append(f"| {r['case']} | {r['measured_speedup']:.3f}x | {r['predicted_speedup']:.3f}x | "
                     f"{r['ratio']:.3f} | {verdict} |")
    ok = sum(r["within"] for r in rows)
    lines += ["", f"{ok} of {len(rows)} cases within 10 %."]
    return "\n".join(lines) + "\n"


def write(rows: list[dict], out: Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "speedups.json").write_text(json.dumps(rows, indent=1) + "\n")
    md = markdown(rows)
    (out / "speedups.md").write_text(md)
    return md


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench-results/simulate"))
    ap.add_argument("--json", action="store_true", help="print the rows as JSON instead of the table")
    args = ap.parse_args(argv)
    rows = speedup_rows()
    md = write(rows, args.out)
    print(json.dumps(rows, indent=1) if args.json else md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
