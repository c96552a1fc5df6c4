"""``byteps plan``: which placement to run, the predicted iteration time, the speedup over ring.

    byteps plan --workers 16 --gpus-per-worker 8 --nic-gbps 25 --cpu-machines 8 --model vgg16
    byteps plan --workers 4 --nic-gbps 1 --cpu-machines 2 --grad-bytes 100M --compute-ms 0

Every candidate placement (ring all-reduce; a server on every worker machine; servers on k' CPU
machines only; mixed, for k' up to the CPU machines available, at most n) is priced twice: by
the closed forms (communication only, closed_forms.py) and by the simulator (one steady-state
iteration with compute, placements.py).  The recommendation is the fastest simulated placement;
within 1 % of it, the one with fewer CPU machines.  ``--no-simulate`` ranks by the formulas alone.
The same rule over the placements that run servers (all but the ring) says what a byteps job
should allocate: "servers: allocate K CPU server machines; colocate servers on the worker
machines: yes/no" (JSON: allocate_cpu_servers, colocate, server_placement; advice.server_plan
gives the --no-simulate answer to launchers).
Errors name the flag and what to give, and exit with status 2.

``--probe HOST:PORT`` measures the rate against ``byteps plan --listen PORT`` on another worker
machine (a few seconds of TCP each way, probe.py) instead of taking ``--nic-gbps``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import replace
from typing import Optional, Sequence

from . import closed_forms as cf
from . import probe, profiles
from .placements import Cluster, candidates, simulate

EXIT_USAGE = 2
_SUFFIX = {"": 1, "K": 1e3, "M": 1e6, "G": 1e9, "KI": 1024, "MI": 1 << 20, "GI": 1 << 30}


class PlanError(ValueError):
    """A missing or inconsistent input; the message names the flag and what to give."""


def parse_bytes(text: str, flag: str) -> float:
    m = re.fullmatch(r"\s*([0-9.]+(?:e[0-9]+)?)\s*([KMG]i?)?B?\s*", text, re.IGNORECASE)
    if not m:
        raise PlanError(f"{flag}={text!r}: expected a number of bytes, e.g. 100M, 512MiB or 1e8")
    return float(m.group(1)) * _SUFFIX[(m.group(2) or "").upper()]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="byteps plan", description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, help="worker (GPU) machines, n")
    ap.add_argument("--gpus-per-worker", type=int, default=8, help="GPUs per worker machine (default 8)")
    ap.add_argument("--nic-gbps", type=float, help="worker machines' NIC line rate, Gbit/s each way")
    ap.add_argument("--cpu-nic-gbps", type=float, help="CPU machines' NIC rate (default: --nic-gbps)")
    ap.add_argument("--cpu-machines", type=int, default=0, help="spare CPU machines available, k (default 0)")
    ap.add_argument("--model", help=f"a profile: {', '.join(profiles.NAMES)}, or a profile JSON file")
    ap.add_argument("--grad-bytes", help="instead of --model: gradient bytes per iteration (e.g. 100M)")
    ap.add_argument("--compute-ms", type=float, help="with --grad-bytes: forward + backward per iteration, ms")
    ap.add_argument("--batch", type=int, help="per-GPU batch (scales the profile's compute; default the profile's)")
    ap.add_argument("--goodput", type=float, default=0.956, help="bytes delivered / line rate (TCP: 0.956)")
    ap.add_argument("--intra-gbps", type=float, default=1200.0, help="local reduce bandwidth in a machine (NVLink 1200)")
    ap.add_argument("--sum-gbps", type=float, default=100.0, help="what one server sums, Gbit/s (default 100)")
    ap.add_argument("--latency-us", type=float, default=50.0, help="one-way latency between machines, us")
    ap.add_argument("--partition-cost-us", type=float, default=0.0,
                    help="CPU per partition message per process, us, overlapping the wire (default 0: off)")
    ap.add_argument("--partition-bytes", help="byteps partition size (default: what the tuner picks)")
    ap.add_argument("--credit-bytes", help="byteps credit (default: what the tuner picks)")
    ap.add_argument("--flat-ring", action="store_true", help="ring through all GPUs (default: hierarchical)")
    ap.add_argument("--probe", metavar="HOST:PORT", help="measure the rate to a machine running `byteps plan --listen PORT` "
                    "(instead of --nic-gbps)")
    ap.add_argument("--probe-seconds", type=float, default=2.0, help="seconds per direction of --probe (default 2)")
    ap.add_argument("--listen", type=int, metavar="PORT", help="serve one --probe on PORT, print the rate, exit")
    ap.add_argument("--listen-timeout", type=float, default=60.0, help="seconds --listen waits for the probe")
    ap.add_argument("--iterations", type=int, default=3, help="simulated iterations (steady state)")
    ap.add_argument("--no-simulate", action="store_true", help="closed forms only (instant)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of text")
    return ap


def _cluster_and_profile(a: argparse.Namespace) -> tuple[Cluster, profiles.Profile]:
    if a.workers is None:
        raise PlanError("--workers is missing: give the number of worker (GPU) machines, e.g. --workers 16")
    if a.workers < 1:
        raise PlanError(f"--workers {a.workers}: give at least 1 worker machine")
    if a.gpus_per_worker < 1:
        raise PlanError(f"--gpus-per-worker {a.gpus_per_worker}: give at least 1")
    if a.nic_gbps is not None and a.probe is not None:
        raise PlanError("give --nic-gbps or --probe, not both (--probe measures the rate --nic-gbps gives)")
    if a.nic_gbps is None and a.probe is None:
        raise PlanError("no NIC rate: give --nic-gbps R, the worker machines' line rate in Gbit/s (e.g. 25), or "
                        "--probe HOST:PORT against `byteps plan --listen PORT` on another worker machine")
    if a.probe is not None:
        if not 0 < a.probe_seconds <= 60:
            raise PlanError(f"--probe-seconds {a.probe_seconds}: give a time in (0, 60] s")
        try:
            out_rate, in_rate = probe.probe(a.probe, a.probe_seconds)
        except probe.ProbeError as err:
            raise PlanError(str(err)) from err
        a.probed = {"out_gbps": out_rate * 8 / 1e9, "in_gbps": in_rate * 8 / 1e9}
        a.nic_gbps, a.goodput = min(out_rate, in_rate) * 8 / 1e9, 1.0  # measured goodput: no factor on top
    if not a.nic_gbps > 0:
        raise PlanError(f"--nic-gbps {a.nic_gbps}: the NIC rate must be > 0 Gbit/s")
    if a.cpu_machines < 0:
        raise PlanError(f"--cpu-machines {a.cpu_machines}: give 0 or more spare CPU machines")
    if a.cpu_nic_gbps is not None:
        if not a.cpu_nic_gbps > 0:
            raise PlanError(f"--cpu-nic-gbps {a.cpu_nic_gbps}: the CPU machines' NIC rate must be > 0 Gbit/s")
        if a.cpu_machines == 0:
            raise PlanError("--cpu-nic-gbps is the CPU machines' rate but --cpu-machines is 0: "
                            "give --cpu-machines K, or drop --cpu-nic-gbps")
    if not a.partition_cost_us >= 0:
        raise PlanError(f"--partition-cost-us {a.partition_cost_us}: give 0 or more microseconds")
    if not 0 < a.goodput <= 1:
        raise PlanError(f"--goodput {a.goodput}: a fraction in (0, 1]")
    if a.model is not None and (a.grad_bytes is not None or a.compute_ms is not None):
        raise PlanError("give --model, or --grad-bytes with --compute-ms, not both")
    if a.model is not None:
        try:
            prof = profiles.load(a.model)
        except ValueError as err:
            raise PlanError(f"--model: {err}") from err
        if a.batch is not None:
            if a.batch < 1 or not prof.batch:
                raise PlanError(f"--batch {a.batch}: give a batch >= 1 (profile {prof.model} has batch {prof.batch})")
            prof = prof.scaled(a.batch / prof.batch)
    elif a.grad_bytes is not None or a.compute_ms is not None:
        if a.grad_bytes is None:
            raise PlanError("--compute-ms needs --grad-bytes: give the gradient bytes per iteration, e.g. --grad-bytes 100M")
        if a.compute_ms is None:
            raise PlanError("--grad-bytes needs --compute-ms: give forward + backward time per iteration in ms (0: communication only)")
        if a.batch is not None:
            raise PlanError("--batch scales a --model's profile; with --grad-bytes give --compute-ms for your batch")
        try:
            prof = profiles.synthetic(parse_bytes(a.grad_bytes, "--grad-bytes"), a.compute_ms / 1e3)
        except ValueError as err:
            raise PlanError(str(err)) from err
    else:
        raise PlanError(f"no model: give --model ({', '.join(profiles.NAMES)}), or --grad-bytes B and --compute-ms T")
    c = Cluster(n=a.workers, gpus=a.gpus_per_worker, worker_gbps=a.nic_gbps, cpu_gbps=a.cpu_nic_gbps,
                k=a.cpu_machines, goodput=a.goodput, intra_gbps=a.intra_gbps, sum_gbps=a.sum_gbps,
                latency_s=a.latency_us * 1e-6, flat_ring=a.flat_ring, partition_cost_s=a.partition_cost_us * 1e-6,
                partition_bytes=int(parse_bytes(a.partition_bytes, "--partition-bytes")) if a.partition_bytes else None,
                credit_bytes=parse_bytes(a.credit_bytes, "--credit-bytes") if a.credit_bytes else None)
    return c, prof


def formula_s(c: Cluster, placement: str, nbytes: float) -> float:
    """Communication time of one iteration's gradients by the closed forms."""
    if placement in ("ring", "colocated"):
        n = c.n * c.gpus if (placement == "ring" and c.flat_ring) else c.n
        return cf.ring_time(n, c.worker_rate) * nbytes
    if placement == "cpu":
        return cf.cpu_only_time(c.n, c.k, c.cpu_rate, c.worker_rate) * nbytes
    return cf.optimal_split(c.n, c.k, c.cpu_rate, c.worker_rate).time * nbytes


