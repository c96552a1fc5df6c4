"""bpsrun's mixed placement (``--cpu-servers K``): colocated servers plus K CPU servers, each
emulated machine on a loopback address of its own.

The first tests run bpsrun against a fake ``byteps-core`` (as test_bpsrun.py does) and check the
address every process was given; the last runs a real job (real core, byteps.numpy push_pull)
and checks the hosts the scheduler saw register.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from test_bpsrun import Job

# Prints its role and DMLC_NODE_HOST, then waits until every worker wrote its done file.
FAKE_CORE = r'''#!/usr/bin/python3
import os, sys, time
role = os.environ["DMLC_ROLE"]
open(os.path.join(os.environ["FAKE_PID_DIR"], f"{role}-{os.getpid()}.pid"), "w").close()
print(f"{role} host {os.environ['DMLC_NODE_HOST']} root {os.environ['DMLC_PS_ROOT_URI']} "
      f"servers {os.environ['DMLC_NUM_SERVER']}", flush=True)
done_dir, need = os.environ["FAKE_DONE_DIR"], int(os.environ["DMLC_NUM_WORKER"])
deadline = time.time() + 20
while len(os.listdir(done_dir)) < need and time.time() < deadline:
    time.sleep(0.01)
sys.exit(0 if time.time() < deadline else 9)
'''


@pytest.fixture
def job(tmp_path: Path) -> Job:
    j = Job(tmp_path)
    j.core.write_text(FAKE_CORE)
    return j


def env_of(stdout: str, label: str, key: str) -> str:
    m = re.search(rf"^\[{re.escape(label)}\] ENV {key}=(.*)$", stdout, re.M)
    assert m, f"{label} printed no {key}:\n{stdout}"
    return m.group(1)


def test_every_machine_gets_its_own_loopback_address(job: Job) -> None:
    r = job.run(["-n", "3", "--cpu-servers", "2"], ["env"])
    assert r.returncode == 0, r.stderr
    for i in range(3):
        assert env_of(r.stdout, f"worker:{i}", "DMLC_NODE_HOST") == f"127.0.1.{i + 1}"
        assert env_of(r.stdout, f"worker:{i}", "DMLC_NUM_SERVER") == "5"
        assert env_of(r.stdout, f"worker:{i}", "DMLC_PS_ROOT_URI") == "127.0.0.1"
    assert "[scheduler] scheduler host 127.0.0.1 root 127.0.0.1 servers 5" in r.stdout
    expected = ["127.0.1.1", "127.0.1.2", "127.0.1.3", "127.0.2.1", "127.0.2.2"]
    for i, host in enumerate(expected):
        assert f"[server:{i}] server host {host} root 127.0.0.1 servers 5\n" in r.stdout
    assert job.roles_started() == ["scheduler"] + ["server"] * 5 + ["worker0", "worker1", "worker2"]
    assert ("mixed placement: 3 workers with colocated servers on 127.0.1.1..3, "
            "2 CPU servers on 127.0.2.1..2") in r.stderr


def test_matching_num_servers_is_accepted_and_zero_cpu_servers_is_colocated(job: Job) -> None:
    r = job.run(["-n", "2", "-s", "3", "--cpu-servers", "1"], ["env"])
    assert r.returncode == 0, r.stderr
    assert "[server:2] server host 127.0.2.1 " in r.stdout
    for done in job.done_dir.iterdir():
        done.unlink()
    r = job.run(["-n", "2", "--cpu-servers", "0"], ["env"])
    assert r.returncode == 0, r.stderr
    assert "[server:0] server host 127.0.1.1 root 127.0.0.1 servers 2\n" in r.stdout
    assert "[server:1] server host 127.0.1.2 root 127.0.0.1 servers 2\n" in r.stdout
    assert "[server:2]" not in r.stdout


def test_without_cpu_servers_everything_stays_on_host(job: Job) -> None:
    r = job.run(["-n", "2", "-s", "2"], ["env"])
    assert r.returncode == 0, r.stderr
    assert env_of(r.stdout, "worker:1", "DMLC_NODE_HOST") == "127.0.0.1"
    assert "[server:1] server host 127.0.0.1 root 127.0.0.1 servers 2\n" in r.stdout


@pytest.mark.parametrize("options,needle", [
    (["-n", "2", "-s", "2", "--cpu-servers", "1"],
     "-s/--num-servers 2 contradicts -n 2 --cpu-servers 1, which start 2 colocated + 1 CPU = 3 servers"),
    (["-n", "2", "--cpu-servers", "-1"], "--cpu-servers must be in 0..254, got -1"),
    (["-n", "2", "--cpu-servers", "1", "--host", "10.0.0.1"],
     "--host must be a 127.x address too, not 10.0.0.1"),
    (["-n", "1", "--cpu-servers", "1"], "--cpu-servers with -n 1 starts no servers"),
    (["-n", "300", "--cpu-servers", "1"], "at most 254 worker machines; -n/--num-workers is 300"),
])
def test_contradictions_are_named_errors(job: Job, options: list[str], needle: str) -> None:
    r = job.run(options, ["env"])
    assert r.returncode == 2, r
    assert needle in r.stderr
    assert list(job.pid_dir.iterdir()) == []


def test_one_worker_with_force_distributed(job: Job) -> None:
    r = job.run(["-n", "1", "--cpu-servers", "1", "--force-distributed"], ["env"])
    assert r.returncode == 0, r.stderr
    assert "[server:0] server host 127.0.1.1 " in r.stdout
    assert "[server:1] server host 127.0.2.1 " in r.stdout


# --------------------------------------------------------------------------------------------
# a real job

PUSH_PULL = """
import os, sys
import numpy as np
import byteps.numpy as bps

