"""Run a BytePS job, or any set of peer processes, on the hosts of a :class:`Testbed`.

:func:`run_job` places the scheduler, servers and workers on hosts and gives each the ps-lite
environment; :func:`run_on_hosts` runs arbitrary commands (torch.distributed gloo peers, an
``mpirun`` started inside one host, ...).  Both supervise as ``bpsrun`` does, with the same
:mod:`byteps.launcher.supervision`: every output line is copied to our stdout/stderr prefixed
with ``[label@host]``, the first non-zero exit stops everything (SIGTERM, SIGKILL after
``grace``), an overall timeout gives 124, and every process group started is gone when they
return.  The result keeps each process's output.

SIGINT/SIGTERM during a job stop it first, then propagate as KeyboardInterrupt / SystemExit.
"""

from __future__ import annotations

import functools
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Mapping, Optional, Sequence

from .netns import Testbed

REPO = Path(__file__).resolve().parents[2]
PYTHON_DIR = REPO / "python"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

from byteps.launcher import corebin  # noqa: E402  (needs PYTHON_DIR on sys.path)
from byteps.launcher.supervision import (EXIT_CANNOT_START, EXIT_TIMEOUT, Child, Console,  # noqa: E402
                                         LaunchError, Waker, spawn, stop_all, supervise)

DEFAULT_PORT = 9000  # the scheduler's namespace is ours alone, so a fixed port is free
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_GRACE_S = 2.0


@dataclass
class ProcessResult:
    """One process of a job: its label ("worker:0"), host index, argv, exit status and output
    (stdout and stderr lines in arrival order, without the prefix)."""

    label: str
    host: int
    argv: list[str]
    returncode: Optional[int] = None  # -N: killed by signal N (possibly by us, when stopping)
    lines: list[str] = field(default_factory=list)

    @property
    def output(self) -> str:
        return "".join(self.lines)


@dataclass
class JobResult:
    """``returncode``: 0 when every process exited 0, else as bpsrun (the first failure's code,
    124 on timeout, 127 if something could not start); ``processes`` by label; ``elapsed`` in
    seconds; ``transcript``: every prefixed line as printed."""

    returncode: int
    processes: dict[str, ProcessResult]
    elapsed: float
    transcript: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def timed_out(self) -> bool:
        return self.returncode == EXIT_TIMEOUT

    @property
    def outputs(self) -> dict[str, str]:
        return {label: p.output for label, p in self.processes.items()}

    def output(self, label: str) -> str:
        return self.processes[label].output

    def __repr__(self) -> str:  # what pytest shows when an assertion on it fails
        return (f"JobResult(rc={self.returncode}, elapsed={self.elapsed:.2f}s)\n"
                + "".join(self.transcript))


@dataclass
class _Spec:
    label: str
    role: str  # "worker" (must finish), or "scheduler"/"server" (expected to follow)
    host: int
    argv: list[str]
    env: dict[str, str]


class _Sink:
    """Where the supervisor's reader writes one stream of one process: kept, and echoed if asked."""

    def __init__(self, record: ProcessResult, transcript: list[str], stream: IO[str],
                 tag_len: int, echo: bool) -> None:
        self._record, self._transcript, self._stream = record, transcript, stream
        self._tag_len, self._echo = tag_len, echo

    def write(self, text: str) -> None:  # called under the console lock
        self._record.lines.append(text[self._tag_len:])
        self._transcript.append(text)
        if self._echo:
            self._stream.write(text)

    def flush(self) -> None:
        if self._echo:
            self._stream.flush()


