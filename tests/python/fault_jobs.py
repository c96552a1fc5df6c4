"""Real byteps jobs with chosen links routed through tools.faultproxy (for the fault tests).

Routing (see docs/config.md):

* server i's data link: the server listens on a fixed ``DMLC_PORT=P`` and announces
  ``BYTEPS_ADVERTISE_PORT=Q``; a proxy listens on Q and forwards to P, so every worker -> server i
  connection goes through it.
* the scheduler link: the scheduler listens on ``cluster.port``; a proxy forwards to it and every
  other process gets the proxy's port as ``DMLC_PS_ROOT_PORT``.

The workers run :data:`WORKER_SCRIPT`: ``rounds`` rounds of a few tensors from 1 KiB to 4 MiB
with known values (rank + round), every result compared exactly (``FJ_COMPRESS`` in ``env``, e.g.
``cast=fp16``: the tensors of 1 MiB and more are declared with those compression parameters; their
small integer values stay exact); ``ROUND r`` after each round
(so a test can inject a fault mid-job, see :meth:`FaultJob.wait_round`), ``ALL OK`` at the end,
``MISMATCH ...`` (exit 3) or ``FAILED <error>`` (exit 2) otherwise.
"""

from __future__ import annotations

import time
from typing import Optional

import pytest

from conftest import Cluster, Proc, free_port, write_script  # conftest puts tools/ on sys.path
from tools.faultproxy import FaultProxy
from tools.procinfo import listening

WORKER_SCRIPT = """
import os, sys, time
import numpy as np
import byteps.numpy as bps

ROUNDS = int(os.environ["FJ_ROUNDS"])
SLEEP = float(os.environ["FJ_SLEEP"])
# name, elements, dtype, pushed every k-th round: 1 KiB .. 4 MiB
TENSORS = [("fj.1k", 256, "float32", 1), ("fj.32k", 8192, "float32", 1), ("fj.i64", 512, "int64", 1),
           ("fj.1m", 262144, "float32", 4), ("fj.4m", 1048576, "float32", 20)]
MAX_BYTES = int(os.environ["FJ_MAX_BYTES"])
TENSORS = [t for t in TENSORS if t[1] * np.dtype(t[2]).itemsize <= MAX_BYTES]
if int(os.environ.get("FJ_BIG_BYTES", "0")):  # one more, pushed every round
    TENSORS.append(("fj.big", int(os.environ.get("FJ_BIG_BYTES", "0")) // 4, "float32", 1))
BASE = [(np.arange(size) % 13).astype(dtype) for _, size, dtype, _ in TENSORS]

try:
    bps.init()
    rank, n = bps.rank(), bps.size()
    if os.environ.get("FJ_COMPRESS"):  # e.g. "cast=fp16": the tensors of 1 MiB and more go compressed
        from byteps import _core
        params = dict(kv.split("=", 1) for kv in os.environ["FJ_COMPRESS"].split(";"))
        for name, size, dtype, _ in TENSORS:
            if size * np.dtype(dtype).itemsize >= 1 << 20:
                _core.declare_tensor_params("byteps." + name, params)
    start = time.monotonic()
    for r in range(1, ROUNDS + 1):
        out = []
        for k, (name, size, dtype, every) in enumerate(TENSORS):
            if r % every == 0:
                x = BASE[k] + np.array(100 * k + rank + r, dtype)
                out.append((k, name, dtype, bps.push_pull_async(x, average=False, name=name)))
        for k, name, dtype, h in out:
            got = bps.synchronize(h)
            want = BASE[k] * np.array(n, dtype) + np.array(n * (100 * k + r) + n * (n - 1) // 2, dtype)
            if got.dtype != want.dtype or not np.array_equal(got, want):
                bad = np.flatnonzero(got != want)[:5]
                print(f"MISMATCH {name} round {r}: at {list(bad)} got {got[bad]} want {want[bad]}", flush=True)
                sys.exit(3)
        print(f"ROUND {r}", flush=True)
        if SLEEP:
            time.sleep(SLEEP)
    print(f"ALL OK rank {rank} in {time.monotonic() - start:.2f}s", flush=True)
    bps.shutdown()
except Exception as err:
    print(f"FAILED {type(err).__name__}: {err}", flush=True)
    sys.exit(2)
"""


