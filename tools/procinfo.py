"""What /proc and /dev/shm tell about a byteps job on this machine, for tests and fault trials.

* :func:`job_processes`: the live processes of a job, found by the job's unique
  ``BYTEPS_JOB_SECRET`` in their environment, so grandchildren count too;
* :func:`shm_leftovers`: its shared-memory segments, named by the job token the core derives
  from the secret (:func:`job_token`);
* :func:`vm_rss_kib`: a process's resident memory;
* :func:`listening`: whether something listens on a TCP port, read from /proc/net/tcp*, so
  that no probe connection disturbs the listener (a service counts every connection).
"""

from __future__ import annotations

import os
from typing import Optional


def job_token(secret: str) -> str:
    """The token the core names a job's shared memory with (src/worker/engine.cc JobToken):
    FNV-1a 64 of the secret, its low 48 bits in hex."""
    h = 1469598103934665603
    for ch in secret.encode():
        h = ((h ^ ch) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h & 0xFFFFFFFFFFFF:012x}"


def shm_leftovers(secret: str) -> list[str]:
    """Names of /dev/shm segments of the job with this secret."""
    token = job_token(secret)
    try:
        names = os.listdir("/dev/shm")
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith("byteps") and token in n)


def job_processes(secret: str) -> list[int]:
    """PIDs of live (non-zombie) processes whose environment holds BYTEPS_JOB_SECRET=secret."""
    needle = f"BYTEPS_JOB_SECRET={secret}".encode()
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read()
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        state = stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3]
        if state in (b"Z", b"X"):
            continue
        if needle in env.split(b"\0"):
            found.append(int(entry))
    return found


def vm_rss_kib(pid: int) -> Optional[int]:
    """VmRSS of a process in KiB, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def listening(port: int) -> bool:
    """Does a socket listen on TCP *port* (any address, IPv4 or IPv6)?"""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False
