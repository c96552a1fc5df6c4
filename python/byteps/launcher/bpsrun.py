"""bpsrun: run a whole BytePS job (scheduler, servers, workers) on one machine.

Usage::

    bpsrun [-n N] [-s K] [options] -- COMMAND [ARGS...]
    python3 -m byteps.launcher.bpsrun [options] -- COMMAND [ARGS...]

Starts one scheduler (``byteps-core scheduler``), K servers (``byteps-core server``) and N
copies of COMMAND as workers, each in its own process group, with the ps-lite environment
(``DMLC_*``) filled in.  A single-worker job (N == 1) needs no scheduler or servers, so none are
started unless ``--force-distributed`` (or ``BYTEPS_FORCE_DISTRIBUTED=1``) asks for them, as
in the original ``bpslaunch``.

Every output line of a child is copied to bpsrun's stdout/stderr prefixed with its role and
rank (``[scheduler] ``, ``[server:1] ``, ``[worker:0] ``).

Environment of the children, lowest precedence first: bpsrun's own environment, ``--env``
values, then the variables bpsrun sets (these must match what it actually launched).
``BYTEPS_JOB_SECRET`` is generated only if neither of the first two provides one.

Exit status: 0 when every process exited 0; otherwise the code of the first process that
failed (128+N if it was killed by signal N); 1 when the scheduler/servers did not exit by
themselves after the workers finished; 124 on ``--timeout``; 130/143 when bpsrun itself got
SIGINT/SIGTERM; 127 when something could not be started; 2 for bad arguments.  Whatever the
outcome, every process group bpsrun started is killed before it returns.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import IO, Optional, Sequence

from . import corebin
from .ports import free_port

EXIT_FAILURE = 1
EXIT_TIMEOUT = 124
EXIT_CANNOT_START = 127
POLL_INTERVAL_S = 0.02
READER_JOIN_S = 2.0


class LaunchError(Exception):
    """A process of the job could not be started."""


class Console:
    """Serialises writes to bpsrun's stdout/stderr coming from many reader threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def write(self, stream: IO[str], text: str) -> None:
        with self._lock:
            try:
                stream.write(text)
                stream.flush()
            except (OSError, ValueError):
                pass  # Our own output is gone (e.g. closed pipe); keep draining the children.

    def note(self, message: str) -> None:
        self.write(sys.stderr, f"bpsrun: {message}\n")


@dataclass
class Child:
    """One process of the job: the leader of its own process group."""

    label: str  # "scheduler", "server:i" or "worker:i"
    role: str
    popen: subprocess.Popen
    readers: list[threading.Thread] = field(default_factory=list)

    def status(self) -> Optional[int]:
        """Exit status (``-signum`` if killed by a signal), or None while it runs.

        Does not reap the child: its zombie keeps the PID, and so the process-group ID,
        reserved until :func:`stop_all`, so signalling the group can never reach a stranger.
        """
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


class StopRequest:
    """Signal handler recording SIGINT/SIGTERM sent to bpsrun; the main loop acts on it."""

    def __init__(self) -> None:
        self.signum: Optional[int] = None
        self.count = 0

    def __call__(self, signum: int, _frame: object) -> None:
        self.signum = self.signum or signum
        self.count += 1


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


def env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bpsrun",
        description="Run a BytePS job (scheduler, servers, workers) on this machine.",
        usage="%(prog)s [options] -- COMMAND [ARGS...]")
    p.add_argument("-n", "--num-workers", type=int, default=1, metavar="N")
    p.add_argument("-s", "--num-servers", type=int, default=1, metavar="K")
    p.add_argument("--scheduler-port", type=int, metavar="P",
                   help="default: a free TCP port on --host")
    p.add_argument("--host", default="127.0.0.1", help="scheduler and node address")
    p.add_argument("--timeout", type=float, metavar="SECONDS",
                   help="stop the job and exit 124 after this many seconds")
    p.add_argument("--env", type=env_pair, action="append", default=[], metavar="KEY=VALUE",
                   help="add to every process's environment (repeatable)")
    p.add_argument("--no-prefix", action="store_true", help="don't prefix output lines")
    p.add_argument("--grace", type=float, default=5.0, metavar="SECONDS",
                   help="time between SIGTERM and SIGKILL when stopping (default 5)")
    p.add_argument("--force-distributed", action="store_true",
                   help="start scheduler and servers even for one worker")
    p.add_argument("--core-binary", metavar="PATH", help="the byteps-core executable")
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    args = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if "--" in args:
        cut = args.index("--")
        opts = parser.parse_args(args[:cut])
        if opts.command:
            parser.error(f"unexpected arguments before '--': {' '.join(opts.command)}")
        opts.command = args[cut + 1:]
    else:
        opts = parser.parse_args(args)
    if not opts.command:
        parser.error("missing the worker command (bpsrun [options] -- COMMAND [ARGS...])")
    if opts.num_workers < 1 or opts.num_servers < 1:
        parser.error("--num-workers and --num-servers must be at least 1")
    if opts.scheduler_port is not None and not 0 < opts.scheduler_port < 65536:
        parser.error("--scheduler-port must be in 1..65535")
    if opts.grace < 0 or (opts.timeout is not None and opts.timeout <= 0):
        parser.error("--grace must be >= 0 and --timeout > 0")
    return opts


