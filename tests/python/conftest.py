"""Shared fixtures for the Python tests.

* Paths of the repository, the package (``python/``) and the built core (tools/localjob.py);
  ``python/`` and the repository root are put on ``sys.path`` here, so ``pytest tests/python``
  needs no PYTHONPATH and the tests import ``byteps`` and ``tools`` directly.
* ``require_core``: skips a test (with the reason) when ``byteps._core`` or ``byteps-core`` was
  not built.  Tests that run the real core use it (``pytestmark``); test_bpsrun.py does not.
* ``standalone``: a byteps plugin initialised in the test's own process, without a job.
* ``job_env()``: a hermetic environment for child processes (no inherited BYTEPS_*/DMLC_*/PS_*,
  PYTHONPATH set, short start/operation timeouts).
* ``run_job``: runs a worker script through the real launcher (``bpsrun``) and returns
  ``(returncode, stdout, stderr)``; it also checks that no process of the job outlived it.
* ``cluster``: starts a scheduler, servers and workers one by one, without bpsrun, for the tests
  that need per-process environments or must watch every process exit by itself.
* Worker-script parts several test files start their scripts with: ``HVD_PRELUDE`` (byteps.torch
  as hvd, ``fails``, ``expect``, ``finish``), ``NUMPY_PRELUDE`` (byteps.numpy, ``emit_result``),
  ``LOCAL_SPAWNER`` (several processes per worker host) and ``job_results`` (their RESULT lines).

Every subprocess runs under a timeout and is killed (its whole process group) at teardown.
"""

from __future__ import annotations

import importlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

import pytest

_REPO = Path(__file__).resolve().parents[2]
for _path in (_REPO / "python", _REPO):  # byteps and tools/ of this checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from byteps.launcher.ports import free_port  # noqa: E402,F401  (re-exported for the tests)
from tools.localjob import (CORE_BINARY, PYTHON_DIR, REPO, JobResult, clean_config_env,  # noqa: E402,F401
                            hermetic_env, missing_core, pid_alive, run_bpsrun, write_script)

PYTHON = sys.executable
# Child processes get these unless a test overrides them: nothing may hang for long.
DEFAULT_JOB_ENV = {
    "BYTEPS_START_TIMEOUT": "20",
    "BYTEPS_TIMEOUT": "20",
}


@pytest.fixture
def require_core() -> None:
    reason = missing_core()
    if reason:
        pytest.skip(reason)


@pytest.fixture(scope="session")
def ucx_built() -> bool:
    """Whether this build has the UCX transport (`byteps info` lists the transports built)."""
    if missing_core():
        return False
    from tools import misconfig
    return misconfig.ucx_built()


def wait_until_polled_done(bps, handles, timeout: float = 30.0) -> None:
    """Polls every handle until each reports done. Completion is asynchronous even in one process
    (the dispatch thread runs the copy-out stage), so a handle may not be done right after the call
    that started it; each must become done on its own, without a synchronize()."""
    deadline = time.monotonic() + timeout
    pending = set(handles)
    while pending and time.monotonic() < deadline:
        pending = {h for h in pending if not bps.poll(h)}
    assert not pending, f"{len(pending)} of {len(handles)} handles never reported done by poll()"


