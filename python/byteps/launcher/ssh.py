"""``byteps launch --hostfile``: a whole BytePS job over OpenSSH, from a hostfile.

Usage::

    byteps launch --hostfile FILE --workers N [--servers K] [--ssh-port P] [--ssh-identity F]
                  [--ssh-option O ...] [--env K=V ...] [--scheduler-port P] -- CMD...
    python3 -m byteps.launcher.ssh ...   (the same)

Placement (docs/launchers.md, "SSH hostfile"): the scheduler on the first host; workers on the
first N hosts (a host's ``slots`` are its worker processes, ``BYTEPS_LOCAL_SIZE``); with
``--servers K`` and at least N + K hosts, servers on the next K hosts (separate), else one
server on each of the first K worker hosts (colocated, K <= N).  Without ``--servers``:
:func:`default_servers`, ``byteps plan``'s advice for the hosts beyond the workers (colocated,
separate, or mixed: a server on each worker host and on the next K hosts).

Every host is probed first, in parallel (``ssh ... python3 -m byteps.launcher.ssh_remote
probe``; the first host also checks the scheduler's port).  Then one ``ssh`` per role process
runs :mod:`byteps.launcher.ssh_remote` there, which reads the role's spec (argv ``python3 -m
byteps.launcher.bpslaunch [CMD]``, env with ``DMLC_*`` and ``BYTEPS_JOB_SECRET``, cwd) from
stdin and stops the role when its stdin closes.  Output lines are prefixed ``[host:role] ``.

Exit status: 0 when every worker exited 0 (the scheduler and servers are then stopped); the
code of the first role that failed (255: its ssh connection failed), after stopping every
other role; 130/143 on SIGINT/SIGTERM; 2 for bad arguments or a failed check before anything
starts.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional, Sequence

import byteps

from . import hostfile
from .bpsrun import env_pair
from .config_error import LaunchConfigError
from .ports import metrics_port
from .ssh_remote import EXIT_PORT_IN_USE
from .supervision import Child, Console, LaunchError, Waker, spawn, stop_all, supervise

EXIT_USAGE = 2
EXIT_CANNOT_START = 127
CONNECT_TIMEOUT_S = 5
PROBE_TIMEOUT_S = CONNECT_TIMEOUT_S + 15.0  # the whole probe of one host, connection included
REMOTE_GRACE_S = 2.0  # a remote role's SIGTERM -> SIGKILL (ssh_remote)
STOP_WAIT_S = REMOTE_GRACE_S + 0.5  # the ssh clients' time to end after their stdin closed
KILL_GRACE_S = 0.5  # then SIGTERM to the ssh clients left, SIGKILL after this
SERVICES_WAIT_S = 1.0  # after the workers: the scheduler and servers' time to leave by themselves
FORWARDED_PREFIXES = ("BYTEPS_", "DMLC_", "PS_")
REMOTE_MODULE = "byteps.launcher.ssh_remote"


def default_servers(n_workers: int, n_hosts: int) -> tuple[int, str, str]:
    """(servers on hosts beyond the workers' K, ``"colocated"``, ``"separate"`` or ``"mixed"``, the
    reason) when ``--servers`` is not given: ``byteps plan``'s advice for N worker hosts and the
    hostfile's other hosts as spare CPU machines (:func:`byteps.sim.advice.server_plan`, NIC rates
    taken as equal).  No spare host: one server on each worker host (K = N, colocated)."""
    from ..sim.advice import server_plan  # noqa: PLC0415 - only a launch without --servers needs it

    advice = server_plan(n_workers=n_workers, cpu_hosts=max(0, n_hosts - n_workers))
    if advice.cpu_servers == 0:
        return n_workers, "colocated", advice.reason
    return advice.cpu_servers, "mixed" if advice.colocate else "separate", advice.reason


@dataclass(frozen=True)
class Placement:
    scheduler: hostfile.HostEntry
    workers: list[hostfile.HostEntry]
    servers: list[hostfile.HostEntry]
    mode: str  # "colocated", "separate" or "mixed" (a server on each worker host and the next K)
    advice: str = ""  # why, when byteps plan's advice chose the servers

    @property
    def hosts(self) -> list[hostfile.HostEntry]:
        """Every host the job uses, in hostfile order."""
        return list(dict.fromkeys([self.scheduler, *self.workers, *self.servers]))


def place(hosts: list[hostfile.HostEntry], n: int, k: Optional[int], path: str) -> Placement:
    """The placement rule (module doc).  Raises LaunchConfigError when the hosts cannot hold it."""
    if len(hosts) < n:
        raise LaunchConfigError(f"too few hosts in {path}: {n} workers need {n} hosts (one worker per "
                                f"host; slots=N for several processes on one), the hostfile lists "
                                f"{len(hosts)}")
    advice = ""
    if k is None:
        k, mode, advice = default_servers(n, len(hosts))
    else:
        mode = "separate" if len(hosts) >= n + k else "colocated"
    if mode == "mixed":
        servers = hosts[:n] + hosts[n:n + k]
    elif mode == "separate":
        if len(hosts) < n + k:
            raise LaunchConfigError(f"too few hosts in {path}: {n} workers and {k} separate servers "
                                    f"need {n + k} hosts, the hostfile lists {len(hosts)}")
        servers = hosts[n:n + k]
    else:
        if k > n:
            raise LaunchConfigError(f"--servers {k} with --workers {n}: the hostfile {path} lists "
                                    f"{len(hosts)} hosts, too few for {n} + {k} separate, and colocated "
                                    f"servers are one per worker host (at most {n}); list more hosts "
                                    f"or ask for fewer servers")
        servers = hosts[:k]
    return Placement(hosts[0], hosts[:n], servers, mode, advice)


# --------------------------------------------------------------------------------------------
# ssh


def ssh_argv(opts: argparse.Namespace, target: str, remote: Sequence[str]) -> list[str]:
    """``ssh`` to *target* running *remote* (quoted for the remote shell).  The user's ``-o``
    options come first: ssh takes the first value given for an option, so they win."""
    argv = [opts.ssh, "-T"]
    for option in opts.ssh_option:
        argv += ["-o", option]
    argv += ["-o", "BatchMode=yes", "-o", f"ConnectTimeout={CONNECT_TIMEOUT_S}"]
    if opts.ssh_port is not None:
        argv += ["-p", str(opts.ssh_port)]
    if opts.ssh_identity:
        argv += ["-i", opts.ssh_identity]
    return argv + [target, "--", " ".join(shlex.quote(a) for a in remote)]


def remote_python(opts: argparse.Namespace, *args: str) -> list[str]:
    """The remote command running ``python -m byteps.launcher.ssh_remote ARGS`` with our
    PYTHONPATH (not secret: the job's spec, with the secret, comes on stdin)."""
    return ["env", f"PYTHONPATH={opts.pythonpath}", opts.remote_python, "-m", REMOTE_MODULE, *args]


def forwarded_pythonpath() -> str:
    """This byteps's own directory first (the remote runs the same code: a shared filesystem or
    the same install), then the user's PYTHONPATH, every entry made absolute."""
    ours = os.path.dirname(os.path.dirname(os.path.abspath(byteps.__file__)))
    entries = [ours] + [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(dict.fromkeys(entries))


def probe_hosts(opts: argparse.Namespace, placement: Placement) -> int:
    """Probes every host in parallel; returns the scheduler's port (checked, or drawn free on the
    first host).  Raises LaunchConfigError naming every host that failed."""
    first = placement.scheduler.ssh_target

    def one(entry: hostfile.HostEntry) -> tuple[hostfile.HostEntry, Optional[subprocess.CompletedProcess], str]:
        args = ["probe", "--port", str(opts.scheduler_port or 0)] if entry.ssh_target == first else ["probe"]
        argv = ssh_argv(opts, entry.ssh_target, remote_python(opts, *args))
        try:
            return entry, subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                                         timeout=PROBE_TIMEOUT_S), ""
        except subprocess.TimeoutExpired:
            return entry, None, f"no answer within {PROBE_TIMEOUT_S:g}s"

    hosts = placement.hosts
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(32, len(hosts))) as pool:
        results = list(pool.map(one, hosts))
    errors, port = [], None
    for entry, done, timeout in results:
        said = (done.stderr.strip().splitlines() or [""])[-1] if done is not None else timeout
        if done is None or done.returncode == 255:
            errors.append(f"cannot reach host {entry.ssh_target} over ssh: {said or 'ssh exited 255'}")
        elif done.returncode == EXIT_PORT_IN_USE and entry.ssh_target == first:
            errors.append(f"the scheduler port {opts.scheduler_port} is already in use on {entry.address} "
                          f"({said}); free it or give another --scheduler-port")
        elif done.returncode != 0:
            errors.append(f"host {entry.ssh_target} is reachable over ssh but cannot run "
                          f"{opts.remote_python} -m {REMOTE_MODULE} there (exit {done.returncode}): "
                          f"{said} (give --remote-python, or install byteps at the same path)")
        elif entry.ssh_target == first:
            words = done.stdout.split()
            port = int(words[1]) if len(words) == 2 and words[0] == "port" and words[1].isdigit() else None
            if port is None:
                errors.append(f"host {entry.ssh_target}: unexpected probe answer {done.stdout.strip()!r}")
    if errors:
        raise LaunchConfigError("\n  ".join(["the hostfile's hosts failed the check before the start:", *errors]))
    assert port is not None
    return port


