"""The model-shaped workload (bench/model_shaped): its profiles and a small run of every mode.

* Profiles: gradient bytes of VGG-16 (528 MiB) and ResNet-50 (102 MB), forward order =
  torchvision's named_parameters order, backward order its reverse, positive per-layer times
  summing to the calibrated iteration, and the README's table equal to the computed one.
* The replay's dummy module reproduces the names and order; the ddp mode's buckets are those
  torch's own bucket assignment gives.
* End to end: every mode runs through bpsrun (2 workers, 2 servers) on loopback with
  shrunken tensors and compute, exits 0 and prints one RESULT line.  About 15 s in all.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
for _path in (REPO / "python", REPO):  # byteps, tools and bench of this checkout
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from tools.localjob import PYTHON_DIR, hermetic_env, missing_core, run_bpsrun  # noqa: E402

torchvision = pytest.importorskip("torchvision")
import torch  # noqa: E402

from bench.model_shaped import profiles, workload  # noqa: E402

MiB = 2**20


def test_gradient_bytes() -> None:
    vgg, resnet = profiles.profile("vgg16"), profiles.profile("resnet50")
    assert vgg.nbytes / MiB == pytest.approx(528, rel=0.01)   # 553.4e6 bytes
    assert resnet.nbytes / 1e6 == pytest.approx(102, rel=0.02)
    assert len(vgg.forward_tensors) == 32 and len(resnet.forward_tensors) == 161


@pytest.mark.parametrize("model", profiles.MODELS)
def test_order_is_the_models(model: str) -> None:
    p = profiles.profile(model)
    with profiles._no_init():
        net = getattr(torchvision.models, model)(weights=None)
    expected = [(n, tuple(t.shape), "float32") for n, t in net.named_parameters()]
    assert [(t.name, t.shape, t.dtype) for t in p.forward_tensors] == expected
    assert p.backward_tensors == list(reversed(p.forward_tensors))
    assert p.nbytes == sum(t.numel() * 4 for t in net.parameters())


@pytest.mark.parametrize("model", profiles.MODELS)
def test_times(model: str) -> None:
    p = profiles.profile(model)
    assert all(layer.fwd_s > 0 and layer.bwd_s > 0 for layer in p.layers)
    assert all(layer.bwd_s == pytest.approx(profiles.BACKWARD_FACTOR * layer.fwd_s) for layer in p.layers)
    # The iteration is what the assumed V100 throughput says (documented in the README table).
    assert p.iteration_s == pytest.approx(profiles.BATCH / profiles.V100_IMG_PER_SEC[model])
    assert p.iteration_s == pytest.approx({"vgg16": 0.2783, "resnet50": 0.1600}[model], abs=1e-4)
    assert p.compute_s(1.0) == pytest.approx(20 * p.iteration_s)
    assert p.compute_s(2.0, time_scale=0.5) == pytest.approx(5 * p.iteration_s)
    assert 0.3 < p.calibration < 1.5  # the roofline is within a factor ~3 of the assumption


def test_readme_table_is_current() -> None:
    readme = (REPO / "bench" / "model_shaped" / "README.md").read_text()
    assert profiles.markdown_table(1.0) in readme


def test_ideal_comm() -> None:
    # machine-facts.md: 100 MB takes 0.84 s on the ideal PS at 1 Gbit/s, 1.50x that in a ring
    # at n=4, 1.75x at n=8.
    assert profiles.ideal_comm_s(100e6, 1.0, 4, "ps") == pytest.approx(0.837, abs=0.002)
    assert profiles.ideal_comm_s(100e6, 1.0, 4, "ring") == pytest.approx(1.5 * 0.837, abs=0.003)
    assert profiles.ideal_comm_s(100e6, 1.0, 8, "ring") == pytest.approx(1.75 * 0.837, abs=0.003)


@pytest.mark.parametrize("shrink", [1, 16])
def test_replay_module(shrink: int) -> None:
    args = workload.parse_args(["--model", "resnet50", "--mode", "byteps", "--shrink", str(shrink),
                                "--link-gbit", "2", "--time-scale", "0.5"])
    replay = workload.Replay(args)
    names = [n for n, _ in replay.module.named_parameters()]
    assert names == [t.name for t in replay.profile.forward_tensors]
    assert sum(len(layer.tensors) for layer in replay.layers) == len(names)
    assert sum(layer.fwd_s + layer.bwd_s for layer in replay.layers) == pytest.approx(replay.compute_s)
    assert replay.compute_s == pytest.approx(replay.profile.iteration_s * 10 * 0.5)
    if shrink == 1:
        assert replay.nbytes == replay.profile.nbytes
    else:
        assert replay.nbytes == sum(math.ceil(t.numel / shrink) * 4 for t in replay.profile.forward_tensors)


@pytest.mark.parametrize("model", profiles.MODELS)
def test_ddp_buckets_match_torch(model: str) -> None:
    dist = pytest.importorskip("torch.distributed")
    shapes = [t.shape for t in profiles.profile(model).forward_tensors]
    order = list(reversed(range(len(shapes))))
    tensors = [torch.empty(shapes[i], device="meta") for i in order]
    expected, _ = dist._compute_bucket_assignment_by_size(
        tensors, [workload.DDP_FIRST_BUCKET_BYTES, workload.DDP_BUCKET_BYTES], [False] * len(order), order)
    assert workload.ddp_buckets(shapes) == [list(b) for b in expected]


def test_stream_does_not_accumulate_overshoot() -> None:
    stream = workload.Stream()
    import time  # noqa: PLC0415

    start = time.perf_counter()
    for _ in range(200):
        stream.compute(0.0005)
    assert time.perf_counter() - start == pytest.approx(0.1, abs=0.03)


# --------------------------------------------------------------------------------------------
# End to end through bpsrun

@pytest.fixture
def run_job(tmp_path):
    """bpsrun with this checkout's core (tools.localjob.run_bpsrun); skips when it is not built."""
    reason = missing_core()
    if reason:
        pytest.skip(reason)

    def run(n, s, script_text, env, timeout, args):
        result = run_bpsrun(tmp_path, n, s, script_text, hermetic_env(env), timeout, args=args)
        assert not result.hung, result
        return result

    return run


