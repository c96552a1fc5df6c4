"""Collective benchmark, one command, one run: byteps push_pull vs torch.distributed gloo
all_reduce vs OpenMPI MPI_Allreduce (ring) on the same emulated cluster (tools/testbed)::

    /usr/bin/python3 -m bench.collective.run                     # the full run (~17-25 min)
    /usr/bin/python3 -m bench.collective.run --quick             # n 2,4; 4M,16M; ~1 min
    /usr/bin/python3 -m bench.collective.run [--rate 1000] [--n 2,4,8] [--k n,n/2,colocated]
    /usr/bin/python3 -m bench.collective.run --n 4 --k mixed:2,mixed:1,n/2 ...  # mixed placement
        [--sizes 1M,4M,16M,64M,256M] [--systems byteps,gloo,mpi] [--out DIR]
        [--iters N] [--warmup W] [--rate-budget 12000] [--byteps-env K=V ...]

Run from the repository root, as root (network namespaces).  For every n (workers):

* gloo: one ``bench/collective/gloo_worker.py`` per worker host (run_on_hosts), all sizes in one
  process group; MASTER = host 0.  Runs once per n (it does not depend on k).
* mpi: ``mpirun`` started inside host 0's namespace, ranks on the worker hosts, ring allreduce
  (``coll_tuned_allreduce_algorithm 4``), TCP over eth0, ``mpi_yield_when_idle 1`` (n ranks
  share two cores here; ``--mpi-busy-poll`` to measure without it); remote ``orted`` are started
  through a ``plm_rsh_agent`` script that maps each host address to ``ip netns exec
  <namespace>``.  The program is bench/collective/mpi_sweep.c, compiled into the output
  directory with mpicc.  Once per n.
* byteps: ``byteps-core bench`` as every worker of a job (tools.testbed.job.run_job), one per
  k in ``--k``: "n" and "n/2" servers on hosts of their own ("separate": n + k hosts; the
  scheduler on the first server host), "colocated" (server i on worker host i: n hosts), and
  mixed, "mixed:K" or "n+K" (K a number, n or n/2; 1 <= K <= n): server i on worker host i plus
  K servers on hosts of their own (n + K hosts, n + K servers, the testbed's "mixed" placement;
  the scheduler on the first CPU server host); the core splits the bytes between them as the
  unified architecture says.  Its theory is t = 2n(n-1)M / ((n^2 + Kn - 2K) G), its k column
  K (the CPU hosts) and its label "n+K"; results.json records the formula's share of each
  server ("formula_shares", servers 0..n-1 colocated, n..n+K-1 on the CPU hosts).

Every configuration gets a fresh testbed with just the hosts it needs, links of rate R in both
directions.  CPU capacity (reference/machine-facts.md: keep the sum of host rates <= ~12-16
Gbit/s on these two cores): for each n the rate is lowered, for every system at that n alike,
to the largest multiple of 50 Mbit/s with hosts * R <= ``--rate-budget`` (default 12000), where
hosts is the largest testbed of that n (n=8, k=8 separate: 16 hosts -> 750 Mbit/s).  So all rows
of one n share one R (every row prints its R) and the ratios to gloo are same-R, same-run ratios.

Before each configuration the runner waits (``--wait-idle``, up to 120 s) until the machine is
below 25 % busy: other users' processes would take the cores the links and peers need.

Iterations: per size clamp(512 MiB / M, 5, 50) (the rule of ``byteps-core bench --iters 0``)
for every system, after ``--warmup`` untimed ones (default 1); medians are reported.  Timing
(``--timing``), the same for every system: ``barrier`` (default) times each collective from a
barrier (gloo's ``dist.barrier``, ``MPI_Barrier``, byteps' ``bench --barrier``: an untimed 4-byte
push_pull), so no iteration inherits the previous one's skew across ranks; ``back-to-back``
times collectives that follow each other with nothing between (gloo and MPI then sum zeros after
one checked sum), where a rank that finishes late delays everyone's next iteration.  byteps
runs all sizes in one job when they form a geometric series (``--step-factor``), else one job
per size.

Output (``--out``, default bench-results/collective): results.json (rewritten after every
configuration, so an interrupted run still leaves its data), results.md (Markdown table),
collective.png (time vs size per n, measured and ideal), raw/ (per-configuration outputs, the
MPI agent scripts and binary).  Each configuration also records the CPU use during it (busy %
of the machine, CPU seconds of the processes under test, of everything else, and softirq) and,
for byteps, the bytes that crossed each shaped link (tc -s qdisc).  With ``--link-trace`` every
link's byte counters are sampled every 2 ms during each configuration (tools/testbed/linkmon.py;
raw/<config>_links.txt), and each configuration reports the share of its links' rate it used and
how much of the time they idled, over its busy span (the whole job, warm-up and tuning included).

Table columns: time_s (median), algbw_GBps = M/t, %G = M/t as % of one link's TCP goodput
G = 0.956 R/8 (for PS the per-worker link utilisation; same definition for ring), busbw%G =
2(n-1)/n M/t/G for ring systems, %model = ideal time/t (ring model for gloo/MPI, PS model for
byteps), vs_gloo = t_gloo/t, theory = 2(n-1)/n min(1, k B_s/(n B_w)) (1 colocated,
(n^2 + kn - 2k)/n^2 mixed); for byteps
also est_s = a flow-level estimate of what the core's partitioning allows on these links
(model.simulate_ps: partition tail, server imbalance of few partitions) and %est = est_s/t.
Small sizes can exceed 100 %: the tbf bucket (256 KiB per link, refilled between iterations)
lets the first bytes of each iteration through at line speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.collective import model  # noqa: E402
from tools.testbed import linkmon  # noqa: E402
from tools.testbed.linkmon import LinkMonitor  # noqa: E402
from tools.testbed.netns import proc_stat_fields  # noqa: E402
from tools.progress import track  # noqa: E402

PYTHON = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
GLOO_WORKER = REPO / "bench" / "collective" / "gloo_worker.py"
MPI_SOURCE = REPO / "bench" / "collective" / "mpi_sweep.c"
GLOO_PORT = 29500
DEFAULT_SIZES = "1M,4M,16M,64M,256M"
# How an iteration is timed: after a barrier (every system), or back to back.
TIMINGS = ("barrier", "back-to-back")
QUICK = {"n": "2,4", "sizes": "4M,16M", "iters": 5, "rate": 1000.0}
MPI_RING = ["--mca", "coll_tuned_use_dynamic_rules", "1",
            "--mca", "coll_tuned_allreduce_algorithm", "4"]
# After the model's columns: byteps only, the flow-level estimate of what its partitioning
# allows (model.simulate_ps) and measured time as % of it.
# OpenMPI busy-polls while it waits; n ranks on these two cores would steal each other's CPU (on
# real hosts every rank has its own cores), so they yield unless --mpi-busy-poll (measured, n=4,
# 1 Gbit/s: 64 MiB 87 % -> 95 % of the ring model, 4 MiB 59 % -> 83 %).
MPI_YIELD = ["--mca", "mpi_yield_when_idle", "1"]
EXTRA_COLUMNS = [("est_s", "est_s", "{:.4f}"), ("pct_est", "%est", "{:.1f}")]
# Deadlines every byteps job of this runner gets; ``args.byteps_job_env`` replaces them (the
# sweep, bench/sweep, passes {} to measure the core with no BYTEPS_* variable at all).
BYTEPS_JOB_ENV = {"BYTEPS_START_TIMEOUT": "60", "BYTEPS_TIMEOUT": "120"}


# --------------------------------------------------------------------------------------------
# Plan


@dataclass
class Config:
    """One measurement: a system on one testbed, all sizes."""

    system: str  # byteps | gloo | mpi
    n: int
    rate_mbit: float
    hosts: int
    k: Optional[int] = None
    placement: str = model.SEPARATE
    k_label: str = model.MISSING
    estimate_s: float = 0.0
    status: str = "pending"  # pending | ok | failed | skipped
    error: str = ""
    elapsed_s: float = 0.0
    info: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        if self.system == "byteps":
            if self.placement == model.COLOCATED:
                return f"byteps n={self.n} k={self.k} colocated"
            if self.placement == model.MIXED:
                return f"byteps n={self.n} k={self.k} mixed ({self.k_label})"
            return f"byteps n={self.n} k={self.k} ({self.k_label})"
        return f"{self.system} n={self.n}"

    @property
    def tag(self) -> str:
        k = f"_k{self.k_label.replace('/', 'h')}" if self.system == "byteps" else ""
        return f"{self.system}_n{self.n}{k}"


def parse_list(text: str, conv=str) -> list:
    return [conv(t) for t in (s.strip() for s in text.split(",")) if t]


def hosts_for(system: str, n: int, k: Optional[int], placement: str) -> int:
    if system != "byteps":
        return n
    return n + k if placement in (model.SEPARATE, model.MIXED) else n


def startup_s(system: str, n: int) -> float:
    """Rough fixed cost of one configuration (process start, rendezvous, torch import)."""
    return {"byteps": 3.0, "gloo": 4.0 + 0.8 * n, "mpi": 3.0}.get(system, 3.0)


def byteps_settings(env: dict) -> tuple[int, int]:
    """(partition bytes, connections per peer) of the byteps jobs: *env* or the defaults."""
    part = model.parse_size(env.get("BYTEPS_PARTITION_BYTES", str(model.DEFAULT_PARTITION_BYTES)))
    conns = int(env.get("BYTEPS_CONNECTIONS_PER_PEER", model.DEFAULT_CONNECTIONS_PER_PEER))
    return part, conns


def byteps_estimates(cfg: Config, sizes: Sequence[int], iters: Sequence[int], env: dict,
                     partition_bytes: Optional[int] = None) -> list[float]:
    """model.simulate_ps of every size, as the runner's byteps job(s) declare them."""
    part, conns = byteps_settings(env)
    one_job = bool(geometric_factor(sizes)) and byteps_iters_arg(sizes, iters) is not None
    return model.simulate_sweep(sizes, cfg.n, cfg.k, model.goodput_Bps(cfg.rate_mbit),
                                cfg.placement, partition_bytes or part, conns, one_job)


