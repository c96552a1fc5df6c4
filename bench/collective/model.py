"""The arithmetic of the collective benchmark: link goodput, ideal times, ratios, formatting.

Pure functions (no I/O), unit-tested in bench/collective/test_model.py.

Notation: M bytes are reduced across n workers; every host has one link of rate R (both
directions, shaped with tbf on both ends, see tools/testbed/netns.py); its TCP goodput is
G = 0.956 R / 8 bytes/s (Ethernet/IP/TCP framing, measured).  B_w and B_s are the per-host
goodputs of worker and server hosts (equal on the testbed: every host gets the same R).

Ring all-reduce (gloo, OpenMPI algorithm 4): a reduce-scatter and an all-gather, each moving
(n-1)/n M over every worker's link in each direction::

    t_ring = 2(n-1)/n * M / G

Parameter server, k servers on hosts of their own ("separate"): every worker sends M once and
receives M once; the k servers together receive n M and send n M, M n/k each::

    t_PS = max(M / B_w, n M / (k B_s)) = M / B_w * max(1, n B_w / (k B_s))

so t_ring / t_PS = 2(n-1)/n * min(1, k B_s / (n B_w)): 1.5 at n=4 and 1.75 at n=8 with k=n,
half that (below 1) with k=n/2.

Colocated (server i on worker host i, k <= n): a host with a server sends its worker's pushes
to the k-1 other servers, (k-1)/k M, plus its server's share of the sum, M/k, to the n-1 other
workers, (n-1)/k M; in all M (n+k-2)/k out, and the same in.  A host without a server sends M
and receives M.  With k = n that is 2(n-1)/n M per direction, exactly the ring's traffic::

    t_PS,colocated = M / G * max(1, (n+k-2)/k)      (k = n: 2(n-1)/n M / G = t_ring)

so colocated PS is at ring parity, theoretical ratio 1 (and worse than the ring for k < n).

Mixed (the unified architecture, BytePS OSDI'20): each of the n worker hosts runs a colocated
server and k <= n hosts of their own run one each (n + k hosts, n + k servers); the bytes are
split so that every link finishes together, M_cpu = 2(n-1)/(n^2+kn-2k) M per CPU server and
M_gpu = (n-k)/(n^2+kn-2k) M per colocated server (src/protocol/mixed_split.cc), giving::

    t_mixed = 2n(n-1) M / ((n^2 + kn - 2k) G)

ring all-reduce's time at k = 0 and separate PS's at k = n; t_ring / t_mixed =
(n^2 + kn - 2k) / n^2 (1.25 at n=4, k=2).

Partitioning (what the byteps core really does, printed as est_s): a tensor goes out in
ceil(M/P) equal partitions placed on the least-loaded servers, all pushed at once, and a
partition's sum can only come back once all n workers' pushes of it arrived.  So a worker's
receive side idles until the first sums are ready and the last partitions' pulls overlap no
push (the "tail"), and a tensor of few partitions loads few servers (4 MiB = 2 partitions of
2 MiB: on n=4, k=4 only 2 servers work, push then pull).  :func:`simulate_ps` computes this in
a flow-level model (max-min fair links).  With one server the tail is the c partitions in flight
at the end (one per connection): t = n (M + c P) / G, e.g. tests/python/test_testbed.py's
measured case (n=2, k=1, 16 MB in 4 partitions of 4 MB, c=2: 2 (M + 2 P) / G).  With several
servers the busiest server's share of the ceil(M/P) partitions and the pipeline's start
dominate and c hardly matters (measured at n=4, k=4: c = 1, 2, 4 within noise).
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path
from typing import Iterable, Mapping, Optional, Sequence

_PYTHON = Path(__file__).resolve().parents[2] / "python"  # this checkout's byteps, whoever imports us
if str(_PYTHON) not in sys.path:
    sys.path.insert(0, str(_PYTHON))

from byteps.sim.ps import split_partitions  # noqa: E402  the core's partitioner, as the simulator models it

TCP_GOODPUT_FACTOR = 0.956  # the same constant as tools.testbed.netns (kept pure here)
SEPARATE, COLOCATED, MIXED = "separate", "colocated", "mixed"
PLACEMENTS = (SEPARATE, COLOCATED, MIXED)
# The byteps core's defaults (docs/config.md), used by simulate_ps.
DEFAULT_PARTITION_BYTES = 4_096_000
DEFAULT_CONNECTIONS_PER_PEER = 2

# --------------------------------------------------------------------------------------------
# Links and ideal times


def goodput_Bps(rate_mbit: float) -> float:
    """TCP goodput in bytes/s of a link shaped to *rate_mbit* Mbit/s: 0.956 R / 8."""
    if rate_mbit <= 0:
        raise ValueError(f"rate must be > 0 Mbit/s, got {rate_mbit}")
    return TCP_GOODPUT_FACTOR * rate_mbit * 1e6 / 8


def ring_factor(n: int) -> float:
    """Bytes each worker sends (and receives) per byte of the tensor in ring all-reduce:
    2(n-1)/n (0 for a single worker)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    return 2.0 * (n - 1) / n