def _base_env(env: Optional[Mapping[str, str]]) -> dict[str, str]:
    out = dict(os.environ)
    out.update(env or {})
    out["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PYTHON_DIR), out.get("PYTHONPATH")]))
    out["PYTHONUNBUFFERED"] = "1"
    return out


def _supervise(testbed: Testbed, specs: list[_Spec], timeout: Optional[float], grace: float,
               echo: bool) -> JobResult:
    console = Console("testbed")
    children: list[Child] = []
    results: dict[str, ProcessResult] = {}
    transcript: list[str] = []
    start = time.monotonic()
    with Waker() as waker:
        try:
            for spec in specs:
                record = ProcessResult(spec.label, spec.host, spec.argv)
                results[spec.label] = record
                tag = f"[{spec.label}@{testbed.hosts[spec.host].name}] "
                sinks = tuple(_Sink(record, transcript, stream, len(tag), echo)
                              for stream in (sys.stdout, sys.stderr))
                children.append(spawn(spec.label, spec.role, spec.argv, spec.env, console=console,
                                      tag=tag, sinks=sinks,
                                      popen=functools.partial(testbed.popen, spec.host)))
            code = supervise(children, waker, console, timeout=timeout, services_wait=2 * grace)
        except LaunchError as err:
            console.note(f"error: {err}")
            code = EXIT_CANNOT_START
        finally:
            stop_all(children, signal.SIGTERM, grace, waker, console)
        stop = waker.stop.signum
    elapsed = time.monotonic() - start
    for child in children:
        results[child.label].returncode = child.popen.returncode
    if stop == signal.SIGINT:
        raise KeyboardInterrupt
    if stop is not None:
        raise SystemExit(128 + stop)
    return JobResult(code, results, elapsed, transcript)


def run_on_hosts(testbed: Testbed,
                 commands: Sequence[tuple[int, Sequence[str], Optional[Mapping[str, str]],
                                          Optional[str]]],
                 timeout: Optional[float] = DEFAULT_TIMEOUT_S, grace: float = DEFAULT_GRACE_S,
                 echo: bool = True) -> JobResult:
    """Runs one process per ``(host_index, argv, env, label)`` and waits for all of them.

    ``env`` is added to this process's environment (with PYTHONPATH including the repo's
    ``python/`` and PYTHONUNBUFFERED=1); ``label`` defaults to "proc:<j>".  Every process must
    exit 0; the first that does not stops the others.
    """
    specs = []
    for j, (host, argv, env, label) in enumerate(commands):
        testbed._host(host)  # IndexError now rather than a half-started job
        specs.append(_Spec(label or f"proc:{j}", "worker", host, [str(a) for a in argv],
                           _base_env(env)))
    labels = [s.label for s in specs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be unique: {labels}")
    return _supervise(testbed, specs, timeout, grace, echo)


def placement_hosts(workers: int, servers: int, placement: str = "separate",
                    scheduler_host: Optional[int] = None) -> tuple[list[int], list[int], int]:
    """(worker hosts, server hosts, scheduler host) of a placement.

    separate: workers on hosts 0..n-1, servers on n..n+k-1, scheduler on the first server host
    unless *scheduler_host* (e.g. n+k for a host of its own).  colocated: worker i and server i
    on host i (k <= n), scheduler on host 0 unless *scheduler_host*.  mixed (the unified
    architecture): *servers* counts every server, n colocated plus c = servers - n >= 0 on CPU
    hosts: worker i and server i on host i, server n+j alone on host n+j (n + c hosts); the
    scheduler on the first CPU server host (host n), or host 0 when c = 0, unless
    *scheduler_host*.  The core tells the two kinds apart by the hosts' addresses.
    """
    if workers < 1 or servers < 1:
        raise ValueError("a job needs at least one worker and one server")
    if placement == "mixed":
        if servers < workers:
            raise ValueError(f"mixed placement needs a colocated server on each of the {workers} "
                             f"worker hosts plus any CPU servers: servers >= workers, got "
                             f"{servers} < {workers}")
        worker_hosts, server_hosts = list(range(workers)), list(range(servers))
        default = workers if servers > workers else 0
        return worker_hosts, server_hosts, default if scheduler_host is None else scheduler_host
    if placement == "separate":
        worker_hosts = list(range(workers))
        server_hosts = list(range(workers, workers + servers))
    elif placement == "colocated":
        if servers > workers:
            raise ValueError(f"colocated placement needs servers <= workers ({servers} > {workers})")
        worker_hosts, server_hosts = list(range(workers)), list(range(servers))
    else:
        raise ValueError(f"placement must be 'separate', 'colocated' or 'mixed', not {placement!r}")
    return worker_hosts, server_hosts, server_hosts[0] if scheduler_host is None else scheduler_host


def hosts_needed(workers: int, servers: int, placement: str = "separate",
                 scheduler_host: Optional[int] = None) -> int:
    w, s, sched = placement_hosts(workers, servers, placement, scheduler_host)
    return max(w + s + [sched]) + 1


def run_job(testbed: Testbed, workers: int, servers: int, worker_argv: Sequence[str],
            placement: str = "separate", scheduler_host: Optional[int] = None,
            env: Optional[Mapping[str, str]] = None, timeout: Optional[float] = DEFAULT_TIMEOUT_S,
            port: int = DEFAULT_PORT, core_binary: Optional[str] = None,
            grace: float = DEFAULT_GRACE_S, echo: bool = True) -> JobResult:
    """Runs scheduler, *servers* servers and *workers* copies of *worker_argv* on the testbed.

    Placement as :func:`placement_hosts`.  Every process gets this process's environment, then
    *env*, then the job's: DMLC_ROLE, DMLC_PS_ROOT_URI (the scheduler host's address),
    DMLC_PS_ROOT_PORT (*port*), DMLC_NUM_WORKER/SERVER, DMLC_NODE_HOST (its host's address),
    DMLC_WORKER_ID (workers), BYTEPS_LOCAL_RANK=0/BYTEPS_LOCAL_SIZE=1 (one worker per host),
    a shared BYTEPS_JOB_SECRET (unless *env* or the environment has one), PYTHONUNBUFFERED=1,
    and PYTHONPATH with the repository's ``python/``.  Scheduler and servers run the core binary
    (``byteps-core scheduler|server``, found by ``corebin.find_core_binary(core_binary)``).

    Labels: "scheduler", "server:<i>", "worker:<i>"; output prefixed "[worker:0@h0] ".

    Raises:
        ValueError: the placement does not fit the testbed.
        FileNotFoundError: no core binary.
    """
    worker_hosts, server_hosts, sched = placement_hosts(workers, servers, placement,
                                                        scheduler_host)
    needed = hosts_needed(workers, servers, placement, scheduler_host)
    if needed > len(testbed.hosts):
        raise ValueError(f"{placement} placement of {workers} workers + {servers} servers "
                         f"(scheduler on host {sched}) needs {needed} hosts; the testbed has "
                         f"{len(testbed.hosts)}")
    core = corebin.find_core_binary(core_binary)
    base = _base_env(env)
    base.setdefault("BYTEPS_JOB_SECRET", secrets.token_hex(16))
    base.update({"DMLC_PS_ROOT_URI": testbed.hosts[sched].ip, "DMLC_PS_ROOT_PORT": str(port),
                 "DMLC_NUM_WORKER": str(workers), "DMLC_NUM_SERVER": str(servers)})

    def role_env(host: int, role: str, extra: Optional[dict] = None) -> dict[str, str]:
        return {**base, "DMLC_ROLE": role, "DMLC_NODE_HOST": testbed.hosts[host].ip,
                **(extra or {})}

    specs = [_Spec("scheduler", "scheduler", sched, [core, "scheduler"],
                   role_env(sched, "scheduler"))]
    specs += [_Spec(f"server:{i}", "server", h, [core, "server"], role_env(h, "server"))
              for i, h in enumerate(server_hosts)]
    specs += [_Spec(f"worker:{i}", "worker", h, [str(a) for a in worker_argv],
                    role_env(h, "worker", {"DMLC_WORKER_ID": str(i), "BYTEPS_LOCAL_RANK": "0",
                                           "BYTEPS_LOCAL_SIZE": "1"}))
              for i, h in enumerate(worker_hosts)]
    return _supervise(testbed, specs, timeout, grace, echo)