RUNNER = """
import runpy, sys
sys.path.insert(0, {repo!r})
sys.argv = ["workload"] + sys.argv[1:]
runpy.run_module("bench.model_shaped.workload", run_name="__main__")
"""


@pytest.mark.parametrize("mode", workload.MODES)
def test_end_to_end(run_job, mode: str) -> None:
    for module in ("byteps.torch",):
        try:
            importlib.import_module(module)
        except ImportError as err:
            pytest.skip(f"{module} is not usable: {err}")
    env = {"OMP_NUM_THREADS": "1", "BYTEPS_TIMEOUT": "60",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(PYTHON_DIR)])}
    args = ("--model", "resnet50", "--mode", mode, "--iters", "2", "--warmup", "1", "--time-scale", "0.01",
            "--shrink", "16", "--credit", "4")
    result = run_job(2, 2, RUNNER.format(repo=str(REPO)), env=env, timeout=90, args=args)
    assert result.returncode == 0, result
    assert not result.leftovers, result
    records = [json.loads(line.split("RESULT ", 1)[1]) for line in result.stdout.splitlines() if "RESULT {" in line]
    assert len(records) == 1, result  # rank 0 only
    r = records[0]
    assert (r["model"], r["mode"], r["workers"], r["iters"]) == ("resnet50", mode, 2, 2), r
    assert r["img_per_sec"] > 0 and r["iter_time_s"] > 0
    assert r["compute_time_s"] == pytest.approx(0.16 * 20 * 0.01, rel=1e-3)
    assert r["iter_time_s"] >= 0.95 * r["compute_time_s"]  # nothing is faster than the replayed compute
    assert r["img_per_sec"] == pytest.approx(64 * 2 / r["iter_time_s"], rel=1e-3)
    assert r["bytes"] == sum(math.ceil(t.numel / 16) * 4 for t in profiles.profile("resnet50").forward_tensors)


def test_run_testbed_placements():
    # --k takes bench.collective's tokens: (servers, testbed placement, label) for n workers.
    from bench.model_shaped import run_testbed
    assert run_testbed.placement_of("n", 4) == (4, "separate", "n")
    assert run_testbed.placement_of("n/2", 4) == (2, "separate", "n/2")
    assert run_testbed.placement_of("colocated", 4) == (4, "colocated", "coloc")
    assert run_testbed.placement_of("mixed:2", 4) == (6, "mixed", "n+2")
    assert run_testbed.placement_of("n+n/2", 8) == (12, "mixed", "n+n/2")
    with pytest.raises(SystemExit):
        run_testbed.main(["--n", "2", "--k", "mixed:3"])
