"""An emulated cluster on one machine: hosts are network namespaces joined by a shaped bridge.

Layout of a testbed with prefix ``P`` and ``n`` hosts::

    P-h0 (eth0 198.18.0.1/24) --veth-- h0 \\
    P-h1 (eth0 198.18.0.2/24) --veth-- h1  +-- br0  (all in namespace P-br)
    ...                                   /

Every host namespace has ``lo`` up and one interface ``eth0``; its peer ``h<i>`` is a port of
the bridge ``br0``, which lives in its own namespace ``P-br``.  No interface is created in the
caller's namespace, so interface names never collide and nothing can reach the machine's own
network.  Addresses come from the benchmarking range 198.18.0.0/15 only.

Shaping: a ``tbf`` qdisc on both ends of each link, ``eth0`` (the host's egress) and ``h<i>``
(the host's ingress), so that incast onto a host is limited to its rate too.  TCP goodput under
tbf is about 0.956 x the rate (Ethernet/IP/TCP framing at MTU 1500).  ``burst`` must stay at or
above 256 KiB: smaller buckets make tbf split every GSO packet and burn many times the CPU.

Teardown is reliable: :meth:`Testbed.close` (also ``__exit__``, an ``atexit`` hook, and SIGTERM
or SIGHUP turned into ``SystemExit`` when nobody else handles them) kills every process still
inside the testbed's namespaces and deletes them, also when creation failed halfway.  A testbed
whose creator was SIGKILLed is found by :func:`cleanup_stale` through the record that every
testbed keeps in ``/run/byteps-testbed/<prefix>`` (creator PID and start time, namespaces).
Those functions, the commands and the records are in :mod:`.namespaces` (re-exported here), the
exit hooks in :mod:`.teardown`.

Thread-safety: a Testbed may be used from several threads (``popen``/``run`` are independent
processes); ``close`` is idempotent and serialised by a lock.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from . import teardown
# Re-exported: netns is the testbed's one public module.
from .namespaces import (_COMMAND_TIMEOUT_S, DEFAULT_PREFIX, NETNS_DIR, RUN_DIR,  # noqa: F401
                         TestbedError, _batch, _proc_start_time, _read_record, _record_path,
                         _remove_record, _run_cmd, _split_namespace, _write_record,
                         cleanup_stale, delete_namespaces, destroy, existing_namespaces,
                         kill_namespace_processes, list_testbeds, namespace_pids, pid_alive,
                         proc_stat_fields)

BRIDGE = "br0"
HOST_IF = "eth0"
MAX_PREFIX_LEN = 32
# Goodput of one TCP stream through tbf as a fraction of the configured rate (measured).
TCP_GOODPUT_FACTOR = 0.956
_PREFIX_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*")


@dataclass(frozen=True)
class Host:
    """One emulated host: ``name`` ("h3"), its namespace ("P-h3"), its address and index."""

    name: str
    namespace: str
    ip: str
    index: int = 0

    @property
    def bridge_port(self) -> str:
        """The bridge-side end of the host's link (interface in the bridge namespace)."""
        return self.name


def host_address(i: int, n_hosts: int) -> tuple[str, int]:
    """(address, prefix length) of host *i*: 198.18.0.<i+1>/24 up to 250 hosts, else spread over
    198.18.<i // 250>.<i % 250 + 1>/16."""
    if n_hosts <= 250:
        return f"198.18.0.{i + 1}", 24
    return f"198.18.{i // 250}.{i % 250 + 1}", 16


# --------------------------------------------------------------------------------------------
# Shaping


def _tbf(dev: str, rate_mbit: float, burst_kb: int, latency_ms: float, verb: str = "add") -> str:
    return (f"qdisc {verb} dev {dev} root tbf rate {rate_mbit:g}mbit burst {burst_kb}kb "
            f"latency {latency_ms:g}ms")


# --------------------------------------------------------------------------------------------
# Process-wide teardown hooks

