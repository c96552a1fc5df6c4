"""Roles of a BytePS job from a Slurm allocation's environment.

``bpslaunch`` run as a Slurm task (``SLURM_PROCID`` set, ``DMLC_ROLE`` unset) calls
:func:`derive` -- a pure function from the environment to the BytePS variables -- and then
starts what bpslaunch starts for the derived roles.  The placement rule is documented in
docs/launchers.md ("Slurm"):

* nodes: ``SLURM_STEP_NODELIST``, else ``SLURM_JOB_NODELIST`` (expanded by ``scontrol show
  hostnames`` where it works, else by :func:`expand_hostlist`); in a heterogeneous job
  (``SLURM_HET_SIZE`` = 2) group 0 (``SLURM_JOB_NODELIST_HET_GROUP_0``) holds the workers and
  group 1 the CPU nodes: the first ``BYTEPS_SLURM_SERVERS`` of them run servers, or without it
  as many as ``byteps plan`` advises (:func:`byteps.sim.advice.server_plan`), with a server on
  every worker node too when it advises the mixed placement;
* otherwise ``BYTEPS_SLURM_SERVERS`` = K with ``BYTEPS_SLURM_MODE``: ``colocated`` (the default
  without K: a server on every worker node) or ``separate`` (the default with K: the last K
  nodes are servers); a job of one node in separate mode: its tasks stand for the nodes, task i
  (``SLURM_LOCALID``) for node i, so the last K tasks are servers and the others one worker each;
* the scheduler runs on the first node, worker ids follow node order;
* port: ``DMLC_PS_ROOT_PORT`` if given, else 9000 + ``SLURM_JOB_ID`` % 1000;
* ``BYTEPS_JOB_SECRET`` is required when the job spans several nodes; never generated;
* the node's services (scheduler, server) run in its first task (``SLURM_LOCALID`` 0).  One
  task on a worker node starts the local ranks itself (``BYTEPS_LOCAL_SIZE`` = GPUs of the step
  / ``BYTEPS_SLURM_GPUS_PER_WORKER``, else 1); several tasks on a worker node are one local rank
  each (``BYTEPS_LOCAL_RANK`` = ``SLURM_LOCALID``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional

from .config_error import LaunchConfigError
# Slurm's list syntaxes (re-exported: bpslaunch and the tests use them through this module).
from .slurm_lists import (SCONTROL_TIMEOUT_S, _int, expand_hostlist, expand_tasks_per_node,  # noqa: F401
                          hostnames, scontrol_hostnames, step_gpus)

DEFAULT_PORT_BASE = 9000
MODES = ("colocated", "separate")


# --------------------------------------------------------------------------------------------
# Placement


@dataclass
class SlurmPlacement:
    """What one Slurm task runs: ``roles`` among scheduler/server/worker (empty: nothing) and
    the BytePS variables; ``one_rank``: the task is a single local rank (several tasks on a
    worker node), not the starter of every local rank."""

    roles: list[str]
    env: dict[str, str] = field(default_factory=dict)
    one_rank: bool = False
    node: str = ""
    advice: str = ""  # why this many servers, when byteps plan's advice chose them


def in_allocation(env: Mapping[str, str]) -> bool:
    """bpslaunch derives the roles from Slurm: a Slurm task with no DMLC_ROLE."""
    return bool(env.get("SLURM_PROCID", "").strip()) and not env.get("DMLC_ROLE", "").strip()


def _nodes(env: Mapping[str, str], expand: Callable[[str, str], list[str]]) -> tuple[list[str], Optional[int]]:
    """All nodes in order and, for a heterogeneous job, how many of them are workers (group 0)."""
    het = env.get("SLURM_HET_SIZE", "").strip()
    if het:
        size = _int(env, "SLURM_HET_SIZE", 1)
        if size != 2:
            raise LaunchConfigError(f"SLURM_HET_SIZE={size}: bpslaunch places a heterogeneous job of "
                                    f"two groups (0: workers, 1: servers), not {size}")
        groups = []
        for g in range(2):
            name = f"SLURM_JOB_NODELIST_HET_GROUP_{g}"
            if not env.get(name, "").strip():
                raise LaunchConfigError(f"The env {name} is missing (heterogeneous job, SLURM_HET_SIZE=2)")
            groups.append(expand(env[name], name))
        return groups[0] + groups[1], len(groups[0])
    for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"):
        if env.get(name, "").strip():
            return expand(env[name], name), None
    raise LaunchConfigError("The env SLURM_JOB_NODELIST is missing (bpslaunch under Slurm, SLURM_PROCID set)")


def _het_tasks_per_node(env: Mapping[str, str], n_nodes: int) -> list[int]:
    """A heterogeneous job's tasks per node: its groups' SLURM_TASKS_PER_NODE_HET_GROUP_<i>
    (the plain variables describe one component), else one task per node."""
    names = [f"SLURM_TASKS_PER_NODE_HET_GROUP_{g}" for g in range(2)]
    if not all(env.get(name, "").strip() for name in names):
        return [1] * n_nodes
    counts = [c for name in names for c in expand_tasks_per_node(env[name], name)]
    if len(counts) != n_nodes:
        raise LaunchConfigError(f"{names[0]} and {names[1]} give {len(counts)} node(s) but the "
                                f"allocation has {n_nodes}")
    return counts


def _tasks_per_node(env: Mapping[str, str], n_nodes: int) -> list[int]:
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        if env.get(name, "").strip():
            counts = expand_tasks_per_node(env[name], name)
            if len(counts) != n_nodes:
                raise LaunchConfigError(f"{name}={env[name]!r} gives {len(counts)} node(s) but the "
                                        f"allocation has {n_nodes}")
            return counts
    if env.get("SLURM_NTASKS_PER_NODE", "").strip():
        return [_int(env, "SLURM_NTASKS_PER_NODE", 1)] * n_nodes
    if env.get("SLURM_NTASKS", "").strip():
        ntasks = _int(env, "SLURM_NTASKS", 1)
        if ntasks % n_nodes == 0:
            return [ntasks // n_nodes] * n_nodes
        raise LaunchConfigError(f"SLURM_NTASKS={ntasks} over {n_nodes} node(s) and no SLURM_TASKS_PER_NODE: "
                                "cannot tell how many tasks each node runs")
    return [1] * n_nodes


def _my_node(env: Mapping[str, str], nodes: list[str]) -> int:
    name = env.get("SLURMD_NODENAME", "").strip()
    if name and name in nodes:
        return nodes.index(name)
    node_id = _int(env, "SLURM_NODEID", 0) if env.get("SLURM_NODEID", "").strip() else None
    if node_id is None:
        raise LaunchConfigError("The env SLURM_NODEID is missing (and SLURMD_NODENAME names no node of "
                                "the allocation): cannot tell which node this task is on")
    if node_id >= len(nodes):
        raise LaunchConfigError(f"SLURM_NODEID={node_id} but the allocation has {len(nodes)} node(s)")
    return node_id


def _mode(env: Mapping[str, str]) -> tuple[str, Optional[int]]:
    """(BYTEPS_SLURM_MODE, its default applied; BYTEPS_SLURM_SERVERS or None)."""
    mode = env.get("BYTEPS_SLURM_MODE", "").strip().lower()
    if mode and mode not in MODES:
        raise LaunchConfigError(f"BYTEPS_SLURM_MODE={env['BYTEPS_SLURM_MODE']!r}: expected one of {', '.join(MODES)}")
    servers = _int(env, "BYTEPS_SLURM_SERVERS", 0) if env.get("BYTEPS_SLURM_SERVERS", "").strip() else None
    return mode or ("colocated" if servers is None else "separate"), servers


def _server_nodes(env: Mapping[str, str], n_nodes: int, het_workers: Optional[int]) -> tuple[int, bool, int, str]:
    """(number of worker nodes, colocated: a server on every worker node, CPU server nodes (those
    right after the worker nodes), the placement advice's reason or "")."""
    if het_workers is not None:
        return _het_servers(env, het_workers, n_nodes - het_workers)
    mode, servers = _mode(env)
    if mode == "colocated":
        if servers is not None and servers != n_nodes:
            raise LaunchConfigError(f"BYTEPS_SLURM_SERVERS={servers} with BYTEPS_SLURM_MODE=colocated: "
                                    f"colocated means one server per node, {n_nodes} here")
        return n_nodes, True, 0, ""
    if servers is None or servers < 1:
        raise LaunchConfigError("BYTEPS_SLURM_MODE=separate needs BYTEPS_SLURM_SERVERS (or --servers) >= 1")
    if servers >= n_nodes:
        raise LaunchConfigError(f"too few Slurm nodes for the roles asked: {servers} server node(s) "
                                f"(BYTEPS_SLURM_SERVERS) leave no worker node among the allocation's "
                                f"{n_nodes}; ask for more nodes or fewer servers")
    return n_nodes - servers, False, servers, ""


def _het_servers(env: Mapping[str, str], n_workers: int, cpu_nodes: int) -> tuple[int, bool, int, str]:
    """A heterogeneous job's servers: the first K CPU nodes with BYTEPS_SLURM_SERVERS=K, else what
    ``byteps plan`` advises for these node counts (byteps.sim.advice: how many of the CPU nodes, and
    whether the worker nodes run servers too; the NIC rates taken as equal)."""
    if cpu_nodes < 1:
        raise LaunchConfigError("heterogeneous job: group 1 (the server nodes) has no node")
    _, servers = _mode(env)
    if servers is not None:
        if not 1 <= servers <= cpu_nodes:
            raise LaunchConfigError(f"BYTEPS_SLURM_SERVERS={servers} but the heterogeneous job's group 1 has "
                                    f"{cpu_nodes} CPU node(s): give 1 to {cpu_nodes}")
        return n_workers, False, servers, ""
    from ..sim.advice import server_plan  # noqa: PLC0415 - only heterogeneous jobs without a count need it

    advice = server_plan(n_workers=n_workers, cpu_hosts=cpu_nodes)
    return n_workers, advice.colocate, advice.cpu_servers, advice.reason


def _tasks_as_nodes(env: Mapping[str, str], node: str, node_tasks: int, local_id: int) -> tuple[list[str], int]:
    """One node in separate mode: its tasks stand for the nodes of the rule, task i (SLURM_LOCALID)
    for node i.  Returns (one entry per task, this task's index)."""
    servers = _mode(env)[1] or 0
    if servers >= 1 and node_tasks <= servers:
        raise LaunchConfigError(f"too few Slurm tasks for the roles asked: {servers} server(s) "
                                f"(BYTEPS_SLURM_SERVERS) leave no worker among the {node_tasks} task(s) of "
                                f"the job's one node {node}; run at least {servers + 1} tasks (srun -n) or "
                                f"fewer servers")
    if local_id >= node_tasks:
        raise LaunchConfigError(f"SLURM_LOCALID={local_id} but node {node} runs {node_tasks} task(s)")
    return [node] * node_tasks, local_id


def derive(env: Mapping[str, str],
           expand: Callable[[str, str], list[str]] = expand_hostlist) -> SlurmPlacement:
    """The roles and BytePS variables of this Slurm task (pure: ``expand`` expands nodelists).

    Raises:
        LaunchConfigError: a malformed nodelist or task count, too few tasks or nodes for the
            roles asked, a missing BYTEPS_JOB_SECRET on a multi-node job, or more GPUs per worker
            than the step has.
    """
    nodes, het_workers = _nodes(env, expand)
    if len(set(nodes)) != len(nodes):
        dup = sorted({n for n in nodes if nodes.count(n) > 1})
        raise LaunchConfigError(f"the Slurm nodelist names node(s) {', '.join(dup)} twice")
    tasks = _tasks_per_node(env, len(nodes)) if het_workers is None else _het_tasks_per_node(env, len(nodes))
    if het_workers is None and env.get("SLURM_NTASKS", "").strip() and _int(env, "SLURM_NTASKS", 1) < len(nodes):
        raise LaunchConfigError(f"too few Slurm tasks for the roles asked: SLURM_NTASKS={env['SLURM_NTASKS']} "
                                f"but every one of the {len(nodes)} node(s) needs a task (srun --ntasks-per-node=1)")
    idle = [nodes[i] for i, t in enumerate(tasks) if t < 1]
    if idle:
        raise LaunchConfigError(f"too few Slurm tasks for the roles asked: node(s) {', '.join(idle)} run no task")
    me = _my_node(env, nodes)
    local_id = _int(env, "SLURM_LOCALID", 0) if env.get("SLURM_LOCALID", "").strip() else 0
    units = nodes  # what the rule places roles on: the nodes, or the tasks of a one-node job
    if het_workers is None and len(nodes) == 1 and _mode(env)[0] == "separate":
        units, me = _tasks_as_nodes(env, nodes[0], tasks[0], local_id)
        tasks, local_id = [1] * len(units), 0
    n_workers, colocated, cpu_servers, advice = _server_nodes(env, len(units), het_workers)
    n_servers = cpu_servers + (n_workers if colocated else 0)
    if len(nodes) > 1 and not env.get("BYTEPS_JOB_SECRET", "").strip():
        raise LaunchConfigError(f"BYTEPS_JOB_SECRET is not set but the Slurm job spans {len(nodes)} nodes: "
                                "give every task the same secret (e.g. export BYTEPS_JOB_SECRET=$(openssl "
                                "rand -hex 16) in the sbatch script before srun)")
    is_worker = me < n_workers
    roles: list[str] = []
    if local_id == 0:
        if me == 0:
            roles.append("scheduler")
        if (is_worker and colocated) or n_workers <= me < n_workers + cpu_servers:
            roles.append("server")
    if env.get("DMLC_PS_ROOT_PORT", "").strip():
        port = _int(env, "DMLC_PS_ROOT_PORT", 1)
    else:
        if not env.get("SLURM_JOB_ID", "").strip():
            raise LaunchConfigError("The env SLURM_JOB_ID is missing: bpslaunch derives the scheduler's "
                                    "port from it (or give DMLC_PS_ROOT_PORT)")
        port = DEFAULT_PORT_BASE + _int(env, "SLURM_JOB_ID", 0) % 1000
    out = {"DMLC_NUM_WORKER": str(n_workers), "DMLC_NUM_SERVER": str(n_servers),
           "DMLC_PS_ROOT_URI": nodes[0], "DMLC_PS_ROOT_PORT": str(port)}
    one_rank = False
    if is_worker:
        roles.append("worker")
        out["DMLC_WORKER_ID"] = str(me)
        local = _local_ranks(env, tasks[me], local_id)
        out.update(local)
        one_rank = tasks[me] > 1
    return SlurmPlacement(roles=roles, env=out, one_rank=one_rank, node=units[me], advice=advice)


def _local_ranks(env: Mapping[str, str], node_tasks: int, local_id: int) -> dict[str, str]:
    """BYTEPS_LOCAL_RANK/SIZE of a worker task; checks BYTEPS_SLURM_GPUS_PER_WORKER."""
    gpus = step_gpus(env)
    per = env.get("BYTEPS_SLURM_GPUS_PER_WORKER", "").strip()
    per_worker = _int(env, "BYTEPS_SLURM_GPUS_PER_WORKER", 1) if per else None
    if per_worker is not None and per_worker > len(gpus or []):
        raise LaunchConfigError(f"BYTEPS_SLURM_GPUS_PER_WORKER={per_worker} but the Slurm step has "
                                f"{len(gpus or [])} GPU(s) on this node ({_gpu_source(env)})")
    if node_tasks > 1:
        return {"BYTEPS_LOCAL_RANK": str(local_id), "BYTEPS_LOCAL_SIZE": str(node_tasks)}
    if env.get("BYTEPS_LOCAL_SIZE", "").strip():
        return {"BYTEPS_LOCAL_SIZE": env["BYTEPS_LOCAL_SIZE"].strip()}
    if gpus and per_worker:
        return {"BYTEPS_LOCAL_SIZE": str(len(gpus) // per_worker)}
    return {"BYTEPS_LOCAL_SIZE": "1"}


def _gpu_source(env: Mapping[str, str]) -> str:
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        if name in env:
            return f"{name}={env[name]!r}"
    return "no SLURM_STEP_GPUS, SLURM_JOB_GPUS or CUDA_VISIBLE_DEVICES"


def describe(placement: SlurmPlacement) -> str:
    """One line for bpslaunch's log."""
    keys = ("DMLC_WORKER_ID", "DMLC_NUM_WORKER", "DMLC_NUM_SERVER", "DMLC_PS_ROOT_URI",
            "DMLC_PS_ROOT_PORT", "BYTEPS_LOCAL_RANK", "BYTEPS_LOCAL_SIZE")
    values = " ".join(f"{k}={placement.env[k]}" for k in keys if k in placement.env)
    line = f"Slurm node {placement.node}: roles {'+'.join(placement.roles) or 'none'}; {values}"
    return line + (f"; servers by byteps plan: {placement.advice}" if placement.advice else "")
