"""scripts/gpu-check.sh's judgement and preflight, without a GPU.

* scripts/gpu_check_report.py: a gtest report where the CUDA tests skipped fails on a GPU machine
  (with each skip's reason from the binary's output) and passes in a rehearsal; a gpu_check.py step
  that wrote no JSON, skipped, failed or timed out; the one JSON's verdict.
* The preflight lists every missing piece at once: run with a PATH that has no compiler, cmake,
  ninja or nvidia-smi, a python that sees no site-packages (no torch, numpy, pytest, pybind11) and
  no bundle, it names each, fails, and writes them into gpu-check.json.
(scripts/gpu-rehearsal.sh runs the whole check in CI.)
"""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("gpu_check_report", REPO / "scripts" / "gpu_check_report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)

OUTPUT = """\
[ RUN      ] Backends/DeviceTest.CopiesRoundTripInStreamOrder/cpu
[       OK ] Backends/DeviceTest.CopiesRoundTripInStreamOrder/cpu (1 ms)
[ RUN      ] Backends/DeviceTest.CopiesRoundTripInStreamOrder/cuda
/src/tests/unit/device_test.cc:36: Skipped
cuda:0: no usable GPU: CUDA driver version is insufficient for CUDA runtime version
[  SKIPPED ] Backends/DeviceTest.CopiesRoundTripInStreamOrder/cuda (0 ms)
[ RUN      ] NcclGroup.NeedsGpus
12:00:00.000 [worker:0] WARNING something logged meanwhile
/src/tests/unit/device_test.cc:260: Skipped
this build has no GPU groups: nccl.h was not found
[  SKIPPED ] NcclGroup.NeedsGpus (0 ms)
[ RUN      ] DeviceClusterTest.ACudaTensorWithoutAGpuIsRefusedNamingTheCause
/src/tests/integration/device_cluster_test.cc:348: Skipped
a CUDA GPU is usable here: this test checks the message on machines without one
[  SKIPPED ] DeviceClusterTest.ACudaTensorWithoutAGpuIsRefusedNamingTheCause (0 ms)
"""


def gtest_json(results: dict[str, str]) -> dict:
    """A --gtest_output=json report (gtest 1.12's shape) with one test per name."""
    suites: dict[str, list] = {}
    for full, result in results.items():
        suite, name = full.split(".", 1)
        case = {"name": name, "status": "RUN", "result": "SKIPPED" if result == "skip" else "COMPLETED"}
        if result == "fail":
            case["failures"] = [{"failure": "device_test.cc:50\nExpected equality\n  1 vs 2", "type": ""}]
        suites.setdefault(suite, []).append(case)
    return {"testsuites": [{"name": s, "testsuite": cases} for s, cases in suites.items()]}


ALL_SKIPPED = {
    "Backends/DeviceTest.CopiesRoundTripInStreamOrder/cpu": "ok",
    "Backends/DeviceTest.CopiesRoundTripInStreamOrder/cuda": "skip",
    "NcclGroup.NeedsGpus": "skip",
    "DeviceClusterTest.ACudaTensorWithoutAGpuIsRefusedNamingTheCause": "skip",
}


def test_skip_reasons_come_from_the_output_even_with_log_lines_between():
    reasons = report.skip_reasons(OUTPUT)
    assert reasons["Backends/DeviceTest.CopiesRoundTripInStreamOrder/cuda"].startswith("cuda:0: no usable GPU")
    assert "nccl.h was not found" in reasons["NcclGroup.NeedsGpus"]
    assert "Backends/DeviceTest.CopiesRoundTripInStreamOrder/cpu" not in reasons


def test_cuda_tests_that_skip_fail_a_gpu_machine_with_the_reason_and_pass_a_rehearsal():
    summary = report.summarize_gtest(gtest_json(ALL_SKIPPED), OUTPUT)
    assert summary["passed"] == 1 and len(summary["skipped"]) == 3
    # The test whose premise is "no GPU" is not a CUDA test: its skip on a GPU machine is by design.
    assert [s["name"] for s in summary["cuda_skipped"]] == [
        "Backends/DeviceTest.CopiesRoundTripInStreamOrder/cuda", "NcclGroup.NeedsGpus"]
    status, reason = report.gtest_verdict("gpu", summary)
    assert status == "failed"
    assert "2 CUDA test(s) skipped" in reason and "CUDA driver version is insufficient" in reason
    assert report.gtest_verdict("rehearsal", summary)[0] == "ok"


def test_a_failed_test_fails_either_mode_and_is_named():
    summary = report.summarize_gtest(gtest_json({"NcclGroup.NeedsGpus": "fail", "A.B": "ok"}), "")
    for mode in ("gpu", "rehearsal"):
        status, reason = report.gtest_verdict(mode, summary)
        assert status == "failed" and "NcclGroup.NeedsGpus" in reason
    assert "1 vs 2" in summary["failed"][0]["failure"]
    assert report.gtest_verdict("rehearsal", report.summarize_gtest({"testsuites": []}))[0] == "failed"


@pytest.mark.parametrize("data, rc, status, words", [
    (None, 1, "failed", "wrote no JSON"),
    ({"ok": False, "skipped": "torch sees no GPU"}, 0, "skipped", "torch sees no GPU"),
    ({"ok": False, "error": "float16 mismatch at 7"}, 1, "failed", "float16 mismatch"),
    ({"ok": True}, 3, "failed", "exit code 3"),
    ({"ok": True}, 124, "failed", "timed out"),
    ({"ok": True, "summary": "8 dtypes exact"}, 0, "ok", "8 dtypes exact"),
])
def test_a_python_steps_verdict(data, rc, status, words):
    got_status, reason = report.pystep_verdict(data, rc)
    assert got_status == status and words in reason


def write_records(path: Path, records: list[tuple]) -> None:
    with path.open("w") as f:
        for name, status, detail in records:
            f.write(json.dumps({"name": name, "status": status, "seconds": 1.0, "reason": f"{name} {status}",
                                **({"detail": detail} if detail is not None else {})}) + "\n")


def test_the_one_json_fails_a_gpu_machine_where_steps_skipped_or_no_cuda_test_passed(tmp_path):
    records, out = tmp_path / "records.jsonl", tmp_path / "gpu-check.json"
    gtest = report.summarize_gtest(gtest_json(ALL_SKIPPED), OUTPUT)
    write_records(records, [("preflight", "note", None), ("build", "ok", None), ("device_test", "ok", gtest),
                            ("dtypes", "skipped", {"ok": False, "skipped": "no GPU"})])
    assert report.final(str(records), "rehearsal", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["ok"] and data["steps"]["dtypes"]["detail"]["skipped"] == "no GPU"
    assert list(data["steps"]) == ["build", "device_test", "dtypes"]
    assert report.final(str(records), "gpu", str(out)) == 1
    failures = json.loads(out.read_text())["failures"]
    assert any(f.startswith("dtypes: skipped") for f in failures)
    assert any("no CUDA test passed" in f for f in failures)


def test_a_preflight_problem_fails_the_check(tmp_path):
    records, out = tmp_path / "records.jsonl", tmp_path / "gpu-check.json"
    write_records(records, [("preflight", "failed", None), ("build", "ok", None)])
    assert report.final(str(records), "rehearsal", str(out)) == 1
    assert json.loads(out.read_text())["failures"] == ["preflight: preflight failed"]


def test_bench_compares_cuda_with_host_tensors_per_size():
    cpu = {"rows": [{"bytes": 4 << 20, "time_us_median": 1000.0}, {"bytes": 16 << 20, "time_us_median": 4000.0}]}
    cuda = {"rows": [{"bytes": 4 << 20, "time_us_median": 1500.0}, {"bytes": 16 << 20, "time_us_median": 4400.0}]}
    result, (status, reason) = report.bench_compare(cpu, cuda, 1)
    assert status == "ok" and result["cuda_time_over_cpu"] == {str(4 << 20): 1.5, str(16 << 20): 1.1}
    assert report.bench_compare(cpu, None, 0)[1][0] == "skipped"
    assert report.bench_compare(cpu, None, 1)[1][0] == "failed"
    assert report.bench_compare(None, cuda, 1)[1][0] == "failed"


# --- the preflight, run for real with pieces taken away ------------------------------------------
TOOLS = ["bash", "env", "timeout", "tee", "grep", "sed", "cut", "sort", "head", "tail", "tr", "paste", "ldd",
         "nproc", "dirname", "mkdir", "rm", "ls", "cat", "readlink", "sh", "ldconfig"]


def run_preflight(tmp_path: Path, env_extra: dict, args: list[str], hide_cuda: bool = False) -> tuple[int, str, dict]:
    out = tmp_path / "out"
    env = {"HOME": str(tmp_path), "OUT": str(out), "BUILD_DIR": str(tmp_path / "build"), **env_extra}
    cmd = ["bash", str(REPO / "scripts" / "gpu-check.sh"), "--preflight-only", *args]
    if hide_cuda:  # an empty /usr/local/cuda, in a mount namespace of its own
        cmd = [shutil.which("unshare"), "--mount", "/bin/sh", "-c", '/bin/mount -t tmpfs tmpfs /usr/local/cuda && exec "$@"', "sh", *cmd]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    data = json.loads((out / "gpu-check.json").read_text())
    assert (out / "gpu-check.log").read_text().strip(), "the log is empty"
    return proc.returncode, proc.stdout + proc.stderr, data


def stripped_machine(tmp_path: Path) -> dict:
    """A PATH with the shell tools only, and a python that sees no site-packages."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in TOOLS:
        found = shutil.which(tool, path="/usr/bin:/bin:/usr/sbin:/sbin")
        assert found, f"this machine lacks {tool}"
        (bin_dir / tool).symlink_to(found)
    py = tmp_path / "py" / "python3"
    py.parent.mkdir()
    py.write_text("#!/bin/sh\nexec /usr/bin/python3 -S \"$@\"\n")
    py.chmod(0o755)
    return {"PATH": str(bin_dir), "PYTHON": str(py), "GPU_BUNDLE": str(tmp_path / "no-bundle"),
            "BYTEPS_CUDA_HOME": str(tmp_path / "no-cuda")}


def can_hide_cuda() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None and Path("/usr/local/cuda").is_dir() and \
        subprocess.run(["unshare", "--mount", "true"], capture_output=True).returncode == 0


def test_the_preflight_lists_every_missing_piece_at_once(tmp_path):
    hide = can_hide_cuda()
    no_nvcc = hide or not Path("/usr/local/cuda/bin/nvcc").exists()
    rc, text, data = run_preflight(tmp_path, stripped_machine(tmp_path), [], hide_cuda=hide)
    assert rc != 0, text
    problems = [p["reason"] for p in data["preflight"] if p["status"] == "failed"]
    for words in ["C++20 compiler", "C compiler", "cmake: not on PATH", "ninja: not on PATH", "GPU: nvidia-smi",
                  "torch: ", "numpy: ", "pytest: ", "pybind11: ", "build packages: the system has no fmt",
                  "OpenSSL (libssl-dev)", "GTest (libgtest-dev)"] + (["nvcc: ", "nccl.h: "] if no_nvcc else []):
        assert any(words in p for p in problems), f"'{words}' is not among the problems: {problems}"
        assert words in text
    # each says what to do
    assert all(":" in p and len(p) > 30 for p in problems), problems
    assert "scripts/gpu-bundle.sh" in next(p for p in problems if p.startswith("build packages"))
    assert not data["ok"] and len(data["failures"]) == len(problems)


def test_a_driver_older_than_the_toolkit_is_named(tmp_path):
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not Path(nvcc).exists():
        pytest.skip("no nvcc here: the driver is compared with the toolkit's CUDA version")
    env = stripped_machine(tmp_path)
    smi = Path(env["PATH"]) / "nvidia-smi"  # a driver for CUDA 12.4 only, with one H100
    smi.write_text("#!/bin/sh\n"
                   "case \"$1\" in --query-gpu*) echo 'NVIDIA H100 80GB HBM3, 550.54.15, 81559 MiB' ;;\n"
                   "*) echo '| NVIDIA-SMI 550.54.15   Driver Version: 550.54.15   CUDA Version: 12.4 |' ;; esac\n")
    smi.chmod(0o755)
    rc, text, data = run_preflight(tmp_path, env, [])
    problems = [p["reason"] for p in data["preflight"] if p["status"] == "failed"]
    driver = [p for p in problems if p.startswith("driver 550.54.15 runs CUDA up to 12.4")]
    assert rc != 0 and driver, problems
    assert "every CUDA call would fail" in driver[0]
    assert not any(p.startswith("GPU: ") for p in problems)
    assert data["machine"]["gpus"].startswith("NVIDIA H100")
    # In a rehearsal the same machine's GPU pieces are notes: only the build's pieces are missing.
    rc, text, data = run_preflight(tmp_path, env, ["--rehearsal"])
    notes = [p["reason"] for p in data["preflight"] if p["status"] == "note"]
    assert any(n.startswith("driver 550.54.15") for n in notes), notes


def test_a_rehearsal_preflight_here_finds_nothing_missing_and_notes_the_gpu(tmp_path):
    if shutil.which("nvidia-smi"):
        pytest.skip("this machine has nvidia-smi: the rehearsal premise (no GPU) does not hold")
    cuda = os.environ.get("BYTEPS_CUDA_HOME", "/usr/local/cuda")
    if not shutil.which("nvcc") and not Path(cuda, "bin", "nvcc").exists():
        pytest.skip(f"no CUDA toolkit here (nvcc, {cuda}/bin/nvcc): the rehearsal builds the cuda backend")
    env = {"PATH": os.environ["PATH"], "PYTHON": "/usr/bin/python3"}
    rc, text, data = run_preflight(tmp_path, env, ["--rehearsal"])
    assert rc == 0, text
    assert "nothing missing" in text
    notes = [p["reason"] for p in data["preflight"] if p["status"] == "note"]
    assert any("nvidia-smi" in n and "the GPU steps skip" in n for n in notes), notes
    assert data["ok"] and data["mode"] == "rehearsal" and data["machine"]["nvcc"]
