"""Horovod's process sets with several processes per host (BYTEPS_LOCAL_SIZE > 1), on 2 hosts x 2
processes (ranks 0, 1 on host 0, whose local root is 1; ranks 2, 3 on host 1, root 3): a round of
a set waits for, and goes to, the set's processes on each host; a host's local root that is not a
member stands in for its members (it alone talks to the servers), its own share left out; the
servers count the hosts a set's ranks run on. test_hvd_process_sets.py's script (every op family
against references) runs with sets that cover each case: a set within one host ({0, 1}), the
non-roots of both hosts ({0, 2}: stand-ins on both), the roots ({1, 3}), mixed ({1, 2}) and one
that leaves a host's non-root out ({0, 1, 3}); and test_hvd_optimizer_process_set.py's
DistributedOptimizer on {0, 2}."""

from __future__ import annotations

import pytest

from conftest import LOCAL_SPAWNER
from test_hvd_optimizer_process_set import SCRIPT as OPTIMIZER
from test_hvd_process_sets import SETS

pytestmark = pytest.mark.usefixtures("require_core")

FOUR_SETS = "[hvd.ProcessSet([0, 1]), hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 3]), hvd.ProcessSet([1, 2]), " \
            "hvd.ProcessSet([0, 1, 3])]"


def run_local(run_job, script, timeout=280):
    env = {"BPS_LOCAL": "2", "BPS_CHILD": script, "BPS_CHILD_TIMEOUT": str(timeout)}
    result = run_job(2, 1, LOCAL_SPAWNER, env=env, timeout=timeout + 20, force_distributed=True)
    assert result.returncode == 0, result.output
    assert result.output.count("ALL OK") == 4, result.output


def test_sets_with_every_op_family_on_two_hosts_of_two(run_job):
    script = SETS.replace("[hvd.ProcessSet([0, 1]), hvd.ProcessSet([1, 2]), hvd.ProcessSet([0, 2])]", FOUR_SETS)
    script = script.replace("torch.tensor([1, 2, 3]))", "torch.tensor([1, 2, 3, 4, 5]))")
    assert FOUR_SETS in script and "[1, 2, 3, 4, 5]" in script
    run_local(run_job, script)


def test_optimizer_on_a_set_of_two_non_roots(run_job):
    script = OPTIMIZER.replace("PS = hvd.ProcessSet([0, 1])", "PS = hvd.ProcessSet([0, 2])")
    assert "ProcessSet([0, 2])" in script
    run_local(run_job, script, timeout=120)
