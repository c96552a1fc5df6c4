"""Tests for the BytePS-compatible per-machine launcher ``bpslaunch``.

The parsing helpers (CPU core lists, environment checks) are unit-tested by importing the
module.  Everything else runs ``python3 -m byteps.launcher.bpslaunch`` as a subprocess with
fake commands (Python one-liners that print their environment, exit with a code or sleep) and
a fake ``byteps-core`` (``BYTEPS_CORE_BINARY``) that records being started.  The last test runs
a real job: scheduler, server and two workers, each through its own bpslaunch.

Every subprocess runs under a timeout; children report their PIDs so the tests can check that
nothing outlives the launcher.  Nothing is killed by name.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

import pytest

from conftest import CORE_BINARY, PYTHON, job_env, free_port, missing_core, pid_alive, kill_left

from byteps.launcher import bpslaunch
from byteps.launcher.bpslaunch import LaunchConfigError

LAUNCH = [PYTHON, "-m", "byteps.launcher.bpslaunch"]
TIMEOUT = 30

# Prints the launcher-provided variables, one per line, prefixed with the local rank (each line
# one write(2), so that the lines of concurrent children do not interleave).
PRINT_ENV = ("import os; r = os.environ['BYTEPS_LOCAL_RANK']; "
             "[os.write(1, f'{r} {k}={os.environ.get(k)}\\n'.encode()) for k in "
             "('BYTEPS_LOCAL_RANK', 'BYTEPS_LOCAL_SIZE', 'PYTHONUNBUFFERED', 'DMLC_ROLE')]")

# A fake training process.  Behaves according to its local rank: argv[1 + rank] is "exitN"
# (exit N), "selfkill" (SIGKILL itself), "sleep" or "ignore-term" (sleep, ignoring SIGTERM).
# Once set up it records its PID in $PID_DIR and says "ready"; "exitN" and "selfkill" act only
# when every local rank is ready, so the launcher always has live siblings to stop.
ACTOR = r"""
import os, signal, sys, time
rank, size = int(os.environ["BYTEPS_LOCAL_RANK"]), int(os.environ["BYTEPS_LOCAL_SIZE"])
pid_dir = os.environ["PID_DIR"]
action = sys.argv[1 + rank]
if action == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
open(os.path.join(pid_dir, str(os.getpid())), "w").close()
os.write(1, f"ready {rank}\n".encode())
if action.startswith("exit") or action == "selfkill":
    deadline = time.monotonic() + 20
    while len(os.listdir(pid_dir)) < size and time.monotonic() < deadline:
        time.sleep(0.01)
    if action == "selfkill":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(int(action[4:]))
