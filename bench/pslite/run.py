"""byteps vs ps-lite on one shape, interleaved in one run on this machine::

    /usr/bin/python3 -m bench.pslite.run [--iters 30] [--rounds 3] [--out bench-results/pslite.json]

Shape (both systems): 1 worker + 1 server on loopback; each iteration puts 20 float32 tensors of
4 MiB (one key each) in flight at once, pushes every one, sums it on the server and pulls it back;
the iteration ends when the last tensor is back.  Figures: the median iteration time (median over
the rounds of each round's median over ``--iters`` timed iterations, after ``--warmup`` untimed
ones), the throughput in Gbit/s of tensor bytes per iteration (tensors * bytes * 8 / time / 1e9),
and the byteps/system throughput ratio (> 1: byteps is faster).

Systems (``--systems``, all by default):

* ``byteps``: ``bpsrun -n 1 -s 1 --force-distributed -- byteps-core bench --tensors 20
  --tensor-bytes 4M --iters N`` with default settings (every BYTEPS_*/DMLC_*/PS_* variable of the
  calling environment is dropped);
* ``pslite-push-then-pull``: ps-lite, per key a ``ZPush`` and, when it is acknowledged, a ``ZPull``;
* ``pslite-zpushpull``: ps-lite, per key one ``ZPushPull``.

ps-lite is built from the peer tarball (``--pslite-tarball``, default
/work/shared/peers/ps-lite-15b8adf.tar.gz) in a cache folder outside the repository
(``--cache-dir``, default ~/.cache/byteps-bench/ps-lite-<tarball name>): unpacked there, ``make
ps DEPS_PATH=/usr PROTOC=protoc``, then bench/pslite/pslite_kv_bench.cc (our own client, written
against ps-lite's public KVWorker/KVServer API) is compiled against its ``build/libps.a``.  When
the tarball or a build dependency (make, a C++ compiler, protoc, ZeroMQ and protobuf headers:
``apt-get install -y protobuf-compiler libzmq3-dev libprotobuf-dev``) is missing, or the build
fails, the ps-lite rows are skipped with the reason printed, and the byteps row still runs.

Every job has a deadline (``--timeout``); a job past it is killed (its whole process group) and
reported as failed.  The exit status is 1 when any job failed, 0 otherwise (skips included).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from tools.progress import Progress

REPO = Path(__file__).resolve().parents[2]
CLIENT_SOURCE = Path(__file__).resolve().parent / "pslite_kv_bench.cc"
DEFAULT_TARBALL = Path("/work/shared/peers/ps-lite-15b8adf.tar.gz")
APT_HINT = "apt-get install -y protobuf-compiler libzmq3-dev libprotobuf-dev"

BYTEPS = "byteps"
PSLITE_MODES = {"pslite-push-then-pull": "push-then-pull", "pslite-zpushpull": "zpushpull"}
SYSTEMS = [BYTEPS, *PSLITE_MODES]
# Variables that would change either system's settings: dropped so both run with defaults.
TUNING_PREFIXES = ("BYTEPS_", "DMLC_", "PS_")


class JobFailed(RuntimeError):
    """One job of one system failed or ran past its deadline."""


# --------------------------------------------------------------------------------------------
# pure helpers (unit-tested)

def parse_size(text: str) -> int:
    """'4M' -> 4194304, '64K', '1G', '4096' (binary multiples)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"bad size {text!r} (examples: 4096, 64K, 4M, 1G)")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def parse_systems(text: str) -> list[str]:
    names = [s.strip() for s in text.split(",") if s.strip()]
    unknown = [s for s in names if s not in SYSTEMS]
    if unknown or not names:
        raise ValueError(f"unknown system(s) {', '.join(unknown) or '(none)'}; choose from {', '.join(SYSTEMS)}")
    return list(dict.fromkeys(names))


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python3 -m bench.pslite.run", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=30, help="timed iterations per job (default 30)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each runs every system once (default 3)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed iterations per job (default 2, byteps's)")
    ap.add_argument("--tensors", type=int, default=20, help="tensors (keys) per iteration (default 20)")
    ap.add_argument("--tensor-bytes", default="4M", help="bytes per tensor, float32 (default 4M)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma list of {', '.join(SYSTEMS)}")
    ap.add_argument("--out", type=Path, default=REPO / "bench-results" / "pslite.json")
    ap.add_argument("--timeout", type=float, default=300, help="deadline of one job, seconds (default 300)")
    ap.add_argument("--iter-timeout", type=float, default=60,
                    help="deadline of one ps-lite iteration, seconds (default 60)")
    ap.add_argument("--build-timeout", type=float, default=900,
                    help="deadline of the ps-lite build and the client compile, seconds (default 900)")
    ap.add_argument("--pslite-tarball", type=Path, default=DEFAULT_TARBALL)
    ap.add_argument("--cache-dir", type=Path, default=None,
                    help="where ps-lite is unpacked and built (default ~/.cache/byteps-bench/ps-lite-<tarball>)")
    ap.add_argument("--core", type=Path, default=None,
                    help="byteps-core (default python/byteps/_bin/byteps-core, else build/src/cli/byteps-core)")
    return ap


def parse_args(argv=None) -> argparse.Namespace:
    ap = build_parser()
    a = ap.parse_args(argv)
    for name in ("iters", "rounds", "tensors"):
        if getattr(a, name) < 1:
            ap.error(f"--{name} must be >= 1 (got {getattr(a, name)})")
    if a.warmup < 0:
        ap.error(f"--warmup must be >= 0 (got {a.warmup})")
    for name in ("timeout", "iter_timeout", "build_timeout"):
        if not getattr(a, name) > 0:
            ap.error(f"--{name.replace('_', '-')} must be > 0")
    try:
        a.tensor_bytes = parse_size(a.tensor_bytes)
        a.systems = parse_systems(a.systems)
    except ValueError as e:
        ap.error(str(e))
    if a.tensor_bytes < 4 or a.tensor_bytes % 4:
        ap.error(f"--tensor-bytes must be a positive multiple of 4 (float32), got {a.tensor_bytes}")
    if a.cache_dir is None:
        a.cache_dir = default_cache_dir(a.pslite_tarball)
    return a


def default_cache_dir(tarball: Path) -> Path:
    name = tarball.name
    for suffix in (".tar.gz", ".tgz", ".tar"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    if not name.startswith("ps-lite"):
        name = "ps-lite-" + name
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "byteps-bench" / name


def clean_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(TUNING_PREFIXES)}
    env.update(extra or {})
    return env


def gbit_per_s(tensors: int, tensor_bytes: int, seconds: float) -> float:
    return tensors * tensor_bytes * 8 / seconds / 1e9


def byteps_iteration_s(data: dict, tensors: int, tensor_bytes: int) -> float:
    """Median iteration seconds from `byteps-core bench --tensors ... --json` output."""
    if data.get("mode") != "many_tensors":
        raise ValueError(f"byteps result is not a many-tensor run: mode {data.get('mode')!r}")
    if data.get("tensors") != tensors or data.get("tensor_bytes") != tensor_bytes:
        raise ValueError(f"byteps result shape {data.get('tensors')} x {data.get('tensor_bytes')} B, "
                         f"expected {tensors} x {tensor_bytes} B")
    # per_tensor_us_median is the median over iterations of (iteration time / tensors).
    return float(data["per_tensor_us_median"]) * tensors / 1e6


def parse_pslite_output(text: str, mode: str, tensors: int, tensor_bytes: int) -> dict:
    """The worker's `RESULT {json}` line -> dict (median_s, iter_s, ...); ERROR lines raise."""
    errors = [ln for ln in text.splitlines() if ln.startswith("ERROR ")]
    if errors:
        raise ValueError(errors[0])
    lines = [ln for ln in text.splitlines() if ln.startswith("RESULT ")]
    if not lines:
        raise ValueError("no RESULT line in the ps-lite worker's output")
    data = json.loads(lines[-1][len("RESULT "):])
    if data.get("mode") != mode or data.get("tensors") != tensors or data.get("tensor_bytes") != tensor_bytes:
        raise ValueError(f"ps-lite result is for {data.get('mode')} {data.get('tensors')} x "
                         f"{data.get('tensor_bytes')} B, expected {mode} {tensors} x {tensor_bytes} B")
    if not data.get("median_s", 0) > 0:
        raise ValueError(f"ps-lite result has no positive median_s: {data.get('median_s')!r}")
    return data


def round_order(systems: list[str], r: int) -> list[str]:
    """Round r runs the systems rotated by r, so none is always first (or last)."""
    k = r % len(systems)
    return systems[k:] + systems[:k]


def summarize(rounds: list[dict], systems: list[str], tensors: int, tensor_bytes: int) -> dict:
    """rounds: [{system: seconds or None}] -> per system median s, Gbit/s, byteps/system ratios."""
    summary = {}
    for s in systems:
        times = [r[s] for r in rounds if r.get(s) is not None]
        if not times:
            summary[s] = {"ok_rounds": 0}
            continue
        med = statistics.median(times)
        summary[s] = {"ok_rounds": len(times), "median_iter_s": med, "min_iter_s": min(times),
                      "max_iter_s": max(times), "gbit_s": gbit_per_s(tensors, tensor_bytes, med)}
    base = summary.get(BYTEPS, {})
    for s in systems:
        row = summary[s]
        if s == BYTEPS or "median_iter_s" not in row or "median_iter_s" not in base:
            continue
        # Throughput ratio byteps/system = system time / byteps time (> 1: byteps faster).
        row["byteps_over_this"] = row["median_iter_s"] / base["median_iter_s"]
        paired = [r[s] / r[BYTEPS] for r in rounds if r.get(s) is not None and r.get(BYTEPS) is not None]
        if paired:
            row["byteps_over_this_paired_median"] = statistics.median(paired)
    return summary


def format_table(summary: dict, systems: list[str], skipped: dict) -> str:
    lines = ["| system | rounds ok | median iteration (ms) | Gbit/s | byteps/system (throughput) |",
             "|---|---|---|---|---|"]
    for s in systems:
        row = summary.get(s)
        if s in skipped:
            lines.append(f"| {s} | skipped | - | - | - |")
        elif not row or "median_iter_s" not in row:
            lines.append(f"| {s} | 0 (failed) | - | - | - |")
        else:
            ratio = row.get("byteps_over_this")
            lines.append(f"| {s} | {row['ok_rounds']} | {row['median_iter_s'] * 1e3:.1f} | {row['gbit_s']:.2f} | "
                         f"{'-' if ratio is None else f'{ratio:.2f}'} |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# processes with deadlines

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc: subprocess.Popen) -> None:
    """Kills the process group this runner started for `proc` (start_new_session=True)."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def tail(path: Path, n: int = 2500) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def run_logged(cmd: list, log: Path, timeout: float, cwd=None, env=None, what: str = "") -> None:
    """Runs cmd (its own process group) with output to log; JobFailed on exit != 0 or deadline."""
    with open(log, "w") as f:
        proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc)
            raise JobFailed(f"{what or cmd[0]}: timed out after {timeout:.0f} s (killed); log {log}:\n{tail(log)}")
        finally:
            kill_group(proc)  # leftovers of the group, if any
    if rc != 0:
        raise JobFailed(f"{what or cmd[0]}: exit {rc}; log {log}:\n{tail(log)}")


# --------------------------------------------------------------------------------------------
# ps-lite: build

def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def pslite_dependency_problems() -> list[str]:
    """What the ps-lite build (make ps DEPS_PATH=/usr) needs and this machine lacks."""
    problems = []
    for tool in ("make", "ar"):
        if not shutil.which(tool):
            problems.append(f"no `{tool}`")
    if not (shutil.which("g++") or shutil.which("c++")):
        problems.append("no C++ compiler (g++)")
    if not Path("/usr/bin/protoc").exists():
        problems.append("no /usr/bin/protoc (protobuf-compiler)")
    if not Path("/usr/include/zmq.h").exists():
        problems.append("no /usr/include/zmq.h (libzmq3-dev)")
    if not Path("/usr/include/google/protobuf/message.h").exists():
        problems.append("no /usr/include/google/protobuf/message.h (libprotobuf-dev)")
    return problems


def prepare_pslite(tarball: Path, cache_dir: Path, build_timeout: float, log=print) -> tuple[Path | None, str]:
    """Builds ps-lite and our client in cache_dir. Returns (client binary, "") or (None, skip reason)."""
    if not tarball.is_file():
        return None, f"ps-lite tarball {tarball} not found (pass --pslite-tarball PATH)"
    problems = pslite_dependency_problems()
    if problems:
        return None, f"ps-lite build dependencies missing: {'; '.join(problems)} (install: {APT_HINT})"
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time per cache folder
        try:
            return build_pslite(tarball, cache_dir, build_timeout, log), ""
        except (JobFailed, OSError, tarfile.TarError, ValueError) as e:
            return None, f"ps-lite build failed: {e}"


def build_pslite(tarball: Path, cache_dir: Path, build_timeout: float, log) -> Path:
    src = cache_dir / "ps-lite"
    libps = src / "build" / "libps.a"
    stamp = cache_dir / "tarball.sha256"
    digest = sha256_file(tarball)
    t0 = time.monotonic()
    if not (libps.exists() and stamp.exists() and stamp.read_text().strip() == digest):
        log(f"building ps-lite from {tarball} in {src} ...")
        shutil.rmtree(src, ignore_errors=True)
        stamp.unlink(missing_ok=True)
        with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
            with tarfile.open(tarball) as tf:
                if hasattr(tarfile, "data_filter"):
                    tf.extractall(tmp, filter="data")
                else:
                    for m in tf.getmembers():
                        if m.name.startswith("/") or ".." in Path(m.name).parts:
                            raise ValueError(f"unsafe path in {tarball}: {m.name}")
                    tf.extractall(tmp)
            tops = [p for p in Path(tmp).iterdir() if (p / "Makefile").exists() and (p / "include/ps/ps.h").exists()]
            if len(tops) != 1:
                raise ValueError(f"{tarball}: expected one ps-lite source folder (Makefile, include/ps/ps.h)")
            tops[0].rename(src)
        run_logged(["make", "-j2", "ps", "DEPS_PATH=/usr", "PROTOC=/usr/bin/protoc"], cache_dir / "build.log",
                   build_timeout, cwd=src, what="ps-lite make")
        if not libps.exists():
            raise JobFailed(f"ps-lite make left no {libps}")
        stamp.write_text(digest + "\n")
        log(f"  built {libps} in {time.monotonic() - t0:.0f} s")
    binary = cache_dir / "pslite_kv_bench"
    client_stamp = cache_dir / "pslite_kv_bench.sha256"
    want = hashlib.sha256(CLIENT_SOURCE.read_bytes() + digest.encode()).hexdigest()
    if not (binary.exists() and client_stamp.exists() and client_stamp.read_text().strip() == want):
        cxx = shutil.which("g++") or shutil.which("c++")
        tmp_bin = cache_dir / "pslite_kv_bench.tmp"
        run_logged([cxx, "-std=c++17", "-O2", "-isystem", src / "include", CLIENT_SOURCE, libps,
                    "-lprotobuf-lite", "-lzmq", "-pthread", "-o", tmp_bin], cache_dir / "client.log", build_timeout,
                   what="compiling bench/pslite/pslite_kv_bench.cc")
        tmp_bin.replace(binary)
        client_stamp.write_text(want + "\n")
        log(f"  compiled {binary}")
    return binary


# --------------------------------------------------------------------------------------------
# jobs

def find_core(explicit: Path | None) -> Path | None:
    candidates = [explicit] if explicit else [REPO / "python/byteps/_bin/byteps-core",
                                              REPO / "build/src/cli/byteps-core"]
    for c in candidates:
        if c and c.is_file() and os.access(c, os.X_OK):
            return c.resolve()
    return None


def run_byteps(core: Path, a: argparse.Namespace, workdir: Path) -> dict:
    out = workdir / "byteps.json"
    out.unlink(missing_ok=True)
    env = clean_env({"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "python"),
                                                                 os.environ.get("PYTHONPATH")]))})
    cmd = [sys.executable, "-m", "byteps.launcher.bpsrun", "--timeout", str(int(a.timeout)), "-n", "1", "-s", "1",
           "--force-distributed", "--core-binary", core, "--", core, "bench", "--tensors", str(a.tensors),
           "--tensor-bytes", str(a.tensor_bytes), "--iters", str(a.iters), "--warmup", str(a.warmup),
           "--json", out]
    run_logged(cmd, workdir / "byteps.log", a.timeout + 30, cwd=REPO, env=env, what="byteps job")
    if not out.exists():
        raise JobFailed(f"byteps job wrote no {out}; log:\n{tail(workdir / 'byteps.log')}")
    data = json.loads(out.read_text())
    return {"iter_s": byteps_iteration_s(data, a.tensors, a.tensor_bytes), "raw": data}


def run_pslite(binary: Path, mode: str, a: argparse.Namespace, workdir: Path) -> dict:
    """One ps-lite job (scheduler, server, worker) on loopback; every process is killed at the deadline."""
    env = clean_env({"DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": "127.0.0.1",
                     "DMLC_PS_ROOT_PORT": str(free_port()), "DMLC_NODE_HOST": "127.0.0.1"})
    args = [str(binary), "--mode", mode, "--tensors", str(a.tensors), "--tensor-bytes", str(a.tensor_bytes),
            "--iters", str(a.iters), "--warmup", str(a.warmup), "--iter-timeout", str(a.iter_timeout)]
    procs, logs = {}, {}
    deadline = time.monotonic() + a.timeout
    try:
        for role in ("scheduler", "server", "worker"):
            logs[role] = workdir / f"pslite-{mode}-{role}.log"
            with open(logs[role], "w") as f:
                procs[role] = subprocess.Popen(args, env={**env, "DMLC_ROLE": role}, stdout=f,
                                               stderr=subprocess.STDOUT, start_new_session=True)
        for role in ("worker", "server", "scheduler"):
            try:
                rc = procs[role].wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                running = [r for r, p in procs.items() if p.poll() is None]
                raise JobFailed(f"ps-lite {mode}: timed out after {a.timeout:.0f} s with {', '.join(running)} "
                                f"still running (killed); worker log:\n{tail(logs['worker'])}")
            if rc != 0:
                raise JobFailed(f"ps-lite {mode}: {role} exited {rc}; {role} log:\n{tail(logs[role])}")
    finally:
        for p in procs.values():
            kill_group(p)
    try:
        data = parse_pslite_output(logs["worker"].read_text(errors="replace"), mode, a.tensors, a.tensor_bytes)
    except ValueError as e:
        raise JobFailed(f"ps-lite {mode}: {e}; worker log:\n{tail(logs['worker'])}")
    return {"iter_s": data["median_s"], "raw": data}


# --------------------------------------------------------------------------------------------

def main(argv=None) -> int:
    t_start = time.monotonic()
    a = parse_args(argv)
    shape = f"{a.tensors} x {a.tensor_bytes} B float32, 1 worker + 1 server, loopback"
    print(f"# byteps vs ps-lite: {shape}; {a.iters} timed + {a.warmup} warmup iterations per job, "
          f"{a.rounds} rounds", flush=True)
    dropped = sorted(k for k in os.environ if k.startswith(TUNING_PREFIXES))
    if dropped:
        print(f"# dropped from the jobs' environment (defaults only): {', '.join(dropped)}")

    skipped: dict[str, str] = {}
    runners = {}
    if BYTEPS in a.systems:
        core = find_core(a.core)
        if core is None:
            print(f"error: no byteps-core ({a.core or 'python/byteps/_bin/byteps-core, build/src/cli/byteps-core'}); "
                  f"build it with `bash scripts/build.sh` or pass --core", file=sys.stderr)
            return 2
        print(f"# byteps: {core}")
        runners[BYTEPS] = lambda wd, core=core: run_byteps(core, a, wd)
    wanted_pslite = [s for s in a.systems if s in PSLITE_MODES]
    if wanted_pslite:
        binary, reason = prepare_pslite(a.pslite_tarball, a.cache_dir, a.build_timeout,
                                        log=lambda m: print(m, flush=True))
        if binary is None:
            print(f"ps-lite rows skipped: {reason}", flush=True)
            for s in wanted_pslite:
                skipped[s] = reason
        else:
            print(f"# ps-lite: {binary} (from {a.pslite_tarball})")
            for s in wanted_pslite:
                runners[s] = lambda wd, mode=PSLITE_MODES[s]: run_pslite(binary, mode, a, wd)

    active = [s for s in a.systems if s in runners]
    rounds, failures, raw = [], [], []
    with tempfile.TemporaryDirectory(prefix="bench-pslite-") as tmp, \
            Progress(a.rounds * len(active), "pslite") as progress:
        for r in range(a.rounds):
            row, raw_row = {}, {}
            for s in round_order(active, r) if active else []:
                progress.step(f"round {r + 1}: {s}")
                t0 = time.monotonic()
                try:
                    res = runners[s](Path(tmp))
                    row[s], raw_row[s] = res["iter_s"], res["raw"]
                except JobFailed as e:
                    row[s] = None
                    failures.append({"round": r + 1, "system": s, "error": str(e)})
                    print(f"round {r + 1}: {s} FAILED: {e}", flush=True)
                raw_row[f"{s}.wall_s"] = round(time.monotonic() - t0, 2)
            rounds.append(row)
            raw.append(raw_row)
            print(f"round {r + 1}: " + ", ".join(
                f"{s} {'failed' if row[s] is None else f'{row[s] * 1e3:.1f} ms'}" for s in active), flush=True)

    summary = summarize(rounds, a.systems, a.tensors, a.tensor_bytes) if active else {}
    print()
    print(format_table(summary, a.systems, skipped))
    for s, reason in skipped.items():
        print(f"({s} skipped: {reason})")
    elapsed = time.monotonic() - t_start
    print(f"# took {elapsed:.0f} s")
    result = {"shape": {"tensors": a.tensors, "tensor_bytes": a.tensor_bytes, "dtype": "float32", "workers": 1,
                        "servers": 1, "transport": "loopback TCP"},
              "iters": a.iters, "warmup": a.warmup, "rounds_requested": a.rounds, "systems": a.systems,
              "pslite_tarball": str(a.pslite_tarball), "rounds": rounds, "raw": raw, "summary": summary,
              "skipped": skipped, "failures": failures, "elapsed_s": round(elapsed, 1)}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(result, indent=1) + "\n")
    print("JSON " + json.dumps({"summary": summary, "skipped": skipped, "failures": len(failures)}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
