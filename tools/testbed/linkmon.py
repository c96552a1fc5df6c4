"""Per-link byte counters of a testbed over time: where the links idle.

A :class:`LinkMonitor` samples every host's link from inside the bridge's namespace, where the
bridge port ``h<i>`` receives what host *i* sends (its egress, after the tbf on ``eth0``) and
transmits what it receives (its ingress, after the tbf on ``h<i>``).  Reading the interfaces'
counters in ``/sys/class/net`` costs a few microseconds, so a sample every 2 ms disturbs little::

    with Testbed(4, rate_mbit=1000) as tb, LinkMonitor(tb, "links.txt") as mon:
        ...                                   # run the job
    trace = load("links.txt")
    print(format_timeline(trace, 1000, bin_s=0.05, last_s=3))
    print(idle_summary(trace, 1000))          # per link: share of the rate used, time idle

CLI: ``python3 -m tools.testbed.linkmon FILE --rate MBIT [--bin S] [--last S]`` prints both for a
saved trace.  A trace file has one line per sample: the monotonic time, then per host its egress
and ingress byte counters.

Thread-safety: a LinkMonitor belongs to the thread that made it.
"""

from __future__ import annotations

import argparse
import bisect
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

# Runs inside the bridge's namespace (``ip netns exec``, which mounts that namespace's /sys).
_SAMPLER = r"""
import signal, sys, time
out, interval, n = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
files = [open(f"/sys/class/net/h{i}/statistics/{k}", "rb") for i in range(n)
         for k in ("rx_bytes", "tx_bytes")]
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
with open(out, "w") as o:
    print("ready", flush=True)
    while not stop:
        values = []
        for f in files:
            f.seek(0)
            values.append(f.read().strip().decode())
        o.write(f"{time.monotonic():.6f} {' '.join(values)}\n")
        time.sleep(interval)
"""
_START_TIMEOUT_S = 10.0


class LinkMonitor:
    """Samples the links of *testbed* into *path* every *interval_s* while in the ``with`` block.

    Raises:
        RuntimeError: the sampler could not start in the bridge's namespace.
    """

    def __init__(self, testbed, path, interval_s: float = 0.002):
        self.path = Path(path)
        self._argv = ["ip", "netns", "exec", testbed.bridge_namespace, sys.executable, "-c",
                      _SAMPLER, str(self.path), str(interval_s), str(len(testbed.hosts))]
        self._proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "LinkMonitor":
        self._proc = subprocess.Popen(self._argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
        line = self._proc.stdout.readline()  # "ready" once the counters are open
        if line.strip() != "ready":
            self._proc.kill()
            _, err = self._proc.communicate(timeout=_START_TIMEOUT_S)
            raise RuntimeError(f"link sampler did not start: {err.strip() or line.strip()}")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Ends sampling (idempotent); the trace file is complete afterwards."""
        if self._proc and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.communicate(timeout=_START_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.communicate()


@dataclass
class Trace:
    times: list[float]            # monotonic seconds
    counters: list[list[int]]     # per sample: host 0 egress, host 0 ingress, host 1 egress, ...

    @property
    def hosts(self) -> int:
        return len(self.counters[0]) // 2 if self.counters else 0


def load(path) -> Trace:
    """Reads a trace file (a torn last line, as from a killed sampler, is skipped)."""
    times, counters = [], []
    width = None
    for line in Path(path).read_text().splitlines():
        fields = line.split()
        if len(fields) < 3 or (width is not None and len(fields) != width):
            continue
        width = len(fields)
        times.append(float(fields[0]))
        counters.append([int(v) for v in fields[1:]])
    return Trace(times, counters)


def rates(trace: Trace, bin_s: float) -> list[tuple[float, list[float]]]:
    """(start time relative to the first sample, Mbit/s per link direction) per bin of *bin_s*."""
    out = []
    if len(trace.times) < 2:
        return out
    t0, i = trace.times[0], 0
    while True:
        j = bisect.bisect_left(trace.times, trace.times[i] + bin_s)
        if j >= len(trace.times):
            return out
        dt = trace.times[j] - trace.times[i]
        out.append((trace.times[i] - t0,
                    [(b - a) * 8 / dt / 1e6 for a, b in zip(trace.counters[i], trace.counters[j])]))
        i = j


def _window(bins, last_s: Optional[float]):
    if last_s is None or not bins:
        return bins
    end = bins[-1][0]
    return [b for b in bins if b[0] >= end - last_s]


def format_timeline(trace: Trace, rate_mbit: float, bin_s: float = 0.05,
                    last_s: Optional[float] = None) -> str:
    """A table: per bin, each link direction's rate as a percentage of *rate_mbit*."""
    head = "  t_s  " + " ".join(f"h{i}out h{i}in" for i in range(trace.hosts))
    lines = [head]
    for t, r in _window(rates(trace, bin_s), last_s):
        lines.append(f"{t:6.2f} " + " ".join(f"{100 * x / rate_mbit:5.0f}" for x in r))
    return "\n".join(lines)


def idle_summary(trace: Trace, rate_mbit: float, bin_s: float = 0.01, below: float = 0.1,
                 last_s: Optional[float] = None) -> dict:
    """Within the busy span (the first to the last bin in which any link ran above half its
    rate, or the last *last_s* seconds of it), per link direction the share of bins in which it
    ran below *below* of its rate (idle) and its mean rate as a share of the rate (used):
    {"span_s", "idle_pct": {"h0 out": ..}, "used_pct": {..}, "mean_idle_pct", "mean_used_pct"}."""
    bins = rates(trace, bin_s)
    busy = [k for k, (_, r) in enumerate(bins) if max(r) > rate_mbit / 2]
    if not busy:
        return {"span_s": 0.0, "idle_pct": {}, "used_pct": {}, "mean_idle_pct": 0.0,
                "mean_used_pct": 0.0}
    span = _window(bins[busy[0]:busy[-1] + 1], last_s)
    names = [f"h{i} {d}" for i in range(trace.hosts) for d in ("out", "in")]
    idle = {name: round(100 * sum(1 for _, r in span if r[k] < below * rate_mbit) / len(span), 1)
            for k, name in enumerate(names)}
    used = {name: round(100 * sum(r[k] for _, r in span) / len(span) / rate_mbit, 1)
            for k, name in enumerate(names)}
    return {"span_s": round(len(span) * bin_s, 2), "idle_pct": idle, "used_pct": used,
            "mean_idle_pct": round(sum(idle.values()) / len(idle), 1),
            "mean_used_pct": round(sum(used.values()) / len(used), 1)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m tools.testbed.linkmon", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trace")
    ap.add_argument("--rate", type=float, required=True, metavar="MBIT", help="the links' rate")
    ap.add_argument("--bin", type=float, default=0.05, metavar="S", help="timeline bin")
    ap.add_argument("--last", type=float, default=None, metavar="S",
                    help="only the last S seconds of the busy span")
    args = ap.parse_args(argv)
    trace = load(args.trace)
    if trace.hosts == 0:
        print(f"{args.trace}: no samples", file=sys.stderr)
        return 1
    print(format_timeline(trace, args.rate, args.bin, args.last))
    summary = idle_summary(trace, args.rate, last_s=args.last)
    print(f"over the {summary['span_s']} s busy span (10 ms bins), per link: used % of the rate"
          " / idle % of the time (< 10 % of the rate)")
    print(", ".join(f"{k} {summary['used_pct'][k]}/{v}" for k, v in summary["idle_pct"].items()))
    print(f"mean: used {summary['mean_used_pct']} %, idle {summary['mean_idle_pct']} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
