"""The emulated cluster's mixed placement (tools/testbed/job.py): a colocated server on each
worker host plus servers on hosts of their own, as the unified architecture runs them.

Needs root and network namespaces (skipped with the reason otherwise, as test_testbed.py); the
real job also needs the built core.
"""

from __future__ import annotations

import re
import textwrap

import pytest

from conftest import REPO, missing_core
from test_testbed import CLI, STEP_TIMEOUT, testbeds  # noqa: F401  (the fixture)
from tools.testbed.netns import Testbed

PYTHON = "/usr/bin/python3"

_ok, _reason = Testbed.available()


def test_mixed_placement_hosts():
    from tools.testbed.job import hosts_needed, placement_hosts
    # 3 workers, 3 colocated + 2 CPU servers: hosts 0..4, the scheduler on the first CPU host.
    assert placement_hosts(3, 5, "mixed") == ([0, 1, 2], [0, 1, 2, 3, 4], 3)
    assert hosts_needed(3, 5, "mixed") == 5
    # No CPU server: every server colocated, the scheduler on host 0.
    assert placement_hosts(2, 2, "mixed") == ([0, 1], [0, 1], 0)
    assert placement_hosts(2, 3, "mixed", scheduler_host=3) == ([0, 1], [0, 1, 2], 3)
    assert hosts_needed(2, 3, "mixed", scheduler_host=3) == 4
    with pytest.raises(ValueError, match=r"servers >= workers, got 1 < 2"):
        placement_hosts(2, 1, "mixed")
    with pytest.raises(ValueError, match="'separate', 'colocated' or 'mixed'"):
        placement_hosts(2, 2, "joint")


@pytest.mark.skipif(not _ok, reason=f"no emulated cluster here: {_reason}")
def test_cli_job_rejects_a_mixed_placement_without_colocated_servers():
    import subprocess
    r = subprocess.run([*CLI, "job", "--workers", "3", "--servers", "2", "--placement", "mixed",
                        "--", "true"], cwd=REPO, capture_output=True, text=True,
                       timeout=STEP_TIMEOUT)
    assert r.returncode == 2, r
    assert "mixed placement needs a colocated server on each of the 3 worker hosts" in r.stderr


PUSH_PULL = textwrap.dedent("""
    import numpy as np
    import byteps.numpy as bps
    bps.init()
    for size in (5, 300_000):
        y = bps.push_pull(np.full(size, bps.rank() + 1, np.float32), average=False, name=f"t{size}")
        want = bps.size() * (bps.size() + 1) / 2
        assert y[0] == want and y[-1] == want, (size, y[:4])
    print("ALL OK", bps.rank(), flush=True)
    bps.shutdown()
""")


@pytest.mark.skipif(not _ok, reason=f"no emulated cluster here: {_reason}")
def test_mixed_job_registers_colocated_and_cpu_server_hosts(testbeds, tmp_path):  # noqa: F811
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    from tools.testbed.job import run_job
    script = tmp_path / "push_pull.py"
    script.write_text(PUSH_PULL)
    tb = testbeds(3, rate_mbit=200)
    result = run_job(tb, 2, 3, [PYTHON, str(script)], placement="mixed",
                     env={"BYTEPS_LOG_LEVEL": "INFO", "BYTEPS_START_TIMEOUT": "20",
                          "BYTEPS_TIMEOUT": "30"}, timeout=60, echo=False)
    assert result.returncode == 0, result
    assert [result.processes[f"server:{i}"].host for i in range(3)] == [0, 1, 2]
    assert [result.processes[f"worker:{i}"].host for i in range(2)] == [0, 1]
    assert result.processes["scheduler"].host == 2
    for rank in (0, 1):
        assert f"ALL OK {rank}" in result.output(f"worker:{rank}"), result
    ip = [h.ip for h in tb.hosts]
    registered = re.findall(r"registered (\w+) \(pid \d+, ([\d.]+):\d+\)", result.output("scheduler"))
    assert sorted(registered) == sorted([("server", ip[0]), ("server", ip[1]), ("server", ip[2]),
                                         ("worker", ip[0]), ("worker", ip[1])]), result
