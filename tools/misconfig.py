"""Jobs with one process configured differently from the rest, and jobs with uneven ends, run as
real processes on loopback: the cases of tests/python/test_misconfiguration.py and of the
fail-fast benchmark (bench/failfast/run.py), which times them.

A job is a scheduler, one server and two workers (byteps.numpy); one of them gets other settings
(:data:`CASES`). :func:`run_job` starts the four processes, waits until each exits or a deadline
passes (then kills what is left, and says so), and returns each one's exit code, time to exit
from its own start, and output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from byteps.launcher.ports import free_port
from tools.localjob import CORE_BINARY, hermetic_env, write_script

PYTHON = sys.executable

JOB = r"""
import numpy as np
import byteps.numpy as bps
bps.init()
for step in range(3):
    out = bps.push_pull(np.ones(300000, np.float32), average=False, name="grad")
assert (out == bps.size()).all()
print("JOB OK", bps.rank(), flush=True)
bps.shutdown()
"""

# Worker i runs argv[1] steps and shuts down; it prints when (wall clock) it calls shutdown().
UNEVEN = r"""
import sys, time
import numpy as np
import byteps.numpy as bps
bps.init()
steps = int(sys.argv[1])
for step in range(steps):
    bps.push_pull(np.ones(1000, np.float32), average=False, name="layer.grad")
