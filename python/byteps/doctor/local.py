"""The checks each worker runs on its own machine before joining the job.

Pure functions of the values read (so tests pass fake ones), plus :func:`run_local_checks`
which reads them from the OS and the environment.
"""

from __future__ import annotations

import os
import resource
from typing import Mapping, Optional

from .findings import ERROR, OK, WARNING, Finding

# File descriptors besides the connections to the servers: the scheduler's, the worker's own
# listening sockets, shared-memory segments, Python's own files and the framework's.
FD_MARGIN = 64
FD_WARN_BELOW = 1024
# The most connections per server the core opens when BYTEPS_CONNECTIONS_PER_PEER is unset (the
# start-up probe may raise it from 2 up to this).
MAX_CONNECTIONS_PER_PEER = 16
SHM_MIN_BYTES = 256 << 20
MiB = 1 << 20


def fds_needed(servers: int, connections_per_peer: int) -> int:
    """Descriptors a worker needs: every connection to every server, both directions' sockets
    counted twice (data and its pair) as the spec of the check says, plus a margin."""
    return servers * connections_per_peer * 2 + FD_MARGIN


def check_open_files(soft: int, hard: int, servers: int, connections_per_peer: int) -> Finding:
    need = fds_needed(servers, connections_per_peer)
    soft_text = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    figure = f"RLIMIT_NOFILE soft limit {soft_text} (hard {'unlimited' if hard == resource.RLIM_INFINITY else hard}), " \
             f"this job needs at least {need} ({servers} servers x {connections_per_peer} connections x 2 + {FD_MARGIN})"
    if soft != resource.RLIM_INFINITY and soft < need:
        return Finding("open files", ERROR, figure,
                       f"raise the limit to at least {max(need, FD_WARN_BELOW)}: `ulimit -n 65536` before "
                       f"starting the worker (systemd: LimitNOFILE=, docker: --ulimit nofile=65536:65536)")
    if soft != resource.RLIM_INFINITY and soft < FD_WARN_BELOW:
        return Finding("open files", WARNING, figure,
                       f"raise it to at least {FD_WARN_BELOW} (`ulimit -n 65536`): data loaders and "
                       f"frameworks open files of their own")
    return Finding("open files", OK, figure)


def check_shm(total_bytes: Optional[int], local_size: int, path: str = "/dev/shm") -> Finding:
    """/dev/shm must hold the local reduction's segments when several workers share a machine."""
    if local_size <= 1:
        size = "absent" if total_bytes is None else f"{total_bytes / MiB:.0f} MiB"
        return Finding("shared memory", OK, f"{path} {size}; not used (BYTEPS_LOCAL_SIZE={local_size})")
    if total_bytes is None:
        return Finding("shared memory", ERROR,
                       f"{path} does not exist, and BYTEPS_LOCAL_SIZE={local_size} workers share this machine "
                       f"through shared memory",
                       f"mount a tmpfs there: `mount -t tmpfs -o size=1g tmpfs {path}` (docker: --shm-size=1g)")
    figure = f"{path} {total_bytes / MiB:.0f} MiB for BYTEPS_LOCAL_SIZE={local_size} workers (need at least " \
             f"{SHM_MIN_BYTES // MiB} MiB)"
    if total_bytes < SHM_MIN_BYTES:
        return Finding("shared memory", ERROR, figure,
                       f"enlarge it: docker --shm-size=1g (Docker's default is 64 MiB), or "
                       f"`mount -o remount,size=1g {path}`")
    return Finding("shared memory", OK, figure)


def check_secret(env: Mapping[str, str]) -> Finding:
    if env.get("BYTEPS_JOB_SECRET"):
        return Finding("job secret", OK, "BYTEPS_JOB_SECRET is set")
    return Finding("job secret", WARNING,
                   "BYTEPS_JOB_SECRET is not set: anyone who can reach the job's ports can join it",
                   "set the same BYTEPS_JOB_SECRET on every node (bpsrun and bpslaunch set one for you)")


def _int_env(env: Mapping[str, str], name: str, default: int) -> int:
    try:
        return int(env.get(name, default))
    except ValueError:
        return default  # the core's init names the bad value


def shm_bytes(path: str = "/dev/shm") -> Optional[int]:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


def run_local_checks(env: Mapping[str, str]) -> list[Finding]:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    servers = _int_env(env, "DMLC_NUM_SERVER", 1)
    conns = _int_env(env, "BYTEPS_CONNECTIONS_PER_PEER", 0) or MAX_CONNECTIONS_PER_PEER
    return [check_open_files(soft, hard, servers, conns),
            check_shm(shm_bytes(), _int_env(env, "BYTEPS_LOCAL_SIZE", 1)),
            check_secret(env)]
