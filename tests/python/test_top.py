"""``byteps top`` (docs/top.md) against a live job: the live view under tmux shows every worker and
server with their rates, ``--json`` gives the same as one object, the job is found with nothing
named (bpsrun's job file, its secret included), and a job that cannot be reached is a named error
within the deadline."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import PYTHON, PYTHON_DIR, free_port, job_env, missing_core

pytestmark = pytest.mark.skipif(bool(missing_core()), reason=missing_core() or "")

# Every worker pushes until the test creates STOP; worker 0's word (a push_pull of a flag) ends
# every worker at the same iteration.
SCRIPT = """
import os
import numpy as np
import byteps.numpy as bps
bps.init()
x = np.ones(1 << 18, np.float32)
stop = os.path.join(os.environ["GO_DIR"], "STOP")
while True:
    bps.push_pull(x, name="grad.fc", average=False)
    flag = np.array([1.0 if bps.rank() == 0 and os.path.exists(stop) else 0.0], np.float32)
    if bps.push_pull(flag, name="stop", average=False)[0] > 0:
        break
print("STOPPED", flush=True)
bps.shutdown()
"""


def top_command(*args: str) -> list[str]:
    return [PYTHON, "-m", "byteps.cli", "top", *args]


@pytest.fixture
def live_job(tmp_path):
    """A running 2-worker, 2-server bpsrun job; yields its environment (TMPDIR: its job file)."""
    script = tmp_path / "loop.py"
    script.write_text(SCRIPT)
    env = job_env({"GO_DIR": str(tmp_path), "TMPDIR": str(tmp_path), "BYTEPS_TIMEOUT": "60"})
    job = subprocess.Popen([PYTHON, "-m", "byteps.launcher.bpsrun", "-n", "2", "-s", "2", "--timeout", "120",
                            PYTHON, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, start_new_session=True)
    folder = tmp_path / f"byteps-{os.getuid()}"
    deadline = time.monotonic() + 30
    while not (folder.exists() and any(folder.glob("bpsrun-*.json"))):
        assert time.monotonic() < deadline and job.poll() is None, "bpsrun wrote no job file"
        time.sleep(0.1)
    top_env = {k: v for k, v in env.items() if not k.startswith(("DMLC_", "BYTEPS_JOB_SECRET"))}
    try:
        yield top_env
    finally:
        (tmp_path / "STOP").touch()
        try:
            out, _ = job.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            out, _ = job.communicate()
        assert job.returncode == 0, out
        assert out.count("STOPPED") == 2, out
        assert not any(folder.glob("bpsrun-*.json")), "bpsrun left its job file"


def test_json_snapshot_has_every_node_and_its_rates(live_job):
    deadline = time.monotonic() + 30
    while True:  # rates need two heartbeats of every node (one a second)
        r = subprocess.run(top_command("--json"), env=live_job, capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        view = json.loads(r.stdout)
        if all((w["push_bytes_per_s"] or 0) > 0 for w in view["workers"]) and \
                all((s["rounds_per_s"] or 0) > 0 for s in view["servers"]):
            break
        assert time.monotonic() < deadline, r.stdout
        time.sleep(0.5)
    assert view["started"] and len(view["job"]) == 16
    assert [w["rank"] for w in view["workers"]] == [0, 1]
    assert [s["rank"] for s in view["servers"]] == [0, 1]
    for w in view["workers"]:
        assert w["pull_bytes_per_s"] > 0 and w["push_pulls_per_s"] > 0, w
        assert w["partition_bytes"] > 0 and w["errors"] == 0, w
        assert w["slowest"] is None or w["slowest"]["tensor"] in ("byteps.grad.fc", "byteps.stop"), w
    assert sum(s["summed_bytes_per_s"] for s in view["servers"]) > 0
    assert {lag["worker"] for lag in view["arrival_lag"]} == {0, 1}


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed (scripts/install-deps.sh installs it)")
def test_live_view_under_tmux_shows_every_worker_and_server(live_job, tmp_path):
    sock = f"bps-top-{os.getpid()}"
    env_args = [f"{k}={v}" for k, v in live_job.items()]
    subprocess.run(["tmux", "-L", sock, "new-session", "-d", "-x", "160", "-y", "40", "-s", "top", "env", "-i",
                    *env_args, *top_command()], check=True, timeout=30)
    try:
        deadline = time.monotonic() + 30
        # rank, host, then the rates: a worker's push MB/s first; a server's rounds/s fourth.
        worker_rows = re.compile(r"^(\d)\s+127\.0\.0\.1\s+(\d+\.\d)\s", re.M)
        server_rows = re.compile(r"^(\d)\s+127\.0\.0\.1\s+(\d+\.\d)\s+(\d+\.\d)\s+(\d+\.\d)\s+(\d+\.\d)", re.M)
        while True:
            screen = subprocess.run(["tmux", "-L", sock, "capture-pane", "-p", "-t", "top"], capture_output=True,
                                    text=True, timeout=30).stdout
            workers = screen.split("SERVER")[0]
            servers = screen.split("SERVER")[-1]
            ranks_w = {int(m[0]) for m in worker_rows.findall(workers) if float(m[1]) > 0}
            ranks_s = {int(m[0]) for m in server_rows.findall(servers) if float(m[4]) > 0}
            if ranks_w == {0, 1} and ranks_s == {0, 1}:
                break
            assert time.monotonic() < deadline, f"the screen never showed every node with traffic:\n{screen}"
            time.sleep(0.5)
        assert "byteps top - job " in screen and "2 worker(s), 2 server(s), running" in screen, screen
        assert "stragglers:" in screen, screen
    finally:
        subprocess.run(["tmux", "-L", sock, "kill-server"], timeout=30)


def test_an_unreachable_scheduler_is_a_named_error_within_the_deadline():
    port = free_port()
    start = time.monotonic()
    r = subprocess.run(top_command("--scheduler", f"127.0.0.1:{port}", "--timeout", "2"), env=job_env(),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r
    assert f"cannot reach the scheduler at 127.0.0.1:{port}" in r.stderr, r.stderr
    assert time.monotonic() - start < 20


def test_bad_or_missing_addresses_say_what_to_give(tmp_path):
    r = subprocess.run(top_command("--scheduler", "nohost"), env=job_env(), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "expected HOST:PORT" in r.stderr, r
    r = subprocess.run(top_command(), env=job_env({"TMPDIR": str(tmp_path)}), capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2 and "which job? give --scheduler HOST:PORT" in r.stderr, r


def test_a_wrong_secret_is_refused_naming_it(live_job):
    env = {**live_job, "BYTEPS_JOB_SECRET": "not-the-jobs"}
    r = subprocess.run(top_command("--timeout", "5"), env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r
    assert "BYTEPS_JOB_SECRET" in r.stderr or "authentic" in r.stderr, r.stderr
