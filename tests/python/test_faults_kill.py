"""Node deaths: kill -9 of a worker, a server or the scheduler, and a host's link going down.

Every job here is a byteps.torch training job (a 3-layer MLP, DistributedOptimizer, 2 workers,
2 servers).  A node is killed at start-up (rendezvous incomplete), mid-training, during shutdown
(one worker waiting in shutdown) and after both workers finished.  Each process is started by
itself (the ``cluster`` fixture), so each must notice the death and end by itself; one test per
victim goes through bpsrun.  For each case:

* every surviving process exits by itself within the bound below, non-zero, and its output names
  the dead node: role and rank (or its pid when it died before it had a rank) and host, on one
  line ("server 1 (127.0.0.1:4000, pid 77)");
* after a kill once both workers finished, the workers have exited 0 and the others either
  exit 0 or fail naming the victim, within the same bound;
* no process of the job is left (found by the job's unique BYTEPS_JOB_SECRET in /proc/*/environ,
  grandchildren included) and no /dev/shm segment of the job (named by the job token).

Bounds, from the settings (FAULT_ENV):

* kill -9: the peers see the connection drop at once; it is not re-established within
  BYTEPS_RECONNECT_TIMEOUT (2 s), so the scheduler announces the node; one heartbeat interval
  (1 s) covers a node that only notices through the heartbeat; SLACK (3 s) covers process exit
  on a loaded machine: DETECT = 2 + 1 + 3 = 6 s after the kill.
* a worker joining after the death (start-up case) cannot know it: it fails when it cannot
  rendezvous, within BYTEPS_START_TIMEOUT + SLACK of its bps.init().

The workers import torch before any of these clocks start (see Gates): on a loaded machine the
imports alone take longer than BYTEPS_START_TIMEOUT.
* link down: nothing is closed, only silence: PS_HEARTBEAT_TIMEOUT (5 s) + interval + SLACK =
  9 s for the processes that can still talk to each other; the processes on the cut host learn
  it from their own deadlines: max(PS_HEARTBEAT_TIMEOUT, BYTEPS_TIMEOUT) + reconnect + SLACK.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import time
from pathlib import Path
from typing import Optional

import pytest

from conftest import CORE_BINARY, PYTHON, job_env, write_script  # conftest puts tools/ on sys.path
# What a job leaves behind: its processes (by the secret in their environment) and its shared memory.
from tools.procinfo import job_processes as processes_of_job, shm_leftovers as shm_of_job
from tools.testbed import netns
from tools.testbed.netns import Testbed

pytest.importorskip("torch")
pytestmark = pytest.mark.usefixtures("require_core")

RECONNECT_S, HEARTBEAT_INTERVAL_S, HEARTBEAT_TIMEOUT_S, OP_TIMEOUT_S, START_TIMEOUT_S = 2, 1, 5, 20, 8
SLACK_S = 3.0
DETECT_S = RECONNECT_S + HEARTBEAT_INTERVAL_S + SLACK_S
FAULT_ENV = {"BYTEPS_RECONNECT_TIMEOUT": str(RECONNECT_S), "PS_HEARTBEAT_INTERVAL": str(HEARTBEAT_INTERVAL_S),
             "PS_HEARTBEAT_TIMEOUT": str(HEARTBEAT_TIMEOUT_S), "BYTEPS_TIMEOUT": str(OP_TIMEOUT_S),
             "BYTEPS_START_TIMEOUT": str(START_TIMEOUT_S)}
SERVICE_ENV = {"BYTEPS_LOG_LEVEL": "INFO"}  # servers log under "[server:<rank>]"; the scheduler logs joins

# Prints READY (imports done), INIT <rank>, STEP <i>, TRAINED, SHUTTING_DOWN, DONE as it goes; on an
# error from byteps: "<STAGE>_ERROR <type>: <message>", exit 2.  With BPS_TEST_GATE it joins the job
# only once that file exists (see Gates).
TRAIN = r"""
import os, sys, time
import torch
import torch.nn.functional as F
import byteps.torch as bps

env = os.environ.get
STEPS, STEP_SLEEP = int(env("BPS_TEST_STEPS", "200")), float(env("BPS_TEST_STEP_SLEEP", "0.05"))