# --------------------------------------------------------------------------------------------
# The job


@dataclass(frozen=True)
class RoleSpec:
    label: str  # "host:scheduler", "host:server", "host:worker:<DMLC_WORKER_ID>"
    role: str  # "scheduler", "server", "worker"
    target: str  # ssh target
    env: dict[str, str]
    argv: list[str]


def role_specs(opts: argparse.Namespace, placement: Placement, port: int, secret: str) -> list[RoleSpec]:
    """Every role process, scheduler first, then servers, then workers."""
    n, k = len(placement.workers), len(placement.servers)
    forced = opts.env_base.get("BYTEPS_FORCE_DISTRIBUTED", "").strip().lower() in ("1", "true", "yes", "on")
    distributed = n > 1 or forced
    base = {**opts.env_base, "DMLC_NUM_WORKER": str(n), "DMLC_NUM_SERVER": str(k),
            "DMLC_PS_ROOT_URI": placement.scheduler.address, "DMLC_PS_ROOT_PORT": str(port),
            "BYTEPS_JOB_SECRET": secret, "PYTHONPATH": opts.pythonpath, "PYTHONUNBUFFERED": "1"}
    bpslaunch = [opts.remote_python, "-m", "byteps.launcher.bpslaunch"]
    used: dict[str, int] = {}  # metrics ports taken per host: a host's workers first, then its services
    specs: list[RoleSpec] = []
    for i, entry in enumerate(placement.workers):
        slots = {"BYTEPS_LOCAL_SIZE": str(entry.slots)} if entry.slots else {}
        env = {**base, "DMLC_ROLE": "worker", "DMLC_WORKER_ID": str(i), "DMLC_NODE_HOST": entry.address, **slots}
        size = env.get("BYTEPS_LOCAL_SIZE", "1").strip()  # bpslaunch checks it; here metrics ports only
        used[entry.address] = int(size) if size.isdigit() else 1
        specs.append(RoleSpec(f"{entry.address}:worker:{i}", "worker", entry.ssh_target, env,
                              [*bpslaunch, "--", *opts.command]))
    services = [("scheduler", placement.scheduler)] + [("server", e) for e in placement.servers]
    service_specs = []
    for role, entry in services if distributed else []:  # labelled by host: one server per host
        offset = used.get(entry.address, 0)
        used[entry.address] = offset + 1
        env = {**base, "DMLC_ROLE": role, "DMLC_NODE_HOST": entry.address, **metrics_port(base, offset)}
        service_specs.append(RoleSpec(f"{entry.address}:{role}", role, entry.ssh_target, env, bpslaunch))
    return service_specs + specs


