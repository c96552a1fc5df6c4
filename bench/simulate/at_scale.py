"""Predicted speedup of byteps over ring all-reduce at scale, and the seed's setting.

    python3 -m bench.simulate.at_scale [--out bench-results/simulate] [--plots docs/img] [--quick]

Grid: VGG-16, ResNet-50, BERT-large; n = 1..128 machines of 8 GPUs (8..1,024 GPUs); NICs of 10,
25, 100 and 400 Gbit/s; k in {0, n/4, n/2, n} CPU machines (k = 0: a server on every worker
machine; k > 0: the mixed placement; at k = n it is the CPU-only one).  Every figure is one
simulated steady-state iteration (byteps.sim.placements.simulate, the defaults of
byteps.sim.placements.Cluster: TCP goodput 0.956, NVLink-class local reduce, 50 us one-way
latency, the tuner's partition and credit, Horovod's 64 MiB fusion and 5 ms cycle for the ring).
Speedup = ring's iteration time / byteps'.

The seed's setting (BytePS, OSDI'20: 8 V100 per machine, batch 64 per GPU, 20 Gbit/s TCP,
against Horovod with NCCL) is a table of its own, for n = 2..32 machines, with the ring both
hierarchical and flat (one ring through all GPUs) and Horovod's optimizer step waiting for every
gradient (``barrier="step"``) or not.

Writes at_scale.md and at_scale.json under --out, and sim_<model>.png under --plots.
"""

from __future__ import annotations

import argparse
import json
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Optional, Sequence

from byteps.sim import profiles
from byteps.sim.placements import Cluster, simulate
from tools.progress import Progress

MODELS = ("vgg16", "resnet50", "bert-large")
MACHINES = (1, 2, 4, 8, 16, 32, 64, 128)
RATES = (10, 25, 100, 400)
SEED = {"vgg16": 2.00, "resnet50": 1.44}  # the seed's speedups over Horovod-NCCL at 20 Gbit/s
SEED_MACHINES = (2, 4, 8, 16, 32)


