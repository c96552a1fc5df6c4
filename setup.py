"""Packaging for byteps: drives the CMake build, nothing more (metadata is in pyproject.toml).

``pip install --no-build-isolation .`` runs ``build_py`` below, which

1. configures CMake into ``build/pip`` (Release; no GoogleTest/benchmark targets; the Python
   module is built for the interpreter running pip),
2. builds the ``byteps._core`` module and the ``byteps-core`` binary, which CMake writes into
   ``python/byteps/`` (see python/CMakeLists.txt and src/cli/CMakeLists.txt), and
3. copies ``_core*.so`` and ``_bin/byteps-core`` next to the pure-Python modules in the wheel.

Environment: ``BYTEPS_CMAKE_ARGS`` adds CMake configure arguments (split like a shell would),
``CMAKE_BUILD_PARALLEL_LEVEL`` caps build jobs (default: all CPUs).
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PACKAGE = ROOT / "python" / "byteps"
CMAKE_BUILD_DIR = ROOT / "build" / "pip"


def run(cmd):
    print("+", " ".join(shlex.quote(str(c)) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], cwd=ROOT, check=True)


def cmake_build():
    """Configures and builds the native targets; returns the files to ship, relative to PACKAGE."""
    cmake = shutil.which("cmake")
    if cmake is None:
        sys.exit("byteps: building needs CMake >= 3.22 (apt-get install cmake)")
    configure = [cmake, "-S", ROOT, "-B", CMAKE_BUILD_DIR, "-DCMAKE_BUILD_TYPE=Release",
                 "-DBYTEPS_BUILD_TESTS=OFF", "-DBYTEPS_BUILD_BENCH=OFF", "-DBYTEPS_BUILD_PYTHON=ON",
                 f"-DPython3_EXECUTABLE={sys.executable}"]
    if shutil.which("ninja") and not (CMAKE_BUILD_DIR / "CMakeCache.txt").exists():
        configure += ["-G", "Ninja"]  # only on a fresh build dir: the generator cannot change
    configure += shlex.split(os.environ.get("BYTEPS_CMAKE_ARGS", ""))
    run(configure)
    jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 1)
    run([cmake, "--build", CMAKE_BUILD_DIR, "--target", "byteps_python_core", "byteps_core",
         "--parallel", jobs])
    modules = [p for p in PACKAGE.glob("_core*.so") if _matches_interpreter(p.name)]
    binary = PACKAGE / "_bin" / "byteps-core"
    if not modules or not binary.is_file():
        sys.exit(f"byteps: CMake finished but {PACKAGE}/_core*.so or {binary} is missing")
    return [p.relative_to(PACKAGE) for p in modules + [binary]]


def _matches_interpreter(filename):
    """True for an extension module this interpreter can import (e.g. _core.cpython-311-x86_64-linux-gnu.so)."""
    from importlib.machinery import EXTENSION_SUFFIXES

    return any(filename == "_core" + s for s in EXTENSION_SUFFIXES)


class BuildPyWithCore(build_py):
    """build_py that first builds the native core with CMake and ships it in the package."""

    def run(self):
        shipped = cmake_build()
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install imports from python/, where CMake wrote the files
        for rel in shipped:
            target = Path(self.build_lib) / "byteps" / rel
            self.mkpath(str(target.parent))
            self.copy_file(str(PACKAGE / rel), str(target), preserve_mode=True)


class BinaryDistribution(Distribution):
    """The wheel holds a compiled module and executable: tag it for this platform/interpreter."""

    def has_ext_modules(self):
        return True


setup(
    package_dir={"": "python"},
    cmdclass={"build_py": BuildPyWithCore},
    distclass=BinaryDistribution,
    zip_safe=False,
)
