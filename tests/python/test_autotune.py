"""Start-up tuning (docs/performance.md) in real jobs on loopback: worker 0 probes, every worker
applies its partition size before its first push_pull, pinned values are kept, and workers that
disagree fail with a named error instead of summing mismatched partitions.

The settings each worker applied are read from its INFO log line ("settings: partition N bytes:
...", one per worker process).
"""

from __future__ import annotations

import re

import pytest

pytestmark = pytest.mark.usefixtures("require_core")

SETTINGS = re.compile(r"\[worker:(\d+)\].*settings: partition (\d+) bytes: ([^;]*); credit (\d+) bytes")

# Every worker pushes tensors of several sizes (float64 and int64, so a wrongly split partition
# shows as a wrong value, not a rounding error) and checks the exact sums.
SCRIPT = """
import os, sys
import numpy as np
if os.environ.get("PIN_ON_WORKER") == os.environ["DMLC_WORKER_ID"]:
    os.environ["BYTEPS_PARTITION_BYTES"] = os.environ["PIN_VALUE"]
import byteps.numpy as bps
bps.init()
rank, n = bps.rank(), bps.size()
for size in (1, 1000, 300000, 1500000):
    for dtype in (np.float64, np.int64):
        x = np.arange(size, dtype=dtype) * (rank + 1)
        got = bps.push_pull(x, average=False, name=f"t.{size}.{np.dtype(dtype).name}")
        want = np.arange(size, dtype=dtype) * (n * (n + 1) // 2)
        if not np.array_equal(got, want):
            print(f"MISMATCH size {size} {np.dtype(dtype).name}", flush=True)
            sys.exit(3)
print("ALL OK", flush=True)
bps.shutdown()
"""


def settings_by_worker(output: str) -> dict[int, tuple[int, str, int]]:
    return {int(m.group(1)): (int(m.group(2)), m.group(3), int(m.group(4))) for m in SETTINGS.finditer(output)}


def run(run_job, n: int, env: dict[str, str]):
    return run_job(n, 2, SCRIPT, env={"BYTEPS_LOG_LEVEL": "INFO", **env}, timeout=90)


def test_every_worker_applies_worker_zeros_probed_partition_size(run_job):
    result = run(run_job, 3, {})
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 3, result
    seen = settings_by_worker(result.output)
    assert sorted(seen) == [0, 1, 2], result.output
    partition, reason, credit = seen[0]
    assert reason.startswith("sqrt(M 16 MiB * c 100 us * B "), reason
    assert 64 << 10 <= partition <= 4 << 20 and partition & (partition - 1) == 0, partition
    assert credit >= 16 * partition, (credit, partition)
    for rank in (1, 2):
        assert seen[rank] == (partition, "worker 0's start-up probe", credit), seen
    assert "4 MiB in partitions of 256 KiB" in result.output, "worker 0 logs the probe's times"


def test_a_pinned_partition_size_is_kept(run_job):
    result = run(run_job, 2, {"BYTEPS_PARTITION_BYTES": "65536"})
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
    seen = settings_by_worker(result.output)
    assert seen[0][:2] == (65536, "set by BYTEPS_PARTITION_BYTES"), seen
    assert seen[1][0] == 65536, seen
    assert seen[0][2] > 0, "the credit is still derived from the probe"


CONNECTIONS = re.compile(r"\[worker:(\d+)\].*settings: .*; connections per server (\d+): ([^;\n]*)")
NEEDED = re.compile(r"^max\(2, ceil\(B R / W\) = ceil\(\d+ Mbit/s \* [\d.]+ ms / (\d+) KiB\) = (\d+)\), at most 16$")


