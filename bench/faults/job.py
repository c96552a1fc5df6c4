"""One byteps job on this machine, process by process, for the fault trials and the soak.

Unlike ``bpsrun`` (which stops the whole job at the first failure), :class:`Job` lets every
process run until it exits by itself, records when and how, and answers the questions a fault
trial asks afterwards: which processes are still running (:meth:`Job.running`); which processes
of the job exist anywhere on the machine and which of its shared-memory segments are left, by
its unique ``BYTEPS_JOB_SECRET`` (:mod:`tools.procinfo`).

Every process runs in its own session with stdout and stderr in one log file; :meth:`Job.close`
SIGKILLs the process groups of those still running.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"
CORE_BINARY = PYTHON_DIR / "byteps" / "_bin" / "byteps-core"
PYTHON = "/usr/bin/python3"
for _path in (PYTHON_DIR, REPO):  # this checkout's byteps and tools
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from byteps.launcher.ports import free_port  # noqa: E402
from tools.localjob import hermetic_env  # noqa: E402


def use_snapshot(directory: Path) -> Path:
    """Copies the built package (python/byteps with its core) to *directory* and runs every later
    job from there, so that a rebuild during a long run cannot mix versions.  Returns the copy."""
    global PYTHON_DIR, CORE_BINARY
    import shutil  # noqa: PLC0415

    target = Path(directory) / "python"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(PYTHON_DIR / "byteps", target / "byteps",
                    ignore=shutil.ignore_patterns("__pycache__"))
    PYTHON_DIR = target
    CORE_BINARY = target / "byteps" / "_bin" / "byteps-core"
    return target


def known_settings() -> set[str]:
    """Names of the settings the built core registers (from ``byteps-core info``)."""
    out = subprocess.run([str(CORE_BINARY), "info"], capture_output=True, text=True, timeout=30,
                         env=hermetic_env(python_dir=PYTHON_DIR)).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


@dataclass
class Proc:
    label: str  # "scheduler", "server:<i>", "worker:<i>" or "worker:<host>.<local rank>"
    role: str
    popen: subprocess.Popen
    log: Path
    started: float
    exited: Optional[float] = None  # monotonic time of the exit, when seen by poll()
    killed_by_us: bool = False

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def returncode(self) -> Optional[int]:
        return self.popen.returncode

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def rank_from_log(self) -> Optional[int]:
        """The rank the process logged under (``[server:1]`` prefixes, INFO level), if any."""
        m = re.search(rf"\[{self.role}:(\d+)\]", self.output())
        return int(m.group(1)) if m else None


@dataclass
class Layout:
    """Where the job's processes listen.  ``scheduler_port``: the scheduler binds there;
    ``root_port``: what nodes connect to (a proxy's port, or the same).  Per server:
    ``server_ports[i]`` (DMLC_PORT) and ``advertise_ports[i]`` (BYTEPS_ADVERTISE_PORT; None:
    not set)."""

    scheduler_port: int
    root_port: int
    server_ports: list[int]
    advertise_ports: list[Optional[int]] = field(default_factory=list)


class Job:
    """Scheduler, servers and workers started one by one (see the module doc).

    Args:
        workdir: logs and the worker script go here.
        workers: worker hosts (DMLC_NUM_WORKER); ``local_size`` worker processes each.
        servers: number of servers.
        script: the worker program's text.
        env: settings for every process.
        layout: ports (default: all free ports, no proxies).
        service_env: settings for the scheduler and servers only.
    """

    def __init__(self, workdir: Path, workers: int, servers: int, script: str,
                 env: Optional[dict[str, str]] = None, layout: Optional[Layout] = None,
                 local_size: int = 1, service_env: Optional[dict[str, str]] = None,
                 secret: Optional[str] = None, args: tuple[str, ...] = ()):
        self.dir = Path(workdir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.workers, self.servers, self.local_size = workers, servers, local_size
        self.secret = secret or secrets.token_hex(16)
        if layout is None:
            port = free_port()
            layout = Layout(port, port, [free_port() for _ in range(servers)])
        if not layout.advertise_ports:
            layout.advertise_ports = [None] * servers
        self.layout = layout
        self.script = self.dir / "worker.py"
        self.script.write_text(script)
        self.args = args
        self.base = hermetic_env(python_dir=PYTHON_DIR, extra={
            "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(layout.root_port),
            "DMLC_NUM_WORKER": str(workers), "DMLC_NUM_SERVER": str(servers),
            "DMLC_NODE_HOST": "127.0.0.1", "BYTEPS_JOB_SECRET": self.secret, **(env or {})})
        self.service_env = service_env or {}
        self.procs: dict[str, Proc] = {}

    def _start(self, label: str, role: str, argv: list[str], env: dict[str, str]) -> Proc:
        log = self.dir / f"{label.replace(':', '-')}.log"
        with open(log, "wb") as sink:
            popen = subprocess.Popen(argv, env=env, cwd=self.dir, stdin=subprocess.DEVNULL,
                                     stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        proc = Proc(label, role, popen, log, time.monotonic())
        self.procs[label] = proc
        return proc

    def start_scheduler(self) -> Proc:
        env = {**self.base, **self.service_env, "DMLC_ROLE": "scheduler",
               "DMLC_PS_ROOT_PORT": str(self.layout.scheduler_port)}
        return self._start("scheduler", "scheduler", [str(CORE_BINARY), "scheduler"], env)

    def start_server(self, i: int) -> Proc:
        env = {**self.base, **self.service_env, "DMLC_ROLE": "server",
               "DMLC_PORT": str(self.layout.server_ports[i])}
        if self.layout.advertise_ports[i]:
            env["BYTEPS_ADVERTISE_PORT"] = str(self.layout.advertise_ports[i])
        return self._start(f"server:{i}", "server", [str(CORE_BINARY), "server"], env)

    def start_worker(self, host: int, local_rank: int = 0) -> Proc:
        label = f"worker:{host}" if self.local_size == 1 else f"worker:{host}.{local_rank}"
        env = {**self.base, "DMLC_ROLE": "worker", "DMLC_WORKER_ID": str(host),
               "BYTEPS_LOCAL_RANK": str(local_rank), "BYTEPS_LOCAL_SIZE": str(self.local_size)}
        return self._start(label, "worker", [PYTHON, str(self.script), *self.args], env)

    def start_all(self) -> None:
        self.start_scheduler()
        for i in range(self.servers):
            self.start_server(i)
        for h in range(self.workers):
            for r in range(self.local_size):
                self.start_worker(h, r)

    def poll(self) -> list[Proc]:
        """Records exits; returns the processes still running."""
        now = time.monotonic()
        running = []
        for p in self.procs.values():
            if p.exited is None:
                if p.popen.poll() is None:
                    running.append(p)
                else:
                    p.exited = now
        return running

    def running(self) -> list[Proc]:
        return self.poll()

    def wait(self, deadline: float, interval: float = 0.02) -> list[Proc]:
        """Waits until every process exited or the monotonic *deadline*; returns those left."""
        while True:
            left = self.poll()
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(interval)

    def kill(self, proc: Proc, signum: int = signal.SIGKILL) -> bool:
        """Signals one process (not its group); False when it had exited already."""
        if proc.popen.poll() is not None:
            return False
        try:
            os.kill(proc.pid, signum)
        except ProcessLookupError:
            return False
        proc.killed_by_us = True
        return True

    def close(self) -> None:
        """SIGKILLs every process group still running and reaps the leaders."""
        for p in self.procs.values():
            if p.popen.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # unreaped leader: the group is ours
                except ProcessLookupError:
                    pass
        for p in self.procs.values():
            p.popen.wait()
            if p.exited is None:
                p.exited = time.monotonic()

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def relative(t: Optional[float], origin: float) -> Optional[float]:
    return None if t is None else round(t - origin, 3)


def eprint(*args: object) -> None:
    print(*args, file=sys.stderr, flush=True)