def kill_left(procs: list[subprocess.Popen]) -> None:
    """Kills (SIGKILL) the process group of every process in *procs* still running, each started
    in a session of its own (start_new_session=True), and reaps it: a test's finally."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def job_env(extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """A hermetic environment for a byteps child process, with short timeouts."""
    return hermetic_env({**DEFAULT_JOB_ENV, **(extra or {})})


@pytest.fixture
def standalone(monkeypatch: pytest.MonkeyPatch):
    """``standalone("byteps.numpy")`` (or "byteps.torch"): that plugin, initialised in this
    process as a one-worker job of its own (no network), shut down after the test."""
    started = []

    def start(module_name: str):
        bps = importlib.import_module(module_name)
        for key in set(os.environ) - set(clean_config_env(dict(os.environ))):
            monkeypatch.delenv(key)  # no inherited job settings: this process is a job of its own
        bps.shutdown()
        bps.init()
        started.append(bps)
        return bps

    yield start
    for bps in started:
        bps.shutdown()


@pytest.fixture
def run_job(tmp_path: Path, require_core: None):
    """``run_job(n, s, script_text, env=None, timeout=60, force_distributed=False, args=(),
    bpsrun_args=())``.

    Runs ``script_text`` as the workers of a bpsrun job (:func:`tools.localjob.run_bpsrun`) with
    :func:`job_env` plus ``env``; returns its :class:`JobResult`.  Fails the test when bpsrun
    itself does not return within ``timeout`` + 30 s.
    """
    counter = [0]

    def run(n: int, s: int, script_text: str, env: Optional[dict[str, str]] = None, timeout: float = 60,
            force_distributed: bool = False, args: tuple[str, ...] = (),
            bpsrun_args: tuple[str, ...] = ()) -> JobResult:
        counter[0] += 1
        work = tmp_path / f"job{counter[0]}"
        work.mkdir()
        result = run_bpsrun(work, n, s, script_text, job_env(env), timeout, force_distributed, args,
                            bpsrun_args=bpsrun_args)
        if result.hung:
            pytest.fail(f"bpsrun itself did not stop within {timeout + 30}s\n{result!r}")
        return result

    return run


# --------------------------------------------------------------------------------------------
# worker-script parts

# A Horovod-API worker: every check appends to `fails` (the script goes on, so one run reports
# every failure); `expect` checks that a call raises `error` with `needle` in its message; `finish`
# prints ALL OK (or the failures), shuts down and exits 0 (1 on any failure). Scripts that tweak
# init replace the text "hvd.init()".
HVD_PRELUDE = r"""
import sys, warnings
import torch
import byteps.torch as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
fails = []

def expect(what, error, needle, call):
    try:
        call()
        fails.append(f"{what}: no {error.__name__}")
    except error as e:
        if needle not in str(e):
            fails.append(f"{what}: {needle!r} not in {e}")
    except Exception as e:
        fails.append(f"{what}: {type(e).__name__} instead of {error.__name__}: {e}")

def finish():
    print("FAILS", len(fails), fails[:20], flush=True) if fails else print("ALL OK", flush=True)
    hvd.shutdown()
    sys.exit(1 if fails else 0)
"""

# A byteps.numpy worker that reports one JSON object through emit_result (read back by
# job_results). Scripts that tweak init replace the text "bps.init()".
NUMPY_PRELUDE = r"""
import json, os
import numpy as np
import byteps.numpy as bps
bps.init()
rank, size = bps.rank(), bps.size()

def emit_result(out):
    os.write(1, ("RESULT " + json.dumps(out) + "\n").encode())  # one write: siblings share stdout
"""

# Runs as each worker host, like bpslaunch: BPS_LOCAL processes of the script in BPS_CHILD with
# local ranks, each given BPS_CHILD_TIMEOUT seconds (default 60); exits with the worst child's code.
LOCAL_SPAWNER = r"""
import os, subprocess, sys
n = int(os.environ["BPS_LOCAL"])
child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child.py")
with open(child, "w") as f:
    f.write(os.environ["BPS_CHILD"])
procs = [subprocess.Popen([sys.executable, child],
                          env={**os.environ, "BYTEPS_LOCAL_RANK": str(i), "BYTEPS_LOCAL_SIZE": str(n)})
         for i in range(n)]
timeout = float(os.environ.get("BPS_CHILD_TIMEOUT", "60"))
sys.exit(max(p.wait(timeout=timeout) for p in procs))
"""


def job_results(output: str) -> list[dict]:
    """The objects a job's processes reported with emit_result, in output order."""
    return [json.loads(line.split("RESULT ", 1)[1]) for line in output.splitlines() if "RESULT " in line]


# --------------------------------------------------------------------------------------------
# cluster: process by process