def describe(placement: Placement, port: int, distributed: bool) -> str:
    workers = ", ".join(f"{h.address}" + (f" ({h.slots} slots)" if h.slots else "") for h in placement.workers)
    if not distributed:
        return f"starting 1 worker on {workers} (single-worker job: no scheduler or servers)"
    servers = ", ".join(h.address for h in placement.servers)
    return (f"starting scheduler on {placement.scheduler.address}:{port}; {len(placement.workers)} workers on "
            f"{workers}; {len(placement.servers)} {placement.mode} servers on {servers}"
            + (f" (byteps plan: {placement.advice})" if placement.advice else ""))


def ssh_popen(argv: list[str], **kw) -> subprocess.Popen:
    """Popen for :func:`supervision.spawn` with stdin a pipe: the role's spec, then its lifeline."""
    kw["stdin"] = subprocess.PIPE
    return subprocess.Popen(argv, **kw)


def close_stdin(child: Child) -> None:
    try:
        child.popen.stdin.close()
    except OSError:
        pass  # the ssh client is gone already


def stop_remote(children: list[Child], waker: Waker, console: Console) -> None:
    """Closes every ssh's stdin (its host's ssh_remote stops the role), waits STOP_WAIT_S for the
    ssh clients to end (less on a further SIGINT/SIGTERM), then stops those left."""
    for child in children:
        close_stdin(child)
    deadline, seen = time.monotonic() + STOP_WAIT_S, waker.stop.count
    while waker.stop.count == seen and any(c.status() is None for c in children):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        waker.wait(left)
    stop_all(children, signal.SIGTERM, KILL_GRACE_S, waker, console)


