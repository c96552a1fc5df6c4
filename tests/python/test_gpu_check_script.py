"""scripts/gpu_check.py, the GPU machine's checks, rehearsed here so that its first run on a GPU
is not its first run at all: with GPU_CHECK_DEVICE=cpu every step's logic (the API calls, the
expected results, the JSON it writes) runs on CPU tensors in a real job; with no GPU, a step says
"skipped" with torch's reason and writes that, rather than passing or crashing."""

from __future__ import annotations

import json

import pytest

from tools.localjob import REPO

pytestmark = pytest.mark.usefixtures("require_core")

RUN_STEP = f"""
import runpy, sys
sys.argv = ["gpu_check.py", sys.argv[1], sys.argv[2]]
runpy.run_path({str(REPO / "scripts" / "gpu_check.py")!r}, run_name="__main__")
"""


@pytest.mark.parametrize("step,workers,distributed", [("dtypes", 1, True), ("collectives", 2, False),
                                                       ("worker", 2, False),
                                                       ("dlpack", 2, False)])
def test_step_logic_on_cpu_tensors(run_job, tmp_path, step, workers, distributed):
    out = tmp_path / f"{step}.json"
    rc, stdout, stderr = run_job(workers, 1, RUN_STEP, env={"GPU_CHECK_DEVICE": "cpu"}, timeout=120,
                                 force_distributed=distributed, args=(step, str(out)))
    assert rc == 0, stdout + stderr
    result = json.loads(out.read_text())
    assert result["ok"] is True and result["device"] == "cpu", result
    assert "CHECK" in stdout


def test_a_step_without_a_gpu_is_skipped_with_torch_reason(run_job, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a usable GPU: the step runs for real (scripts/gpu-check.sh)")
    out = tmp_path / "copies.json"
    rc, stdout, stderr = run_job(1, 1, RUN_STEP, timeout=60, args=("copies", str(out)))
    assert rc == 0, stdout + stderr
    result = json.loads(out.read_text())
    assert result["ok"] is False and "sees no usable GPU" in result["skipped"], result
    assert "SKIP copies" in stdout