def estimate(cfg: Config, sizes: Sequence[int], iters: Sequence[int], warmup: int,
             env: Optional[dict] = None) -> float:
    """Rough duration of a configuration: start-up + (warmup + iterations) x model time x 1.15."""
    g = model.goodput_Bps(cfg.rate_mbit)
    if cfg.system == "byteps":
        times = byteps_estimates(cfg, sizes, iters, env or {})
    else:
        times = [model.ring_time(m, cfg.n, g) for m in sizes]
    total = startup_s(cfg.system, cfg.n)
    for t, it in zip(times, iters):
        total += (it + warmup) * (1.15 * t + 0.005)
    return total


def build_plan(args: argparse.Namespace, sizes: list[int], iters: list[int]) -> list[Config]:
    plan: list[Config] = []
    for n in args.n:
        entries = []
        for system in args.systems:
            if system == "byteps":
                seen = set()
                for token in args.k:
                    k, placement, label = model.parse_k(token, n)
                    if (k, placement) in seen:
                        continue
                    seen.add((k, placement))
                    entries.append((system, k, placement, label))
            else:
                entries.append((system, None, model.SEPARATE, model.MISSING))
        most = max(hosts_for(s, n, k, p) for s, k, p, _ in entries)
        rate = model.capped_rate(args.rate, most, args.rate_budget)
        for system, k, placement, label in entries:
            cfg = Config(system, n, rate, hosts_for(system, n, k, placement), k, placement, label)
            cfg.estimate_s = estimate(cfg, sizes, iters, args.warmup, args.byteps_env)
            plan.append(cfg)
    return plan


