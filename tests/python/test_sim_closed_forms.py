"""The closed forms of byteps.sim (mirroring src/protocol/mixed_split.cc) and the planner-like
assignment of partitions to servers."""

from __future__ import annotations

import math

import pytest

from byteps.sim import closed_forms as cf


@pytest.mark.parametrize("n,k", [(n, k) for n in range(3, 17) for k in range(1, n + 1)])
def test_equal_rates_follow_the_papers_split(n, k):
    s = cf.optimal_split(n, k)
    d = n * n + k * n - 2 * k
    assert s.cpu_share == pytest.approx(2 * (n - 1) / d, rel=1e-12)
    assert s.colocated_share == pytest.approx((n - k) / d, rel=1e-12)
    assert s.time == pytest.approx(2 * n * (n - 1) / d, rel=1e-12)
    assert s.time == pytest.approx(cf.mixed_formula_time(n, k), rel=1e-12)
    assert k * s.cpu_share + n * s.colocated_share == pytest.approx(1.0)


def test_the_issues_example_n4_k2():
    s = cf.optimal_split(4, 2)
    assert cf.ring_time(4) / s.time == pytest.approx(1.25)
    assert cf.cpu_only_time(4, 2) / s.time == pytest.approx(5 / 3)
    assert cf.ring_time(4) / cf.optimal_split(4, 1).time == pytest.approx(1.125)


def test_ends_are_ring_and_cpu_only():
    for n in (2, 5, 9):
        assert cf.optimal_split(n, 0).time == pytest.approx(cf.ring_time(n))
        assert cf.optimal_split(n, n).time == pytest.approx(cf.cpu_only_time(n, n))
        assert cf.optimal_split(n, n).colocated_share == pytest.approx(0.0, abs=1e-12)


def test_unequal_rates_shift_bytes_toward_the_faster_servers():
    equal = cf.optimal_split(8, 4, 1.0, 1.0)
    fast_cpu = cf.optimal_split(8, 4, 2.0, 1.0)
    slow_cpu = cf.optimal_split(8, 4, 0.5, 1.0)
    assert slow_cpu.cpu_share < equal.cpu_share < fast_cpu.cpu_share
    assert slow_cpu.colocated_share > equal.colocated_share > fast_cpu.colocated_share
    # Balanced: a CPU machine's NIC and a worker machine's NIC finish together.
    for s, bc in ((fast_cpu, 2.0), (slow_cpu, 0.5)):
        assert 8 * s.cpu_share / bc == pytest.approx((1 + 6 * s.colocated_share) / 1.0)


def test_n2_and_bad_input():
    s = cf.optimal_split(2, 1)
    assert s.time == pytest.approx(1.0)  # a worker moves M whatever its server takes
    # ... so the CPU server takes what it moves in that time: all of it when twice as fast, a
    # quarter when half as fast (as src/protocol/mixed_split.cc).
    for rate, share in ((2.0, 1.0), (1.0, 0.5), (0.5, 0.25)):
        s = cf.optimal_split(2, 1, rate, 1.0)
        assert (s.cpu_share, s.cpu_share + 2 * s.colocated_share, s.time) == pytest.approx((share, 1.0, 1.0))
    with pytest.raises(ValueError, match="worker machines"):
        cf.optimal_split(0, 1)
    with pytest.raises(ValueError, match="CPU server machines"):
        cf.optimal_split(4, -1)
    with pytest.raises(ValueError, match="NIC rates must be positive"):
        cf.optimal_split(4, 2, 0.0, 1.0)
    with pytest.raises(ValueError, match="one server on each of the 4 worker machines"):
        cf.server_shares(4, [False, False, True, True])


@pytest.mark.parametrize("n,k,rates", [(4, 2, (1, 1)), (16, 3, (1, 1)), (8, 4, (2, 1)), (5, 7, (1, 3))])
def test_every_server_within_one_partition_of_its_share(n, k, rates):
    shares = cf.server_shares(n, [False] * k + [True] * n, *rates)
    lengths = [262144] * 997 + [1000, 4, 77777]
    servers = cf.assign_partitions(lengths, shares)
    total = sum(lengths)
    loads = [0] * len(shares)
    for length, s in zip(lengths, servers):
        loads[s] += length
    for load, share in zip(loads, shares):
        assert abs(load - share * total) <= max(lengths), (load, share * total)
    assert math.isclose(sum(loads), total)
