"""Fast tests (no build, no jobs) of bench/pslite/run.py's pure parts, its skip path and deadlines."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest

from bench.pslite import run

MiB4 = 4 << 20


def test_parse_size():
    assert run.parse_size("4M") == MiB4
    assert run.parse_size("64K") == 65536
    assert run.parse_size("1G") == 1 << 30
    assert run.parse_size("4096") == 4096
    assert run.parse_size("4MiB") == MiB4
    for bad in ("", "4X", "-1", "1.5M"):
        with pytest.raises(ValueError):
            run.parse_size(bad)


def test_defaults():
    a = run.parse_args([])
    assert (a.iters, a.rounds, a.tensors, a.tensor_bytes, a.warmup) == (30, 3, 20, MiB4, 2)
    assert a.systems == run.SYSTEMS
    assert a.pslite_tarball == run.DEFAULT_TARBALL
    assert a.cache_dir.name == "ps-lite-15b8adf" and a.cache_dir.parent.name == "byteps-bench"
    assert run.REPO not in a.cache_dir.parents  # ps-lite is never built inside the repository


@pytest.mark.parametrize("argv", [
    ["--iters", "0"], ["--rounds", "0"], ["--tensors", "0"], ["--warmup", "-1"], ["--tensor-bytes", "6"],
    ["--tensor-bytes", "lots"], ["--systems", "byteps,nccl"], ["--systems", ","], ["--timeout", "0"],
    ["--iter-timeout", "-5"], ["--iters", "x"],
])
def test_bad_arguments(argv, capsys):
    with pytest.raises(SystemExit) as e:
        run.parse_args(argv)
    assert e.value.code == 2
    assert "error" in capsys.readouterr().err


def test_systems_subset_keeps_order_and_dedups():
    assert run.parse_systems("pslite-zpushpull, byteps,byteps") == ["pslite-zpushpull", "byteps"]


def test_byteps_result_parsing():
    data = {"mode": "many_tensors", "tensors": 20, "tensor_bytes": MiB4, "iterations": 20,
            "per_tensor_us_median": 2500.0, "workers": 1}
    assert run.byteps_iteration_s(data, 20, MiB4) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        run.byteps_iteration_s({**data, "tensors": 10}, 20, MiB4)
    with pytest.raises(ValueError):
        run.byteps_iteration_s({"mode": "sweep", "rows": []}, 20, MiB4)


def test_pslite_result_parsing():
    line = ('RESULT {"system": "ps-lite", "mode": "zpushpull", "tensors": 20, "tensor_bytes": 4194304, '
            '"iters": 3, "warmup": 2, "workers": 1, "servers": 1, "median_s": 0.094, "iter_s": [0.1,0.094,0.09]}')
    text = "[11:00:00] some ps-lite log line\n" + line + "\n"
    data = run.parse_pslite_output(text, "zpushpull", 20, MiB4)
    assert data["median_s"] == pytest.approx(0.094) and len(data["iter_s"]) == 3
    with pytest.raises(ValueError, match="expected push-then-pull"):
        run.parse_pslite_output(text, "push-then-pull", 20, MiB4)
    with pytest.raises(ValueError, match="no RESULT"):
        run.parse_pslite_output("nothing here\n", "zpushpull", 20, MiB4)
    with pytest.raises(ValueError, match="timed out"):
        run.parse_pslite_output("ERROR iteration 3 timed out after 60.0 s: 19 of 20 tensors back\n" + line,
                                "zpushpull", 20, MiB4)


def test_round_order_rotates():
    s = ["a", "b", "c"]
    assert [run.round_order(s, r) for r in range(4)] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"],
                                                         ["a", "b", "c"]]


def test_summary_medians_throughput_and_ratios():
    rounds = [{"byteps": 0.05, "pslite-zpushpull": 0.10, "pslite-push-then-pull": None},
              {"byteps": 0.07, "pslite-zpushpull": 0.09, "pslite-push-then-pull": 0.30},
              {"byteps": 0.06, "pslite-zpushpull": 0.20, "pslite-push-then-pull": 0.20}]
    systems = ["byteps", "pslite-push-then-pull", "pslite-zpushpull"]
    s = run.summarize(rounds, systems, 20, MiB4)
    assert s["byteps"]["median_iter_s"] == pytest.approx(0.06)
    assert s["byteps"]["gbit_s"] == pytest.approx(20 * MiB4 * 8 / 0.06 / 1e9)
    assert s["pslite-zpushpull"]["median_iter_s"] == pytest.approx(0.10)
    assert s["pslite-zpushpull"]["byteps_over_this"] == pytest.approx(0.10 / 0.06)
    assert s["pslite-zpushpull"]["byteps_over_this_paired_median"] == pytest.approx(2.0)  # 2, 9/7, 10/3
    assert s["pslite-push-then-pull"]["ok_rounds"] == 2
    assert s["pslite-push-then-pull"]["median_iter_s"] == pytest.approx(0.25)
    table = run.format_table(s, systems, {})
    assert "| byteps | 3 | 60.0 | 11.18 | - |" in table
    assert "| pslite-zpushpull | 3 | 100.0 | 6.71 | 1.67 |" in table


def test_summary_without_byteps_and_all_failed():
    s = run.summarize([{"pslite-zpushpull": None}], ["pslite-zpushpull"], 20, MiB4)
    assert s["pslite-zpushpull"] == {"ok_rounds": 0}
    assert "0 (failed)" in run.format_table(s, ["pslite-zpushpull"], {})


def test_clean_env_drops_tuning_variables(monkeypatch):
    monkeypatch.setenv("BYTEPS_PARTITION_BYTES", "1")
    monkeypatch.setenv("DMLC_ROLE", "worker")
    monkeypatch.setenv("PS_VERBOSE", "2")
    env = run.clean_env({"DMLC_NUM_WORKER": "1"})
    assert "BYTEPS_PARTITION_BYTES" not in env and "DMLC_ROLE" not in env and "PS_VERBOSE" not in env
    assert env["DMLC_NUM_WORKER"] == "1" and env.get("PATH") == os.environ.get("PATH")


def test_missing_tarball_skips_with_reason(tmp_path, capsys):
    missing = tmp_path / "no-such-ps-lite.tar.gz"
    out = tmp_path / "out.json"
    rc = run.main(["--pslite-tarball", str(missing), "--systems", "pslite-push-then-pull,pslite-zpushpull",
                   "--rounds", "1", "--iters", "1", "--cache-dir", str(tmp_path / "cache"), "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert f"ps-lite rows skipped: ps-lite tarball {missing} not found" in text
    assert "| pslite-zpushpull | skipped |" in text
    result = json.loads(out.read_text())
    assert set(result["skipped"]) == {"pslite-push-then-pull", "pslite-zpushpull"}
    assert "not found" in result["skipped"]["pslite-zpushpull"]
    assert not (tmp_path / "cache").exists()


def test_missing_dependencies_skip_with_reason(tmp_path, monkeypatch):
    tarball = tmp_path / "ps-lite-x.tar.gz"
    tarball.write_bytes(b"not really")
    monkeypatch.setattr(run, "pslite_dependency_problems", lambda: ["no /usr/bin/protoc (protobuf-compiler)"])
    binary, reason = run.prepare_pslite(tarball, tmp_path / "cache", 10)
    assert binary is None
    assert "protoc" in reason and run.APT_HINT in reason


def test_bad_tarball_is_a_reported_skip(tmp_path, monkeypatch):
    tarball = tmp_path / "ps-lite-x.tar.gz"
    tarball.write_bytes(b"not a tar file")
    monkeypatch.setattr(run, "pslite_dependency_problems", lambda: [])
    binary, reason = run.prepare_pslite(tarball, tmp_path / "cache", 10)
    assert binary is None and reason.startswith("ps-lite build failed:")


def test_byteps_row_runs_when_pslite_skipped(tmp_path, monkeypatch, capsys):
    calls = []
    monkeypatch.setattr(run, "find_core", lambda explicit: Path("/fake/byteps-core"))
    monkeypatch.setattr(run, "run_byteps", lambda core, a, wd: calls.append(core) or {"iter_s": 0.05, "raw": {}})
    out = tmp_path / "out.json"
    rc = run.main(["--pslite-tarball", str(tmp_path / "missing.tgz"), "--rounds", "2", "--out", str(out)])
    assert rc == 0 and len(calls) == 2
    text = capsys.readouterr().out
    assert "ps-lite rows skipped:" in text
    assert "| byteps | 2 | 50.0 | 13.42 | - |" in text
    assert json.loads(out.read_text())["summary"]["byteps"]["median_iter_s"] == pytest.approx(0.05)


def test_failed_job_is_reported_and_exit_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(run, "find_core", lambda explicit: Path("/fake/byteps-core"))

    def boom(core, a, wd):
        raise run.JobFailed("byteps job: timed out after 1 s (killed)")

    monkeypatch.setattr(run, "run_byteps", boom)
    rc = run.main(["--systems", "byteps", "--rounds", "1", "--out", str(tmp_path / "o.json")])
    assert rc == 1
    text = capsys.readouterr().out
    assert "round 1: byteps FAILED: byteps job: timed out" in text and "| byteps | 0 (failed) |" in text


def test_missing_core_is_an_error(tmp_path, capsys):
    rc = run.main(["--systems", "byteps", "--core", str(tmp_path / "nope"), "--out", str(tmp_path / "o.json")])
    assert rc == 2 and "no byteps-core" in capsys.readouterr().err


def _fake_binary(tmp_path: Path, body: str) -> Path:
    p = tmp_path / "fake_pslite"
    p.write_text("#!/bin/sh\n" + body + "\n")
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return p


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0); count it as gone
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


def test_pslite_job_deadline_kills_every_process(tmp_path):
    pids = tmp_path / "pids"
    binary = _fake_binary(tmp_path, f'echo $$ >> {pids}; exec sleep 30')
    a = run.parse_args(["--timeout", "1", "--iters", "1", "--cache-dir", str(tmp_path)])
    t0 = time.monotonic()
    with pytest.raises(run.JobFailed, match="timed out after 1 s"):
        run.run_pslite(binary, "zpushpull", a, tmp_path)
    assert time.monotonic() - t0 < 10
    started = [int(x) for x in pids.read_text().split()]
    assert len(started) == 3
    assert not any(_alive(p) for p in started)


def test_pslite_job_parses_worker_result(tmp_path):
    line = ('RESULT {"system": "ps-lite", "mode": "zpushpull", "tensors": 20, "tensor_bytes": 4194304, '
            '"iters": 1, "warmup": 2, "workers": 1, "servers": 1, "median_s": 0.125, "iter_s": [0.125]}')
    binary = _fake_binary(tmp_path, f"[ \"$DMLC_ROLE\" = worker ] && echo '{line}'; exit 0")
    a = run.parse_args(["--timeout", "10", "--iters", "1", "--cache-dir", str(tmp_path)])
    assert run.run_pslite(binary, "zpushpull", a, tmp_path)["iter_s"] == pytest.approx(0.125)


def test_pslite_role_failure_is_reported(tmp_path):
    binary = _fake_binary(tmp_path, '[ "$DMLC_ROLE" = server ] && { echo "server broke"; exit 7; }; sleep 0.2')
    a = run.parse_args(["--timeout", "10", "--iters", "1", "--cache-dir", str(tmp_path)])
    with pytest.raises(run.JobFailed, match="server exited 7"):
        run.run_pslite(binary, "zpushpull", a, tmp_path)


def test_run_logged_deadline(tmp_path):
    with pytest.raises(run.JobFailed, match="timed out"):
        run.run_logged(["sleep", "30"], tmp_path / "log", 0.5, what="sleeper")
