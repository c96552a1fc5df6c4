"""The stall report (docs/troubleshooting.md, "A push_pull did not complete"): what a worker held
when a deadline fired, named in the error; and ``kill -USR1`` on any byteps process writes its
report on demand without stopping it."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from fault_jobs import FaultJob

REPORT = re.compile(r"what this worker held then: (\S+\.txt)")


@pytest.fixture
def fault_job(cluster):
    jobs: list[FaultJob] = []

    def make(**kwargs) -> FaultJob:
        jobs.append(FaultJob(cluster, **kwargs))
        return jobs[-1]

    yield make
    cluster.kill_all()
    for job in jobs:
        job.close()


def test_a_deadline_writes_the_report_and_the_error_names_it(fault_job, tmp_path):
    # Server 0's link stops forwarding mid-job for longer than BYTEPS_TIMEOUT: the waits time
    # out, and the report says which partitions were stuck, in which stage, on which server.
    reports = tmp_path / "reports"
    reports.mkdir()
    job = fault_job(env={"BYTEPS_TIMEOUT": "3", "TMPDIR": str(reports)}).start()
    job.wait_round(3)
    job.server_proxy[0].pause(15)
    job.finish(40)
    named = 0
    for p in job.worker_procs:
        m = REPORT.search(p.output)
        if not m:  # this worker may have learnt of the other's failure first
            assert "FAILED" in p.output, job.dump()
            continue
        named += 1
        path = Path(m.group(1))
        assert path.parent == reports and path.name.startswith("byteps-stall-worker"), path
        report = path.read_text()
        # The deadline's message names the servers the outstanding partitions wait on.
        servers = re.search(r"outstanding on server\(s\) ([\d, ]+)", p.output).group(1)
        stuck = [int(s) for s in servers.replace(" ", "").split(",") if s]
        assert "reason: push_pull of tensor" in report and "BYTEPS_TIMEOUT" in report, report
        rows = re.findall(r"'([^']+)' (\d+)/(\d+) key (\d+) round (\d+) server (\d+) (\d+) bytes: (\S+) (\w+)", report)
        assert rows, report
        on_stuck = [r for r in rows if int(r[5]) in stuck]
        assert on_stuck, (stuck, report)
        assert all(r[7] == "push-pull" and r[8] == "running" for r in on_stuck), report
        assert all("fj." in r[0] for r in rows), report
    assert named >= 1, "no worker's error named a stall report\n" + job.dump()


SIGNAL_SCRIPT = """
import os, sys, time
import numpy as np
import byteps.numpy as bps
bps.init()
rank = bps.rank()
x = np.full(300000, rank + 1.0, np.float32)
bps.push_pull(x, name="warm", average=False)
if rank == 1:
    go = os.environ["GO_FILE"]
    while not os.path.exists(go):
        time.sleep(0.05)
h = bps.push_pull_async(x, name="late.grad", average=False)
print("PUSHED", flush=True)
got = bps.synchronize(h)
assert np.all(got == 3.0), got[:3]
print("ALL OK", flush=True)
bps.shutdown()
"""


def _report_of(folder: Path, stem: str, pid: int, timeout: float = 10) -> str:
    path = folder / f"byteps-stall-{stem}-{pid}.txt"
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"no {path} within {timeout}s: {sorted(os.listdir(folder))}"
        time.sleep(0.05)
    return path.read_text()


def test_sigusr1_writes_each_process_report_and_stops_nothing(cluster, tmp_path):
    # Worker 0 waits in round 1 of 'late.grad' for worker 1, which holds back until told: the
    # signal catches every process in that state, and the job then completes as if untouched.
    reports = tmp_path / "reports"
    reports.mkdir()
    go = tmp_path / "go"
    procs = cluster.job(2, 1, SIGNAL_SCRIPT, extra={"TMPDIR": str(reports), "GO_FILE": str(go)})
    w0 = procs["worker:0"]
    deadline = time.monotonic() + 30
    while "PUSHED" not in w0.output:
        assert time.monotonic() < deadline and w0.popen.poll() is None, cluster.dump()
        time.sleep(0.05)
    time.sleep(0.3)  # the push reached the server
    for label in ("worker:0", "server:0", "scheduler"):
        os.kill(procs[label].popen.pid, signal.SIGUSR1)
    worker = _report_of(reports, "worker0", procs["worker:0"].popen.pid)
    server = _report_of(reports, "server0", procs["server:0"].popen.pid)
    sched = _report_of(reports, "scheduler", procs["scheduler"].popen.pid)
    go.touch()
    cluster.wait(60)
    assert all(p.returncode == 0 for p in procs.values()), cluster.dump()
    assert procs["worker:0"].output.count("ALL OK") == 1 and procs["worker:1"].output.count("ALL OK") == 1

    assert "reason: asked for with kill -USR1" in worker, worker
    assert re.search(r"'[^']*late\.grad' \d+/\d+ key \d+ round 1 server 0 \d+ bytes: push-pull running", worker), worker
    # The server's open round: worker 0 pushed, worker 1 is waited for.
    assert re.search(r"key \d+ '[^']*late\.grad' \(\d+ bytes, sum\) round 1: pushed by \[0\], waiting for \[1\]; "
                     r"1 reply\(ies\) waiting", server), server
    assert "worker 0" in sched and "worker 1" in sched and "server 0" in sched and "started" in sched, sched
    for label in ("worker:0", "server:0"):
        assert "(kill -USR1) written to" in procs[label].output, procs[label].output