def run_job(opts: argparse.Namespace, console: Console) -> int:
    placement = place(hostfile.read(opts.hostfile), opts.workers, opts.servers, opts.hostfile)
    port = probe_hosts(opts, placement)
    secret = opts.env_base.get("BYTEPS_JOB_SECRET") or secrets.token_hex(16)
    specs = role_specs(opts, placement, port, secret)
    console.note(describe(placement, port, any(s.role != "worker" for s in specs)))
    children: list[Child] = []
    with Waker() as waker:
        try:
            for spec in specs:
                remote = remote_python(opts, "run")
                child = spawn(spec.label, spec.role, ssh_argv(opts, spec.target, remote), os.environ,
                              console=console, tag=f"[{spec.label}] ", popen=ssh_popen)
                children.append(child)
                message = {"argv": spec.argv, "env": spec.env, "cwd": os.getcwd(), "grace": REMOTE_GRACE_S}
                try:
                    child.popen.stdin.write((json.dumps(message) + "\n").encode())
                    child.popen.stdin.flush()
                except OSError:
                    pass  # the ssh client died already: supervise reports its status
            return supervise(children, waker, console, services_wait=SERVICES_WAIT_S, services_may_stay=True)
        except LaunchError as err:
            console.note(f"error: {err}")
            return EXIT_CANNOT_START
        finally:
            stop_remote(children, waker, console)


# --------------------------------------------------------------------------------------------
# Command line


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="byteps launch", usage="%(prog)s --hostfile FILE --workers N "
                                "[options] -- COMMAND [ARGS...]",
                                description="Run a BytePS job on the hosts of a hostfile over ssh.")
    p.add_argument("--hostfile", required=True, metavar="FILE",
                   help="one host a line: 'host', 'host slots=N' or 'host:N'; '#' comments")
    p.add_argument("--workers", "-n", type=int, required=True, metavar="N", help="worker hosts (the first N)")
    p.add_argument("--servers", "-s", type=int, metavar="K",
                   help="servers: on the next K hosts when there are N + K, else on the first K worker "
                        "hosts (default: one on each worker host)")
    p.add_argument("--scheduler-port", type=int, metavar="P",
                   help="default: a port found free on the first host")
    p.add_argument("--ssh-port", type=int, metavar="P")
    p.add_argument("--ssh-identity", metavar="FILE")
    p.add_argument("--ssh-option", action="append", default=[], metavar="OPTION",
                   help="ssh -o OPTION (repeatable; wins over the launcher's own)")
    p.add_argument("--env", type=env_pair, action="append", default=[], metavar="KEY=VALUE",
                   help="add to every role's environment (repeatable)")
    p.add_argument("--remote-python", default=sys.executable, metavar="PATH",
                   help="the Python on the hosts (default: this one's path, %(default)s)")
    p.add_argument("command", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    return p


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    args = list(argv)
    parser = build_parser()
    cut = args.index("--") if "--" in args else len(args)
    opts = parser.parse_args(args[:cut])
    if opts.command:
        parser.error(f"unexpected arguments before '--': {' '.join(opts.command)}")
    opts.command = args[cut + 1:]
    if not opts.command:
        parser.error("missing the worker command (byteps launch --hostfile FILE --workers N -- COMMAND)")
    if opts.workers < 1 or (opts.servers is not None and opts.servers < 1):
        parser.error("--workers and --servers must be at least 1")
    for flag, value in (("--scheduler-port", opts.scheduler_port), ("--ssh-port", opts.ssh_port)):
        if value is not None and not 0 < value < 65536:
            parser.error(f"{flag} must be in 1..65535, got {value}")
    opts.ssh = shutil.which("ssh")
    if opts.ssh is None:
        parser.error("ssh is not on PATH (apt-get install openssh-client)")
    opts.env_base = {**{k: v for k, v in os.environ.items() if k.startswith(FORWARDED_PREFIXES)}, **dict(opts.env)}
    opts.pythonpath = forwarded_pythonpath()
    return opts


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``byteps launch`` / ``python3 -m byteps.launcher.ssh``; returns the exit code."""
    console = Console("byteps launch")
    try:
        opts = parse_args(sys.argv[1:] if argv is None else argv)
        return run_job(opts, console)
    except SystemExit as exit_:  # argparse: bad arguments (2) or --help (0)
        return exit_.code if isinstance(exit_.code, int) else EXIT_USAGE
    except LaunchConfigError as err:
        console.note(f"error: {err}")
        return EXIT_USAGE
    except KeyboardInterrupt:  # during the probe: nothing started
        return 128 + signal.SIGINT


if __name__ == "__main__":
    sys.exit(main())
