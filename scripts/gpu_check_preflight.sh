# shellcheck shell=bash
# The preflight of scripts/gpu-check.sh (sourced by it): every piece the check needs, each missing
# one listed at once with what to do, before anything runs. Sets NINJA, PYBIND_DIR, USE_BUNDLE and
# GPUS for the steps; records each problem ("preflight" failed) and the machine.
# In a rehearsal, what only a GPU machine has (a GPU, its driver, torch's CUDA, libnccl) is a note.

PROBLEMS=()
NOTES=()
problem() { PROBLEMS+=("$1"); }
gpu_problem() {
  if [ "$MODE" = gpu ]; then PROBLEMS+=("$1"); else NOTES+=("$1 (a rehearsal: the GPU steps skip)"); fi
}
pyq() { [ -n "$PY" ] && timeout 20 "$PY" -c "$1" 2>/dev/null; }  # a python one-liner's output

# Which of the build's packages the bundle holds: a key file each (scripts/gpu-bundle.sh unpacks them).
BUNDLE_FILES=(
  "fmt (libfmt-dev):lib/x86_64-linux-gnu/cmake/fmt/fmt-config.cmake:fmt/format.h"
  "nlohmann-json (nlohmann-json3-dev):share/cmake/nlohmann_json/nlohmann_jsonConfig.cmake:nlohmann/json.hpp"
  "CLI11 (libcli11-dev):share/cmake/CLI11/CLI11Config.cmake:CLI/CLI.hpp"
  "OpenSSL (libssl-dev):lib/x86_64-linux-gnu/libcrypto.a:openssl/hmac.h"
  "GTest (libgtest-dev):lib/x86_64-linux-gnu/cmake/GTest/GTestConfig.cmake:gtest/gtest.h"
  "GMock (libgmock-dev):lib/x86_64-linux-gnu/libgmock.a:gmock/gmock.h"
)

