"""bpsrun: run a whole BytePS job (scheduler, servers, workers) on one machine.

Usage::

    bpsrun [-n N] [-s K] [options] -- COMMAND [ARGS...]
    bpsrun -n N --cpu-servers K [options] -- COMMAND [ARGS...]      # mixed placement
    python3 -m byteps.launcher.bpsrun [options] -- COMMAND [ARGS...]

Starts one scheduler (``byteps-core scheduler``), K servers (``byteps-core server``) and N
copies of COMMAND as workers, each in its own process group, with the ps-lite environment
(``DMLC_*``) filled in.  A single-worker job (N == 1) needs no scheduler or servers, so none are
started unless ``--force-distributed`` (or ``BYTEPS_FORCE_DISTRIBUTED=1``) asks for them, as
in the original ``bpslaunch``.

Mixed placement (``--cpu-servers K``): the job emulates N worker machines, each running one
worker and its colocated server, plus K CPU machines running one server each (N + K servers;
``-s`` may be left out, or must say N + K).  Each emulated machine gets a loopback address of
its own, given to its processes as ``DMLC_NODE_HOST`` (the address a node registers and
listens on): worker machine i is 127.0.1.(i+1), CPU machine j is 127.0.2.(j+1); the scheduler
stays on ``--host`` (which must then be a 127.x address).  The scheduler tells colocated servers
from CPU ones by these addresses, so the job gets the unified architecture's split of the bytes
(``BYTEPS_ENABLE_MIXED_MODE=0`` keeps equal shares).  Servers 0..N-1 are the colocated ones,
N..N+K-1 the CPU ones.  ``--cpu-servers 0`` is N colocated servers on N emulated machines.
The emulated machines still share this one's cores and memory: with the default
``BYTEPS_TRANSPORT=auto`` their connections use shared memory, ``--env BYTEPS_TRANSPORT=tcp``
sends them over loopback TCP; for shaped links between hosts use the emulated cluster
(``python3 -m tools.testbed job --placement mixed``).
Without ``--cpu-servers`` every process gets ``--host``, as before.

Every output line of a child is copied to bpsrun's stdout/stderr prefixed with its role and
rank (``[scheduler] ``, ``[server:1] ``, ``[worker:0] ``).

Environment of the children, lowest precedence first: bpsrun's own environment, ``--env``
values, then the variables bpsrun sets (these must match what it actually launched).
``BYTEPS_JOB_SECRET`` is generated only if neither of the first two provides one.  While a
distributed job runs, ``byteps top`` on this machine finds it (:mod:`byteps.launcher.jobfiles`).

Exit status: 0 when every process exited 0; otherwise the code of the first process that
failed (128+N if it was killed by signal N); 1 when the scheduler/servers did not exit by
themselves after the workers finished; 124 on ``--timeout``; 130/143 when bpsrun itself got
SIGINT/SIGTERM; 127 when something could not be started; 2 for bad arguments.  After the first
failure the other processes get 2 seconds to exit by themselves (they are usually failing too, and
their own messages say why) before they are stopped.  Whatever the outcome, every process group
bpsrun started is killed before it returns.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import sys
from typing import Optional, Sequence

from . import corebin, jobfiles
from .ports import free_port, metrics_port, port_in_use
from .supervision import (EXIT_CANNOT_START, EXIT_FAILURE, Child, Console, LaunchError, Waker, spawn,
                          stop_all, supervise)

MAX_MACHINES = 254  # emulated machines of one kind: the last byte of 127.0.1.x / 127.0.2.x


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
    p.add_argument("-s", "--num-servers", type=int, default=None, metavar="K",
                   help="servers (default 1; with --cpu-servers: N + K)")
    p.add_argument("--cpu-servers", type=int, default=None, metavar="K",
                   help="mixed placement: a colocated server per worker machine plus K servers "
                        "on machines of their own, each emulated machine on its own loopback "
                        "address")
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
    if opts.cpu_servers is not None:
        check_mixed(parser, opts)
    elif opts.num_servers is None:
        opts.num_servers = 1
    if opts.num_workers < 1 or opts.num_servers < 1:
        parser.error("--num-workers and --num-servers must be at least 1")
    if opts.scheduler_port is not None and not 0 < opts.scheduler_port < 65536:
        parser.error("--scheduler-port must be in 1..65535")
    if opts.scheduler_port is not None:
        reason = port_in_use(opts.host, opts.scheduler_port)
        if reason:
            parser.error(f"--scheduler-port {opts.scheduler_port} is already in use on {opts.host} ({reason}): "
                         f"another job? give another port, or leave --scheduler-port out (bpsrun then picks a free one)")
    if opts.grace < 0 or (opts.timeout is not None and opts.timeout <= 0):
        parser.error("--grace must be >= 0 and --timeout > 0")
    return opts


def check_mixed(parser: argparse.ArgumentParser, opts: argparse.Namespace) -> None:
    """Validates ``--cpu-servers`` against the other flags and fills in ``num_servers``."""
    n, k = opts.num_workers, opts.cpu_servers
    if k < 0 or k > MAX_MACHINES:
        parser.error(f"--cpu-servers must be in 0..{MAX_MACHINES}, got {k}")
    if not 1 <= n <= MAX_MACHINES:
        parser.error(f"--cpu-servers emulates at most {MAX_MACHINES} worker machines; "
                     f"-n/--num-workers is {n}")
    if opts.num_servers is not None and opts.num_servers != n + k:
        parser.error(f"-s/--num-servers {opts.num_servers} contradicts -n {n} --cpu-servers {k}, "
                     f"which start {n} colocated + {k} CPU = {n + k} servers; leave -s out "
                     f"(or drop --cpu-servers for servers that all share --host)")
    if not opts.host.startswith("127."):
        parser.error(f"--cpu-servers puts every emulated machine on a loopback address "
                     f"(127.0.1.x, 127.0.2.x), so --host must be a 127.x address too, "
                     f"not {opts.host}")
    forced = {**os.environ, **dict(opts.env)}.get("BYTEPS_FORCE_DISTRIBUTED") == "1"
    if n == 1 and not (opts.force_distributed or forced):
        parser.error("--cpu-servers with -n 1 starts no servers (a single-worker job needs "
                     "none); add --force-distributed")
    opts.num_servers = n + k


def worker_machine_host(i: int) -> str:
    """The loopback address of emulated worker machine *i* (0-based) in a mixed placement."""
    return f"127.0.1.{i + 1}"


def cpu_machine_host(j: int) -> str:
    """The loopback address of emulated CPU machine *j* (0-based) in a mixed placement."""
    return f"127.0.2.{j + 1}"


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


def plan(opts: argparse.Namespace, core: Optional[str]) -> list[tuple[str, str, list[str], dict]]:
    """(label, role, argv, role variables) for every process, in start order."""
    mixed = opts.cpu_servers is not None
    n = opts.num_workers

    def server_host(i: int) -> dict:
        if not mixed:
            return {}
        return {"DMLC_NODE_HOST": worker_machine_host(i) if i < n else cpu_machine_host(i - n)}

    procs: list[tuple[str, str, list[str], dict]] = []
    if core is not None:
        procs.append(("scheduler", "scheduler", [core, "scheduler"], {"DMLC_ROLE": "scheduler"}))
        procs += [(f"server:{i}", "server", [core, "server"], {"DMLC_ROLE": "server", **server_host(i)})
                  for i in range(opts.num_servers)]
    procs += [(f"worker:{i}", "worker", list(opts.command),
               {"DMLC_ROLE": "worker", "DMLC_WORKER_ID": str(i),
                "BYTEPS_LOCAL_RANK": "0", "BYTEPS_LOCAL_SIZE": "1",
                **({"DMLC_NODE_HOST": worker_machine_host(i)} if mixed else {})})
              for i in range(n)]
    return procs


def trace_dir(env: dict, role_env: dict) -> dict:
    """A traced worker's own BYTEPS_TRACE_DIR: ``<dir>/worker<i>``.  Each worker here stands for a
    machine, and all share this machine's files: in one folder they would all write
    ``<dir>/0/comm.json`` (the original's layout: ``<dir>/<local rank>``).  ``byteps trace merge
    <dir>`` finds them all."""
    on = str(env.get("BYTEPS_TRACE_ON", "")).strip().lower() in ("1", "true", "yes", "on")
    if not on or role_env.get("DMLC_ROLE") != "worker":
        return {}
    return {"BYTEPS_TRACE_DIR": os.path.join(env.get("BYTEPS_TRACE_DIR") or "./trace", f"worker{role_env['DMLC_WORKER_ID']}")}


def run_job(opts: argparse.Namespace, children: list[Child], waker: Waker, console: Console) -> int:
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
        if opts.cpu_servers is None:
            console.note(f"starting scheduler on {opts.host}:{port}, {opts.num_servers} servers, "
                         f"{opts.num_workers} workers")
        else:
            n, k = opts.num_workers, opts.cpu_servers

            def span(prefix: str, count: int) -> str:
                return f"{prefix}1..{count}" if count > 1 else f"{prefix}1"
            cpu = f", {k} CPU server{'s' if k > 1 else ''} on {span('127.0.2.', k)}" if k else ""
            console.note(f"starting scheduler on {opts.host}:{port}; mixed placement: {n} "
                         f"worker{'s' if n > 1 else ''} with colocated servers on "
                         f"{span('127.0.1.', n)}{cpu}")
    else:
        console.note("starting 1 worker (single-worker job: no scheduler or servers)")
    for i, (label, role, argv, role_env) in enumerate(plan(opts, core)):
        role_env = {**role_env, **metrics_port(env, i), **trace_dir(env, role_env)}  # one machine: its own each
        children.append(spawn(label, role, argv, {**env, **role_env}, console=console,
                              tag="" if opts.no_prefix else f"[{label}] "))
    job_file = jobfiles.write(opts.host, port, env["BYTEPS_JOB_SECRET"]) if distributed else None
    try:
        return supervise(children, waker, console, timeout=opts.timeout, services_wait=2 * opts.grace)
    finally:
        jobfiles.remove(job_file)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``bpsrun`` console script; returns the exit code."""
    try:
        opts = parse_args(argv)
    except SystemExit as exit_:  # argparse: bad arguments (2) or --help (0)
        return exit_.code if isinstance(exit_.code, int) else EXIT_FAILURE
    console = Console("bpsrun")
    children: list[Child] = []
    with Waker() as waker:
        try:
            return run_job(opts, children, waker, console)
        except LaunchError as err:
            console.note(f"error: {err}")
            return EXIT_CANNOT_START
        finally:
            stop_all(children, signal.SIGTERM, opts.grace, waker, console)


if __name__ == "__main__":
    sys.exit(main())
