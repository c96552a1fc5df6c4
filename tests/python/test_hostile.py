"""Hostile peers against a real scheduler and a real server.

Every test starts a scheduler and one server of a 2-worker job with a job secret (so every
connection must authenticate, docs/wire-format.md) and a short BYTEPS_AUTH_TIMEOUT, attacks one
of them (the ``target``) from this process, then checks that:

* the target still runs and refused the peer: it closed the connection, and its log names the
  peer (``127.0.0.1:<our port>``);
* its resident memory (VmRSS) grew by less than a small bound (lengths from the wire must be
  bounded before anything is allocated, and refused connections must not pin memory);
* the job still works: two real workers then join and push_pull with exact results, and every
  process exits 0.

Authentication as specified (tools/rawwire.py builds the frames): each side's first frame is AuthChallenge (opcode 23, a 32-byte
nonce); each answers the other's with AuthResponse (opcode 24) = HMAC-SHA256(secret,
b"byteps-auth-v1" + role + peer_nonce + own_nonce), role b"C" from the connecting side, b"A" from
the accepting side.  ``test_handshake_with_the_right_secret`` checks this implementation against
the core (the service's proof must verify), so that the wrong-secret tests mean something.
"""

from __future__ import annotations

import errno
import hmac
import os
import random
import resource
import secrets
import selectors
import socket
import time

import pytest

from conftest import free_port, write_script  # conftest puts tools/ on sys.path
from tools.procinfo import listening, vm_rss_kib
from tools.rawwire import (AUTH_CHALLENGE, AUTH_RESPONSE, HELLO, PUSH_PULL, REGISTER, checkout_version, closed_within,
                           frame, proof, read_frame, wire_version)

pytestmark = pytest.mark.usefixtures("require_core")

AUTH_TIMEOUT_S = 1.5
WRONG_VERSION = checkout_version() + 1  # another release's frames
MAX_CONNECTIONS = 512
RSS_BOUND_KIB = 8 * 1024  # a real job runs in between (buffer pool, allocator caches); a leak per bad input would exceed it
FLOOD_RSS_BOUND_KIB = 16 * 1024  # after 2000 connections were opened and dropped
SERVICE_ENV = {"BYTEPS_AUTH_TIMEOUT": str(AUTH_TIMEOUT_S), "BYTEPS_MAX_CONNECTIONS": str(MAX_CONNECTIONS),
               "BYTEPS_START_TIMEOUT": "30", "BYTEPS_TIMEOUT": "20"}


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


# --------------------------------------------------------------------------------------------
# the service under attack and the job that must still work

# job.py ROUNDS PAUSE: ROUNDS exact push_pulls, "ROUND <i>" after each, PAUSE seconds apart.
JOB = """
import sys, time
import numpy as np
import byteps.numpy as bps
rounds, pause = int(sys.argv[1]), float(sys.argv[2])
bps.init()
rank, n = bps.rank(), bps.size()
for it in range(rounds):
    x = (np.arange(30000, dtype=np.int32) % 977) * (it + 1) + rank
    out = bps.push_pull(x, average=False, name="h")
    want = (np.arange(30000, dtype=np.int32) % 977) * (it + 1) * n + n * (n - 1) // 2
    assert np.array_equal(out, want), f"round {it}: wrong sum"
    print(f"ROUND {it}", flush=True)
    time.sleep(pause)
bps.shutdown()
print("JOB OK", flush=True)
"""


