"""Horovod's ``shutdown(); init()`` within one job (test_horovod_reinit in Horovod's own tests): not
supported by byteps (every worker's shutdown ends the job), so the second init() fails at once
with a clear error instead of waiting out the start deadline for a scheduler that has exited;
is_initialized() is False after shutdown()."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.usefixtures("require_core")

SCRIPT = r"""
import time
import byteps.torch as hvd
hvd.init()
rank = hvd.rank()
hvd.shutdown()
assert not hvd.is_initialized()
t0 = time.monotonic()
try:
    hvd.init()
    print("FAILS: a second init() joined", flush=True)
except hvd.HorovodInternalError as e:
    took = time.monotonic() - t0
    ok = "cannot re-initialize within one job" in str(e) and took < 5
    print("ALL OK" if ok else f"FAILS after {took:.1f} s: {e}", flush=True)
"""


def test_init_after_shutdown_within_one_job_fails_at_once(run_job):
    result = run_job(2, 1, SCRIPT, timeout=60)
    assert result.stdout.count("ALL OK") == 2, result
