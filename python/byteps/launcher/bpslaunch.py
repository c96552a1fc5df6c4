"""bpslaunch: the per-machine launcher of BytePS, driven by the environment.

Usage (one call per machine and role, as with the original ``bpslaunch``)::

    DMLC_ROLE=scheduler ... bpslaunch
    DMLC_ROLE=server    ... bpslaunch
    DMLC_ROLE=worker    ... bpslaunch python3 train.py --epochs 3
    DMLC_ROLE=worker    ... bpslaunch "python3 train.py --epochs 3 > log.txt"
    DMLC_ROLE=joint     ... bpslaunch python3 train.py --epochs 3   # worker + colocated server

The role comes from ``DMLC_ROLE`` (``worker``, ``server``, ``scheduler`` or ``joint``).
Required variables, as in the original: ``DMLC_NUM_WORKER``, ``DMLC_NUM_SERVER``,
``DMLC_PS_ROOT_URI``, ``DMLC_PS_ROOT_PORT``, and ``DMLC_WORKER_ID`` for workers (and joint); a worker of a single-worker job
(``DMLC_NUM_WORKER=1`` without ``BYTEPS_FORCE_DISTRIBUTED=1``) needs only ``DMLC_NUM_WORKER``.
Unlike the original, which printed "The env X is missing" and exited 0, a missing or malformed
variable is an error (exit 2).

worker
    Starts ``local_size`` copies of the command, each with ``BYTEPS_LOCAL_RANK=i`` and
    ``BYTEPS_LOCAL_SIZE=local_size``.  ``local_size`` is the number of comma-separated entries
    of ``NVIDIA_VISIBLE_DEVICES``, else ``BYTEPS_LOCAL_SIZE``, else 1.  Several arguments are run
    as they are; a single argument is a shell command line (``/bin/sh -c``), like the original.
    If any copy exits non-zero, the others are stopped and bpslaunch exits with that code.

    CPU binding (through ``taskset -c``, since numactl may be missing) is off by default -- the
    original defaulted it on.  ``BYTEPS_NUMA_ON=1`` turns it on; ``BYTEPS_VISIBLE_CPU_CORES``
    (``"a,b-c:d-e"``, one colon-separated entry per local rank) names the cores, and setting it
    alone also turns binding on (``BYTEPS_NUMA_ON=0`` still wins).  Without it the cores this
    process may use are split evenly, the root (last) rank taking the remainder.

joint
    A worker machine that also runs its colocated server: the worker role's local ranks plus one
    ``byteps-core server``, all supervised together (each child gets ``DMLC_ROLE`` of its own
    part: ``worker`` or ``server``; the first failure stops the rest; the server leaves when the
    scheduler ends the job).  The name is ps-lite's for a node that is both.  It is the same
    job as the original's way, which still works: two launches on the machine with the same
    environment, ``DMLC_ROLE=server bpslaunch`` and ``DMLC_ROLE=worker bpslaunch CMD``.  Either
    way the server registers the machine's address (``DMLC_NODE_HOST``, else the address of
    ``DMLC_INTERFACE``, else the first non-loopback one), the same as the worker's, which is how
    the scheduler knows the server is colocated; count it in ``DMLC_NUM_SERVER``.  With
    servers on every worker machine and on CPU-only machines too (the mixed placement), the
    bytes are split between the two kinds as the unified architecture says
    (``BYTEPS_ENABLE_MIXED_MODE=0``: equal shares).  A single-worker job starts no server.

server / scheduler
    Runs ``byteps-core server`` / ``byteps-core scheduler`` (found by
    :func:`byteps.launcher.corebin.find_core_binary`) and exits with its code -- but only for a
    distributed job (``DMLC_NUM_WORKER > 1`` or ``BYTEPS_FORCE_DISTRIBUTED=1``); otherwise it
    prints a note and exits 0, as a single-worker job needs no servers.  A command given to
    these roles is ignored (as in the original, so one command line can serve every machine).
    Before the scheduler starts, ``DMLC_PS_ROOT_PORT`` must be free on this host (exit 2 if not).

Slurm
    Run as a Slurm task (``SLURM_PROCID`` set) without ``DMLC_ROLE``, bpslaunch derives every
    variable above from Slurm's environment (:mod:`byteps.launcher.slurm`; the placement rule is
    in docs/launchers.md; the plan: :mod:`byteps.launcher.slurm_start`) and starts this task's
    roles.  ``srun --ntasks-per-node=1 bpslaunch [--servers K] python3 train.py``.

``BYTEPS_JOB_SECRET`` is passed through but never generated: every process of a multi-machine
job must share one, so only whoever starts the whole job can choose it.

Every child runs in its own process group; whatever is left in those groups when bpslaunch
exits is killed (SIGTERM, then SIGKILL).  Exit status: 0 when every child exited 0; the code
of the first child that failed (128+N if killed by signal N); 130/143 when bpslaunch itself got
SIGINT/SIGTERM (forwarded to the children, SIGKILL after a grace period); 2 for a bad
environment or command line; 127 when a child could not be started.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from typing import Mapping, Optional, Sequence

from . import corebin
from .config_error import LaunchConfigError
from .ports import check_root_port, metrics_port
from .supervision import (EXIT_CANNOT_START, Child, Console, LaunchError, Waker, Wording, spawn,
                          stop_all, supervise)

ROLES = ("worker", "server", "scheduler", "joint")
EXIT_USAGE = 2
GRACE_S = 5.0  # between forwarding SIGTERM/SIGINT and SIGKILL
CONSOLE = Console("bpslaunch")  # its notes go to stderr: stdout belongs to the children


def note(message: str) -> None:
    CONSOLE.note(message)


# --------------------------------------------------------------------------------------------
# Environment


def _positive_int(env: Mapping[str, str], name: str) -> int:
    text = env[name].strip()
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise LaunchConfigError(f"The env {name} must be a positive integer, got {env[name]!r}")
    return value


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    """A 0/1 switch; empty or unset means ``default``."""
    text = env.get(name, "").strip().lower()
    if not text:
        return default
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise LaunchConfigError(f"The env {name} must be 0 or 1, got {env[name]!r}")


def is_distributed(env: Mapping[str, str]) -> bool:
    """True when the job uses a scheduler and servers (several workers, or forced)."""
    return _flag(env, "BYTEPS_FORCE_DISTRIBUTED", False) or _positive_int(env, "DMLC_NUM_WORKER") > 1


def check_env(env: Mapping[str, str]) -> str:
    """Validates the launch environment and returns the role.

    Raises:
        LaunchConfigError: ``DMLC_ROLE`` is missing or not a role, or a required variable is
            missing (the message says "The env X is missing") or malformed.
    """
    role = env.get("DMLC_ROLE", "").strip().lower()  # the core accepts any case too
    if not role:
        raise LaunchConfigError(f"The env DMLC_ROLE is missing (expected one of {', '.join(ROLES)})")
    if role not in ROLES:
        raise LaunchConfigError(f"DMLC_ROLE={env['DMLC_ROLE']!r} is not a valid role: expected one of "
                                f"{', '.join(ROLES)}")
    required = ["DMLC_NUM_WORKER"]
    if not env.get("DMLC_NUM_WORKER"):
        raise LaunchConfigError("The env DMLC_NUM_WORKER is missing")
    if role not in ("worker", "joint") or is_distributed(env):
        required += ["DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT"]
        if role in ("worker", "joint"):
            required.append("DMLC_WORKER_ID")
    for name in required:
        if not env.get(name):
            raise LaunchConfigError(f"The env {name} is missing")
    _positive_int(env, "DMLC_NUM_WORKER")
    return role


def local_size_from_env(env: Mapping[str, str]) -> int:
    """Training processes on this machine: one per NVIDIA_VISIBLE_DEVICES entry, else
    BYTEPS_LOCAL_SIZE, else 1.

    Raises:
        LaunchConfigError: a malformed BYTEPS_LOCAL_SIZE, or one that contradicts the number of
            NVIDIA_VISIBLE_DEVICES entries (the message names both).
    """
    devices = [d for d in env.get("NVIDIA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    given = _positive_int(env, "BYTEPS_LOCAL_SIZE") if env.get("BYTEPS_LOCAL_SIZE", "").strip() else None
    if devices:
        if given is not None and given != len(devices):
            raise LaunchConfigError(
                f"BYTEPS_LOCAL_SIZE={given} contradicts NVIDIA_VISIBLE_DEVICES={env['NVIDIA_VISIBLE_DEVICES']!r} "
                f"({len(devices)} device(s)): bpslaunch starts one process per visible device; unset "
                "BYTEPS_LOCAL_SIZE or make them agree")
        return len(devices)
    return 1 if given is None else given


# --------------------------------------------------------------------------------------------
# CPU binding


def parse_core_list(text: str) -> list[int]:
    """``"0,2-4"`` -> ``[0, 2, 3, 4]`` (sorted, without duplicates).

    Raises:
        LaunchConfigError: an empty item, a non-number, a negative id or a reversed range.
    """
    cores: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        low, dash, high = item.partition("-")
        try:
            first = int(low)
            last = int(high) if dash else first
        except ValueError:
            raise LaunchConfigError(f"bad CPU core item {item!r} in {text!r}: expected N or N-M "
                                    f"with non-negative integers") from None
        if first < 0 or last < first:
            raise LaunchConfigError(f"bad CPU core range {item!r} in {text!r}: expected N-M with "
                                    f"0 <= N <= M")
        cores.update(range(first, last + 1))
    return sorted(cores)


def parse_visible_cores(spec: str, local_size: int) -> list[list[int]]:
    """Parses ``BYTEPS_VISIBLE_CPU_CORES`` (``"a,b-c:d-e"``): one core list per local rank.

    Raises:
        LaunchConfigError: a malformed list, or not exactly ``local_size`` colon-separated lists.
    """
    parts = spec.split(":")
    if len(parts) != local_size:
        raise LaunchConfigError(
            f"BYTEPS_VISIBLE_CPU_CORES={spec!r} has {len(parts)} core list(s) but there are "
            f"{local_size} local rank(s); give one list per rank, separated by ':'")
    try:
        return [parse_core_list(part) for part in parts]
    except LaunchConfigError as err:
        raise LaunchConfigError(f"BYTEPS_VISIBLE_CPU_CORES: {err}") from None


def format_cores(cores: Sequence[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2,5"`` (the form taskset -c accepts)."""
    runs: list[str] = []
    ordered = sorted(set(cores))
    start = 0
    for i in range(1, len(ordered) + 1):
        if i == len(ordered) or ordered[i] != ordered[i - 1] + 1:
            first, last = ordered[start], ordered[i - 1]
            runs.append(str(first) if first == last else f"{first}-{last}")
            start = i
    return ",".join(runs)