def report(stage, err):
    print(f"{stage}_ERROR {type(err).__name__}: {err}", flush=True)
    sys.exit(2)


print("READY", flush=True)
gate, deadline = env("BPS_TEST_GATE"), time.monotonic() + 120
while gate and not os.path.exists(gate):
    if time.monotonic() > deadline:
        print("GATE_TIMEOUT", flush=True)
        sys.exit(4)
    time.sleep(0.01)
try:
    bps.init()
except Exception as err:
    report("INIT", err)
rank = bps.rank()
print(f"INIT {rank}", flush=True)
torch.manual_seed(1)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 32), torch.nn.Tanh(),
                            torch.nn.Linear(32, 4))
opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05),
                               named_parameters=model.named_parameters())
try:
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    for step in range(STEPS):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g)
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
        print(f"STEP {step}", flush=True)
        time.sleep(STEP_SLEEP)
except Exception as err:
    report("TRAIN", err)
print("TRAINED", flush=True)
time.sleep(float(env("BPS_TEST_BEFORE_SHUTDOWN", "0")))
print("SHUTTING_DOWN", flush=True)
try:
    bps.shutdown()
except Exception as err:
    report("SHUTDOWN", err)
print("DONE", flush=True)
time.sleep(float(env("BPS_TEST_LINGER", "0")))
"""


# --------------------------------------------------------------------------------------------
# helpers


def names_node(output: str, role: str, host: str, rank: Optional[int] = None, pid: Optional[int] = None) -> bool:
    """Does one line of *output* name the node: its role, its host, and (except for the scheduler,
    which is unique) its rank ("server 1") or its pid ("pid 77")?"""
    for line in output.splitlines():
        if role not in line or host not in line:
            continue
        if role == "scheduler":
            return True
        if (rank is not None and re.search(rf"\b{role} {rank}\b", line)) or (pid is not None and f"pid {pid}" in line):
            return True
    return False


def log_rank(text: str, role: str) -> Optional[int]:
    m = re.search(rf"\[{role}:(\d+)\]", text)
    return int(m.group(1)) if m else None


class Watcher:
    """Records when each process of a job exits (monotonic time), waits for log lines."""

    def __init__(self, procs: dict) -> None:
        self.procs = procs  # label -> object with .popen and .output (a str property or method)
        self.exit_at: dict[str, float] = {}

    def output(self, label: str) -> str:
        out = self.procs[label].output
        return out() if callable(out) else out

    def poll(self) -> None:
        now = time.monotonic()
        for label, p in self.procs.items():
            if label not in self.exit_at and p.popen.poll() is not None:
                self.exit_at[label] = now

    def wait_text(self, label: str, text: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if text in self.output(label):
                return time.monotonic()
            if label in self.exit_at:
                pytest.fail(f"{label} exited before printing {text!r}:\n{self.dump()}")
            if time.monotonic() > deadline:
                pytest.fail(f"{label}: no {text!r} within {timeout}s:\n{self.dump()}")
            time.sleep(0.02)

    def wait_regex(self, label: str, pattern: str, timeout: float) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            m = re.search(pattern, self.output(label))
            if m:
                return m
            if time.monotonic() > deadline or label in self.exit_at:
                pytest.fail(f"{label}: no match for {pattern!r} within {timeout}s:\n{self.dump()}")
            time.sleep(0.02)

    def wait_exits(self, deadlines: dict[str, float]) -> list[str]:
        """Waits until each labelled process exited or its deadline passed; returns the late ones
        (still running at their deadline: then killed by the caller's teardown)."""
        while True:
            self.poll()
            now = time.monotonic()
            pending = [lb for lb in deadlines if lb not in self.exit_at]
            if not pending or all(now > deadlines[lb] for lb in pending):
                return [lb for lb in pending]
            time.sleep(0.02)

    def dump(self) -> str:
        parts = []
        for label, p in self.procs.items():
            rc = p.popen.poll()
            parts.append(f"--- {label} (pid {p.popen.pid}, rc {rc}) ---\n{self.output(label)}")
        return "\n".join(parts)


def kill9(proc) -> bool:
    """SIGKILL one process; False when it had exited already."""
    if proc.popen.poll() is not None:
        return False
    try:
        os.kill(proc.popen.pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def victim_label(victim: str) -> str:
    return {"worker": "worker:1", "server": "server:1", "scheduler": "scheduler"}[victim]


# --------------------------------------------------------------------------------------------
# kill -9 through the cluster fixture


def start_services(cluster, env):
    cluster.scheduler({**env, **SERVICE_ENV})
    for i in range(2):
        cluster.server(i, {**env, **SERVICE_ENV})


class Gates:
    """One gate file per worker: a TRAIN worker started with :meth:`env` imports torch, prints
    READY and joins the job only once :meth:`open` created its file.  The rendezvous clock
    (BYTEPS_START_TIMEOUT, from the scheduler's start) and a late joiner's own clock then start
    after the imports, which take seconds on a loaded machine and are not what is tested."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def env(self, label: str) -> dict[str, str]:
        return {"BPS_TEST_GATE": str(self.dir / f"gate-{label.replace(':', '-')}")}

    def open(self, label: str) -> float:
        """Lets *label* join; returns the time (monotonic)."""
        Path(self.env(label)["BPS_TEST_GATE"]).touch()
        return time.monotonic()


def wait_ready(watcher: "Watcher", labels: list[str]) -> None:
    for label in labels:  # a wait for the imports, not a bound under test
        watcher.wait_text(label, "READY", timeout=90)


def check_no_leftovers(secret: str, watcher: Watcher) -> None:
    left = processes_of_job(secret)
    for pid in left:  # never leave them behind, whatever the assertion says
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the job still running: {left}\n{watcher.dump()}"
    shm = shm_of_job(secret)
    assert not shm, f"shared memory of the job left: {shm}\n{watcher.dump()}"


def expect_failed(watcher: Watcher, late: list[str], survivors: list[str], who: dict) -> None:
    """Every survivor exited in time, non-zero, naming the victim (*who*: role, host, rank, pid)."""
    assert not late, f"still running at the deadline: {late}\n{watcher.dump()}"
    for label in survivors:
        rc = watcher.procs[label].popen.returncode
        assert rc not in (0, None), f"{label} exited {rc} after the death of {who}\n{watcher.dump()}"
        assert names_node(watcher.output(label), **who), \
            f"{label} does not name the dead node {who}\n{watcher.dump()}"


@pytest.mark.parametrize("victim", ["worker", "server", "scheduler"])
@pytest.mark.parametrize("phase", ["startup", "mid", "shutdown", "after_finish"])
def test_kill9(cluster, phase, victim):
    secret = secrets.token_hex(16)
    env = cluster.env(2, 2, {**FAULT_ENV, "BYTEPS_JOB_SECRET": secret})
    script = write_script(cluster.dir, TRAIN)
    gates = Gates(cluster.dir)
    worker_env = {0: {}, 1: {}}
    if phase in ("shutdown", "after_finish"):
        worker_env = {0: {"BPS_TEST_STEPS": "4"}, 1: {"BPS_TEST_STEPS": "4"}}
        if phase == "shutdown":  # worker 0 waits in shutdown() while worker 1 is not there yet
            worker_env[1]["BPS_TEST_BEFORE_SHUTDOWN"] = "4"
        else:  # both finished; they linger a little before exiting
            worker_env = {i: {**e, "BPS_TEST_LINGER": "2"} for i, e in worker_env.items()}
    for i in range(2):
        label = f"worker:{i}"
        cluster.worker(label, script, {**env, "DMLC_WORKER_ID": str(i), **worker_env[i], **gates.env(label)})
    watcher = Watcher(cluster.procs)
    wait_ready(watcher, ["worker:0", "worker:1"])
    start_services(cluster, env)
    label = victim_label(victim)
    gate_opened: dict[str, float] = {}
    if phase == "startup":
        # Scheduler, both servers and worker 1 join; the victim dies before worker 0 joins.
        gate_opened["worker:1"] = gates.open("worker:1")
        watcher.wait_regex("scheduler", r"\b3 of 4 nodes", timeout=20)
    else:
        gates.open("worker:0")
        gates.open("worker:1")
        marker = {"mid": "STEP 3", "shutdown": "SHUTTING_DOWN", "after_finish": "DONE"}[phase]
        watcher.wait_text("worker:0", marker, timeout=25)
        if phase == "shutdown":
            # Most likely inside shutdown() by then (worker 1 sleeps before its own); a kill just
            # before it enters fails that shutdown() the same way, so the checks hold either way.
            time.sleep(0.3)
        if phase == "after_finish":
            watcher.wait_text("worker:1", "DONE", timeout=10)
    victim_proc = cluster.procs[label]
    rank = 1 if victim == "worker" else log_rank(victim_proc.output, "server") if victim == "server" else None
    who = {"role": victim, "host": "127.0.0.1", "rank": rank, "pid": victim_proc.popen.pid}
    killed = kill9(victim_proc)
    t_kill = time.monotonic()
    if phase != "after_finish":
        assert killed, f"{label} had exited before the kill\n{watcher.dump()}"
    deadlines = {lb: t_kill + DETECT_S for lb in cluster.procs if lb != label}
    if phase == "startup":
        if victim != "scheduler":  # worker 0 registers after the scheduler saw the death, not before
            watcher.wait_regex("scheduler", rf"lost the connection to {victim}\b", timeout=DETECT_S)
        else:
            # Before the rendezvous a node whose scheduler connection drops registers again until
            # its BYTEPS_START_TIMEOUT (counted from its start: the scheduler may be restarted), so
            # that bounds its exit, not the reconnect timeout (CI saw worker 1 exit 8.3 s after).
            # A worker's start is its init(), when its gate opened, not its spawn (CI saw worker 1
            # give up 7.8 s after its init, later than spawn + 8 s + slack under load).
            for lb, p in cluster.procs.items():
                if lb in deadlines:
                    deadlines[lb] = max(deadlines[lb], gate_opened.get(lb, p.started) + START_TIMEOUT_S + SLACK_S)
        joined = gates.open("worker:0")
        deadlines["worker:0"] = max(t_kill + DETECT_S, joined + START_TIMEOUT_S + SLACK_S)
    late = watcher.wait_exits(deadlines)
    survivors = [lb for lb in cluster.procs if lb != label]

    if phase == "after_finish":
        assert not late, f"still running at the deadline: {late}\n{watcher.dump()}"
        for lb in survivors:
            rc = cluster.procs[lb].popen.returncode
            if lb.startswith("worker"):
                assert rc == 0, f"{lb} had finished but exited {rc}\n{watcher.dump()}"
            else:
                assert rc == 0 or names_node(watcher.output(lb), **who), watcher.dump()
    elif phase == "startup":
        early = [lb for lb in survivors if lb != "worker:0"]
        expect_failed(watcher, late, early, who)
        # Worker 0 joined after the death: it can only learn it from the scheduler (or find that
        # the scheduler is gone).
        rc = cluster.procs["worker:0"].popen.returncode
        out = watcher.output("worker:0")
        assert rc not in (0, None) and "INIT_ERROR" in out, watcher.dump()
        assert names_node(out, **who) or names_node(out, "scheduler", "127.0.0.1"), watcher.dump()
    else:
        expect_failed(watcher, late, survivors, who)
        stage = {"mid": "TRAIN_ERROR", "shutdown": "SHUTDOWN_ERROR"}[phase]
        assert stage in watcher.output("worker:0"), watcher.dump()
        if phase == "shutdown" and victim != "worker":
            # Worker 1 calls shutdown() after the death: that later operation fails too.
            assert "SHUTDOWN_ERROR" in watcher.output("worker:1"), watcher.dump()
    if killed:
        rc = victim_proc.popen.returncode
        if phase == "after_finish":
            # Once both workers finished, the scheduler ends the job (and the servers follow): the
            # victim may exit 0 between our check that it runs and the signal's delivery. Either
            # outcome is correct; the survivors' checks above hold for both.
            assert rc in (0, -signal.SIGKILL), f"{label} exited {rc}\n{watcher.dump()}"
        else:
            assert rc == -signal.SIGKILL, f"{label} exited {rc}\n{watcher.dump()}"
    check_no_leftovers(secret, watcher)


def test_no_fault_control(cluster):
    # The same job without a fault: everyone exits 0 (the harness itself is sound).
    secret = secrets.token_hex(16)
    env = cluster.env(2, 2, {**FAULT_ENV, "BYTEPS_JOB_SECRET": secret})
    script = write_script(cluster.dir, TRAIN)
    gates = Gates(cluster.dir)
    labels = ["worker:0", "worker:1"]
    for i, label in enumerate(labels):
        cluster.worker(label, script, {**env, "DMLC_WORKER_ID": str(i), "BPS_TEST_STEPS": "6", **gates.env(label)})
    watcher = Watcher(cluster.procs)
    wait_ready(watcher, labels)
    start_services(cluster, env)
    for label in labels:
        gates.open(label)
    late = watcher.wait_exits({lb: time.monotonic() + 25 for lb in cluster.procs})
    assert not late, watcher.dump()
    assert all(p.popen.returncode == 0 for p in cluster.procs.values()), watcher.dump()
    assert all("DONE" in watcher.output(f"worker:{i}") for i in range(2)), watcher.dump()
    check_no_leftovers(secret, watcher)


# --------------------------------------------------------------------------------------------
# kill -9 through bpsrun

# Worker 0 kills the victim (found by its role and the job's secret in /proc/*/environ) at step 3;
# a worker victim kills itself.  "KILLING <role> pid <pid> at <time.monotonic()>" says when.
BPSRUN_KILL = TRAIN.replace("""        print(f"STEP {step}", flush=True)""", """        print(f"STEP {step}", flush=True)
        if step == 3:
            victim = os.environ["BPS_TEST_VICTIM"]
            if victim == "worker" and rank == 1:
                print(f"KILLING worker pid {os.getpid()} at {time.monotonic()}", flush=True)
                os.kill(os.getpid(), 9)
            if victim != "worker" and rank == 0:
                mine = f"BYTEPS_JOB_SECRET={os.environ['BYTEPS_JOB_SECRET']}".encode()
                for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
                    try:
                        penv = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
                    except OSError:
                        continue
                    if mine in penv and f"DMLC_ROLE={victim}".encode() in penv:
                        print(f"KILLING {victim} pid {pid} at {time.monotonic()}", flush=True)
                        os.kill(int(pid), 9)
                        break""")
BPSRUN_GRACE_S = 2  # run_job's bpsrun --grace: SIGTERM to SIGKILL when it stops the job


@pytest.mark.parametrize("victim", ["worker", "server", "scheduler"])
def test_kill9_through_bpsrun(run_job, victim):
    secret = secrets.token_hex(16)
    # bpsrun starts the scheduler before the workers import torch, which alone can take longer
    # than FAULT_ENV's start timeout on a loaded machine; the start-up is not under test here.
    env = {**FAULT_ENV, "BYTEPS_START_TIMEOUT": "60", "BYTEPS_JOB_SECRET": secret, "BPS_TEST_VICTIM": victim}
    result = run_job(2, 2, BPSRUN_KILL, env=env, timeout=90)
    returned = time.monotonic()
    assert result.returncode not in (0, 124), result
    assert not result.leftovers, result
    # bpsrun stops the job at the first failure: the victim (killed: 137) or a survivor that
    # noticed first; either way it says which process ended the job.
    assert re.search(r"bpsrun: \S+ (was killed by signal SIGKILL|exited with code \d+); stopping the job",
                     result.stderr), result
    killing = re.search(rf"KILLING {victim} pid \d+ at ([0-9.]+)", result.stdout)
    assert killing, result
    # detection, then bpsrun's SIGTERM and at most its grace before SIGKILL
    assert returned - float(killing.group(1)) < DETECT_S + BPSRUN_GRACE_S, result
    assert not processes_of_job(secret) and not shm_of_job(secret), result


# --------------------------------------------------------------------------------------------
# shared memory: a local process dies (2 hosts x 2 worker processes)

LOCAL = r"""
import os, sys, time
import numpy as np
import byteps.numpy as bps

bps.init()
rank, n = bps.rank(), bps.size()
print(f"INIT {rank}", flush=True)
try:
    for it in range(400):
        out = bps.push_pull(np.full(50000, it + rank, np.float32), average=False, name="w")
        assert (out == n * it + n * (n - 1) // 2).all(), f"round {it}: wrong sum"
        print(f"ROUND {it}", flush=True)
        time.sleep(0.05)
except Exception as err:
    print(f"TRAIN_ERROR {type(err).__name__}: {err}", flush=True)
    sys.exit(2)
print("FINISHED WITHOUT ERROR", flush=True)
"""


@pytest.mark.parametrize("local_victim", [0, 1], ids=["non-root", "root"])
def test_kill9_local_process_cleans_shared_memory(cluster, local_victim):
    # The local root is the highest local rank (1).  Host 1's victim dies mid-training: its
    # neighbour names its local rank, the other host names worker 1, and no segment is left.
    secret = secrets.token_hex(16)
    env = cluster.env(2, 1, {**FAULT_ENV, "BYTEPS_JOB_SECRET": secret, "BYTEPS_LOCAL_SIZE": "2"})
    script = write_script(cluster.dir, LOCAL)
    cluster.scheduler({**env, **SERVICE_ENV})
    cluster.server(0, {**env, **SERVICE_ENV})
    for host in range(2):
        for local in range(2):
            cluster.worker(f"worker:{host}.{local}", script,
                           {**env, "DMLC_WORKER_ID": str(host), "BYTEPS_LOCAL_RANK": str(local)})
    watcher = Watcher(cluster.procs)
    watcher.wait_text("worker:0.0", "ROUND 3", timeout=25)
    assert shm_of_job(secret), "no shared memory segment of the job while it runs: is the name scheme as assumed?"
    label = f"worker:1.{local_victim}"
    victim = cluster.procs[label]
    assert kill9(victim), watcher.dump()
    t_kill = time.monotonic()
    survivors = [lb for lb in cluster.procs if lb != label]
    late = watcher.wait_exits({lb: t_kill + DETECT_S for lb in survivors})
    assert not late, f"still running at the deadline: {late}\n{watcher.dump()}"
    for lb in survivors:
        assert cluster.procs[lb].popen.returncode not in (0, None), watcher.dump()
    neighbour = watcher.output(f"worker:1.{1 - local_victim}")
    assert "TRAIN_ERROR" in neighbour and f"local rank {local_victim}" in neighbour, watcher.dump()
    for local in range(2):  # the other host: worker 1 (the host's root, seen by the scheduler) is gone
        out = watcher.output(f"worker:0.{local}")
        assert "TRAIN_ERROR" in out and re.search(r"\bworker 1\b", out), watcher.dump()
    check_no_leftovers(secret, watcher)


def test_kill9_server_reaches_every_local_rank_as_a_runtime_error(cluster):
    # The server dies mid-training. The local roots learn it from the scheduler or their data
    # connection, the non-roots from their root: every process raises BytePSError (not the
    # ValueError of a bad argument) naming the server, with the tensor's context said once.
    secret = secrets.token_hex(16)
    env = cluster.env(2, 1, {**FAULT_ENV, "BYTEPS_JOB_SECRET": secret, "BYTEPS_LOCAL_SIZE": "2"})
    script = write_script(cluster.dir, LOCAL)
    cluster.scheduler({**env, **SERVICE_ENV})
    cluster.server(0, {**env, **SERVICE_ENV})
    workers = [f"worker:{host}.{local}" for host in range(2) for local in range(2)]
    for label in workers:
        host, local = label.split(":")[1].split(".")
        cluster.worker(label, script, {**env, "DMLC_WORKER_ID": host, "BYTEPS_LOCAL_RANK": local})
    watcher = Watcher(cluster.procs)
    watcher.wait_text("worker:0.0", "ROUND 3", timeout=25)
    server = cluster.procs["server:0"]
    who = {"role": "server", "host": "127.0.0.1", "rank": 0, "pid": server.popen.pid}
    assert kill9(server), watcher.dump()
    t_kill = time.monotonic()
    survivors = [lb for lb in cluster.procs if lb != "server:0"]
    expect_failed(watcher, watcher.wait_exits({lb: t_kill + DETECT_S for lb in survivors}), survivors, who)
    for label in workers:
        out = watcher.output(label)
        assert "TRAIN_ERROR BytePSError:" in out, f"{label}\n{watcher.dump()}"
        assert "push_pull of tensor 'w': push_pull of tensor" not in out, f"{label}\n{watcher.dump()}"
    check_no_leftovers(secret, watcher)


# --------------------------------------------------------------------------------------------
# a host's link goes down (emulated cluster)


LINK_OP_TIMEOUT_S = 8  # the cut-off processes end through their own deadlines: keep them short
LINK_DETECT_S = HEARTBEAT_TIMEOUT_S + HEARTBEAT_INTERVAL_S + SLACK_S
ISOLATED_S = max(HEARTBEAT_TIMEOUT_S, LINK_OP_TIMEOUT_S) + RECONNECT_S + SLACK_S
# (label, host) per process; the last host is the one cut.
LINK_LAYOUTS = {
    "worker": [("scheduler", 0), ("server:0", 0), ("server:1", 0), ("worker:0", 1), ("worker:1", 2)],
    "server": [("scheduler", 0), ("worker:0", 0), ("server:0", 1), ("worker:1", 1), ("server:1", 2)],
}


class NsProc:
    def __init__(self, label: str, popen: subprocess.Popen, log: Path) -> None:
        self.label, self.popen, self.log = label, popen, log

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")


@pytest.mark.skipif(not Testbed.available()[0], reason=f"no emulated cluster here: {Testbed.available()[1]}")
@pytest.mark.parametrize("victim", ["worker", "server"])
def test_link_down(tmp_path, require_core, victim):
    prefix = f"bpsf{secrets.token_hex(3)}"
    secret = secrets.token_hex(16)
    layout = LINK_LAYOUTS[victim]
    cut = 2
    tb = Testbed(3, rate_mbit=0, prefix=prefix)
    try:
        sched_ip = tb.hosts[0].ip
        base = job_env({**FAULT_ENV, "BYTEPS_TIMEOUT": str(LINK_OP_TIMEOUT_S), "BYTEPS_JOB_SECRET": secret,
                        "DMLC_PS_ROOT_URI": sched_ip, "DMLC_PS_ROOT_PORT": "9000", "DMLC_NUM_WORKER": "2",
                        "DMLC_NUM_SERVER": "2"})
        script = write_script(tmp_path, TRAIN)
        gates = Gates(tmp_path)
        procs: dict[str, NsProc] = {}
        watcher = Watcher(procs)

        def start(label: str, host: int) -> None:
            role, _, index = label.partition(":")
            env = {**base, "DMLC_ROLE": role, "DMLC_NODE_HOST": tb.hosts[host].ip}
            if role == "worker":
                env.update({"DMLC_WORKER_ID": index, **gates.env(label)})
                argv = [PYTHON, str(script)]
            else:
                env.update(SERVICE_ENV)
                argv = [str(CORE_BINARY), role]
            log = tmp_path / f"{label.replace(':', '-')}.log"
            with open(log, "wb") as sink:
                popen = tb.popen(host, argv, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                 stderr=subprocess.STDOUT)
            procs[label] = NsProc(label, popen, log)

        workers = [(lb, h) for lb, h in layout if lb.startswith("worker")]
        for label, host in workers:
            start(label, host)
        wait_ready(watcher, [lb for lb, _ in workers])
        for label, host in layout:
            if label not in procs:
                start(label, host)
        for label, _ in workers:
            gates.open(label)
        watcher.wait_text("worker:0", "STEP 3", timeout=30)
        victim_label = "worker:1" if victim == "worker" else "server:1"
        rank = 1 if victim == "worker" else log_rank(procs[victim_label].output, "server")
        who = {"role": victim, "host": tb.hosts[cut].ip, "rank": rank, "pid": procs[victim_label].popen.pid}
        tb.link_down(cut)
        t_cut = time.monotonic()
        connected = [lb for lb, h in layout if h != cut]
        isolated = [lb for lb, h in layout if h == cut]
        deadlines = {**{lb: t_cut + LINK_DETECT_S for lb in connected},
                     **{lb: t_cut + ISOLATED_S for lb in isolated}}
        late = watcher.wait_exits(deadlines)
        assert not late, f"still running at the deadline: {late}\n{watcher.dump()}"
        for lb in connected:
            rc = procs[lb].popen.returncode
            assert rc not in (0, None), f"{lb} exited {rc}\n{watcher.dump()}"
            assert names_node(watcher.output(lb), **who), f"{lb} does not name {who}\n{watcher.dump()}"
        for lb in isolated:
            assert procs[lb].popen.returncode not in (0, None), watcher.dump()
        assert "TRAIN_ERROR" in watcher.output("worker:0"), watcher.dump()
    finally:
        tb.close()
        netns.destroy(prefix)
    left = processes_of_job(secret)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"processes of the job left: {left}"
