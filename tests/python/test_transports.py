"""The data connections' backend (BYTEPS_TRANSPORT): a worker and a server of one host talk through
shared memory by default, over TCP when either side says tcp, and the sums are exact either way;
bad values are named errors."""
import subprocess
import sys

import pytest

from conftest import job_env

# Each worker may pick its own transport (BPS_WORKER_TRANSPORT, set before init) while the
# servers keep the job's: peers of different settings must still meet.
SCRIPT = r'''
import os
mine = os.environ.get("BPS_WORKER_TRANSPORT")
if mine:
    os.environ["BYTEPS_TRANSPORT"] = mine
import numpy as np
import byteps.numpy as bps
bps.init()
r, n = bps.rank(), bps.size()
for rnd in range(3):
    for name, count, dt in [("small", 100, np.float32), ("mid", 70000, np.float32), ("big", 3000000, np.float64)]:
        x = (np.arange(count) % 11 + r + rnd).astype(dt)
        y = bps.push_pull(x, average=False, name=name)
        want = (np.arange(count) % 11 * n + n * rnd + n * (n - 1) // 2).astype(dt)
        assert np.array_equal(y, want), (name, rnd)
print("EXACT", r, flush=True)
bps.shutdown()
'''


SHM, UCX = "(shared memory)", "(UCX)"


@pytest.mark.parametrize("job,worker,tls,via", [
    ("auto", "", "", SHM),   # the default: shared memory to the servers of this host
    ("tcp", "", "", None),   # off everywhere
    ("auto", "tcp", "", None),  # a tcp-only worker meets auto servers over TCP
    ("tcp", "shm", "", None),  # a worker that insists on shm meets servers that offer none: TCP
    ("shm", "", "", SHM),
    ("ucx", "", "tcp", UCX),  # UCX over its tcp transport ...
    ("ucx", "", "sm", UCX),   # ... and over its shared memory (UCX_TLS passes through)
    ("ucx", "tcp", "", None),  # a tcp-only worker meets UCX servers over plain TCP
])
def test_sums_are_exact_over_each_transport_and_mixes(run_job, job, worker, tls, via, ucx_built):
    if "ucx" in (job, worker) and not ucx_built:
        pytest.skip("this build has no UCX (libucx-dev was not found at build time)")
    env = {"BYTEPS_TRANSPORT": job, "BYTEPS_LOG_LEVEL": "INFO", "BYTEPS_PARTITION_BYTES": "1048576"}
    if worker:
        env["BPS_WORKER_TRANSPORT"] = worker
    if tls:
        env["UCX_TLS"] = tls
    r = run_job(2, 2, SCRIPT, env=env, timeout=90, force_distributed=True)
    assert r.returncode == 0, r.output
    assert r.output.count("EXACT") == 2, r.output
    # The servers name each closed data connection; shared-memory and UCX ones say so.
    server_lines = [l for l in r.output.splitlines() if "[server" in l and "connection from worker" in l]
    assert server_lines, r.output
    for marker in (SHM, UCX):
        assert any(marker in l for l in server_lines) == (marker == via), "\n".join(server_lines)


def test_a_ucx_worker_and_servers_that_do_not_speak_ucx_fail_with_a_named_error(run_job, ucx_built):
    if not ucx_built:
        pytest.skip("this build has no UCX (libucx-dev was not found at build time)")
    env = {"BYTEPS_TRANSPORT": "auto", "BPS_WORKER_TRANSPORT": "ucx", "BYTEPS_START_TIMEOUT": "5"}
    r = run_job(1, 1, SCRIPT, env=env, timeout=60, force_distributed=True)
    assert r.returncode != 0 and "EXACT" not in r.output, r.output
    assert "closed the connection during the UCX handshake (does every process of the job run with " \
           "BYTEPS_TRANSPORT=ucx" in r.output, r.output


@pytest.mark.parametrize("value,needle", [
    ("rdma", "RDMA goes through UCX here: set BYTEPS_TRANSPORT=ucx"),
    ("carrier-pigeon", "use auto, tcp, shm or ucx"),
])
def test_a_bad_transport_is_a_named_error(value, needle, require_core):
    r = subprocess.run([sys.executable, "-m", "byteps.cli", "info"], env=job_env({"BYTEPS_TRANSPORT": value}),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert needle in r.stderr + r.stdout, r.stderr + r.stdout
    assert "BYTEPS_TRANSPORT" in r.stderr + r.stdout