class Service:
    """A scheduler and one server of a 2-worker job; ``target`` is the one attacked."""

    def __init__(self, cluster, target: str, extra: dict | None = None) -> None:
        self.cluster = cluster
        self.secret = secrets.token_hex(16)
        self.server_port = free_port()
        self.env = cluster.env(2, 1, {**SERVICE_ENV, "BYTEPS_JOB_SECRET": self.secret,
                                      "BYTEPS_PARTITION_BYTES": "16384", **(extra or {})})
        self.scheduler = cluster.scheduler(self.env)
        self.server = cluster.server(0, {**self.env, "DMLC_PORT": str(self.server_port)})
        self.proc = self.scheduler if target == "scheduler" else self.server
        self.port = cluster.port if target == "scheduler" else self.server_port
        self.target = target
        deadline = time.monotonic() + 10
        while not (listening(cluster.port) and listening(self.server_port)):
            assert time.monotonic() < deadline, f"the services do not listen\n{cluster.dump()}"
            assert self.scheduler.popen.poll() is None and self.server.popen.poll() is None, cluster.dump()
            time.sleep(0.02)
        if wire_version() is None:
            with self.connect() as probe:  # its challenge tells the version (and that auth is on)
                probe.settimeout(5)
                opcode, _, _ = read_frame(probe)
                assert opcode == AUTH_CHALLENGE, f"the {target} did not open with an AuthChallenge: {opcode}"
        time.sleep(0.3)  # the server registers with the scheduler; memory settles
        self.rss_before = self.rss_kib()

    def connect(self, timeout: float = 5.0) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.port), timeout=timeout)

    def alive(self) -> None:
        assert self.proc.popen.poll() is None, f"the {self.target} died\n{self.cluster.dump()}"

    def rss_kib(self) -> int:
        rss = vm_rss_kib(self.proc.popen.pid)
        assert rss is not None, f"no VmRSS for the {self.target}\n{self.cluster.dump()}"
        return rss

    def rss_growth_kib(self) -> int:
        self.alive()
        return self.rss_kib() - self.rss_before

    def logged(self, peer_ports: list[int], timeout: float = 3.0) -> None:
        """Every peer is named in the target's log (the refusal is logged with the peer)."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.proc.output
            missing = [p for p in peer_ports if f"127.0.0.1:{p}" not in out]
            if not missing:
                return
            if time.monotonic() > deadline:
                pytest.fail(f"the {self.target}'s log does not name the refused peers 127.0.0.1:{missing}\n{out}")
            time.sleep(0.05)

    def start_workers(self, rounds: int, pause: float) -> None:
        script = write_script(self.cluster.dir, JOB, name="job.py")
        for i in range(2):
            self.cluster.worker(f"worker:{i}", script, {**self.env, "DMLC_WORKER_ID": str(i)},
                                args=(str(rounds), str(pause)))

    def run_job(self) -> None:
        """Two real workers join and finish; every process exits 0."""
        self.start_workers(rounds=10, pause=0)
        self.cluster.wait(timeout=30)
        assert not self.cluster.leftovers(), f"did not exit: {self.cluster.leftovers()}\n{self.cluster.dump()}"
        for proc in self.cluster.procs.values():
            assert proc.returncode == 0, self.cluster.dump()
        assert all("JOB OK" in self.cluster.procs[f"worker:{i}"].output for i in range(2)), self.cluster.dump()


@pytest.fixture(params=["scheduler", "server"])
def service(request, cluster):
    return lambda **kw: Service(cluster, request.param, **kw)


def refused(svc: Service, payload: bytes, then_close: bool = False, timeout: float = 3.0,
            stream_bytes: int = 0) -> int:
    """Sends *payload* on a fresh connection (then *stream_bytes* more, as long as the service
    reads them); the service must close the connection within *timeout* (at once when
    *then_close*: we close, it must just survive).  Returns our port (the peer's name)."""
    with svc.connect() as s:
        port = s.getsockname()[1]
        s.sendall(payload)
        chunk = bytes(1 << 20)
        sent = 0
        try:
            while sent < stream_bytes:
                s.settimeout(5)
                s.sendall(chunk)
                sent += len(chunk)
        except OSError:
            pass  # the service closed it: what we want
        if then_close:
            return port
        took = closed_within(s, timeout)
        assert took is not None, f"the {svc.target} did not close the connection within {timeout}s " \
                                 f"after {payload[:64]!r}\n{svc.proc.output}"
    return port


# --------------------------------------------------------------------------------------------
# malformed input before authentication

CASES = {
    "random_garbage": lambda rng: bytes(rng.getrandbits(8) for _ in range(65536)),
    "http_request": lambda rng: b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
    "wrong_magic": lambda rng: frame(AUTH_CHALLENGE, os.urandom(32), magic=0xDEADBEEF),
    "wrong_version": lambda rng: frame(AUTH_CHALLENGE, os.urandom(32), version=WRONG_VERSION),
    "unknown_opcode": lambda rng: frame(200, b"x" * 16),
    "hello_before_auth": lambda rng: frame(HELLO, sender=0),
    "register_before_auth": lambda rng: frame(REGISTER, (
        b'{"role": "worker", "requested_rank": 0, "host": "127.0.0.1", "port": 0, "pid": 1, '
        b'"num_workers": 2, "num_servers": 1, "job_secret_hash": ""}')),
    "push_before_auth": lambda rng: frame(PUSH_PULL, bytes(64), key=1 << 16),
    "auth_response_first": lambda rng: frame(AUTH_RESPONSE, bytes(32)),
    "challenge_wrong_length": lambda rng: frame(AUTH_CHALLENGE, bytes(5)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_malformed_first_frame(service, case):
    svc = service()
    port = refused(svc, CASES[case](random.Random(case)))
    svc.logged([port])
    if case == "wrong_version":
        assert f"version {WRONG_VERSION}" in svc.proc.output, svc.proc.output
    assert svc.rss_growth_kib() < RSS_BOUND_KIB
    svc.run_job()


@pytest.mark.parametrize("announced", [1 << 40, 512 << 20], ids=["1TB", "512MiB"])
def test_huge_announced_length(service, announced):
    # The header announces a huge payload, then 32 MiB actually follow (as long as the service
    # keeps reading): nothing of that size may be allocated, nor the bytes kept.
    svc = service()
    ports = [refused(svc, frame(AUTH_CHALLENGE, payload_len=announced), stream_bytes=32 << 20),
             refused(svc, frame(PUSH_PULL, payload_len=announced, key=1 << 16), stream_bytes=32 << 20)]
    svc.logged(ports)
    assert svc.rss_growth_kib() < RSS_BOUND_KIB, f"VmRSS grew by {svc.rss_growth_kib()} KiB"
    svc.run_job()


@pytest.mark.parametrize("cut", ["header", "payload"])
def test_truncated_then_close(service, cut):
    # A frame cut short, then we hang up: the service forgets the connection and goes on.
    svc = service()
    whole = frame(AUTH_CHALLENGE, os.urandom(32))
    for _ in range(20):
        refused(svc, whole[:20] if cut == "header" else whole[:48 + 10], then_close=True)
    time.sleep(0.3)
    assert svc.rss_growth_kib() < RSS_BOUND_KIB
    svc.run_job()


# --------------------------------------------------------------------------------------------
# authentication


def test_handshake_with_the_right_secret(service):
    # The positive control: with the job's secret the service's proof verifies and it keeps the
    # connection; garbage after that is still a protocol error that closes it.
    svc = service()
    with svc.connect() as s:
        port = s.getsockname()[1]
        own = os.urandom(32)
        s.sendall(frame(AUTH_CHALLENGE, own))
        opcode, version, peer_nonce = read_frame(s)
        assert (opcode, version, len(peer_nonce)) == (AUTH_CHALLENGE, wire_version(), 32), (opcode, version)
        s.sendall(frame(AUTH_RESPONSE, proof(svc.secret.encode(), b"C", peer_nonce, own)))
        opcode, _, theirs = read_frame(s)
        assert opcode == AUTH_RESPONSE
        assert hmac.compare_digest(theirs, proof(svc.secret.encode(), b"A", own, peer_nonce)), \
            "the service's AuthResponse does not verify with the job's secret"
        assert closed_within(s, AUTH_TIMEOUT_S + 1) is None, "authenticated, yet dropped"
        s.sendall(frame(200))
        assert closed_within(s, 3) is not None, "garbage after authentication was not refused"
    svc.logged([port])
    svc.run_job()


@pytest.mark.parametrize("how", ["wrong_secret", "empty_secret", "reflection"])
def test_wrong_secret_refused(service, how):
    # wrong_secret / empty_secret: our proof is made with another secret.  reflection: we send
    # the service's own nonce back as our challenge and return the proof it computes for it
    # (the role byte must make that useless).
    svc = service()
    with svc.connect() as s:
        port = s.getsockname()[1]
        s.settimeout(5)
        own = os.urandom(32)
        if how != "reflection":
            s.sendall(frame(AUTH_CHALLENGE, own))
        opcode, _, peer_nonce = read_frame(s)
        assert opcode == AUTH_CHALLENGE, opcode
        if how == "reflection":
            s.sendall(frame(AUTH_CHALLENGE, peer_nonce))
            s.settimeout(1)
            try:
                opcode, _, theirs = read_frame(s)  # its answer to "our" challenge, if it answers first
            except (socket.timeout, ConnectionError):
                opcode, theirs = None, bytes(32)
            s.sendall(frame(AUTH_RESPONSE, theirs if opcode == AUTH_RESPONSE else bytes(32)))
        else:
            secret = b"not the job's secret" if how == "wrong_secret" else b""
            s.sendall(frame(AUTH_RESPONSE, proof(secret, b"C", peer_nonce, own)))
        took = closed_within(s, 3)
        assert took is not None, f"the {svc.target} kept a connection that failed authentication"
    svc.logged([port])
    assert svc.rss_growth_kib() < RSS_BOUND_KIB
    svc.run_job()


# --------------------------------------------------------------------------------------------
# connections that say nothing, or too little, or too many


def test_silent_connections_dropped_after_auth_timeout(service):
    svc = service()
    socks = [svc.connect() for _ in range(5)]
    try:
        ports = [s.getsockname()[1] for s in socks]
        start = time.monotonic()
        for s in socks:
            took = closed_within(s, AUTH_TIMEOUT_S + 3 - (time.monotonic() - start))
            assert took is not None, f"a silent connection was kept past BYTEPS_AUTH_TIMEOUT={AUTH_TIMEOUT_S}"
        elapsed = time.monotonic() - start
        assert elapsed >= AUTH_TIMEOUT_S * 0.7, f"dropped after {elapsed:.2f}s, before BYTEPS_AUTH_TIMEOUT"
    finally:
        for s in socks:
            s.close()
    svc.logged(ports)
    svc.run_job()


def test_trickling_connection_dropped_after_auth_timeout(service):
    # One byte of a valid challenge every 0.2 s: the deadline is for finishing the handshake,
    # not an idle timer that every byte resets.
    svc = service()
    data = frame(AUTH_CHALLENGE, os.urandom(32))
    with svc.connect() as s:
        port = s.getsockname()[1]
        start = time.monotonic()
        closed = False
        for i in range(len(data) - 1):
            try:
                s.sendall(data[i:i + 1])
            except OSError:
                closed = True
                break
            if closed_within(s, 0.2) is not None:
                closed = True
                break
        elapsed = time.monotonic() - start
        assert closed and elapsed < AUTH_TIMEOUT_S + 2, f"trickle not dropped ({elapsed:.1f}s)"
    svc.logged([port])
    svc.run_job()


def test_flood_of_connections(service):
    # 2000 connections at once, none saying anything.  The target holds at most
    # BYTEPS_MAX_CONNECTIONS of them (file descriptors), drops every one (refused beyond the
    # limit, or at BYTEPS_AUTH_TIMEOUT), does not keep their memory, and the job then runs.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2200:
        if hard < 2200:
            pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < 2200")
        resource.setrlimit(resource.RLIMIT_NOFILE, (2200, hard))
    svc = service()
    fds_before = open_fds(svc.proc.popen.pid)
    socks, sel = [], selectors.DefaultSelector()
    try:
        for _ in range(2000):
            s = socket.socket()
            s.setblocking(False)
            err = s.connect_ex(("127.0.0.1", svc.port))
            assert err in (0, errno.EINPROGRESS), os.strerror(err)
            socks.append(s)
            sel.register(s, selectors.EVENT_READ)
        most_fds = 0
        open_socks = set(socks)
        rounds = -(-2000 // MAX_CONNECTIONS)  # each batch may wait a full auth timeout
        deadline = time.monotonic() + rounds * AUTH_TIMEOUT_S + 5
        while open_socks and time.monotonic() < deadline:
            most_fds = max(most_fds, open_fds(svc.proc.popen.pid))
            for key, _ in sel.select(timeout=0.1):
                s = key.fileobj
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                if not data:  # closed (or reset) by the service
                    sel.unregister(s)
                    open_socks.discard(s)
        svc.alive()
        assert not open_socks, f"{len(open_socks)} of 2000 connections still open after {rounds} auth timeouts"
        assert most_fds <= fds_before + MAX_CONNECTIONS + 8, \
            f"the {svc.target} held {most_fds - fds_before} connections (BYTEPS_MAX_CONNECTIONS={MAX_CONNECTIONS})"
    finally:
        sel.close()
        for s in socks:
            s.close()
    time.sleep(0.3)
    growth = svc.rss_growth_kib()
    assert growth < FLOOD_RSS_BOUND_KIB, f"VmRSS grew by {growth} KiB after the flood"
    assert open_fds(svc.proc.popen.pid) <= fds_before + 2
    svc.run_job()


# --------------------------------------------------------------------------------------------
# during a running job

def test_attacks_during_a_job(service):
    # While the workers push_pull: wrong-secret peers, garbage, 500 silent connections.  The job
    # completes with exact sums and nobody but the attackers is dropped.
    svc = service()
    svc.start_workers(rounds=60, pause=0.05)
    deadline = time.monotonic() + 20
    while "ROUND 5" not in svc.cluster.procs["worker:0"].output:
        assert time.monotonic() < deadline, svc.cluster.dump()
        time.sleep(0.05)
    rng = random.Random(5)
    idle = [svc.connect() for _ in range(500)]
    ports = []
    try:
        for _ in range(5):
            ports.append(refused(svc, frame(AUTH_CHALLENGE, os.urandom(32)) + frame(AUTH_RESPONSE, bytes(32))))
            ports.append(refused(svc, bytes(rng.getrandbits(8) for _ in range(4096))))
    finally:
        for s in idle:
            s.close()
    svc.logged(ports)
    svc.cluster.wait(timeout=30)
    assert not svc.cluster.leftovers(), svc.cluster.dump()
    for proc in svc.cluster.procs.values():
        assert proc.returncode == 0, svc.cluster.dump()
    assert all("JOB OK" in svc.cluster.procs[f"worker:{i}"].output for i in range(2)), svc.cluster.dump()