def split_cores(cores: Sequence[int], local_size: int) -> list[list[int]]:
    """Splits ``cores`` evenly among ``local_size`` ranks; the root (last rank) also takes the
    remainder.  Raises LaunchConfigError when there are fewer cores than ranks."""
    ordered = sorted(cores)
    quota = len(ordered) // local_size
    if quota == 0:
        raise LaunchConfigError(f"cannot bind {local_size} local ranks to {len(ordered)} CPU core(s)")
    shares = [ordered[i * quota:(i + 1) * quota] for i in range(local_size - 1)]
    return shares + [ordered[(local_size - 1) * quota:]]


def core_bindings(env: Mapping[str, str], local_size: int) -> Optional[list[str]]:
    """The ``taskset -c`` core list of each local rank, or None when binding is off.

    Raises:
        LaunchConfigError: a malformed or unusable BYTEPS_VISIBLE_CPU_CORES, or automatic
            binding with fewer usable cores than local ranks.
    """
    spec = env.get("BYTEPS_VISIBLE_CPU_CORES", "").strip()
    if not _flag(env, "BYTEPS_NUMA_ON", default=bool(spec)):
        return None
    allowed = os.sched_getaffinity(0)
    if spec:
        per_rank = parse_visible_cores(spec, local_size)
        for rank, cores in enumerate(per_rank):
            unusable = sorted(set(cores) - allowed)
            if unusable:
                raise LaunchConfigError(
                    f"BYTEPS_VISIBLE_CPU_CORES: local rank {rank} asks for core(s) "
                    f"{format_cores(unusable)}, which this process may not use (allowed: "
                    f"{format_cores(sorted(allowed))})")
    else:
        try:
            per_rank = split_cores(sorted(allowed), local_size)
        except LaunchConfigError as err:
            raise LaunchConfigError(f"BYTEPS_NUMA_ON=1: {err}; set BYTEPS_NUMA_ON=0 or give "
                                    f"BYTEPS_VISIBLE_CPU_CORES") from None
    return [format_cores(cores) for cores in per_rank]