print(f"SHUTDOWN AT {time.time():.6f}", flush=True)
bps.shutdown()
print("SHUT DOWN CLEANLY", flush=True)
"""

SECRET = {"BYTEPS_JOB_SECRET": "the-job-secret"}
LABELS = ("scheduler", "server:0", "worker:0", "worker:1")


@dataclass
class Case:
    id: str
    at_once: bool                       # known at once: the whole job should end at once
    odd: str                            # the label of the process configured differently
    odd_env: Callable[[], dict]         # its settings over the job's ("" unsets one)
    says: list[str]                     # what its output must contain
    job_env: dict = field(default_factory=dict)  # everyone else's settings
    others_say: Optional[str] = None    # what every other process's output must contain
    needs_ucx: bool = False

    def odd_settings(self) -> tuple[dict, list[str]]:
        """Its settings, and what it must say (a setting may add a value it must name)."""
        env = dict(self.odd_env())
        return env, self.says + ([env.pop("__says")] if "__says" in env else [])


def _port_nobody_uses() -> dict:
    port = free_port()
    return {"DMLC_PS_ROOT_PORT": str(port), "__says": f"cannot reach the scheduler at 127.0.0.1:{port}"}


CASES = [
    Case("secret-missing", False, "worker:1", lambda: {"BYTEPS_JOB_SECRET": ""},
         ["BYTEPS_JOB_SECRET is not set here"], job_env=SECRET, others_say="ranks 1 missing"),
    Case("secret-different", False, "worker:1", lambda: {"BYTEPS_JOB_SECRET": "another-secret"},
         ["BYTEPS_JOB_SECRET"], job_env=SECRET, others_say="ranks 1 missing"),
    Case("num-worker", True, "worker:1", lambda: {"DMLC_NUM_WORKER": "3"},
         ["DMLC_NUM_WORKER=3", "started with 2 and 1"], others_say="the job cannot start"),
    Case("num-server", True, "worker:1", lambda: {"DMLC_NUM_SERVER": "2"},
         ["DMLC_NUM_SERVER=2", "started with 2 and 1"], others_say="the job cannot start"),
    Case("num-worker-on-the-server", True, "server:0", lambda: {"DMLC_NUM_WORKER": "3"},
         ["DMLC_NUM_WORKER=3", "started with 2 and 1"], others_say="the job cannot start"),
    # Whichever of the two workers registers first holds rank 0; the other is refused, and every
    # process (that one too) names the duplicate.
    Case("duplicate-worker-id", True, "worker:1", lambda: {"DMLC_WORKER_ID": "0"},
         ["worker rank 0 is already taken", "duplicate DMLC_WORKER_ID"],
         others_say="worker rank 0 is already taken"),
    Case("partition-bytes", True, "worker:1", lambda: {"BYTEPS_PARTITION_BYTES": "65536"},
         ["BYTEPS_PARTITION_BYTES=65536 here but worker 0 partitions tensors into"],
         others_say="BYTEPS_PARTITION_BYTES=65536 here"),
    Case("transport-ucx-in-a-default-job", True, "worker:1", lambda: {"BYTEPS_TRANSPORT": "ucx"},
         ["BYTEPS_TRANSPORT=ucx"], others_say="worker 1", needs_ucx=True),
    Case("scheduler-port", False, "worker:1", _port_nobody_uses, ["DMLC_PS_ROOT_PORT"], others_say="ranks 1 missing"),
    Case("scheduler-address", False, "worker:1",
         lambda: {"DMLC_PS_ROOT_URI": "127.0.0.2", "__says": "cannot reach the scheduler at 127.0.0.2:"},
         ["DMLC_PS_ROOT_URI"], others_say="ranks 1 missing"),
    Case("role-misspelled", False, "worker:1", lambda: {"DMLC_ROLE": "wroker"},
         ["DMLC_ROLE='wroker'", "did you mean worker?"], others_say="ranks 1 missing"),
]


@dataclass
class Exit:
    label: str
    returncode: Optional[int]  # None: still running at the deadline (then killed)
    elapsed: float             # seconds from its start to its exit (inf when killed)
    ended_at: float            # wall-clock time of its exit (inf when killed)
    output: str

    def __repr__(self) -> str:
        return f"<{self.label} rc={self.returncode} after {self.elapsed:.2f}s>\n{self.output}"

    @property
    def left_running(self) -> bool:
        return self.returncode is None


def ucx_built() -> bool:
    """Whether this build has the UCX transport (`byteps info` lists the transports built)."""
    out = subprocess.run([str(CORE_BINARY), "info"], env=hermetic_env(), capture_output=True, text=True, timeout=30)
    line = next((l for l in out.stdout.splitlines() if l.startswith("transports built:")), "")
    return "ucx" in line.split()


def run_job(workdir: Path, script_text: str, job_env: dict, per_process: dict[str, dict],
            args: dict[str, tuple] | None = None, deadline_s: float = 60) -> dict[str, Exit]:
    """Runs the four processes of :data:`LABELS` with ``job_env`` plus each one's own settings
    (a value of "" unsets a setting) and arguments; returns how each ended."""
    port = free_port()
    base = hermetic_env({"DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(port), "DMLC_NUM_WORKER": "2",
                         "DMLC_NUM_SERVER": "1", "DMLC_NODE_HOST": "127.0.0.1", **job_env})
    script = write_script(workdir, script_text)
    argv = {"scheduler": [str(CORE_BINARY), "scheduler"], "server:0": [str(CORE_BINARY), "server"],
            "worker:0": [PYTHON, str(script)], "worker:1": [PYTHON, str(script)]}
    started = {}
    for label in LABELS:
        role = label.split(":")[0]
        own = {"DMLC_ROLE": role, **({"DMLC_WORKER_ID": label[-1]} if role == "worker" else {})}
        env = {k: v for k, v in {**base, **own, **per_process.get(label, {})}.items() if v != ""}
        log = workdir / f"{label.replace(':', '-')}.log"
        with open(log, "wb") as sink:
            popen = subprocess.Popen(argv[label] + [str(a) for a in (args or {}).get(label, ())], env=env,
                                     cwd=workdir, start_new_session=True, stdin=subprocess.DEVNULL, stdout=sink,
                                     stderr=subprocess.STDOUT)
        started[label] = (popen, time.monotonic(), log)
    # Every process is watched at once (a 10 ms poll), so each exit is timed when it happens.
    exits: dict[str, tuple] = {}
    end = time.monotonic() + deadline_s
    while len(exits) < len(started) and time.monotonic() < end:
        for label, (popen, t0, _) in started.items():
            if label not in exits and popen.poll() is not None:
                exits[label] = (popen.returncode, time.monotonic() - t0, time.time())
        time.sleep(0.01)
    for label, (popen, _, _) in started.items():  # what did not end by itself
        if label not in exits:
            exits[label] = (None, float("inf"), float("inf"))
            os.killpg(popen.pid, signal.SIGKILL)
        popen.wait()
    return {label: Exit(label, rc, elapsed, wall, started[label][2].read_text(errors="replace"))
            for label, (rc, elapsed, wall) in exits.items()}


def start_timeout(case: Case) -> int:
    """The BYTEPS_START_TIMEOUT a case runs with: long where the job should end at once (so that
    waiting for it cannot pass for ending at once), short where it ends at the deadline."""
    return 30 if case.at_once else 5


def run_case(case: Case, workdir: Path) -> tuple[dict[str, Exit], list[str]]:
    """Runs one case; returns how each process ended and what its odd process must say."""
    odd, says = case.odd_settings()
    job = {"BYTEPS_START_TIMEOUT": str(start_timeout(case)), "BYTEPS_TIMEOUT": "30", **case.job_env}
    return run_job(workdir, JOB, job, {case.odd: odd}, deadline_s=start_timeout(case) + 30), says


def run_uneven(workdir: Path, steps: tuple[int, int] = (3, 5)) -> tuple[dict[str, Exit], float]:
    """Worker 0 runs steps[0] push_pulls, worker 1 steps[1]; returns how each process ended and
    the wall-clock time at which worker 0 called shutdown() (nan if it never did)."""
    exits = run_job(workdir, UNEVEN, {"BYTEPS_TIMEOUT": "30", "BYTEPS_START_TIMEOUT": "30"}, {},
                    args={"worker:0": (steps[0],), "worker:1": (steps[1],)}, deadline_s=60)
    line = next((l for l in exits["worker:0"].output.splitlines() if l.startswith("SHUTDOWN AT ")), None)
    return exits, float(line.split()[-1]) if line else float("nan")
