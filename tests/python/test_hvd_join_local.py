"""Horovod's join() with several processes per host (BYTEPS_LOCAL_SIZE > 1): test_hvd_join.py's
script, unchanged, on 2 hosts x 2 processes (4 ranks, 2 servers). Each host's processes reduce
locally first: a joined process's share is zeros there; once the host's local root (its highest
local rank, the one that talks to the servers) joined, it stands in for the rounds its other
process still runs; the host joins the servers' join when all its processes did. The steps
cover, per phase: a non-root joining while its root goes on (host 0 in phase 1; its rounds then
map past those it sat out when phase 2 reuses the names), a root joining first (host 1 in phase
1, with every op family and Adasum alone through the stand-in; host 0 in phases 3 and 4), and the
last rank returned everywhere."""

from __future__ import annotations

import pytest

from conftest import LOCAL_SPAWNER
from test_hvd_join import JOIN, THREE, params

pytestmark = pytest.mark.usefixtures("require_core")

# Ranks 0, 1 on host 0 (1 is its root), 2, 3 on host 1 (3 is its root).
FOUR = dict(BASE1=[2, 6, 9, 4], LAST1=2, BASE3=[5, 1, 2, 3], LAST3=0, BATCHES=[4, 2, 3, 5], LAST4=3)


def test_join_with_two_processes_per_host(run_job):
    env = {"BPS_LOCAL": "2", "BPS_CHILD": params(FOUR) + JOIN, "BPS_CHILD_TIMEOUT": "280"}
    result = run_job(2, 2, LOCAL_SPAWNER, env=env, timeout=300, force_distributed=True)
    assert result.returncode == 0, result.output
    assert result.output.count("ALL OK") == 4, result.output


def test_join_with_three_processes_on_one_host(run_job):
    # No servers: the local reduce alone (its join round's last contribution is the last rank).
    env = {"BPS_LOCAL": "3", "BPS_CHILD": params(THREE) + JOIN, "BPS_CHILD_TIMEOUT": "280"}
    result = run_job(1, 1, LOCAL_SPAWNER, env=env, timeout=300, force_distributed=False)
    assert result.returncode == 0, result.output
    assert result.output.count("ALL OK") == 3, result.output
