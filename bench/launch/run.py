"""The SSH launcher's bring-up and teardown (issue 33's targets), on an emulated cluster::

    /usr/bin/python3 -m bench.launch.run [--runs 5] [--out bench-results/launch] [--timeout 60]

Needs root (network namespaces) and OpenSSH: the cluster is tools/testbed/sshd.py's, 9 namespace
hosts (198.18.0.1 .. 198.18.0.9) joined by a 1 Gbit/s bridge, an sshd on hosts 0-7, the launcher
(``byteps launch --hostfile``, byteps.launcher.ssh) on host 0.  The job is that module's JOB
(numpy, one push_pull of 4,000 bytes per worker; every sum is checked).  Per run:

* ``ssh bring-up``: 4 workers + 4 servers on 8 hosts (``--workers 4 --servers 4``: a scheduler
  and the workers on hosts 0-3, the servers on hosts 4-7); from the launcher's start to the
  last worker's first push_pull result (the time stamp the worker prints after it);
* ``local bring-up``: the same job under ``bpsrun -n 4 -s 4`` on one host (the machine itself,
  loopback), timed the same way: the baseline; ``ssh / local`` is the ratio of the two in the
  same run, what ssh and the 8 hosts add;
* ``teardown, launcher exit`` and ``teardown, hosts clean``: the 8-host job again with rank 1
  exiting with status 3 right after its first push_pull (the others keep pushing); from that
  worker's exit (its time stamp just before) to the launcher's exit, and to the moment no
  process but its sshd is left on any host (``ip netns pids`` polled every ~0.1 s after the
  launcher's exit; the time is the end of the first empty poll, so it is late by up to one poll,
  whose median duration is in the JSON as ``clean_poll_s``).

The two bring-ups alternate which goes first.  Printed: a table of the median, min and max of each
figure over the runs, issue 33's targets (bring-up < 10 s, teardown < 5 s, both on the medians)
and whether they are met, then ``JSON {...}``, also written to OUT/launch.json.  Exit status 2
when the cluster cannot be made here (the reason is printed), 1 when a job fails, gives a wrong
sum, or leaves a process behind.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

from tools.localjob import hermetic_env
from tools.progress import Progress
from tools.testbed.sshd import JOB, JOB_ENV, PYTHON, Cluster, job_result, ssh_cluster, stamps, why_no_cluster

WORKERS = SERVERS = 4
TARGETS = {"bring_up_s": 10.0, "teardown_s": 5.0}
# key, label, issue 33's target (s) or None
FIGURES = [
    ("ssh_bring_up_s", "bring-up over ssh, 8 hosts (s)", TARGETS["bring_up_s"]),
    ("local_bring_up_s", "bring-up, bpsrun on one host (s)", None),
    ("ssh_over_local", "ssh / local bring-up (ratio)", None),
    ("teardown_exit_s", "teardown: failure -> launcher exit (s)", TARGETS["teardown_s"]),
    ("teardown_clean_s", "teardown: failure -> hosts clean (s)", TARGETS["teardown_s"]),
]
CLEAN_WAIT_S = 30  # how long the hosts may take to empty before the run counts as failed


class BenchError(RuntimeError):
    """A job failed or gave a wrong result (the message holds its output)."""


def check_results(out: str, report: str) -> None:
    found = sorted(re.findall(r"(RESULT rank=\d+ .*)$", out, re.M))
    want = [job_result(r, WORKERS) for r in range(WORKERS)]
    if found != want:
        raise BenchError(f"the workers' results are not {want}\n{report}")


def first_results(out: str, report: str) -> float:
    first = stamps(out, "FIRST")
    if len(first) != WORKERS:
        raise BenchError(f"{len(first)} of {WORKERS} workers printed FIRST\n{report}")
    return max(first)


def hosts_args(cluster: Cluster) -> list[str]:
    hosts = cluster.hostfile("hosts8", [cluster.ip(i) for i in range(8)])
    return ["--hostfile", str(hosts), "--workers", str(WORKERS), "--servers", str(SERVERS)]


def ensure_clean(cluster: Cluster, when: str) -> None:
    left = cluster.wait_clean(10)
    if left:
        raise BenchError(f"processes left on the hosts {when}: {left}")


def ssh_bring_up(cluster: Cluster, work: Path, timeout: float) -> float:
    ensure_clean(cluster, "before the ssh bring-up")
    r = cluster.run(hosts_args(cluster), [PYTHON, "job.py", "-1"], work, timeout)
    if r.returncode != 0 or r.hung:
        raise BenchError(f"the ssh job failed{' (killed at the timeout)' if r.hung else ''}\n{r.report()}")
    check_results(r.stdout, r.report())
    return first_results(r.stdout, r.report()) - r.start


def ssh_teardown(cluster: Cluster, work: Path, timeout: float) -> tuple[float, float, float]:
    """(failure -> launcher exit, failure -> hosts clean, the median poll of the hosts) in s."""
    ensure_clean(cluster, "before the teardown job")
    r = cluster.run(hosts_args(cluster), [PYTHON, "job.py", "1"], work, timeout)
    polls = []
    deadline = time.monotonic() + CLEAN_WAIT_S
    while True:
        t0 = time.time()
        left = cluster.leftovers()
        clean_at = time.time()
        polls.append(clean_at - t0)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    if r.returncode != 3 or r.hung or "198.18.0.2:worker:1 exited with code 3" not in r.stderr:
        raise BenchError(f"the teardown job did not end with worker 1's exit status 3\n{r.report()}")
    failed = stamps(r.stdout, "FAILING")
    if len(failed) != 1:
        raise BenchError(f"worker 1 printed {len(failed)} FAILING lines, not 1\n{r.report()}")
    if left:
        raise BenchError(f"processes left on the hosts {CLEAN_WAIT_S} s after the launcher's exit: {left}")
    return r.end - failed[0], clean_at - failed[0], statistics.median(polls)


def local_bring_up(work: Path, timeout: float) -> float:
    """``bpsrun -n 4 -s 4`` with JOB on this machine (loopback), in s to the last first result."""
    argv = [PYTHON, "-m", "byteps.launcher.bpsrun", "-n", str(WORKERS), "-s", str(SERVERS), "--timeout",
            str(timeout), "--", PYTHON, "job.py", "-1"]
    start = time.time()
    proc = subprocess.Popen(argv, env=hermetic_env(JOB_ENV), cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout + 10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        raise BenchError(f"bpsrun did not end within {timeout + 10} s\n{out}\n{err}") from None
    report = f"rc={proc.returncode}\n--- stdout\n{out}\n--- stderr\n{err}"
    if proc.returncode != 0:
        raise BenchError(f"the bpsrun job failed\n{report}")
    check_results(out, report)
    return first_results(out, report) - start


def one_run(cluster: Cluster, work: Path, index: int, timeout: float) -> dict:
    if index % 2 == 0:
        ssh = ssh_bring_up(cluster, work, timeout)
        local = local_bring_up(work, timeout)
    else:
        local = local_bring_up(work, timeout)
        ssh = ssh_bring_up(cluster, work, timeout)
    exit_s, clean_s, poll_s = ssh_teardown(cluster, work, timeout)
    return {"ssh_bring_up_s": ssh, "local_bring_up_s": local, "ssh_over_local": ssh / local,
            "teardown_exit_s": exit_s, "teardown_clean_s": clean_s, "clean_poll_s": poll_s}


def summarize(runs: list[dict]) -> dict:
    """Per figure: median, min, max over the runs, its target and whether the median meets it."""
    out = {}
    for key, label, target in FIGURES:
        values = [r[key] for r in runs]
        med = statistics.median(values)
        out[key] = {"label": label, "median": med, "min": min(values), "max": max(values), "target": target,
                    "meets_target": None if target is None else med < target}
    out["clean_poll_s"] = statistics.median(r["clean_poll_s"] for r in runs)
    return out


def table(summary: dict, runs: int) -> str:
    lines = [f"byteps launch --hostfile (issue 33): {WORKERS} workers + {SERVERS} servers on 8 testbed hosts over "
             f"ssh; bpsrun -n {WORKERS} -s {SERVERS} on one host as the baseline; {runs} run{'s' if runs > 1 else ''}",
             f"{'figure':<40} {'median':>7} {'min':>7} {'max':>7} {'target':>7} {'met':>4}"]
    for key, _, target in FIGURES:
        f = summary[key]
        met = "-" if target is None else ("yes" if f["meets_target"] else "NO")
        tgt = "-" if target is None else f"< {target:g}"
        lines.append(f"{f['label']:<40} {f['median']:7.2f} {f['min']:7.2f} {f['max']:7.2f} {tgt:>7} {met:>4}")
    lines.append(f"(hosts clean: polled with `ip netns pids`, median poll {summary['clean_poll_s'] * 1e3:.0f} ms)")
    return "\n".join(lines)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("bench-results/launch"),
                    help="folder for launch.json (default: bench-results/launch)")
    ap.add_argument("--timeout", type=float, default=60, help="per job, s")
    a = ap.parse_args(argv)
    if a.runs < 1 or a.timeout <= 0:
        ap.error("--runs must be >= 1 and --timeout > 0")
    reason = why_no_cluster()
    if reason:
        print(f"bench.launch: cannot make the ssh cluster here: {reason}", file=sys.stderr)
        return 2
    started = datetime.datetime.now(datetime.timezone.utc)
    runs = []
    try:
        with Progress(a.runs + 1, "launch") as progress, tempfile.TemporaryDirectory(prefix="bench-launch-") as tmp:
            work = Path(tmp)
            (work / "job.py").write_text(JOB)
            progress.step("the cluster: 9 namespace hosts, sshd on 8")
            cluster_dir = work / "cluster"
            cluster_dir.mkdir()
            with ssh_cluster(cluster_dir) as cluster:
                for i in range(a.runs):
                    progress.step(f"run {i + 1} of {a.runs}")
                    runs.append(one_run(cluster, work, i, a.timeout))
    except BenchError as e:
        print(f"bench.launch: run {len(runs) + 1}: {e}", file=sys.stderr)
        return 1
    summary = summarize(runs)
    print(table(summary, a.runs))
    record = {"benchmark": "launch", "date": started.strftime("%Y-%m-%dT%H:%M:%SZ"), "cpus": os.cpu_count(),
              "command": "python3 -m bench.launch.run " + " ".join(sys.argv[1:] if argv is None else argv),
              "workers": WORKERS, "servers": SERVERS, "hosts": 8, "runs": runs, "summary": summary,
              "targets": TARGETS}
    print("JSON " + json.dumps(record))
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "launch.json").write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
