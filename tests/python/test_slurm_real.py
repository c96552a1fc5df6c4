"""bpslaunch under a real Slurm: a one-machine cluster of its own (munged, slurmctld, slurmd from
Debian's slurm-wlm and munge), started by the test with its own key, config and ports and torn
down after it, runs a 2-worker + 2-server job through ``sbatch --wait`` of a batch script whose
``srun`` starts four ``bpslaunch --servers 2`` tasks on the one node (docs/launchers.md,
"Slurm": the tasks of a one-node job stand for its nodes).  The job's results equal, bit for
bit, those of the same program under ``bpsrun -n 2 -s 2``.

Skips, with the daemons' log tails, only where the daemons cannot start (not root, Slurm or
munge missing, no node coming up); as root on Debian 12 (this machine and CI) they start.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Optional

import pytest

from conftest import CORE_BINARY, PYTHON, free_port, missing_core, run_bpsrun
from test_bpslaunch import launch_env
from test_slurm_env import PUSH_PULL_RESULT

START_DEADLINE_S = 30.0  # until sinfo shows the node idle
STOP_DEADLINE_S = 10.0  # SIGTERM to SIGKILL, and for the last processes to go
JOB_TIMEOUT_S = 60.0
DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "srun", "sinfo", "scontrol")
MARK = "BPS_SLURM_TEST_MARK"  # in the environment of every process this test's cluster starts


def tool(name: str) -> Optional[str]:
    """A Slurm/munge program: on PATH, else in /usr/sbin (the daemons, off a user's PATH)."""
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")


def node_name() -> tuple[str, str]:
    """(NodeName, its slurm.conf line's extra): this host's name where it resolves to a loopback
    address (bpslaunch gives the node's name to every role as DMLC_PS_ROOT_URI), else
    ``localhost`` with NodeHostname=<hostname> (slurmd finds its node by that)."""
    host = socket.gethostname()
    try:
        loopback = socket.gethostbyname(host).startswith("127.")
    except OSError:
        loopback = False
    return (host, "") if loopback else ("localhost", f" NodeHostname={host}")


def tail(path: Path, lines: int = 8) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return "(no log)"


def marked_processes(token: str) -> list[int]:
    """The processes whose environment carries this cluster's mark (daemons, slurmstepd, tasks)."""
    needle = f"{MARK}={token}".encode()
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    pids.append(int(entry))
        except OSError:
            continue  # gone, or a kernel thread
    return pids


class SlurmCluster:
    """munged + slurmctld + slurmd in ``root``, each a child of this process in a session of
    its own; :attr:`env` points every Slurm command at this cluster (SLURM_CONF)."""

    def __init__(self, root: Path) -> None:
        self.root, self.token = root, secrets.token_hex(8)
        self.procs: dict[str, subprocess.Popen] = {}
        self.node, extra = node_name()
        self.socket = root / "munge" / "munge.socket"
        self.conf = root / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf), MARK: self.token}
        root.mkdir(mode=0o711)
        for name in ("munge", "state", "spool"):
            (root / name).mkdir(mode=0o711)
        key = root / "munge" / "munge.key"  # this cluster's own: 1024 random bytes, mode 0400
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        user = pwd.getpwuid(os.geteuid()).pw_name  # root in CI; another user's cluster runs as it
        self.conf.write_text("\n".join([
            "ClusterName=bpstest", "SlurmctldHost=localhost",
            f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
            f"SlurmUser={user}", f"SlurmdUser={user}",
            "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={self.socket}",
            f"StateSaveLocation={root / 'state'}", f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}", f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}", f"SlurmdLogFile={root / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU", "MpiDefault=none",
            "ReturnToService=2", "SlurmdParameters=config_overrides",  # 8 CPUs on a 2-core machine
            "MailProg=/bin/true", "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            f"NodeName={self.node} NodeAddr=127.0.0.1{extra} CPUs=8 State=UNKNOWN",
            f"PartitionName=bps Nodes={self.node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES",
            ""]))

    def _start(self, name: str, argv: list[str]) -> None:
        with open(self.root / f"{name}.out", "wb") as out:
            self.procs[name] = subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                                stdin=subprocess.DEVNULL, start_new_session=True)

    def logs(self) -> str:
        return "; ".join(f"{name}: {tail(self.root / f'{name}.out')} {tail(self.root / f'{name}.log')}"
                         for name in DAEMONS)

    def start(self) -> Optional[str]:
        """Starts the daemons and waits for the node; returns why they could not start (None: up)."""
        m = self.root / "munge"
        self._start("munged", [tool("munged"), "--foreground", "--force", f"--socket={self.socket}",
                               f"--key-file={m / 'munge.key'}", f"--pid-file={m / 'munged.pid'}",
                               f"--log-file={m / 'munged.log'}", f"--seed-file={m / 'munged.seed'}"])
        # -D foreground, -c/-i no state from an earlier cluster, -f this cluster's config
        self._start("slurmctld", [tool("slurmctld"), "-D", "-c", "-i", "-f", str(self.conf)])
        self._start("slurmd", [tool("slurmd"), "-D", "-c", "-f", str(self.conf)])
        deadline = time.monotonic() + START_DEADLINE_S
        state = ""
        while time.monotonic() < deadline:
            dead = [f"{name} exited {p.returncode}" for name, p in self.procs.items() if p.poll() is not None]
            if dead:
                return f"{', '.join(dead)}; logs: {self.logs()}"
            try:
                r = subprocess.run([tool("sinfo"), "-h", "-N", "-o", "%N %t"], env=self.env, capture_output=True,
                                   text=True, timeout=5)
                state = (r.stdout + r.stderr).strip()
            except subprocess.TimeoutExpired:
                state = "sinfo timed out"
            if state == f"{self.node} idle":
                return None
            time.sleep(0.3)
        return f"node {self.node} not idle within {START_DEADLINE_S:.0f}s (sinfo: {state!r}); logs: {self.logs()}"

    def stop(self) -> list[int]:
        """Stops the daemons (SIGTERM, SIGKILL after a deadline) and returns the pids of this
        cluster's processes still alive after STOP_DEADLINE_S (then SIGKILLed: nothing leaks)."""
        for name in reversed(DAEMONS):
            p = self.procs.get(name)
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)  # its own session: the daemon and its children
        deadline = time.monotonic() + STOP_DEADLINE_S
        for p in self.procs.values():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        left = marked_processes(self.token)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = marked_processes(self.token)
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return left