def test_connections_per_server_follow_the_model_or_stay_pinned(run_job):
    # Each worker derives its count from worker 0's B and R and its own window (64 KiB here, the
    # smallest allowed; on loopback B R is 1 to 8 such windows, so some runs widen and some keep
    # 2: tests/integration/cluster_test.cc makes it deterministic with a delaying relay). The
    # count applied is the one the log's formula gives, and every sum is exact.
    for env, pinned in (({"BYTEPS_SOCKET_BUFFER_BYTES": "65536"}, None),
                        ({"BYTEPS_SOCKET_BUFFER_BYTES": "65536", "BYTEPS_CONNECTIONS_PER_PEER": "1"}, 1),
                        ({"BYTEPS_AUTOTUNE": "0"}, 2)):
        result = run(run_job, 2, env)
        assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
        seen = {int(m.group(1)): (int(m.group(2)), m.group(3)) for m in CONNECTIONS.finditer(result.output)}
        assert sorted(seen) == [0, 1], result.output
        for rank, (k, reason) in seen.items():
            if pinned is not None:
                assert k == pinned, (env, rank, k, reason)
                assert reason == ("set by BYTEPS_CONNECTIONS_PER_PEER" if pinned == 1 else "the default"), reason
                continue
            m = NEEDED.match(reason)
            assert m and m.group(1) == "64", reason
            assert k == min(16, max(2, int(m.group(2)))), (rank, k, reason)
            widened = re.search(rf"\[worker:{rank}\].*now {k} connections to each of 2 servers", result.output)
            assert bool(widened) == (k > 2), result.output


def test_everything_pinned_or_autotune_off_means_no_probe(run_job):
    for env, partition, reason in (
            ({"BYTEPS_AUTOTUNE": "0"}, 4096000, "the default"),
            ({"BYTEPS_PARTITION_BYTES": "131072", "BYTEPS_SCHEDULING_CREDIT": "8"}, 131072,
             "set by BYTEPS_PARTITION_BYTES")):
        result = run(run_job, 2, env)
        assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
        seen = settings_by_worker(result.output)
        assert seen[0][:2] == (partition, reason), (env, seen)
        assert "4 MiB in partitions of" not in result.output, (env, result.output)


def test_workers_that_disagree_fail_with_a_named_error_never_a_wrong_sum(run_job):
    result = run(run_job, 2, {"PIN_ON_WORKER": "1", "PIN_VALUE": "65536"})
    assert result.returncode != 0, result
    assert "MISMATCH" not in result.stdout and "ALL OK" not in result.stdout, result
    assert "BYTEPS_PARTITION_BYTES=65536 here but worker 0 partitions tensors into" in result.output, result
    assert not result.leftovers, result


# A training loop: 24 steps of three gradients (96 MiB per step, above any credit the model picks
# on loopback, 16 partitions of 4 MiB included), exact sums every step: the online tuning settles
# within 20 iterations.
STEPS = """
import sys
import numpy as np
import byteps.numpy as bps
bps.init()
rank, n = bps.rank(), bps.size()
sizes = (6 << 20, 4 << 20, 2 << 20)  # float64 elements: 96 MiB per step
for step in range(24):
    for i, size in enumerate(sizes):
        x = np.full(size, rank + step + i, dtype=np.float64)
        got = bps.push_pull(x, average=False, name=f"grad.{i}")
        if not np.all(got == n * (step + i) + n * (n - 1) // 2):
            print(f"MISMATCH step {step} grad {i}", flush=True)
            sys.exit(3)
print("ALL OK", flush=True)
bps.shutdown()
"""

ONLINE_START = re.compile(r"\[worker:(\d+)\].*settings: partition (\d+) bytes.*credit (\d+) bytes.*the online tuner "
                          r"explores partitions of (\d+) and (\d+) bytes over (\d+) iterations, then the credit over "
                          r"(\d+)")
PARTITION_SETTLED = re.compile(r"\[worker:(\d+)\].*partition settled: (\d+) bytes, credit (\d+) bytes: (.*)")
ONLINE_SETTLED = re.compile(r"\[worker:(\d+)\].*settings settled: credit (\d+) bytes: (.*?) after (\d+) iterations (.*)")