preflight() {
  echo "== preflight =="
  local cxx cc v
  # A C++20 compiler (and a C one: the project's languages are C and CXX).
  cxx=${CXX:-$(command -v c++ || command -v g++ || true)}
  cc=${CC:-$(command -v cc || command -v gcc || true)}
  if [ -z "$cxx" ] || ! printf '#include <span>\n#include <bit>\n#include <concepts>\n#if __cplusplus < 202002L\n#error not C++20\n#endif\nint main() { return std::popcount(1u) - 1; }\n' \
       | "$cxx" -std=c++20 -x c++ - -o /dev/null 2>/dev/null; then
    problem "C++20 compiler: none that compiles C++20 (${cxx:-no c++/g++ on PATH}): the image needs g++ >= 11 (or set CXX)"
  fi
  [ -n "$cc" ] || problem "C compiler: no cc/gcc on PATH: the image needs gcc (or set CC)"
  # cmake >= 3.22 (pip's cmake sits beside the venv's python, already on PATH).
  v=$(cmake --version 2>/dev/null | head -1 | grep -o '[0-9][0-9.]*' | head -1)
  if [ -z "$v" ]; then problem "cmake: not on PATH: pip install cmake in the python's environment (or put its bin/ on PATH)"
  elif ! printf '%s\n' 3.22 "$v" | sort -VC; then problem "cmake $v: older than the 3.22 CMakeLists.txt asks for: pip install -U cmake"
  fi
  # ninja: the machine's (pip's), else the bundle's fallback.
  NINJA=$(command -v ninja || true)
  if [ -z "$NINJA" ] && [ -x "$BUNDLE/prefix/usr/bin/ninja" ] && "$BUNDLE/prefix/usr/bin/ninja" --version >/dev/null 2>&1; then
    NINJA=$BUNDLE/prefix/usr/bin/ninja
    NOTES+=("ninja: none on PATH; the bundle's ($NINJA)")
  fi
  [ -n "$NINJA" ] || problem "ninja: not on PATH and no bundle: pip install ninja, or run scripts/gpu-bundle.sh here and carry .gpu-bundle"
  # CUDA's compiler (CMake's FindCUDAToolkit starts from nvcc).
  local nvcc_v=""
  if command -v nvcc >/dev/null; then nvcc_v=$(nvcc --version | grep -o 'release [0-9.]*' | cut -d' ' -f2)
  else problem "nvcc: not on PATH, /usr/local/cuda/bin or \$BYTEPS_CUDA_HOME/bin: the CUDA toolkit is needed to build the cuda backend"
  fi
  # The GPU and its driver: the static CUDA runtime needs a driver for the toolkit's CUDA version.
  GPUS=0
  local smi="" driver="" driver_cuda=""
  if ! command -v nvidia-smi >/dev/null; then
    gpu_problem "GPU: nvidia-smi is not on PATH: no NVIDIA driver here"
  elif smi=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1); then
    GPUS=$(grep -c . <<<"$smi")
    driver=$(head -1 <<<"$smi" | cut -d, -f2 | tr -d ' ')
    driver_cuda=$(timeout 30 nvidia-smi 2>/dev/null | grep -o 'CUDA Version: [0-9.]*' | cut -d' ' -f3)
    if [ -n "$nvcc_v" ] && [ -n "$driver_cuda" ] && ! printf '%s\n' "$nvcc_v" "$driver_cuda" | sort -VC; then
      gpu_problem "driver $driver runs CUDA up to $driver_cuda, the toolkit is $nvcc_v: every CUDA call would fail (the runtime is linked statically); use a toolkit <= $driver_cuda (BYTEPS_CUDA_HOME) or a newer driver"
    fi
  else
    gpu_problem "GPU: nvidia-smi failed (${smi%%$'\n'*}): no usable NVIDIA driver or GPU"
    smi=""
  fi
  [ "$GPUS" -gt 0 ] 2>/dev/null || GPUS=0
  # python with Python.h (for the module), torch with CUDA, pybind11, numpy, pytest.
  local pyv torch
  pyv=$(pyq "import sys, sysconfig, os; h = os.path.join(sysconfig.get_paths()['include'], 'Python.h'); print(sys.version.split()[0], os.path.exists(h))")
  if [ -z "$pyv" ]; then problem "python3: ${PY:-none on PATH} does not run: set PYTHON to the python that has torch"
  else
    [[ $pyv == *True ]] || problem "Python.h: missing for $PY (${pyv% *}): the module cannot be built; the image needs python3-dev (or a venv made from a python that has its headers)"
    torch=$(pyq "import torch; print(torch.__version__, torch.version.cuda, torch.cuda.is_available(), torch.cuda.device_count())")
    if [ -z "$torch" ]; then problem "torch: $PY cannot import it: pip install torch (a CUDA build)"
    else
      read -r TORCH_V TORCH_CUDA TORCH_GPU _ <<<"$torch"
      if [ "$TORCH_CUDA" = None ]; then gpu_problem "torch $TORCH_V is a CPU build: install a CUDA build (cu130)"
      elif [ "$TORCH_GPU" != True ]; then gpu_problem "torch $TORCH_V (CUDA $TORCH_CUDA) sees no GPU"
      fi
    fi
    local m
    for m in numpy pytest; do pyq "import $m" >/dev/null || problem "$m: $PY cannot import it: pip install $m"; done
    PYBIND_DIR=$(pyq "import pybind11; print(pybind11.get_cmake_dir())")
    if [ -z "$PYBIND_DIR" ]; then
      if [ -f "$BUNDLE/prefix/usr/lib/cmake/pybind11/pybind11Config.cmake" ]; then
        NOTES+=("pybind11: $PY has none; the bundle's Debian pybind11 (fallback)")
      else
        problem "pybind11: $PY cannot import it and the bundle has none: pip install pybind11"
      fi
    fi
  fi
  # The build's packages: from the bundle, else the system's (a development machine).
  USE_BUNDLE=0
  [ -f "$BUNDLE/manifest.txt" ] && USE_BUNDLE=1
  local entry what file header missing=()
  for entry in "${BUNDLE_FILES[@]}"; do
    IFS=: read -r what file header <<<"$entry"
    if [ "$USE_BUNDLE" = 1 ]; then
      [ -e "$BUNDLE/prefix/usr/$file" ] || missing+=("$what")
    elif [ -z "$cxx" ] || ! echo "#include <$header>" | "$cxx" -std=c++20 -fsyntax-only -x c++ - 2>/dev/null; then
      missing+=("$what")
    fi
  done
  if [ ${#missing[@]} -gt 0 ]; then
    local where="the system has no"; [ "$USE_BUNDLE" = 1 ] && where="the bundle $BUNDLE lacks"
    problem "build packages: $where $(printf '%s, ' "${missing[@]}" | sed 's/, $//'): run 'bash scripts/gpu-bundle.sh' on the development machine and carry .gpu-bundle with the working tree"
  fi
  # NCCL: nccl.h to build the group backend, libnccl.so.2 to run it (pip's nvidia-nccl wheel).
  local nccl
  nccl=$(pyq "import importlib.util as u; s = u.find_spec('nvidia.nccl'); print(list(s.submodule_search_locations)[0] if s else '')")
  local roots=("${BYTEPS_NCCL_HOME:-}" "${NCCL_HOME:-}" "$nccl" "$(dirname "$(dirname "$(command -v nvcc || echo /x/x)")")")
  local r have_h="" have_lib=""
  for r in "${roots[@]}"; do
    [ -n "$r" ] || continue
    [ -z "$have_h" ] && [ -f "$r/include/nccl.h" ] && have_h=$r/include/nccl.h
    [ -z "$have_lib" ] && have_lib=$(ls "$r"/lib*/libnccl.so.2 2>/dev/null | head -1)
  done
  [ -n "$have_lib" ] || have_lib=$(ldconfig -p 2>/dev/null | grep -o '/.*libnccl\.so\.2$' | head -1)
  [ -n "$have_h" ] || gpu_problem "nccl.h: not in BYTEPS_NCCL_HOME, NCCL_HOME, pip's nvidia/nccl or CUDA's include/: no GPU groups would be built: pip install nvidia-nccl-cu13"
  [ -n "$have_lib" ] || gpu_problem "libnccl.so.2: not found (pip's nvidia/nccl/lib, CUDA's lib, ldconfig): GPU groups cannot start: pip install nvidia-nccl-cu13"

  local p n
  for n in "${NOTES[@]}"; do echo "  note     $n"; done
  if [ ${#PROBLEMS[@]} -eq 0 ]; then echo "  nothing missing"
  else
    echo "  ${#PROBLEMS[@]} missing:"
    for p in "${PROBLEMS[@]}"; do echo "  MISSING  $p"; record preflight failed 0 "$p"; done
  fi
  for n in "${NOTES[@]}"; do record preflight note 0 "$n"; done

  local os glibc
  os=$(. /etc/os-release 2>/dev/null && echo "$PRETTY_NAME")
  glibc=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9.]*$')
  echo "  machine: $os, glibc $glibc, $(nproc) cores; GPUs: ${smi:-none}; driver CUDA ${driver_cuda:-none}; nvcc ${nvcc_v:-none}"
  echo "  ${cxx:+$("$cxx" --version 2>/dev/null | head -1)}${cxx:-no C++ compiler}; cmake ${v:-none}; python ${pyv% *}; torch ${torch:-none}; pybind11 ${PYBIND_DIR:-bundle}"
  echo "  bundle: $([ "$USE_BUNDLE" = 1 ] && echo "$BUNDLE" || echo "none (the system's packages)"); nccl.h ${have_h:-none}; libnccl ${have_lib:-none}"
  [ -z "$REPORT_PY" ] && return
  local mj="$WORK/machine.json"
  M_OS=$os M_GLIBC=$glibc M_CXX="$("$cxx" --version 2>/dev/null | head -1)" M_CMAKE=$v M_NVCC=$nvcc_v M_DRIVER=$driver \
  M_DRIVER_CUDA=$driver_cuda M_GPUS=$smi M_PY=${pyv% *} M_TORCH=${torch:-} M_PYBIND=${PYBIND_DIR:-} M_NCCL_H=$have_h \
  M_NCCL_LIB=$have_lib M_BUNDLE=$([ "$USE_BUNDLE" = 1 ] && grep -v '^#' "$BUNDLE/manifest.txt" | cut -d' ' -f1,2 | paste -sd, -) \
  M_CORES=$(nproc) "$REPORT_PY" -c "import json, os, sys
json.dump({k[2:].lower(): v for k, v in os.environ.items() if k.startswith('M_')}, open(sys.argv[1], 'w'), indent=1)" "$mj"
  record machine ok 0 "" "$mj"
}