def job_env(opts: argparse.Namespace, port: int) -> dict[str, str]:
    """The environment shared by every process of the job (before the per-role variables)."""
    env = dict(os.environ)
    env.update(dict(opts.env))
    env.update({
        "DMLC_PS_ROOT_URI": opts.host, "DMLC_PS_ROOT_PORT": str(port),
        "DMLC_NUM_WORKER": str(opts.num_workers), "DMLC_NUM_SERVER": str(opts.num_servers),
        "DMLC_NODE_HOST": opts.host, "PYTHONUNBUFFERED": "1",
    })
    if opts.force_distributed:
        env["BYTEPS_FORCE_DISTRIBUTED"] = "1"
    env.setdefault("BYTEPS_JOB_SECRET", secrets.token_hex(16))
    return env


def pump(source: IO[bytes], sink: IO[str], prefix: str, console: Console) -> None:
    """Copy *source* line by line to *sink*, prefixing each line; runs on a reader thread."""
    with source:
        for raw in iter(source.readline, b""):
            line = raw.decode("utf-8", errors="replace")
            console.write(sink, prefix + (line if line.endswith("\n") else line + "\n"))


def spawn(label: str, role: str, argv: list[str], env: dict[str, str],
          console: Console, prefix: bool) -> Child:
    """Start one process in a new session (hence its own process group) with piped output."""
    try:
        popen = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, start_new_session=True)
    except OSError as err:
        raise LaunchError(f"cannot start {label} ({argv[0]}): {err}") from err
    child = Child(label, role, popen)
    tag = f"[{label}] " if prefix else ""
    for source, sink in ((popen.stdout, sys.stdout), (popen.stderr, sys.stderr)):
        reader = threading.Thread(target=pump, args=(source, sink, tag, console),
                                  name=f"bpsrun-{label}", daemon=True)
        reader.start()
        child.readers.append(reader)
    return child


def plan(opts: argparse.Namespace, core: Optional[str]) -> list[tuple[str, str, list[str], dict]]:
    """(label, role, argv, role variables) for every process, in start order."""
    procs: list[tuple[str, str, list[str], dict]] = []
    if core is not None:
        procs.append(("scheduler", "scheduler", [core, "scheduler"], {"DMLC_ROLE": "scheduler"}))
        procs += [(f"server:{i}", "server", [core, "server"], {"DMLC_ROLE": "server"})
                  for i in range(opts.num_servers)]
    procs += [(f"worker:{i}", "worker", list(opts.command),
               {"DMLC_ROLE": "worker", "DMLC_WORKER_ID": str(i),
                "BYTEPS_LOCAL_RANK": "0", "BYTEPS_LOCAL_SIZE": "1"})
              for i in range(opts.num_workers)]
    return procs


def interrupted(stop: StopRequest, deadline: Optional[float], opts: argparse.Namespace,
                console: Console) -> Optional[int]:
    """Exit code if bpsrun was signalled or the job ran past --timeout, else None."""
    if stop.signum is not None:
        console.note(f"received {signal.Signals(stop.signum).name}; stopping the job")
        return 128 + stop.signum
    if deadline is not None and time.monotonic() >= deadline:
        console.note(f"job timed out after {opts.timeout:g} seconds; stopping the job")
        return EXIT_TIMEOUT
    return None


