"""A testbed (tools/testbed) whose hosts run an OpenSSH server: the ground for ``byteps launch
--hostfile`` (byteps.launcher.ssh), shared by tests/python/test_ssh_launch.py and
bench/launch/run.py.

:func:`ssh_cluster` makes ``N_HOSTS`` (9) namespace hosts, 198.18.0.1 .. 198.18.0.9; hosts 0-7
run ``sshd -D`` with a config and keys of their own, written into the caller's folder (an
ed25519 host key, a user key whose public half is the only authorized key), listening on the
host's address only; host 8 runs none (an unreachable host).  On leaving the block every sshd is
stopped and the namespaces are deleted (whatever still runs there is killed).

:class:`Cluster` starts the launcher on host 0 (as a user would on the first host), writes
hostfiles, and lists what runs on the hosts besides the sshd listeners (``leftovers``,
``wait_clean``).  ``JOB`` is a numpy push_pull job that prints time-stamped lines (its first
result, and the moment a chosen rank fails); :func:`stamps` reads them back.

:func:`why_no_cluster` says why the cluster cannot be made here ("" when it can).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

from tools.localjob import hermetic_env, missing_core
from tools.testbed.netns import Testbed

N_HOSTS = 9  # hosts 0-7 run sshd; host 8 does not
SSHD = "/usr/sbin/sshd"
STEP_TIMEOUT = 60
PYTHON = sys.executable
LAUNCH = [PYTHON, "-m", "byteps.launcher.ssh"]
# The launcher's environment: short start/operation timeouts (nothing may hang for long), warnings.
JOB_ENV = {"BYTEPS_START_TIMEOUT": "20", "BYTEPS_TIMEOUT": "20", "BYTEPS_LOG_LEVEL": "WARNING"}


class ClusterError(RuntimeError):
    """The sshd cluster could not be made (an sshd did not start)."""


@dataclass
class LaunchResult:
    """One run of the launcher: exit status, output, wall-clock start and end (``time.time()``,
    comparable with the job's stamps), and whether it had to be killed at the timeout."""
    returncode: int
    stdout: str
    stderr: str
    start: float
    end: float
    hung: bool

    def __iter__(self):  # rc, out, err, start, end = result
        return iter((self.returncode, self.stdout, self.stderr, self.start, self.end))

    def report(self) -> str:
        return f"rc={self.returncode}\n--- stdout\n{self.stdout}\n--- stderr\n{self.stderr}"


class Cluster:
    def __init__(self, tb: Testbed, work: Path, sshd: list[subprocess.Popen]) -> None:
        self.tb, self.work, self.sshd = tb, work, sshd
        self.key = work / "user_key"

    def ip(self, i: int) -> str:
        return self.tb.hosts[i].ip

    def ssh_args(self) -> list[str]:
        return ["--ssh-identity", str(self.key), "--ssh-option", "UserKnownHostsFile=/dev/null",
                "--ssh-option", "StrictHostKeyChecking=no", "--ssh-option", "LogLevel=ERROR"]

    def hostfile(self, name: str, lines: list[str]) -> Path:
        path = self.work / name
        path.write_text("".join(f"{line}\n" for line in lines))
        return path

    def launch(self, args: list[str], command: list[str], cwd: Path,
               env: Optional[dict[str, str]] = None) -> subprocess.Popen:
        """The launcher on host 0 (its own session)."""
        return self.tb.popen(0, [*LAUNCH, *args, *self.ssh_args(), "--", *command],
                             env=hermetic_env({**JOB_ENV, **(env or {})}), cwd=cwd,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def run(self, args: list[str], command: list[str], cwd: Path, timeout: float = STEP_TIMEOUT) -> LaunchResult:
        """The launcher on host 0 until it exits; killed (its process group) after ``timeout`` s."""
        start = time.time()
        proc = self.launch(args, command, cwd)
        hung = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            hung = True
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        end = time.time()
        return LaunchResult(proc.returncode, out, err, start, end, hung)

    def leftovers(self) -> dict[str, list[str]]:
        """Per host, the processes other than its sshd listener (``ip netns pids``)."""
        allowed = {p.pid for p in self.sshd}
        left = {}
        for h in self.tb.hosts:
            out = subprocess.run(["ip", "netns", "pids", h.namespace], capture_output=True, text=True,
                                 timeout=STEP_TIMEOUT).stdout.split()
            procs = []
            for pid in map(int, out):
                if pid not in allowed:
                    try:
                        procs.append(f"{pid} {Path(f'/proc/{pid}/cmdline').read_text().replace(chr(0), ' ')}")
                    except OSError:
                        pass  # gone meanwhile
            if procs:
                left[h.name] = procs
        return left

    def wait_clean(self, seconds: float) -> dict[str, list[str]]:
        """Polls :meth:`leftovers` until none is left or ``seconds`` have passed; the last answer."""
        deadline = time.monotonic() + seconds
        while True:
            left = self.leftovers()
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)


def why_no_cluster() -> str:
    ok, reason = Testbed.available()
    if not ok:
        return f"no emulated cluster here: {reason}"
    for tool in (SSHD, shutil.which("ssh"), shutil.which("ssh-keygen")):
        if not tool or not os.access(tool, os.X_OK):
            return "OpenSSH is not installed (apt-get install openssh-server openssh-client)"
    return missing_core() or ""


def sshd_config(work: Path, i: int, ip: str) -> Path:
    path = work / f"sshd{i}.conf"
    path.write_text(f"ListenAddress {ip}\nHostKey {work / 'host_key'}\nAuthorizedKeysFile {work / 'authorized_keys'}\n"
                    "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                    f"UsePAM no\nStrictModes no\nPidFile {work / f'sshd{i}.pid'}\n")
    return path


def wait_for_sshd(tb: Testbed, ips: list[str], seconds: float = 10) -> None:
    """Returns once every address accepts a TCP connection on port 22 (probed from host 0);
    raises ClusterError naming the first address that does not within ``seconds``."""
    probe = textwrap.dedent("""
        import socket, sys, time
        end = time.monotonic() + float(sys.argv[1])
        for ip in sys.argv[2:]:
            while True:
                try:
                    socket.create_connection((ip, 22), timeout=1).close()
                    break
                except OSError:
                    if time.monotonic() > end:
                        sys.exit(f"no sshd on {ip}")
                    time.sleep(0.05)
        """)
    r = tb.run(0, [PYTHON, "-c", probe, str(seconds), *ips], timeout=seconds + 10)
    if r.returncode != 0:
        raise ClusterError(f"sshd did not start on the testbed: {r.stderr.strip()} "
                           f"(its log: sshd<i>.log in the cluster's folder)")


@contextlib.contextmanager
def ssh_cluster(work: Path, n_hosts: int = N_HOSTS) -> Iterator[Cluster]:
    """The testbed of ``n_hosts`` hosts, an sshd on all but the last; keys, configs and the sshd
    logs in ``work`` (an existing folder).  Everything is stopped and deleted on leaving."""
    for key in ("host_key", "user_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(work / key)], check=True,
                       timeout=STEP_TIMEOUT)
    shutil.copy(work / "user_key.pub", work / "authorized_keys")
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    tb = Testbed(n_hosts, rate_mbit=1000)
    sshd: list[subprocess.Popen] = []
    try:
        for i in range(n_hosts - 1):
            with open(work / f"sshd{i}.log", "wb") as log:
                sshd.append(tb.popen(i, [SSHD, "-D", "-e", "-f", str(sshd_config(work, i, tb.hosts[i].ip))],
                                     stdout=log, stderr=subprocess.STDOUT))
        wait_for_sshd(tb, [h.ip for h in tb.hosts[:n_hosts - 1]])
        yield Cluster(tb, work, sshd)
    finally:
        for proc in sshd:
            if proc.poll() is None:
                proc.terminate()
        for proc in sshd:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        tb.close()


# --------------------------------------------------------------------------------------------
# The job: ``python job.py FAIL_RANK`` (-1: none fails).  Every worker prints FIRST (time-stamped)
# after its first push_pull, then its RESULT; rank FAIL_RANK prints FAILING (time-stamped) and
# exits 3 at once, the others go on pushing for up to 40 s, until the launcher stops them.

JOB = """
import os, sys, time
import numpy as np
import byteps.numpy as bps
fail_rank = int(sys.argv[1])
bps.init()
rank = bps.rank()
x = np.arange(1000, dtype=np.float32) * (rank + 1)
total = bps.push_pull(x, average=False, name="ssh.x")
print(f"FIRST rank={rank} t={time.time():.3f}", flush=True)
print(f"RESULT rank={rank} size={bps.size()} sum={float(total.sum())} head={total[:3].tolist()}", flush=True)
if rank == fail_rank:
    print(f"FAILING t={time.time():.3f}", flush=True)
    os._exit(3)
if fail_rank >= 0:  # the others go on until the launcher stops them
    end = time.monotonic() + 40
    while time.monotonic() < end:
        bps.push_pull(x, average=False, name="ssh.loop")
bps.shutdown()
"""


def job_result(rank: int, workers: int) -> str:
    """The RESULT line JOB's rank prints in a job of ``workers`` workers (exact float32 sums)."""
    scale = workers * (workers + 1) // 2
    return f"RESULT rank={rank} size={workers} sum={499500.0 * scale} head={[0.0, 1.0 * scale, 2.0 * scale]}"


def stamps(out: str, word: str) -> list[float]:
    """The times (``time.time()``) of JOB's lines starting with ``word`` (FIRST, FAILING)."""
    return [float(t) for t in re.findall(rf"{word} (?:rank=\d+ )?t=([\d.]+)", out)]
