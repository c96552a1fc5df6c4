"""Supervising the processes of a job: what ``bpsrun``, ``bpslaunch`` and the testbed share.

* :func:`spawn` starts a child as the leader of a new session (so of its own process group);
  with a :class:`Console` its output is piped and copied line by line with a ``[label] `` tag.
* :class:`Waker` lets the supervisor sleep until a child exits, a signal arrives or a deadline
  passes; SIGINT/SIGTERM are recorded (:class:`StopRequest`), not acted on in the handler.
* :func:`supervise` returns the job's exit code as soon as it is known: 0 when every child
  exited 0, the code of the first child that failed (128+N when killed by signal N), 128+N when
  the supervisor got signal N, 124 past the timeout, 1 when the services did not follow the
  workers out.
* :func:`stop_all` stops what is left: a signal to every process group, SIGKILL after a grace
  period (or at once on a further SIGINT/SIGTERM), every leader reaped, the output drained.

Leaders are reaped only by :func:`stop_all`: an unreaped zombie keeps its PID, and so its
process-group ID, reserved, so signalling a group can never reach a stranger.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Callable, Mapping, Optional, Sequence

EXIT_FAILURE = 1
EXIT_TIMEOUT = 124
EXIT_CANNOT_START = 127
READER_JOIN_S = 2.0
_NO_SIGNAL_WAIT_S = 0.02  # wake-up period when signals cannot be used (not the main thread)


class LaunchError(Exception):
    """A process of the job could not be started."""


class Console:
    """Serialises writes to our stdout/stderr from many reader threads; :meth:`note` writes
    the supervisor's own messages, ``"<name>: <message>"`` on stderr."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._lock = threading.Lock()

    def write(self, stream: IO[str], text: str) -> None:
        with self._lock:
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError):
                pass  # Our own output is gone (e.g. closed pipe); keep draining the children.

    def note(self, message: str) -> None:
        self.write(sys.stderr, f"{self.name}: {message}\n")