def supervise(children: list[Child], opts: argparse.Namespace, stop: StopRequest,
              console: Console) -> int:
    """Wait for the job; return bpsrun's exit code as soon as the outcome is known."""
    deadline = time.monotonic() + opts.timeout if opts.timeout else None
    workers = [c for c in children if c.role == "worker"]
    services = [c for c in children if c.role != "worker"]
    finished: set[str] = set()
    services_deadline: Optional[float] = None
    # Services leave as soon as the scheduler ends the job, often just before the workers' own
    # exit: that is normal, so an early clean exit is only mentioned if the job then fails.
    early: list[str] = []
    while True:
        code = interrupted(stop, deadline, opts, console)
        if code is not None:
            return code
        for child in children:
            status = child.status()
            if status is None or child.label in finished:
                continue
            if status != 0:
                for label in early:
                    console.note(f"{label} had exited with code 0 before the workers finished")
                console.note(f"{child.label} {describe(status)}; stopping the job")
                return exit_code(status)
            finished.add(child.label)
            if child.role != "worker" and services_deadline is None:
                early.append(child.label)
        if services_deadline is None and all(w.label in finished for w in workers):
            services_deadline = time.monotonic() + 2 * opts.grace
        if services_deadline is not None:
            pending = [s.label for s in services if s.label not in finished]
            if not pending:
                return 0
            if time.monotonic() >= services_deadline:
                console.note(f"{', '.join(pending)} did not exit after the workers finished "
                             f"(waited {2 * opts.grace:g}s); stopping the job")
                return EXIT_FAILURE
        time.sleep(POLL_INTERVAL_S)


def stop_all(children: list[Child], grace: float, stop: StopRequest, console: Console) -> None:
    """SIGTERM every group, SIGKILL after *grace*, reap everything and drain the output.

    Groups whose leader already exited are signalled too, so that stray grandchildren left in
    them do not outlive the job.  A further SIGINT/SIGTERM to bpsrun cuts the grace short.
    """
    for child in children:
        child.signal_group(signal.SIGTERM)
    deadline, signals_seen = time.monotonic() + grace, stop.count
    while time.monotonic() < deadline and stop.count == signals_seen:
        if all(child.status() is not None for child in children):
            break
        time.sleep(POLL_INTERVAL_S)
    stubborn = [child.label for child in children if child.status() is None]
    if stubborn:
        console.note(f"{', '.join(stubborn)} still running after SIGTERM; sending SIGKILL")
    for child in children:
        child.signal_group(signal.SIGKILL)
    for child in children:
        child.popen.wait()
    join_deadline = time.monotonic() + READER_JOIN_S
    for child in children:
        for reader in child.readers:
            reader.join(max(0.0, join_deadline - time.monotonic()))


def run_job(opts: argparse.Namespace, children: list[Child], stop: StopRequest,
            console: Console) -> int:
    """Start every process (appending to *children* as it goes) and supervise the job."""
    try:
        port = opts.scheduler_port or free_port(opts.host)
    except OSError as err:
        raise LaunchError(f"cannot bind a port on --host {opts.host}: {err}") from err
    env = job_env(opts, port)
    distributed = opts.num_workers > 1 or env.get("BYTEPS_FORCE_DISTRIBUTED") == "1"
    core = None
    if distributed:
        try:
            core = corebin.find_core_binary(opts.core_binary)
        except FileNotFoundError as err:
            raise LaunchError(str(err)) from err
        console.note(f"starting scheduler on {opts.host}:{port}, {opts.num_servers} servers, "
                     f"{opts.num_workers} workers")
    else:
        console.note("starting 1 worker (single-worker job: no scheduler or servers)")
    for label, role, argv, role_env in plan(opts, core):
        children.append(spawn(label, role, argv, {**env, **role_env}, console,
                              not opts.no_prefix))
    return supervise(children, opts, stop, console)


def install_handlers(stop: StopRequest) -> dict[int, object]:
    """Route SIGINT/SIGTERM to *stop*; returns the previous handlers (empty off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``bpsrun`` console script; returns the exit code."""
    try:
        opts = parse_args(argv)
    except SystemExit as exit_:  # argparse: bad arguments (2) or --help (0)
        return exit_.code if isinstance(exit_.code, int) else EXIT_FAILURE
    console, stop = Console(), StopRequest()
    previous = install_handlers(stop)
    children: list[Child] = []
    try:
        return run_job(opts, children, stop, console)
    except LaunchError as err:
        console.note(f"error: {err}")
        return EXIT_CANNOT_START
    finally:
        stop_all(children, opts.grace, stop, console)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
