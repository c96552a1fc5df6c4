"""Closed-form communication times and the mixed split (mirrors src/protocol/mixed_split.cc).

n worker machines, k CPU-only server machines, M gradient bytes, NIC rates in bytes/s (each
direction, full duplex).  All times are for one push_pull of M bytes with nothing else on the
links:

* ring all-reduce:            2(n-1) M / (n B)
* CPU-only PS (k servers):    max(M / B, n M / (k B))
* mixed (n colocated + k CPU): each CPU server takes 2(n-1)/(n^2+kn-2k) M, each colocated server
  (n-k)/(n^2+kn-2k) M, and t = 2n(n-1) M / ((n^2+kn-2k) B).  With unequal rates the same balance
  as ``OptimalSplit``: n x / B_cpu = (1 + (n-2) y) / B_worker with k x + n y = 1.

Pure functions; the C++ planner (src/protocol/mixed_split.cc) computes the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MixedSplit:
    cpu_share: float        # of M, per CPU server
    colocated_share: float  # of M, per colocated server
    time: float             # seconds per byte of gradient (multiply by M)


def _check(n: int, k: int, cpu_rate: float, worker_rate: float) -> None:
    if n < 1:
        raise ValueError(f"mixed split: {n} worker machines (at least 1)")
    if k < 0:
        raise ValueError(f"mixed split: {k} CPU server machines (0 or more)")
    if not (cpu_rate > 0 and worker_rate > 0):
        raise ValueError(f"mixed split: NIC rates must be positive (CPU machines {cpu_rate}, "
                         f"worker machines {worker_rate})")


def optimal_split(n: int, k: int, cpu_rate: float = 1.0, worker_rate: float = 1.0) -> MixedSplit:
    """The byte share per CPU server and per colocated server, and the time per byte."""
    _check(n, k, cpu_rate, worker_rate)
    if n == 1:  # nothing crosses the network: the colocated server keeps it all
        return MixedSplit(0.0, 1.0, 0.0)
    if k == 0:  # colocated only: all-reduce's split
        y = 1.0 / n
        return MixedSplit(0.0, y, (1 + (n - 2) * y) / worker_rate)
    if n == 2:
        # A worker machine moves M whatever its server takes: the CPU servers take what they move
        # in that time (each moves n x M at its rate: n x / Bc <= 1 / Bw).
        x = min(1.0 / k, cpu_rate / (n * worker_rate))
        y = (1 - k * x) / n
    else:
        t = (2.0 * n - 2) / (n - 2) / (k * cpu_rate / n + n * worker_rate / (n - 2))
        x = t * cpu_rate / n
        y = (t * worker_rate - 1) / (n - 2)
        if y < 0 or k * x > 1:  # CPU servers fast enough to take it all
            x, y = 1.0 / k, 0.0
    time = max(n * x / cpu_rate, (1 + (n - 2) * y) / worker_rate)
    return MixedSplit(x, y, time)


def ring_time(n: int, rate: float = 1.0) -> float:
    """Ring all-reduce's time per byte: 2(n-1)/(n B); 0 for one machine."""
    return 0.0 if n <= 1 else 2.0 * (n - 1) / (n * rate)


def cpu_only_time(n: int, k: int, rate: float = 1.0, worker_rate: float | None = None) -> float:
    """Servers on k CPU machines only: max(M / B_worker, n M / (k B_cpu)) per byte."""
    if k < 1:
        raise ValueError(f"CPU-only placement needs at least 1 CPU machine, got k={k}")
    bw = rate if worker_rate is None else worker_rate
    return max(1.0 / bw, n / (k * rate))


def colocated_time(n: int, rate: float = 1.0) -> float:
    """A server on every worker machine, equal shares: the ring's traffic, 2(n-1)/(n B)."""
    return ring_time(n, rate)


def mixed_formula_time(n: int, k: int, rate: float = 1.0) -> float:
    """The paper's formula at equal rates: 2n(n-1)/((n^2+kn-2k) B) per byte."""
    if n <= 1:
        return 0.0
    return 2.0 * n * (n - 1) / ((n * n + k * n - 2 * k) * rate)


def server_shares(n: int, colocated: list[bool], cpu_rate: float = 1.0,
                  worker_rate: float = 1.0) -> list[float]:
    """Each server's share (server order): equal when all or none are colocated; mixed needs
    exactly one colocated server per worker machine."""
    servers, on_workers = len(colocated), sum(1 for c in colocated if c)
    if servers == 0:
        raise ValueError("mixed split: no servers")
    if on_workers in (0, servers):
        return [1.0 / servers] * servers
    if on_workers != n:
        raise ValueError(
            f"a mixed placement needs one server on each of the {n} worker machines, but "
            f"{on_workers} of the {servers} servers run on worker machines")
    s = optimal_split(n, servers - on_workers, cpu_rate, worker_rate)
    return [s.colocated_share if c else s.cpu_share for c in colocated]


def assign_partitions(lengths: list[int], shares: list[float]) -> list[int]:
    """The server of each partition, in order: the one furthest below its byte share (load /
    share smallest after adding the partition; ties: lowest index), so each server ends within
    one partition of share * total.  Servers with share 0 get nothing."""
    if not shares or not any(s > 0 for s in shares):
        raise ValueError(f"assign_partitions: no server has a positive share ({shares})")
    loads = [0.0] * len(shares)
    live = [i for i, s in enumerate(shares) if s > 0]
    out = []
    for length in lengths:
        best = min(live, key=lambda i: ((loads[i] + max(length, 1)) / shares[i], i))
        loads[best] += max(length, 1)
        out.append(best)
    return out