# --------------------------------------------------------------------------------------------
# Processes


def command_argv(command: Sequence[str]) -> list[str]:
    """The argv to execute: a single argument is a shell command line, several are run as is."""
    if len(command) == 1:
        return ["/bin/sh", "-c", command[0]]
    return list(command)


def bound_argv(argv: list[str], cores: Optional[str]) -> list[str]:
    """``argv`` prefixed with ``taskset -c CORES`` when ``cores`` is given."""
    if cores is None:
        return argv
    taskset = shutil.which("taskset")
    if taskset is None:
        raise LaunchError("CPU binding needs taskset (util-linux), which is not on PATH; "
                          "set BYTEPS_NUMA_ON=0")
    return [taskset, "-c", cores, *argv]


def run_children(plan: list[tuple[str, list[str], dict[str, str]]]) -> int:
    """Starts every (label, argv, env) of ``plan``, supervises them and cleans up: the first
    failure stops the others, a SIGINT/SIGTERM to us is forwarded to them."""
    children: list[Child] = []
    wording = Wording(stopping="stopping", failure="stopping the others" if len(plan) > 1 else None)
    with Waker() as waker:
        code = EXIT_CANNOT_START
        try:
            for label, argv, env in plan:
                role = "worker" if label.startswith("local_rank") else label
                children.append(spawn(label, role, argv, env))
            code = supervise(children, waker, CONSOLE, wording=wording)
        except LaunchError as err:
            note(f"error: {err}")
        finally:
            signum = waker.stop.signum if waker.stop.signum is not None else signal.SIGTERM
            stop_all(children, signum, GRACE_S, waker, CONSOLE)
        return code