# --------------------------------------------------------------------------------------------
# CPU accounting while a configuration runs


def _proc_cpu_ticks(pid: str) -> Optional[int]:
    fields = proc_stat_fields(pid)
    return None if fields is None else int(fields[11]) + int(fields[12])  # utime + stime


def _cpu_times() -> tuple[float, float, float]:
    """(busy, softirq, total) jiffies of the machine from /proc/stat."""
    with open("/proc/stat") as f:
        parts = [int(x) for x in f.readline().split()[1:]]
    idle = parts[3] + (parts[4] if len(parts) > 4 else 0)
    total = sum(parts[:8])
    return total - idle, parts[6] if len(parts) > 6 else 0, total


class CpuMonitor:
    """Samples every 0.25 s: CPU ticks of every process, split into those inside the testbed's
    namespaces ("ours") and the rest (including other users of the machine), plus the machine's
    busy and softirq time from /proc/stat."""

    def __init__(self, namespaces: Sequence[str], interval: float = 0.25) -> None:
        self._inodes = set()
        for ns in namespaces:
            try:
                st = os.stat(f"/run/netns/{ns}")
                self._inodes.add((st.st_dev, st.st_ino))
            except OSError:
                pass
        self._interval = interval
        self._stop = threading.Event()
        self._first: dict[str, int] = {}
        self._last: dict[str, int] = {}
        self._ours: set[str] = set()
        self._thread = threading.Thread(target=self._loop, name="cpu-monitor", daemon=True)
        self._hz = os.sysconf("SC_CLK_TCK")

    def _sample(self) -> None:
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            ticks = _proc_cpu_ticks(pid)
            if ticks is None:
                continue
            if pid not in self._last and self._started:
                self._first.setdefault(pid, 0)  # born during the run: count all of it
            self._first.setdefault(pid, ticks)
            self._last[pid] = ticks
            if pid not in self._ours and self._inodes:
                try:
                    st = os.stat(f"/proc/{pid}/ns/net")
                    if (st.st_dev, st.st_ino) in self._inodes:
                        self._ours.add(pid)
                except OSError:
                    pass

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample()

    def __enter__(self) -> "CpuMonitor":
        self._started = False
        self._t0 = time.monotonic()
        self._m0 = _cpu_times()
        self._load0 = os.getloadavg()
        self._sample()
        self._started = True
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._sample()  # processes of the job have exited by now; their last sample stays
        self._stop.set()
        self._thread.join(timeout=5)
        busy1, soft1, total1 = _cpu_times()
        busy0, soft0, total0 = self._m0
        hz = self._hz
        delta = {pid: self._last[pid] - self._first.get(pid, 0) for pid in self._last}
        ours = sum(v for pid, v in delta.items() if pid in self._ours) / hz
        me = str(os.getpid())
        others = sum(v for pid, v in delta.items() if pid not in self._ours and pid != me) / hz
        elapsed = time.monotonic() - self._t0
        ncpu = os.cpu_count() or 1
        self.result = {
            "elapsed_s": round(elapsed, 2),
            "cpus": ncpu,
            "busy_pct": round(100.0 * (busy1 - busy0) / max(1, total1 - total0), 1),
            "under_test_cpu_s": round(ours, 2),
            "other_processes_cpu_s": round(others, 2),
            "softirq_cpu_s": round((soft1 - soft0) / hz, 2),
            "loadavg_before": [round(x, 2) for x in self._load0],
            "loadavg_after": [round(x, 2) for x in os.getloadavg()],
        }


