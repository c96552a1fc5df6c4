"""hvd.Adasum with several processes per host (BYTEPS_LOCAL_SIZE > 1): a host's processes combine
their CPU tensors by Adasum's tree in local-rank order, then the servers combine the hosts'
results, which is Horovod's tree over the ranks when the local size and the host count are powers
of two. test_hvd_adasum.py's allreduce cases and delta optimizer run unchanged against its NumPy
reference of the tree over every rank: 2 hosts x 2 processes (through a server), and 3 processes
on one host (no server: the local tree alone, any n)."""

from __future__ import annotations

import pytest

from conftest import LOCAL_SPAWNER
from test_hvd_adasum import ALLREDUCE, FINISH, OPTIMIZER

pytestmark = pytest.mark.usefixtures("require_core")


@pytest.mark.parametrize("hosts,local", [(2, 2), (1, 3)])
def test_adasum_with_several_processes_per_host_follows_horovods_tree_over_ranks(run_job, hosts, local):
    env = {"BPS_LOCAL": str(local), "BPS_CHILD": ALLREDUCE + OPTIMIZER + FINISH, "BPS_CHILD_TIMEOUT": "280",
           "BYTEPS_PARTITION_BYTES": "4096"}
    result = run_job(hosts, 1, LOCAL_SPAWNER, env=env, timeout=300, force_distributed=hosts > 1)
    assert result.returncode == 0, result.output
    assert result.output.count("ALL OK") == hosts * local, result.output
    assert result.output.count("CHECKED 54") == hosts * local, result.output
