"""The checks that need the whole job: settings equal everywhere, clock skew, bandwidth per link.

The analysis functions (:func:`compare_settings`, :func:`check_clock_skew`,
:func:`analyse_bandwidth`) are pure, so tests feed them made-up figures; :func:`run_cluster_checks`
measures through byteps (:mod:`byteps.doctor.exchange`) and calls them.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import time
from dataclasses import dataclass
from typing import Mapping, Optional

from ..sim import closed_forms
from . import exchange
from .findings import ERROR, OK, WARNING, Finding

PREFIXES = ("BYTEPS_", "DMLC_", "PS_")
# Different on every process by design.
PER_PROCESS = frozenset({"DMLC_WORKER_ID", "DMLC_NODE_HOST", "DMLC_ROLE", "BYTEPS_LOCAL_RANK",
                         "BYTEPS_GLOBAL_RANK", "DMLC_INTERFACE"})
# Settings that only change what a process prints or records: a difference is a warning.
COSMETIC = frozenset({"BYTEPS_LOG_LEVEL", "BYTEPS_PROGRESS", "BYTEPS_TRACE_ON", "BYTEPS_TRACE_DIR",
                      "BYTEPS_TRACE_START_STEP", "BYTEPS_TRACE_END_STEP", "BYTEPS_METRICS_PORT"})
SECRET = "BYTEPS_JOB_SECRET"
SKEW_LIMIT_S = 1.0
# A server moving less than this fraction of the fastest server's rate is named.
SLOW_FRACTION = 0.75
MB = 1e6


def settings_of(env: Mapping[str, str]) -> dict[str, str]:
    """The job-wide settings of one worker: BYTEPS_*/DMLC_*/PS_* minus the per-process ones; the
    secret as a short hash of its value (never the value)."""
    out = {k: v for k, v in env.items() if k.startswith(PREFIXES) and k not in PER_PROCESS}
    if SECRET in out:
        out[SECRET] = "sha256:" + hashlib.sha256(out[SECRET].encode()).hexdigest()[:12]
    return out


def compare_settings(per_worker: list[dict[str, str]]) -> list[Finding]:
    """One finding per variable that differs (naming each worker's value), or one OK."""
    names = sorted(set().union(*per_worker)) if per_worker else []
    findings = []
    for name in names:
        values = [w.get(name) for w in per_worker]
        if len(set(values)) == 1:
            continue
        groups: dict[Optional[str], list[int]] = {}
        for rank, v in enumerate(values):
            groups.setdefault(v, []).append(rank)
        text = "; ".join(f"worker{'s' if len(r) > 1 else ''} {','.join(map(str, r))}: "
                         f"{'unset' if v is None else repr(v)}" for v, r in groups.items())
        level = WARNING if name in COSMETIC else ERROR
        findings.append(Finding(f"setting {name}", level, f"differs between workers ({text})",
                                f"give {name} the same value on every node (the launcher's environment, "
                                f"or the job's configuration file)"))
    if not findings:
        findings.append(Finding("settings", OK, f"{len(names)} BYTEPS_/DMLC_/PS_ settings equal on all "
                                                f"{len(per_worker)} workers"))
    return findings


def check_clock_skew(times: list[float]) -> Finding:
    """*times*: each worker's time.time() right after a push_pull all of them completed."""
    spread = max(times) - min(times)
    slow, fast = times.index(min(times)), times.index(max(times))
    figure = f"clocks spread {spread * 1e3:.1f} ms over {len(times)} workers"
    if spread > SKEW_LIMIT_S:
        return Finding("clock skew", WARNING,
                       f"{figure} (worker {fast} ahead of worker {slow}): merged traces misorder events "
                       f"and timestamps in logs and stall reports do not line up",
                       "synchronise the clocks (NTP: chrony or systemd-timesyncd on every machine)")
    return Finding("clock skew", OK, figure)


@dataclass
class Bandwidth:
    """What the probe measured, in bytes/s per direction."""

    servers: list[float]        # each server alone: bytes it received (= sent) per second
    worker: float               # one worker's rate, the best it showed in any probe
    together: float             # each worker's rate with all servers at once
    workers: int                # worker machines (n)


def analyse_bandwidth(bw: Bandwidth, one_host: bool = False) -> list[Finding]:
    """The PS rule k B_server >= n B_worker, per server (equal byte shares: each server must carry
    n B_worker / k), and the predicted speedup over all-reduce (docs/performance.md).  *one_host*:
    every process on one machine (the scheduler on a loopback address), where the rates measure
    CPUs and memory rather than links: a slow server is a WARNING."""
    n, k = bw.workers, len(bw.servers)
    out = []
    slow_level = WARNING if one_host else ERROR
    need = n * bw.worker / k
    fastest = max(bw.servers)
    for i, rate in enumerate(bw.servers):
        figure = f"server {i} moves {rate / MB:.1f} MB/s"
        others = [r for j, r in enumerate(bw.servers) if j != i]
        slow_vs_others = others and rate < SLOW_FRACTION * fastest
        if rate < SLOW_FRACTION * need or slow_vs_others:
            versus = f", the others {', '.join(f'{r / MB:.1f}' for r in others)} MB/s" if others else ""
            note = " (all on one machine: CPU and memory, not links)" if one_host else ""
            out.append(Finding(f"bandwidth server {i}", slow_level,
                               f"{figure}{versus}{note}; the {n} workers at {bw.worker / MB:.1f} MB/s need "
                               f"{need / MB:.1f} MB/s from each of the {k} servers (k*B_server >= n*B_worker)",
                               f"give this server's machine a faster NIC or a link of its own, move the "
                               f"server to a less busy machine, or add servers (DMLC_NUM_SERVER); server {i} is "
                               f"the one whose log says '[server:{i}] ... serving on <address>' "
                               f"(BYTEPS_LOG_LEVEL=INFO)"))
        else:
            out.append(Finding(f"bandwidth server {i}", OK, f"{figure} (need {need / MB:.1f} MB/s)"))
    out.append(Finding("bandwidth workers", OK,
                       f"a worker moves {bw.worker / MB:.1f} MB/s (with all {k} servers at once: "
                       f"{bw.together / MB:.1f} MB/s)"))
    out.append(predicted_speedup(bw))
    return out


def predicted_speedup(bw: Bandwidth) -> Finding:
    """Ring all-reduce at the workers' rate vs this PS (servers on machines of their own, equal
    shares, so the slowest server sets the pace): closed_forms' ring_time and cpu_only_time."""
    n, k = bw.workers, len(bw.servers)
    ring = closed_forms.ring_time(n, bw.worker)
    ps = closed_forms.cpu_only_time(n, k, rate=min(bw.servers), worker_rate=bw.worker)
    best = closed_forms.cpu_only_time(n, k, rate=max(bw.servers), worker_rate=bw.worker)
    if ring == 0:
        return Finding("predicted speedup", OK, "one worker machine: nothing to compare with all-reduce")
    text = f"{ring / ps:.2f}x over ring all-reduce at these rates (n={n}, k={k})"
    if best < ps * 0.95:
        text += f"; {ring / best:.2f}x if every server matched the fastest"
    return Finding("predicted speedup", OK, text)


@dataclass
class ProbeOptions:
    nbytes: int = 16 << 20
    rounds: int = 4
    timeout: float = 60.0


def measure_bandwidth(opts: ProbeOptions, servers: int, workers: int) -> Bandwidth:
    """Every worker push_pulls *nbytes* on each server alone, then *nbytes* x servers spread over
    them all (:func:`exchange.timed_rounds`: the slowest worker of the fastest pass)."""
    per_server, worker_best = [], 0.0
    for s in range(servers):
        t = exchange.timed_rounds(f"bw.s{s}", opts.nbytes, opts.rounds, opts.timeout, s)
        moved = opts.nbytes * opts.rounds
        per_server.append(workers * moved / t)  # one process per worker machine talks to the servers
        worker_best = max(worker_best, moved / t)
    total = opts.nbytes * servers
    t = exchange.timed_rounds("bw.all", total, opts.rounds, opts.timeout, passes=2)
    together = total * opts.rounds / t
    return Bandwidth(per_server, max(worker_best, together), together, workers)


def run_cluster_checks(env: Mapping[str, str], opts: ProbeOptions, bandwidth: bool = True) -> tuple[list[Finding], dict]:
    """Settings, clock skew and bandwidth; (findings, figures for --json)."""
    blobs = exchange.gather_bytes(json.dumps(settings_of(env), sort_keys=True).encode(), opts.timeout)
    findings = compare_settings([json.loads(b) for b in blobs])
    spreads = []
    for _ in range(3):  # the smallest spread: a round where no worker was descheduled
        exchange.gather_floats(0.0, opts.timeout)
        times = exchange.gather_floats(time.time(), opts.timeout)
        spreads.append(times)
    findings.append(check_clock_skew(min(spreads, key=lambda ts: max(ts) - min(ts))))
    figures: dict = {}
    if bandwidth:
        servers = int(env.get("DMLC_NUM_SERVER", "1"))
        workers = int(env.get("DMLC_NUM_WORKER", "1"))
        bw = measure_bandwidth(opts, servers, workers)
        figures["bandwidth"] = {"servers_bytes_per_s": bw.servers, "worker_bytes_per_s": bw.worker,
                                "together_bytes_per_s": bw.together}
        findings += analyse_bandwidth(bw, one_host=is_loopback(env.get("DMLC_PS_ROOT_URI", "")))
    return findings, figures


def is_loopback(host: str) -> bool:
    """Whether *host* (the scheduler's address) is this machine's loopback."""
    try:
        return host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
