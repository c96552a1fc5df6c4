"""byteps.sim.advice.server_plan: the launchers' default server count, by byteps plan's own rule on
the closed forms (and as fast as a launcher needs)."""

from __future__ import annotations

import json
import time

import pytest

from byteps.sim import plan
from byteps.sim.advice import AdviceError, ServerPlan, server_plan


@pytest.mark.parametrize("n,k,rates,expected", [
    # no spare CPU machines: colocated
    (1, 0, {}, (0, True)), (4, 0, {}, (0, True)), (8, 0, {"nic_gbps": 25}, (0, True)),
    # one worker machine: nothing crosses the network, CPU machines add nothing
    (1, 3, {}, (0, True)),
    # n = 2: every placement moves M per worker NIC; within 1 % the fewest CPU machines win
    (2, 2, {}, (0, True)),
    # k < n: mixed (n = 4, k = 2: 1.25x over ring, 2n(n-1)/(n^2+kn-2k))
    (4, 2, {}, (2, True)), (8, 4, {}, (4, True)), (16, 8, {"nic_gbps": 100}, (8, True)),
    # k = n: CPU-only reaches M / B, mixed at k = n ties with more servers: CPU-only
    (4, 4, {}, (4, False)), (8, 8, {}, (8, False)),
    # more CPU machines than workers: at most n are used
    (4, 8, {}, (4, False)),
    # unequal rates: one 80 Gbit/s CPU machine takes everything at the 10 Gbit/s worker NIC's M / B
    (8, 2, {"nic_gbps": 10, "cpu_nic_gbps": 80}, (1, False)),
    (8, 2, {"nic_gbps": 10, "cpu_nic_gbps": 20}, (2, True)),
])
def test_the_pick(n, k, rates, expected):
    got = server_plan(n, k, **rates)
    assert isinstance(got, ServerPlan) and (got.cpu_servers, got.colocate) == expected, got
    assert got.reason and f"{n} worker machine" in got.reason


def test_the_reason_names_the_placement_and_the_speedup():
    cpu_servers, colocate, reason = server_plan(4, 2, grad_bytes=100e6)
    assert (cpu_servers, colocate) == (2, True)
    assert reason.startswith("2 CPU server machines plus a server on each worker machine (mixed)")
    assert "1.25x as fast as ring all-reduce" in reason and "NIC rates unknown, taken as equal" in reason
    assert "100.0 MB of gradients" in reason
    assert "no spare CPU machines" in server_plan(4, 0).reason


# (--cpu-nic-gbps needs --cpu-machines >= 1: k = 0 only with equal rates)
@pytest.mark.parametrize("n,k,cpu_gbps", [(n, k, r) for n in (2, 4, 8, 16, 64) for k in (0, 1, 2, 3, 4, 8, 32)
                                          for r in (None, 5.0, 40.0) if k > 0 or r is None])
def test_same_answer_as_byteps_plan_no_simulate(capsys, n, k, cpu_gbps):
    argv = ["--workers", str(n), "--gpus-per-worker", "8", "--nic-gbps", "10", "--cpu-machines", str(k),
            "--grad-bytes", "300M", "--compute-ms", "0", "--no-simulate", "--json"]
    if cpu_gbps is not None:
        argv += ["--cpu-nic-gbps", str(cpu_gbps)]
    assert plan.main(argv) == 0
    p = json.loads(capsys.readouterr().out)
    got = server_plan(n, k, gpus_per_worker=8, nic_gbps=10, cpu_nic_gbps=cpu_gbps, grad_bytes=300e6)
    assert (got.cpu_servers, got.colocate) == (p["allocate_cpu_servers"], p["colocate"])
    assert got.cpu_servers <= min(n, k)


def test_unknown_rates_are_equal_rates_and_the_size_does_not_change_the_pick():
    for n, k in [(4, 2), (8, 3), (16, 16)]:
        unknown = server_plan(n, k)
        assert unknown[:2] == server_plan(n, k, nic_gbps=25)[:2] == server_plan(n, k, nic_gbps=25, cpu_nic_gbps=25)[:2]
        assert unknown[:2] == server_plan(n, k, grad_bytes=1e6)[:2] == server_plan(n, k, grad_bytes=1e10)[:2]


def test_instant():
    server_plan(4, 2)  # imports done
    worst = 0.0
    for n in (1, 2, 8, 128, 1024):
        for k in (0, 1, n // 2, n, 4 * n):
            t = time.perf_counter()
            server_plan(n, k, gpus_per_worker=8, nic_gbps=25, cpu_nic_gbps=None if k == 0 else 100)
            worst = max(worst, time.perf_counter() - t)
    assert worst < 0.05, f"server_plan took {worst * 1e3:.1f} ms (a launcher needs under 50 ms)"


@pytest.mark.parametrize("args,kwargs,what", [
    ((0, 2), {}, "n_workers=0"),
    ((4, -1), {}, "cpu_hosts=-1"),
    ((4, 2), {"gpus_per_worker": 0}, "gpus_per_worker=0"),
    ((4, 2), {"nic_gbps": 0}, "nic_gbps=0"),
    ((4, 2), {"cpu_nic_gbps": -5.0}, "cpu_nic_gbps=-5.0"),
    ((4, 2), {"grad_bytes": 0}, "grad_bytes=0"),
    ((4.0, 2), {}, "n_workers=4.0"),
])
def test_named_errors(args, kwargs, what):
    with pytest.raises(AdviceError, match="server_plan: ") as err:
        server_plan(*args, **kwargs)
    assert what in str(err.value)
