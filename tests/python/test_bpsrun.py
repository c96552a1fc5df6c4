"""Tests for the one-machine launcher ``bpsrun`` (python/byteps/launcher).

bpsrun runs as a real subprocess (``python3 -m byteps.launcher.bpsrun``).  The C++ core is
replaced by a fake ``byteps-core`` script whose behaviour is chosen per role through
``FAKE_CORE_<ROLE>`` variables; workers are a small Python script driven by its arguments.
Every fake process records its PID in a directory so the tests can check that nothing
outlives the launcher.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE_ROOT = REPO / "python"
PYTHON = "/usr/bin/python3"

FAKE_CORE = r'''#!/usr/bin/python3
"""Fake byteps-core: behaviour per role from FAKE_CORE_<ROLE> (default: wait for workers)."""
import os, signal, sys, time
role = os.environ["DMLC_ROLE"]
assert sys.argv[1:] == [role], sys.argv
pid_dir = os.environ["FAKE_PID_DIR"]
with open(os.path.join(pid_dir, f"{role}-{os.getpid()}.pid"), "w") as f:
    f.write(str(os.getpid()))
print(f"{role} up on {os.environ['DMLC_PS_ROOT_URI']}:{os.environ['DMLC_PS_ROOT_PORT']}")
mode = os.environ.get(f"FAKE_CORE_{role.upper()}", "wait")
if mode == "wait":  # exit 0 once every worker has written its done file
    done_dir, need = os.environ["FAKE_DONE_DIR"], int(os.environ["DMLC_NUM_WORKER"])
    deadline = time.time() + 20
    while len(os.listdir(done_dir)) < need and time.time() < deadline:
        time.sleep(0.01)
    sys.exit(0 if time.time() < deadline else 9)
if mode == "hang-ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if mode.startswith("hang"):
    time.sleep(60)
sys.exit(int(mode))  # "3" -> exit 3, "0" -> exit 0 at once
'''

FAKE_WORKER = r'''
"""Fake worker: fake_worker.py ACTION_FOR_WORKER0 [ACTION_FOR_WORKER1 ...]."""
import os, signal, subprocess, sys, time
rank = int(os.environ["DMLC_WORKER_ID"])
pid_dir, done_dir = os.environ["FAKE_PID_DIR"], os.environ["FAKE_DONE_DIR"]
def record(pid, name):
    with open(os.path.join(pid_dir, f"{name}-{pid}.pid"), "w") as f:
        f.write(str(pid))
record(os.getpid(), f"worker{rank}")
actions = sys.argv[1:]
action = actions[rank] if rank < len(actions) else actions[-1]
code = 0
if action == "env":
    for key in sorted(os.environ):
        if key.startswith(("DMLC_", "BYTEPS_", "PYTHONUNBUFFERED", "EXTRA_")):
            print(f"ENV {key}={os.environ[key]}")
elif action == "talk":
    print(f"out from {rank}")
    print(f"err from {rank}", file=sys.stderr)
    sys.stdout.write(f"partial {rank}")
elif action.startswith("sleep"):  # sleep with a grandchild in the same process group
    grandchild = subprocess.Popen(["sleep", "30"])
    record(grandchild.pid, f"grandchild{rank}")
    time.sleep(float(action[5:]))
elif action.startswith("exit"):
    time.sleep(0.2)
    code = int(action[4:])
elif action == "selfkill":
    time.sleep(0.2)
    os.kill(os.getpid(), signal.SIGUSR1)
elif action.startswith("late"):  # fails on its own a second after another worker did
    time.sleep(1.2)
    print(f"LATE {rank}", flush=True)
    code = int(action[4:])
open(os.path.join(done_dir, str(rank)), "w").close()
sys.exit(code)
'''


@pytest.fixture
def job(tmp_path: Path) -> "Job":
    return Job(tmp_path)


class Job:
    """A scratch area with the fake core/worker and helpers to run bpsrun against them."""

    def __init__(self, tmp: Path) -> None:
        self.core = tmp / "byteps-core"
        self.core.write_text(FAKE_CORE)
        self.core.chmod(self.core.stat().st_mode | stat.S_IXUSR)
        self.worker = tmp / "fake_worker.py"
        self.worker.write_text(FAKE_WORKER)
        self.pid_dir = tmp / "pids"
        self.done_dir = tmp / "done"
        self.pid_dir.mkdir()
        self.done_dir.mkdir()
        self.env = {key: value for key, value in os.environ.items()
                    if not key.startswith(("DMLC_", "BYTEPS_"))}
        self.env.update(PYTHONPATH=str(PACKAGE_ROOT), FAKE_PID_DIR=str(self.pid_dir),
                        FAKE_DONE_DIR=str(self.done_dir))

    def argv(self, options: list[str], actions: list[str]) -> list[str]:
        return [PYTHON, "-m", "byteps.launcher.bpsrun", "--core-binary", str(self.core),
                "--grace", "0.5", *options, "--", PYTHON, str(self.worker), *actions]

    def run(self, options: list[str], actions: list[str], **env: str) -> subprocess.CompletedProcess:
        started = time.monotonic()
        result = subprocess.run(self.argv(options, actions), env={**self.env, **env},
                                capture_output=True, text=True, timeout=30)
        result.elapsed = time.monotonic() - started
        return result

    def roles_started(self) -> list[str]:
        return sorted(p.name.split("-")[0] for p in self.pid_dir.iterdir())

    def assert_no_survivors(self) -> None:
        # The pid is in the file's name ("<name>-<pid>.pid"): a process stopped between creating
        # its file and writing it left it empty (CI saw that once), yet it ran and must be gone.
        pids = [int(p.stem.rsplit("-", 1)[1]) for p in self.pid_dir.iterdir()]
        assert pids, "no process recorded its pid"
        deadline = time.monotonic() + 2  # reparented grandchildren may await their reaper
        while time.monotonic() < deadline and any(alive(pid) for pid in pids):
            time.sleep(0.02)
        assert [pid for pid in pids if alive(pid)] == []


def alive(pid: int) -> bool:
    """True if *pid* exists and is not a zombie (orphan zombies may linger in containers)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_env_reaches_workers(job: Job) -> None:
    r = job.run(["-n", "2", "-s", "2", "--scheduler-port", "23456", "--env", "EXTRA_A=x=y"],
                ["env"], BYTEPS_JOB_SECRET="s3cret")
    assert r.returncode == 0, r.stderr
    for rank in (0, 1):
        for expected in ("DMLC_ROLE=worker", f"DMLC_WORKER_ID={rank}", "DMLC_NUM_WORKER=2",
                         "DMLC_NUM_SERVER=2", "DMLC_PS_ROOT_URI=127.0.0.1",
                         "DMLC_PS_ROOT_PORT=23456", "DMLC_NODE_HOST=127.0.0.1",
                         "BYTEPS_LOCAL_RANK=0", "BYTEPS_LOCAL_SIZE=1", "PYTHONUNBUFFERED=1",
                         "BYTEPS_JOB_SECRET=s3cret", "EXTRA_A=x=y"):
            assert f"[worker:{rank}] ENV {expected}\n" in r.stdout
    assert "[scheduler] scheduler up on 127.0.0.1:23456" in r.stdout
    assert "[server:1] server up on" in r.stdout
    assert "bpsrun: starting scheduler on 127.0.0.1:23456, 2 servers, 2 workers" in r.stderr
    assert job.roles_started() == ["scheduler", "server", "server", "worker0", "worker1"]


