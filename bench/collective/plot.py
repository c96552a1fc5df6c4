"""Plot of the collective benchmark: for each n, time vs size (log-log) of byteps (one line per
server placement), gloo and OpenMPI, with the ideal ring and PS lines of the same links::

    /usr/bin/python3 -m bench.collective.plot bench-results/collective/results.json [--out PNG]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.collective import model  # noqa: E402

STYLE = {  # (label, colour, marker) per (system, k label)
    ("gloo", model.MISSING): ("gloo all_reduce", "tab:blue", "o"),
    ("mpi", model.MISSING): ("OpenMPI ring", "tab:orange", "s"),
    ("byteps", "n"): ("byteps k=n", "tab:green", "^"),
    ("byteps", "n/2"): ("byteps k=n/2", "tab:red", "v"),
    ("byteps", "coloc"): ("byteps colocated", "tab:purple", "D"),
}


def plot(rows: Sequence[dict], path: Path) -> Path:
    """Writes the PNG and returns its path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    ns = sorted({r["n"] for r in rows})
    fig, axes = plt.subplots(1, len(ns), figsize=(5.2 * len(ns), 4.4), squeeze=False)
    for ax, n in zip(axes[0], ns):
        mine = [r for r in rows if r["n"] == n]
        rate = min(r["rate_mbit"] for r in mine)
        g = model.goodput_Bps(rate)
        sizes = sorted({r["bytes"] for r in mine})
        series: dict[tuple, list] = {}
        for r in mine:
            if r.get("time_s"):
                series.setdefault((r["system"], r.get("k_label") or model.MISSING), []).append(r)
        for key, pts in sorted(series.items(), key=lambda kv: list(STYLE).index(kv[0])
                               if kv[0] in STYLE else 99):
            default = (f"byteps mixed {key[1]}" if key[1].startswith("n+")
                       else f"{key[0]} k={key[1]}", None, "x")
            label, colour, marker = STYLE.get(key, default)
            pts.sort(key=lambda r: r["bytes"])
            ks = {r.get("k") for r in pts}
            if key[0] == "byteps" and ks:
                label += f" ({next(iter(ks))})"
            ax.plot([r["bytes"] for r in pts], [r["time_s"] for r in pts],
                    marker=marker, color=colour, label=label)
        x = list(sizes)
        ax.plot(x, [model.ring_time(m, n, g) for m in sizes], "k--", lw=1,
                label="ideal ring 2(n-1)/n·M/G (= PS colocated)")
        ax.plot(x, [model.ps_time(m, n, n, g) for m in sizes], "k:", lw=1.5,
                label="ideal PS k=n: M/G")
        if any(r.get("k_label") == "n/2" for r in mine):
            ax.plot(x, [model.ps_time(m, n, max(1, n // 2), g) for m in sizes], "k-.", lw=1,
                    label="ideal PS k=n/2: 2M/G")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(x)
        ax.set_xticklabels([model.format_size(m) for m in sizes])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.set_xlabel("tensor size (bytes, binary units)")
        ax.set_ylabel("time (s, median)")
        ax.set_title(f"n={n} workers, R={rate:g} Mbit/s per host")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="results.json of bench.collective.run")
    ap.add_argument("--out", help="PNG path (default: collective.png next to the JSON)")
    args = ap.parse_args(argv)
    src = Path(args.results)
    rows = json.loads(src.read_text())["rows"]
    print(plot(rows, Path(args.out) if args.out else src.with_name("collective.png")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
