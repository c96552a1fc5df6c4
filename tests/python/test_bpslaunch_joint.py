"""bpslaunch's ``DMLC_ROLE=joint``: a worker machine that also starts its colocated server.

With a fake ``byteps-core`` (records its role) and fake commands, then one real job: two joint
machines and a CPU-only server machine, each emulated on its own loopback address, whose hosts
the scheduler must see register.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CORE_BINARY, PYTHON, free_port, missing_core, kill_left
from test_bpslaunch import DIST, FAKE_CORE, LAUNCH, PUSH_PULL, launch_env, run

from byteps.launcher import bpslaunch
from byteps.launcher.bpslaunch import LaunchConfigError

# One write(2) per line, so that the lines of concurrent local ranks do not interleave.
PRINT_ROLE = ("import os; os.write(1, f\"ROLE {os.environ['DMLC_ROLE']} "
              "{os.environ['BYTEPS_LOCAL_RANK']}\\n\".encode())")


@pytest.fixture
def fake_core(tmp_path: Path) -> Path:
    core = tmp_path / "byteps-core"
    core.write_text(FAKE_CORE)
    core.chmod(0o755)
    return core


def joint_env(core: Path, **extra: str) -> dict[str, str]:
    return launch_env(DMLC_ROLE="joint", **{**DIST, **extra}, DMLC_WORKER_ID="0",
                      BYTEPS_CORE_BINARY=str(core), CORE_STARTED=str(core.parent / "started"))


def test_check_env_joint_needs_what_a_worker_needs() -> None:
    assert bpslaunch.check_env({**DIST, "DMLC_ROLE": "JOINT", "DMLC_WORKER_ID": "1"}) == "joint"
    with pytest.raises(LaunchConfigError, match="The env DMLC_WORKER_ID is missing"):
        bpslaunch.check_env({**DIST, "DMLC_ROLE": "joint"})
    assert bpslaunch.check_env({"DMLC_ROLE": "joint", "DMLC_NUM_WORKER": "1"}) == "joint"


def test_joint_starts_the_server_and_the_local_ranks(fake_core: Path) -> None:
    r = run([PYTHON, "-c", PRINT_ROLE], {**joint_env(fake_core), "BYTEPS_LOCAL_SIZE": "2"})
    assert r.returncode == 0, r
    assert (fake_core.parent / "started").read_text().split() == ["server", "server"]
    assert sorted(line for line in r.stdout.splitlines() if line.startswith("ROLE")) == \
        ["ROLE worker 0", "ROLE worker 1"]
    assert "BytePS launching joint" in r.stderr


def test_failing_server_stops_the_worker(fake_core: Path) -> None:
    start = time.monotonic()
    r = run([PYTHON, "-c", "import time; time.sleep(30)"], {**joint_env(fake_core), "FAKE_CORE_EXIT": "5"})
    assert r.returncode == 5, r
    assert "server exited with code 5" in r.stderr
    assert time.monotonic() - start < 15


def test_single_worker_joint_starts_no_server(fake_core: Path) -> None:
    r = run([PYTHON, "-c", PRINT_ROLE], joint_env(fake_core, DMLC_NUM_WORKER="1"))
    assert r.returncode == 0, r
    assert "needs no server; starting the worker only" in r.stderr
    assert "ROLE worker 0" in r.stdout
    assert not (fake_core.parent / "started").exists()


def test_real_mixed_job_through_bpslaunch(tmp_path: Path) -> None:
    """Scheduler on 127.0.0.1, worker machines 127.0.1.1 and 127.0.1.2 (joint: worker and
    colocated server), a CPU machine 127.0.2.1 (server)."""
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "push_pull.py"
    script.write_text(PUSH_PULL)
    common = {**DIST, "DMLC_NUM_SERVER": "3", "DMLC_PS_ROOT_PORT": str(free_port()),
              "BYTEPS_CORE_BINARY": str(CORE_BINARY), "BYTEPS_LOG_LEVEL": "INFO"}
    machines = [("scheduler", "127.0.0.1", {}),
                ("joint", "127.0.1.1", {"DMLC_WORKER_ID": "0"}),
                ("joint", "127.0.1.2", {"DMLC_WORKER_ID": "1"}),
                ("server", "127.0.2.1", {})]
    procs, logs = [], []
    deadline = time.monotonic() + 60
    try:
        for i, (role, host, extra) in enumerate(machines):
            env = launch_env(**common, DMLC_ROLE=role, DMLC_NODE_HOST=host, **extra)
            args = [PYTHON, str(script)] if role == "joint" else []
            logs.append(tmp_path / f"{i}-{role}.log")
            with open(logs[-1], "wb") as log:
                procs.append(subprocess.Popen(LAUNCH + args, env=env, cwd=tmp_path, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        kill_left(procs)
    outputs = [log.read_text(errors="replace") for log in logs]
    report = "\n".join(f"--- {role}@{host} rc={p.returncode}\n{out}"
                       for (role, host, _), p, out in zip(machines, procs, outputs))
    assert [p.returncode for p in procs] == [0, 0, 0, 0], report
    assert "PUSHPULL OK rank=" in outputs[1] and "PUSHPULL OK rank=" in outputs[2], report
    registered = re.findall(r"registered (\w+) \(pid \d+, ([\d.]+):\d+\)", outputs[0])
    assert sorted(registered) == sorted([("server", "127.0.1.1"), ("server", "127.0.1.2"),
                                         ("server", "127.0.2.1"), ("worker", "127.0.1.1"),
                                         ("worker", "127.0.1.2")]), report
