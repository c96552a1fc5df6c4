"""``byteps trace merge`` (python/byteps/trace_merge.py) on synthetic files: the clock shift, the
pids, the refusal of two jobs, the original BytePS's files; and a traced job of 2 workers and 2
servers whose servers write their timelines (src/server/server_trace.h), merged.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from byteps import trace_merge
from conftest import CORE_BINARY, NUMPY_PRELUDE, PYTHON_DIR, job_env, job_results


def _event(pid: str, tid: str, name: str, ts: int, dur: int = 10) -> dict:
    return {"ph": "X", "cat": "Comm", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur, "args": {}}


def _write(path: Path, events: list[dict], other: dict | None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"traceEvents": events, "displayTimeUnit": "ms"}
    if other is not None:
        doc["otherData"] = other
    path.write_text(json.dumps(doc))
    return path


def _job_files(root: Path, job: str = "00000000000000aa") -> None:
    _write(root / "0" / "comm.json", [_event("Comm.w", "total", "Comm.w", 1_000_000)],
           {"role": "worker", "rank": 1, "local_rank": 0, "job": job, "clock_offset_us": 250})
    _write(root / "server_0" / "comm.json", [_event("Server 0", "7", "Server.7.RECV", 2_000_000),
                                              _event("Server 0", "7", "Server.7.REPLY", 2_000_050)],
           {"role": "server", "rank": 0, "job": job, "clock_offset_us": -1_000})


def _merge(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "byteps.cli", "trace", "merge", *args], cwd=cwd,
                          env={"PYTHONPATH": str(PYTHON_DIR)}, capture_output=True, text=True, timeout=60)


def test_merge_shifts_each_file_by_its_offset_and_keeps_nodes_apart(tmp_path: Path) -> None:
    _job_files(tmp_path / "trace")
    r = _merge("trace", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "2 files, 3 events" in r.stdout
    merged = json.loads((tmp_path / "trace_merged.json").read_text())  # the default output
    by_name = {e["name"]: e for e in merged["traceEvents"]}
    assert by_name["Comm.w"]["ts"] == 1_000_250
    assert by_name["Comm.w"]["pid"] == "worker 1: Comm.w"
    assert by_name["Server.7.RECV"]["ts"] == 1_999_000
    assert by_name["Server.7.REPLY"]["ts"] == 1_999_050
    assert by_name["Server.7.RECV"]["pid"] == "server 0"
    assert [e["ts"] for e in merged["traceEvents"]] == sorted(e["ts"] for e in merged["traceEvents"])
    assert merged["otherData"]["job"] == "00000000000000aa"
    assert len(merged["otherData"]["nodes"]) == 2


def test_a_hosts_other_local_processes_take_their_roots_job_and_clock(tmp_path: Path) -> None:
    """Local ranks 1.. do not register with the scheduler (no job, no offset in their files); they
    share their root's machine, so its offset shifts them; another host's folder does not."""
    _job_files(tmp_path / "trace")  # host A: local rank 0 (offset 250) and a server
    _write(tmp_path / "trace" / "1" / "comm.json", [_event("Comm.w", "total", "Comm.w1", 1_000_000)],
           {"role": "worker", "rank": 2, "local_rank": 1, "job": "", "clock_offset_us": 0})
    _write(tmp_path / "other_host" / "1" / "comm.json", [_event("Comm.w", "total", "Comm.w3", 5_000_000)],
           {"role": "worker", "rank": 3, "local_rank": 1, "job": "", "clock_offset_us": 0})
    r = _merge("trace", "other_host", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    merged = json.loads((tmp_path / "trace_merged.json").read_text())
    by_name = {e["name"]: e for e in merged["traceEvents"]}
    assert by_name["Comm.w1"]["ts"] == 1_000_250  # its root's offset
    assert by_name["Comm.w3"]["ts"] == 5_000_000  # no root of its own host here: unshifted
    nodes = {n.get("rank"): n for n in merged["otherData"]["nodes"] if n.get("role") == "worker"}
    assert nodes[2]["clock_from"] == "local rank 0" and nodes[2]["job"] == "00000000000000aa"
    assert "clock_from" not in nodes[3]


def test_merge_refuses_files_of_two_jobs_naming_both(tmp_path: Path) -> None:
    _job_files(tmp_path / "a", job="1111111111111111")
    _write(tmp_path / "b" / "0" / "comm.json", [_event("Comm.w", "total", "Comm.w", 5)],
           {"role": "worker", "rank": 0, "job": "2222222222222222", "clock_offset_us": 0})
    r = _merge("a", "b", "-o", "out.json", cwd=tmp_path)
    assert r.returncode == 2
    assert "1111111111111111" in r.stderr and "2222222222222222" in r.stderr, r.stderr
    assert str(tmp_path / "b" / "0" / "comm.json") in r.stderr
    assert "a/" in r.stderr and "traces of different jobs cannot be merged" in r.stderr
    assert not (tmp_path / "out.json").exists()


def test_merge_takes_the_original_byteps_files_unshifted_with_a_warning(tmp_path: Path) -> None:
    _job_files(tmp_path / "trace")
    _write(tmp_path / "trace" / "old" / "3" / "comm.json", [_event("Comm.x", "total", "Comm.x", 42)], None)
    r = _merge("trace", "-o", "m.json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "has no otherData" in r.stderr
    merged = json.loads((tmp_path / "m.json").read_text())
    old = [e for e in merged["traceEvents"] if e["name"] == "Comm.x"]
    assert old and old[0]["ts"] == 42 and old[0]["pid"] == "old/3: Comm.x"


def test_merge_errors_name_what_is_wrong(tmp_path: Path) -> None:
    r = _merge("missing", cwd=tmp_path)
    assert r.returncode == 2 and "missing is not a directory" in r.stderr
    (tmp_path / "empty").mkdir()
    r = _merge("empty", cwd=tmp_path)
    assert r.returncode == 2 and "no comm.json under empty" in r.stderr
    bad = tmp_path / "bad" / "comm.json"
    bad.parent.mkdir()
    bad.write_text("{")
    with pytest.raises(trace_merge.MergeError, match="cannot read the trace"):
        trace_merge.merge([bad])
    _write(tmp_path / "odd" / "comm.json", [], {"role": "observer", "rank": 0})
    with pytest.raises(trace_merge.MergeError, match="otherData names no node"):
        trace_merge.merge([tmp_path / "odd" / "comm.json"])


# --------------------------------------------------------------------------------------------
# a real job

TRACED = NUMPY_PRELUDE + r"""
for step in range(6):
    a = bps.push_pull(np.full(1000, rank + step, np.float32), average=False, name="a")
    b = bps.push_pull(np.full(30000, rank, np.float32), average=False, name="b")
    assert a[0] == 2 * step + 1, a[0]
