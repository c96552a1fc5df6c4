"""The compression benchmark's derived figures, tables and plot (bench.compression.run)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

TARGET_DROP = 0.01  # the target accuracy: the uncompressed run's final accuracy minus 1 point


def time_to(curve: list[dict], target: float) -> Optional[float]:
    """Training time at the end of the first epoch whose accuracy reaches ``target``; None if none does."""
    for point in curve:
        if point["accuracy"] >= target:
            return point["train_time_s"]
    return None


def summarise(doc: dict) -> None:
    """Adds the derived figures to ``doc`` in place: the digits target accuracy, each run's time
    to it and its bytes relative to uncompressed; VGG-16's speedup and its bound."""
    digits = [r for r in doc["digits"] if "error" not in r]
    base = next((r for r in digits if r["compressor"] == "none"), None)
    if base is not None:
        doc["target_accuracy"] = round(base["accuracy"] - TARGET_DROP, 4)
        for r in digits:
            r["time_to_target_s"] = time_to(r.get("curve", []), doc["target_accuracy"])
            if base.get("pushed_bytes_per_step") and r.get("pushed_bytes_per_step") is not None:
                r["pushed_vs_none"] = round(r["pushed_bytes_per_step"] / base["pushed_bytes_per_step"], 4)
    vgg = {r["label"]: r for r in doc["vgg16"] if "error" not in r}
    compute, none = vgg.get("compute"), vgg.get("none")
    summary = {}
    if compute is not None:
        summary["compute_time_s"] = compute["iter_time_s"]  # measured: the replay with no communication
        summary["profile_compute_time_s"] = compute["compute_time_s"]  # the profile's figure
    if none is not None:
        summary["none_iter_time_s"] = none["iter_time_s"]
        if compute is not None:
            summary["bound"] = round(none["iter_time_s"] / compute["iter_time_s"], 3)
    for label, r in vgg.items():
        if label not in ("compute", "none"):
            summary["compressed"] = label
            summary["compressed_iter_time_s"] = r["iter_time_s"]
            if none is not None:
                summary["speedup"] = round(none["iter_time_s"] / r["iter_time_s"], 3)
    doc["vgg16_summary"] = summary


def _f(value, fmt: str, width: int) -> str:
    return f"{value:{width}{fmt}}" if isinstance(value, (int, float)) else f"{'-' if value is None else value:>{width}}"


def tables(doc: dict) -> str:
    """The stdout tables (docs/benchmarks.md, "Compression", has the same layout)."""
    lines = [f"setup: {doc['setup']['where']}"]
    if doc["digits"]:
        lines += ["", f"digits, {doc['setup']['epochs']} epochs, BYTEPS_MIN_COMPRESS_BYTES=0 (all of the model's "
                      f"tensors are under the 64 KiB default); target accuracy "
                      f"{_f(doc.get('target_accuracy'), '.4f', 0)} (uncompressed final - 1 point)",
                  f"{'compressor':11} {'final acc':>9} {'to target s':>11} {'iter ms':>8} {'pushed B/it':>12} "
                  f"{'vs none':>8} {'pulled B/it':>12}"]
        for r in doc["digits"]:
            if "error" in r:
                lines.append(f"{r['compressor']:11} failed: {r['error']}; {(r['tail'].splitlines() or [''])[-1]}")
                continue
            it = r.get("iter_time_s")
            lines.append(f"{r['compressor']:11} {_f(r['accuracy'], '.4f', 9)} {_f(r.get('time_to_target_s'), '.2f', 11)} "
                         f"{_f(it * 1e3 if it is not None else None, '.2f', 8)} "
                         f"{_f(r.get('pushed_bytes_per_step'), '.0f', 12)} {_f(r.get('pushed_vs_none'), '.3f', 8)} "
                         f"{_f(r.get('pulled_bytes_per_step'), '.0f', 12)}")
    if doc["vgg16"]:
        s = doc.get("vgg16_summary", {})
        lines += ["", "VGG-16-shaped (byteps, replayed compute), iteration time",
                  f"{'run':22} {'iter s':>9} {'speedup':>8}"]
        for r in doc["vgg16"]:
            name = {"compute": "compute only", "none": "byteps, none"}.get(r.get("label"), f"byteps, {r.get('label')}")
            if "error" in r:
                lines.append(f"{name:22} failed: {r['error']}; {(r['tail'].splitlines() or [''])[-1]}")
                continue
            speed = s.get("speedup") if r["label"] == s.get("compressed") else (1.0 if r["label"] == "none" else None)
            lines.append(f"{name:22} {_f(r['iter_time_s'], '.3f', 9)} {_f(speed, '.2f', 8)}")
        lines.append(f"bound (uncompressed / compute): {_f(s.get('bound'), '.2f', 0)}; profile compute time "
                     f"{_f(s.get('profile_compute_time_s'), '.3f', 0)} s")
    return "\n".join(lines)


def plot(doc: dict, path: Path) -> Optional[Path]:
    """Accuracy against training time, one line per compressor; None (and a note) without
    matplotlib or without digits results."""
    runs = [r for r in doc["digits"] if "error" not in r and r.get("curve")]
    if not runs:
        return None
    try:
        import matplotlib  # noqa: PLC0415
    except ImportError:
        print("compression: no plot: matplotlib is not installed (apt-get install python3-matplotlib)")
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in runs:
        ax.plot([p["train_time_s"] for p in r["curve"]], [p["accuracy"] for p in r["curve"]], marker=".",
                label=r["compressor"])
    if doc.get("target_accuracy") is not None:
        ax.axhline(doc["target_accuracy"], color="grey", linestyle="--", linewidth=1, label="target")
    ax.set_xlabel("training time (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"digits, {doc['setup']['where']}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