class FaultJob:
    """Scheduler, ``servers`` servers and ``workers`` workers (processes of ``cluster``), with
    the data links of ``proxied_servers`` (and the scheduler link when ``proxy_scheduler``)
    behind a :class:`FaultProxy` each: ``server_proxy[i]``, ``scheduler_proxy``.  The workers
    push only the tensors of at most ``max_tensor_bytes`` (1 KiB, 4 KiB, 32 KiB, 1 MiB, 4 MiB), and
    with ``big_tensor_bytes`` one more tensor of that size every round.

    ``env`` is added to every process's environment (e.g. ``BYTEPS_CHECKSUM=1``).  Call
    :meth:`close` at the end (the fixture in the tests does).
    """

    def __init__(self, cluster: Cluster, workers: int = 2, servers: int = 2, proxied_servers=(0,),
                 proxy_scheduler: bool = False, env: Optional[dict[str, str]] = None, rounds: int = 200,
                 sleep: float = 0.02, max_tensor_bytes: int = 4 << 20, big_tensor_bytes: int = 0) -> None:
        self.cluster, self.workers, self.servers = cluster, workers, servers
        self.server_proxy: dict[int, FaultProxy] = {}
        self.scheduler_proxy: Optional[FaultProxy] = None
        base = {"BYTEPS_PARTITION_BYTES": "1M", "BYTEPS_TIMEOUT": "20", "BYTEPS_START_TIMEOUT": "20",
                "FJ_ROUNDS": str(rounds), "FJ_SLEEP": str(sleep), "FJ_MAX_BYTES": str(max_tensor_bytes),
                "FJ_BIG_BYTES": str(big_tensor_bytes), **(env or {})}
        self.env = cluster.env(workers, servers, base)
        self.started_at = 0.0
        if proxy_scheduler:
            self.scheduler_proxy = FaultProxy(upstream=("127.0.0.1", cluster.port))
        self._server_ports: dict[int, int] = {}
        for i in proxied_servers:
            port = free_port()
            self._server_ports[i] = port
            self.server_proxy[i] = FaultProxy(upstream=("127.0.0.1", port))

    def start(self) -> "FaultJob":
        c = self.cluster
        script = write_script(c.dir, WORKER_SCRIPT, "fault_worker.py")
        self.started_at = time.monotonic()
        c.scheduler(self.env)  # listens on cluster.port itself
        # A proxy accepts at once; were the scheduler not listening yet, it would reset the
        # connection (not refuse it), which the nodes do not retry during registration.
        _wait_listening(c.port, c.procs["scheduler"])
        others = dict(self.env)
        if self.scheduler_proxy:
            others["DMLC_PS_ROOT_PORT"] = str(self.scheduler_proxy.port)
        for i in range(self.servers):
            extra = {}
            if i in self.server_proxy:
                extra = {"DMLC_PORT": str(self._server_ports[i]),
                         "BYTEPS_ADVERTISE_PORT": str(self.server_proxy[i].port)}
            c.server(i, {**others, **extra})
        for i in range(self.workers):
            c.worker(f"worker:{i}", script, {**others, "DMLC_WORKER_ID": str(i)})
        return self

    @property
    def worker_procs(self) -> list[Proc]:
        return [self.cluster.procs[f"worker:{i}"] for i in range(self.workers)]

    def wait_round(self, r: int, timeout: float = 20.0, worker: int = 0) -> float:
        """Waits until ``worker`` printed ``ROUND r``; returns the time (monotonic).  Fails the
        test when the job ends or stalls first."""
        proc = self.cluster.procs[f"worker:{worker}"]
        deadline = time.monotonic() + timeout
        needle = f"ROUND {r}\n"
        while True:
            if needle in proc.log.read_text(errors="replace"):
                return time.monotonic()
            if any(p.popen.poll() is not None for p in self.cluster.procs.values()):
                time.sleep(0.2)  # let its last lines reach the log
                pytest.fail(f"a process exited before worker:{worker} reached round {r}\n{self.dump()}")
            if time.monotonic() > deadline:
                pytest.fail(f"worker:{worker} did not reach round {r} within {timeout}s\n{self.dump()}")
            time.sleep(0.05)

    def finish(self, timeout: float = 30.0) -> dict[str, Proc]:
        """Waits for every process, noting when each exited (``Proc.elapsed``, seconds after its
        start), and kills those still running at the deadline (``cluster.leftovers()``)."""
        deadline = time.monotonic() + timeout
        procs = list(self.cluster.procs.values())
        while True:
            for p in procs:
                if p.elapsed is None and p.popen.poll() is not None:
                    p.returncode = p.popen.returncode
                    p.elapsed = round(time.monotonic() - p.started, 2)
            if all(p.elapsed is not None for p in procs) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        return self.cluster.wait(0)  # marks and kills the rest

    def exited_at(self, label: str) -> float:
        """time.monotonic() at which ``label`` exited (after :meth:`finish`)."""
        p = self.cluster.procs[label]
        return p.started + p.elapsed

    def dump(self, lines: int = 25) -> str:
        """The last ``lines`` distinct lines of every process's output (a line repeated with
        other time stamps is shown once, at its last place, with a count): short enough for an
        assertion message even when a process logged thousands of reconnects."""
        out = []
        for p in self.cluster.procs.values():
            out.append(f"--- {p.label} rc={p.returncode} after {p.elapsed}s")
            kept: dict[str, list] = {}  # text without time stamp -> [last line, count]
            rounds = []
            for line in p.output.splitlines():
                if line.startswith("ROUND "):
                    rounds.append(line)
                    continue
                text = line[13:] if line[:2].isdigit() and line[2:3] == ":" else line
                entry = kept.pop(text, [line, 0])
                kept[text] = [line, entry[1] + 1]
            if rounds:
                out.append(f"    (last progress: {rounds[-1]})")
            for line, n in list(kept.values())[-lines:]:
                out.append(f"    {line[:400]}" + (f"   [x{n}]" if n > 1 else ""))
        return "\n".join(out)

    def assert_exact(self, timeout: float = 30.0) -> None:
        """Every process exits 0 by itself within ``timeout`` and every worker printed ALL OK."""
        self.finish(timeout)
        problems = [f"{label} still running after {timeout}s" for label in self.cluster.leftovers()]
        problems += [f"{p.label} exited {p.returncode}" for p in self.cluster.procs.values()
                     if p.returncode not in (0, None)]
        problems += [f"{p.label} did not print ALL OK" for p in self.worker_procs if "ALL OK" not in p.output]
        if problems:  # (not a bare assert on Proc fields: pytest would print every line they hold)
            pytest.fail("; ".join(problems) + "\n" + self.dump())

    def stats(self) -> dict[str, dict]:
        out = {f"server:{i}": p.stats() for i, p in self.server_proxy.items()}
        if self.scheduler_proxy:
            out["scheduler"] = self.scheduler_proxy.stats()
        return out

    def close(self) -> None:
        for p in [*self.server_proxy.values(), self.scheduler_proxy]:
            if p:
                p.close()


def _wait_listening(port: int, proc: Proc, timeout: float = 10.0) -> None:
    """Waits until something listens on ``port`` (without a probe connection: see
    tools.procinfo.listening)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listening(port):
            return
        if proc.popen.poll() is not None:
            break
        time.sleep(0.02)
    pytest.fail(f"{proc.label} is not listening on port {port}\n{proc.output}")
