#!/usr/bin/env bash
# The GPU path on a machine with a GPU, in one go (well under 10 minutes): builds byteps with CUDA,
# runs the CUDA unit tests and the device integration tests, then scripts/gpu_check.py: CUDA vs CPU
# push_pull in one process (every dtype and size class, in and out of place, average), its time
# against the CPU path's and pinned-copy bandwidth, and 2 worker processes sharing the GPU (exact
# sums, DistributedOptimizer on CUDA against single-process training). Writes $OUT (or
# gpu-check-out/) gpu-check.log and gpu-check.json. No network: nothing is installed here; what is
# missing is reported.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
LOG=$OUT/gpu-check.log
JSON=$OUT/gpu-check.json
PY=${PYTHON:-$(command -v python3)}
exec > >(tee "$LOG") 2>&1
status=0
step() { echo "== $* =="; }
record() { "$PY" - "$JSON" "$1" "$2" <<'PYEOF'
import json, os, sys
path, key, value = sys.argv[1:4]
data = json.load(open(path)) if os.path.exists(path) else {}
try:
    data[key] = json.loads(value)
except ValueError:
    data[key] = value
json.dump(data, open(path, "w"), indent=1)
PYEOF
}

step "machine"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || status=1
nvcc --version | tail -1
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available())"
record machine "\"$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)\""

step "build (CUDA)"
PYBIND=$("$PY" -c "import pybind11; print(pybind11.get_cmake_dir())" 2>/dev/null || true)
if BUILD_DIR=build-gpu bash scripts/build.sh -DPython3_EXECUTABLE="$PY" -DBYTEPS_BUILD_BENCH=OFF \
     ${PYBIND:+-Dpybind11_DIR=$PYBIND}; then
  grep -o "byteps: CUDA.*" build-gpu.configure.log || { echo "CUDA not found by CMake"; status=1; }
  record build ok
else
  echo "build failed (missing packages are named above: this machine has no network to install them)"
  record build failed
  exit 1
fi
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}

step "CUDA unit tests and the device integration tests"
if build-gpu/tests/unit/device_test && build-gpu/tests/integration/cluster_test --gtest_filter='Device*'; then
  record unit_tests ok
else
  record unit_tests failed; status=1
fi

step "one process: CUDA push_pull vs the CPU path, times, copy bandwidth"
if timeout 300 "$PY" -m byteps.launcher.bpsrun -n 1 -s 1 -- "$PY" scripts/gpu_check.py single "$OUT/single.json"; then
  record single "$(cat "$OUT/single.json")"
else
  record single failed; status=1
fi

step "byteps bench on loopback: CUDA tensors against CPU tensors (1 worker, 1 server)"
for dev in cpu cuda; do
  if timeout 240 "$PY" -m byteps.launcher.bpsrun -n 1 -s 1 --force-distributed -- python/byteps/_bin/byteps-core \
       bench --min-bytes 4M --max-bytes 256M --step-factor 4 --iters 20 --device $dev --json "$OUT/bench-$dev.json"; then
    record "bench_$dev" "$(cat "$OUT/bench-$dev.json")"
  else
    record "bench_$dev" failed; status=1
  fi
done

step "two workers sharing the GPU, CPU servers"
if timeout 300 "$PY" -m byteps.launcher.bpsrun -n 2 -s 1 -- "$PY" scripts/gpu_check.py worker; then
  record two_workers ok
else
  record two_workers failed; status=1
fi

step "done (status $status): $LOG, $JSON"
exit $status
