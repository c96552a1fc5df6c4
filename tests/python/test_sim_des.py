"""The simulator (byteps.sim): the flow model, and the closed forms reproduced on a bare link
model (no compute, no latency, fine partitions), then the effects it exists to show."""

from __future__ import annotations

import time

import pytest

from byteps.sim import closed_forms as cf
from byteps.sim import placements as pl
from byteps.sim import profiles
from byteps.sim.links import FluidNetwork, max_min_rates

M = 100_000_000
P = M // 4000  # fine partitions: 4000 per tensor


def bare(n, k, placement, cpu_gbps=None, credit_parts=None):
    """One push_pull of M on 8 Gbit/s links, B = 1e9 bytes/s.  The credit covers 16 partitions
    per server (a shallower pipeline leaves links idle: 64 partitions at n=16, k=12 cost 3 %)."""
    credit = (credit_parts or 16 * (n + k)) * P
    c = pl.Cluster(n=n, k=k, gpus=1, worker_gbps=8.0, cpu_gbps=cpu_gbps, goodput=1.0,
                   partition_bytes=P, credit_bytes=credit)
    r = pl.simulate(c, placement, profiles.single_tensor(M), iterations=1, bare=True)
    return r.iteration_s, c


def test_max_min_rates():
    caps = {"a": 10.0, "b": 4.0}
    rates = max_min_rates({"x": ([("a", 1.0)], 1), "y": ([("a", 1.0), ("b", 1.0)], 2)}, caps)
    assert rates["y"] == pytest.approx(2.0)      # b: 4 / 2 flows
    assert rates["x"] == pytest.approx(6.0)      # a: the rest
    weighted = max_min_rates({"z": ([("a", 4.0)], 1)}, caps)
    assert weighted["z"] == pytest.approx(2.5)   # uses 4 bytes of a per byte


def test_fluid_network_fifo_within_a_group():
    net = FluidNetwork({"l": 100.0})
    done = []
    net.add("g", [("l", 1.0)], 100, "first")
    net.add("g", [("l", 1.0)], 100, "second")
    dt = net.next_finish()
    assert dt == pytest.approx(1.0)              # one at a time, at the full rate
    done += net.advance(dt)
    assert done == ["first"]
    done += net.advance(net.next_finish())
    assert done == ["first", "second"]


@pytest.mark.parametrize("n", [2, 4, 8, 16])
def test_ring_and_colocated_reproduce_2_n_minus_1_over_n(n):
    t, c = bare(n, 0, "ring")
    assert t == pytest.approx(cf.ring_time(n, c.worker_rate) * M, rel=0.01)
    t, c = bare(n, 0, "colocated")
    assert t == pytest.approx(cf.ring_time(n, c.worker_rate) * M, rel=0.01)


@pytest.mark.parametrize("n,k", [(2, 1), (4, 1), (4, 2), (4, 4), (8, 2), (8, 8), (16, 4), (16, 12)])
def test_cpu_only_reproduces_max_of_m_over_b_and_nm_over_kb(n, k):
    t, c = bare(n, k, "cpu")
    assert t == pytest.approx(cf.cpu_only_time(n, k, c.cpu_rate) * M, rel=0.01)


@pytest.mark.parametrize("n,k", [(2, 1), (4, 1), (4, 2), (4, 3), (8, 2), (8, 4), (16, 4), (16, 12)])
def test_mixed_reproduces_the_optimal_split(n, k):
    t, c = bare(n, k, "mixed")
    assert t == pytest.approx(cf.mixed_formula_time(n, k, c.worker_rate) * M, rel=0.01)


def test_n4_k2_speedups_of_the_issue():
    mixed, _ = bare(4, 2, "mixed")
    ring, _ = bare(4, 0, "ring")
    cpu, _ = bare(4, 2, "cpu")
    assert ring / mixed == pytest.approx(1.25, rel=0.01)
    assert cpu / mixed == pytest.approx(5 / 3, rel=0.01)


def test_unequal_rates_shift_bytes_toward_faster_servers_and_keep_the_formula():
    t_fast, c = bare(8, 4, "mixed", cpu_gbps=16.0)
    t_equal, _ = bare(8, 4, "mixed")
    assert t_fast < t_equal
    assert t_fast == pytest.approx(cf.optimal_split(8, 4, c.cpu_rate, c.worker_rate).time * M, rel=0.01)
    fast = pl.backend(c, "mixed", bare=True)
    equal = pl.backend(pl.Cluster(n=8, k=4, gpus=1, worker_gbps=8.0, partition_bytes=P), "mixed", bare=True)
    for b in (fast, equal):
        b.network()
        b.setup(type("L", (), {"net": b.net})(), profiles.single_tensor(M), lambda *_: None)
    assert fast.server_bytes[0] > equal.server_bytes[0]      # a CPU server
    assert fast.server_bytes[-1] < equal.server_bytes[-1]    # a colocated server


def test_a_credit_of_one_partition_uses_one_server_at_a_time():
    # One partition in flight: its server receives both workers' copies (n P / B), then sends
    # both sums back (n P / B), while the other server idles and nothing overlaps.
    t, c = bare(2, 2, "cpu", credit_parts=1)
    assert t == pytest.approx(2 * 2 * M / c.worker_rate, rel=0.01)


def test_compute_bound_model_hides_communication():
    prof = profiles.load("resnet50")
    c = pl.Cluster(n=8, k=8, worker_gbps=100.0)
    r = pl.simulate(c, "cpu", prof)
    assert prof.compute_s <= r.iteration_s < prof.compute_s * 1.03


def test_priority_lets_the_next_forward_start_before_the_backlog_is_done():
    # VGG-16: the fully connected layers' 480 MB come first out of backward; with priority the
    # first convolutions' small gradients overtake them (measured on the testbed: +17 %).
    prof = profiles.load("vgg16")
    c = pl.Cluster(n=8, k=8, gpus=1, worker_gbps=20.0)
    with_priority = pl.simulate(c, "cpu", prof)
    fifo = pl.simulate(pl.Cluster(n=8, k=8, gpus=1, worker_gbps=20.0, priority=False), "cpu", prof)
    assert with_priority.iteration_s < 0.95 * fifo.iteration_s
    assert with_priority.iteration_s >= max(prof.compute_s, prof.nbytes / c.worker_rate * 0.99)


def test_step_barrier_is_never_faster_than_per_layer():
    prof = profiles.load("vgg16")
    c = pl.Cluster(n=4, k=4, worker_gbps=10.0)
    layer = pl.simulate(c, "cpu", prof, barrier="layer").iteration_s
    step = pl.simulate(c, "cpu", prof, barrier="step").iteration_s
    assert step >= layer


def test_128_machines_of_8_gpus_in_seconds():
    prof = profiles.load("vgg16")
    c = pl.Cluster(n=128, gpus=8, k=64, worker_gbps=25.0)
    start = time.monotonic()
    for placement in ("ring", "colocated", "cpu", "mixed"):
        r = pl.simulate(c, placement, prof)
        assert r.iteration_s >= prof.compute_s
    assert time.monotonic() - start < 30, "the simulator is meant to take seconds at 128 x 8"