def machine_busy_pct(seconds: float = 1.0) -> float:
    """CPU busy % of the whole machine over the next *seconds*."""
    b0, _, t0 = _cpu_times()
    time.sleep(seconds)
    b1, _, t1 = _cpu_times()
    return 100.0 * (b1 - b0) / max(1, t1 - t0)


def wait_until_idle(max_wait_s: float, threshold_pct: float) -> tuple[float, float]:
    """Waits (up to *max_wait_s*) until the machine is below *threshold_pct* busy for a
    second: other users' processes would steal the cores the emulated links and the processes
    under test need.  Returns (busy % last seen, seconds waited)."""
    start = time.monotonic()
    busy = machine_busy_pct()
    told = False
    while busy > threshold_pct and time.monotonic() - start < max_wait_s:
        if not told:
            print(f"    machine busy ({busy:.0f} % of {os.cpu_count()} cores, other users); "
                  f"waiting up to {max_wait_s:g} s for it to go below {threshold_pct:g} %",
                  flush=True)
            told = True
        busy = machine_busy_pct(2.0)
    return busy, time.monotonic() - start


# --------------------------------------------------------------------------------------------
# The three systems


def _tail(text: str, lines: int = 30) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _json_lines(text: str) -> list[dict]:
    out = []
    for line in text.splitlines():
        if line.startswith("JSON "):
            try:
                out.append(json.loads(line[5:]))
            except ValueError:
                pass
    return out


def _qdisc_sent(tb) -> list[dict]:
    """Bytes sent and drops through both ends of every host's link."""
    links = []
    for i, h in enumerate(tb.hosts):
        text = tb.qdisc_stats(i)
        sent = [int(x) for x in re.findall(r"Sent (\d+) bytes", text)]
        drops = [int(x) for x in re.findall(r"dropped (\d+)", text)]
        links.append({"host": h.name, "egress_bytes": sent[0] if sent else None,
                      "ingress_bytes": sent[1] if len(sent) > 1 else None,
                      "drops": sum(drops)})
    return links


def geometric_factor(sizes: Sequence[int]) -> Optional[int]:
    """The integer factor (2..1024) of a geometric series of sizes, 2 for a single size, else
    None."""
    if len(sizes) == 1:
        return 2
    f, rem = divmod(sizes[1], sizes[0])
    if rem or not 2 <= f <= 1024:
        return None
    for a, b in zip(sizes, sizes[1:]):
        if b != a * f:
            return None
    return f


def byteps_iters_arg(sizes: Sequence[int], iters: Sequence[int]) -> Optional[int]:
    """--iters for one sweep job: N when every size has N, 0 when they follow bench's adaptive
    rule, None when neither (then one job per size)."""
    if len(set(iters)) == 1:
        return iters[0]
    if list(iters) == [model.iterations(m) for m in sizes]:
        return 0
    return None


def run_byteps(tb, cfg: Config, sizes: list[int], iters: list[int], args, raw: Path,
               timeout: float) -> dict[int, dict]:
    from tools.testbed.job import run_job  # puts the repository's python/ on sys.path
    from byteps.launcher import corebin

    core = corebin.find_core_binary(None)
    factor = geometric_factor(sizes)
    sweep_iters = byteps_iters_arg(sizes, iters)
    jobs = ([(sizes, sweep_iters, factor)] if factor and sweep_iters is not None
            else [([m], it, 2) for m, it in zip(sizes, iters)])
    env = {**getattr(args, "byteps_job_env", BYTEPS_JOB_ENV), **args.byteps_env}
    results: dict[int, dict] = {}
    transcript = []
    for j, (group, it, step) in enumerate(jobs):
        path = raw / f"{cfg.tag}_{j}.json"
        argv = [core, "bench", "--min-bytes", str(group[0]), "--max-bytes", str(group[-1]),
                "--step-factor", str(step), "--iters", str(it), "--warmup", str(args.warmup),
                *(["--barrier"] if args.timing == "barrier" else []), "--json", str(path)]
        servers = model.server_count(cfg.n, cfg.k, cfg.placement)
        if cfg.placement == model.MIXED:
            cpu, gpu = model.mixed_split(cfg.n, cfg.k)
            cfg.info["formula_shares"] = [gpu] * cfg.n + [cpu] * cfg.k  # server i: the formula's share of M
        res = run_job(tb, cfg.n, servers, argv, placement=cfg.placement, env=env, timeout=timeout,
                      echo=args.verbose)
        transcript.append("".join(res.transcript))
        if not res.ok:
            raise RuntimeError(f"byteps job failed (rc {res.returncode}):\n"
                               f"{_tail(''.join(res.transcript))}")
        data = None
        if path.exists():
            data = json.loads(path.read_text())
        else:
            lines = _json_lines(res.output("worker:0"))
            data = lines[-1] if lines else None
        if not data:
            raise RuntimeError(f"byteps: no JSON from worker 0:\n{_tail(res.output('worker:0'))}")
        cfg.info["partition_bytes"] = data.get("partition_bytes")
        for row in data["rows"]:
            results[int(row["bytes"])] = {"time_s": row["time_us_median"] / 1e6,
                                          "iters": row["iters"]}
    (raw / f"{cfg.tag}.log").write_text("".join(transcript))
    return results