def ring_time(nbytes: float, n: int, goodput: float) -> float:
    """Ideal ring all-reduce time in s: 2(n-1)/n * M / G."""
    return ring_factor(n) * nbytes / goodput


def mixed_split(n: int, k: int) -> tuple[float, float]:
    """(M_cpu / M, M_gpu / M): the optimal share of each CPU server and of each colocated server
    with n worker hosts and k CPU hosts (0 <= k <= n, equal links)."""
    if n < 1 or not 0 <= k <= n:
        raise ValueError(f"mixed needs n >= 1 and 0 <= k <= n, got n={n} k={k}")
    if n == 1:
        return 0.0, 1.0  # nothing crosses a link: the colocated server keeps it all
    d = n * n + k * n - 2 * k
    return 2.0 * (n - 1) / d, (n - k) / d


def ps_factor(n: int, k: int, placement: str = SEPARATE, bw_worker: float = 1.0,
              bw_server: float = 1.0) -> float:
    """t_PS / (M / B_w): the busiest link's load per byte of the tensor, in units of a worker
    link.  separate: max(1, n B_w / (k B_s)); colocated (B_s = B_w, k <= n):
    max(1, (n+k-2)/k); mixed (k CPU hosts besides n colocated servers, equal links):
    2n(n-1) / (n^2 + kn - 2k)."""
    if placement == MIXED:
        mixed_split(n, k)  # validates n and k
        return 0.0 if n == 1 else 2.0 * n * (n - 1) / (n * n + k * n - 2 * k)
    if n < 1 or k < 1:
        raise ValueError(f"n and k must be >= 1, got n={n} k={k}")
    if placement == SEPARATE:
        return max(1.0, n * bw_worker / (k * bw_server))
    if placement == COLOCATED:
        if k > n:
            raise ValueError(f"colocated needs k <= n, got k={k} > n={n}")
        if n == 1:
            return 0.0  # one worker with its own server: nothing crosses a link
        return max(1.0, (n + k - 2) / k)
    raise ValueError(f"placement must be one of {', '.join(PLACEMENTS)}, not {placement!r}")


def ps_time(nbytes: float, n: int, k: int, goodput: float, placement: str = SEPARATE,
            server_goodput: Optional[float] = None) -> float:
    """Ideal PS push_pull time in s: M / B_w * ps_factor (B_s = *server_goodput*, default
    B_w = *goodput*)."""
    bs = goodput if server_goodput is None else server_goodput
    return nbytes / goodput * ps_factor(n, k, placement, goodput, bs)


# --------------------------------------------------------------------------------------------
# Flow-level simulation of one byteps push_pull (the estimate printed as est_s)


def assign_servers(lengths: Sequence[int], k: int, loads: Optional[list[int]] = None,
                   shares: Optional[Sequence[float]] = None) -> list[int]:
    """Server of each partition as the core's KeyAssigner does: the least-loaded server by bytes
    so far (ties: lowest rank).  *loads* (one per server) is updated in place, so the tensors of
    a sweep, declared one after the other, see each other's placement.  With *shares* (one per
    server, the mixed split) the server whose load after taking the partition is the smallest
    fraction of its share (servers of share 0 take nothing): an approximation of the core's
    share-aware planner, close enough for an estimate."""
    if loads is None:
        loads = [0] * k
    servers = []
    for length in lengths:
        if shares is not None:
            s = min((i for i in range(k) if shares[i] > 0),
                    key=lambda i: ((loads[i] + max(length, 1)) / shares[i], i))
        else:
            s = min(range(k), key=lambda i: (loads[i], i))
        loads[s] += max(length, 1)
        servers.append(s)
    return servers


