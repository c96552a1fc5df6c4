"""The simulator's per-partition CPU cost (ps.py, partition_cost_s): hidden behind the wire on the
testbed's links, the limit where a partition's wire time is shorter than the cost."""

from __future__ import annotations

import pytest

from byteps.sim import placements as pl
from byteps.sim import plan, profiles
from byteps.sim.ps import PSBackend, PSConfig

MIB = 1 << 20


def push_pull_s(n, k, placement, gbps, mib, partition, cost, latency=0.0, credit_parts=64):
    c = pl.Cluster(n=n, k=k, gpus=1, worker_gbps=gbps, latency_s=latency, partition_bytes=partition,
                   credit_bytes=credit_parts * partition, sum_gbps=1e6, partition_cost_s=cost)
    return pl.simulate(c, placement, profiles.single_tensor(mib * MIB), iterations=1).iteration_s


@pytest.mark.parametrize("n,k,placement", [(4, 4, "cpu"), (8, 8, "cpu"), (4, 0, "colocated"), (4, 2, "mixed")])
def test_hidden_on_the_testbeds_links(n, k, placement):
    # 1 Gbit/s, 256 KiB partitions (2.2 ms on the wire), 0.2 ms one way: 100 us per partition and
    # per push at the servers changes one push_pull of 16 MiB by under 1 %.
    off = push_pull_s(n, k, placement, 1.0, 16, 256 * 1024, 0.0, latency=0.2e-3)
    on = push_pull_s(n, k, placement, 1.0, 16, 256 * 1024, 100e-6, latency=0.2e-3)
    assert on == pytest.approx(off, rel=0.01) and on >= off * 0.999


def test_the_workers_dispatcher_is_the_limit_on_a_fast_nic():
    # 100 Gbit/s, 128 KiB partitions: 11 us on the wire, 100 us of CPU each: 512 partitions in a
    # row on the worker's one dispatcher thread.
    t = push_pull_s(2, 2, "cpu", 100.0, 64, 128 * 1024, 100e-6)
    assert t == pytest.approx(512 * 100e-6, rel=0.05)
    assert push_pull_s(2, 2, "cpu", 100.0, 64, 128 * 1024, 0.0) < t / 5


def test_a_cpu_server_handles_every_workers_push():
    # 8 workers, 1 CPU server, 1 MiB partitions at 400 Gbit/s: the server spends 8 x 100 us on each
    # of the 64 partitions (51.2 ms), more than its NIC needs (8 x 64 MiB at 47.8 GB/s = 11 ms).
    t = push_pull_s(8, 1, "cpu", 400.0, 64, MIB, 100e-6)
    assert t == pytest.approx(64 * 8 * 100e-6, rel=0.05)


def test_colocated_servers_cost_one_handling_per_partition_per_machine():
    # averaged over the n machines: the dispatcher's c and the colocated server's c per partition,
    # on two threads, so (M / P) c in all.
    t = push_pull_s(4, 0, "colocated", 400.0, 64, 128 * 1024, 100e-6)
    assert t == pytest.approx(512 * 100e-6, rel=0.05)


def test_bare_drops_it_and_a_negative_cost_is_named():
    c = pl.Cluster(n=2, k=2, gpus=1, worker_gbps=100.0, partition_bytes=128 * 1024, partition_cost_s=1e-3)
    assert pl.ps_config(c, "cpu", bare=True).partition_cost_s == 0.0
    assert pl.ps_config(c, "cpu").partition_cost_s == 1e-3
    with pytest.raises(ValueError, match="partition_cost_s -1"):
        PSBackend(PSConfig(n=2, k=2, colocated=False, worker_rate=1.0, cpu_rate=1.0, partition_cost_s=-1))


def test_byteps_plan_flag(capsys):
    argv = ["--workers", "2", "--gpus-per-worker", "1", "--nic-gbps", "100", "--cpu-machines", "2",
            "--grad-bytes", "64M", "--compute-ms", "0", "--partition-bytes", "128K", "--json"]
    import json
    assert plan.main(argv) == 0
    off = json.loads(capsys.readouterr().out)
    assert plan.main(argv + ["--partition-cost-us", "100"]) == 0
    on = json.loads(capsys.readouterr().out)
    cpu = lambda p: [r for r in p["candidates"] if r["placement"] == "cpu" and r["cpu_servers"] == 2][0]
    assert cpu(on)["iteration_s"] > 3 * cpu(off)["iteration_s"]
    assert plan.main(argv + ["--partition-cost-us", "-5"]) == plan.EXIT_USAGE
    assert "--partition-cost-us -5.0: give 0 or more microseconds" in capsys.readouterr().err