def run_gloo(tb, cfg: Config, sizes: list[int], iters: list[int], args, raw: Path,
             timeout: float) -> dict[int, dict]:
    from tools.testbed.job import run_on_hosts

    spec = ",".join(f"{m}:{it}" for m, it in zip(sizes, iters))
    env = {"GLOO_SOCKET_IFNAME": "eth0", "OMP_NUM_THREADS": "1"}
    commands = [(i, [PYTHON, str(GLOO_WORKER), "--rank", str(i), "--world-size", str(cfg.n),
                     "--master-addr", tb.hosts[0].ip, "--master-port", str(GLOO_PORT),
                     "--sizes", spec, "--warmup", str(args.warmup),
                     "--timeout", str(int(timeout)),
                     *(["--back-to-back"] if args.timing == "back-to-back" else [])],
                 env, f"gloo:{i}")
                for i in range(cfg.n)]
    res = run_on_hosts(tb, commands, timeout=timeout, echo=args.verbose)
    (raw / f"{cfg.tag}.log").write_text("".join(res.transcript))
    if not res.ok:
        raise RuntimeError(f"gloo failed (rc {res.returncode}):\n{_tail(''.join(res.transcript))}")
    return {int(d["bytes"]): {"time_s": d["median_s"], "iters": d["iters"],
                              "times_s": d.get("times_s")}
            for d in _json_lines(res.output("gloo:0"))}


def mpi_binary(raw: Path) -> Path:
    """Compiles mpi_sweep.c into raw/ (once)."""
    exe = raw / "mpi_sweep"
    if not exe.exists():
        mpicc = shutil.which("mpicc")
        if not mpicc:
            raise RuntimeError("mpicc not found (apt-get install libopenmpi-dev openmpi-bin)")
        subprocess.run([mpicc, "-O2", "-o", str(exe), str(MPI_SOURCE)], check=True,
                       capture_output=True, text=True, timeout=120)
    return exe


def mpi_agent(tb, raw: Path) -> Path:
    """A plm_rsh_agent for mpirun: called as ``agent [options] HOST COMMAND...`` (like ssh), it
    runs COMMAND with /bin/sh inside the namespace of the testbed host that has address HOST."""
    lines = ["#!/bin/sh",
             "# plm_rsh_agent of bench/collective/run.py:",
             "# 'ssh HOST CMD' -> ip netns exec NS sh -c CMD",
             'while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done',
             'host=$1; shift', 'case "$host" in']
    lines += [f"  {h.ip}) ns={h.namespace} ;;" for h in tb.hosts]
    lines += ['  *) echo "mpi agent: unknown host $host" >&2; exit 255 ;;', "esac",
              'exec ip netns exec "$ns" /bin/sh -c "$*"']
    path = raw / f"mpi_agent_{tb.prefix}.sh"
    path.write_text("\n".join(lines) + "\n")
    path.chmod(0o755)
    return path


def run_mpi(tb, cfg: Config, sizes: list[int], iters: list[int], args, raw: Path,
            timeout: float) -> dict[int, dict]:
    from tools.testbed.job import run_on_hosts

    exe, agent = mpi_binary(raw), mpi_agent(tb, raw)
    mpirun = shutil.which("mpirun")
    if not mpirun:
        raise RuntimeError("mpirun not found (apt-get install openmpi-bin)")
    hosts = ",".join(f"{tb.hosts[i].ip}:1" for i in range(cfg.n))
    argv = [mpirun, "--allow-run-as-root", "-np", str(cfg.n), "--host", hosts,
            "--mca", "plm_rsh_agent", str(agent), "--mca", "plm_rsh_no_tree_spawn", "1",
            "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "eth0",
            "--mca", "oob_tcp_if_include", "eth0", *MPI_RING,
            *([] if args.mpi_busy_poll else MPI_YIELD), *args.mpi_args,
            str(exe), *(["--back-to-back"] if args.timing == "back-to-back" else []),
            str(args.warmup), *(f"{m}:{it}" for m, it in zip(sizes, iters))]
    env = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    res = run_on_hosts(tb, [(0, argv, env, "mpirun")], timeout=timeout, echo=args.verbose)
    (raw / f"{cfg.tag}.log").write_text(" ".join(argv) + "\n" + "".join(res.transcript))
    if not res.ok:
        raise RuntimeError(f"mpirun failed (rc {res.returncode}):\n"
                           f"{_tail(''.join(res.transcript))}")
    return {int(d["bytes"]): {"time_s": d["median_s"], "iters": d["iters"],
                              "times_s": d.get("times_s")}
            for d in _json_lines(res.output("mpirun"))}


