"""The worker's timeline (BYTEPS_TRACE_ON, docs/tracing.md): a traced job with 2 workers and 2
servers writes one chrome-trace file per worker with every stage of every traced partition, only
the step window, and each partition's stage events in order; a host of two processes writes a
file per local rank with the local stages; a device tensor's has its copies; an unwritable
BYTEPS_TRACE_DIR stops init with a named error."""
from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path

from conftest import LOCAL_SPAWNER, NUMPY_PRELUDE, job_results

# Each worker writes under its own directory: both run on this machine with local rank 0, and the
# layout is <dir>/<local_rank>/comm.json as in BytePS.
TRACED = r"""
import os
os.environ["BYTEPS_TRACE_DIR"] = os.path.join(os.environ["TRACE_BASE"], "worker" + os.environ["DMLC_WORKER_ID"])
""" + NUMPY_PRELUDE + r"""
tensors = {"big": np.ones(4096, np.float32), "small": np.ones(16, np.float32), "mid": np.ones(300, np.float32)}
for _ in range(6):
    hs = [bps.push_pull_async(t, name=n) for n, t in tensors.items()]
    for h in hs:
        bps.synchronize(h)
emit_result({"rank": rank})
bps.shutdown()
"""

# The pipeline of a CPU tensor of a one-process host in a distributed job (pipeline_set.cc).
STAGES = {"PUSH_PULL"}


def _events(path: Path) -> dict:
    return json.loads(path.read_text())


def _parse(doc: dict) -> tuple[dict, dict]:
    """(tensor -> steps of its totals, (tensor, key, step) -> [(start, end, stage)] in time order),
    checking what every event has."""
    totals, parts = defaultdict(set), defaultdict(list)
    for e in doc["traceEvents"]:
        assert e["ph"] == "X" and e["cat"] == "Comm" and e["dur"] >= 0, e
        assert e["args"]["name"] == e["pid"]
        if e["tid"] == "total":
            totals[e["pid"]].add(e["args"]["step"])
            continue
        stage = e["name"][len(e["pid"]) + 1:]
        parts[(e["pid"], e["tid"], e["args"]["step"])].append((e["ts"], e["ts"] + e["dur"], stage))
    for evs in parts.values():
        evs.sort()
    return totals, parts


def _in_order(evs: list) -> bool:
    return all(end <= start for (_, end, _), (start, _, _) in zip(evs, evs[1:]))


def test_a_traced_job_writes_each_workers_timeline(run_job, tmp_path):
    base = tmp_path / "traces"
    env = {"BYTEPS_TRACE_ON": "1", "BYTEPS_TRACE_START_STEP": "2", "BYTEPS_TRACE_END_STEP": "4",
           "BYTEPS_PARTITION_BYTES": "4096", "TRACE_BASE": str(base), "BYTEPS_LOG_LEVEL": "INFO"}
    result = run_job(2, 2, TRACED, env=env, timeout=90)
    assert result.returncode == 0, result
    assert sorted(r["rank"] for r in job_results(result.stdout)) == [0, 1], result
    assert len(re.findall(r"local rank \d+: timeline written to", result.output)) == 2, result
    ranks = set()
    for w in (0, 1):
        doc = _events(base / f"worker{w}" / "0" / "comm.json")
        assert doc["displayTimeUnit"] == "ms"
        other = doc["otherData"]
        assert other["role"] == "worker" and other["local_rank"] == 0
        assert (other["start_step"], other["end_step"]) == (2, 4)
        ranks.add(other["rank"])
        totals, parts = _parse(doc)
        # Steps 2..4 inclusive of every tensor, nothing else (docs/tracing.md: the step rule).
        assert dict(totals) == {f"Comm.byteps.{n}": {2, 3, 4} for n in ("big", "small", "mid")}, totals
        keys = defaultdict(set)
        for (pid, key, step), evs in parts.items():
            keys[pid].add(key)
            names = {s for _, _, s in evs}
            assert names == STAGES | {"CREDIT_WAIT"}, (pid, key, step, names)
            assert _in_order(evs), (pid, key, step, evs)  # in order, no overlap
        assert len(keys["Comm.byteps.big"]) == 4, keys  # 16 KiB in 4 KiB partitions
        assert {len(v) for k, v in parts.items()} == {2}
        for pid, ks in keys.items():
            for k in ks:
                assert {s for (p, kk, s) in parts if p == pid and kk == k} == {2, 3, 4}
    assert ranks == {0, 1}


