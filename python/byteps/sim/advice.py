"""How many CPU server machines a byteps job should use, and whether to colocate: ``byteps plan``'s
rule on its closed forms (instant), for launchers that are given no server count.

    from byteps.sim.advice import server_plan
    cpu_servers, colocate, reason = server_plan(n_workers=4, cpu_hosts=2)

The candidates are byteps' placements of ``byteps plan`` (placements.candidates, without the ring,
which runs no servers): a server on each worker machine; servers on k' CPU machines only; mixed,
for k' up to min(cpu_hosts, n_workers).  Each is priced by the closed forms (communication per
byte: closed_forms.py); the pick is plan.pick's: the fastest, and within 1 % of it the fewest CPU
machines.  So with no spare CPU hosts the answer is colocated servers and no CPU servers.  Unknown
NIC rates are taken as equal (only their ratio matters to the formulas).  The formulas leave out
compute, so where backward hides the communication, `byteps plan --model ...` (simulated) may pick
fewer machines; the launchers' default takes the communication-bound answer.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

from . import profiles
from .placements import Cluster
from .plan import plan

NOMINAL_GRAD_BYTES = 100e6  # when not given: the ranking per byte does not depend on it


class ServerPlan(NamedTuple):
    cpu_servers: int   # CPU-only machines to run servers on (0: none)
    colocate: bool     # also a server on every worker machine
    reason: str        # one sentence: the placement, its predicted speedup, the inputs assumed


class AdviceError(ValueError):
    """An impossible input; the message names the argument."""


def _check(n_workers: int, cpu_hosts: int, gpus_per_worker: int, nic_gbps: Optional[float],
           cpu_nic_gbps: Optional[float], grad_bytes: Optional[float]) -> None:
    if not isinstance(n_workers, int) or n_workers < 1:
        raise AdviceError(f"server_plan: n_workers={n_workers!r}: give at least 1 worker machine")
    if not isinstance(cpu_hosts, int) or cpu_hosts < 0:
        raise AdviceError(f"server_plan: cpu_hosts={cpu_hosts!r}: give 0 or more spare CPU machines")
    if not isinstance(gpus_per_worker, int) or gpus_per_worker < 1:
        raise AdviceError(f"server_plan: gpus_per_worker={gpus_per_worker!r}: give at least 1")
    for name, value in (("nic_gbps", nic_gbps), ("cpu_nic_gbps", cpu_nic_gbps), ("grad_bytes", grad_bytes)):
        if value is not None and not value > 0:
            raise AdviceError(f"server_plan: {name}={value!r}: give a positive number, or None if unknown")


def server_plan(n_workers: int, cpu_hosts: int, gpus_per_worker: int = 1, nic_gbps: Optional[float] = None,
                cpu_nic_gbps: Optional[float] = None, grad_bytes: Optional[float] = None) -> ServerPlan:
    """(cpu_servers, colocate, reason) for *n_workers* worker machines and *cpu_hosts* spare CPU
    machines.  *nic_gbps*, *cpu_nic_gbps*: the machines' NIC rates (None: unknown, taken as equal);
    *grad_bytes*: the model's gradient bytes per iteration (only for the times in *reason*)."""
    _check(n_workers, cpu_hosts, gpus_per_worker, nic_gbps, cpu_nic_gbps, grad_bytes)
    rates_known = nic_gbps is not None
    worker_gbps = nic_gbps if rates_known else (cpu_nic_gbps or 1.0)
    cpu_gbps = cpu_nic_gbps if (cpu_nic_gbps is not None and rates_known) else None
    c = Cluster(n=n_workers, gpus=gpus_per_worker, worker_gbps=worker_gbps, cpu_gbps=cpu_gbps, k=cpu_hosts)
    p = plan(c, profiles.synthetic(grad_bytes or NOMINAL_GRAD_BYTES, 0.0), simulate_it=False)
    row = next(r for r in p["candidates"]
               if r["placement"] == p["server_placement"] and r["cpu_servers"] == p["allocate_cpu_servers"])
    k, colocate = p["allocate_cpu_servers"], p["colocate"]
    if k == 0:
        what = "a server on each worker machine (colocated)"
    elif colocate:
        what = f"{k} CPU server machine{'s' if k > 1 else ''} plus a server on each worker machine (mixed)"
    else:
        what = f"servers on {k} CPU machine{'s' if k > 1 else ''} only"
    if n_workers == 1:
        why = "one worker machine: nothing crosses the network"
    elif cpu_hosts == 0:
        why = "no spare CPU machines"
    elif k < min(cpu_hosts, n_workers):
        why = f"more of the {cpu_hosts} spare CPU machines gain under 1 %"
    elif cpu_hosts > n_workers:
        why = f"the fastest; CPU machines beyond the {n_workers} worker machines add nothing"
    else:
        why = f"the fastest with {cpu_hosts} spare CPU machine{'s' if cpu_hosts > 1 else ''}"
    rates = (f"NIC {worker_gbps:g} Gbit/s" + (f", CPU machines {cpu_gbps:g} Gbit/s" if cpu_gbps else "")
             if rates_known else "NIC rates unknown, taken as equal")
    size = f"{grad_bytes / 1e6:.1f} MB of gradients" if grad_bytes else "any gradient size"
    workers = f"{n_workers} worker machine{'s' if n_workers > 1 else ''}"
    return ServerPlan(k, colocate, f"{what}: {why}; communication predicted {row['speedup_vs_ring']:.2f}x as fast "
                                   f"as ring all-reduce ({workers}, {rates}, {size}; byteps plan's closed forms)")