time.sleep(60)
"""

FAKE_CORE = """#!/bin/sh
echo "$DMLC_ROLE $*" > "$CORE_STARTED"
exit "${FAKE_CORE_EXIT:-0}"
"""


def launch_env(**extra: str) -> dict[str, str]:
    """A hermetic environment (no inherited BYTEPS_*/DMLC_*) plus ``extra``."""
    env = job_env(extra)
    env.pop("PYTHONUNBUFFERED", None)  # bpslaunch must set it itself
    return env


def single_worker(**extra: str) -> dict[str, str]:
    return launch_env(DMLC_ROLE="worker", DMLC_NUM_WORKER="1", **extra)


def run(args: list[str], env: dict[str, str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(LAUNCH + args, env=env, capture_output=True, text=True, timeout=timeout)


def lines_with(prefix: str, text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith(prefix))


def recorded_pids(pid_dir: Path) -> list[int]:
    return [int(p.name) for p in pid_dir.iterdir()]


# --------------------------------------------------------------------------------------------
# Unit tests: parsing and environment checks


@pytest.mark.parametrize("text, cores", [
    ("0", [0]), ("3-5", [3, 4, 5]), ("0,2-4", [0, 2, 3, 4]), (" 7 , 1-2 ", [1, 2, 7]),
    ("2,2,1-2", [1, 2]), ("4-4", [4]),
])
def test_parse_core_list(text: str, cores: list[int]) -> None:
    assert bpslaunch.parse_core_list(text) == cores


@pytest.mark.parametrize("text", ["", "a", "0,,1", "1-", "-1", "3-1", "1-2-3", "0x1", "1.5"])
def test_parse_core_list_rejects(text: str) -> None:
    with pytest.raises(LaunchConfigError, match="bad CPU core"):
        bpslaunch.parse_core_list(text)


def test_parse_visible_cores() -> None:
    assert bpslaunch.parse_visible_cores("0,2-3:4-5", 2) == [[0, 2, 3], [4, 5]]
    assert bpslaunch.parse_visible_cores("0:0:1", 3) == [[0], [0], [1]]
    with pytest.raises(LaunchConfigError, match=r"has 2 core list\(s\) but there are 3 local"):
        bpslaunch.parse_visible_cores("0:1", 3)
    with pytest.raises(LaunchConfigError, match="BYTEPS_VISIBLE_CPU_CORES.*'x'"):
        bpslaunch.parse_visible_cores("0:x", 2)
    with pytest.raises(LaunchConfigError, match="BYTEPS_VISIBLE_CPU_CORES"):
        bpslaunch.parse_visible_cores("0:", 2)


def test_format_cores() -> None:
    assert bpslaunch.format_cores([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert bpslaunch.format_cores([3]) == "3"


def test_split_cores_gives_the_remainder_to_the_root() -> None:
    assert bpslaunch.split_cores(range(8), 3) == [[0, 1], [2, 3], [4, 5, 6, 7]]
    assert bpslaunch.split_cores([9, 1, 5], 1) == [[1, 5, 9]]
    with pytest.raises(LaunchConfigError, match="cannot bind 3 local ranks to 2"):
        bpslaunch.split_cores([0, 1], 3)


def test_core_bindings_switches() -> None:
    allowed = sorted(os.sched_getaffinity(0))
    first = str(allowed[0])
    assert bpslaunch.core_bindings({}, 2) is None  # off by default (the original: on)
    assert bpslaunch.core_bindings({"BYTEPS_NUMA_ON": "0", "BYTEPS_VISIBLE_CPU_CORES": first}, 1) is None
    # An explicit core list alone turns binding on.
    assert bpslaunch.core_bindings({"BYTEPS_VISIBLE_CPU_CORES": f"{first}:{first}"}, 2) == [first, first]
    auto = bpslaunch.core_bindings({"BYTEPS_NUMA_ON": "1"}, 1)
    assert auto == [bpslaunch.format_cores(allowed)]
    with pytest.raises(LaunchConfigError, match="BYTEPS_NUMA_ON must be 0 or 1"):
        bpslaunch.core_bindings({"BYTEPS_NUMA_ON": "maybe"}, 1)
    with pytest.raises(LaunchConfigError, match="may not use"):
        bpslaunch.core_bindings({"BYTEPS_VISIBLE_CPU_CORES": "100000"}, 1)
    with pytest.raises(LaunchConfigError, match="BYTEPS_NUMA_ON=1: cannot bind"):
        bpslaunch.core_bindings({"BYTEPS_NUMA_ON": "1"}, len(allowed) + 1)


def test_local_size_from_env() -> None:
    assert bpslaunch.local_size_from_env({}) == 1
    assert bpslaunch.local_size_from_env({"NVIDIA_VISIBLE_DEVICES": "0,1,3"}) == 3
    assert bpslaunch.local_size_from_env({"NVIDIA_VISIBLE_DEVICES": "0,1,"}) == 2
    assert bpslaunch.local_size_from_env({"NVIDIA_VISIBLE_DEVICES": "4,5", "BYTEPS_LOCAL_SIZE": "2"}) == 2
    with pytest.raises(LaunchConfigError, match=r"BYTEPS_LOCAL_SIZE=8 contradicts NVIDIA_VISIBLE_DEVICES='4' "
                                                r"\(1 device\(s\)\)"):
        bpslaunch.local_size_from_env({"NVIDIA_VISIBLE_DEVICES": "4", "BYTEPS_LOCAL_SIZE": "8"})
    assert bpslaunch.local_size_from_env({"NVIDIA_VISIBLE_DEVICES": "", "BYTEPS_LOCAL_SIZE": "2"}) == 2
    with pytest.raises(LaunchConfigError, match="BYTEPS_LOCAL_SIZE must be a positive integer"):
        bpslaunch.local_size_from_env({"BYTEPS_LOCAL_SIZE": "0"})


DIST = {"DMLC_NUM_WORKER": "2", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": "127.0.0.1",
        "DMLC_PS_ROOT_PORT": "1234"}


@pytest.mark.parametrize("role, env, missing", [
    ("worker", {"DMLC_NUM_WORKER": "1"}, None),
    ("Worker", {"DMLC_NUM_WORKER": "1"}, None),
    ("worker", {}, "DMLC_NUM_WORKER"),
    ("worker", {**DIST, "DMLC_WORKER_ID": "0"}, None),
    ("worker", DIST, "DMLC_WORKER_ID"),
    ("worker", {"DMLC_NUM_WORKER": "1", "BYTEPS_FORCE_DISTRIBUTED": "1"}, "DMLC_NUM_SERVER"),
    ("server", DIST, None),
    ("server", {"DMLC_NUM_WORKER": "1"}, "DMLC_NUM_SERVER"),
    ("scheduler", {**DIST, "DMLC_PS_ROOT_PORT": ""}, "DMLC_PS_ROOT_PORT"),
    ("scheduler", {k: v for k, v in DIST.items() if k != "DMLC_PS_ROOT_URI"}, "DMLC_PS_ROOT_URI"),
])
def test_check_env(role: str, env: dict[str, str], missing: Optional[str]) -> None:
    env = {"DMLC_ROLE": role, **env}
    if missing is None:
        assert bpslaunch.check_env(env) == role.lower()
    else:
        with pytest.raises(LaunchConfigError, match=f"The env {missing} is missing"):
            bpslaunch.check_env(env)


def test_check_env_rejects_bad_values() -> None:
    with pytest.raises(LaunchConfigError, match="DMLC_ROLE is missing"):
        bpslaunch.check_env({})
    with pytest.raises(LaunchConfigError, match="DMLC_ROLE='master' is not a valid role"):
        bpslaunch.check_env({"DMLC_ROLE": "master"})
    with pytest.raises(LaunchConfigError, match="DMLC_NUM_WORKER must be a positive integer"):
        bpslaunch.check_env({"DMLC_ROLE": "worker", "DMLC_NUM_WORKER": "two"})


def test_command_argv() -> None:
    assert bpslaunch.command_argv(["echo hi | cat"]) == ["/bin/sh", "-c", "echo hi | cat"]
    assert bpslaunch.command_argv(["python3", "-c", "pass"]) == ["python3", "-c", "pass"]


# --------------------------------------------------------------------------------------------
# Workers through the real launcher


def test_local_ranks_from_nvidia_visible_devices() -> None:
    r = run([PYTHON, "-c", PRINT_ENV], single_worker(NVIDIA_VISIBLE_DEVICES="0,1,2"))
    assert r.returncode == 0, r
    for rank in range(3):
        assert lines_with(f"{rank} ", r.stdout) == [
            f"{rank} BYTEPS_LOCAL_RANK={rank}", f"{rank} BYTEPS_LOCAL_SIZE=3",
            f"{rank} DMLC_ROLE=worker", f"{rank} PYTHONUNBUFFERED=1"], r
    assert "BytePS launching worker" in r.stderr


def test_local_size_from_byteps_local_size_and_shell_form() -> None:
    # A single argument is a shell command line: the pipe and the variable are the shell's.
    r = run(["echo rank=$BYTEPS_LOCAL_RANK/$BYTEPS_LOCAL_SIZE | tr a-z A-Z"],
            single_worker(BYTEPS_LOCAL_SIZE="2"))
    assert r.returncode == 0, r
    assert lines_with("RANK", r.stdout) == ["RANK=0/2", "RANK=1/2"]


def test_default_is_one_local_process() -> None:
    r = run([PYTHON, "-c", PRINT_ENV], single_worker())
    assert r.returncode == 0, r
    assert "0 BYTEPS_LOCAL_SIZE=1" in r.stdout and "1 " not in r.stdout


def test_failure_kills_siblings_fast_and_returns_the_code(tmp_path: Path) -> None:
    start = time.monotonic()
    r = run([PYTHON, "-c", ACTOR, "sleep", "exit7", "sleep"],
            single_worker(BYTEPS_LOCAL_SIZE="3", PID_DIR=str(tmp_path)))
    elapsed = time.monotonic() - start
    assert r.returncode == 7, r
    assert elapsed < 10, f"took {elapsed:.1f}s: siblings were not stopped promptly"
    assert "local_rank:1 exited with code 7" in r.stderr
    pids = recorded_pids(tmp_path)
    assert len(pids) == 3 and not [p for p in pids if pid_alive(p)]


def test_killed_by_signal_gives_128_plus_n(tmp_path: Path) -> None:
    r = run([PYTHON, "-c", ACTOR, "selfkill", "sleep"],
            single_worker(BYTEPS_LOCAL_SIZE="2", PID_DIR=str(tmp_path)))
    assert r.returncode == 128 + signal.SIGKILL, r
    assert "was killed by signal SIGKILL" in r.stderr


def test_sibling_ignoring_sigterm_is_killed_after_the_grace(tmp_path: Path) -> None:
    start = time.monotonic()
    r = run([PYTHON, "-c", ACTOR, "exit3", "ignore-term"],
            single_worker(BYTEPS_LOCAL_SIZE="2", PID_DIR=str(tmp_path)))
    elapsed = time.monotonic() - start
    assert r.returncode == 3, r
    assert "still running after SIGTERM; sending SIGKILL" in r.stderr
    assert elapsed < bpslaunch.GRACE_S + 5
    assert not [p for p in recorded_pids(tmp_path) if pid_alive(p)]


def read_lines(proc: subprocess.Popen, count: int, timeout: float) -> list[str]:
    """The first ``count`` stdout lines of ``proc`` (unbuffered reads of its pipe), failing the
    test when they do not arrive within ``timeout``."""
    deadline, data = time.monotonic() + timeout, b""
    fd = proc.stdout.fileno()
    while data.count(b"\n") < count:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            pytest.fail(f"bpslaunch printed {data!r}, not {count} lines, within {timeout}s")
        chunk = os.read(fd, 4096)
        if not chunk:
            pytest.fail(f"bpslaunch closed its output after {data!r}")
        data += chunk
    return data.decode().splitlines()[:count]


@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_to_the_launcher_is_forwarded(tmp_path: Path, signum: int, code: int) -> None:
    env = single_worker(BYTEPS_LOCAL_SIZE="2", PID_DIR=str(tmp_path))
    proc = subprocess.Popen(LAUNCH + [PYTHON, "-c", ACTOR, "sleep", "sleep"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert sorted(read_lines(proc, 2, TIMEOUT)) == ["ready 0", "ready 1"]
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # our own session
            proc.wait()
        for pid in recorded_pids(tmp_path):  # the children, if the launcher failed to stop them
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    err = err.decode()
    assert proc.returncode == code, err
    assert f"received {signal.Signals(signum).name}" in err
    assert "sending SIGKILL" not in err  # the children obeyed the forwarded signal
    pids = recorded_pids(tmp_path)
    assert len(pids) == 2 and not [p for p in pids if pid_alive(p)]


def test_core_binding_end_to_end() -> None:
    if 0 not in os.sched_getaffinity(0):
        pytest.skip("CPU core 0 is not available to this process")
    r = run([PYTHON, "-c", "import os; os.write(1, f\"cores {os.environ['BYTEPS_LOCAL_RANK']} "
                           "{sorted(os.sched_getaffinity(0))}\\n\".encode())"],
            single_worker(BYTEPS_LOCAL_SIZE="2", BYTEPS_NUMA_ON="1", BYTEPS_VISIBLE_CPU_CORES="0:0"))
    assert r.returncode == 0, r
    assert lines_with("cores", r.stdout) == ["cores 0 [0]", "cores 1 [0]"]
    assert "local rank 1 bound to CPU cores 0" in r.stderr


def test_bad_core_spec_is_a_usage_error() -> None:
    r = run(["true"], single_worker(BYTEPS_LOCAL_SIZE="2", BYTEPS_VISIBLE_CPU_CORES="0"))
    assert r.returncode == 2
    assert "BYTEPS_VISIBLE_CPU_CORES='0' has 1 core list(s) but there are 2 local rank(s)" in r.stderr


def test_bad_role_is_a_usage_error() -> None:
    r = run(["true"], launch_env(DMLC_ROLE="master", DMLC_NUM_WORKER="1"))
    assert r.returncode == 2
    assert "DMLC_ROLE='master'" in r.stderr and "worker, server, scheduler, joint" in r.stderr


@pytest.mark.parametrize("role, env, name", [
    ("worker", {}, "DMLC_NUM_WORKER"),
    ("worker", {**DIST}, "DMLC_WORKER_ID"),
    ("server", {"DMLC_NUM_WORKER": "2"}, "DMLC_NUM_SERVER"),
    (None, {}, "DMLC_ROLE"),
])
def test_missing_env_fails_with_its_name(role: Optional[str], env: dict[str, str], name: str) -> None:
    full = launch_env(**env, **({"DMLC_ROLE": role} if role else {}))
    r = run(["true"], full)
    assert r.returncode == 2
    assert f"The env {name} is missing" in r.stderr


def test_missing_worker_command() -> None:
    r = run([], single_worker())
    assert r.returncode == 2 and "missing the command" in r.stderr


def test_unstartable_command_gives_127() -> None:
    r = run(["/nonexistent/program", "arg"], single_worker())
    assert r.returncode == 127 and "cannot start local_rank:0" in r.stderr


# --------------------------------------------------------------------------------------------
# Server and scheduler roles (fake core)


@pytest.fixture
def fake_core(tmp_path: Path) -> Path:
    core = tmp_path / "byteps-core"
    core.write_text(FAKE_CORE)
    core.chmod(0o755)
    return core


def service_env(role: str, core: Path, num_workers: str, **extra: str) -> dict[str, str]:
    return launch_env(DMLC_ROLE=role, **{**DIST, "DMLC_NUM_WORKER": num_workers},
                      BYTEPS_CORE_BINARY=str(core), CORE_STARTED=str(core.parent / "started"), **extra)


@pytest.mark.parametrize("role", ["server", "scheduler"])
def test_single_worker_job_starts_no_service(fake_core: Path, role: str) -> None:
    r = run([], service_env(role, fake_core, "1"))
    assert r.returncode == 0, r
    assert "single-worker job needs no" in r.stderr
    assert not (fake_core.parent / "started").exists()


@pytest.mark.parametrize("role, num_workers, extra", [
    ("server", "2", {}), ("scheduler", "3", {}), ("server", "1", {"BYTEPS_FORCE_DISTRIBUTED": "1"}),
])
def test_service_runs_the_core_and_returns_its_code(fake_core: Path, role: str, num_workers: str,
                                                    extra: dict[str, str]) -> None:
    r = run([], service_env(role, fake_core, num_workers, FAKE_CORE_EXIT="5", **extra))
    assert r.returncode == 5, r
    assert (fake_core.parent / "started").read_text().split() == [role, role]
    assert f"{role} exited with code 5" in r.stderr


def test_missing_core_binary_gives_127(tmp_path: Path) -> None:
    r = run([], service_env("server", tmp_path / "missing", "2"))
    assert r.returncode == 127 and "cannot find the BytePS core executable" in r.stderr


# --------------------------------------------------------------------------------------------
# A real job: every process through bpslaunch

PUSH_PULL = """
import numpy as np
import byteps.numpy as bps
bps.init()
rank = bps.rank()
x = np.full(1000, rank + 1, dtype=np.float32)
total = bps.push_pull(x, average=False, name="launch.x")
assert bps.size() == 2 and np.all(total == 3.0), (bps.size(), total[:3])
print(f"PUSHPULL OK rank={rank}", flush=True)
bps.shutdown()
"""


def test_real_job_through_bpslaunch(tmp_path: Path) -> None:
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "push_pull.py"
    script.write_text(PUSH_PULL)
    common = {**DIST, "DMLC_PS_ROOT_PORT": str(free_port()), "DMLC_NODE_HOST": "127.0.0.1",
              "BYTEPS_CORE_BINARY": str(CORE_BINARY)}
    roles = [("scheduler", {}), ("server", {}),
             ("worker", {"DMLC_WORKER_ID": "0"}), ("worker", {"DMLC_WORKER_ID": "1"})]
    procs, logs = [], []
    deadline = time.monotonic() + 60
    try:
        for i, (role, extra) in enumerate(roles):
            env = launch_env(**common, DMLC_ROLE=role, **extra)
            args = [PYTHON, str(script)] if role == "worker" else []
            logs.append(tmp_path / f"{i}-{role}.log")
            with open(logs[-1], "wb") as log:
                procs.append(subprocess.Popen(LAUNCH + args, env=env, cwd=tmp_path, stdout=log,
                                              stderr=subprocess.STDOUT, start_new_session=True))
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        kill_left(procs)
    outputs = [log.read_text(errors="replace") for log in logs]
    report = "\n".join(f"--- {role} rc={p.returncode}\n{out}"
                       for (role, _), p, out in zip(roles, procs, outputs))
    assert [p.returncode for p in procs] == [0, 0, 0, 0], report
    assert "PUSHPULL OK rank=0" in outputs[2] and "PUSHPULL OK rank=1" in outputs[3], report
