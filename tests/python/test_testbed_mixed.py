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


TRAIN = textwrap.dedent("""
    import numpy as np
    import byteps.numpy as bps
    bps.init()
    for step in range(3):
        y = bps.push_pull(np.full(4 << 20, bps.rank() + step, np.float32), average=False, name="grads")
        want = sum(r + step for r in range(bps.size()))
        assert y[0] == want and y[-1] == want, (step, y[:4])
    print("ALL OK", bps.rank(), flush=True)
    bps.shutdown()
""")


def _mixed_job_at_rates(testbeds, tmp_path, cpu_mbit):  # noqa: F811
    """2 worker machines with a colocated server each at 200 Mbit/s, one CPU machine at cpu_mbit:
    (the scheduler's output, each server's count of the bytes of pushes it took)."""
    reason = missing_core()
    if reason:
        pytest.skip(reason)
    from tools.testbed.job import run_job
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    tb = testbeds(3, rate_mbit=200)
    if cpu_mbit != 200:
        tb.set_rate(2, cpu_mbit)
    result = run_job(tb, 2, 3, [PYTHON, str(script)], placement="mixed",
                     env={"BYTEPS_LOG_LEVEL": "INFO", "BYTEPS_START_TIMEOUT": "20",
                          "BYTEPS_TIMEOUT": "60"}, timeout=120, echo=False)
    assert result.returncode == 0, result
    for rank in (0, 1):
        assert f"ALL OK {rank}" in result.output(f"worker:{rank}"), result
    sched = result.output("scheduler")
    took = {}
    for i in range(3):
        m = re.search(r"took (\d+) bytes of pushes", result.output(f"server:{i}"))
        assert m, result.output(f"server:{i}")
        took[i] = int(m.group(1))
    return sched, took


def _measured(sched: str) -> tuple[float, float]:
    m = re.search(r"after the start-up probe: .*measured NIC rates: CPU machines ([\d.e+-]+) GB/s, "
                  r"worker machines ([\d.e+-]+) GB/s", sched)
    assert m, sched
    return float(m.group(1)), float(m.group(2))


@pytest.mark.skipif(not _ok, reason=f"no emulated cluster here: {_reason}")
def test_measured_rates_move_the_split_to_a_faster_cpu_machine(testbeds, tmp_path):  # noqa: F811
    # The CPU machine's NIC is 4x the worker machines': the start-up probe measures it at about 2x
    # (two workers at 200 Mbit/s cannot feed it faster), and at a rate r times the worker
    # machines' the optimal split for n = 2, k = 1 gives the CPU server min(1, r / 2) of the bytes
    # (the formula for equal rates: half).
    sched, took = _mixed_job_at_rates(testbeds, tmp_path, cpu_mbit=800)
    cpu, worker = _measured(sched)
    assert cpu > 1.6 * worker, sched
    share = re.search(r"after the start-up probe: .* the 1 on CPU machines ([\d.]+)% each", sched)
    assert share and float(share.group(1)) == pytest.approx(min(100.0, 50 * cpu / worker), abs=0.5), sched
    # The job's 3 x 16 MiB per worker all went to the CPU server; only the probe's own tensors
    # (placed before it decided) reached the colocated ones.
    assert took[2] > 0.7 * sum(took.values()), took


@pytest.mark.skipif(not _ok, reason=f"no emulated cluster here: {_reason}")
def test_measured_equal_rates_keep_the_formulas_split(testbeds, tmp_path):  # noqa: F811
    sched, took = _mixed_job_at_rates(testbeds, tmp_path, cpu_mbit=200)
    cpu, worker = _measured(sched)
    assert max(cpu, worker) <= 1.25 * min(cpu, worker), sched
    assert "so the formula's equal rates" in sched, sched
    assert "the 1 on CPU machines 50.0% each" in sched, sched
    assert 0.4 < took[2] / sum(took.values()) < 0.6, took
