"""Several training processes per worker host (BYTEPS_LOCAL_SIZE > 1): they reduce through shared
memory and only the local root talks to the servers. Results must equal the flat path's."""
import secrets

import pytest

from conftest import LOCAL_SPAWNER, NUMPY_PRELUDE, job_results
from tools.procinfo import shm_leftovers  # conftest.py put the repository root on sys.path

CHILD = NUMPY_PRELUDE + r'''
out = {"rank": rank, "size": size, "local_rank": bps.local_rank(), "local_size": bps.local_size()}
sums = {}
for rnd in range(3):
    for name, dt, n in [("a", np.float32, 1000), ("b", np.int64, 7), ("c", np.float64, 0),
                        ("d", np.float16, 33), ("e", np.float32, 70000)]:
        x = (np.arange(n) % 7 + rank + rnd).astype(dt)
        y = bps.push_pull(x, average=False, name=name)
        sums[f"{name}{rnd}"] = float(y.astype(np.float64).sum())
        if name == "a":
            m = bps.push_pull(x, average=True, name="avg")
            sums[f"avg{rnd}"] = float(m.astype(np.float64).sum())
out["sums"] = sums
emit_result(out)
bps.shutdown()
'''


def expected(size):
    sums = {}
    for rnd in range(3):
        for name, n in [("a", 1000), ("b", 7), ("c", 0), ("d", 33), ("e", 70000)]:
            base = [(i % 7 + rnd) for i in range(n)]
            sums[f"{name}{rnd}"] = float(sum(b * size + sum(range(size)) for b in base))
            if name == "a":
                sums[f"avg{rnd}"] = sums[f"a{rnd}"] / size
    return sums


# The last case has two PCIe switches of 2 per host: every process also joins its switch's circle
# and the switches' roots their cross-switch one (the device path's); host tensors still reduce
# over every local process, and all circles start and leave cleanly.
@pytest.mark.parametrize("hosts,local,servers,switch", [(1, 2, 0, 0), (2, 2, 1, 0), (2, 3, 2, 0), (2, 4, 1, 2)])
def test_local_reduce_matches_flat_sum(run_job, hosts, local, servers, switch):
    # Our own secret: the job's segments are named by its token, so the leftover check below sees
    # only this job's (other jobs may be running on the machine meanwhile).
    secret = secrets.token_hex(16)
    env = {"BPS_LOCAL": str(local), "BPS_CHILD": CHILD, "BYTEPS_PARTITION_BYTES": "65536",
           "BYTEPS_JOB_SECRET": secret}
    if switch:
        env["BYTEPS_PCIE_SWITCH_SIZE"] = str(switch)
        env["BYTEPS_LOG_LEVEL"] = "INFO"
    r = run_job(hosts, max(servers, 1), LOCAL_SPAWNER, env=env, timeout=60, force_distributed=servers > 0)
    assert r.returncode == 0, r.output
    res = job_results(r.output)
    size = hosts * local
    assert len(res) == size, r.output
    assert sorted(x["rank"] for x in res) == list(range(size))
    want = expected(size)
    for x in res:
        assert x["size"] == size and x["local_size"] == local
        for k, v in want.items():
            assert x["sums"][k] == pytest.approx(v, rel=1e-3 if k.startswith("d") else 1e-9), (k, x)
    assert not r.leftovers
    assert not shm_leftovers(secret), "shared memory left behind"
    if switch:  # each host's local root said how it splits the host
        assert r.output.count(f"{local // switch} PCIe switches of {switch} processes") == hosts, r.output


def test_local_rank_missing_fails_with_clear_error(run_job):
    env = {"BPS_LOCAL": "1", "BPS_CHILD": CHILD, "BYTEPS_START_TIMEOUT": "3"}
    # the only process is local rank 1 of BYTEPS_LOCAL_SIZE=2: its local root never starts
    script = LOCAL_SPAWNER.replace('"BYTEPS_LOCAL_SIZE": str(n)', '"BYTEPS_LOCAL_SIZE": "2"').replace(
        '"BYTEPS_LOCAL_RANK": str(i)', '"BYTEPS_LOCAL_RANK": "0"')
    r = run_job(1, 1, script, env=env, timeout=30)
    assert r.returncode != 0
    assert "cannot reach its local root" in r.output, r.output


# The duplicate test's child: the refused process leaves a flag file; the accepted ones wait for it
# (bounded) before they shut down.  Without the wait the accepted pair could finish the whole job
# before the third process even connected, and that one would then find no local root at all (CI
# saw it wait out BYTEPS_START_TIMEOUT): a different case from the one under test.
DUPLICATE_CHILD = CHILD.replace("bps.init()", """import time
flag = os.path.join(os.path.dirname(os.path.abspath(__file__)), "refused")
try:
    bps.init()
except Exception:
    open(flag, "w").close()
    raise""", 1).replace("bps.shutdown()", """deadline = time.monotonic() + 20
while not os.path.exists(flag) and time.monotonic() < deadline:
    time.sleep(0.02)
bps.shutdown()""")


def test_a_duplicate_local_rank_is_refused_at_once_with_the_reason(run_job):
    env = {"BPS_LOCAL": "3", "BPS_CHILD": DUPLICATE_CHILD, "BYTEPS_START_TIMEOUT": "30"}
    # three processes for BYTEPS_LOCAL_SIZE=2: local ranks 0, 0 and 1 (the root)
    script = LOCAL_SPAWNER.replace('"BYTEPS_LOCAL_SIZE": str(n)', '"BYTEPS_LOCAL_SIZE": "2"').replace(
        '"BYTEPS_LOCAL_RANK": str(i)', '"BYTEPS_LOCAL_RANK": str(max(0, i - 1))')
    r = run_job(1, 1, script, env=env, timeout=60)
    assert r.returncode != 0, r.output
    assert "refusing local rank 0 (BYTEPS_LOCAL_SIZE=2: another process has that rank)" in r.output, r.output
    # the refused process says so itself, long before BYTEPS_START_TIMEOUT
    assert "the local root (local rank 1) failed: refusing local rank 0" in r.output, r.output
    assert r.elapsed < 25, r
