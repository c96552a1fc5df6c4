"""Tests of the collective benchmark's mixed placement (bench/collective): the unified
architecture's formulas in model.py (split, ideal time, theory ratio), the "mixed:K" / "n+K"
tokens, the plan's hosts and rate cap, and the flow-level estimate with the split.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "python", REPO):  # byteps, tools and bench of this checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.collective import model  # noqa: E402
from bench.collective import run as runner  # noqa: E402

MIB = 1 << 20
G1000 = 0.956 * 1000e6 / 8  # bytes/s through a 1 Gbit/s tbf link



def test_mixed_formulas():
    # t = 2n(n-1) M / ((n^2 + kn - 2k) G): ring at k = 0, separate PS at k = n.
    for n in (2, 3, 4, 8, 16):
        assert model.ps_factor(n, 0, model.MIXED) == pytest.approx(model.ring_factor(n))
        assert model.ps_factor(n, n, model.MIXED) == pytest.approx(model.ps_factor(n, n))
        for k in range(0, n + 1):
            cpu, gpu = model.mixed_split(n, k)
            assert k * cpu + n * gpu == pytest.approx(1)  # every byte has a server
            # Every link finishes together: a CPU host moves n M_cpu, a worker host
            # M + (n-2) M_gpu (n > 2; at n = 2 a worker host moves M whatever its share).
            t = model.ps_factor(n, k, model.MIXED)
            if k:
                assert n * cpu == pytest.approx(t)
            if n > 2:
                assert 1 + (n - 2) * gpu == pytest.approx(t)
            assert model.ps_time(100e6, n, k, G1000, model.MIXED) == pytest.approx(
                2 * n * (n - 1) * 100e6 / ((n * n + k * n - 2 * k) * G1000))
    # The figures at n = 4: k = 2 is 1.25x the ring and 1.67x PS on the 2 CPU hosts.
    assert model.theory_ratio(4, 2, model.MIXED) == pytest.approx(1.25)
    assert model.theory_ratio(4, 1, model.MIXED) == pytest.approx(1.125)
    assert model.ps_time(1, 4, 2, 1.0) / model.ps_time(1, 4, 2, 1.0, model.MIXED) == \
        pytest.approx(5 / 3)
    assert model.mixed_split(4, 2) == (pytest.approx(0.3), pytest.approx(0.1))
    assert model.mixed_split(1, 1) == (0.0, 1.0) and model.ps_factor(1, 1, model.MIXED) == 0
    assert model.ideal_time("byteps", 1e6, 4, G1000, 2, model.MIXED) == pytest.approx(
        1.2 * 1e6 / G1000)
    for n, k in ((4, 5), (4, -1), (0, 0)):
        with pytest.raises(ValueError, match="0 <= k <= n"):
            model.mixed_split(n, k)
    with pytest.raises(ValueError, match="mixed"):
        model.ps_factor(2, 3, "elsewhere")


def test_mixed_tokens_hosts_and_rate_cap():
    assert model.parse_k("mixed:2", 4) == (2, model.MIXED, "n+2")
    assert model.parse_k("n+2", 4) == (2, model.MIXED, "n+2")
    assert model.parse_k("mixed:n/2", 8) == (4, model.MIXED, "n+n/2")
    assert model.parse_k("n+n/2", 2) == (1, model.MIXED, "n+n/2")
    assert model.parse_k("MIXED:n", 4) == (4, model.MIXED, "n+n")
    for bad, needle in (("mixed:5", "needs 1 <= k <= n"), ("mixed:0", "k = 0 is 'colocated'"),
                        ("mixed:", "mixed:K or n+K"), ("n+x", "mixed:K or n+K"),
                        ("mixed", "mixed:K / n+K")):
        with pytest.raises(ValueError, match=re.escape(needle)):
            model.parse_k(bad, 4)
    assert model.server_count(4, 2, model.MIXED) == 6 and model.server_count(4, 2, "separate") == 2
    # The rate cap counts n + k hosts: n=8, k=8 mixed is 16 hosts -> 750 Mbit/s.
    args = runner.parse_args(["--n", "4,8", "--k", "mixed:2,n+n", "--sizes", "16M",
                              "--systems", "byteps,gloo"])
    plan = runner.build_plan(args, args.sizes, [5])
    got = [(c.name, c.hosts, c.rate_mbit) for c in plan]
    assert got == [("byteps n=4 k=2 mixed (n+2)", 6, 1000), ("byteps n=4 k=4 mixed (n+n)", 8, 1000),
                   ("gloo n=4", 4, 1000), ("byteps n=8 k=2 mixed (n+2)", 10, 750),
                   ("byteps n=8 k=8 mixed (n+n)", 16, 750), ("gloo n=8", 8, 750)]
    row = model.make_row("byteps", 4, 2, "n+2", model.MIXED, 1000, 16 * MIB, 0.2)
    assert row["theory_ratio"] == pytest.approx(1.25)
    assert row["ideal_s"] == pytest.approx(1.2 * 16 * MIB / G1000)
    with pytest.raises(SystemExit):
        runner.parse_args(["--n", "2", "--k", "mixed:3"])


def test_mixed_estimate_follows_the_split():
    # The estimate stays between the ideal and push-then-pull (twice it).  It is well above
    # the ideal (4, 2: 1.34x) because every partition is pushed at once and links are shared
    # fairly between flows, not by the split: the pushes to the small colocated shares finish
    # early and the worker links then wait on the CPU hosts' ingress.
    for n, k in ((4, 2), (4, 1), (3, 2), (2, 1)):
        est = model.simulate_ps(64 * MIB, n, k, G1000, model.MIXED, partition_bytes=256 << 10)
        ideal = model.ps_time(64 * MIB, n, k, G1000, model.MIXED)
        assert ideal * (1 - 1e-9) <= est <= 2 * ideal, (n, k, est / ideal)
        # Each server got its share of the bytes within one partition.
        loads = [0] * (n + k)
        cpu, gpu = model.mixed_split(n, k)
        model.assign_servers(model.split_partitions(64 * MIB, 256 << 10), n + k, loads,
                             [gpu] * n + [cpu] * k)
        for load, share in zip(loads, [gpu] * n + [cpu] * k):
            assert abs(load - share * 64 * MIB) <= 256 << 10, (n, k, loads)
    # Servers of share 0 take nothing (n = 2, k = 2: the CPU hosts take it all).
    loads = [0] * 4
    shares = [0.0, 0.0, 0.5, 0.5]
    assert set(model.assign_servers([MIB] * 8, 4, loads, shares)) == {2, 3}
    assert loads == [0, 0, 4 * MIB, 4 * MIB]


@pytest.mark.parametrize("module", ["bench.collective.run", "bench.model_shaped.run_testbed", "bench.sweep.run"])
def test_the_runners_import_without_pythonpath(module):
    """model.py takes its partitioner from byteps.sim: every runner must import as
    `python3 -m <module>` from the repository root with no PYTHONPATH set."""
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=REPO, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