def test_the_online_tuner_settles_within_20_iterations_on_candidates_every_worker_shares(run_job):
    # On loopback the probe picks the largest partition; the online tuner tries a quarter of it
    # too, every worker applies worker 0's verdict at the same iteration, then each tunes its
    # credit. The sums stay exact throughout (checked every step by the script).
    result = run_job(2, 2, STEPS, env={"BYTEPS_LOG_LEVEL": "INFO"}, timeout=120)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
    started = {int(m.group(1)): [int(g) for g in m.groups()[1:]] for m in ONLINE_START.finditer(result.output)}
    chosen = {int(m.group(1)): m for m in PARTITION_SETTLED.finditer(result.output)}
    settled = {int(m.group(1)): m for m in ONLINE_SETTLED.finditer(result.output)}
    assert sorted(started) == [0, 1] and sorted(chosen) == [0, 1] and sorted(settled) == [0, 1], result.output
    assert started[0][2:] == started[1][2:], started  # the same candidates and schedule everywhere
    assert chosen[0].group(2) == chosen[1].group(2), (chosen[0].group(0), chosen[1].group(0))
    for rank, (p0, c0, first, second, n_partition, n_credit) in started.items():
        assert first == p0 and second != first, started
        assert n_partition + n_credit <= 20, started
        partition, credit = int(chosen[rank].group(2)), int(chosen[rank].group(3))
        assert partition in (first, second), chosen[rank].group(0)
        # The same bytes in flight, scaled down with smaller partitions, at least 16 of them.
        assert credit == max(16 * partition, min(c0, c0 * partition // p0)), (c0, p0, chosen[rank].group(0))
        assert ("kept the start-up choice" in chosen[rank].group(4)) == (partition == p0), chosen[rank].group(0)
        m = settled[rank]
        assert int(m.group(4)) == n_credit, m.group(0)
        assert int(m.group(2)) in (credit, 2 * credit, credit // 2), (credit, m.group(0))
        assert ("kept the model's value" in m.group(3)) == (int(m.group(2)) == credit), m.group(0)
        assert "median iteration throughput" in m.group(5), m.group(0)
    assert "worker 0's measurement: kept" in chosen[0].group(4) or "worker 0's measurement: measured" in \
        chosen[0].group(4), chosen[0].group(0)


def test_a_pinned_partition_is_never_explored_online_but_the_credit_is(run_job):
    result = run_job(2, 2, STEPS, env={"BYTEPS_LOG_LEVEL": "INFO", "BYTEPS_PARTITION_BYTES": "1048576"},
                     timeout=120)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
    assert "partition settled" not in result.output and "explores partitions" not in result.output, result.output
    assert re.search(r"the online tuner explores the credit over the first 14 iterations", result.output)
    settled = {int(m.group(1)) for m in ONLINE_SETTLED.finditer(result.output)}
    assert settled == {0, 1}, result.output


def test_a_pinned_credit_is_never_tuned_online(run_job):
    result = run_job(2, 2, STEPS, env={"BYTEPS_LOG_LEVEL": "INFO", "BYTEPS_SCHEDULING_CREDIT": "3"}, timeout=120)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
    seen = settings_by_worker(result.output)
    assert sorted(seen) == [0, 1], result.output
    for rank, (partition, _, credit) in seen.items():
        assert credit == 3 * partition, (rank, partition, credit)
    # The partition size is still explored (it is not pinned); the credit follows it in partitions.
    assert "explores the credit" not in result.output and "settings settled" not in result.output, result.output
    chosen = {int(m.group(1)): (int(m.group(2)), int(m.group(3))) for m in PARTITION_SETTLED.finditer(result.output)}
    assert sorted(chosen) == [0, 1], result.output
    for partition, credit in chosen.values():
        assert credit == 3 * partition, chosen


def test_byteps_info_shows_the_running_workers_chosen_settings_with_why(run_job):
    # Worker 0 runs `byteps info` with its own environment once the online tuner settled: the
    # output lists both workers' partition size and credit with the reasons, as logged.
    script = STEPS.replace('print("ALL OK", flush=True)', '''
import subprocess
from byteps.launcher import corebin
if rank == 0:
    info = subprocess.run([corebin.find_core_binary(), "info"], capture_output=True, text=True, timeout=30)
    print("INFO-BEGIN\\n" + info.stdout + info.stderr + "INFO-END", flush=True)
bps.push_pull(np.zeros(1), name="after.info")  # worker 1 is still running when worker 0 asks
print("ALL OK", flush=True)
bps.shutdown()
if rank == 0:  # its own record goes with its engine
    info = subprocess.run([corebin.find_core_binary(), "info"], capture_output=True, text=True, timeout=30)
    print("AFTER-BEGIN\\n" + info.stdout + "AFTER-END", flush=True)''')
    result = run_job(2, 2, script, env={"BYTEPS_LOG_LEVEL": "INFO"}, timeout=120)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
    out = re.sub(r"(?m)^\[worker:\d+\] ", "", result.stdout)  # bpsrun's prefixes
    info = out.split("INFO-BEGIN\n", 1)[1].split("INFO-END", 1)[0]
    assert "Chosen settings" in info, info
    seen = settings_by_worker(result.output)
    chosen = {int(m.group(1)): int(m.group(2)) for m in PARTITION_SETTLED.finditer(result.output)}
    for rank in (0, 1):
        partition = chosen.get(rank, seen[rank][0])  # the online verdict, where the partition was explored
        settled = {int(m.group(1)): int(m.group(2)) for m in ONLINE_SETTLED.finditer(result.output)}
        line = re.search(rf"worker {rank} \(pid \d+, running, recorded [^)]*\): partition (\d+) bytes, credit (\d+) "
                         rf"bytes\n    (.*)", info)
        assert line, info
        assert (int(line.group(1)), int(line.group(2))) == (partition, settled[rank]), (line.group(0), settled)
        assert "partition" in line.group(3) and "; online: credit" in line.group(3), line.group(3)
    after = out.split("AFTER-BEGIN\n", 1)[1].split("AFTER-END", 1)[0]
    assert "Chosen settings" in after and "worker 0 (pid" not in after, after


# Eight threads per worker, each push_pulling its own tensor at its own pace (another order and
# other pauses on each worker, so the workers' iteration boundaries differ), past the whole
# partition phase: each use of a tensor goes to the same keys on every worker (its own use count
# picks the partition size), the sums are exact, and both workers apply worker 0's verdict.
THREADS = """
import random, sys, threading, time
import numpy as np
import byteps.numpy as bps
bps.init()
rank, n = bps.rank(), bps.size()
bad = []
def run(t):
    mine = t if rank == 0 else 7 - t
    rng = random.Random(31 * rank + t)
    size = 100000 + 37000 * mine
    for use in range(14):
        time.sleep(rng.uniform(0, 0.004))
        x = np.full(size, rank + mine + use, dtype=np.int64)
        got = bps.push_pull(x, average=False, name=f"thread.{mine}")
        if not np.all(got == n * (mine + use) + n * (n - 1) // 2):
            bad.append((mine, use))
threads = [threading.Thread(target=run, args=(t,)) for t in range(8)]
for th in threads:
    th.start()
for th in threads:
    th.join()
print("MISMATCH", bad if bad else "ALL OK", flush=True)
bps.shutdown()
"""


def test_threads_whose_streams_differ_cross_the_partition_phase_with_exact_sums(run_job):
    result = run_job(2, 2, THREADS, env={"BYTEPS_LOG_LEVEL": "INFO"}, timeout=120)
    assert result.returncode == 0 and result.stdout.count("MISMATCH ALL OK") == 2, result
    started = {int(m.group(1)) for m in ONLINE_START.finditer(result.output)}
    chosen = {int(m.group(1)): int(m.group(2)) for m in PARTITION_SETTLED.finditer(result.output)}
    assert started == {0, 1} and sorted(chosen) == [0, 1], result.output
    assert chosen[0] == chosen[1], chosen
    assert "DEADLINE_EXCEEDED" not in result.output, result.output
