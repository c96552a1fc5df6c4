#!/usr/bin/env bash
# Installs, builds and runs every test: the GPU rehearsal (scripts/gpu-rehearsal.sh --ci: the build
# with only the GPU bundle's packages, and gpu-check.sh's steps), GoogleTest (unit + in-process
# cluster), pytest (Python API, launcher, multi-process jobs and bad input), then the suite under
# ASan+UBSan and the concurrency tests under TSan. Set BYTEPS_SKIP_SANITIZERS=1 for a quick local run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}

echo "== build, in the GPU rehearsal (scripts/gpu-rehearsal.sh --ci), and the GPU check's steps =="
# The main build is made where only the bundle provides fmt, nlohmann-json, CLI11, OpenSSL, GTest,
# pybind11-dev and ninja (as on the GPU machine), then gpu-check.sh's steps run on it (the GPU
# ones skip, saying why); the tests below use that same build: byteps is compiled once.
rehearsal=0
bash scripts/gpu-rehearsal.sh --ci || rehearsal=$?
if ! /usr/bin/python3 -c "import json, sys; sys.exit(json.load(open('gpu-check-out/gpu-check.json'))['steps']['build']['status'] != 'ok')" 2>/dev/null; then
  echo "== the rehearsal's build failed: building with the system's packages, so that the tests still run =="
  rm -rf build
  bash scripts/build.sh
fi
echo "== ctest =="
(cd build && ctest --output-on-failure --timeout 600)
echo "== pytest =="
/usr/bin/python3 -m pytest -q -rs -p no:cacheprovider tests/python bench  # bench/: the benchmarks' own tests

if [ "${BYTEPS_SKIP_SANITIZERS:-0}" != 1 ]; then
  # Both sanitizer builds are unity builds (CMAKE_UNITY_BUILD: a target's files compiled 8 to a
  # translation unit, which parses the shared headers once). A "redefinition of ...{anonymous}..."
  # error seen only here means two files of one target share a name in their anonymous namespaces:
  # rename one, or give it SKIP_UNITY_BUILD_INCLUSION in its CMakeLists.txt (as some files have).
  # Check locally with the ASan build below, or any build given -DCMAKE_UNITY_BUILD=ON (a normal
  # one builds too, into python/byteps as usual).
  echo "== ASan + UBSan =="
  # Only the programs ctest runs (byteps_test_programs: not byteps-core, libbyteps.so, the C API),
  # at -O0: -O1 made this build the longest stage of CI (UBSan's checks are what the optimizer
  # spends its time on) and saved less test time than it cost build time.
  BUILD_DIR=build-asan BUILD_TYPE=Debug BUILD_TARGETS=byteps_test_programs bash scripts/build.sh \
    -DBYTEPS_SANITIZE=address,undefined -DBYTEPS_SANITIZE_OPT=0 -DCMAKE_UNITY_BUILD=ON \
    -DBYTEPS_BUILD_PYTHON=OFF -DBYTEPS_BUILD_BENCH=OFF
  (cd build-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
     ctest --output-on-failure --timeout 900)
  echo "== TSan (concurrency tests) =="
  # Only the targets of the tests it runs (the concurrency label; test names are target names).
  tsan_targets=$(cd build && ctest -N -L concurrency | sed -n 's/^ *Test *#[0-9]*: //p' | tr '\n' ' ')
  # At -O1 (the default): at -O0 the build is half a minute shorter but the tests run 3x longer in
  # places (the pinned-staging test: 9 s -> 30 s), leaving less room for their deadlines.
  BUILD_DIR=build-tsan BUILD_TYPE=Debug BUILD_TARGETS="$tsan_targets" bash scripts/build.sh -DBYTEPS_SANITIZE=thread \
    -DCMAKE_UNITY_BUILD=ON -DBYTEPS_BUILD_PYTHON=OFF -DBYTEPS_BUILD_BENCH=OFF
  # UCX_MEM_EVENTS=no: libucm (loaded by every binary that links the transport layer) hooks
  # madvise, which glibc calls at a thread's exit where ThreadSanitizer keeps no thread state.
  (cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 UCX_MEM_EVENTS=no \
     ctest --output-on-failure --timeout 900 -L concurrency)
fi
if [ "${BYTEPS_SKIP_FUZZ:-0}" != 1 ]; then
  echo "== fuzz (short run; longer runs: fuzz/README.md) =="
  bash scripts/fuzz.sh 15
fi
if [ "$rehearsal" != 0 ]; then
  echo "== the GPU rehearsal failed (exit $rehearsal): gpu-check-out/gpu-check.json and gpu-check.log say why =="
  exit 1
fi
echo "== all tests passed =="