emit_result({"rank": rank})
bps.shutdown()
"""


@pytest.mark.usefixtures("require_core")
def test_a_traced_job_has_server_timelines_that_merge(run_job, tmp_path: Path) -> None:
    trace_dir = tmp_path / "trace"
    env = {"BYTEPS_TRACE_ON": "1", "BYTEPS_TRACE_DIR": str(trace_dir), "BYTEPS_TRACE_START_STEP": "2",
           "BYTEPS_TRACE_END_STEP": "4", "BYTEPS_PARTITION_BYTES": "32000"}
    result = run_job(2, 2, TRACED, env=env, timeout=60)
    assert result.returncode == 0, result
    assert sorted(r["rank"] for r in job_results(result.stdout)) == [0, 1]
    jobs = set()
    for rank in (0, 1):
        doc = json.loads((trace_dir / f"server_{rank}" / "comm.json").read_text())
        other = doc["otherData"]
        assert other["role"] == "server" and other["rank"] == rank
        assert len(other["job"]) == 16
        # Every node is on this host: the true offset is 0. Without the scheduler's hold taken out,
        # the estimate would be off by half the wait for the other nodes to register (ms to s).
        assert abs(other["clock_offset_us"]) < 100_000, other
        jobs.add(other["job"])
        events = doc["traceEvents"]
        assert events, f"server {rank} recorded nothing"
        kinds = {e["name"].rsplit(".", 1)[1] for e in events}
        assert {"RECV", "SUM", "REPLY"} <= kinds
        for e in events:
            assert e["pid"] == f"Server {rank}" and e["name"].startswith(f"Server.{e['tid']}.")
            assert e["args"]["step"] in (2, 3, 4), e
            assert e["args"]["last_worker"] in (0, 1), e
            assert e["dur"] >= 0
        # Per key and step: received, then summed, then replied.
        by_round: dict = {}
        for e in events:
            by_round.setdefault((e["tid"], e["args"]["step"]), {})[e["name"].rsplit(".", 1)[1]] = e
        for (key, step), ev in by_round.items():
            assert ev["RECV"]["ts"] <= ev["SUM"]["ts"] <= ev["REPLY"]["ts"], (key, step, ev)
    assert len(jobs) == 1, jobs  # one job: the scheduler's id reached both servers
    r = _merge(str(trace_dir), "-o", str(tmp_path / "merged.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    merged = json.loads((tmp_path / "merged.json").read_text())
    pids = {e["pid"] for e in merged["traceEvents"]}
    assert {"server 0", "server 1"} <= pids
    assert merged["otherData"]["job"] in jobs
    # bpsrun gave each worker (a machine of its own) its own folder: both timelines are there.
    for w in (0, 1):
        doc = json.loads((trace_dir / f"worker{w}" / "0" / "comm.json").read_text())
        assert doc["otherData"]["job"] in jobs and abs(doc["otherData"]["clock_offset_us"]) < 100_000
    # On the merged clock, per partition and step: the workers push before the server has the
    # round, the server sums and replies before the workers' push-pull ends (the pull). The
    # clocks are aligned to within a couple of ms on one loaded host (the offsets' error).
    tol = 5000  # µs
    pushes: dict = {}
    for e in merged["traceEvents"]:
        if e["pid"].startswith("worker ") and e["name"].endswith(".PUSH_PULL"):
            pushes.setdefault((e["tid"], e["args"]["step"]), []).append((e["ts"], e["ts"] + e["dur"]))
    server: dict = {}
    for e in merged["traceEvents"]:
        if e["pid"].startswith("server "):
            server.setdefault((e["tid"], e["args"]["step"]), {})[e["name"].rsplit(".", 1)[1]] = e
    matched = 0
    for (key, step), ev in server.items():
        ws = pushes.get((key, step))
        if not ws:
            continue  # a start-up tuning key: no worker traces those
        matched += 1
        assert len(ws) == 2, (key, step, ws)
        assert min(s for s, _ in ws) <= ev["RECV"]["ts"] + tol, (key, step, ws, ev)
        assert ev["SUM"]["ts"] + ev["SUM"]["dur"] <= min(e for _, e in ws) + tol, (key, step, ws, ev)
        assert ev["REPLY"]["ts"] <= min(e for _, e in ws) + tol, (key, step, ws, ev)
    assert matched >= 6, f"only {matched} partitions found in both the workers' and the servers' files"


@pytest.mark.usefixtures("require_core")
def test_an_unwritable_trace_dir_stops_the_server_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    env = job_env({"BYTEPS_TRACE_ON": "1", "BYTEPS_TRACE_DIR": str(blocker / "trace"), "DMLC_ROLE": "server",
                   "DMLC_NUM_WORKER": "1", "DMLC_NUM_SERVER": "1", "DMLC_PS_ROOT_URI": "127.0.0.1",
                   "DMLC_PS_ROOT_PORT": "9"})
    r = subprocess.run([str(CORE_BINARY), "server"], env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert f"BYTEPS_TRACE_DIR={blocker / 'trace'}: cannot create the trace directory" in r.stderr + r.stdout, r
