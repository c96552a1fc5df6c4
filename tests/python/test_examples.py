"""The PyTorch examples (examples/pytorch) run end to end through bpsrun with 2 workers and 1 server.

Settings are tiny (a few steps of resnet18 on 32x32 images; 3 epochs of digits) so that the
file takes well under 90 s on two cores; each test checks the exit status, that no process
outlived the job and the example's ``RESULT {...}`` line.  Tests skip (with the reason) when
byteps.torch, torchvision or scikit-learn is missing, or the core is not built (``run_job``).
"""

from __future__ import annotations

import importlib
import json

import pytest

from conftest import REPO

EXAMPLES = REPO / "examples" / "pytorch"

# Runs an example as __main__ with the job's arguments, as `python3 EXAMPLE ARGS` would.
RUNNER = """
import runpy, sys
example = {path!r}
sys.path.insert(0, {folder!r})
sys.argv = [example] + sys.argv[1:]
runpy.run_path(example, run_name="__main__")
"""

# Two workers on two cores: one math thread each, or they fight over the cores.
ENV = {"OMP_NUM_THREADS": "1", "BYTEPS_TIMEOUT": "60"}


def require(*modules: str) -> None:
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as err:
            pytest.skip(f"{module} is not usable: {err}")


def run_example(run_job, name: str, *args: str, workers: int = 2) -> dict:
    """Runs examples/pytorch/NAME through bpsrun; returns rank 0's RESULT record."""
    script = RUNNER.format(path=str(EXAMPLES / name), folder=str(EXAMPLES))
    result = run_job(workers, 1, script, env=ENV, timeout=120, args=args)
    assert result.returncode == 0, result
    assert not result.leftovers, result
    records = [json.loads(line.split("RESULT ", 1)[1]) for line in result.stdout.splitlines()
               if "RESULT {" in line]
    assert len(records) == 1, result  # printed by rank 0 only
    assert records[0]["workers"] == workers, result
    return records[0]


BENCH_ARGS = ("--model", "resnet18", "--batch-size", "4", "--image-size", "32", "--num-iters", "2",
              "--num-batches-per-iter", "1", "--num-warmup-batches", "1", "--num-classes", "10")


def test_benchmark_byteps(run_job) -> None:
    require("byteps.torch", "torchvision")
    r = run_example(run_job, "benchmark_byteps.py", *BENCH_ARGS, "--fp16-pushpull")
    assert r["mode"] == "byteps" and r["model"] == "resnet18" and r["batch"] == 4
    assert r["img_per_sec"] > 0 and r["comm_wait_s_per_iter"] >= 0


def test_benchmark_ddp_baseline(run_job) -> None:
    require("byteps.torch", "torchvision")
    r = run_example(run_job, "benchmark_byteps.py", *BENCH_ARGS, "--ddp-baseline")
    assert r["mode"] == "torch-ddp-gloo" and r["img_per_sec"] > 0
    assert r["comm_wait_s_per_iter"] is None


@pytest.mark.parametrize("extra, mode", [((), "byteps"), (("--ddp-baseline",), "torch-ddp-gloo")])
def test_train_digits(run_job, extra: tuple[str, ...], mode: str) -> None:
    require("byteps.torch", "sklearn")
    r = run_example(run_job, "train_digits.py", "--epochs", "3", *extra)
    assert r["mode"] == mode
    assert r["accuracy"] > 0.8, r  # about 0.91 after 3 epochs; >= 0.95 after the default 20
    assert r["samples_per_sec"] > 0


def test_train_ddp_with_accumulation(run_job) -> None:
    require("byteps.torch", "byteps.torch.parallel", "sklearn")
    r = run_example(run_job, "train_ddp.py", "--epochs", "3", "--accumulate", "2", "--lr", "0.01")
    assert r["mode"] == "byteps-ddp" and r["accumulate"] == 2
    assert r["accuracy"] > 0.8, r


def test_benchmark_cross_barrier(run_job) -> None:
    require("byteps.torch", "torchvision")
    r = run_example(run_job, "benchmark_cross_barrier_byteps.py", *BENCH_ARGS, "--fp16-allreduce", "--no-cuda")
    assert r["mode"] == "byteps-cross-barrier" and r["fp16_pushpull"] and r["img_per_sec"] > 0


# The original's recipe for one machine (its README): one bpslaunch, no scheduler or servers,
# local size from NVIDIA_VISIBLE_DEVICES (here two CPU processes, summed through shared memory).
ONE_MACHINE = {"NVIDIA_VISIBLE_DEVICES": "0,1", "DMLC_WORKER_ID": "0", "DMLC_NUM_WORKER": "1",
               "DMLC_ROLE": "worker"}


@pytest.mark.parametrize("name, mode, extra", [
    ("benchmark_byteps.py", "byteps", ("--fp16-pushpull",)),
    ("benchmark_cross_barrier_byteps.py", "byteps-cross-barrier", ("--fp16-allreduce",)),
])
def test_the_originals_one_machine_recipe_under_bpslaunch(require_core, tmp_path, name, mode, extra) -> None:
    require("byteps.torch", "torchvision")
    import subprocess
    import sys

    from conftest import job_env
    env = job_env({**ENV, **ONE_MACHINE})
    argv = [sys.executable, "-m", "byteps.launcher.bpslaunch", sys.executable, str(EXAMPLES / name), *BENCH_ARGS,
            *extra, "--no-cuda"]
    out = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr
    records = [json.loads(line.split("RESULT ", 1)[1]) for line in out.stdout.splitlines() if "RESULT {" in line]
    assert len(records) == 1, out.stdout + out.stderr
    assert records[0]["mode"] == mode and records[0]["workers"] == 2 and records[0]["img_per_sec"] > 0, records