bps.init()
rank, n = bps.rank(), bps.size()
print("HOST", rank, os.environ["DMLC_NODE_HOST"], flush=True)
for size in (3, 100_000, 1_000_000):
    x = np.arange(size, dtype=np.float32) + rank
    got = bps.push_pull(x, average=False, name=f"t{size}")
    want = sum(np.arange(size, dtype=np.float32) + r for r in range(n))
    if not np.array_equal(got, want):
        print("MISMATCH", size, flush=True)
        sys.exit(3)
print("ALL OK", rank, flush=True)
bps.shutdown()
"""


@pytest.mark.usefixtures("require_core")
def test_real_job_registers_the_emulated_hosts(run_job) -> None:
    r = run_job(2, 3, PUSH_PULL, env={"BYTEPS_LOG_LEVEL": "INFO"}, timeout=60,
                bpsrun_args=("--cpu-servers", "1"))
    assert r.returncode == 0, r
    assert r.stdout.count("ALL OK") == 2, r
    assert not r.leftovers, r
    for rank in (0, 1):
        assert f"HOST {rank} 127.0.1.{rank + 1}" in r.stdout, r
    registered = re.findall(r"registered (\w+) \(pid \d+, ([\d.]+):\d+\)", r.output)
    assert sorted(registered) == sorted([("server", "127.0.1.1"), ("server", "127.0.1.2"),
                                         ("server", "127.0.2.1"), ("worker", "127.0.1.1"),
                                         ("worker", "127.0.1.2")]), r


SPLIT_JOB = """
import numpy as np
import byteps.numpy as bps

bps.init()
rank, n = bps.rank(), bps.size()
for step in range(2):
    for i in range(24):  # 24 tensors of 1 MiB: one partition each
        x = np.full(1 << 18, rank + i, dtype=np.float32)
        got = bps.push_pull(x, average=False, name=f"w{i}")
        assert np.all(got == sum(r + i for r in range(n))), (step, i)
print("ALL OK", rank, flush=True)
bps.shutdown()
"""


@pytest.mark.usefixtures("require_core")
def test_real_job_splits_the_bytes_by_the_optimal_split(run_job) -> None:
    """2 worker machines with their servers and 1 CPU machine: the scheduler places by the
    unified architecture's split (each colocated server (n-k)/(n^2+kn-2k) = 1/4 of the bytes, the
    CPU server 2(n-1)/(n^2+kn-2k) = 1/2), and the servers' own count of the pushes they took
    shows it."""
    # BYTEPS_AUTOTUNE=0: no start-up probe, whose one-off pushes the planner places without counting
    # them (protocol/name_planner.h), so the servers' totals are the model's bytes alone.
    r = run_job(2, 3, SPLIT_JOB, env={"BYTEPS_LOG_LEVEL": "INFO", "BYTEPS_AUTOTUNE": "0"}, timeout=90,
                bpsrun_args=("--cpu-servers", "1"))
    assert r.returncode == 0, r
    assert r.stdout.count("ALL OK") == 2, r
    assert ("mixed placement: the 2 servers on the 2 worker machines take 25.0% of the bytes each, "
            "the 1 on CPU machines 50.0% each") in r.output, r
    took = {int(s): int(b) for s, b in re.findall(r"\[server:(\d)\].*took (\d+) bytes of pushes", r.output)}
    assert sorted(took) == [0, 1, 2], r
    total = sum(took.values())
    assert total >= 2 * 2 * 24 << 20, took  # every worker's pushes of both steps
    for server, share in ((0, 0.25), (1, 0.25), (2, 0.5)):
        assert abs(took[server] / total - share) < 0.04, (server, took)


@pytest.mark.usefixtures("require_core")
def test_mixed_mode_zero_keeps_equal_shares(run_job) -> None:
    r = run_job(2, 3, SPLIT_JOB, env={"BYTEPS_LOG_LEVEL": "INFO", "BYTEPS_ENABLE_MIXED_MODE": "0",
                                      "BYTEPS_AUTOTUNE": "0"},  # as above: the model's bytes alone
                timeout=90, bpsrun_args=("--cpu-servers", "1"))
    assert r.returncode == 0, r
    assert "3 servers, equal shares (33.3% each): BYTEPS_ENABLE_MIXED_MODE=0" in r.output, r
    took = {int(s): int(b) for s, b in re.findall(r"\[server:(\d)\].*took (\d+) bytes of pushes", r.output)}
    total = sum(took.values())
    for server in range(3):
        assert abs(took[server] / total - 1 / 3) < 0.04, (server, took)


@pytest.mark.usefixtures("require_core")
def test_mixed_mode_one_without_cpu_servers_fails_naming_the_variable(run_job) -> None:
    r = run_job(2, 2, SPLIT_JOB, env={"BYTEPS_ENABLE_MIXED_MODE": "1"}, timeout=60,
                bpsrun_args=("--cpu-servers", "0"))
    assert r.returncode != 0, r
    assert "BYTEPS_ENABLE_MIXED_MODE=1, but every server runs on a worker machine" in r.output, r
    assert not r.leftovers, r