def pump(source: IO[bytes], sink: IO[str], prefix: str, console: Console) -> None:
    """Copies *source* line by line to *sink*, prefixing each line; runs on a reader thread."""
    with source:
        for raw in iter(source.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            console.write(sink, prefix + (line if line.endswith("\n") else line + "\n"))


@dataclass(eq=False)
class Child:
    """One process of the job: the leader of its own process group."""

    label: str  # e.g. "scheduler", "server:1", "worker:0", "local_rank:0"
    role: str  # "worker" (must finish), or "scheduler"/"server" (expected to follow the workers)
    popen: subprocess.Popen
    readers: list[threading.Thread] = field(default_factory=list)

    def status(self) -> Optional[int]:
        """Exit status (``-signum`` if killed by a signal), or None while it runs.  Does not reap."""
        if self.popen.returncode is not None:
            return self.popen.returncode
        info = os.waitid(os.P_PID, self.popen.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        if info is None:
            return None
        return info.si_status if info.si_code == os.CLD_EXITED else -info.si_status

    def signal_group(self, signum: int) -> None:
        if self.popen.returncode is not None:
            return  # Reaped: the group ID may belong to someone else now.
        try:
            os.killpg(self.popen.pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def spawn(label: str, role: str, argv: Sequence[str], env: Mapping[str, str], *,
          console: Optional[Console] = None, tag: str = "",
          sinks: tuple[IO[str], IO[str]] = (),
          popen: Callable[..., subprocess.Popen] = subprocess.Popen) -> Child:
    """Starts *argv* in a new session.

    Without *console* the child shares our stdin, stdout and stderr.  With it, stdin is
    /dev/null and each line of the child's stdout and stderr goes to ``sinks`` (default: our
    stdout and stderr) prefixed with *tag*.  *popen* starts the process (e.g. inside a
    network namespace); it gets Popen's keyword arguments.

    Raises:
        LaunchError: the process could not be started.
    """
    streams = {}
    if console is not None:
        streams = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
    try:
        proc = popen(list(argv), env=dict(env), start_new_session=True, **streams)
    except OSError as err:
        raise LaunchError(f"cannot start {label} ({argv[0]}): {err}") from err
    child = Child(label, role, proc)
    if console is not None:
        for source, sink in zip((proc.stdout, proc.stderr), sinks or (sys.stdout, sys.stderr)):
            reader = threading.Thread(target=pump, args=(source, sink, tag, console),
                                      name=f"{console.name}-{label}", daemon=True)
            reader.start()
            child.readers.append(reader)
    return child


class StopRequest:
    """Signal handler recording SIGINT/SIGTERM sent to the supervisor; its loop acts on it."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.count = 0

    def __call__(self, signum: int, _frame: object) -> None:
        self.signum = self.signum or signum
        self.count += 1


class Waker:
    """Lets the supervisor sleep until a child exits or it is signalled -- no polling.

    While entered, SIGCHLD, SIGINT and SIGTERM write to a self-pipe
    (:func:`signal.set_wakeup_fd`) that :meth:`wait` selects on; SIGINT/SIGTERM are also
    recorded in :attr:`stop`.  Off the main thread no handler can be installed, so :meth:`wait`
    then wakes up periodically instead.
    """

    SIGNALS = (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.stop = StopRequest()
        self._read, self._write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._active = threading.current_thread() is threading.main_thread()
        self._previous: dict[int, object] = {}
        self._previous_fd = -1

    def __enter__(self) -> "Waker":
        if self._active:
            self._previous_fd = signal.set_wakeup_fd(self._write, warn_on_full_buffer=False)
            for sig in self.SIGNALS:
                handler = self.stop if sig != signal.SIGCHLD else (lambda _s, _f: None)
                self._previous[sig] = signal.signal(sig, handler)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._active:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)
            signal.set_wakeup_fd(self._previous_fd)
        os.close(self._read)
        os.close(self._write)

    def wait(self, timeout: Optional[float] = None) -> None:
        """Returns after a signal arrived since the last call, or after ``timeout`` seconds."""
        if not self._active:
            timeout = _NO_SIGNAL_WAIT_S if timeout is None else min(timeout, _NO_SIGNAL_WAIT_S)
        select.select([self._read], [], [], None if timeout is None else max(0.0, timeout))
        try:
            while os.read(self._read, 512):
                pass
        except BlockingIOError:
            pass


def describe(status: int) -> str:
    if status >= 0:
        return f"exited with code {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        name = f"signal {-status}"
    return f"was killed by signal {name}"


def exit_code(status: int) -> int:
    return status if status >= 0 else 128 - status


@dataclass(frozen=True)
class Wording:
    """How the supervisor's notes end: when it stops the job itself (signal, timeout, services
    that stay), and after a child's failure (None: nothing added)."""

    stopping: str = "stopping the job"
    failure: Optional[str] = "stopping the job"


# After a child failed, the others are usually failing too (the scheduler tells every node): they get
# this long to exit by themselves, printing their own account, before they are stopped.
FAILURE_SETTLE_S = 2.0


def settle(children: list[Child], waker: Waker, seconds: float = FAILURE_SETTLE_S) -> None:
    """Waits up to *seconds* for every child to exit by itself (returns early on a signal to us)."""
    end = time.monotonic() + seconds
    while waker.stop.signum is None and any(c.status() is None for c in children):
        left = end - time.monotonic()
        if left <= 0:
            return
        waker.wait(left)


def supervise(children: list[Child], waker: Waker, console: Console, *,
              timeout: Optional[float] = None, services_wait: Optional[float] = None,
              services_may_stay: bool = False, wording: Wording = Wording()) -> int:
    """Waits for the job and returns its exit code as soon as the outcome is known.

    Every child must exit 0; after one failed, the others get FAILURE_SETTLE_S seconds to exit by
    themselves before the caller stops them.  With ``services_wait``, only the ``"worker"`` children must end
    by themselves; the others (scheduler, servers) then have ``services_wait`` seconds to follow
    them out (with ``services_may_stay``, those still running then are no failure: the job's
    code is 0 and the caller stops them).  ``timeout``: seconds for the whole job.
    """
    deadline = time.monotonic() + timeout if timeout else None
    workers = [c for c in children if services_wait is None or c.role == "worker"]
    services = [c for c in children if c not in workers]
    finished: set[str] = set()
    services_deadline: Optional[float] = None
    # Services leave as soon as the scheduler ends the job, often just before the workers' own
    # exit: that is normal, so an early clean exit is only mentioned if the job then fails.
    early: list[str] = []
    while True:
        if waker.stop.signum is not None:
            console.note(f"received {signal.Signals(waker.stop.signum).name}; {wording.stopping}")
            return 128 + waker.stop.signum
        if deadline is not None and time.monotonic() >= deadline:
            console.note(f"job timed out after {timeout:g} seconds; {wording.stopping}")
            return EXIT_TIMEOUT
        for child in children:
            status = child.status()
            if status is None or child.label in finished:
                continue
            if status != 0:
                for label in early:
                    console.note(f"{label} had exited with code 0 before the workers finished")
                suffix = f"; {wording.failure}" if wording.failure else ""
                console.note(f"{child.label} {describe(status)}{suffix}")
                settle(children, waker)
                return exit_code(status)
            finished.add(child.label)
            if child in services and services_deadline is None:
                early.append(child.label)
        if services_deadline is None and all(w.label in finished for w in workers):
            services_deadline = time.monotonic() + (services_wait or 0.0)
        if services_deadline is not None:
            pending = [s.label for s in services if s.label not in finished]
            if not pending:
                return 0
            if time.monotonic() >= services_deadline:
                if services_may_stay:
                    return 0
                console.note(f"{', '.join(pending)} did not exit after the workers finished "
                             f"(waited {services_wait:g}s); {wording.stopping}")
                return EXIT_FAILURE
        wakeups = [t for t in (deadline, services_deadline) if t is not None]
        waker.wait(min(wakeups) - time.monotonic() if wakeups else None)


def stop_all(children: list[Child], signum: int, grace: float, waker: Waker, console: Console) -> None:
    """Sends *signum* to every child's process group, SIGKILL to those still running after
    *grace* seconds (or at once on a further SIGINT/SIGTERM), reaps every leader and drains
    the output.

    Groups whose leader already exited are signalled too, so that strays left in them (e.g.
    grandchildren, background processes of a shell command) do not outlive the job.
    """
    for child in children:
        child.signal_group(signum)
    deadline, signals_seen = time.monotonic() + grace, waker.stop.count
    while waker.stop.count == signals_seen and any(c.status() is None for c in children):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        waker.wait(left)
    stubborn = [child.label for child in children if child.status() is None]
    if stubborn:
        console.note(f"{', '.join(stubborn)} still running after {signal.Signals(signum).name}; "
                     f"sending SIGKILL")
    for child in children:
        child.signal_group(signal.SIGKILL)
    for child in children:
        child.popen.wait()
    join_deadline = time.monotonic() + READER_JOIN_S
    for child in children:
        for reader in child.readers:
            reader.join(max(0.0, join_deadline - time.monotonic()))
