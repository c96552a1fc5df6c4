"""``byteps launch --hostfile`` (byteps.launcher.ssh) for real, with OpenSSH.

Real jobs and the checks over ssh (unreachable hosts, the scheduler's port in use, a host that
cannot run the remote helper) on a testbed of 9 network-namespace hosts (tools/testbed),
8 of them running an ``sshd -D`` with this test's own config and keys (host 8 has none: an
unreachable host; the cluster, its job program and the leftover checks are tools/testbed/sshd.py,
which bench/launch/run.py uses too).  The launcher itself runs on host 0, as a user would run it on the first host.
Skipped, with the reason, only where the namespaces or sshd cannot be made or the core is not built.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PYTHON
from tools.testbed.sshd import JOB, STEP_TIMEOUT, Cluster, LaunchResult, ssh_cluster, stamps, why_no_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    reason = why_no_cluster()
    if reason:
        pytest.skip(reason)
    with ssh_cluster(tmp_path_factory.mktemp("ssh")) as c:
        yield c


def run_launcher(cluster: Cluster, args: list[str], command: list[str], cwd: Path) -> LaunchResult:
    r = cluster.run(args, command, cwd)
    if r.hung:
        pytest.fail(f"the launcher did not end within {STEP_TIMEOUT}s\n{r.stdout}\n{r.stderr}")
    return r


def test_four_workers_four_servers(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    hosts = cluster.hostfile("hosts8", [cluster.ip(i) for i in range(8)])
    rc, out, err, start, _ = run_launcher(cluster, ["--hostfile", str(hosts), "--workers", "4", "--servers", "4"],
                                          [PYTHON, "job.py", "-1"], tmp_path)
    report = f"rc={rc}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert rc == 0, report
    assert "4 separate servers on 198.18.0.5, 198.18.0.6, 198.18.0.7, 198.18.0.8" in err, report
    results = sorted(re.findall(r"^\[(198\.18\.0\.\d):worker:(\d)\] (RESULT .*)$", out, re.M))
    assert results == [(f"198.18.0.{r + 1}", str(r), f"RESULT rank={r} size=4 sum={499500.0 * 10} "
                        "head=[0.0, 10.0, 20.0]") for r in range(4)], report
    first = stamps(out, "FIRST")
    assert len(first) == 4, report
    bring_up = max(first) - start
    print(f"\nbring-up of 4 workers + 4 servers over ssh: {bring_up:.2f} s from the launcher's start "
          f"to the last worker's first push_pull result")
    assert bring_up < 10, report
    assert cluster.wait_clean(5) == {}


def test_without_servers_byteps_plans_advice_places_them(cluster: Cluster, tmp_path: Path) -> None:
    """Four workers and two more hosts, no --servers: byteps plan's advice is the mixed placement (a
    server on every worker host and on both other hosts); the job's sums are exact."""
    (tmp_path / "job.py").write_text(JOB)
    hosts = cluster.hostfile("hosts6", [cluster.ip(i) for i in range(6)])
    rc, out, err, _, _ = run_launcher(cluster, ["--hostfile", str(hosts), "--workers", "4"], [PYTHON, "job.py", "-1"],
                                      tmp_path)
    report = f"rc={rc}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert rc == 0, report
    assert ("6 mixed servers on 198.18.0.1, 198.18.0.2, 198.18.0.3, 198.18.0.4, 198.18.0.5, 198.18.0.6 "
            "(byteps plan: 2 CPU server machines plus a server on each worker machine (mixed)") in err, report
    results = sorted(re.findall(r"^\[(198\.18\.0\.\d):worker:(\d)\] (RESULT .*)$", out, re.M))
    assert results == [(f"198.18.0.{r + 1}", str(r), f"RESULT rank={r} size=4 sum={499500.0 * 10} "
                        "head=[0.0, 10.0, 20.0]") for r in range(4)], report
    assert cluster.wait_clean(5) == {}


def test_a_failing_worker_stops_everything(cluster: Cluster, tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB)
    hosts = cluster.hostfile("hosts8", [cluster.ip(i) for i in range(8)])
    rc, out, err, _, end = run_launcher(cluster, ["--hostfile", str(hosts), "--workers", "4", "--servers", "4"],
                                        [PYTHON, "job.py", "1"], tmp_path)
    report = f"rc={rc}\n--- stdout\n{out}\n--- stderr\n{err}"
    assert rc == 3, report
    assert "198.18.0.2:worker:1 exited with code 3" in err, report
    failed = stamps(out, "FAILING")
    assert len(failed) == 1, report
    teardown = end - failed[0]
    left = cluster.wait_clean(max(0.0, failed[0] + 5 - time.time()))
    clean = time.time() - failed[0]
    print(f"\nteardown after a worker's failure: the launcher exited {teardown:.2f} s after the worker, "
          f"every host had only its sshd left {clean:.2f} s after it")
    assert teardown < 5, report
    assert left == {}, f"processes left on the hosts 5 s after the failure: {left}\n{report}"