RUNNERS = {"byteps": run_byteps, "gloo": run_gloo, "mpi": run_mpi}


# --------------------------------------------------------------------------------------------
# Results


def make_rows(cfg: Config, measured: dict[int, dict], sizes: list[int], iters: list[int],
              args) -> list[dict]:
    rows = []
    est = (byteps_estimates(cfg, sizes, iters, args.byteps_env, cfg.info.get("partition_bytes"))
           if cfg.system == "byteps" else [None] * len(sizes))
    for m, e in zip(sizes, est):
        got = measured.get(m, {})
        row = model.make_row(cfg.system, cfg.n, cfg.k, cfg.k_label, cfg.placement, cfg.rate_mbit,
                             m, got.get("time_s"), got.get("iters"), hosts=cfg.hosts)
        if e is not None:
            row["est_s"] = e
            row["pct_est"] = 100.0 * e / row["time_s"] if row["time_s"] else None
        if got.get("times_s"):
            row["times_s"] = got["times_s"]
        rows.append(row)
    return rows


def write_outputs(out: Path, meta: dict, plan: list[Config], rows: list[dict],
                  final: bool) -> None:
    rows = sorted(model.fill_ratios(rows), key=model.sort_key)
    doc = {"meta": {**meta, "complete": final},
           "configs": [{"name": c.name, "system": c.system, "n": c.n, "k": c.k,
                        "k_label": c.k_label, "placement": c.placement, "hosts": c.hosts,
                        "rate_mbit": c.rate_mbit, "status": c.status, "error": c.error,
                        "estimate_s": round(c.estimate_s, 1), "elapsed_s": round(c.elapsed_s, 1),
                        **c.info} for c in plan],
           "rows": rows}
    tmp = out / ".results.json.tmp"
    tmp.write_text(json.dumps(doc, indent=1))
    os.replace(tmp, out / "results.json")
    (out / "results.md").write_text(markdown_report(doc))


def table_columns() -> list[tuple[str, str, str]]:
    return model.COLUMNS + EXTRA_COLUMNS