def _max_min_rates(flows: dict, caps: dict) -> dict:
    """Max-min fair rates (progressive filling).  *flows*: id -> [(link, weight)], a flow of
    rate r using r * weight of each of its links; *caps*: link -> capacity."""
    rates: dict = {}
    left = dict(caps)
    active = {f: links for f, links in flows.items()}
    while active:
        use: dict = {}
        for links in active.values():
            for link, w in links:
                use[link] = use.get(link, 0.0) + w
        link, share = min(((l, left[l] / w) for l, w in use.items() if w > 0),
                          key=lambda x: x[1])
        share = max(share, 0.0)
        frozen = [f for f, links in active.items() if any(l == link for l, _ in links)]
        for f in frozen:
            rates[f] = share
            for l, w in active.pop(f):
                left[l] -= share * w
    return rates


def server_count(n: int, k: int, placement: str) -> int:
    """Servers of a placement: k, or n + k for mixed (k counts the CPU hosts)."""
    return n + k if placement == MIXED else k


def simulate_ps(nbytes: int, n: int, k: int, goodput: float, placement: str = SEPARATE,
                partition_bytes: int = DEFAULT_PARTITION_BYTES,
                connections: int = DEFAULT_CONNECTIONS_PER_PEER, declared_key: int = 0,
                loads: Optional[list[int]] = None) -> float:
    """Time of one push_pull of *nbytes* float32 in a flow-level model of the byteps core.

    What is modelled: partitions as the core splits them and places them on servers
    (:func:`split_partitions`, :func:`assign_servers`); every partition pushed at once (no
    scheduling credit) over the connection the core picks (``(key >> 16) * 31 + (key & 0xffff)``
    modulo c), each of the c connections of a (worker, server) pair a FIFO in each direction;
    a partition's sum is sent back (on the same connection) when the pushes of all n workers
    arrived; every link (host egress and ingress, capacity = goodput) shared max-min fairly
    between the flows at the head of their connections.  Separate servers: the n workers are
    identical, so one is simulated and the server links carry n times its flows.  Colocated:
    every worker simulated; traffic to a host's own server costs no link time.

    Not modelled: latency, CPU, TCP dynamics (tbf is FIFO and TCP not exactly fair), so this is
    an estimate of what the core's partitioning allows, between the ideal and twice it.
    """
    lengths = split_partitions(nbytes, partition_bytes)
    shares = None
    if placement == MIXED:
        cpu, gpu = mixed_split(n, k)
        shares = [gpu] * n + [cpu] * k
    servers = assign_servers(lengths, server_count(n, k, placement), loads, shares)
    conns = [(declared_key * 31 + i) % connections for i in range(len(lengths))]
    caps: dict = {}
    if placement == SEPARATE:
        workers, mult = [0], n  # one worker stands for all; server links carry n of its flows
        def w_host(w): return ("w", w)
        def s_host(s): return ("s", s)
    elif placement in (COLOCATED, MIXED):  # mixed: servers n.. on hosts of their own
        workers, mult = list(range(n)), 1
        def w_host(w): return ("h", w)
        def s_host(s): return ("h", s) if s < n or placement == COLOCATED else ("c", s)
    else:
        raise ValueError(f"bad placement {placement!r}")
    for w in workers:
        caps[(w_host(w), "out")] = caps[(w_host(w), "in")] = goodput
    for s in range(server_count(n, k, placement)):
        caps[(s_host(s), "out")] = caps[(s_host(s), "in")] = goodput
    # Queues: ("push", w, s, c) and ("pull", s, w, c) -> partitions in order; heads in flight.
    queues: dict = {}
    for w in workers:
        for j, (s, c) in enumerate(zip(servers, conns)):
            queues.setdefault(("push", w, s, c), []).append(j)
    pushed = [0] * len(lengths)
    remaining: dict = {}  # queue -> bytes left of its head partition
    now, done_pulls, total_pulls = 0.0, 0, len(lengths) * len(workers)

    def links(q):
        kind, a, b, _ = q
        if kind == "push":
            src, dst, w_src = w_host(a), s_host(b), True
        else:
            src, dst, w_src = s_host(a), w_host(b), False
        if src == dst:
            return None  # a host's own server: no link
        return [((src, "out"), 1 if w_src else mult), ((dst, "in"), mult if w_src else 1)]

    def start_heads():
        nonlocal done_pulls
        progress = True
        while progress:
            progress = False
            for q, items in queues.items():
                if q in remaining or not items:
                    continue
                if links(q) is None:  # local: done at once
                    finish(q, items.pop(0))
                    progress = True
                else:
                    remaining[q] = float(lengths[items[0]])

    def finish(q, j):
        nonlocal done_pulls
        kind, a, b, c = q
        if kind == "push":
            pushed[j] += n if placement == SEPARATE else 1
            if pushed[j] == n:
                for w in workers:
                    queues.setdefault(("pull", servers[j], w, c), []).append(j)
        else:
            done_pulls += 1

    start_heads()
    while done_pulls < total_pulls:
        flows = {q: links(q) for q in remaining}
        rates = _max_min_rates(flows, caps)
        dt = min(remaining[q] / rates[q] for q in remaining if rates[q] > 0)
        now += dt
        finished = []
        for q in list(remaining):
            remaining[q] -= rates[q] * dt
            if remaining[q] <= 1e-6 * max(1.0, lengths[queues[q][0]]):
                finished.append(q)
        for q in finished:
            del remaining[q]
            finish(q, queues[q].pop(0))
        start_heads()
    return now


