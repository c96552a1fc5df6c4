"""Tests of the name service's first-use benchmark (bench/name_service)::

    /usr/bin/python3 -m pytest -q bench/name_service

* ``summarize``: on hand-made worker records, the slowest worker per round, medians over rounds,
  the per-name overhead and the name service's share (known answers).
* The loopback TCP reference returns a positive round trip.
* End to end (a few seconds): the benchmark in a tiny configuration (2 workers, 1 server, 10
  tensors, 2 steady steps, 2 rounds) through the real launcher exits 0 (every push_pull's sum is
  checked by the workers) and its JSON line and ``--out`` file hold every field, per round too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "python", REPO):  # byteps, tools and bench of this checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from tools.localjob import hermetic_env, missing_core  # noqa: E402

from bench.name_service import run  # noqa: E402

MODE_FIELDS = {"first_step_s", "steady_step_s", "per_name_us", "first_enqueue_s", "steady_enqueue_s", "rounds"}


def _mode(first: float, steady: list[float], enqueue0: float = 0.0, declare: float = 0.0) -> dict:
    return {"declare_s": declare, "step_s": [first, *steady], "enqueue_s": [enqueue0, *[0.001] * len(steady)]}


def test_summarize_known_answers() -> None:
    # 10 tensors, 3 rounds; worker 1 is the slower in round 0, worker 0 in rounds 1 and 2.
    w0 = {"rank": 0, "rounds": [
        {"first-use": _mode(0.050, [0.010, 0.012, 0.011], 0.040), "declared": _mode(0.020, [0.010] * 3, 0, 0.003)},
        {"first-use": _mode(0.070, [0.010, 0.010, 0.010], 0.060), "declared": _mode(0.030, [0.011] * 3, 0, 0.004)},
        {"first-use": _mode(0.060, [0.020, 0.020, 0.020], 0.050), "declared": _mode(0.025, [0.012] * 3, 0, 0.005)},
    ]}
    w1 = {"rank": 1, "rounds": [
        {"first-use": _mode(0.055, [0.010, 0.010, 0.010], 0.045), "declared": _mode(0.021, [0.010] * 3, 0, 0.002)},
        {"first-use": _mode(0.065, [0.010, 0.010, 0.010], 0.050), "declared": _mode(0.029, [0.010] * 3, 0, 0.002)},
        {"first-use": _mode(0.059, [0.010, 0.010, 0.010], 0.040), "declared": _mode(0.024, [0.010] * 3, 0, 0.002)},
    ]}
    s = run.summarize([w0, w1], 10)
    fu, de = s["first-use"], s["declared"]
    # Slowest worker per round: first steps 0.055, 0.070, 0.060; steady medians 0.011, 0.010, 0.020.
    assert [r["first_step_s"] for r in fu["rounds"]] == [0.055, 0.070, 0.060]
    assert [r["steady_step_s"] for r in fu["rounds"]] == [0.011, 0.010, 0.020]
    assert fu["first_step_s"] == pytest.approx(0.060)
    assert fu["steady_step_s"] == pytest.approx(0.011)
    # Per round (first - steady) / 10 in us: 4400, 6000, 4000 -> median 4400.
    assert fu["per_name_us"] == pytest.approx(4400)
    assert fu["first_enqueue_s"] == pytest.approx(0.050)
    assert "declare_per_name_us" not in fu
    # Declared: declare times 0.003, 0.004, 0.005 (slowest) / 10 -> 300, 400, 500 us.
    assert de["declare_per_name_us"] == pytest.approx(400)
    assert de["first_step_s"] == pytest.approx(0.025)
    # Name service per round: (0.055-0.021, 0.070-0.030, 0.060-0.025) / 10 = 3400, 4000, 3500 us.
    assert s["name_service_per_name_us"] == pytest.approx(3500)
    assert MODE_FIELDS <= set(fu) and MODE_FIELDS | {"declare_per_name_us"} <= set(de)


def test_tcp_reference_is_positive() -> None:
    us = run.tcp_round_trip_us(50)
    assert 0 < us < 1e6


def test_tiny_run_end_to_end(tmp_path: Path) -> None:
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    pytest.importorskip("torch")
    out = tmp_path / "ns.json"
    proc = subprocess.run([sys.executable, "-m", "bench.name_service.run", "--workers", "2", "--servers", "1",
                           "--tensors", "10", "--steps", "2", "--rounds", "2", "--timeout", "60", "--out", str(out)],
                          cwd=REPO, env=hermetic_env({"PYTHONPATH": f"{REPO / 'python'}:{REPO}"}),
                          capture_output=True, text=True, timeout=90)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("JSON ")]
    assert len(lines) == 1, proc.stdout
    record = json.loads(lines[0][5:])
    assert record == json.loads(out.read_text())
    assert (record["benchmark"], record["workers"], record["servers"], record["tensors"]) == ("name_service", 2, 1, 10)
    for mode in run.MODES:
        assert MODE_FIELDS <= set(record[mode]), mode
        assert len(record[mode]["rounds"]) == 2
        assert record[mode]["first_step_s"] > 0 and record[mode]["steady_step_s"] > 0
    assert record["declared"]["declare_per_name_us"] > 0
    assert record["tcp_round_trip_us"] > 0 and "name_service_per_name_us" in record
    assert "first-use" in proc.stdout and "declared" in proc.stdout