# --------------------------------------------------------------------------------------------
# Testbed


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, "network namespaces need root (run the tests as root)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return False, f"'{tool}' is not installed (apt-get install iproute2)"
    ns = f"{DEFAULT_PREFIX}{secrets.token_hex(3)}-probe"  # not a testbed name: never 'cleaned'
    try:
        _run_cmd(["ip", "netns", "add", ns])
    except TestbedError as err:
        return False, f"cannot create a network namespace: {err}"
    try:
        _batch("ip", ["link add pa type veth peer name pb", f"link add {BRIDGE} type bridge",
                      "link set pa up"], namespace=ns)
        _batch("tc", [_tbf("pa", 100, 256, 50)], namespace=ns)
    except TestbedError as err:
        return False, f"veth/bridge/tbf unavailable: {err}"
    finally:
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=_COMMAND_TIMEOUT_S)
    return True, ""


class Testbed:
    """``n_hosts`` emulated hosts on a bridge, links shaped to ``rate_mbit`` in each direction.

    Use as a context manager (or call :meth:`close`)::

        with Testbed(3, rate_mbit=200) as tb:
            tb.run(1, ["python3", "-c", "print(1)"], timeout=10)

    Args:
        n_hosts: number of host namespaces.
        rate_mbit: per-link rate in Mbit/s, both directions; None or 0 leaves links unshaped.
        burst_kb: tbf bucket in KiB (>= 256 recommended, see the module doc).
        prefix: names of the namespaces (``<prefix>-br``, ``<prefix>-h<i>``); default
            "bpst" + 6 random hex digits.  Must not be in use.
        latency_ms: tbf queue limit expressed as the longest time a packet may wait.
        keep: leave the testbed up when this process exits (what the ``up`` command does);
            :func:`cleanup_stale` then leaves it alone too, :func:`destroy` removes it.

    Raises:
        TestbedError: creation failed (everything created so far has been removed).
        FileExistsError: the prefix is in use.
    """

    __test__ = False  # not a pytest test class

    def __init__(self, n_hosts: int, rate_mbit: Optional[float] = 1000, burst_kb: int = 256,
                 prefix: Optional[str] = None, latency_ms: float = 50, keep: bool = False):
        if n_hosts < 1 or n_hosts > 250 * 256:
            raise ValueError(f"n_hosts must be in 1..{250 * 256}, got {n_hosts}")
        if rate_mbit is not None and rate_mbit < 0:
            raise ValueError(f"rate_mbit must be >= 0 (0/None: unshaped), got {rate_mbit}")
        if burst_kb < 1 or latency_ms <= 0:
            raise ValueError("burst_kb must be >= 1 and latency_ms > 0")
        prefix = prefix or f"{DEFAULT_PREFIX}{secrets.token_hex(3)}"
        if len(prefix) > MAX_PREFIX_LEN or not _PREFIX_RE.fullmatch(prefix):
            raise ValueError(f"bad prefix {prefix!r}: letters, digits, '_', '.', '-' "
                             f"(not first), at most {MAX_PREFIX_LEN} characters")
        self.prefix = prefix
        self.bridge_namespace = f"{prefix}-br"
        self.burst_kb = burst_kb
        self.latency_ms = latency_ms
        self.keep = keep
        self.hosts: list[Host] = []
        for i in range(n_hosts):
            ip, _ = host_address(i, n_hosts)
            self.hosts.append(Host(f"h{i}", f"{prefix}-h{i}", ip, i))
        self._prefix_len = host_address(0, n_hosts)[1]
        self.rates: list[Optional[float]] = [rate_mbit or None] * n_hosts
        self._lock = threading.RLock()
        self._procs: list[subprocess.Popen] = []
        self._owner_pid = os.getpid()
        self._owns_namespaces = False
        self._claimed = False
        self._closed = False
        teardown.register(self)
        try:
            self._claim()
            self._create()
        except BaseException:
            self.close()
            raise

    # -- construction

    @property
    def namespaces(self) -> list[str]:
        return [self.bridge_namespace] + [h.namespace for h in self.hosts]

    def _record(self) -> dict:
        return {"prefix": self.prefix, "pid": self._owner_pid,
                "start_time": _proc_start_time(self._owner_pid), "keep": self.keep,
                "created": time.time(), "namespaces": self.namespaces,
                "hosts": [[h.name, h.namespace, h.ip] for h in self.hosts],
                "rates": self.rates, "burst_kb": self.burst_kb, "latency_ms": self.latency_ms}

    def _claim(self) -> None:
        """Writes the record first (atomically, O_EXCL), so that a concurrent cleanup_stale
        never mistakes half-built namespaces for an orphan, and two testbeds never share a
        prefix."""
        try:
            _write_record(self.prefix, self._record(), exclusive=True)
        except FileExistsError:
            raise FileExistsError(f"testbed prefix {self.prefix!r} is in use "
                                  f"({_record_path(self.prefix)} exists)") from None
        self._claimed = True
        taken = [ns for ns in self.namespaces if ns in existing_namespaces()]
        if taken:
            raise FileExistsError(f"namespaces {taken} already exist (a leftover? "
                                  f"python3 -m tools.testbed cleanup)")
        self._owns_namespaces = True

    def _create(self) -> None:
        br = self.bridge_namespace
        _batch("ip", (f"netns add {ns}" for ns in self.namespaces))
        lines = ["link set lo up", f"link add {BRIDGE} type bridge",
                 f"link set {BRIDGE} addrgenmode none"]
        for h in self.hosts:
            # The peer is created straight inside the host namespace: nothing in ours.
            lines += [f"link add {h.bridge_port} type veth peer name {HOST_IF} netns {h.namespace}",
                      f"link set {h.bridge_port} addrgenmode none",
                      f"link set {h.bridge_port} master {BRIDGE}",
                      f"link set {h.bridge_port} up"]
        lines.append(f"link set {BRIDGE} up")
        _batch("ip", lines, namespace=br)
        for h in self.hosts:
            _batch("ip", ["link set lo up", f"link set {HOST_IF} addrgenmode none",
                          f"addr add {h.ip}/{self._prefix_len} dev {HOST_IF}",
                          f"link set {HOST_IF} up"], namespace=h.namespace)
        shaped = [h for h in self.hosts if self.rates[h.index]]
        if shaped:
            _batch("tc", (_tbf(h.bridge_port, self.rates[h.index], self.burst_kb, self.latency_ms)
                          for h in shaped), namespace=br)
            for h in shaped:
                _batch("tc", [_tbf(HOST_IF, self.rates[h.index], self.burst_kb,
                                   self.latency_ms)], namespace=h.namespace)

    @classmethod
    def attach(cls, prefix: str) -> "Testbed":
        """The testbed *prefix* made by another process (e.g. ``up``), from its record.  The
        returned object does not tear the testbed down at exit; :meth:`close` does."""
        record = _read_record(prefix)
        if record is None:
            raise FileNotFoundError(f"no testbed {prefix!r} ({_record_path(prefix)} missing)")
        tb = cls.__new__(cls)
        tb.prefix = prefix
        tb.bridge_namespace = f"{prefix}-br"
        tb.burst_kb = record.get("burst_kb", 256)
        tb.latency_ms = record.get("latency_ms", 50)
        tb.keep = True
        tb.hosts = [Host(name, ns, ip, i) for i, (name, ns, ip) in enumerate(record["hosts"])]
        tb._prefix_len = host_address(0, len(tb.hosts))[1]
        tb.rates = list(record.get("rates", [None] * len(tb.hosts)))
        tb._lock = threading.RLock()
        tb._procs = []
        tb._owner_pid = os.getpid()
        tb._owns_namespaces = tb._claimed = True
        tb._closed = False
        return tb

    def detach(self) -> None:
        """Leaves the testbed up after this process exits (marks the record as kept)."""
        with self._lock:
            self.keep = True
            _write_record(self.prefix, self._record(), exclusive=False)
            teardown.unregister(self)

    # -- teardown

    def close(self) -> None:
        """Kills every process inside the testbed's namespaces and deletes them (idempotent)."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._owns_namespaces:
                    delete_namespaces(self.namespaces)
                for proc in self._procs:  # reap what we started (killed above if still inside)
                    try:
                        proc.wait(timeout=1.0)
                    except subprocess.TimeoutExpired:
                        pass
                if self._claimed:
                    _remove_record(self.prefix)
                self._closed = True
            finally:
                if self._closed:
                    teardown.unregister(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "Testbed":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"Testbed({self.prefix!r}, {len(self.hosts)} hosts, rates={self.rates} Mbit/s"
                f"{', closed' if self._closed else ''})")

    # -- processes

    def _host(self, i: int) -> Host:
        if not 0 <= i < len(self.hosts):
            raise IndexError(f"host {i} out of range (testbed has {len(self.hosts)} hosts)")
        return self.hosts[i]

    def exec_argv(self, i: int, argv: Sequence[str]) -> list[str]:
        """*argv* prefixed so that it runs inside host *i* (``ip netns exec <ns> ...``)."""
        return ["ip", "netns", "exec", self._host(i).namespace, *map(str, argv)]

    def popen(self, i: int, argv: Sequence[str], env: Optional[Mapping[str, str]] = None,
              **kw) -> subprocess.Popen:
        """Starts *argv* inside host *i*.  ``ip netns exec`` execs into the command, so the
        Popen's pid is the command's.  Defaults to a new session (``start_new_session=True``),
        so the caller can signal the process group.  Whatever still runs inside the host is
        killed by :meth:`close`."""
        kw.setdefault("start_new_session", True)
        proc = subprocess.Popen(self.exec_argv(i, argv), env=None if env is None else dict(env),
                                **kw)
        with self._lock:
            self._procs = [p for p in self._procs if p.returncode is None]
            self._procs.append(proc)
        return proc

    def run(self, i: int, argv: Sequence[str], timeout: float,
            env: Optional[Mapping[str, str]] = None, check: bool = False,
            input: Optional[str] = None) -> subprocess.CompletedProcess:
        """Runs *argv* inside host *i* and returns its CompletedProcess (text stdout/stderr).

        Raises:
            subprocess.TimeoutExpired: after *timeout* s (its process group is killed first).
            subprocess.CalledProcessError: with ``check`` and a non-zero exit.
        """
        proc = self.popen(i, argv, env=env, stdin=subprocess.PIPE if input is not None
                          else subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
        try:
            out, err = proc.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the leader is unreaped: its group is ours
            out, err = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout, out, err) from None
        done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
        if check:
            done.check_returncode()
        return done

    # -- links

    def set_rate(self, i: int, rate_mbit: Optional[float]) -> None:
        """Changes the rate of host *i*'s link (both directions); None/0 removes the shaping."""
        h = self._host(i)
        ends = ((self.bridge_namespace, h.bridge_port), (h.namespace, HOST_IF))
        for ns, dev in ends:
            if rate_mbit:
                _batch("tc", [_tbf(dev, rate_mbit, self.burst_kb, self.latency_ms, "replace")],
                       namespace=ns)
            elif self.rates[i]:
                _batch("tc", [f"qdisc del dev {dev} root"], namespace=ns)
        self.rates[i] = rate_mbit or None

    def link_down(self, i: int) -> None:
        """Cuts host *i*'s cable: its bridge port goes down, so its packets vanish in both
        directions while its own ``eth0`` keeps its address and routes (peers see silence and
        time out, as with a real cut, not an immediate error)."""
        _batch("ip", [f"link set {self._host(i).bridge_port} down"], namespace=self.bridge_namespace)

    def link_up(self, i: int) -> None:
        """Reconnects host *i* (after :meth:`link_down`)."""
        _batch("ip", [f"link set {self._host(i).bridge_port} up"], namespace=self.bridge_namespace)

    def qdisc_stats(self, i: int) -> str:
        """``tc -s qdisc show`` of both ends of host *i*'s link (sent bytes, drops, overlimits)."""
        h = self._host(i)
        out = []
        for label, ns, dev in (("egress", h.namespace, HOST_IF),
                               ("ingress", self.bridge_namespace, h.bridge_port)):
            text = _run_cmd(["tc", "-n", ns, "-s", "qdisc", "show", "dev", dev]).stdout
            out.append(f"{h.name} {label} ({ns}/{dev}):\n{text.rstrip()}")
        return "\n".join(out)

    # -- checks

    @staticmethod
    def available() -> tuple[bool, str]:
        """(True, "") when namespaces, veth, bridges and tbf work here, else (False, reason)."""
        return _probe()

    @staticmethod
    def goodput_bps(rate_mbit: float) -> float:
        """TCP goodput in bytes/s through a link of *rate_mbit* (0.956 x the rate)."""
        return TCP_GOODPUT_FACTOR * rate_mbit * 1e6 / 8