def test_sigterm_to_the_launcher(cluster: Cluster, tmp_path: Path) -> None:
    """Two workers (host 1 with slots=2: two local ranks, whose output shares one stream: each
    line is one write, so they cannot interleave), colocated servers by default; the secret
    and an --env pair reach every worker, the secret on no command line; SIGTERM stops it all --
    the ranks ignore SIGTERM, so the remote side's SIGKILL (after its grace) must reach them,
    although bpslaunch started them in sessions of their own."""
    hosts = cluster.hostfile("hosts2", [cluster.ip(0), f"{cluster.ip(1)} slots=2"])
    secret = "ssh-test-secret-5f2a9c"
    digest = hashlib.sha256(secret.encode()).hexdigest()  # the command line shows no secret either
    command = [PYTHON, "-c", "import hashlib, os, signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                             "e = os.environ; os.write(1, ('UP %s %s %s\\n' % (e['BYTEPS_LOCAL_RANK'], "
                             "hashlib.sha256(e['BYTEPS_JOB_SECRET'].encode()).hexdigest() == "
                             f"{digest!r}, e.get('MY_FLAG'))).encode()); time.sleep(60)"]
    proc = cluster.launch(["--hostfile", str(hosts), "--workers", "2", "--env", "MY_FLAG=on"], command, tmp_path,
                          env={"BYTEPS_JOB_SECRET": secret})
    lines = []
    deadline = time.monotonic() + 20
    while sum("] UP " in line for line in lines) < 3 and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
    deadline = time.monotonic() + 10  # the roles' ssh connections complete in any order
    while True:
        cmdlines = [p for procs in cluster.leftovers().values() for p in procs]
        wrappers = [p for p in cmdlines if p.split(" ", 1)[1].startswith(f"{PYTHON} -m byteps.launcher.ssh_remote run")]
        if len(wrappers) >= 5 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        out, err = proc.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    stopped = time.monotonic() - signalled
    print(f"\nSIGTERM to the launcher: it exited {stopped:.2f} s later")
    report = "".join(lines) + out + "\n--- stderr\n" + err
    ups = sorted(line.split("] ", 1)[1].strip() for line in lines if "] UP " in line)
    assert ups == ["UP 0 True on", "UP 0 True on", "UP 1 True on"], report
    assert "2 colocated servers on 198.18.0.1, 198.18.0.2" in err, report
    assert len(wrappers) == 5, "\n".join(cmdlines)  # the scheduler, 2 servers, 2 workers: one ssh_remote each
    assert not [p for p in cmdlines if secret in p], cmdlines
    assert proc.returncode == 143, report
    assert "received SIGTERM" in err, report
    assert stopped < 5, report
    assert cluster.wait_clean(5) == {}


def test_unreachable_hosts_before_anything_starts(cluster: Cluster, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hosts = cluster.hostfile("bad_hosts", [cluster.ip(0), cluster.ip(8), "198.18.0.200"])
    rc, out, err, start, end = run_launcher(
        cluster, ["--hostfile", str(hosts), "--workers", "3", "--ssh-option", "ConnectTimeout=2"],
        ["touch", str(marker)], tmp_path)
    assert rc == 2, (out, err)
    assert f"cannot reach host {cluster.ip(8)} over ssh: ssh: connect to host {cluster.ip(8)} port 22: " \
           "Connection refused" in err, err
    assert "cannot reach host 198.18.0.200 over ssh: ssh: connect to host 198.18.0.200 port 22:" in err, err
    assert f"cannot reach host {cluster.ip(0)}" not in err
    assert not marker.exists() and cluster.wait_clean(3) == {}
    assert end - start < 15


def test_a_host_that_cannot_run_the_remote_helper(cluster: Cluster, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    hosts = cluster.hostfile("hosts2", [cluster.ip(0), cluster.ip(1)])
    rc, out, err, _, _ = run_launcher(cluster, ["--hostfile", str(hosts), "--workers", "2", "--remote-python",
                                                "/nonexistent/python3"], ["touch", str(marker)], tmp_path)
    assert rc == 2, (out, err)
    for i in (0, 1):
        assert f"host {cluster.ip(i)} is reachable over ssh but cannot run /nonexistent/python3 -m " \
               "byteps.launcher.ssh_remote there (exit 127)" in err, err
    assert not marker.exists() and cluster.wait_clean(3) == {}


def test_scheduler_port_in_use(cluster: Cluster, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    port = 23456
    holder = cluster.tb.popen(0, [PYTHON, "-c", f"import socket, time; s = socket.socket(); "
                                  f"s.bind(('{cluster.ip(0)}', {port})); s.listen(); print('held', flush=True); "
                                  "time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        hosts = cluster.hostfile("hosts2", [cluster.ip(0), cluster.ip(1)])
        rc, out, err, _, _ = run_launcher(cluster, ["--hostfile", str(hosts), "--workers", "2",
                                                    "--scheduler-port", str(port)], ["touch", str(marker)], tmp_path)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert rc == 2, (out, err)
    assert f"the scheduler port {port} is already in use on {cluster.ip(0)}" in err, err
    assert "Address already in use" in err, err
    assert not marker.exists() and cluster.wait_clean(3) == {}
