"""Tests of the SSH launcher's bring-up/teardown benchmark (bench/launch)::

    /usr/bin/python3 -m pytest -q bench/launch

* ``summarize`` and ``table`` on hand-made runs: medians, min, max, the targets and whether the
  medians meet them (one figure made to miss its target); bad arguments, and a machine where the
  cluster cannot be made, exit with status 2 (the latter naming the reason).
* A 1-run smoke (about 15 s): the benchmark for real on tools/testbed/sshd.py's cluster exits 0
  (every job's sums are checked by the benchmark), prints the table, and its JSON line and
  OUT/launch.json hold every figure.  Skipped, with the reason, only where the cluster cannot be
  made here (no network namespaces or root, no OpenSSH, the core not built).
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

from tools.localjob import hermetic_env  # noqa: E402
from tools.testbed.sshd import why_no_cluster  # noqa: E402

from bench.launch import run  # noqa: E402

KEYS = [key for key, _, _ in run.FIGURES]


def _run(ssh: float, local: float, exit_s: float, clean_s: float, poll: float = 0.02) -> dict:
    return {"ssh_bring_up_s": ssh, "local_bring_up_s": local, "ssh_over_local": ssh / local,
            "teardown_exit_s": exit_s, "teardown_clean_s": clean_s, "clean_poll_s": poll}


def test_summarize_and_table_known_answers() -> None:
    runs = [_run(4.0, 0.5, 2.0, 2.1), _run(6.0, 0.4, 2.5, 6.0, 0.03), _run(5.0, 0.5, 1.5, 5.5, 0.01)]
    s = run.summarize(runs)
    assert (s["ssh_bring_up_s"]["median"], s["ssh_bring_up_s"]["min"], s["ssh_bring_up_s"]["max"]) == (5.0, 4.0, 6.0)
    assert s["local_bring_up_s"]["median"] == 0.5
    assert s["ssh_over_local"]["median"] == pytest.approx(10.0)  # per run: 8, 15, 10
    assert s["ssh_over_local"]["max"] == pytest.approx(15.0)
    assert s["teardown_exit_s"]["median"] == 2.0 and s["teardown_exit_s"]["meets_target"] is True
    assert s["teardown_clean_s"]["median"] == 5.5 and s["teardown_clean_s"]["meets_target"] is False
    assert s["ssh_bring_up_s"]["target"] == 10.0 and s["ssh_bring_up_s"]["meets_target"] is True
    assert s["local_bring_up_s"]["target"] is None and s["local_bring_up_s"]["meets_target"] is None
    assert s["clean_poll_s"] == 0.02
    lines = run.table(s, 3).splitlines()
    assert "3 runs" in lines[0]
    rows = {line[:40].strip(): line[40:].split() for line in lines[2:2 + len(KEYS)]}
    assert rows["bring-up over ssh, 8 hosts (s)"] == ["5.00", "4.00", "6.00", "<", "10", "yes"]
    assert rows["teardown: failure -> hosts clean (s)"] == ["5.50", "2.10", "6.00", "<", "5", "NO"]
    assert rows["bring-up, bpsrun on one host (s)"] == ["0.50", "0.40", "0.50", "-", "-"]
    assert lines[-1] == "(hosts clean: polled with `ip netns pids`, median poll 20 ms)"


@pytest.mark.parametrize("args", [["--runs", "0"], ["--timeout", "0"]])
def test_bad_arguments_exit_2(args: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        run.main(args)
    assert e.value.code == 2


def test_no_cluster_exits_2_with_the_reason(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture,
                                            tmp_path: Path) -> None:
    monkeypatch.setattr(run, "why_no_cluster", lambda: "no emulated cluster here: not root")
    assert run.main(["--runs", "1", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == ("bench.launch: cannot make the ssh cluster here: "
                                       "no emulated cluster here: not root\n")
    assert not (tmp_path / "launch.json").exists()


def test_one_run_smoke(tmp_path: Path) -> None:
    reason = why_no_cluster()
    if reason:
        pytest.skip(reason)
    proc = subprocess.run([sys.executable, "-m", "bench.launch.run", "--runs", "1", "--out", str(tmp_path)],
                          cwd=REPO, env=hermetic_env({"PYTHONPATH": f"{REPO / 'python'}:{REPO}"}),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bring-up over ssh, 8 hosts (s)" in proc.stdout and "teardown: failure -> launcher exit" in proc.stdout
    lines = [line for line in proc.stdout.splitlines() if line.startswith("JSON ")]
    assert len(lines) == 1, proc.stdout
    record = json.loads(lines[0][5:])
    assert record == json.loads((tmp_path / "launch.json").read_text())
    assert (record["benchmark"], record["workers"], record["servers"], record["hosts"]) == ("launch", 4, 4, 8)
    assert len(record["runs"]) == 1
    got = record["runs"][0]
    assert all(got[key] > 0 for key in KEYS), got
    # the hosts are polled only after the launcher's exit
    assert got["teardown_clean_s"] >= got["teardown_exit_s"], got
    for key in KEYS:
        assert record["summary"][key]["median"] == pytest.approx(got[key])