@pytest.fixture
def slurm_cluster(tmp_path: Path):
    missing = [name for name in DAEMONS + CLIENTS if tool(name) is None]
    if missing:
        pytest.skip(f"the Slurm daemons cannot start: {', '.join(missing)} not installed "
                    "(Debian's slurm-wlm and munge; scripts/install-deps.sh installs them)")
    cluster = SlurmCluster(tmp_path / "slurm")
    try:
        why = cluster.start()
        if why:
            pytest.skip(f"the Slurm daemons cannot start: {why}")
        yield cluster
    finally:
        cluster.stop()


BATCH_SCRIPT = """#!/bin/bash
#SBATCH --job-name=byteps-real --ntasks=4 --time=2
set -euo pipefail
export BYTEPS_JOB_SECRET=$({python} -c 'import secrets; print(secrets.token_hex(16))')
# one node, four tasks, --servers 2: tasks 0-1 are the workers (the scheduler in task 0), 2-3 servers
srun --label --kill-on-bad-exit=1 {python} -m byteps.launcher.bpslaunch --servers 2 {python} push_pull.py
"""


def test_two_workers_two_servers_under_real_slurm(tmp_path: Path, slurm_cluster: SlurmCluster) -> None:
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    job = tmp_path / "job"
    job.mkdir()
    (job / "push_pull.py").write_text(PUSH_PULL_RESULT)
    (job / "job.sbatch").write_text(BATCH_SCRIPT.format(python=PYTHON))
    env = {**launch_env(BYTEPS_CORE_BINARY=str(CORE_BINARY), DMLC_PS_ROOT_PORT=str(free_port()),
                        DMLC_NODE_HOST="127.0.0.1"),  # every role on loopback, as under bpsrun
           "SLURM_CONF": slurm_cluster.env["SLURM_CONF"], MARK: slurm_cluster.token}
    out = job / "slurm.out"
    try:
        r = subprocess.run([tool("sbatch"), "--wait", f"--output={out}", f"--chdir={job}", "job.sbatch"],
                           env=env, cwd=job, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"sbatch --wait did not return in {JOB_TIMEOUT_S:.0f}s; job output: {tail(out, 40)}")
    output = out.read_text(errors="replace") if out.exists() else ""
    report = f"sbatch rc={r.returncode} {r.stdout} {r.stderr}\n--- job output ---\n{output}"
    assert r.returncode == 0, report
    assert "Submitted batch job" in r.stdout, report
    # the derivation from Slurm's own variables, one line per task (srun --label: "<task>: ")
    node = slurm_cluster.node
    for task, roles in enumerate(["scheduler+worker", "worker", "server", "server"]):
        assert (f"{task}: bpslaunch: Slurm node {node}: roles {roles};" in output), report
    assert f"DMLC_NUM_WORKER=2 DMLC_NUM_SERVER=2 DMLC_PS_ROOT_URI={node}" in output, report
    results = sorted(line[line.index("RESULT"):] for line in output.splitlines() if "RESULT" in line)
    assert len(results) == 2 and {line.split(" ", 2)[2] for line in results} == {results[0].split(" ", 2)[2]}, report

    # the same program under bpsrun: the same lines, digest of every result array included
    (tmp_path / "bpsrun").mkdir()
    ref = run_bpsrun(tmp_path / "bpsrun", 2, 2, PUSH_PULL_RESULT, launch_env(), timeout=60)
    assert ref.returncode == 0, ref
    assert sorted(line[line.index("RESULT"):] for line in ref.stdout.splitlines() if "RESULT" in line) == results

    running = set(marked_processes(slurm_cluster.token))  # the teardown's check sees the cluster
    assert {p.pid for p in slurm_cluster.procs.values()} <= running, (running, slurm_cluster.procs)
    left = slurm_cluster.stop()
    assert left == [], f"processes of the Slurm cluster left after its teardown: {left}"
