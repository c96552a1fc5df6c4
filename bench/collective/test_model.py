"""Tests of the collective benchmark (bench/collective): the arithmetic of model.py (goodput,
ideal ring and PS times, theoretical ratios, % of goodput, table formatting) and one tiny
end-to-end run of the runner (2 workers at 200 Mbit/s, 1 MiB, byteps and gloo), skipped with
the reason where network namespaces, the core or torch are missing.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "python", REPO):  # byteps, tools and bench of this checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.collective import model  # noqa: E402
from bench.collective import run as runner  # noqa: E402
from tools.localjob import missing_core  # noqa: E402

MIB = 1 << 20
G1000 = 0.956 * 1000e6 / 8  # bytes/s through a 1 Gbit/s tbf link


# --------------------------------------------------------------------------------------------
# Links and ideal times


def test_goodput_is_0956_of_the_rate():
    assert model.goodput_Bps(1000) == pytest.approx(G1000)
    assert model.goodput_Bps(200) == pytest.approx(0.956 * 25e6)
    with pytest.raises(ValueError):
        model.goodput_Bps(0)


def test_ring_time_is_2_n_minus_1_over_n_m_over_g():
    assert model.ring_factor(1) == 0
    assert model.ring_factor(2) == 1
    assert model.ring_factor(4) == 1.5
    assert model.ring_factor(8) == 1.75
    # machine-facts.md: 100 MB at 1 Gbit/s, n=4 -> 1.255 s (gloo measured 1.256 s).
    assert model.ring_time(100e6, 4, G1000) == pytest.approx(1.2552, abs=1e-3)
    assert model.ring_time(100e6, 8, G1000) == pytest.approx(1.4644, abs=1e-3)


def test_ps_time_separate():
    # Enough servers: each worker sends and receives M once: M/G (0.84 s for 100 MB at 1 Gbit).
    assert model.ps_time(100e6, 4, 4, G1000) == pytest.approx(0.8368, abs=1e-3)
    assert model.ps_time(100e6, 8, 16, G1000) == pytest.approx(100e6 / G1000)
    # Too few servers: the servers' links carry n M / k.
    assert model.ps_time(100e6, 8, 4, G1000) == pytest.approx(2 * 100e6 / G1000)
    assert model.ps_time(100e6, 2, 1, G1000) == pytest.approx(2 * 100e6 / G1000)
    # Faster server links make up for fewer servers: max(1, n B_w / (k B_s)).
    assert model.ps_time(100e6, 8, 4, G1000, server_goodput=2 * G1000) == \
        pytest.approx(100e6 / G1000)
    assert model.ps_factor(8, 4, bw_worker=1, bw_server=4) == 1.0


@pytest.mark.parametrize("n", [2, 3, 4, 8, 16])
def test_colocated_ps_is_ring_parity(n):
    """k = n colocated: each host sends 2(n-1)/n M (its pushes to the n-1 other servers and
    its server's sums to the n-1 other workers), exactly the ring's traffic."""
    assert model.ps_factor(n, n, model.COLOCATED) == pytest.approx(model.ring_factor(n))
    assert model.ps_time(64 * MIB, n, n, G1000, model.COLOCATED) == pytest.approx(
        model.ring_time(64 * MIB, n, G1000))
    assert model.theory_ratio(n, n, model.COLOCATED) == pytest.approx(1.0)


def test_colocated_with_fewer_servers_is_worse_than_ring():
    # n=4, k=2 colocated: a server host sends 1/2 M of pushes + 3/2 M of sums = 2 M.
    assert model.ps_factor(4, 2, model.COLOCATED) == 2.0
    assert model.theory_ratio(4, 2, model.COLOCATED) == 0.75
    with pytest.raises(ValueError):
        model.ps_factor(2, 3, model.COLOCATED)


@pytest.mark.parametrize("n,expected", [(2, 1.0), (4, 1.5), (8, 1.75), (16, 1.875)])
def test_theory_ratio_with_k_equal_n(n, expected):
    assert model.theory_ratio(n, n) == pytest.approx(expected)
    assert model.theory_ratio(n, 2 * n) == pytest.approx(expected)  # more servers: no better


@pytest.mark.parametrize("n", [2, 4, 8])
def test_theory_ratio_with_half_the_servers(n):
    k = n // 2
    assert model.theory_ratio(n, k) == pytest.approx(min(1, 0.5) * 2 * (n - 1) / n)
    assert model.theory_ratio(n, k) < 1  # k = n/2 loses to the ring


def test_theory_ratio_is_bounded_by_two():
    for n in range(2, 65):
        for k in range(1, 2 * n):
            r = model.theory_ratio(n, k)
            assert 0 < r < 2
            assert r <= model.ring_factor(n) + 1e-12


def test_partitions_and_servers_as_the_core_makes_them():
    assert model.split_partitions(16_000_000, 4_096_000) == [4_000_000] * 4  # equal parts
    assert model.split_partitions(4 * MIB, 4_096_000) == [2 * MIB] * 2
    assert sum(model.split_partitions(256 * MIB + 4, 1 << 20)) == 256 * MIB + 4
    assert model.split_partitions(8, 4_096_000) == [8]
    loads = [0] * 4
    assert model.assign_servers([2 * MIB] * 2, 4, loads) == [0, 1]  # 4 MiB: 2 servers idle
    assert model.assign_servers([MIB] * 3, 4, loads) == [2, 3, 2]  # a sweep sees the loads
    assert loads == [2 * MIB, 2 * MIB, 2 * MIB, MIB]


def test_simulated_push_pull():
    g200 = model.goodput_Bps(200)
    # test_testbed.py's measured case: n=2, k=1, 16 MB in 4 partitions of 4 MB; the last two
    # partitions' pulls overlap no push: 2 (M + 2 P) / G.
    assert model.simulate_ps(16_000_000, 2, 1, g200) == pytest.approx(2 * 24e6 / g200, rel=1e-6)
    # One server: the tail is one partition per connection, n (M + c P) / G.
    for c in (1, 2, 4):
        assert model.simulate_ps(16_000_000, 2, 1, g200, connections=c) == \
            pytest.approx(2 * (16e6 + c * 4e6) / g200, rel=1e-6)
    # One partition per server: push, then pull: 2 M / G (n=2, k=2, 4 MiB = 2 x 2 MiB).
    assert model.simulate_ps(4 * MIB, 2, 2, G1000) == pytest.approx(2 * 4 * MIB / G1000, rel=1e-6)
    # n=4, k=4, 4 MiB: 2 partitions on 2 servers, each server link carries 4 x 2 MiB each way.
    assert model.simulate_ps(4 * MIB, 4, 4, G1000) == pytest.approx(2 * 4 * 2 * MIB / G1000,
                                                                    rel=1e-6)
    # Never below the ideal, never above push-then-pull on the servers that get partitions;
    # many small partitions: close to the ideal.
    for n, k in ((2, 2), (4, 2), (4, 4), (8, 8)):
        for m in (MIB, 16 * MIB, 64 * MIB):
            ideal = model.ps_time(m, n, k, G1000)
            loads = [0] * k
            model.assign_servers(model.split_partitions(m, model.DEFAULT_PARTITION_BYTES), k, loads)
            worst = 2 * max(m, n * max(loads)) / G1000  # push then pull on the busiest link
            est = model.simulate_ps(m, n, k, G1000)
            assert ideal * (1 - 1e-9) <= est <= worst * (1 + 1e-9), (n, k, m)
        fine = model.simulate_ps(64 * MIB, n, k, G1000, partition_bytes=256 << 10)
        assert fine <= 1.05 * model.ps_time(64 * MIB, n, k, G1000)
    # Colocated: a host's own server costs nothing; many partitions reach ring parity.
    for n in (2, 4):
        est = model.simulate_ps(64 * MIB, n, n, G1000, model.COLOCATED, partition_bytes=256 << 10)
        ring = model.ring_time(64 * MIB, n, G1000)
        assert ring * (1 - 1e-9) <= est <= 1.05 * ring
    # A sweep declares its tensors one after the other (keys and server loads carry over).
    sweep = model.simulate_sweep([4 * MIB, 16 * MIB], 4, 4, G1000)
    assert sweep[0] == model.simulate_ps(4 * MIB, 4, 4, G1000)
    assert len(sweep) == 2 and sweep[1] > model.ps_time(16 * MIB, 4, 4, G1000)


# --------------------------------------------------------------------------------------------
# Measured figures


def test_percent_of_goodput_and_busbw():
    m = 100e6
    t_ring = model.ring_time(m, 4, G1000)
    assert model.pct_of_goodput(m, m / G1000, G1000) == pytest.approx(100)
    # A ring at its model reaches 100 % busbw but only 1/1.5 of the link in M/t terms.
    assert model.busbw_pct(m, t_ring, G1000, 4) == pytest.approx(100)
    assert model.pct_of_goodput(m, t_ring, G1000) == pytest.approx(100 / 1.5)
    assert model.pct_of_model(2.0, 4.0) == 50
    assert model.algbw_GBps(1e9, 2.0) == 0.5
    assert model.speed_ratio(1.5, 1.0) == 1.5
    assert model.speed_ratio(None, 1.0) is None and model.speed_ratio(1.0, None) is None


def test_make_row_and_ratios():
    m = 64 * MIB
    g = model.goodput_Bps(1000)
    t_gloo = model.ring_time(m, 4, g) * 1.01
    t_ps = model.ps_time(m, 4, 4, g) * 1.2
    rows = [model.make_row("byteps", 4, 4, "n", model.SEPARATE, 1000, m, t_ps, 5),
            model.make_row("gloo", 4, None, "-", model.SEPARATE, 1000, m, t_gloo, 5),
            model.make_row("mpi", 4, None, "-", model.SEPARATE, 1000, m, None, 5),
            model.make_row("byteps", 4, 4, "n", model.SEPARATE, 750, m, t_ps, 5)]
    model.fill_ratios(rows)
    ps, gloo, mpi, other_rate = rows
    assert ps["theory_ratio"] == 1.5 and gloo["theory_ratio"] == 1.0
    assert ps["pct_model"] == pytest.approx(100 / 1.2)
    assert ps["pct_goodput"] == pytest.approx(100 / 1.2)
    assert ps["busbw_pct"] is None  # busbw is a ring figure
    assert gloo["busbw_pct"] == pytest.approx(100 / 1.01)
    assert ps["ratio_to_gloo"] == pytest.approx(1.5 * 1.01 / 1.2)
    assert gloo["ratio_to_gloo"] == 1.0
    assert mpi["ratio_to_gloo"] is None and mpi["pct_goodput"] is None  # not measured
    assert other_rate["ratio_to_gloo"] is None  # only same-rate ratios
    assert ps["size"] == "64M" and ps["k_label"] == "n" and gloo["k_label"] == "-"


def test_format_table_and_markdown():
    rows = [model.make_row("gloo", 4, None, "-", model.SEPARATE, 1000, 4 * MIB, 0.0421, 50),
            model.make_row("byteps", 4, 2, "n/2", model.SEPARATE, 1000, 4 * MIB, None, 50)]
    model.fill_ratios(rows)
    text = model.format_table(rows)
    lines = text.splitlines()
    assert len(lines) == 3
    assert lines[0].split() == [h for _, h, _ in model.COLUMNS]
    gloo = lines[1].split()
    assert gloo[:6] == ["gloo", "4", "-", "1000", "4M", "50"] and gloo[6] == "0.0421"
    assert gloo[-2:] == ["1.00", "1.00"]
    missing = lines[2].split()
    assert missing[6:12] == ["-"] * 6 and missing[-1] == "0.75"  # theory 1.5 x 0.5
    # Columns line up: every header ends where its cells end.
    ends = [lines[0].index(h) + len(h) for h in ("time_s", "theory")]
    for line in lines[1:]:
        assert all(line[e - 1] != " " for e in ends)
    md = model.format_markdown(rows).splitlines()
    assert md[0].startswith("| system | n | k |") and md[1].startswith("| --- | ---: |")
    assert md[2].startswith("| gloo | 4 | - | 1000 | 4M | 50 | 0.0421 |")
    assert all(line.count("|") == len(model.COLUMNS) + 1 for line in md)


def test_sizes_k_tokens_iterations_and_rate_cap():
    assert model.parse_size("4M") == 4 * MIB and model.parse_size("1G") == 1 << 30
    assert model.parse_size("512K") == 512 << 10 and model.parse_size("1000") == 1000
    assert model.parse_size("256MiB") == 256 * MIB
    assert model.format_size(256 * MIB) == "256M" and model.format_size(1000) == "1000"
    for bad in ("", "x", "-1M", "0"):
        with pytest.raises(ValueError):
            model.parse_size(bad)
    assert model.parse_k("n", 8) == (8, model.SEPARATE, "n")
    assert model.parse_k("n/2", 8) == (4, model.SEPARATE, "n/2")
    assert model.parse_k("n/2", 2) == (1, model.SEPARATE, "n/2")
    assert model.parse_k("colocated", 4) == (4, model.COLOCATED, "coloc")
    assert model.parse_k("3", 4) == (3, model.SEPARATE, "3")
    with pytest.raises(ValueError):
        model.parse_k("two", 4)
    # The rule of byteps-core bench --iters 0: clamp(512 MiB / M, 5, 50).
    assert [model.iterations(s * MIB) for s in (1, 4, 16, 64, 256)] == [50, 50, 32, 8, 5]
    # CPU budget: 16 hosts x 1000 > 12000 -> 750; 8 hosts stay at 1000; 0 = no cap.
    assert model.capped_rate(1000, 16, 12000) == 750
    assert model.capped_rate(1000, 8, 12000) == 1000
    assert model.capped_rate(1000, 16, 0) == 1000
    assert model.capped_rate(1000, 13, 12000) == 900
    assert model.format_duration(123) == "2m03s" and model.format_duration(4000) == "1h06m40s"
    assert model.median([3, 1, 2]) == 2 and model.median([4, 1, 2, 3]) == 2.5


def test_plan_shares_one_rate_per_n():
    args = runner.parse_args(["--n", "2,8", "--sizes", "1M,4M,16M"])
    iters = [model.iterations(m) for m in args.sizes]
    plan = runner.build_plan(args, args.sizes, iters)
    by_n = {}
    for cfg in plan:
        by_n.setdefault(cfg.n, set()).add(cfg.rate_mbit)
    assert by_n == {2: {1000}, 8: {750}}  # n=8, k=8 separate: 16 hosts
    names = [c.name for c in plan if c.n == 8]
    assert names == ["byteps n=8 k=8 (n)", "byteps n=8 k=4 (n/2)", "byteps n=8 k=8 colocated",
                     "gloo n=8", "mpi n=8"]
    assert [c.hosts for c in plan if c.n == 8] == [16, 12, 8, 8, 8]
    assert runner.geometric_factor(args.sizes) == 4
    assert runner.geometric_factor([MIB, 3 * MIB]) == 3
    assert runner.geometric_factor([MIB]) == 2
    assert runner.geometric_factor([MIB, 4 * MIB, 8 * MIB]) is None
    assert runner.byteps_iters_arg(args.sizes, iters) == 0  # bench's adaptive rule
    assert runner.byteps_iters_arg(args.sizes, [5, 5, 5]) == 5
    assert runner.byteps_iters_arg(args.sizes, [5, 6, 5]) is None
    quick = runner.parse_args(["--quick"])
    assert quick.n == [2, 4] and quick.iters == 5 and quick.rate == 1000
    assert quick.sizes == [4 * MIB, 16 * MIB]


# --------------------------------------------------------------------------------------------
# End to end


def _smoke_skip_reason() -> str | None:
    from tools.testbed import Testbed
    ok, reason = Testbed.available()
    if not ok:
        return f"no emulated cluster here: {reason}"
    reason = missing_core()
    if reason:
        return reason
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed (apt-get install python3-torch): no gloo peer"
    return None


@pytest.mark.parametrize("timing", runner.TIMINGS)
def test_quick_run_end_to_end(tmp_path, timing):
    """2 workers at 200 Mbit/s, 1 MiB, byteps (k = 2 separate) and gloo, 3 iterations, each
    timing."""
    reason = _smoke_skip_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "bench.collective.run", "--n", "2", "--k", "n",
            "--sizes", "1M", "--systems", "byteps,gloo", "--iters", "3", "--rate", "200",
            "--wait-idle", "0", "--timing", timing,
            "--out", str(out)]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["complete"] and doc["meta"]["timing"] == timing
    sweep = json.loads((out / "raw" / "byteps_n2_kn_0.json").read_text())
    assert sweep["barrier"] == (timing == "barrier")
    assert [c["status"] for c in doc["configs"]] == ["ok", "ok"]
    rows = {r["system"]: r for r in doc["rows"]}
    g = model.goodput_Bps(200)
    for system in ("byteps", "gloo"):
        r = rows[system]
        assert r["bytes"] == MIB and r["rate_mbit"] == 200 and r["iters"] == 3
        # Physically possible and sane.  The tbf bucket (256 KiB per link, refilled while a rank
        # waits in the barrier) lets a 1 MiB transfer go up to a quarter faster than the rate.
        assert r["ideal_s"] * 0.6 <= r["time_s"] < 20 * r["ideal_s"], r
    assert rows["gloo"]["ratio_to_gloo"] == 1.0
    assert rows["byteps"]["ratio_to_gloo"] == pytest.approx(rows["gloo"]["time_s"] /
                                                            rows["byteps"]["time_s"])
    assert math.isclose(rows["byteps"]["ideal_s"], MIB / g)
    assert "| byteps | 2 | n | 200 | 1M | 3 |" in (out / "results.md").read_text()
    assert (out / "collective.png").stat().st_size > 1000
    assert "vs_gloo" in proc.stdout and "theory" in proc.stdout