def pick(rows: list[dict], key: str) -> dict:
    """The plan's rule: the fastest row by *key*; within 1 % of it, the fewest CPU machines, then
    the list's order (simplest first: ring, colocated, CPU-only, mixed)."""
    best_t = min(r[key] for r in rows)
    return min((r for r in rows if r[key] <= best_t * 1.01), key=lambda r: r["cpu_servers"])


def plan(c: Cluster, prof: profiles.Profile, simulate_it: bool = True, iterations: int = 3) -> dict:
    M = prof.nbytes
    rows = []
    for placement, cc in candidates(c):
        row = {"placement": placement, "cpu_servers": cc.k, "colocated": placement in ("colocated", "mixed"),
               "comm_formula_s": formula_s(cc, placement, M)}
        if placement == "mixed":
            s = cf.optimal_split(cc.n, cc.k, cc.cpu_rate, cc.worker_rate)
            row["share_per_cpu_server"], row["share_per_colocated_server"] = s.cpu_share, s.colocated_share
        elif placement == "cpu":
            row["share_per_cpu_server"] = 1.0 / cc.k
        elif placement == "colocated":
            row["share_per_colocated_server"] = 1.0 / cc.n
        if simulate_it:
            r = simulate(cc, placement, prof, iterations)
            row["iteration_s"], row["stall_s"] = r.iteration_s, r.stall_s
        rows.append(row)
    key = "iteration_s" if simulate_it else "comm_formula_s"
    ring = rows[0]
    for row in rows:
        row["speedup_vs_ring"] = ring[key] / row[key] if row[key] > 0 else 1.0
    best = pick(rows, key)
    # What a byteps job should allocate: the same rule over the placements with servers.
    servers = pick([r for r in rows if r["placement"] != "ring"], key)
    bound = formula_s(replace(c, k=min(c.k, c.n)), "mixed" if 0 < c.k < c.n else ("cpu" if c.k else "ring"), M)
    return {"workers": c.n, "gpus_per_worker": c.gpus, "nic_gbps": c.worker_gbps,
            "cpu_nic_gbps": c.cpu_gbps or c.worker_gbps, "cpu_machines_available": c.k, "goodput": c.goodput,
            "model": prof.model, "grad_bytes": M, "compute_s": prof.compute_s, "simulated": simulate_it,
            "recommended": best, "allocate_cpu_servers": servers["cpu_servers"], "colocate": servers["colocated"],
            "server_placement": servers["placement"], "ring": ring, "bound_comm_s": bound,
            "bound_speedup_vs_ring": ring["comm_formula_s"] / bound if bound > 0 else 1.0, "candidates": rows}


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def describe(row: dict) -> str:
    if row["placement"] == "ring":
        return "ring all-reduce (no servers)"
    if row["placement"] == "colocated":
        return "a server on each worker machine (colocated), equal shares"
    if row["placement"] == "cpu":
        return f"servers on {_n(row['cpu_servers'], 'CPU machine')} only (non-colocated)"
    if not row.get("share_per_colocated_server"):
        return (f"mixed: {_n(row['cpu_servers'], 'CPU server')} + a server on each worker machine; the CPU machines "
                f"are fast enough to take every byte, so the colocated servers get none")
    return f"mixed: {_n(row['cpu_servers'], 'CPU server')} + a server on each worker machine"


