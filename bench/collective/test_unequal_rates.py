"""Tests of bench/collective/unequal_rates.py: the closed forms' prediction for the two splits,
and one short real run of both (needs network namespaces and the built core; skipped with the
reason otherwise).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "python", REPO):  # byteps, tools and bench of this checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from bench.collective import unequal_rates  # noqa: E402
from tools.localjob import missing_core  # noqa: E402
from tools.testbed.netns import Testbed  # noqa: E402


def test_the_measured_split_beats_the_formulas_where_cpu_machines_are_faster():
    # n = 4, k = 2, CPU NICs 2x: the formula's split (30 % per CPU server, 10 % per colocated)
    # leaves the worker machines moving 1.2 M; the split for the real rates balances at M.
    p = unequal_rates.predicted(4, 2, 1000, 2000)
    assert p["formula_split"]["cpu_share"] == pytest.approx(0.3)
    assert p["formula_split"]["time"] == pytest.approx(1.2)
    assert p["measured_split"]["time"] == pytest.approx(1.0)
    assert p["measured_split"]["cpu_share"] > 0.3
    assert p["speedup"] == pytest.approx(1.2)
    # Equal rates: the same split, no gain.
    assert unequal_rates.predicted(4, 2, 1000, 1000)["speedup"] == pytest.approx(1.0)
    assert unequal_rates.parse_size("100M") == 100 << 20


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        unequal_rates.main(["--k", "0"])
    assert "need --n >= 2, --k >= 1" in capsys.readouterr().err


_ok, _reason = Testbed.available()


@pytest.mark.skipif(not _ok, reason=f"no emulated cluster here: {_reason}")
def test_a_short_run_of_both_splits(tmp_path, capsys):
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    # 2 worker hosts at 200 Mbit/s, a CPU host at 800: the probe measures it at about 2x.
    assert unequal_rates.main(["--n", "2", "--k", "1", "--rate", "200", "--cpu-rate", "800", "--size", "4M",
                               "--iters", "2", "--repeats", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "unequal_rates.json").read_text())
    runs = {r["mode"]: r for r in result["runs"]}
    assert runs["measured"]["probed"] and not runs["formula"]["probed"], runs
    assert "measured NIC rates" in runs["measured"]["placement"], runs
    assert "the 1 on CPU machines 50.0% each" in runs["formula"]["placement"], runs
    assert all(r["time_s"] > 0 for r in result["runs"])
    assert result["formula_over_measured"] == pytest.approx(result["median_s"]["formula"]
                                                            / result["median_s"]["measured"])
    assert "formula / measured:" in capsys.readouterr().out