def markdown_report(doc: dict) -> str:
    meta, rows = doc["meta"], doc["rows"]
    lines = ["# Collective benchmark: byteps push_pull vs gloo vs OpenMPI (ring)", "",
             f"Run {meta.get('started', '?')} on the emulated cluster (tools/testbed), "
             f"`{meta.get('command', '')}`{'' if meta.get('complete') else ' (incomplete)'}.", "",
             "Per-host rate R (both directions, tbf); goodput G = 0.956 R/8.  time_s: median; "
             "%G = M/t/G; busbw%G = 2(n-1)/n M/t/G (ring); %model = ideal/t; vs_gloo = "
             "t_gloo/t; theory = 2(n-1)/n min(1, k/n) (1 colocated, (n^2+kn-2k)/n^2 mixed "
             "n+k); est_s = flow-level estimate of what byteps' partitioning allows (bench/collective/model.py, simulate_ps), "
             "%est = est_s/t.", ""]
    lines.append(model.format_markdown(rows, table_columns()))
    failed = [c for c in doc["configs"] if c["status"] == "failed"]
    if failed:
        lines += ["", "Failed configurations:", ""]
        lines += [f"- {c['name']}: {c['error'].splitlines()[0] if c['error'] else '?'}"
                  for c in failed]
    lines += ["", "CPU during each configuration (2 cores; under test = processes inside the "
              "testbed; other = every other process on the machine):", "",
              "| configuration | R_Mbit | hosts | elapsed_s | busy % | under test cpu_s | "
              "other cpu_s | softirq cpu_s |",
              "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for c in doc["configs"]:
        cpu = c.get("cpu")
        if cpu:
            lines.append(f"| {c['name']} | {c['rate_mbit']:g} | {c['hosts']} | "
                         f"{cpu['elapsed_s']} | {cpu['busy_pct']} | {cpu['under_test_cpu_s']} | "
                         f"{cpu['other_processes_cpu_s']} | {cpu['softirq_cpu_s']} |")
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------------------------
# Main


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python3 -m bench.collective.run",
                                 description="byteps push_pull vs gloo all_reduce vs OpenMPI "
                                             "MPI_Allreduce (ring) on the emulated cluster.")
    ap.add_argument("--quick", action="store_true",
                    help=f"preset: n {QUICK['n']}, sizes {QUICK['sizes']}, {QUICK['iters']} "
                         "iterations, rate 1000 (explicit options still win)")
    ap.add_argument("--rate", type=float, default=None, metavar="MBIT",
                    help="per-host link rate in Mbit/s (default 1000)")
    ap.add_argument("--rate-budget", type=float, default=12000, metavar="MBIT",
                    help="cap on hosts x rate of one testbed (default 12000; 0 = no cap)")
    ap.add_argument("--n", default=None, help="worker counts (default 2,4,8)")
    ap.add_argument("--k", default="n,n/2,colocated",
                    help="byteps server placements: n, n/2, colocated, numbers, or mixed:K / "
                         "n+K (colocated servers plus K CPU hosts; default n,n/2,colocated)")
    ap.add_argument("--sizes", default=None, help=f"sizes, K/M/G binary (default {DEFAULT_SIZES})")
    ap.add_argument("--systems", default="byteps,gloo,mpi")
    ap.add_argument("--iters", type=int, default=None,
                    help="timed iterations per size (default clamp(512M/size, 5, 50))")
    ap.add_argument("--warmup", type=int, default=1, help="untimed iterations per size")
    ap.add_argument("--timing", choices=TIMINGS, default="barrier",
                    help="barrier: every system times one collective after a barrier (default); "
                         "back-to-back: the collectives follow each other with nothing between")
    ap.add_argument("--out", default=str(REPO / "bench-results" / "collective"))
    ap.add_argument("--byteps-env", action="append", default=[], metavar="K=V",
                    help="extra environment of the byteps job (e.g. BYTEPS_PARTITION_BYTES=1M)")
    ap.add_argument("--mpi-arg", action="append", default=[], dest="mpi_args", metavar="ARG",
                    help="extra mpirun argument (repeat; e.g. --mpi-arg=--mca "
                         "--mpi-arg=btl_tcp_links --mpi-arg=2)")
    ap.add_argument("--wait-idle", type=float, default=120, metavar="S",
                    help="before each configuration wait up to S s until the machine is below "
                         "--idle-threshold busy (other users); 0 = never wait (default 120)")
    ap.add_argument("--idle-threshold", type=float, default=25, metavar="PCT",
                    help="busy %% of the machine that counts as idle (default 25)")
    ap.add_argument("--mpi-busy-poll", action="store_true",
                    help="let OpenMPI busy-poll (default: mpi_yield_when_idle 1, as n ranks "
                         "share these cores)")
    ap.add_argument("--link-trace", action="store_true",
                    help="sample every link's byte counters every 2 ms (raw/<config>_links.txt)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its estimate")
    ap.add_argument("-v", "--verbose", action="store_true", help="echo every process's output")
    args = ap.parse_args(argv)
    if args.quick:
        args.n = args.n or QUICK["n"]
        args.sizes = args.sizes or QUICK["sizes"]
        args.iters = args.iters if args.iters is not None else QUICK["iters"]
        args.rate = args.rate if args.rate is not None else QUICK["rate"]
    args.rate = 1000.0 if args.rate is None else args.rate
    args.n = parse_list(args.n or "2,4,8", int)
    args.k = parse_list(args.k)
    args.systems = parse_list(args.systems)
    for s in args.systems:
        if s not in RUNNERS:
            ap.error(f"unknown system {s!r} (byteps, gloo, mpi)")
    for n in args.n:
        if n < 2:
            ap.error("n must be >= 2")
        for t in args.k:
            try:
                k, placement, _ = model.parse_k(t, n)
            except ValueError as err:
                ap.error(str(err))
            if placement == model.COLOCATED and k > n:
                ap.error(f"colocated k={k} > n={n}")
    try:
        args.sizes = sorted(set(model.parse_size(s)
                                for s in parse_list(args.sizes or DEFAULT_SIZES)))
    except ValueError as err:
        ap.error(str(err))
    env = {}
    for kv in args.byteps_env:
        key, sep, value = kv.partition("=")
        if not sep:
            ap.error(f"--byteps-env wants K=V, got {kv!r}")
        env[key] = value
    args.byteps_env = env
    if args.rate <= 0:
        ap.error("--rate must be > 0")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    sizes = args.sizes
    iters = [args.iters or model.iterations(m) for m in sizes]
    plan = build_plan(args, sizes, iters)
    total_est = sum(c.estimate_s for c in plan)
    print(f"collective benchmark: {len(plan)} configurations, sizes "
          f"{','.join(model.format_size(m) for m in sizes)} (iterations {iters}, warmup "
          f"{args.warmup}), estimated {model.format_duration(total_est)}", flush=True)
    for c in plan:
        print(f"  {c.name:<34} {c.hosts:>2} hosts at {c.rate_mbit:g} Mbit/s"
              f"{' (lowered: CPU budget)' if c.rate_mbit < args.rate else ''}"
              f"  ~{model.format_duration(c.estimate_s)}", flush=True)
    if args.dry_run:
        return 0

    from tools.testbed import Testbed
    ok, reason = Testbed.available()
    if not ok:
        print(f"collective benchmark: no emulated cluster here: {reason}", file=sys.stderr)
        return 2
    out = Path(args.out)
    raw = out / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    meta = {"started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": "python3 -m bench.collective.run "
                       + " ".join(argv if argv is not None else sys.argv[1:]),
            "rate_mbit": args.rate, "rate_budget_mbit": args.rate_budget, "n": args.n,
            "k": args.k, "sizes": sizes, "iters": iters, "warmup": args.warmup,
            "timing": args.timing,
            "systems": args.systems, "byteps_env": args.byteps_env, "mpi_args": args.mpi_args,
            "mpi_busy_poll": args.mpi_busy_poll,
            "goodput_factor": model.TCP_GOODPUT_FACTOR, "cpus": os.cpu_count()}
    rows: list[dict] = []
    start = time.monotonic()
    done_est = done_real = 0.0
    try:
        for idx, cfg in enumerate(track(plan, "collective", lambda c: f"{c.name} at {c.rate_mbit:g} Mbit/s")):
            left_est = sum(c.estimate_s for c in plan[idx:])
            scale = done_real / done_est if done_est > 0 else 1.0
            print(f"[{idx + 1}/{len(plan)}] {cfg.name} on {cfg.hosts} hosts at "
                  f"{cfg.rate_mbit:g} Mbit/s (elapsed "
                  f"{model.format_duration(time.monotonic() - start)}, "
                  f"~{model.format_duration(left_est * scale)} left)", flush=True)
            idle = None
            if args.wait_idle > 0:
                idle = wait_until_idle(args.wait_idle, args.idle_threshold)
            t0 = time.monotonic()
            try:
                with Testbed(cfg.hosts, rate_mbit=cfg.rate_mbit,
                             prefix=f"bpstc{os.getpid() % 100000}x{idx}") as tb:
                    trace = raw / f"{cfg.tag}_links.txt"
                    with CpuMonitor(tb.namespaces) as cpu, \
                            (LinkMonitor(tb, trace) if args.link_trace else nullcontext()):
                        measured = RUNNERS[cfg.system](tb, cfg, sizes, iters, args, raw,
                                                       timeout=max(120.0, 4 * cfg.estimate_s + 60))
                    if args.link_trace:
                        cfg.info["links_over_time"] = linkmon.idle_summary(linkmon.load(trace),
                                                                           cfg.rate_mbit)
                    cfg.info["cpu"] = cpu.result
                    if idle:
                        cpu.result["busy_pct_before"] = round(idle[0], 1)
                        cpu.result["waited_for_idle_s"] = round(idle[1], 1)
                    if cfg.system == "byteps":
                        cfg.info["links"] = _qdisc_sent(tb)
                cfg.status = "ok"
            except Exception as err:  # noqa: BLE001 - record it, go on with the next one
                cfg.status, cfg.error, measured = "failed", str(err), {}
                print(f"    FAILED: {_tail(str(err), 15)}", flush=True)
            cfg.elapsed_s = time.monotonic() - t0
            done_est += cfg.estimate_s
            done_real += cfg.elapsed_s
            new = make_rows(cfg, measured, sizes, iters, args)
            rows += new
            for r in new:
                if r["time_s"]:
                    extra = (f", est {r['est_s']:.3f} s" if r.get("est_s") else "")
                    print(f"    {r['size']:>5}: {r['time_s']:.4f} s, {r['pct_goodput']:.1f} %G, "
                          f"{r['pct_model']:.1f} % of model ({r['ideal_s']:.3f} s{extra})",
                          flush=True)
            lt = cfg.info.get("links_over_time")
            if lt:
                print(f"    links: used {lt['mean_used_pct']} % of the rate, idle "
                      f"{lt['mean_idle_pct']} % of the {lt['span_s']} s busy span (mean of "
                      f"{len(lt['used_pct'])} link directions)", flush=True)
            cpu = cfg.info.get("cpu")
            if cpu:
                print(f"    cpu: busy {cpu['busy_pct']} % of {cpu['cpus']} cores; under test "
                      f"{cpu['under_test_cpu_s']} s, other processes "
                      f"{cpu['other_processes_cpu_s']} s, softirq {cpu['softirq_cpu_s']} s "
                      f"in {cpu['elapsed_s']} s", flush=True)
            write_outputs(out, meta, plan, rows, final=False)
    finally:
        meta["elapsed_s"] = round(time.monotonic() - start, 1)
        final = all(c.status != "pending" for c in plan)
        write_outputs(out, meta, plan, rows, final=final)
        rows_sorted = sorted(model.fill_ratios(rows), key=model.sort_key)
        print()
        print(model.format_table(rows_sorted, table_columns()))
        if not args.no_plot and rows_sorted:
            try:
                from bench.collective import plot
                png = plot.plot(rows_sorted, out / "collective.png")
                print(f"plot: {png}")
            except Exception as err:  # noqa: BLE001 - the data is saved; say why there is no plot
                print(f"plot failed: {err}", file=sys.stderr)
        print(f"results: {out / 'results.json'}, {out / 'results.md'} "
              f"({model.format_duration(time.monotonic() - start)})")
    failed = [c.name for c in plan if c.status == "failed"]
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
