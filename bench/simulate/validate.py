"""The simulator's predictions next to the testbed's measurements recorded in docs/benchmarks.md.

    python3 -m bench.simulate.validate [--out bench-results/simulate]

(also writes the speedup table of bench/simulate/speedups.py: speedups.md, speedups.json)

Cases (every figure below is copied from docs/benchmarks.md, the section named in "source"):

* bench/collective (one push_pull of M bytes, no compute; 1 Gbit/s links for n = 2 and 4,
  750 Mbit/s for n = 8; byteps with 256 KiB partitions and a credit of 64 partitions, 2
  connections per server; gloo's ring all-reduce): median seconds; placements "k=N" (N CPU
  server machines), "colocated", "mixed:N" (N CPU machines plus a server on each worker machine,
  the optimal split), "gloo";
* bench/model_shaped (VGG-16 and ResNet-50 gradients, V100 compute x 20/R; n = 4 at 1 Gbit/s and
  n = 8 at 500 Mbit/s; k = n servers, default 4096000 B partitions, credit 16 partitions;
  byteps with priority and without, and DDP = gloo all-reduce of 25 MiB buckets with every
  bucket waited for before the next forward): images/s, 64 per worker per iteration.

The testbed's constants: TCP goodput 0.956 R; round trip 0.41 ms (docs/performance.md), so 0.2 ms
one way; one GPU per host (no local reduce).  Ratio = predicted / measured time.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Optional, Sequence

from byteps.sim import profiles
from byteps.sim.events import train
from byteps.sim.placements import Cluster, backend
from byteps.sim.ring import RingBackend, RingConfig
from tools.progress import Progress

MIB = 1 << 20
COLLECTIVE = "Collective benchmark: byteps push_pull vs gloo all_reduce vs OpenMPI ring"
MIXED = "Mixed placement: servers on worker and CPU machines (issue 30)"
MS4 = "Model-shaped training: VGG-16 and ResNet-50 on 1 Gbit/s links, n = 4"
MS8 = "Model-shaped training, n = 8 (500 Mbit/s links)"
GOODPUT = "Goodput at 16–64 MiB: what holds it back"
LAT = 0.2e-3

# (n, placement, MiB, rate Mbit/s, measured s[, source section: COLLECTIVE unless given]); placement:
# "k=N" CPU servers, "mixed:N", "colocated", "gloo"
COLLECTIVE_CASES = [
    (4, "k=4", 16, 1000, 0.185), (4, "k=4", 64, 1000, 0.645), (4, "k=4", 256, 1000, 2.349),
    (4, "k=2", 256, 1000, 4.672), (4, "colocated", 64, 1000, 0.888), (4, "colocated", 256, 1000, 3.551),
    (4, "gloo", 16, 1000, 0.212), (4, "gloo", 64, 1000, 0.848), (4, "gloo", 256, 1000, 3.387),
    (2, "k=2", 64, 1000, 0.590), (2, "k=2", 256, 1000, 2.270), (2, "colocated", 256, 1000, 2.256),
    (2, "gloo", 64, 1000, 0.564), (2, "gloo", 256, 1000, 2.249),
    (8, "k=8", 16, 750, 0.298), (8, "k=8", 64, 750, 1.010), (8, "k=8", 256, 750, 3.679),
    (8, "k=4", 256, 750, 6.536), (8, "colocated", 64, 750, 1.421), (8, "colocated", 256, 750, 5.678),
    (8, "gloo", 16, 750, 0.336), (8, "gloo", 64, 750, 1.327), (8, "gloo", 256, 750, 5.523),
    # Mixed placement (issue 30): medians of 3 runs, default settings (128 KiB partitions chosen).
    (4, "mixed:2", 100, 1000, 1.1116, MIXED), (4, "mixed:1", 100, 1000, 1.2181, MIXED),
    (4, "k=2", 100, 1000, 1.9274, MIXED), (4, "colocated", 100, 1000, 1.3435, MIXED), (4, "gloo", 100, 1000, 1.3210, MIXED),
    # one run each (n = 8: 12 emulated hosts on 2 cores)
    (2, "mixed:1", 100, 1000, 0.8888, MIXED), (2, "gloo", 100, 1000, 0.8784, MIXED),
    (8, "mixed:1", 100, 1000, 1.5209, MIXED), (8, "mixed:4", 100, 1000, 1.2868, MIXED), (8, "gloo", 100, 1000, 1.5458, MIXED),
    # n = 2, k = 2, 16 MiB at 95.6 % of G (run 1): t = 16 MiB / (0.956 G), G = 0.956 * 125 MB/s.  The same
    # partitions per worker and per server as n = 4, k = 4, with half the emulated hosts (no gloo figure).
    (2, "k=2", 16, 1000, 0.1469, GOODPUT),
]
# (model, n, rate Gbit/s, mode, measured img/s, source)
MODEL_CASES = [
    ("vgg16", 4, 1.0, "byteps", 41.9, MS4), ("vgg16", 4, 1.0, "byteps-nopriority", 35.7, MS4),
    ("vgg16", 4, 1.0, "ddp", 27.8, MS4), ("resnet50", 4, 1.0, "byteps", 79.8, MS4),
    ("resnet50", 4, 1.0, "byteps-nopriority", 79.6, MS4), ("resnet50", 4, 1.0, "ddp", 74.9, MS4),
    ("vgg16", 8, 0.5, "byteps", 37.1, MS8), ("vgg16", 8, 0.5, "byteps-nopriority", 31.8, MS8),
    ("vgg16", 8, 0.5, "ddp", 24.9, MS8), ("resnet50", 8, 0.5, "byteps", 79.9, MS8),
    ("resnet50", 8, 0.5, "byteps-nopriority", 79.9, MS8), ("resnet50", 8, 0.5, "ddp", 75.7, MS8),
    # the mixed placement with default settings (run_testbed --defaults --k n/2,mixed:2), one run
    ("vgg16", 4, 1.0, "defaults-mixed:2", 44.2, MIXED), ("vgg16", 4, 1.0, "defaults-k=2", 26.6, MIXED),
    ("vgg16", 4, 1.0, "ddp", 28.5, MIXED),
    ("resnet50", 4, 1.0, "defaults-mixed:2", 77.4, MIXED), ("resnet50", 4, 1.0, "defaults-k=2", 80.0, MIXED),
    ("resnet50", 4, 1.0, "ddp", 76.9, MIXED),
    ("vgg16", 8, 0.5, "defaults-mixed:4", 37.5, MIXED), ("vgg16", 8, 0.5, "defaults-k=4", 21.1, MIXED),
    ("vgg16", 8, 0.5, "ddp", 25.2, MIXED),
]

# Model-shaped cases of the mixed placement's section off by more than 10 %, with the reason
# (docs/simulator.md lists them; bench/simulate/test_simulate.py checks that every other mixed case
# is within 10 % and that these are still off, so the list stays true).
MIXED_MODEL_OFF = {
    ("vgg16", 8, "defaults-mixed:4"): "n = 8: 12 emulated hosts and 8 training processes on 2 cores",
    ("vgg16", 8, "defaults-k=4"): "n = 8: 12 emulated hosts and 8 training processes on 2 cores; 4 server "
                                  "processes sum every byte",
}


def _ring(n: int, rate_gbps: float, bucket: int = 0) -> RingBackend:
    c = Cluster(n=n, gpus=1, worker_gbps=rate_gbps)
    return RingBackend(RingConfig(n=n, rate=c.worker_rate, gpus=1, cycle_s=0.0, fusion_bytes=1 << 40,
                                  step_latency_s=LAT, bucket_bytes=bucket))


def _cpu_machines(placement: str) -> int:
    """CPU server machines of a placement label: "k=N" (CPU servers only), "mixed:N" (N CPU servers
    plus one on each worker machine); 0 for ring and colocated."""
    if placement.startswith("k="):
        return int(placement[2:])
    if placement.startswith("mixed:"):
        return int(placement[6:])
    return 0


def collective(n: int, placement: str, mib: int, mbit: float) -> float:
    prof = profiles.single_tensor(mib * MIB)
    if placement == "gloo":
        b = _ring(n, mbit / 1e3)
        return train(prof, b, 1).iteration_s
    k = n if placement == "colocated" else _cpu_machines(placement)
    c = Cluster(n=n, gpus=1, worker_gbps=mbit / 1e3, k=0 if placement == "colocated" else k, latency_s=LAT,
                partition_bytes=256 * 1024, credit_bytes=64 * 256 * 1024, sum_gbps=100.0)
    b = backend(c, "colocated" if placement == "colocated" else "mixed" if placement.startswith("mixed") else "cpu")
    b.cfg.connections = 2
    return train(prof, b, 1, network=b.network()).iteration_s


def model_shaped(model: str, n: int, gbps: float, mode: str) -> float:
    prof = profiles.load(model).scaled(20.0 / gbps)
    if mode == "ddp":
        b = _ring(n, gbps, bucket=25 * MIB)
        return 64 * n / train(prof, b, 3, barrier="step").iteration_s
    if mode.startswith("defaults-"):  # run_testbed --defaults: the tuner's partition and credit
        placement, k = ("mixed", int(mode[15:])) if mode.startswith("defaults-mixed:") else ("cpu", int(mode[11:]))
        c = Cluster(n=n, gpus=1, worker_gbps=gbps, k=k, latency_s=LAT)
        b = backend(c, placement)
        b.cfg.connections = 2
        return 64 * n / train(prof, b, 3, network=b.network()).iteration_s
    c = Cluster(n=n, gpus=1, worker_gbps=gbps, k=n, latency_s=LAT, partition_bytes=4_096_000,
                credit_bytes=16 * 4_096_000, priority=(mode == "byteps"))
    b = backend(c, "cpu")
    b.cfg.connections = 2
    return 64 * n / train(prof, b, 3, network=b.network()).iteration_s


def rows() -> list[dict]:
    out = []
    with Progress(len(COLLECTIVE_CASES) + len(MODEL_CASES), "validate") as progress:
        for n, placement, mib, mbit, measured, *source in COLLECTIVE_CASES:
            case = f"n={n} {placement} {mib} MiB @ {mbit:g} Mbit/s"
            progress.step(f"collective {case}")
            t = collective(n, placement, mib, mbit)
            out.append({"bench": "collective", "case": case, "unit": "s", "measured": measured, "predicted": t,
                        "ratio": t / measured, "source": source[0] if source else COLLECTIVE})
        for model, n, gbps, mode, measured, src in MODEL_CASES:
            case = f"{model} n={n} {mode} @ {gbps:g} Gbit/s"
            progress.step(f"model_shaped {case}")
            ips = model_shaped(model, n, gbps, mode)
            out.append({"bench": "model_shaped", "case": case, "unit": "img/s", "measured": measured,
                        "predicted": ips, "ratio": measured / ips, "source": src})
    return out


def _plan_order(placement: str) -> tuple[int, int]:
    """byteps plan's preference among placements within 1 % of the fastest (python/byteps/sim/plan.py
    over placements.candidates): fewest CPU machines, then its list's order: ring, colocated,
    CPU-only, mixed."""
    kind = 0 if placement in ("gloo", "ddp") else 1 if placement == "colocated" else 2 if placement.startswith("k=") else 3
    return _cpu_machines(placement), kind


def rankings(rs: list[dict]) -> list[dict]:
    """Per setting with several measured placements (the collective cases, and the mixed section's
    training cases): what byteps plan would pick among them from the simulator next to the
    measured fastest. Times: seconds, or 1 / (img/s) for training."""
    groups: dict = {}
    for r, case in zip([r for r in rs if r["bench"] == "collective"], COLLECTIVE_CASES):
        n, placement, mib, mbit = case[:4]
        groups.setdefault(f"n={n} {mib} MiB @ {mbit:g} Mbit/s", []).append((placement, r["predicted"], r["measured"]))
    for r, (model, n, gbps, mode, measured, src) in zip([r for r in rs if r["bench"] == "model_shaped"], MODEL_CASES):
        if src == MIXED:
            placement = mode.replace("defaults-", "")
            groups.setdefault(f"{model} training n={n} @ {gbps:g} Gbit/s", []).append(
                (placement, 1 / r["predicted"], 1 / measured))
    out = []
    for setting, items in groups.items():
        if len(items) < 2:
            continue
        best = min(i[1] for i in items)
        pick = min((i for i in items if i[1] <= best * 1.01), key=lambda i: _plan_order(i[0]))[0]
        out.append({"setting": setting, "placements": [i[0] for i in items],
                    "predicted_fastest": pick, "measured_fastest": min(items, key=lambda i: i[2])[0]})
    return out


def markdown(rs: list[dict]) -> str:
    lines = ["| bench | case | measured | predicted | predicted / measured time |", "|---|---|---:|---:|---:|"]
    for r in rs:
        flag = " **(>10 %)**" if abs(r["ratio"] - 1) > 0.10 else ""
        lines.append(f"| {r['bench']} | {r['case']} | {r['measured']:.3f} {r['unit']} | {r['predicted']:.3f} "
                     f"{r['unit']} | {r['ratio']:.2f}{flag} |")
    lines += ["", "| setting | placements measured | the plan's pick (simulated) | measured fastest | same |", "|---|---|---|---|---|"]
    for g in rankings(rs):
        same = "yes" if g["predicted_fastest"] == g["measured_fastest"] else "**no**"
        lines.append(f"| {g['setting']} | {', '.join(g['placements'])} | {g['predicted_fastest']} | "
                     f"{g['measured_fastest']} | {same} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench-results/simulate"))
    args = ap.parse_args(argv)
    rs = rows()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "validate.json").write_text(json.dumps(rs, indent=1) + "\n")
    md = markdown(rs)
    (args.out / "validate.md").write_text(md)
    print(md)
    from bench.simulate import speedups  # it imports this module
    print(speedups.write(speedups.speedup_rows(rs), args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
