"""Existing BytePS deployments' environments (issue 13, item 1), in real processes: a 2-worker job
whose every process has the original's variables set runs to exact sums, each process warns once
per ignored variable (naming it and why) and loudly for what it cannot honour, build-time names
stay silent, BYTEPS_STRICT_CONFIG=1 turns the warnings into a named start-up error, and
``byteps info --config`` lists every variable with its disposition.

Every variable of the original, one by one, is in tests/unit/config_test.cc (ConfigCompat).
"""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import CORE_BINARY, job_env

pytestmark = pytest.mark.usefixtures("require_core")

SCRIPT = """
import numpy as np
import byteps.numpy as bps
bps.init()
got = bps.push_pull(np.full(1000, bps.rank() + 1.0), average=False, name="x")
assert np.all(got == bps.size() * (bps.size() + 1) / 2), got[:3]
print("ALL OK", flush=True)
bps.shutdown()
"""

# What an original launch script typically exports, beyond the job's wiring.
ORIGINAL_ENV = {
    "BYTEPS_ENABLE_GDB": "1",          # ignored: warns
    "BYTEPS_NUMA_ROOT_QUOTA": "4",     # ignored: warns
    "BYTEPS_NCCL_NUM_RINGS": "2",      # ignored: warns
    "DMLC_ENABLE_RDMA": "ibverbs",     # mapped: the UCX transport (BYTEPS_TRANSPORT=ucx), silently
    "BYTEPS_CUDA_HOME": "/usr/local/cuda",   # build-time: silent
    "BYTEPS_WITHOUT_MXNET": "1",             # build-time: silent
}
IGNORED = ("BYTEPS_ENABLE_GDB", "BYTEPS_NUMA_ROOT_QUOTA", "BYTEPS_NCCL_NUM_RINGS")


def test_a_job_with_the_originals_variables_runs_and_warns_once_per_process(run_job):
    result = run_job(2, 1, SCRIPT, env=ORIGINAL_ENV, timeout=90)
    assert result.returncode == 0 and result.stdout.count("ALL OK") == 2, result
    for role in ("worker:0", "worker:1", "server", "scheduler"):
        lines = [ln for ln in result.output.splitlines() if f"[{role}" in ln and "WARNING" in ln]
        for name in IGNORED:
            hits = [ln for ln in lines if f"{name}=" in ln]
            assert len(hits) == 1, (role, name, lines)
            assert "is accepted and ignored: " in hits[0], hits[0]
        assert not [ln for ln in lines if "DMLC_ENABLE_RDMA" in ln], (role, lines)  # honoured: UCX
        assert not [ln for ln in lines if "BYTEPS_CUDA_HOME" in ln or "BYTEPS_WITHOUT_MXNET" in ln], lines
    assert "bpslaunch does not wrap commands in gdb" in result.output


def test_strict_config_makes_them_a_start_up_error_naming_each(run_job):
    result = run_job(2, 1, SCRIPT, env={**ORIGINAL_ENV, "BYTEPS_STRICT_CONFIG": "1"}, timeout=90)
    assert result.returncode != 0 and "ALL OK" not in result.stdout, result
    for name in IGNORED:
        assert re.search(rf"{name}=\S+.*\(an error with BYTEPS_STRICT_CONFIG=1\)", result.output), (name, result)
    assert "BYTEPS_CUDA_HOME" not in result.output


def test_byteps_info_config_lists_every_variable_with_its_disposition():
    out = subprocess.run([str(CORE_BINARY), "info", "--config"], env=job_env({"BYTEPS_ENABLE_GDB": "1"}),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = {m.group(2): (m.group(1) == "*", m.group(3), m.group(4))
            for m in re.finditer(r"(?m)^([ *]) (\S+)\s+(honoured|mapped|ignored|build-time)\s+(.*)$", out.stdout)}
    assert rows["BYTEPS_PARTITION_BYTES"][1] == "honoured"
    assert rows["DMLC_ENABLE_UCX"][1] == "mapped" and "BYTEPS_TRANSPORT=ucx" in rows["DMLC_ENABLE_UCX"][2]
    assert rows["BYTEPS_ENABLE_GDB"] == (True, "ignored", "bpslaunch does not wrap commands in gdb; run `gdb --args` yourself")
    assert rows["BYTEPS_TRACE_ON"][1] == "honoured"
    assert rows["BYTEPS_NCCL_HOME"][1] == "honoured"  # build-time, and searched at run time
    assert rows["BYTEPS_CUDA_INCLUDE"][1] == "build-time"
    assert len(rows) >= 100, len(rows)
    plain = subprocess.run([str(CORE_BINARY), "info"],
                           env=job_env({"DMLC_ENABLE_RDMA": "1", "BYTEPS_TRANSPORT": "tcp"}),
                           capture_output=True, text=True, timeout=30)
    assert ("warning: DMLC_ENABLE_RDMA=1 asks for RDMA (the UCX transport), but BYTEPS_TRANSPORT=tcp is set and wins"
            in plain.stdout), plain.stdout


def test_byteps_info_says_whether_gpu_groups_exist_and_why_not():
    # One line, "gpu groups: nccl" or "gpu groups: none (<what is missing>)", agreeing with the
    # build's device support (a build without CUDA cannot have them).
    out = subprocess.run([str(CORE_BINARY), "info"], env=job_env(), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    line = next((l for l in out.stdout.splitlines() if l.startswith("gpu groups: ")), None)
    assert line is not None, out.stdout
    assert line == "gpu groups: nccl" or re.fullmatch(r"gpu groups: none \(.+\)", line), line
    from byteps import _basics
    core = _basics.core()
    if not core.device_built(core.DEVICE_CUDA):
        assert "built without CUDA" in line, line