def simulate_sweep(sizes: Sequence[int], n: int, k: int, goodput: float,
                   placement: str = SEPARATE, partition_bytes: int = DEFAULT_PARTITION_BYTES,
                   connections: int = DEFAULT_CONNECTIONS_PER_PEER,
                   one_job: bool = True) -> list[float]:
    """:func:`simulate_ps` for the sizes of one ``byteps-core bench`` sweep: tensor i is
    declared i-th (its key and the servers' loads depend on the earlier ones) when *one_job*,
    else every size in a job of its own."""
    loads = [0] * server_count(n, k, placement)
    out = []
    for i, m in enumerate(sizes):
        out.append(simulate_ps(m, n, k, goodput, placement, partition_bytes, connections,
                               declared_key=i if one_job else 0,
                               loads=loads if one_job else None))
    return out


def theory_ratio(n: int, k: int, placement: str = SEPARATE, bw_worker: float = 1.0,
                 bw_server: float = 1.0) -> float:
    """t_ring / t_PS for the same M and links: 2(n-1)/n * min(1, k B_s / (n B_w)) separate,
    1 colocated with k = n, (n^2 + kn - 2k) / n^2 mixed."""
    if n == 1:
        return 1.0
    return ring_factor(n) / ps_factor(n, k, placement, bw_worker, bw_server)


def ideal_time(system: str, nbytes: float, n: int, goodput: float, k: Optional[int] = None,
               placement: str = SEPARATE) -> float:
    """The model time of a system's row: PS for "byteps", ring for the others."""
    if system == "byteps":
        if k is None:
            raise ValueError("byteps needs k")
        return ps_time(nbytes, n, k, goodput, placement)
    return ring_time(nbytes, n, goodput)


# --------------------------------------------------------------------------------------------
# Measured figures


def algbw_GBps(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth M / t in GB/s (10^9)."""
    return nbytes / seconds / 1e9


def pct_of_goodput(nbytes: float, seconds: float, goodput: float) -> float:
    """M / t as % of one link's goodput G: for PS the per-worker link utilisation (each worker
    sends and receives M); the same definition for ring so that rows compare directly."""
    return 100.0 * nbytes / seconds / goodput


def busbw_pct(nbytes: float, seconds: float, goodput: float, n: int) -> float:
    """nccl-tests style bus bandwidth of a ring, 2(n-1)/n * M / t, as % of G: how busy the ring
    keeps each link (100 % = the ring model)."""
    return ring_factor(n) * pct_of_goodput(nbytes, seconds, goodput)


def pct_of_model(ideal_s: float, seconds: float) -> float:
    """Ideal time / measured time in %: 100 % = the model's bound reached."""
    return 100.0 * ideal_s / seconds


def speed_ratio(t_reference: Optional[float], t_system: Optional[float]) -> Optional[float]:
    """t_reference / t_system (> 1: the system is faster than the reference); None if either
    is missing."""
    if not t_reference or not t_system:
        return None
    return t_reference / t_system


def median(values: Sequence[float]) -> float:
    v = sorted(values)
    if not v:
        raise ValueError("median of nothing")
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else 0.5 * (v[mid - 1] + v[mid])


# --------------------------------------------------------------------------------------------
# Configuration helpers