def test_generated_secret_is_shared_and_port_is_picked(job: Job) -> None:
    r = job.run(["-n", "2"], ["env"])
    assert r.returncode == 0, r.stderr
    secrets = {line.split("=", 1)[1] for line in r.stdout.splitlines() if "BYTEPS_JOB_SECRET=" in line}
    ports = {line.split("=", 1)[1] for line in r.stdout.splitlines() if "DMLC_PS_ROOT_PORT=" in line}
    assert len(secrets) == 1 and len(secrets.pop()) == 32
    assert len(ports) == 1 and 0 < int(ports.pop()) < 65536


def test_prefixes_on_stdout_and_stderr(job: Job) -> None:
    r = job.run(["-n", "2"], ["talk"])
    assert r.returncode == 0, r.stderr
    for rank in (0, 1):
        assert f"[worker:{rank}] out from {rank}\n" in r.stdout
        assert f"[worker:{rank}] partial {rank}\n" in r.stdout
        assert f"[worker:{rank}] err from {rank}\n" in r.stderr
        assert f"err from {rank}" not in r.stdout


def test_no_prefix(job: Job) -> None:
    r = job.run(["--no-prefix"], ["talk"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["out from 0", "partial 0"]


def test_first_failure_propagates_and_kills_the_rest(job: Job) -> None:
    r = job.run(["-n", "3"], ["sleep30", "exit3", "sleep30"])
    assert r.returncode == 3
    assert "bpsrun: worker:1 exited with code 3; stopping the job" in r.stderr
    assert r.elapsed < 5
    job.assert_no_survivors()


def test_after_a_failure_the_others_may_still_say_why_before_being_stopped(job: Job) -> None:
    # Worker 1 fails 1.2 s after worker 0 did (as workers do when the scheduler tells them the job
    # failed): its own account reaches the output before anything is stopped; the job's code is the
    # first failure's.
    r = job.run(["-n", "2"], ["exit3", "late5"])
    assert r.returncode == 3
    assert "[worker:1] LATE 1" in r.stdout, r.stdout
    assert r.elapsed < 5
    job.assert_no_survivors()


def test_killed_by_signal_gives_128_plus_n(job: Job) -> None:
    r = job.run(["-n", "2"], ["sleep30", "selfkill"])
    assert r.returncode == 128 + signal.SIGUSR1
    assert "bpsrun: worker:1 was killed by signal SIGUSR1; stopping the job" in r.stderr
    job.assert_no_survivors()


def test_failing_scheduler_stops_the_job(job: Job) -> None:
    r = job.run(["-n", "2"], ["sleep30"], FAKE_CORE_SCHEDULER="3")
    assert r.returncode == 3
    assert "bpsrun: scheduler exited with code 3; stopping the job" in r.stderr
    assert r.elapsed < 5
    job.assert_no_survivors()


def test_timeout_gives_124(job: Job) -> None:
    r = job.run(["-n", "2", "--timeout", "0.5"], ["sleep30"])
    assert r.returncode == 124
    assert "timed out after 0.5 seconds" in r.stderr
    assert r.elapsed < 5
    job.assert_no_survivors()


def test_single_worker_starts_no_scheduler(job: Job) -> None:
    r = job.run(["--core-binary", "/nonexistent/byteps-core"], ["env"])
    assert r.returncode == 0, r.stderr
    assert job.roles_started() == ["worker0"]
    assert "[worker:0] ENV DMLC_NUM_WORKER=1\n" in r.stdout


def test_force_distributed_starts_scheduler_and_servers(job: Job) -> None:
    r = job.run(["--force-distributed", "-s", "2"], ["env"])
    assert r.returncode == 0, r.stderr
    assert job.roles_started() == ["scheduler", "server", "server", "worker0"]
    assert "[worker:0] ENV BYTEPS_FORCE_DISTRIBUTED=1\n" in r.stdout


def test_force_distributed_from_environment(job: Job) -> None:
    r = job.run([], ["env"], BYTEPS_FORCE_DISTRIBUTED="1")
    assert r.returncode == 0, r.stderr
    assert job.roles_started() == ["scheduler", "server", "worker0"]


def test_servers_that_do_not_exit_fail_the_job(job: Job) -> None:
    r = job.run(["-n", "2", "--grace", "0.3"], ["env"], FAKE_CORE_SERVER="hang-ignore-term")
    assert r.returncode == 1
    assert "bpsrun: server:0 did not exit after the workers finished" in r.stderr
    assert r.elapsed < 5
    job.assert_no_survivors()


def test_service_exiting_early_is_not_a_failure(job: Job) -> None:
    # The scheduler ends the job as the last worker finishes, so services often exit first.
    r = job.run(["-n", "2"], ["exit0"], FAKE_CORE_SERVER="0")
    assert r.returncode == 0, r.stderr
    assert "before the workers finished" not in r.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_bpsrun_stops_everything(job: Job, signum: int) -> None:
    proc = subprocess.Popen(job.argv(["-n", "2"], ["sleep30"]), env=job.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 4
    while len(list(job.pid_dir.glob("grandchild*"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 128 + signum
    assert f"received {signal.Signals(signum).name}; stopping the job" in err
    job.assert_no_survivors()


def test_missing_core_binary_is_a_clear_error(job: Job) -> None:
    r = job.run(["-n", "2", "--core-binary", "/nonexistent/byteps-core"], ["env"])
    assert r.returncode != 0
    assert "/nonexistent/byteps-core" in r.stderr and "BYTEPS_CORE_BINARY" in r.stderr
    assert "cmake" in r.stderr.lower()
    assert list(job.pid_dir.iterdir()) == []


def test_missing_worker_command_and_bad_arguments(job: Job) -> None:
    env = {**job.env}
    r = subprocess.run([PYTHON, "-m", "byteps.launcher.bpsrun", "-n", "2"], env=env,
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "missing the worker command" in r.stderr
    r = subprocess.run([PYTHON, "-m", "byteps.launcher.bpsrun", "--env", "NOEQUALS", "--", "true"],
                       env=env, capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr
    r = subprocess.run([PYTHON, "-m", "byteps.launcher.bpsrun", "--", "/nonexistent/cmd"],
                       env=env, capture_output=True, text=True, timeout=10)
    assert r.returncode == 127 and "cannot start worker:0" in r.stderr


# --- corebin.find_core_binary, imported straight from its file (byteps/__init__ may need _core).

def load_corebin():
    path = PACKAGE_ROOT / "byteps" / "launcher" / "corebin.py"
    spec = importlib.util.spec_from_file_location("bpsrun_test_corebin", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_exe(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)
    return path


def test_find_core_binary_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corebin = load_corebin()
    explicit, from_env = make_exe(tmp_path / "a" / "x"), make_exe(tmp_path / "b" / "y")
    packaged = make_exe(tmp_path / "pkg" / "_bin" / "byteps-core")
    on_path = make_exe(tmp_path / "bin" / "byteps-core")
    monkeypatch.setattr(corebin, "package_binary", lambda: packaged)
    monkeypatch.setenv("PATH", str(on_path.parent))
    monkeypatch.setenv("BYTEPS_CORE_BINARY", str(from_env))
    assert corebin.find_core_binary(str(explicit)) == str(explicit)
    assert corebin.find_core_binary() == str(from_env)
    monkeypatch.delenv("BYTEPS_CORE_BINARY")
    assert corebin.find_core_binary() == str(packaged)
    packaged.chmod(0o644)  # not executable -> skipped
    assert corebin.find_core_binary() == str(on_path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(FileNotFoundError) as info:
        corebin.find_core_binary()
    message = str(info.value)
    assert str(packaged) in message and "BYTEPS_CORE_BINARY" in message and "CMake" in message


def test_explicit_core_binary_must_exist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corebin = load_corebin()
    monkeypatch.setattr(corebin, "package_binary", lambda: make_exe(tmp_path / "p" / "byteps-core"))
    with pytest.raises(FileNotFoundError, match="--core-binary"):
        corebin.find_core_binary(str(tmp_path / "missing"))
    monkeypatch.setenv("BYTEPS_CORE_BINARY", str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="BYTEPS_CORE_BINARY"):
        corebin.find_core_binary()
