"""Prometheus metrics (docs/metrics.md): every node serves them when BYTEPS_METRICS_PORT is set,
scraped here with a real HTTP client during a real job; the byte counters match the bytes the job
moved. A port in use stops the process at start with a named error."""

from __future__ import annotations

import re
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import CORE_BINARY, free_port, job_env

SCRIPT = """
import os, time
import numpy as np
import byteps.numpy as bps
bps.init()
rank = bps.rank()
x = np.full(262144, rank + 1.0, np.float32)  # 1 MiB
def wait_for(name):
    path = os.path.join(os.environ["GO_DIR"], name)
    while not os.path.exists(path):
        time.sleep(0.02)
bps.push_pull(x, name="m", average=False)     # declares the tensor
print("READY", flush=True)
wait_for("go1")
for _ in range(10):
    got = bps.push_pull(x, name="m", average=False)
    assert np.all(got == 3.0), got[:3]
print("DONE", flush=True)
wait_for("go2")
bps.shutdown()
print("ALL OK", flush=True)
"""

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not an exposition line: {line!r}"
        out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return out


def wait_line(proc, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in proc.output:
        assert time.monotonic() < deadline and proc.popen.poll() is None, f"no {text!r}\n{proc.output}"
        time.sleep(0.05)


def total(samples: dict[str, float], name: str) -> float:
    return sum(v for k, v in samples.items() if k == name or k.startswith(name + "{"))


def test_scraped_byte_counters_match_the_bytes_moved(cluster, tmp_path):
    ports = {"scheduler": free_port(), "server:0": free_port(), "server:1": free_port(),
             "worker:0": free_port(), "worker:1": free_port()}
    extra = {"GO_DIR": str(tmp_path), "BYTEPS_AUTOTUNE": "0", "BYTEPS_METRICS_PORT": str(ports["scheduler"])}
    procs = cluster.job(2, 2, SCRIPT, extra=extra,
                        server_env={i: {"BYTEPS_METRICS_PORT": str(ports[f"server:{i}"])} for i in range(2)},
                        worker_env={i: {"BYTEPS_METRICS_PORT": str(ports[f"worker:{i}"])} for i in range(2)})
    for w in ("worker:0", "worker:1"):
        wait_line(procs[w], "READY")
    before = {label: scrape(port) for label, port in ports.items() if label != "scheduler"}
    (tmp_path / "go1").touch()
    for w in ("worker:0", "worker:1"):
        wait_line(procs[w], "DONE")
    after = {label: scrape(port) for label, port in ports.items() if label != "scheduler"}
    sched = scrape(ports["scheduler"])  # served too (its families may be empty)
    assert isinstance(sched, dict)
    (tmp_path / "go2").touch()
    cluster.wait(60)
    assert all(p.returncode == 0 for p in procs.values()), cluster.dump()

    moved = 10 * (1 << 20)  # ten push_pulls of 1 MiB
    for w in ("worker:0", "worker:1"):
        d = {n: total(after[w], n) - total(before[w], n)
             for n in ("byteps_worker_pushed_bytes_total", "byteps_worker_pulled_bytes_total")}
        # Payload bytes: the partitions out and the sums back, nothing else after the declaration.
        assert d["byteps_worker_pushed_bytes_total"] == moved, (w, d)
        assert d["byteps_worker_pulled_bytes_total"] == moved, (w, d)
        assert after[w]["byteps_worker_push_pull_seconds_count"] - before[w]["byteps_worker_push_pull_seconds_count"] == 10
        assert 'byteps_worker_stage_seconds_count{stage="push-pull"}' in after[w], sorted(after[w])
        assert after[w]["byteps_worker_partition_bytes"] > 0
        assert after[w]["byteps_worker_connections_per_server"] >= 1
        assert after[w]["byteps_worker_partitions_in_flight"] == 0
    for worker in (0, 1):
        key = f'byteps_server_pushed_bytes_total{{worker="{worker}"}}'
        took = sum(after[s].get(key, 0) - before[s].get(key, 0) for s in ("server:0", "server:1"))
        assert took == moved, (worker, took)
        key = f'byteps_server_replied_bytes_total{{worker="{worker}"}}'
        assert sum(after[s].get(key, 0) - before[s].get(key, 0) for s in ("server:0", "server:1")) == moved
    lag = f'byteps_server_arrival_lag_seconds_count{{worker="0"}}'
    assert sum(after[s].get(lag, 0) for s in ("server:0", "server:1")) >= 11


def test_a_metrics_port_in_use_stops_the_process_at_start(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = job_env({"DMLC_ROLE": "server", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": str(free_port()),
                       "DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1", "DMLC_NODE_HOST": "127.0.0.1",
                       "BYTEPS_METRICS_PORT": str(port), "BYTEPS_START_TIMEOUT": "5"})
        start = time.monotonic()
        out = subprocess.run([str(CORE_BINARY), "server"], env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode != 0
        assert time.monotonic() - start < 3, "it must fail at once, not at the start deadline"
        assert (f"the server's metrics: BYTEPS_METRICS_PORT: cannot serve metrics on 127.0.0.1:{port}: "
                "Address already in use") in out.stderr, out.stderr


def test_the_endpoint_answers_only_get_metrics(cluster, tmp_path):
    port = free_port()
    env = cluster.env(1, 1, {"BYTEPS_METRICS_PORT": str(port)})
    proc = cluster.scheduler(env)
    deadline = time.monotonic() + 10
    while True:
        try:
            scrape(port)
            break
        except (urllib.error.URLError, ConnectionError):
            assert time.monotonic() < deadline, proc.output
            time.sleep(0.05)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=5)
    assert err.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/metrics", data=b"x"), timeout=5)
    assert err.value.code == 405
    # A client that connects and says nothing is dropped within the request deadline, and the
    # endpoint goes on serving.
    with socket.create_connection(("127.0.0.1", port), timeout=5) as idle:
        idle.settimeout(5)
        assert idle.recv(1) == b""
    assert isinstance(scrape(port), dict)


LAUNCHED = """
import os, urllib.request
import numpy as np
import byteps.numpy as bps
bps.init()
bps.push_pull(np.ones(16, np.float32), name="x")
if bps.rank() == 0:
    base = int(os.environ["BASE_PORT"])
    for i in range(4):  # scheduler, server, worker 0, worker 1: bpsrun's order
        with urllib.request.urlopen(f"http://127.0.0.1:{base + i}/metrics", timeout=5) as r:
            text = r.read().decode()
        kinds = sorted({line.split("_")[1] for line in text.splitlines() if line.startswith("byteps_")})
        print(f"PORT {base + i} {','.join(kinds)}", flush=True)
bps.push_pull(np.ones(16, np.float32), name="x")  # worker 1 waits here until worker 0 scraped
bps.shutdown()
"""


def test_bpsrun_gives_each_process_its_own_port(run_job):
    base = free_port()
    result = run_job(2, 1, LAUNCHED, env={"BYTEPS_METRICS_PORT": str(base), "BASE_PORT": str(base)})
    assert result.returncode == 0, result
    found = dict(re.findall(r"PORT (\d+) (\S*)", result.stdout))
    assert sorted(int(p) for p in found) == [base, base + 1, base + 2, base + 3], result.stdout
    assert "server" in found[str(base + 1)] and "worker" in found[str(base + 2)] and "worker" in found[str(base + 3)]
