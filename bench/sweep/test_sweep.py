"""Unit tests of the byteps settings sweep (bench/sweep): grid, environments, autotune check,
best point, ratios, flags, tables and the plan.  Deterministic: no network namespaces, no
subprocesses, no root::

    /usr/bin/python3 -m pytest -q bench/sweep
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.collective import model  # noqa: E402
from bench.sweep import grid  # noqa: E402
from bench.sweep import run as sweep  # noqa: E402

INFO_WITHOUT = """\
BYTEPS_PARTITION_BYTES       4096000    [default]  tensors are split into partitions
BYTEPS_SCHEDULING_CREDIT     0          [default]  partitions in flight per worker; 0: no cap
BYTEPS_CONNECTIONS_PER_PEER  2          [default]  TCP connections opened to each peer (1..16)
"""
INFO_WITH = INFO_WITHOUT + "BYTEPS_AUTOTUNE              0          [default]  tune settings\n"
CASE = grid.CASES_BY_NAME["n4k4-1000"]


def _rows(times: dict[str, float | None], case: grid.Case = CASE, nbytes: int = 16 << 20,
          autotune_reason: str | None = None) -> list[dict]:
    """Measurements of one case and size: *times* by row label ("gloo all_reduce",
    "defaults", "autotune" or a grid label)."""
    points = grid.expand_grid([1 << 20, 4096000], [0, 4], [2])
    out = []
    for spec in grid.row_specs(points, autotune_reason):
        if spec.label in times:
            t = times[spec.label]
            out.append(grid.measurement(case, spec, 1000.0, nbytes, t, 10,
                                        "ok" if t else "skipped", "" if t else "why"))
    return out


P1, P2 = "part=1M credit=0 conns=2", "part=4000K credit=4 conns=2"


# --------------------------------------------------------------------------------------------
# Grid and environments


def test_expand_grid_is_the_product_partitions_outermost():
    pts = grid.expand_grid([65536, 1 << 20], [0, 4, 16], [1, 2])
    assert len(pts) == 12
    assert pts[0] == grid.Point(65536, 0, 1)
    assert pts[1] == grid.Point(65536, 0, 2)
    assert pts[-1] == grid.Point(1 << 20, 16, 2)
    assert len(set(pts)) == 12


def test_expand_grid_drops_duplicates():
    assert grid.expand_grid([4, 4], [0, 0], [1]) == [grid.Point(4, 0, 1)]


def test_default_grid_has_32_points_and_quick_4():
    def count(preset: dict) -> int:
        a = sweep.parse_args(["--quick"] if preset is sweep.QUICK else [])
        return len(grid.expand_grid(a.partitions, a.credits, a.connections))
    assert count(sweep.DEFAULTS) == 32
    assert count(sweep.QUICK) == 4


def test_point_env_and_label():
    p = grid.Point(4096000, 16, 2)
    assert p.env() == {"BYTEPS_PARTITION_BYTES": "4096000", "BYTEPS_SCHEDULING_CREDIT": "16",
                       "BYTEPS_CONNECTIONS_PER_PEER": "2"}
    assert p.label == "part=4000K credit=16 conns=2"
    assert grid.Point(65536, 0, 1).label == "part=64K credit=0 conns=1"


def test_row_specs_defaults_have_no_byteps_variable():
    specs = grid.row_specs(grid.expand_grid([1 << 20], [0], [1, 2]), None)
    assert [s.kind for s in specs] == ["gloo", "defaults", "autotune", "grid", "grid"]
    by_kind = {s.kind: s for s in specs}
    assert not any(k.startswith("BYTEPS_") for k in by_kind["defaults"].env)
    assert not any(k.startswith("BYTEPS_") for k in by_kind["gloo"].env)
    assert dict(by_kind["autotune"].env) == {"BYTEPS_AUTOTUNE": "1"}
    assert by_kind["defaults"].system == "byteps" and by_kind["gloo"].system == "gloo"
    for s in specs[3:]:
        assert set(s.env) == set(grid.GRID_VARS)


def test_strip_byteps_environment_keeps_the_core_path():
    env = {"BYTEPS_PARTITION_BYTES": "1M", "BYTEPS_CORE_BINARY": "/x", "PATH": "/bin",
           "BYTEPS_LOG_LEVEL": "INFO"}
    assert grid.strip_byteps_environment(env) == ["BYTEPS_LOG_LEVEL", "BYTEPS_PARTITION_BYTES"]
    assert env == {"BYTEPS_CORE_BINARY": "/x", "PATH": "/bin"}


# --------------------------------------------------------------------------------------------
# Autotune


def test_autotune_skipped_when_info_does_not_list_it():
    assert grid.autotune_skip_reason(INFO_WITHOUT) == "BYTEPS_AUTOTUNE not in this build"
    assert grid.autotune_skip_reason("") == "BYTEPS_AUTOTUNE not in this build"
    # Mentioned in another variable's help is not listed.
    assert grid.autotune_skip_reason("BYTEPS_X 0 [default] unlike BYTEPS_AUTOTUNE\n")


def test_autotune_runs_when_info_lists_it():
    assert grid.autotune_skip_reason(INFO_WITH) is None


def test_plan_marks_autotune_skipped_without_failing():
    args = sweep.parse_args(["--quick"])
    reason = grid.autotune_skip_reason(INFO_WITHOUT)
    plan = sweep.build_plan(args.cases, grid.expand_grid([1 << 20], [0], [2]), [16 << 20],
                            [32], args, reason)
    auto = [j for j in plan if j.spec.kind == "autotune"]
    assert len(auto) == 1 and auto[0].status == "skipped"
    assert auto[0].error == "BYTEPS_AUTOTUNE not in this build"
    assert all(j.status == "pending" and j.estimate_s > 0 for j in plan if j is not auto[0])
    rows = sweep.job_rows(auto[0], {}, [16 << 20])
    assert rows[0]["status"] == "skipped" and rows[0]["time_s"] is None


# --------------------------------------------------------------------------------------------
# Cases and rates


def test_cases_use_the_collective_cpu_budget():
    rates = {c.name: c.used_rate(12000) for c in grid.CASES}
    assert rates == {"n4k4-500": 500, "n4k4-1000": 1000, "n4k4-2500": 1500,
                     "n8k8-1000": 750, "n4k2-1000": 1000, "n4coloc-1000": 1000}
    coloc = grid.CASES_BY_NAME["n4coloc-1000"]
    assert (coloc.k, coloc.placement, coloc.hosts) == (4, model.COLOCATED, 4)
    half = grid.CASES_BY_NAME["n4k2-1000"]
    assert (half.k, half.hosts) == (2, 6)
    assert grid.CASES_BY_NAME["n4k4-2500"].used_rate(0) == 2500


def test_select_cases_rejects_unknown_names():
    assert [c.name for c in grid.select_cases(["n8k8-1000", "n4k2-1000", "n8k8-1000"])] == \
        ["n8k8-1000", "n4k2-1000"]
    with pytest.raises(ValueError, match="nope"):
        grid.select_cases(["nope"])


def test_parse_args_quick_and_overrides():
    a = sweep.parse_args(["--quick"])
    assert [c.name for c in a.cases] == ["n4k4-1000"] and a.sizes == [16 << 20]
    b = sweep.parse_args(["--quick", "--partitions", "64K,256K", "--sizes", "1M"])
    assert b.partitions == [65536, 262144] and b.sizes == [1 << 20]
    c = sweep.parse_args([])
    assert len(c.cases) == 6 and c.sizes == [100 << 20] and c.max_minutes == 0
    with pytest.raises(SystemExit):
        sweep.parse_args(["--connections", "0"])


# --------------------------------------------------------------------------------------------
# Best point, ratios, flags


def test_best_is_the_fastest_grid_row_only():
    rows = _rows({"gloo all_reduce": 0.5, "defaults": 0.1, P1: 0.30, P2: 0.20})
    best = grid.best_of(rows)
    assert best["label"] == P2 and best["time_s"] == 0.20  # defaults (faster) is not a grid row


def test_best_of_nothing_measured():
    assert grid.best_of(_rows({"gloo all_reduce": 0.5, P1: None})) is None


def test_ratios_and_within_flags():
    rows = grid.annotate(_rows({"gloo all_reduce": 0.40, "defaults": 0.21, "autotune": 0.25,
                                P1: 0.30, P2: 0.20}))
    by = {r["label"]: r for r in rows}
    assert by[P2]["to_best"] == pytest.approx(1.0) and by[P2]["is_best"]
    assert by["defaults"]["to_best"] == pytest.approx(0.20 / 0.21)
    assert by["defaults"]["vs_gloo"] == pytest.approx(0.40 / 0.21)
    assert by["defaults"]["within_tol"] is True  # 0.21 <= 1.05 * 0.20
    assert by["autotune"]["within_tol"] is False  # 0.25 > 0.21
    assert by["gloo all_reduce"]["vs_gloo"] == pytest.approx(1.0)
    assert by[P1]["is_best"] is False


def test_within_edges():
    assert grid.within(1.0, 1.05) is True
    assert grid.within(1.0, 1.0501) is False
    assert grid.within(1.0, 0.9) is True  # faster than the best grid point
    assert grid.within(None, 1.0) is None and grid.within(1.0, None) is None
    assert grid.within(1.0, 1.09, tolerance=0.1) is True


def test_ratios_stay_within_their_case_and_size():
    a = _rows({"gloo all_reduce": 0.4, P1: 0.2})
    b = _rows({"gloo all_reduce": 1.0, P1: 0.5}, nbytes=64 << 20)
    c = _rows({P1: 0.1}, case=grid.CASES_BY_NAME["n4k4-500"])
    rows = grid.annotate(a + b + c)
    assert rows[1]["vs_gloo"] == pytest.approx(2.0) and rows[3]["vs_gloo"] == pytest.approx(2.0)
    assert rows[4]["vs_gloo"] is None and rows[4]["to_best"] == pytest.approx(1.0)


def test_summary_rows_roles_and_skip_reason():
    rows = _rows({"gloo all_reduce": 0.40, "defaults": 0.30, "autotune": None, P1: 0.30,
                  P2: 0.20}, autotune_reason=grid.AUTOTUNE_MISSING)
    summ = grid.summary_rows(rows)
    assert [s["row"] for s in summ] == ["gloo", "best", "defaults", "autotune"]
    best, defaults, auto = summ[1], summ[2], summ[3]
    assert best["setting"] == P2 and best["within"] == "yes"
    assert defaults["within"] == "NO" and defaults["to_best"] == pytest.approx(0.2 / 0.3)
    assert auto["time_s"] is None and auto["setting"] == "skipped: why"
    assert summ[0]["within"] is None


# --------------------------------------------------------------------------------------------
# Tables


def _doc(rows: list[dict]) -> dict:
    return {"meta": {"started": "2026-12-02 05:30:00", "command": "python3 -m bench.sweep.run",
                     "complete": True, "rate_budget_mbit": 12000, "tolerance": 0.05},
            "cases": [{"name": CASE.name, "n": 4, "k": 4, "placement": "separate", "hosts": 8,
                       "requested_rate_mbit": 1000.0, "rate_mbit": 1000.0}],
            "configs": [{"case": CASE.name, "kind": "autotune", "label": "autotune",
                         "status": "skipped", "error": grid.AUTOTUNE_MISSING},
                        {"case": CASE.name, "kind": "defaults", "label": "defaults",
                         "status": "ok", "error": "", "settings_reported": "probe: 1 Gbit/s"}],
            "rows": rows}


def test_markdown_report():
    rows = _rows({"gloo all_reduce": 0.40, "defaults": 0.21, "autotune": None, P1: 0.30,
                  P2: 0.20}, autotune_reason=grid.AUTOTUNE_MISSING)
    md = grid.markdown_report(_doc(rows))
    assert md.startswith("# byteps settings sweep\n")
    assert "(incomplete)" not in md
    assert "- n4k4-1000: n=4, k=4 separate, 8 hosts, R = 1000 Mbit/s\n" in md
    assert "| case | R_Mbit | size | row | time_s | best/t | vs_gloo | within5% | setting |" in md
    assert f"| n4k4-1000 | 1000 | 16M | best | 0.2000 | 1.000 | 2.00 | yes | {P2} |" in md
    assert "| n4k4-1000 | 1000 | 16M | defaults | 0.2100 | 0.952 | 1.90 | yes |" in md
    assert "## n4k4-1000 (R = 1000 Mbit/s), * = best" in md
    assert f"| 16M | {P2} * |" in md
    assert "- n4k4-1000 autotune: skipped: BYTEPS_AUTOTUNE not in this build" in md
    assert "- n4k4-1000 defaults: probe: 1 Gbit/s\n" in md
    lines = md.splitlines()
    summary = lines.index("## Summary")
    assert lines[summary + 3].startswith("| ---") or lines[summary + 3].startswith("| ---:")


def test_markdown_marks_lowered_rate_and_incomplete():
    doc = _doc(_rows({P1: 0.3}))
    doc["meta"]["complete"] = False
    doc["cases"][0].update(requested_rate_mbit=2500.0, rate_mbit=1500.0, name="n4k4-2500")
    md = grid.markdown_report(doc)
    assert "(incomplete)" in md
    assert "R = 1500 Mbit/s (requested 2500, CPU budget)" in md


def test_text_summary_table_and_results_json(tmp_path):
    rows = _rows({"gloo all_reduce": 0.40, "defaults": 0.21, P1: 0.30, P2: 0.20})
    text = grid.summary_table(rows)
    header = text.splitlines()[0].split()
    assert header == ["case", "R_Mbit", "size", "row", "time_s", "best/t", "vs_gloo",
                      "within5%", "setting"]
    args = sweep.parse_args(["--quick"])
    plan = sweep.build_plan(args.cases, grid.expand_grid([1 << 20], [0], [2]), [16 << 20],
                            [32], args, None)
    meta = {"started": "x", "command": "y", "tolerance": 0.05, "rate_budget_mbit": 12000}
    sweep.write_outputs(tmp_path, meta, args.cases, plan, rows, 12000)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["meta"]["complete"] is False  # the plan is still pending
    assert [s["row"] for s in doc["summary"]] == ["gloo", "best", "defaults"]
    assert doc["configs"][1]["kind"] == "defaults" and doc["configs"][1]["env"] == {}
    assert (tmp_path / "results.md").read_text().startswith("# byteps settings sweep")


def test_reported_settings_from_the_bench_json_or_log():
    data = {"partition_bytes": 131072, "credit_bytes": 2097152, "settings": "probe: 1 Gbit/s"}
    got = grid.reported_settings(data, "ignored")
    assert got == {"partition_bytes_reported": 131072, "credit_bytes_reported": 2097152,
                   "settings_reported": "probe: 1 Gbit/s"}
    assert grid.chosen(got) == "; core: part=128K, credit=2M bytes"
    new = "[worker:0@h0] # byteps bench: 4 workers, 4 servers, partition 1048576 B, credit 0 B, "
    assert grid.reported_settings(None, new + "dtype float32\n") == {
        "partition_bytes_reported": 1048576, "credit_bytes_reported": 0}
    old = "# byteps bench: 4 workers, 4 servers, partition 1048576 B, credit 4, dtype float32"
    assert grid.reported_settings({}, old) == {"partition_bytes_reported": 1048576,
                                               "credit_reported": 4}
    assert grid.reported_settings(None, "nothing") == {}
    assert grid.chosen({}) == ""


def test_summary_shows_what_the_defaults_chose():
    rows = _rows({"gloo all_reduce": 0.4, "defaults": 0.2, P1: 0.3})
    rows[1].update(partition_bytes_reported=131072, credit_bytes_reported=2097152)
    summ = {s["row"]: s for s in grid.summary_rows(rows)}
    assert summ["defaults"]["setting"] == \
        "no BYTEPS_* variable; core: part=128K, credit=2M bytes"


def _fake_run_one(job, idx, sizes, iters, args, raw):
    times = {"gloo": 0.40, "defaults": 0.21}
    p = job.spec.point
    t = times.get(job.spec.kind) or (0.2 if p and p.partition_bytes == 4096000 else 0.3)
    return {m: {"time_s": t, "iters": it} for m, it in zip(sizes, iters)}


def _run_fake_plan(tmp_path, monkeypatch, extra: list[str]) -> tuple[list, dict]:
    monkeypatch.setattr(sweep, "run_one", _fake_run_one)
    args = sweep.parse_args(["--quick", "--out", str(tmp_path), *extra])
    points = grid.expand_grid(args.partitions, args.credits, args.connections)
    plan = sweep.build_plan(args.cases, points, args.sizes, [32], args, grid.AUTOTUNE_MISSING)
    meta = {"started": "x", "command": "y", "tolerance": 0.05, "rate_budget_mbit": 12000}
    sweep.run_plan(plan, args.sizes, [32], args, tmp_path, meta, args.cases)
    return plan, json.loads((tmp_path / "results.json").read_text())


def test_run_plan_with_a_fake_runner(tmp_path, monkeypatch, capsys):
    plan, doc = _run_fake_plan(tmp_path, monkeypatch, [])
    assert [j.status for j in plan] == ["ok", "ok", "skipped", "ok", "ok", "ok", "ok"]
    assert doc["meta"]["complete"] is True
    summ = {s["row"]: s for s in doc["summary"]}
    assert summ["best"]["setting"] == "part=4000K credit=0 conns=2"
    assert summ["defaults"]["within"] == "yes" and summ["gloo"]["vs_gloo"] == 1.0
    assert summ["autotune"]["setting"] == "skipped: BYTEPS_AUTOTUNE not in this build"
    assert "[7/" not in capsys.readouterr().out  # 6 runnable configurations


def test_max_minutes_stops_starting_configurations(tmp_path, monkeypatch):
    clock = itertools.count(0, 30)  # every call to the clock: 30 s later
    monkeypatch.setattr(sweep.time, "monotonic", lambda: next(clock))
    plan, doc = _run_fake_plan(tmp_path, monkeypatch, ["--max-minutes", "2"])
    statuses = [j.status for j in plan]
    assert "ok" in statuses and "pending" not in statuses
    budget = [j for j in plan if j.error.startswith("--max-minutes 2 spent")]
    assert budget and all(j.status == "skipped" for j in budget)
    assert doc["meta"]["complete"] is True
    assert any(r["reason"].startswith("--max-minutes") for r in doc["rows"])