_SIZE_RE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMG]?)(i?B?)?\s*", re.I)
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_size(text: str) -> int:
    """"4M" -> 4194304 (K/M/G are binary, as in ``byteps-core bench``); plain numbers are bytes."""
    m = _SIZE_RE.fullmatch(text)
    if not m:
        raise ValueError(f"bad size {text!r}: a number with an optional K/M/G suffix")
    value = int(float(m.group(1)) * _UNITS[m.group(2).upper()])
    if value <= 0:
        raise ValueError(f"size must be > 0: {text!r}")
    return value


def format_size(nbytes: int) -> str:
    """4194304 -> "4M" (binary units when exact, else the byte count)."""
    for suffix, unit in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= unit and nbytes % unit == 0:
            return f"{nbytes // unit}{suffix}"
    return str(nbytes)


def parse_k(token: str, n: int) -> tuple[int, str, str]:
    """A server-count token for n workers -> (k, placement, label).

    "n" -> (n, separate, "n"), "n/2" -> (max(1, n//2), separate, "n/2"), "colocated" (or
    "coloc") -> (n, colocated, "coloc"), an integer -> (it, separate, str(it)).  Mixed (a
    colocated server on each worker host plus K CPU hosts; k is K, 1 <= K <= n): "mixed:K" or
    "n+K" with K an integer, "n" or "n/2" -> (K, mixed, "n+K"), e.g. "mixed:n/2" at n=4 ->
    (2, mixed, "n+n/2")."""
    t = token.strip().lower()
    if t.startswith(("mixed:", "n+")):
        cpu = t.split(":", 1)[1] if t.startswith("mixed:") else t[2:]
        if cpu in ("n", "n/2"):
            k = n if cpu == "n" else max(1, n // 2)
        elif cpu.isdigit():
            k = int(cpu)
        else:
            raise ValueError(f"bad mixed k {token!r}: mixed:K or n+K with K a number, n or n/2")
        if not 1 <= k <= n:
            raise ValueError(f"mixed k {token!r} = {k} CPU hosts at n={n}: needs 1 <= k <= n "
                             f"(k = 0 is 'colocated')")
        return k, MIXED, f"n+{cpu}"
    if t == "n":
        return n, SEPARATE, "n"
    if t == "n/2":
        return max(1, n // 2), SEPARATE, "n/2"
    if t in ("colocated", "coloc"):
        return n, COLOCATED, "coloc"
    if t.isdigit() and int(t) >= 1:
        return int(t), SEPARATE, t
    raise ValueError(f"bad k {token!r}: n, n/2, colocated, a number >= 1, or mixed:K / n+K")


def iterations(nbytes: int, budget_bytes: int = 512 << 20, lo: int = 5, hi: int = 50) -> int:
    """Timed iterations for a size: clamp(budget / M, lo, hi), the rule of ``byteps-core bench
    --iters 0`` (budget 512 MiB, 5..50), so small sizes get many samples and 256 MiB gets 5."""
    return max(lo, min(hi, budget_bytes // max(1, nbytes)))


def capped_rate(rate_mbit: float, hosts: int, budget_mbit: float, step: float = 50) -> float:
    """The per-host rate for a testbed of *hosts*: *rate_mbit*, lowered (to a multiple of
    *step*) so that hosts * rate <= *budget_mbit* (the two cores' shaping capacity, see
    reference/machine-facts.md); budget 0 = no cap."""
    if budget_mbit <= 0 or hosts * rate_mbit <= budget_mbit:
        return rate_mbit
    return max(step, math.floor(budget_mbit / hosts / step) * step)


# --------------------------------------------------------------------------------------------
# Rows and tables

# (key, header, format) of the printed table, in order.
COLUMNS: list[tuple[str, str, str]] = [
    ("system", "system", "{}"),
    ("n", "n", "{}"),
    ("k_label", "k", "{}"),
    ("rate_mbit", "R_Mbit", "{:g}"),
    ("size", "size", "{}"),
    ("iters", "iters", "{}"),
    ("time_s", "time_s", "{:.4f}"),
    ("algbw_GBps", "algbw_GBps", "{:.4f}"),
    ("pct_goodput", "%G", "{:.1f}"),
    ("busbw_pct", "busbw%G", "{:.1f}"),
    ("pct_model", "%model", "{:.1f}"),
    ("ratio_to_gloo", "vs_gloo", "{:.2f}"),
    ("theory_ratio", "theory", "{:.2f}"),
]
MISSING = "-"


def make_row(system: str, n: int, k: Optional[int], k_label: str, placement: str,
             rate_mbit: float, nbytes: int, time_s: Optional[float], iters: Optional[int] = None,
             **extra) -> dict:
    """One result row with every derived figure (None where not applicable or not measured).

    ``pct_goodput`` = M/t/G; ``busbw_pct`` = 2(n-1)/n M/t/G for ring systems (None for PS);
    ``pct_model`` = ideal/t (the ring model for ring systems, the PS model for byteps);
    ``theory_ratio`` = t_ring/t_model of this system (1 for ring systems);
    ``ratio_to_gloo`` is filled by :func:`fill_ratios`."""
    g = goodput_Bps(rate_mbit)
    ideal = ideal_time(system, nbytes, n, g, k, placement)
    ring = system != "byteps"
    row = {"system": system, "n": n, "k": k if not ring else None,
           "k_label": k_label if not ring else MISSING,
           "placement": placement if not ring else None, "rate_mbit": rate_mbit,
           "goodput_Bps": g, "bytes": nbytes, "size": format_size(nbytes), "iters": iters,
           "time_s": time_s, "ideal_s": ideal,
           "theory_ratio": 1.0 if ring else theory_ratio(n, k, placement),
           "algbw_GBps": None, "pct_goodput": None, "busbw_pct": None, "pct_model": None,
           "ratio_to_gloo": None}
    if time_s:
        row["algbw_GBps"] = algbw_GBps(nbytes, time_s)
        row["pct_goodput"] = pct_of_goodput(nbytes, time_s, g)
        row["busbw_pct"] = busbw_pct(nbytes, time_s, g, n) if ring else None
        row["pct_model"] = pct_of_model(ideal, time_s) if ideal > 0 else None
    row.update(extra)
    return row


def fill_ratios(rows: Iterable[dict]) -> list[dict]:
    """Sets ``ratio_to_gloo`` = t_gloo / t_row for every row that has a gloo row with the same
    n, size and rate (gloo's own rows get 1.0).  Returns the rows."""
    rows = list(rows)
    gloo = {(r["n"], r["bytes"], r["rate_mbit"]): r["time_s"] for r in rows
            if r["system"] == "gloo" and r.get("time_s")}
    for r in rows:
        r["ratio_to_gloo"] = speed_ratio(gloo.get((r["n"], r["bytes"], r["rate_mbit"])),
                                         r.get("time_s"))
    return rows


def _cell(row: Mapping, key: str, fmt: str) -> str:
    value = row.get(key)
    if value is None or value == "":
        return MISSING
    return fmt.format(value)


def format_table(rows: Sequence[Mapping], columns: Sequence[tuple[str, str, str]] = COLUMNS) -> str:
    """Fixed-width text table (right-aligned, one header line, missing values as "-")."""
    cells = [[h for _, h, _ in columns]]
    cells += [[_cell(r, key, fmt) for key, _, fmt in columns] for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)).rstrip()
                     for line in cells)


def format_markdown(rows: Sequence[Mapping],
                    columns: Sequence[tuple[str, str, str]] = COLUMNS) -> str:
    """The same table in GitHub Markdown (numbers right-aligned)."""
    head = "| " + " | ".join(h for _, h, _ in columns) + " |"
    align = "| " + " | ".join("---" if key == "system" else "---:" for key, _, _ in columns) + " |"
    body = ["| " + " | ".join(_cell(r, key, fmt) for key, _, fmt in columns) + " |" for r in rows]
    return "\n".join([head, align, *body])


def sort_key(row: Mapping) -> tuple:
    """Rows grouped by n, then size, then gloo, mpi, byteps (k = n, n/2, colocated)."""
    system_order = {"gloo": 0, "mpi": 1, "byteps": 2}
    k_order = {"n": 0, "n/2": 1, "coloc": 2}
    return (row["n"], row["bytes"], system_order.get(row["system"], 9),
            k_order.get(row.get("k_label"), 3), row.get("k") or 0)


def format_duration(seconds: float) -> str:
    """123 -> "2m03s", 4000 -> "1h06m40s"."""
    s = max(0, int(round(seconds)))
    h, rem = divmod(s, 3600)
    m, s = divmod(rem, 60)
    if h:
        return f"{h}h{m:02d}m{s:02d}s"
    return f"{m}m{s:02d}s" if m else f"{s}s"
