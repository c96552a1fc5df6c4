"""Tests of the collective benchmark's peers on this machine's loopback (no testbed needed): the
OpenMPI sweep (bench/collective/mpi_sweep.c) and the gloo rank (bench/collective/gloo_worker.py),
each timed after a barrier and back to back, with their sums checked by the programs themselves.
Skipped with the reason where OpenMPI or torch is missing.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}


def _json_rows(text: str) -> list[dict]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("JSON ")]


def _check_rows(rows: list[dict], sizes: dict[int, int]) -> None:
    assert [r["bytes"] for r in rows] == list(sizes), rows
    for r in rows:
        assert r["iters"] == sizes[r["bytes"]] == len(r["times_s"]), r
        assert all(t > 0 for t in r["times_s"]), r
        assert min(r["times_s"]) <= r["median_s"] <= max(r["times_s"]), r


@pytest.mark.parametrize("timing", [[], ["--back-to-back"]], ids=["barrier", "back-to-back"])
def test_mpi_sweep_sums_and_times_every_iteration(tmp_path, timing):
    mpicc, mpirun = shutil.which("mpicc"), shutil.which("mpirun")
    if not mpicc or not mpirun:
        pytest.skip("OpenMPI is not installed (apt-get install openmpi-bin libopenmpi-dev)")
    exe = tmp_path / "mpi_sweep"
    subprocess.run([mpicc, "-O2", "-Wall", "-Werror", "-o", str(exe), str(HERE / "mpi_sweep.c")],
                   check=True, capture_output=True, text=True, timeout=120)
    sizes = {4096: 3, 1 << 20: 2}
    proc = subprocess.run([mpirun, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                           "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo",
                           "--mca", "oob_tcp_if_include", "lo", str(exe), *timing, "1",
                           *(f"{b}:{i}" for b, i in sizes.items())],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, **MPI_ENV})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = _json_rows(proc.stdout)
    _check_rows(rows, sizes)
    assert all(r["n"] == 2 for r in rows)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("timing", [[], ["--back-to-back"]], ids=["barrier", "back-to-back"])
def test_gloo_worker_sums_and_times_every_iteration(timing):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (apt-get install python3-torch): no gloo peer")
    port = str(_free_port())
    sizes = {4096: 3, 1 << 20: 2}
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, str(HERE / "gloo_worker.py"), "--rank", str(r),
                               "--world-size", "2", "--master-addr", "127.0.0.1",
                               "--master-port", port, "--timeout", "60", *timing,
                               "--sizes", ",".join(f"{b}:{i}" for b, i in sizes.items())],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for r in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, out + err
    _check_rows(_json_rows(outs[0][0]), sizes)
    assert _json_rows(outs[1][0]) == []  # only rank 0 reports