@dataclass
class Proc:
    label: str
    popen: subprocess.Popen
    log: Path
    started: float
    returncode: Optional[int] = None  # None: did not exit by the deadline (then killed)
    elapsed: Optional[float] = None
    transcript: str = ""  # stdout lines read so far (piped processes only)

    @property
    def output(self) -> str:
        return self.transcript + self.log.read_text(errors="replace")

    def expect(self, text: str, timeout: float) -> str:
        """Reads stdout (piped processes) until a line contains ``text``; fails at the deadline."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.popen.stdout], [], [], left)[0]:
                pytest.fail(f"{self.label}: no line with {text!r} within {timeout}s\n{self.output}")
            line = self.popen.stdout.readline()
            if not line:
                pytest.fail(f"{self.label}: exited before printing {text!r}\n{self.output}")
            self.transcript += line
            if text in line:
                return line

    def tell(self, line: str) -> None:
        """Writes a line to the stdin of a piped process."""
        self.popen.stdin.write(line + "\n")
        self.popen.stdin.flush()

    def __repr__(self) -> str:
        return f"<{self.label} rc={self.returncode} after {self.elapsed}s>\n{self.output}"


class Cluster:
    """Starts byteps processes one by one (each in its own session, output to a log file)."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.port = free_port()
        self.procs: dict[str, Proc] = {}

    def env(self, num_workers: int, num_servers: int, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
        """The job environment for a scheduler on 127.0.0.1:self.port."""
        return job_env({"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(self.port),
                        "DMLC_NUM_WORKER": str(num_workers), "DMLC_NUM_SERVER": str(num_servers),
                        "DMLC_NODE_HOST": "127.0.0.1", **(extra or {})})

    def start(self, label: str, argv: list[str], env: dict[str, str], piped: bool = False) -> Proc:
        """Starts a process; its output goes to a log file, except stdout when ``piped`` (then
        stdin and stdout are pipes for :meth:`Proc.expect` / :meth:`Proc.tell`)."""
        log = self.dir / f"{label.replace(':', '-')}.log"
        with open(log, "wb") as sink:
            popen = subprocess.Popen(argv, env=env, cwd=self.dir, start_new_session=True, text=piped,
                                     stdin=subprocess.PIPE if piped else subprocess.DEVNULL,
                                     stdout=subprocess.PIPE if piped else sink,
                                     stderr=sink if piped else subprocess.STDOUT)
        proc = Proc(label, popen, log, time.monotonic())
        self.procs[label] = proc
        return proc

    def scheduler(self, env: dict[str, str]) -> Proc:
        return self.start("scheduler", [str(CORE_BINARY), "scheduler"], {**env, "DMLC_ROLE": "scheduler"})

    def server(self, i: int, env: dict[str, str]) -> Proc:
        return self.start(f"server:{i}", [str(CORE_BINARY), "server"], {**env, "DMLC_ROLE": "server"})

    def worker(self, label: str, script: Path, env: dict[str, str], args: tuple[str, ...] = (),
               piped: bool = False) -> Proc:
        return self.start(label, [PYTHON, str(script), *args], {**env, "DMLC_ROLE": "worker"}, piped)

    def job(self, num_workers: int, num_servers: int, script_text: str, extra: Optional[dict[str, str]] = None,
            worker_env: Optional[dict[int, dict[str, str]]] = None, server_env: Optional[dict[int, dict]] = None,
            ) -> dict[str, Proc]:
        """Starts a scheduler, the servers and the workers (worker i gets DMLC_WORKER_ID=i)."""
        env = self.env(num_workers, num_servers, extra)
        script = write_script(self.dir, script_text)
        self.scheduler(env)
        for i in range(num_servers):
            self.server(i, {**env, **(server_env or {}).get(i, {})})
        for i in range(num_workers):
            self.worker(f"worker:{i}", script, {**env, "DMLC_WORKER_ID": str(i), **(worker_env or {}).get(i, {})})
        return self.procs

    def wait(self, timeout: float, labels: Optional[list[str]] = None) -> dict[str, Proc]:
        """Waits until every process (or those in ``labels``) exited or ``timeout`` passed; those
        still running then are killed and marked (:meth:`leftovers`).  Others keep running."""
        deadline = time.monotonic() + timeout
        chosen = [p for p in self.procs.values() if labels is None or p.label in labels]
        for proc in chosen:
            if proc.elapsed is not None:
                continue  # waited for before
            try:
                proc.returncode = proc.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
                proc.elapsed = round(time.monotonic() - proc.started, 2)
            except subprocess.TimeoutExpired:
                proc.elapsed = float("inf")
        self.kill(chosen)
        return self.procs

    def leftovers(self) -> list[str]:
        """Labels of the processes that had to be killed because they did not exit in time."""
        return [p.label for p in self.procs.values() if p.returncode is None and p.elapsed is not None]

    def kill(self, procs: list[Proc]) -> None:
        for proc in procs:
            if proc.popen.poll() is None:
                os.killpg(proc.popen.pid, signal.SIGKILL)  # our own session; the leader is unreaped
            proc.popen.wait()
            for pipe in (proc.popen.stdin, proc.popen.stdout):
                if pipe:
                    pipe.close()

    def kill_all(self) -> None:
        self.kill(list(self.procs.values()))

    def dump(self) -> str:
        return "\n".join(repr(p) for p in self.procs.values())


@pytest.fixture
def cluster(tmp_path: Path, require_core: None):
    c = Cluster(tmp_path)
    yield c
    c.kill_all()