def test_an_unwritable_trace_dir_stops_init(run_job, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    script = NUMPY_PRELUDE + "emit_result({'rank': rank})\n"
    env = {"BYTEPS_TRACE_ON": "1", "BYTEPS_TRACE_DIR": str(blocker / "trace"), "BYTEPS_TIMEOUT": "10",
           "BYTEPS_START_TIMEOUT": "10"}
    result = run_job(2, 2, script, env=env, timeout=60)
    assert result.returncode != 0, result
    assert job_results(result.stdout) == [], result
    # The servers check it too (the first process to stop ends the job): a worker's or a server's
    # message names the variable and the path.
    assert f"BYTEPS_TRACE_DIR={blocker / 'trace'}: cannot create the" in result.output, result


def test_a_hosts_processes_each_write_their_own_timeline(run_job, tmp_path):
    """Two processes on one worker host: each local rank's file under the host's directory, with
    the local reduce and broadcast; only the local root's has the push-pull."""
    base = tmp_path / "traces"
    env = {"BPS_LOCAL": "2", "BPS_CHILD": TRACED, "BYTEPS_TRACE_ON": "1", "BYTEPS_TRACE_START_STEP": "2",
           "BYTEPS_TRACE_END_STEP": "3", "BYTEPS_PARTITION_BYTES": "4096", "TRACE_BASE": str(base)}
    result = run_job(1, 1, LOCAL_SPAWNER, env=env, timeout=90, force_distributed=True)
    assert result.returncode == 0, result
    assert len(job_results(result.stdout)) == 2, result
    with_network = 0
    for local_rank in (0, 1):
        doc = _events(base / "worker0" / str(local_rank) / "comm.json")
        assert doc["otherData"]["local_rank"] == local_rank
        totals, parts = _parse(doc)
        assert dict(totals) == {f"Comm.byteps.{n}": {2, 3} for n in ("big", "small", "mid")}, totals
        stage_sets = {frozenset(s for _, _, s in evs) for evs in parts.values()}
        assert len(stage_sets) == 1, stage_sets  # every partition passed the same stages
        stages = set(next(iter(stage_sets)))
        assert {"REDUCE", "BROADCAST"} <= stages, stages
        if "PUSH_PULL" in stages:
            with_network += 1
            assert "CREDIT_WAIT" in stages
        for key, evs in parts.items():
            assert _in_order(evs), (key, evs)
            names = [s for _, _, s in evs]
            assert names[0] == "REDUCE" and names[-1] == "BROADCAST", (key, names)
    assert with_network == 1  # the local root only


# A device tensor on the fake device backend (host memory behind the device interface): its
# pipeline starts with copy-in and ends with copy-out.
DEVICE = r"""
import os
os.environ["BYTEPS_TRACE_DIR"] = os.path.join(os.environ["TRACE_BASE"], "worker" + os.environ["DMLC_WORKER_ID"])
import json
import numpy as np
from byteps import _basics
import byteps.numpy as bpsnp
bpsnp.init()
core = _basics.core()
x = np.ones(3000, np.float32)
out = np.zeros_like(x)
for _ in range(4):
    h = _basics.start("dev.t", x.ctypes.data, out.ctypes.data, x.nbytes, core.FLOAT32, False, 0, x, out,
                      device=(core.DEVICE_FAKE, bpsnp.rank(), 0))
    _basics.synchronize(h)
print("RESULT " + json.dumps({"rank": bpsnp.rank()}), flush=True)
bpsnp.shutdown()
"""


def test_a_device_tensors_timeline_has_its_copies(run_job, tmp_path):
    base = tmp_path / "traces"
    env = {"BYTEPS_TRACE_ON": "1", "BYTEPS_TRACE_START_STEP": "2", "BYTEPS_TRACE_END_STEP": "3",
           "BYTEPS_PARTITION_BYTES": "4096", "TRACE_BASE": str(base)}
    result = run_job(1, 1, DEVICE, env=env, timeout=90, force_distributed=True)
    assert result.returncode == 0, result
    assert len(job_results(result.stdout)) == 1, result
    totals, parts = _parse(_events(base / "worker0" / "0" / "comm.json"))
    assert dict(totals) == {"Comm.byteps.dev.t": {2, 3}}, totals
    assert len(parts) == 3 * 2, parts.keys()  # 12,000 bytes in 4 KiB partitions, 2 steps
    for key, evs in parts.items():
        assert _in_order(evs), (key, evs)
        assert [s for _, _, s in evs] == ["COPYD2H", "CREDIT_WAIT", "PUSH_PULL", "COPYH2D"], (key, evs)
