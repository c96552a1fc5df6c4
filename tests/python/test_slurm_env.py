"""bpslaunch inside a Slurm allocation: the hostlist parser, the tasks-per-node form, the
derivation env -> roles + BytePS variables (many allocations), its named errors, and one real
2-worker + 2-server job of four bpslaunch processes with fake SLURM_* environments on loopback
addresses 127.0.0.1-4 (checked against the same job under bpsrun).
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CORE_BINARY, PYTHON, REPO, free_port, missing_core, run_bpsrun, kill_left
from test_bpslaunch import FAKE_CORE, LAUNCH, launch_env

from byteps.launcher import slurm
from byteps.launcher.bpslaunch import LaunchConfigError

# --------------------------------------------------------------------------------------------
# Hostlists (cases written from Slurm's documented hostlist grammar: prefix[ranges]suffix,
# ranges "a-b" or single numbers separated by commas, zero padding kept, several bracket groups).


@pytest.mark.parametrize("text, hosts", [
    ("tux0", ["tux0"]),
    ("tux[0-3]", ["tux0", "tux1", "tux2", "tux3"]),
    ("lx[00-02]", ["lx00", "lx01", "lx02"]),
    ("lx[08-11]", ["lx08", "lx09", "lx10", "lx11"]),
    ("node[01-03,07],gpu-a[1-2]-x,login", ["node01", "node02", "node03", "node07", "gpu-a1-x",
                                            "gpu-a2-x", "login"]),
    ("rack[0-1]_blade[0-2]", ["rack0_blade0", "rack0_blade1", "rack0_blade2",
                              "rack1_blade0", "rack1_blade1", "rack1_blade2"]),
    ("linux[1,3,5]", ["linux1", "linux3", "linux5"]),
    ("a,b,c", ["a", "b", "c"]),
    ("n[9-10]", ["n9", "n10"]),
    ("n[001-003]", ["n001", "n002", "n003"]),
    ("127.0.0.[1-3]", ["127.0.0.1", "127.0.0.2", "127.0.0.3"]),
    (" node[1-2] ", ["node1", "node2"]),
])
def test_expand_hostlist(text: str, hosts: list[str]) -> None:
    assert slurm.expand_hostlist(text) == hosts


@pytest.mark.parametrize("text, why", [
    ("node[1-3", "unclosed"), ("node1-3]", "without"), ("node[[1]]", "nested"),
    ("node[3-1]", "reversed"), ("node[a-b]", "bad range"), ("node[1-]", "bad range"),
    ("node[]", "empty"), ("a,,b", "empty host"), ("", "empty"), ("node[1,]", "bad range"),
])
def test_malformed_hostlist_names_the_variable_and_the_text(text: str, why: str) -> None:
    with pytest.raises(LaunchConfigError, match=f"malformed Slurm hostlist in SLURM_STEP_NODELIST: "
                                                f".*{why}") as err:
        slurm.expand_hostlist(text, "SLURM_STEP_NODELIST")
    assert repr(text.strip()) in str(err.value)


def test_hostnames_uses_scontrol_when_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "scontrol"
    fake.write_text("#!/bin/sh\n[ \"$1 $2\" = 'show hostnames' ] || exit 3\necho from-scontrol-1\n"
                    "echo from-scontrol-2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    assert slurm.hostnames("x[1-2]", "SLURM_JOB_NODELIST") == ["from-scontrol-1", "from-scontrol-2"]
    fake.write_text("#!/bin/sh\necho 'bad hostlist' >&2\nexit 1\n")
    with pytest.raises(LaunchConfigError, match="malformed Slurm hostlist in SLURM_JOB_NODELIST: 'x\\[' "
                                                "\\(scontrol: bad hostlist\\)"):
        slurm.hostnames("x[", "SLURM_JOB_NODELIST")
    # scontrol failing (e.g. no Slurm configuration on this host) on a well-formed list: our parser
    assert slurm.hostnames("x[1-2]", "SLURM_JOB_NODELIST") == ["x1", "x2"]


@pytest.mark.parametrize("text, counts", [
    ("1", [1]), ("2(x3)", [2, 2, 2]), ("2(x3),1", [2, 2, 2, 1]), ("4,1(x2),3", [4, 1, 1, 3]),
])
def test_tasks_per_node(text: str, counts: list[int]) -> None:
    assert slurm.expand_tasks_per_node(text) == counts


@pytest.mark.parametrize("text", ["", "2(3)", "x", "2(x0)", "2(x3),", "-1"])
def test_malformed_tasks_per_node(text: str) -> None:
    with pytest.raises(LaunchConfigError, match="malformed SLURM_TASKS_PER_NODE"):
        slurm.expand_tasks_per_node(text)


# --------------------------------------------------------------------------------------------
# The derivation


def alloc(nodes: str, node_id: int, **extra: str) -> dict[str, str]:
    n = len(slurm.expand_hostlist(nodes))
    return {"SLURM_PROCID": str(node_id), "SLURM_JOB_NODELIST": nodes, "SLURM_NODEID": str(node_id),
            "SLURM_LOCALID": "0", "SLURM_NTASKS": str(n), "SLURM_TASKS_PER_NODE": f"1(x{n})",
            "SLURM_JOB_ID": "4242", "BYTEPS_JOB_SECRET": "s3cret", **extra}


def test_in_allocation() -> None:
    assert slurm.in_allocation({"SLURM_PROCID": "0"})
    assert not slurm.in_allocation({"SLURM_PROCID": "0", "DMLC_ROLE": "worker"})
    assert not slurm.in_allocation({})


@pytest.mark.parametrize("node, roles, worker_id", [
    (0, ["scheduler", "server", "worker"], "0"), (1, ["server", "worker"], "1"), (2, ["server", "worker"], "2")])
def test_colocated_by_default(node: int, roles: list[str], worker_id: str) -> None:
    p = slurm.derive(alloc("gpu[01-03]", node))
    assert p.roles == roles and not p.one_rank and p.node == f"gpu0{node + 1}"
    assert p.env == {"DMLC_NUM_WORKER": "3", "DMLC_NUM_SERVER": "3", "DMLC_PS_ROOT_URI": "gpu01",
                     "DMLC_PS_ROOT_PORT": "9242", "DMLC_WORKER_ID": worker_id, "BYTEPS_LOCAL_SIZE": "1"}


@pytest.mark.parametrize("node, roles", [(0, ["scheduler", "worker"]), (1, ["worker"]), (2, ["server"]),
                                         (3, ["server"])])
def test_separate_servers_are_the_last_nodes(node: int, roles: list[str]) -> None:
    p = slurm.derive(alloc("n[1-4]", node, BYTEPS_SLURM_SERVERS="2"))
    assert p.roles == roles
    assert (p.env["DMLC_NUM_WORKER"], p.env["DMLC_NUM_SERVER"]) == ("2", "2")
    assert p.env.get("DMLC_WORKER_ID") == (str(node) if node < 2 else None)
    assert ("BYTEPS_LOCAL_SIZE" in p.env) == (node < 2)


def test_colocated_mode_with_a_matching_server_count() -> None:
    p = slurm.derive(alloc("n[1-2]", 1, BYTEPS_SLURM_SERVERS="2", BYTEPS_SLURM_MODE="colocated"))
    assert p.roles == ["server", "worker"]
    with pytest.raises(LaunchConfigError, match="BYTEPS_SLURM_SERVERS=1 with BYTEPS_SLURM_MODE=colocated"):
        slurm.derive(alloc("n[1-2]", 1, BYTEPS_SLURM_SERVERS="1", BYTEPS_SLURM_MODE="colocated"))
    with pytest.raises(LaunchConfigError, match="BYTEPS_SLURM_MODE='mixed': expected one of"):
        slurm.derive(alloc("n[1-2]", 1, BYTEPS_SLURM_MODE="mixed"))
    with pytest.raises(LaunchConfigError, match="separate needs BYTEPS_SLURM_SERVERS"):
        slurm.derive(alloc("n[1-2]", 1, BYTEPS_SLURM_MODE="separate"))


def het(node_id: int, **extra: str) -> dict[str, str]:
    env = alloc("g[1-2],c[1-3]", node_id, **{"SLURM_HET_SIZE": "2", "SLURM_JOB_NODELIST_HET_GROUP_0": "g[1-2]",
                                             "SLURM_JOB_NODELIST_HET_GROUP_1": "c[1-3]", **extra})
    del env["SLURM_JOB_NODELIST"]
    return env


def test_heterogeneous_group_1_holds_the_servers() -> None:
    placements = [slurm.derive(het(i, BYTEPS_SLURM_SERVERS="3")) for i in range(5)]
    assert [p.roles for p in placements] == [["scheduler", "worker"], ["worker"], ["server"], ["server"],
                                             ["server"]]
    assert {(p.env["DMLC_NUM_WORKER"], p.env["DMLC_NUM_SERVER"], p.env["DMLC_PS_ROOT_URI"])
            for p in placements} == {("2", "3", "g1")}
    # SLURMD_NODENAME wins over SLURM_NODEID (which a het step may number per group)
    assert slurm.derive(het(0, SLURMD_NODENAME="c2", BYTEPS_SLURM_SERVERS="3")).roles == ["server"]
    # the plain task variables describe one component: not read in a heterogeneous job
    assert slurm.derive(het(4, SLURM_NTASKS="2", SLURM_TASKS_PER_NODE="1(x2)", BYTEPS_SLURM_SERVERS="3")).roles == [
        "server"]
    p = slurm.derive(het(1, SLURM_TASKS_PER_NODE_HET_GROUP_0="2(x2)", SLURM_TASKS_PER_NODE_HET_GROUP_1="1(x3)",
                         SLURM_LOCALID="1"))
    assert p.one_rank and p.env["BYTEPS_LOCAL_SIZE"] == "2"
    with pytest.raises(LaunchConfigError, match="give 4 node\\(s\\) but the allocation has 5"):
        slurm.derive(het(0, SLURM_TASKS_PER_NODE_HET_GROUP_0="2", SLURM_TASKS_PER_NODE_HET_GROUP_1="1(x3)"))
    with pytest.raises(LaunchConfigError, match="SLURM_HET_SIZE=3"):
        slurm.derive(het(0, SLURM_HET_SIZE="3"))
    env = het(0)
    del env["SLURM_JOB_NODELIST_HET_GROUP_1"]
    with pytest.raises(LaunchConfigError, match="The env SLURM_JOB_NODELIST_HET_GROUP_1 is missing"):
        slurm.derive(env)


def het_nodes(workers: int, cpus: int, node_id: int, **extra: str) -> dict[str, str]:
    env = alloc(f"g[1-{workers}],c[1-{cpus}]", node_id,
                **{"SLURM_HET_SIZE": "2", "SLURM_JOB_NODELIST_HET_GROUP_0": f"g[1-{workers}]",
                   "SLURM_JOB_NODELIST_HET_GROUP_1": f"c[1-{cpus}]",
                   "SLURM_TASKS_PER_NODE_HET_GROUP_0": f"1(x{workers})",
                   "SLURM_TASKS_PER_NODE_HET_GROUP_1": f"1(x{cpus})", **extra})
    del env["SLURM_JOB_NODELIST"]
    return env


@pytest.mark.parametrize("workers, cpus, servers, colocated, idle", [
    (4, 4, 4, False, 0),  # as many CPU nodes as workers: servers on the CPU nodes only
    (4, 2, 2, True, 0),   # fewer: the mixed placement (a server on every worker node too)
    (8, 4, 4, True, 0),
    (2, 3, 0, True, 3),   # two workers: CPU servers gain nothing (2(n-1)/n = 1); colocated, CPU nodes idle
])
def test_heterogeneous_job_without_a_count_takes_byteps_plans_advice(workers: int, cpus: int, servers: int,
                                                                     colocated: bool, idle: int) -> None:
    from byteps.sim.advice import server_plan

    advice = server_plan(n_workers=workers, cpu_hosts=cpus)
    assert (advice.cpu_servers, advice.colocate) == (servers, colocated)
    placements = [slurm.derive(het_nodes(workers, cpus, i)) for i in range(workers + cpus)]
    want = [(["scheduler"] if i == 0 else []) + (["server"] if colocated else []) + ["worker"] for i in range(workers)]
    want += [["server"]] * servers + [[]] * (cpus - servers)
    assert [p.roles for p in placements] == want
    assert {p.env["DMLC_NUM_SERVER"] for p in placements} == {str(servers + (workers if colocated else 0))}
    assert sum(1 for p in placements[workers:] if not p.roles) == idle
    assert "servers by byteps plan: " + advice.reason in slurm.describe(placements[0])


def test_heterogeneous_job_server_count_outside_group_1() -> None:
    with pytest.raises(LaunchConfigError, match="BYTEPS_SLURM_SERVERS=4 but the heterogeneous job's group 1 has 3"):
        slurm.derive(het(0, BYTEPS_SLURM_SERVERS="4"))


def test_several_tasks_on_a_worker_node_are_local_ranks() -> None:
    env = alloc("n[1-2]", 1, SLURM_TASKS_PER_NODE="4(x2)", SLURM_NTASKS="8", SLURM_LOCALID="3",
                SLURM_PROCID="7")
    p = slurm.derive(env)
    assert p.one_rank and p.roles == ["worker"]  # the node's server runs in its first task
    assert (p.env["BYTEPS_LOCAL_RANK"], p.env["BYTEPS_LOCAL_SIZE"]) == ("3", "4")
    first = slurm.derive({**env, "SLURM_LOCALID": "0", "SLURM_PROCID": "4"})
    assert first.roles == ["server", "worker"] and first.env["BYTEPS_LOCAL_RANK"] == "0"
    # a server node's other tasks run nothing
    env = alloc("n[1-2]", 1, SLURM_TASKS_PER_NODE="2(x2)", SLURM_NTASKS="4", SLURM_LOCALID="1",
                BYTEPS_SLURM_SERVERS="1")
    assert slurm.derive(env).roles == []


@pytest.mark.parametrize("task, roles", [(0, ["scheduler", "worker"]), (1, ["worker"]), (2, ["server"]),
                                         (3, ["server"])])
def test_one_node_separate_its_tasks_stand_for_nodes(task: int, roles: list[str]) -> None:
    """One node, four tasks, --servers 2: task i plays node i (the real Slurm job's layout)."""
    env = alloc("n1", 0, SLURM_TASKS_PER_NODE="4", SLURM_NTASKS="4", SLURM_LOCALID=str(task),
                SLURM_PROCID=str(task), BYTEPS_SLURM_SERVERS="2")
    del env["BYTEPS_JOB_SECRET"]  # one node: not required
    p = slurm.derive(env)
    assert p.roles == roles and not p.one_rank and p.node == "n1"
    assert (p.env["DMLC_NUM_WORKER"], p.env["DMLC_NUM_SERVER"], p.env["DMLC_PS_ROOT_URI"]) == ("2", "2", "n1")
    assert p.env.get("DMLC_WORKER_ID") == (str(task) if task < 2 else None)
    assert p.env.get("BYTEPS_LOCAL_SIZE") == ("1" if task < 2 else None)
    # colocated (the default without --servers) keeps one worker whose tasks are its local ranks
    colocated = {k: v for k, v in env.items() if k != "BYTEPS_SLURM_SERVERS"}
    assert slurm.derive(colocated).one_rank and slurm.derive(colocated).env["BYTEPS_LOCAL_SIZE"] == "4"
    with pytest.raises(LaunchConfigError, match="too few Slurm tasks for the roles asked: 4 server\\(s\\) "
                                                "\\(BYTEPS_SLURM_SERVERS\\) leave no worker among the 4 task"):
        slurm.derive({**env, "BYTEPS_SLURM_SERVERS": "4"})
    with pytest.raises(LaunchConfigError, match="SLURM_LOCALID=4 but node n1 runs 4 task"):
        slurm.derive({**env, "SLURM_LOCALID": "4"})


@pytest.mark.parametrize("extra, size", [
    ({"SLURM_STEP_GPUS": "0,1,2,3", "BYTEPS_SLURM_GPUS_PER_WORKER": "1"}, "4"),
    ({"SLURM_STEP_GPUS": "0,1,2,3", "BYTEPS_SLURM_GPUS_PER_WORKER": "2"}, "2"),
    ({"SLURM_JOB_GPUS": "4,5", "BYTEPS_SLURM_GPUS_PER_WORKER": "1"}, "2"),
    ({"CUDA_VISIBLE_DEVICES": "0,1,2", "BYTEPS_SLURM_GPUS_PER_WORKER": "1"}, "3"),
    ({"SLURM_STEP_GPUS": "0,1", "SLURM_JOB_GPUS": "0,1,2,3", "BYTEPS_SLURM_GPUS_PER_WORKER": "1"}, "2"),
    ({"SLURM_STEP_GPUS": "0,1"}, "1"),
    ({"BYTEPS_LOCAL_SIZE": "3"}, "3"),
])
def test_local_size_from_the_step_gpus(extra: dict[str, str], size: str) -> None:
    assert slurm.derive(alloc("n[1-2]", 0, **extra)).env["BYTEPS_LOCAL_SIZE"] == size


def test_port_rule() -> None:
    assert slurm.derive(alloc("n1", 0, SLURM_JOB_ID="1999")).env["DMLC_PS_ROOT_PORT"] == "9999"
    assert slurm.derive(alloc("n1", 0, SLURM_JOB_ID="7000")).env["DMLC_PS_ROOT_PORT"] == "9000"
    assert slurm.derive(alloc("n1", 0, DMLC_PS_ROOT_PORT="1234")).env["DMLC_PS_ROOT_PORT"] == "1234"
    env = alloc("n1", 0)
    del env["SLURM_JOB_ID"]
    with pytest.raises(LaunchConfigError, match="The env SLURM_JOB_ID is missing"):
        slurm.derive(env)


def test_step_nodelist_wins_over_the_job_nodelist() -> None:
    p = slurm.derive(alloc("n[1-4]", 0, SLURM_STEP_NODELIST="n[3-4]", SLURM_TASKS_PER_NODE="1(x2)",
                           SLURM_NTASKS="2"))
    assert p.env["DMLC_PS_ROOT_URI"] == "n3" and p.env["DMLC_NUM_WORKER"] == "2"


def test_a_one_node_job_needs_no_secret() -> None:
    env = alloc("n1", 0)
    del env["BYTEPS_JOB_SECRET"]
    assert slurm.derive(env).roles == ["scheduler", "server", "worker"]


# --------------------------------------------------------------------------------------------
# Bad input: a named error before anything starts


@pytest.mark.parametrize("env, message", [
    (alloc("n[1-2]", 0, BYTEPS_SLURM_SERVERS="2"), "too few Slurm nodes for the roles asked: 2 server node"),
    (alloc("n[1-3]", 0, SLURM_NTASKS="2", SLURM_TASKS_PER_NODE="1(x2),0"),
     "too few Slurm tasks for the roles asked: SLURM_NTASKS=2"),
    (alloc("n[1-3]", 0, SLURM_TASKS_PER_NODE="2,0,1"), "node\\(s\\) n2 run no task"),
    (alloc("n[1-3]", 0, SLURM_TASKS_PER_NODE="1(x2)"), "SLURM_TASKS_PER_NODE='1\\(x2\\)' gives 2 node"),
    ({**alloc("n[1-2]", 0), "SLURM_JOB_NODELIST": "n[1-2"}, "malformed Slurm hostlist in SLURM_JOB_NODELIST: 'n\\[1-2'"),
    ({**alloc("n[1-2]", 0), "BYTEPS_JOB_SECRET": ""}, "BYTEPS_JOB_SECRET is not set but the Slurm job spans 2"),
    (alloc("n[1-2]", 0, SLURM_STEP_GPUS="0,1", BYTEPS_SLURM_GPUS_PER_WORKER="4"),
     "BYTEPS_SLURM_GPUS_PER_WORKER=4 but the Slurm step has 2 GPU\\(s\\) on this node \\(SLURM_STEP_GPUS="),
    (alloc("n[1-2]", 0, BYTEPS_SLURM_GPUS_PER_WORKER="1"),
     "has 0 GPU\\(s\\) on this node \\(no SLURM_STEP_GPUS"),
    (alloc("n[1-2]", 5), "SLURM_NODEID=5 but the allocation has 2"),
    (alloc("n1,n1", 0), "names node\\(s\\) n1 twice"),
    ({"SLURM_PROCID": "0"}, "The env SLURM_JOB_NODELIST is missing"),
    ({k: v for k, v in alloc("n[1-2]", 0).items() if k != "SLURM_NODEID"}, "The env SLURM_NODEID is missing"),
])
def test_bad_allocations(env: dict[str, str], message: str) -> None:
    with pytest.raises(LaunchConfigError, match=message):
        slurm.derive(env)


def test_bpslaunch_reports_a_bad_allocation_and_starts_nothing(tmp_path: Path) -> None:
    core = tmp_path / "byteps-core"
    core.write_text(FAKE_CORE)
    core.chmod(0o755)
    env = launch_env(**{**alloc("n[1-2]", 0), "BYTEPS_JOB_SECRET": ""}, BYTEPS_CORE_BINARY=str(core),
                     CORE_STARTED=str(tmp_path / "started"), PATH="/usr/bin:/bin")
    r = subprocess.run(LAUNCH + ["true"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r
    assert "BYTEPS_JOB_SECRET is not set but the Slurm job spans 2 nodes" in r.stderr
    assert not (tmp_path / "started").exists()


def test_bpslaunch_servers_option_and_roles_with_a_fake_core(tmp_path: Path) -> None:
    core = tmp_path / "byteps-core"
    core.write_text(FAKE_CORE)
    core.chmod(0o755)
    env = launch_env(**alloc("n[1-3]", 0), BYTEPS_CORE_BINARY=str(core),
                     CORE_STARTED=str(tmp_path / "started"), PATH="/usr/bin:/bin")
    r = subprocess.run(LAUNCH + ["--servers", "1", "--", PYTHON, "-c",
                                 "import os; print('W', os.environ['DMLC_WORKER_ID'], os.environ['DMLC_ROLE'])"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    assert "roles scheduler+worker" in r.stderr and "DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=1" in r.stderr
    assert "W 0 worker" in r.stdout
    assert (tmp_path / "started").read_text().split() == ["scheduler", "scheduler"]  # FAKE_CORE: argv and DMLC_ROLE


@pytest.mark.parametrize("script", sorted((REPO / "examples" / "slurm").glob("*.sbatch")), ids=lambda p: p.name)
def test_example_sbatch_scripts(script: Path) -> None:
    """Valid shell, a shared secret exported before srun, bpslaunch started by srun, and every
    BYTEPS_SLURM_* setting one that bpslaunch reads."""
    text = script.read_text()
    assert subprocess.run(["bash", "-n", str(script)], capture_output=True).returncode == 0
    assert text.index("\nexport BYTEPS_JOB_SECRET=") < text.index("\nsrun ")
    assert any(line.startswith("srun ") and " bpslaunch " in line for line in text.splitlines())
    source = (REPO / "python" / "byteps" / "launcher" / "slurm.py").read_text()
    for name in set(re.findall(r"BYTEPS_SLURM_\w+", text)):
        assert f'"{name}"' in source, name
    if "hetjob" in text:
        assert "--het-group=0,1" in text


def test_bpslaunch_one_task_per_local_rank(tmp_path: Path) -> None:
    """Four tasks on a worker node: the task of SLURM_LOCALID 2 runs the command once, as local
    rank 2 of 4, and starts no service (they run in the node's first task)."""
    core = tmp_path / "byteps-core"
    core.write_text(FAKE_CORE)
    core.chmod(0o755)
    env = launch_env(**alloc("n[1-2]", 0, SLURM_TASKS_PER_NODE="4(x2)", SLURM_NTASKS="8", SLURM_LOCALID="2",
                             SLURM_PROCID="2"),
                     BYTEPS_CORE_BINARY=str(core), CORE_STARTED=str(tmp_path / "started"), PATH="/usr/bin:/bin")
    show = ("import os; print('R', *(os.environ[k] for k in ('DMLC_ROLE', 'DMLC_WORKER_ID', "
            "'BYTEPS_LOCAL_RANK', 'BYTEPS_LOCAL_SIZE')))")
    r = subprocess.run(LAUNCH + [PYTHON, "-c", show], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r
    assert [line for line in r.stdout.splitlines() if line.startswith("R ")] == ["R worker 0 2 4"]
    assert not (tmp_path / "started").exists()


def test_servers_option_outside_slurm_is_an_error() -> None:
    env = launch_env(DMLC_ROLE="worker", DMLC_NUM_WORKER="1", PATH="/usr/bin:/bin")
    r = subprocess.run(LAUNCH + ["--servers", "2", "true"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 2, r
    assert "--servers applies inside a Slurm allocation only" in r.stderr


# --------------------------------------------------------------------------------------------
# One real job: 2 workers + 2 servers (separate), four "nodes" 127.0.0.1-4, one task each

# Also reused by test_slurm_real.py.  digest: every byte of both results (the second from seeded
# random values), so equal lines mean bitwise equal arrays.
PUSH_PULL_RESULT = """
import hashlib
import numpy as np
import byteps.numpy as bps
bps.init()
rank = bps.rank()
x = np.arange(1000, dtype=np.float32) * (rank + 1)
total = bps.push_pull(x, average=False, name="slurm.x")
y = np.random.default_rng(7 + rank).standard_normal(50000).astype(np.float32)
mean = bps.push_pull(y, average=True, name="slurm.y")
assert bps.size() == 2, bps.size()
digest = hashlib.sha256(total.tobytes() + mean.tobytes()).hexdigest()[:16]
print(f"RESULT rank={rank} sum={float(total.sum())} head={total[:3].tolist()} digest={digest}", flush=True)
bps.shutdown()
"""


def test_real_job_from_fake_slurm_environments(tmp_path: Path) -> None:
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    script = tmp_path / "push_pull.py"
    script.write_text(PUSH_PULL_RESULT)
    port = str(free_port())
    procs, logs = [], []
    deadline = time.monotonic() + 60
    try:
        for node in range(4):
            env = launch_env(**alloc("127.0.0.[1-4]", node), BYTEPS_SLURM_SERVERS="2",
                             DMLC_PS_ROOT_PORT=port, DMLC_NODE_HOST=f"127.0.0.{node + 1}",
                             BYTEPS_CORE_BINARY=str(CORE_BINARY), BYTEPS_LOG_LEVEL="INFO")
            logs.append(tmp_path / f"node{node}.log")
            with open(logs[-1], "wb") as log:
                procs.append(subprocess.Popen(LAUNCH + [PYTHON, str(script)], env=env, cwd=tmp_path,
                                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        for p in procs:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    finally:
        kill_left(procs)
    outputs = [log.read_text(errors="replace") for log in logs]
    report = "\n".join(f"--- node{i} rc={p.returncode}\n{out}" for i, (p, out) in enumerate(zip(procs, outputs)))
    assert [p.returncode for p in procs] == [0, 0, 0, 0], report
    assert "roles scheduler+worker" in outputs[0] and "roles server" in outputs[3], report
    results = sorted(line for out in outputs for line in out.splitlines() if line.startswith("RESULT"))
    expected_sum = float(sum(range(1000)) * 3)
    assert [line.rsplit(" digest=", 1)[0] for line in results] == [
        f"RESULT rank={r} sum={expected_sum} head=[0.0, 3.0, 6.0]" for r in (0, 1)], report
    assert len({line.rsplit(" digest=", 1)[1] for line in results}) == 1, report  # both ranks: one result

    # The same job under bpsrun gives the same result.
    (tmp_path / "bpsrun").mkdir()
    job = run_bpsrun(tmp_path / "bpsrun", 2, 2, PUSH_PULL_RESULT, launch_env(), timeout=60)
    assert job.returncode == 0, job.stdout + job.stderr
    assert sorted(line[line.index("RESULT"):] for line in job.stdout.splitlines() if "RESULT" in line) == results
