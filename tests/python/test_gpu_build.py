"""How a build finds and uses CUDA and NCCL, as a user meets it: the CUDA runtime is loaded at run
time (no binary links libcudart, so a driver that runs torch runs byteps, and a machine without
CUDA loads byteps too); `byteps info` says which runtime it loaded or why none; the original's
build variables that this build does not read are named by a CMake warning, never silently
accepted."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tools.localjob import CORE_BINARY, PYTHON_DIR, REPO, hermetic_env

pytestmark = pytest.mark.usefixtures("require_core")


def _info() -> str:
    return subprocess.run([str(CORE_BINARY), "info"], env=hermetic_env({}), capture_output=True, text=True,
                          timeout=30, check=True).stdout


def test_no_binary_links_the_cuda_runtime():
    modules = sorted((Path(PYTHON_DIR) / "byteps").glob("_core*.so"))
    assert modules, f"no byteps._core module under {PYTHON_DIR}/byteps"
    for binary in [Path(CORE_BINARY), *modules]:
        deps = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, timeout=30).stdout
        assert "libcudart" not in deps, f"{binary} links the CUDA runtime:\n{deps}"
        assert "libnccl" not in deps, f"{binary} links NCCL:\n{deps}"
    # The cuda* functions byteps forwards to the loaded runtime stay private to it: the module
    # exports none, so it never stands in for the runtime torch loaded in the same process.
    for module in modules:
        exported = subprocess.run(["nm", "-D", "--defined-only", str(module)], capture_output=True, text=True,
                                  timeout=30).stdout
        leaked = [ln for ln in exported.splitlines() if ln.split()[-1].startswith("cuda")]
        assert not leaked, f"{module} exports CUDA runtime names: {leaked[:5]}"


def test_byteps_info_names_the_cuda_runtime_it_loaded_or_why_not():
    lines = [ln for ln in _info().splitlines() if ln.startswith("cuda runtime: ")]
    assert len(lines) == 1, _info()
    line = lines[0]
    if "not built" in line:
        return  # a build without the toolkit: nothing to load
    assert "libcudart.so." in line, line
    assert (": runtime " in line and ", driver " in line) or "could not be loaded: tried" in line, line


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_the_originals_build_variables_this_build_ignores_get_a_cmake_warning(tmp_path):
    env = {**os.environ, "BYTEPS_CUDA_LIB": "/opt/cuda/lib64", "BYTEPS_NCCL_LINK": "shared"}
    out = subprocess.run(["cmake", "-S", str(REPO), "-B", str(tmp_path / "b"), "-DBYTEPS_BUILD_TESTS=OFF",
                          "-DBYTEPS_BUILD_BENCH=OFF", "-DBYTEPS_BUILD_PYTHON=OFF"],
                         env=env, capture_output=True, text=True, timeout=300)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    for var in ("BYTEPS_CUDA_LIB", "BYTEPS_NCCL_LINK"):
        assert f"{var} is not read by this build" in text, text
    assert "BYTEPS_CUDA_INCLUDE is not read" not in text  # only what is set is named
    assert "byteps: this build has: " in text
