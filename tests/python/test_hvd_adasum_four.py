"""hvd.Adasum on 4 workers (Horovod's tree at depth 2: (0,1) and (2,3), then their results), in
ONE job: the allreduce cases of test_hvd_adasum.py against the same NumPy reference."""

from __future__ import annotations

import pytest

from test_hvd_adasum import ALLREDUCE, FINISH

pytestmark = pytest.mark.usefixtures("require_core")


def test_adasum_allreduce_on_four_workers(run_job):
    result = run_job(4, 1, ALLREDUCE + FINISH, env={"BYTEPS_PARTITION_BYTES": "4096"}, timeout=300)
    assert result.returncode == 0, result.output
    assert result.output.count("ALL OK") == 4, result.output
    assert result.output.count("CHECKED 48") == 4, result.output
