"""A cluster, the placements byteps can run on it, and one call that simulates any of them.

Placements (n worker machines of G GPUs, k CPU-only machines):

* ``ring``: all-reduce across the machines (Horovod/NCCL, ring.py), no servers;
* ``colocated``: a byteps server on every worker machine, equal shares;
* ``cpu``: servers on the k CPU machines only (non-colocated PS);
* ``mixed``: both, split as the unified architecture's optimum (closed_forms.optimal_split).

The byteps settings default to what its start-up tuner picks (docs/performance.md): partition
P = sqrt(16 MiB * 100 us * B / 2) rounded to a power of two in [256 KiB, 4 MiB] (with servers on
the workers' machines: divided by sqrt(n-1), floor 128 KiB), credit C = max(2 B RTT,
8 max(n, k) P, 16 P) (colocated: 4 max(n, k) P).  ``bare=True`` drops what the closed forms
leave out: latency, summing and the per-partition CPU cost.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from .events import TrainResult, train
from .profiles import Profile
from .ps import PSBackend, PSConfig
from .ring import RingBackend, RingConfig

PLACEMENTS = ("ring", "colocated", "cpu", "mixed")
TCP_GOODPUT = 0.956      # TCP goodput / line rate (measured on the testbed, machine-facts.md)
KIB, MIB = 1024, 1 << 20


@dataclass(frozen=True)
class Cluster:
    n: int                          # worker machines
    gpus: int = 8                   # GPUs per worker machine
    worker_gbps: float = 25.0       # NIC line rate of a worker machine, Gbit/s each way
    cpu_gbps: Optional[float] = None  # of a CPU machine (default: worker_gbps)
    k: int = 0                      # CPU machines used as servers
    goodput: float = TCP_GOODPUT    # bytes that arrive / line rate
    intra_gbps: float = 1200.0      # local reduce bus bandwidth (NVLink ~150 GB/s); PCIe ~100
    sum_gbps: float = 100.0         # what one server sums, Gbit/s (12.5 GB/s: the 4 MiB reducer figure)
    latency_s: float = 50e-6        # one-way
    partition_cost_s: float = 0.0   # CPU per partition message per process (ps.py); 0: off (docs/simulator.md)
    partition_bytes: Optional[int] = None   # None: the tuner's choice
    credit_bytes: Optional[float] = None    # None: the tuner's choice
    cycle_s: float = 5e-3           # Horovod's cycle
    fusion_bytes: int = 64 * MIB    # Horovod's fusion buffer
    flat_ring: bool = False         # one ring through all GPUs instead of hierarchical
    priority: bool = True           # byteps' priority scheduling (False: FIFO)

    @property
    def worker_rate(self) -> float:
        return self.worker_gbps * 1e9 / 8 * self.goodput

    @property
    def cpu_rate(self) -> float:
        return (self.worker_gbps if self.cpu_gbps is None else self.cpu_gbps) * 1e9 / 8 * self.goodput


def _pow2_round(x: float, lo: int, hi: int) -> int:
    p = 2 ** round(math.log2(max(x, 1.0)))
    return int(min(max(p, lo), hi))


def tuned_partition(c: Cluster, colocated: bool) -> int:
    p = math.sqrt(16 * MIB * 100e-6 * c.worker_rate / 2)
    if colocated and c.n > 1:
        return _pow2_round(p / math.sqrt(c.n - 1), 128 * KIB, 4 * MIB)
    return _pow2_round(p, 256 * KIB, 4 * MIB)


def tuned_credit(c: Cluster, partition: int, colocated: bool, k: int) -> float:
    per = 4 if colocated else 8
    return max(2 * c.worker_rate * 2 * c.latency_s, per * max(c.n, k) * partition, 16 * partition)


def ps_config(c: Cluster, placement: str, bare: bool = False) -> PSConfig:
    colocated = placement in ("colocated", "mixed")
    k = 0 if placement == "colocated" else c.k
    if placement in ("cpu", "mixed") and k < 1:
        raise ValueError(f"placement {placement!r} needs CPU machines: give --cpu-machines K >= 1")
    p = c.partition_bytes or tuned_partition(c, colocated)
    credit = c.credit_bytes if c.credit_bytes is not None else tuned_credit(c, p, colocated, k)
    return PSConfig(n=c.n, k=k, colocated=colocated, worker_rate=c.worker_rate, cpu_rate=c.cpu_rate,
                    partition_bytes=p, credit_bytes=credit, gpus=c.gpus,
                    intra_rate=c.intra_gbps * 1e9 / 8, sum_rate=float("inf") if bare else c.sum_gbps * 1e9 / 8,
                    latency_s=0.0 if bare else c.latency_s, priority=c.priority,
                    partition_cost_s=0.0 if bare else c.partition_cost_s)


def ring_config(c: Cluster, bare: bool = False) -> RingConfig:
    return RingConfig(n=c.n, rate=c.worker_rate, gpus=c.gpus, intra_rate=c.intra_gbps * 1e9 / 8,
                      fusion_bytes=c.fusion_bytes, cycle_s=0.0 if bare else c.cycle_s,
                      step_latency_s=0.0 if bare else c.latency_s, flat=c.flat_ring)


def backend(c: Cluster, placement: str, bare: bool = False):
    if placement == "ring":
        return RingBackend(ring_config(c, bare))
    if placement in PLACEMENTS:
        return PSBackend(ps_config(c, placement, bare))
    raise ValueError(f"unknown placement {placement!r} (one of {', '.join(PLACEMENTS)})")


def simulate(c: Cluster, placement: str, profile: Profile, iterations: int = 3,
             barrier: Optional[str] = None, bare: bool = False) -> TrainResult:
    """One placement's steady-state iteration.  *barrier*: "layer" (byteps' per-layer wait; the
    default for every placement, so that they differ only in communication) or "step"."""
    b = backend(c, placement, bare)
    return train(profile, b, iterations, barrier or "layer", network=b.network())


def candidates(c: Cluster) -> list[tuple[str, Cluster]]:
    """Every placement worth comparing with up to c.k CPU machines: ring, colocated, and for
    each k' in 1..min(c.k, n) (k' > n adds nothing to mixed, and CPU-only is NIC-bound at n)
    CPU-only and mixed."""
    out = [("ring", replace(c, k=0)), ("colocated", replace(c, k=0))]
    if c.n > 1:
        for k in sorted({kk for kk in (1, c.k // 4, c.k // 2, c.k, min(c.k, c.n)) if 1 <= kk <= min(c.k, c.n)}):
            out += [("cpu", replace(c, k=k)), ("mixed", replace(c, k=k))]
    return out