# --------------------------------------------------------------------------------------------
# Roles


def worker_plan(command: Sequence[str], env: dict[str, str]) -> list[tuple[str, list[str], dict[str, str]]]:
    """One (label, argv, env) per local rank."""
    if not command:
        raise LaunchConfigError("missing the command to run (bpslaunch COMMAND [ARGS...])")
    local_size = local_size_from_env(env)
    bindings = core_bindings(env, local_size)
    base = command_argv(command)
    plan = []
    for rank in range(local_size):
        cores = bindings[rank] if bindings else None
        if cores is not None:
            note(f"local rank {rank} bound to CPU cores {cores}")
        rank_env = {**env, "BYTEPS_LOCAL_RANK": str(rank), "BYTEPS_LOCAL_SIZE": str(local_size),
                    **metrics_port(env, rank)}  # a metrics port per local rank: P + rank
        plan.append((f"local_rank:{rank}", bound_argv(base, cores), rank_env))
    return plan


def service_plan(role: str, env: dict[str, str]) -> list[tuple[str, list[str], dict[str, str]]]:
    """The core's ``server``/``scheduler`` process, or nothing for a single-worker job."""
    if not is_distributed(env):
        note(f"DMLC_NUM_WORKER=1 and BYTEPS_FORCE_DISTRIBUTED is not 1: a single-worker job "
             f"needs no {role}; exiting")
        return []
    try:
        core = corebin.find_core_binary()
    except FileNotFoundError as err:
        raise LaunchError(str(err)) from err
    if role == "scheduler":
        check_root_port(env)  # before anything starts
    return [(role, [core, role], env)]


def joint_plan(command: Sequence[str], env: dict[str, str]) -> list[tuple[str, list[str], dict[str, str]]]:
    """The colocated server (for a distributed job), then the worker's local ranks."""
    workers = worker_plan(command, {**env, "DMLC_ROLE": "worker"})
    if not is_distributed(env):
        note("DMLC_NUM_WORKER=1 and BYTEPS_FORCE_DISTRIBUTED is not 1: a single-worker job "
             "needs no server; starting the worker only")
        return workers
    server_env = {**env, "DMLC_ROLE": "server", **metrics_port(env, local_size_from_env(env))}  # after the ranks'
    return service_plan("server", server_env) + workers


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``bpslaunch`` console script; returns the exit code."""
    command = list(sys.argv[1:] if argv is None else argv)
    if command in (["-h"], ["--help"]):
        print(__doc__)
        return 0
    if command[:1] == ["--"]:
        command = command[1:]
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    try:
        from . import slurm, slurm_start  # they import this module
        if slurm.in_allocation(env):
            plan = slurm_start.plan(command, env)
        else:
            slurm_start.refuse_options_outside(command)
            plan = role_plan(command, env)
    except LaunchConfigError as err:
        note(f"error: {err}")
        return EXIT_USAGE
    except LaunchError as err:
        note(f"error: {err}")
        return EXIT_CANNOT_START
    if not plan:
        return 0
    return run_children(plan)


def role_plan(command: Sequence[str], env: dict[str, str]) -> list[tuple[str, list[str], dict[str, str]]]:
    """The plan of the role DMLC_ROLE names."""
    role = check_env(env)
    note(f"BytePS launching {role}")
    if role == "joint":
        return joint_plan(command, env)
    return worker_plan(command, env) if role == "worker" else service_plan(role, env)


if __name__ == "__main__":
    sys.exit(main())
