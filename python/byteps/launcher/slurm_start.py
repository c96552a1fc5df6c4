"""What ``bpslaunch`` starts in a Slurm task: its ``--servers``/``--mode`` options and the plan
of the roles :func:`byteps.launcher.slurm.derive` gives this task (docs/launchers.md, "Slurm").

Split from bpslaunch.py, which calls :func:`plan` when ``SLURM_PROCID`` is set and
``DMLC_ROLE`` is not; the plan is built with bpslaunch's own role plans, so a Slurm task starts
exactly what ``bpslaunch`` with the derived ``DMLC_*`` variables would.
"""

from __future__ import annotations

from typing import Sequence

from . import bpslaunch, slurm
from .config_error import LaunchConfigError
from .ports import metrics_port

Plan = list[tuple[str, list[str], dict[str, str]]]
OPTIONS = ("--servers", "--mode")


def apply_servers_option(command: Sequence[str], env: dict[str, str]) -> list[str]:
    """Takes bpslaunch's ``--servers K`` / ``--mode M`` options off the command into env."""
    rest = list(command)
    while rest[:1] and rest[0] in OPTIONS:
        if len(rest) < 2:
            raise LaunchConfigError(f"{rest[0]} needs a value (bpslaunch --servers K --mode separate CMD)")
        key = "BYTEPS_SLURM_SERVERS" if rest[0] == "--servers" else "BYTEPS_SLURM_MODE"
        env[key] = rest[1]
        rest = rest[2:]
    return rest[1:] if rest[:1] == ["--"] else rest


def refuse_options_outside(command: Sequence[str]) -> None:
    """``--servers``/``--mode`` outside a Slurm allocation: a named error."""
    if command[:1] and command[0] in OPTIONS:
        raise LaunchConfigError(f"{command[0]} applies inside a Slurm allocation only (SLURM_PROCID set "
                                "and DMLC_ROLE unset); elsewhere give DMLC_NUM_SERVER and each "
                                "machine's DMLC_ROLE")


def plan(command: Sequence[str], env: dict[str, str]) -> Plan:
    """Inside a Slurm allocation (SLURM_PROCID set, DMLC_ROLE unset): the roles this task runs,
    derived by :func:`byteps.launcher.slurm.derive`; fills ``env`` with the derived variables."""
    command = apply_servers_option(command, env)
    placement = slurm.derive(env, slurm.hostnames)
    env.update(placement.env)
    for name in [k for k in env if k.startswith("BYTEPS_SLURM_")]:
        del env[name]  # bpslaunch's own: the core refuses settings it does not know
    bpslaunch.note(slurm.describe(placement))
    out: Plan = []
    size_text = env.get("BYTEPS_LOCAL_SIZE", "").strip()  # checked by worker_plan; here metrics ports only
    local_size = int(size_text) if size_text.isdigit() else 1
    for offset, role in enumerate(r for r in placement.roles if r != "worker"):
        out += bpslaunch.service_plan(role, {**env, "DMLC_ROLE": role, **metrics_port(env, local_size + offset)})
    if "worker" in placement.roles:
        worker_env = {**env, "DMLC_ROLE": "worker"}
        if placement.one_rank:  # one Slurm task per local rank: run the command once
            if not command:
                raise LaunchConfigError("missing the command to run (bpslaunch COMMAND [ARGS...])")
            rank = int(worker_env["BYTEPS_LOCAL_RANK"])
            out.append((f"local_rank:{rank}", bpslaunch.command_argv(command),
                        {**worker_env, **metrics_port(env, rank)}))
        else:
            out += bpslaunch.worker_plan(command, worker_env)
    if not out:
        bpslaunch.note(f"Slurm node {placement.node}: nothing for this task to run (its node's roles run in "
                       "the node's first task); exiting")
    return out
