"""One job (a scheduler, one server, two workers) with one process configured differently from the
rest, for every setting a user gets wrong across machines (tools/misconfig.py has the cases): the
job secret (missing, different), the job's size (on a worker, on a server), a duplicate rank, a
pinned partition size, the transport (where it matters), the scheduler's port and address, and
the role. For each case: every process exits by itself (none is left running), within the start
deadline plus a small margin, and at once where the difference is known at once; the
misconfigured process's message names the setting (and both values where both are known); every
other process names a reason too.

Then uneven ends: worker 0 runs fewer iterations than worker 1 and shuts down; worker 1's next
push_pull can never complete. It fails at once, naming both workers, the tensor and both round
counts, and so does the whole job, instead of waiting for BYTEPS_TIMEOUT.

The bounds here are wide (CI's 2 cores are shared); bench/failfast/run.py measures the times.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import misconfig  # conftest puts the repository root on sys.path

pytestmark = pytest.mark.usefixtures("require_core")

AT_ONCE_S = 6.0          # the target is 2 s (bench/failfast); this bound only rules out a deadline
DEADLINE_MARGIN_S = 4.0  # past BYTEPS_START_TIMEOUT


def _dump(exits) -> str:
    return "\n".join(repr(e) for e in exits.values())


@pytest.mark.parametrize("case", misconfig.CASES, ids=[c.id for c in misconfig.CASES])
def test_one_process_configured_differently_ends_the_whole_job(tmp_path: Path, case: misconfig.Case):
    if case.needs_ucx and not misconfig.ucx_built():
        pytest.skip("this build has no UCX transport (libucx-dev was not found at build time)")
    exits, says = misconfig.run_case(case, tmp_path)
    print(f"\n{case.id}: " + "  ".join(f"{e.label}={e.elapsed:.2f}s rc={e.returncode}" for e in exits.values()))
    left = [e.label for e in exits.values() if e.left_running]
    assert not left, f"still running: {left}\n{_dump(exits)}"
    bound = AT_ONCE_S if case.at_once else misconfig.start_timeout(case) + DEADLINE_MARGIN_S
    for e in exits.values():
        assert e.returncode != 0, f"{e.label} reported success in a job that cannot run\n{_dump(exits)}"
        assert e.elapsed <= bound, f"{e.label} took {e.elapsed:.2f} s (bound {bound} s)\n{_dump(exits)}"
    for text in says:
        assert text in exits[case.odd].output, f"{case.odd} does not say {text!r}\n{_dump(exits)}"
    for label, e in exits.items():
        if label != case.odd and case.others_say:
            assert case.others_say in e.output, f"{label} does not say {case.others_say!r}\n{_dump(exits)}"


def test_a_transport_difference_that_does_not_matter_leaves_the_job_running(tmp_path: Path):
    # BYTEPS_TRANSPORT=shm asks for shared memory with every peer of this host that offers it; a
    # job on tcp offers none, so this worker talks TCP like everyone else, and the job runs.
    exits = misconfig.run_job(tmp_path, misconfig.JOB, {"BYTEPS_TRANSPORT": "tcp", "BYTEPS_START_TIMEOUT": "30"},
                              {"worker:1": {"BYTEPS_TRANSPORT": "shm"}})
    for e in exits.values():
        assert e.returncode == 0, _dump(exits)
    assert "JOB OK 1" in exits["worker:1"].output, _dump(exits)


def test_uneven_ends_fail_the_job_at_once_naming_both_workers(tmp_path: Path):
    # Worker 0 runs 3 steps and shuts down; worker 1 runs 5. Worker 1's 4th push_pull needs
    # worker 0, which has left: it fails at once, and the whole job with it, well before
    # BYTEPS_TIMEOUT (30 s here).
    exits, shutdown_at = misconfig.run_uneven(tmp_path, (3, 5))
    print("\nuneven-ends: " + "  ".join(f"{e.label}={e.ended_at - shutdown_at:.3f}s after shutdown() rc={e.returncode}"
                                         for e in exits.values()))
    for e in exits.values():
        assert e.returncode not in (0, None), f"{e.label} reported success or kept running\n{_dump(exits)}"
        assert e.ended_at - shutdown_at < 10, f"{e.label} waited: for a timeout?\n{_dump(exits)}"
        assert "SHUT DOWN CLEANLY" not in e.output, _dump(exits)
    diagnosis = ["layer.grad' (key ", "worker 1 needs round 4", "worker 0 has shut down after round 3", "join()"]
    for label, e in exits.items():  # everyone, the worker waiting in shutdown() too, gets the diagnosis
        for text in diagnosis:
            assert text in e.output, f"{label} does not say {text!r}\n{_dump(exits)}"