def _row(p: dict, placement: str, cpu_servers: int) -> dict:
    return next(r for r in p["candidates"] if r["placement"] == placement and r["cpu_servers"] == cpu_servers)


def render(p: dict) -> str:
    M, n = p["grad_bytes"], p["workers"]
    lines = [f"byteps plan: {_n(n, 'worker machine')} x {_n(p['gpus_per_worker'], 'GPU')}, NIC {p['nic_gbps']:g} Gbit/s "
             f"(CPU machines {p['cpu_nic_gbps']:g}), {_n(p['cpu_machines_available'], 'spare CPU machine')}; model "
             f"{p['model']}: {M / 1e6:.1f} MB of gradients, {p['compute_s'] * 1e3:.1f} ms compute per iteration"]
    if p.get("probe"):
        lines.append(f"probe: {p['probe']['out_gbps']:.2f} Gbit/s out, {p['probe']['in_gbps']:.2f} Gbit/s in "
                     f"(TCP goodput); the plan uses the smaller")
    r = p["recommended"]
    lines.append(f"use: {describe(r)}")
    if "share_per_cpu_server" in r:
        lines.append(f"  each CPU server: {r['share_per_cpu_server'] * 100:.2f} % of the bytes "
                     f"({r['share_per_cpu_server'] * M / 1e6:.2f} MB)")
    if r.get("share_per_colocated_server"):
        lines.append(f"  each colocated server: {r['share_per_colocated_server'] * 100:.2f} % "
                     f"({r['share_per_colocated_server'] * M / 1e6:.2f} MB)")
    yes_no = "yes" if p["colocate"] else "no"
    servers = (f"servers: allocate {_n(p['allocate_cpu_servers'], 'CPU server machine')}; "
               f"colocate servers on the worker machines: {yes_no}")
    if r["placement"] == "ring":
        servers += f" (for a byteps job: {describe(_row(p, p['server_placement'], p['allocate_cpu_servers']))})"
    lines.append(servers)
    ring = p["ring"]
    if p["simulated"]:
        lines.append(f"  predicted iteration {r['iteration_s'] * 1e3:.1f} ms (ring all-reduce "
                     f"{ring['iteration_s'] * 1e3:.1f} ms): {r['speedup_vs_ring']:.2f}x over ring")
    lines.append(f"  communication by the formula {r['comm_formula_s'] * 1e3:.1f} ms (ring "
                 f"{ring['comm_formula_s'] * 1e3:.1f} ms)")
    used = min(p["cpu_machines_available"], n)
    where = _n(used, "CPU machine") if used else "no CPU machines"
    lines.append(f"bound (formula, {where}, communication only): "
                 f"{p['bound_comm_s'] * 1e3:.1f} ms, {p['bound_speedup_vs_ring']:.2f}x over ring")
    lines.append("")
    head = f"{'placement':<10} {'CPU servers':>11} {'comm formula':>13}"
    head += f" {'iteration':>10} {'stall':>9}" if p["simulated"] else ""
    lines.append(head + f" {'vs ring':>8}")
    for row in p["candidates"]:
        line = f"{row['placement']:<10} {row['cpu_servers']:>11} {row['comm_formula_s'] * 1e3:>10.1f} ms"
        if p["simulated"]:
            line += f" {row['iteration_s'] * 1e3:>7.1f} ms {row['stall_s'] * 1e3:>6.1f} ms"
        lines.append(line + f" {row['speedup_vs_ring']:>7.2f}x")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    args.probed = None
    if args.listen is not None:
        if args.probe is not None:
            print("byteps plan: error: give --listen (on one machine) or --probe (on the other), not both", file=sys.stderr)
            return EXIT_USAGE
        try:
            rate = probe.listen(args.listen, args.listen_timeout)
        except (probe.ProbeError, OSError) as err:
            print(f"byteps plan: error: --listen {args.listen}: {err}", file=sys.stderr)
            return EXIT_USAGE
        print(f"byteps plan: probed: received {rate * 8 / 1e9:.2f} Gbit/s")
        return 0
    try:
        c, prof = _cluster_and_profile(args)
        if args.iterations < 1:
            raise PlanError(f"--iterations {args.iterations}: give at least 1")
        p = plan(c, prof, not args.no_simulate, args.iterations)
        if args.probed:
            p["probe"] = args.probed
    except PlanError as err:
        print(f"byteps plan: error: {err}", file=sys.stderr)
        return EXIT_USAGE
    print(json.dumps(p, indent=1) if args.json else render(p))
    return 0


if __name__ == "__main__":
    sys.exit(main())
