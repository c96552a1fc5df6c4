"""The remote side of ``byteps launch --hostfile`` (:mod:`byteps.launcher.ssh`), run over ssh.

``python3 -m byteps.launcher.ssh_remote run``
    Reads one JSON line from stdin -- ``{"argv": [...], "env": {...}, "cwd": "...", "grace": S}``
    -- and starts ``argv`` with this process's environment updated by ``env`` (the job's
    ``DMLC_*`` variables, ``BYTEPS_JOB_SECRET``, ``PYTHONPATH``, ...), in ``cwd``, as the leader
    of a new session.  Its stdout and stderr are ours (ssh streams them back).  When our stdin
    reaches end-of-file (the launcher closed it, or the ssh connection is gone) or a line says
    ``stop``, or we get SIGTERM/SIGHUP/SIGINT, the role's process group gets SIGTERM, and SIGKILL
    ``grace`` seconds later.  Exits with the role's status (128+N when killed by signal N); 127
    when it cannot be started.  The spec comes on stdin so that the secret is on no command line.
    This process is a child subreaper (``PR_SET_CHILD_SUBREAPER``): what the role started in
    sessions of their own (bpslaunch's local ranks) is reparented here if the role dies first,
    and whatever of it is left when the role has exited (or at the SIGKILL) is killed too, so
    nothing of the job outlives this process on its host.

``python3 -m byteps.launcher.ssh_remote probe [--port P]``
    The launcher's check before anything starts: exits 0 when this host can run us.  With
    ``--port P`` it also binds TCP port P on every address (the scheduler's port): prints
    ``port P`` when it is free, exits 3 naming the error when it is not; ``--port 0`` draws a
    free port here (:func:`byteps.launcher.ports.free_port`) and prints it.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional, Sequence

EXIT_CANNOT_START = 127
EXIT_PORT_IN_USE = 3
EXIT_USAGE = 2
DEFAULT_GRACE_S = 2.0
REAP_DEADLINE_S = 2.0
_PR_SET_CHILD_SUBREAPER = 36


def note(message: str) -> None:
    sys.stderr.write(f"ssh_remote: {message}\n")
    sys.stderr.flush()


def become_subreaper() -> None:
    """Orphaned descendants are reparented to us rather than to init (Linux >= 3.4)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # then strays that left the role's group may outlive it, as without this helper


def descendants() -> list[int]:
    """The PIDs of every descendant of this process (from /proc)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(name))
    found, frontier = [], [os.getpid()]
    while frontier:
        kids = children.get(frontier.pop(), [])
        found += kids
        frontier += kids
    return found


def kill_descendants() -> None:
    """SIGKILL to every descendant left, and reaps them (bounded by REAP_DEADLINE_S)."""
    deadline = time.monotonic() + REAP_DEADLINE_S
    while time.monotonic() < deadline:
        left = descendants()
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            pass
        time.sleep(0.01)


class Role:
    """The started role: its process group is stopped once, and signalled only while its
    leader is unreaped (so the group ID cannot belong to someone else)."""

    def __init__(self, proc: subprocess.Popen, grace: float) -> None:
        self.proc = proc
        self.grace = grace
        self.lock = threading.Lock()
        self.reaped = False
        self.exited = threading.Event()
        self.stopping = threading.Event()

    def signal_group(self, signum: int) -> None:
        with self.lock:
            if not self.reaped:
                try:
                    os.killpg(self.proc.pid, signum)
                except (ProcessLookupError, PermissionError):
                    pass

    def stop(self) -> None:
        """SIGTERM to the group, SIGKILL after the grace period (runs on its own thread)."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.signal_group(signal.SIGTERM)
        if not self.exited.wait(self.grace):
            self.signal_group(signal.SIGKILL)
            for pid in descendants():  # e.g. bpslaunch's local ranks, in sessions of their own
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass

    def stop_in_background(self) -> None:
        threading.Thread(target=self.stop, name="ssh_remote-stop", daemon=True).start()

    def wait(self) -> int:
        """Waits for the leader, kills strays left in its group, reaps it; the exit code."""
        os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOWAIT)
        self.exited.set()
        self.signal_group(signal.SIGKILL)  # strays (e.g. background jobs of a shell command)
        with self.lock:
            code = self.proc.wait()
            self.reaped = True
        kill_descendants()
        return code if code >= 0 else 128 - code


def watch_stdin(role: Role, stdin) -> None:
    """Stops the role at end-of-file or on a ``stop`` line; other lines are ignored."""
    for line in iter(stdin.readline, ""):
        if line.strip() == "stop":
            break
    role.stop()


def run(stdin=None) -> int:
    stdin = stdin or sys.stdin
    line = stdin.readline()
    if not line.strip():
        note("no job spec on stdin (the launcher closed the connection before sending it)")
        return EXIT_USAGE
    try:
        spec = json.loads(line)
        argv = [str(a) for a in spec["argv"]]
        env = {**os.environ, **{str(k): str(v) for k, v in spec.get("env", {}).items()}}
        grace = float(spec.get("grace", DEFAULT_GRACE_S))
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        note(f"malformed job spec on stdin: {err}")
        return EXIT_USAGE
    cwd: Optional[str] = spec.get("cwd") or None
    become_subreaper()
    try:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError as err:
        note(f"cannot start {argv[0] if argv else '(empty argv)'} in {cwd or os.getcwd()} on "
             f"{socket.gethostname()}: {err}")
        return EXIT_CANNOT_START
    role = Role(proc, grace)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, lambda _s, _f: role.stop_in_background())
    threading.Thread(target=watch_stdin, args=(role, stdin), name="ssh_remote-stdin",
                     daemon=True).start()
    return role.wait()


def probe(port: Optional[int]) -> int:
    if port is None:
        return 0
    if port == 0:
        from .ports import free_port  # noqa: PLC0415 - only the draw needs it
        print(f"port {free_port('0.0.0.0')}", flush=True)
        return 0
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a TIME_WAIT does not count
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as err:
            print(f"cannot bind TCP port {port} on {socket.gethostname()}: {err.strerror or err}",
                  file=sys.stderr, flush=True)
            return EXIT_PORT_IN_USE
    print(f"port {port}", flush=True)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args == ["run"]:
        return run()
    if args[:1] == ["probe"] and len(args) in (1, 3) and (len(args) == 1 or args[1] == "--port"):
        port = args[2] if len(args) == 3 else None
        if port is not None and not (port.isdigit() and int(port) < 65536):
            note(f"probe --port needs a port number in 0..65535, got {port!r}")
            return EXIT_USAGE
        return probe(None if port is None else int(port))
    note("usage: python3 -m byteps.launcher.ssh_remote run | probe [--port P]")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