def ks(n: int) -> list[int]:
    return sorted({0, n // 4, n // 2, n})


def _one(job: tuple) -> dict:
    model, n, rate, k, extra = job
    prof = profiles.load(model)
    c = Cluster(n=n, gpus=8, worker_gbps=rate, k=k, flat_ring=extra.get("flat", False),
                partition_cost_s=extra.get("cost_s", 0.0))
    placement = extra.get("placement") or ("ring" if k < 0 else ("colocated" if k == 0 else "mixed"))
    if placement == "ring":
        c = Cluster(n=n, gpus=8, worker_gbps=rate, k=0, flat_ring=extra.get("flat", False))
    r = simulate(c, placement, prof, barrier=extra.get("barrier"))
    return {"model": model, "n": n, "gpus": 8 * n, "gbps": rate, "k": max(k, 0), "placement": placement,
            "flat": extra.get("flat", False), "barrier": extra.get("barrier") or "layer",
            "iteration_s": r.iteration_s, "compute_s": r.compute_s}


def _run_all(jobs: list[tuple], workers: int, name: str) -> list[dict]:
    """_one of every job on ``workers`` processes, in order, a progress step as each result comes."""
    rows = []
    with ProcessPoolExecutor(workers) as ex, Progress(len(jobs), name) as progress:
        for (model, n, rate, k, extra), row in zip(jobs, ex.map(_one, jobs, chunksize=1)):
            progress.step(f"{model} n={n} {rate} Gbit/s {'ring' if k < 0 else f'k={k}'}"
                          + "".join(f" {key}={value}" for key, value in extra.items()))
            rows.append(row)
    return rows


def grid(models: Sequence[str], machines: Sequence[int], rates: Sequence[int], workers: int,
         cost_s: float = 0.0) -> list[dict]:
    """*cost_s*: byteps' per-partition CPU cost (Cluster.partition_cost_s; the ring has none)."""
    extra = {"cost_s": cost_s} if cost_s else {}
    jobs = [(m, n, r, -1, {}) for m in models for n in machines for r in rates]
    jobs += [(m, n, r, k, dict(extra)) for m in models for n in machines for r in rates for k in ks(n)]
    rows = _run_all(jobs, workers, "at_scale grid")
    ring = {(x["model"], x["n"], x["gbps"]): x["iteration_s"] for x in rows if x["placement"] == "ring"}
    out = []
    for x in rows:
        if x["placement"] != "ring":
            x["ring_s"] = ring[(x["model"], x["n"], x["gbps"])]
            x["speedup"] = x["ring_s"] / x["iteration_s"]
            out.append(x)
    return out


def seed_rows(workers: int) -> list[dict]:
    jobs = []
    for m in SEED:
        for n in SEED_MACHINES:
            for flat in (False, True):
                for barrier in ("layer", "step"):
                    jobs.append((m, n, 20, -1, {"flat": flat, "barrier": barrier}))
            for k in (0, n // 2, n):
                for barrier in ("layer", "step"):
                    jobs.append((m, n, 20, k, {"barrier": barrier}))
    rows = _run_all(jobs, workers, "at_scale seed")
    out = []
    for m in SEED:
        for n in SEED_MACHINES:
            get = lambda **kw: next(r["iteration_s"] for r in rows if r["model"] == m and r["n"] == n and
                                    all(r[a] == b for a, b in kw.items()))
            row = {"model": m, "n": n, "gpus": 8 * n, "seed_speedup": SEED[m], "compute_s": profiles.load(m).compute_s}
            for flat in (False, True):
                for barrier in ("layer", "step"):
                    row[f"ring_{'flat' if flat else 'hier'}_{barrier}_s"] = get(placement="ring", flat=flat, barrier=barrier)
            for k in (0, n // 2, n):
                for barrier in ("layer", "step"):
                    row[f"byteps_k{'n' if k == n else ('n2' if k else '0')}_{barrier}_s"] = get(
                        placement="colocated" if k == 0 else "mixed", k=k, barrier=barrier)
            out.append(row)
    return out


def markdown(rows: list[dict], seed: list[dict]) -> str:
    lines = ["## Predicted speedup over ring all-reduce (byteps iteration / ring iteration, steady state)", ""]
    for m in sorted({r["model"] for r in rows}, key=MODELS.index):
        lines += [f"### {m}", "", "| GPUs (machines) | " + " | ".join(f"{g} Gbit/s: k=0 / n/4 / n/2 / n" for g in RATES
                                                             if any(r['gbps'] == g for r in rows)) + " |",
                  "|---|" + "---:|" * len({r['gbps'] for r in rows})]
        for n in sorted({r["n"] for r in rows if r["model"] == m}):
            cells = []
            for g in sorted({r["gbps"] for r in rows}):
                sp = {r["k"]: r["speedup"] for r in rows if r["model"] == m and r["n"] == n and r["gbps"] == g}
                seen, parts = set(), []
                for k in (0, n // 4, n // 2, n):  # a k that repeats a column to its left: "-"
                    parts.append("-" if k in seen or k not in sp or (n == 1 and k) else f"{sp[k]:.2f}")
                    seen.add(k)
                cells.append(" / ".join(parts))
            lines.append(f"| {8 * n} ({n}) | " + " | ".join(cells) + " |")
        lines.append("")
    if seed:
        lines += ["## The seed's setting: 8 V100 per machine, batch 64 per GPU, 20 Gbit/s TCP", "",
                  "| model | GPUs | ring hier. (ms) | ring flat, step (ms) | byteps k=0 | byteps k=n/2 | byteps k=n (ms) | "
                  "k=n vs ring hier. | k=n vs ring flat+step | seed |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in seed:
            lines.append(
                f"| {r['model']} | {r['gpus']} | {r['ring_hier_layer_s'] * 1e3:.0f} | {r['ring_flat_step_s'] * 1e3:.0f} | "
                f"{r['byteps_k0_layer_s'] * 1e3:.0f} | {r['byteps_kn2_layer_s'] * 1e3:.0f} | {r['byteps_kn_layer_s'] * 1e3:.0f} | "
                f"{r['ring_hier_layer_s'] / r['byteps_kn_layer_s']:.2f}x | "
                f"{r['ring_flat_step_s'] / r['byteps_kn_layer_s']:.2f}x | {r['seed_speedup']:.2f}x |")
    return "\n".join(lines) + "\n"


def plots(rows: list[dict], out: Path) -> list[Path]:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    paths = []
    for m in sorted({r["model"] for r in rows}, key=MODELS.index):
        rates = sorted({r["gbps"] for r in rows})
        fig, axes = plt.subplots(1, len(rates), figsize=(4 * len(rates), 3.4), sharey=True)
        for ax, g in zip(axes if len(rates) > 1 else [axes], rates):
            for label, pick in (("k = 0 (colocated)", lambda n: 0), ("k = n/4", lambda n: n // 4),
                                ("k = n/2", lambda n: n // 2), ("k = n", lambda n: n)):
                pts = sorted((r["gpus"], r["speedup"]) for r in rows
                             if r["model"] == m and r["gbps"] == g and r["k"] == pick(r["n"]) and (pick(r["n"]) > 0 or label.startswith("k = 0")))
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
            ax.set_xscale("log", base=2)
            ax.axhline(1.0, color="grey", lw=0.8)
            ax.set_title(f"{m}, {g} Gbit/s")
            ax.set_xlabel("GPUs (8 per machine)")
        (axes[0] if len(rates) > 1 else axes).set_ylabel("predicted speedup over ring")
        (axes[0] if len(rates) > 1 else axes).legend(fontsize=8)
        fig.tight_layout()
        path = out / f"sim_{m.replace('-', '_')}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench-results/simulate"))
    ap.add_argument("--plots", type=Path, default=None, help="folder for the PNGs (default: --out)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--quick", action="store_true", help="n up to 8, 25 Gbit/s only, no seed table (a smoke run)")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--partition-cost-us", type=float, default=0.0,
                    help="byteps' CPU time per partition message per process, in the grid (default 0: off)")
    args = ap.parse_args(argv)
    models = args.models.split(",")
    machines, rates = (MACHINES[:4], (25,)) if args.quick else (MACHINES, RATES)
    rows = grid(models, machines, rates, args.workers, args.partition_cost_us * 1e-6)
    seed = [] if args.quick else seed_rows(args.workers)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "at_scale.json").write_text(json.dumps({"grid": rows, "seed": seed}, indent=1) + "\n")
    md = markdown(rows, seed)
    (args.out / "at_scale.md").write_text(md)
    plot_dir = args.plots or args.out
    plot_dir.mkdir(parents=True, exist_ok=True)
    for p in plots(rows, plot_dir):
        print(f"wrote {p}")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
