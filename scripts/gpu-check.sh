#!/usr/bin/env bash
# The GPU path on a machine with a GPU, in one command and at most 8 minutes on one H100: builds
# byteps with CUDA, runs the C++ CUDA/device tests and scripts/gpu_check.py's steps, and writes ONE
# JSON ($OUT/gpu-check.json: every step's status ok/failed/skipped, seconds, reason and its own
# JSON) and ONE log ($OUT/gpu-check.log). OUT defaults to gpu-check-out/.
#
# The GPU machine has no network and no Debian dev packages. Prepare the bundle here first:
#     bash scripts/gpu-bundle.sh                  # on the development machine: fills .gpu-bundle/
# then the device run carries `.gpu-bundle` with the working tree and runs
#     bash scripts/gpu-check.sh                   # there
# It needs: an NVIDIA driver and GPU, CUDA's nvcc, a C++20 compiler, python3 with torch (a CUDA
# build), pybind11, numpy and pytest, cmake (>= 3.22) and ninja (pip's do), NCCL from pip's
# nvidia-nccl wheel, and the bundle. The preflight lists every missing piece at once, with what to
# do; then every step runs on its own (a failed step skips none of the others; the steps that need
# the build say "not run: build failed"):
#   build          configure (CMAKE_PREFIX_PATH = the bundle) + the targets the steps run, all cores,
#                  no benches; then every built binary's shared libraries must load
#   device_test    build-gpu/tests/unit/device_test (cuda backend, NcclGroup)                 30 s
#   cluster_device build-gpu/tests/integration/cluster_test --gtest_filter=Device*:NcclGroup*... 30 s
#   dtypes 40 s, speed 30 s (1 worker), collectives 35 s, worker 40 s (2 workers):
#                  bpsrun -n N -s 1 --force-distributed -- python3 scripts/gpu_check.py STEP JSON;
#   copies 30 s    python3 scripts/gpu_check.py copies JSON (one process, no servers: the copy
#                  stages alone, against pinned cudaMemcpy);
#                  each writes {"ok": bool, "skipped": "reason" when the GPU path could not run}
#   bench          byteps-core bench --device cpu, then cuda (1 worker, 1 server)       2 x 15 s
#   dlpack 30 s    last (never run on a GPU yet; GPU_CHECK_DLPACK=0 leaves it out): scripts/gpu_check.py
#                  dlpack, byteps.dlpack on CuPy and JAX device arrays, 2 workers
# The build gets 180 s (GPU_CHECK_T_BUILD; a step's: GPU_CHECK_T_<STEP>): 445 s with the steps,
# and the whole run, preflight included, is held to GPU_CHECK_BUDGET_S=465 s (a step that would
# run past it is cut short, or not run and failed).
# A GPU machine where a CUDA test or a step skipped (no GPU seen, driver too old, no libnccl) FAILS,
# with the reason: a skip there means the GPU path did not run.
#
# --rehearsal (or GPU_CHECK_REHEARSAL=1): a machine without a GPU (scripts/gpu-rehearsal.sh runs
# it in CI with only the bundle visible). The same steps; the GPU ones skip with their reason and
# that counts as success here only; no overall time budget (2 cores build slowly), and every built
# binary must need nothing but the C/C++ runtime and the bundle. --preflight-only stops after the
# preflight. Other settings: PYTHON (default python3), BUILD_DIR (build-gpu), GPU_BUNDLE (.gpu-bundle),
# GPU_CHECK_TARGETS ("all" builds everything), GPU_CHECK_CMAKE_ARGS (more cmake words, last),
# GPU_CHECK_ALSO_ALLOWED (a rehearsal: a regex of more libraries the binaries may need, as
# scripts/gpu-rehearsal.sh --ci sets for the optional packages). Exit 0 only when the check passed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
REPO=$PWD
MODE=gpu
[ "${GPU_CHECK_REHEARSAL:-0}" = 1 ] && MODE=rehearsal
PREFLIGHT_ONLY=0
for arg in "$@"; do
  case $arg in
    --rehearsal) MODE=rehearsal ;;
    --preflight-only) PREFLIGHT_ONLY=1 ;;
    -h|--help) sed -n '2,/^set -uo/{/^set -uo/d;s/^# \{0,1\}//;p}' "$0"; exit 0 ;;
    *) echo "gpu-check: unknown argument '$arg' (--rehearsal, --preflight-only, --help)" >&2; exit 2 ;;
  esac
done
OUT=${OUT:-$REPO/gpu-check-out}
BUILD_DIR=${BUILD_DIR:-build-gpu}
[[ $BUILD_DIR = /* ]] || BUILD_DIR=$REPO/$BUILD_DIR
BUNDLE=${GPU_BUNDLE:-$REPO/.gpu-bundle}
WORK=$BUILD_DIR/gpu-check  # the steps' own files (embedded in the JSON); $OUT keeps two files
TARGETS=${GPU_CHECK_TARGETS:-byteps_core byteps_python_core device_test cluster_test}
mkdir -p "$OUT" "$WORK" || exit 1
LOG=$OUT/gpu-check.log
JSON=$OUT/gpu-check.json
rm -f "$WORK"/*.json "$WORK/records.jsonl" "$JSON"
RECORDS=$WORK/records.jsonl
exec > >(tee "$LOG") 2>&1
TEE_PID=$!

ms() { local t=${EPOCHREALTIME//[.,]/}; echo $((t / 1000)); }
secs_since() { local d=$(($(ms) - $1)); printf '%d.%03d' $((d / 1000)) $((d % 1000)); }
START=$(ms)
if [ "$MODE" = gpu ]; then BUDGET_S=${GPU_CHECK_BUDGET_S:-465}; else BUDGET_S=${GPU_CHECK_BUDGET_S:-0}; fi
step_t() {  # the timeout of step $1 (GPU_CHECK_T_<STEP> overrides $2)
  local var="GPU_CHECK_T_${1^^}"
  echo "${!var:-$2}"
}

# --- the tools this script itself uses --------------------------------------------------------
PY=${PYTHON:-$(command -v python3 || true)}
REPORT_PY=$PY
[ -n "$REPORT_PY" ] && "$REPORT_PY" -c "" 2>/dev/null || REPORT_PY=$(command -v python3 || true)
REPORT="$REPO/scripts/gpu_check_report.py"
record() {  # NAME STATUS SECONDS REASON [DETAIL_JSON]
  [ -n "$REPORT_PY" ] && "$REPORT_PY" "$REPORT" record "$RECORDS" "$@"
}
# A venv's cmake and ninja (pip's) sit beside its python; CUDA's nvcc in the toolkit's bin/.
[ -n "$PY" ] && PATH=$(dirname "$PY"):$PATH
for d in "${BYTEPS_CUDA_HOME:-}" /usr/local/cuda; do
  if [ -n "$d" ] && [ -x "$d/bin/nvcc" ] && ! command -v nvcc >/dev/null; then PATH=$PATH:$d/bin; fi
done

echo "== gpu-check ($MODE) in $REPO: log $LOG, JSON $JSON =="
# shellcheck source=scripts/gpu_check_preflight.sh
source "$REPO/scripts/gpu_check_preflight.sh"
preflight
if [ "$PREFLIGHT_ONLY" = 1 ] || [ -z "$REPORT_PY" ]; then
  if [ -z "$REPORT_PY" ]; then
    printf '{"mode": "%s", "ok": false, "failures": ["no python3 on this machine: nothing can run"]}\n' "$MODE" >"$JSON"
  else
    "$REPORT_PY" "$REPORT" final "$RECORDS" "$MODE" "$JSON"
  fi
  [ ${#PROBLEMS[@]} -eq 0 ]; rc=$?
  exec 1>&- 2>&-; wait "$TEE_PID"; exit $rc
fi

# run_timed NAME TIMEOUT CMD...: runs CMD within min(TIMEOUT, what the budget has left). Sets RC
# (-1: not run, the budget is spent) and SECS.
run_timed() {
  local name=$1 t=$2; shift 2
  if [ "$BUDGET_S" -gt 0 ]; then
    local left=$((BUDGET_S - ($(ms) - START) / 1000))
    [ "$left" -lt "$t" ] && t=$left
  fi
  if [ "$t" -lt 5 ]; then
    RC=-1; SECS=0
    echo "== $name: not run: the ${BUDGET_S}-second budget is spent =="
    return
  fi
  echo "== $name (at most ${t} s): $* =="
  local t0; t0=$(ms)
  if [ -n "${TEE_TO:-}" ]; then
    timeout -k 10 "$t" "$@" 2>&1 | tee "$TEE_TO"
    RC=${PIPESTATUS[0]}
  else
    timeout -k 10 "$t" "$@"
    RC=$?
  fi
  SECS=$(secs_since "$t0")
  echo "== $name: exit $RC after $SECS s =="
}
rc_reason() {  # a reason for a failed RC
  case $1 in
    -1) echo "not run: the ${BUDGET_S}-second budget was spent" ;;
    124|137) echo "timed out" ;;
    *) echo "exit code $1" ;;
  esac
}
verdict() {  # "STATUS<TAB>REASON" -> STATUS, REASON
  STATUS=${1%%$'\t'*}; REASON=${1#*$'\t'}
  [ -n "$STATUS" ] || { STATUS=failed; REASON="no verdict (gpu_check_report.py failed)"; }
}

# --- build ------------------------------------------------------------------------------------
BUILT=0
build_step() {
  local args=(-S "$REPO" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPython3_EXECUTABLE="$PY"
              -DBYTEPS_BUILD_BENCH=OFF)
  [ -n "$NINJA" ] && args+=(-DCMAKE_MAKE_PROGRAM="$NINJA")
  [ -n "$PYBIND_DIR" ] && args+=(-Dpybind11_DIR="$PYBIND_DIR")
  if [ "$USE_BUNDLE" = 1 ]; then
    args+=(-DCMAKE_PREFIX_PATH="$BUNDLE/prefix/usr" -DOPENSSL_ROOT_DIR="$BUNDLE/prefix/usr" -DOPENSSL_USE_STATIC_LIBS=ON)
  fi
  # shellcheck disable=SC2206  # GPU_CHECK_CMAKE_ARGS: extra words for cmake, last so they win
  args+=(${GPU_CHECK_CMAKE_ARGS:-})
  local t0 t; t0=$(ms); t=$(step_t build 180)
  [ "$MODE" = rehearsal ] && t=$(step_t build 3600)
  # A fresh cache: nothing found in an earlier configure (elsewhere, or before the bundle) is kept.
  # The module and byteps-core land in python/byteps/, where every build tree writes them: another
  # tree's (newer than these sources) would pass for this one's, so they are linked again.
  rm -f "$BUILD_DIR/CMakeCache.txt" "$REPO/python/byteps/_core$(ext_suffix)" "$REPO/python/byteps/_bin/byteps-core"
  TEE_TO=$WORK/configure.txt run_timed configure "$t" cmake "${args[@]}"
  local crc=$RC
  if [ "$crc" -eq 0 ]; then
    local left=$((t - ($(ms) - t0) / 1000))
    local targets=(); [ "$TARGETS" = all ] || for x in $TARGETS; do targets+=(--target "$x"); done
    run_timed build "$left" cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
  fi
  local secs; secs=$(secs_since "$t0")
  local summary; summary=$(sed -n 's/.*\(byteps: this build has: .*\)/\1/p' "$WORK/configure.txt" 2>/dev/null | tail -1)
  if [ "$crc" -ne 0 ]; then
    record build failed "$secs" "configure: $(rc_reason "$crc") (a missing package is named in the log above)"; return
  fi
  if [ "$RC" -ne 0 ]; then record build failed "$secs" "compile: $(rc_reason "$RC") ($summary)"; return; fi
  BUILT=1
  local why=""
  if [ "$MODE" = gpu ] && [[ $summary == *"no CUDA"* ]]; then why="CMake found no CUDA toolkit; "; fi
  if [ "$MODE" = gpu ] && [[ $summary == *"no GPU groups"* ]]; then why+="no GPU groups (NCCL); "; fi
  local libs; libs=$(check_libraries) || why+="$libs; "
  if [ -n "$why" ]; then record build failed "$secs" "${why%; } ($summary)"; else record build ok "$secs" "$summary"; fi
}
# Every built binary's shared libraries load; in a rehearsal, only the C/C++ runtime and the
# bundle's libfmt may be needed (what the GPU machine has).
ext_suffix() { "$PY" -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null; }
check_libraries() {
  local bad="" f
  for f in "$REPO/python/byteps/_core$(ext_suffix)" "$REPO/python/byteps/_bin/byteps-core" \
           "$BUILD_DIR/tests/unit/device_test" "$BUILD_DIR/tests/integration/cluster_test"; do
    [ -e "$f" ] || { bad+="${f#"$REPO"/} was not built, "; continue; }
    while read -r lib _ path _; do
      if [ "$path" = not ]; then bad+="${f##*/} needs $lib, which is not found, "
      elif [ "$MODE" = rehearsal ] && ! [[ $lib =~ ^(linux-vdso|ld-linux-x86-64|libc|libm|libstdc\+\+|libgcc_s|libpthread|libdl|librt)\.so ]] \
           && ! [[ $path == "$BUNDLE"/* ]] && ! [[ $lib =~ ^(${GPU_CHECK_ALSO_ALLOWED:-^})\.so ]]; then
        bad+="${f##*/} needs $lib ($path), which the GPU machine lacks, "
      fi
    done < <(ldd "$f" 2>&1 | grep "=>")
  done
  [ -z "$bad" ] || { echo "${bad%, }" | cut -c1-600; return 1; }
}

# --- C++ tests --------------------------------------------------------------------------------
gtest_step() {  # NAME TIMEOUT BINARY [ARGS...]
  local name=$1 t=$2 bin=$3; shift 3
  if [ "$BUILT" != 1 ]; then record "$name" failed 0 "not run: build failed"; return; fi
  rm -f "$WORK/$name.gtest.json"
  TEE_TO=$WORK/$name.out run_timed "$name" "$(step_t "$name" "$t")" "$bin" --gtest_output="json:$WORK/$name.gtest.json" "$@"
  if [ "$RC" -eq -1 ]; then record "$name" failed 0 "$(rc_reason -1)"; return; fi
  verdict "$("$REPORT_PY" "$REPORT" gtest "$MODE" "$WORK/$name.gtest.json" "$WORK/$name.out" "$WORK/$name.json")"
  if [ "$RC" -ne 0 ]; then STATUS=failed; REASON="$(rc_reason "$RC"): $REASON"; fi
  record "$name" "$STATUS" "$SECS" "$REASON" "$WORK/$name.json"
}

# --- scripts/gpu_check.py's steps ---------------------------------------------------------------
export PYTHONPATH=$REPO/python${PYTHONPATH:+:$PYTHONPATH}
py_step() {  # STEP WORKERS TIMEOUT (0 workers: the script alone, a one-process job)
  local step=$1 n=$2 t; t=$(step_t "$1" "$3")
  if [ "$BUILT" != 1 ]; then record "$step" failed 0 "not run: build failed"; return; fi
  rm -f "$WORK/$step.json"
  if [ "$n" -eq 0 ]; then  # a job of one process, no servers: its CUDA push_pull is the copy stages alone
    run_timed "$step" "$t" "$PY" "$REPO/scripts/gpu_check.py" "$step" "$WORK/$step.json"
  else
    run_timed "$step" "$t" "$PY" -m byteps.launcher.bpsrun -n "$n" -s 1 --force-distributed --timeout "$((t - 5))" \
      -- "$PY" "$REPO/scripts/gpu_check.py" "$step" "$WORK/$step.json"
  fi
  if [ "$RC" -eq -1 ]; then record "$step" failed 0 "$(rc_reason -1)"; return; fi
  verdict "$("$REPORT_PY" "$REPORT" pystep "$WORK/$step.json" "$RC")"
  record "$step" "$STATUS" "$SECS" "$REASON" "$WORK/$step.json"
}

# --- byteps-core bench: CUDA tensors against host tensors on loopback ----------------------------
bench_step() {
  if [ "$BUILT" != 1 ]; then record bench failed 0 "not run: build failed"; return; fi
  local dev t; t=$(step_t bench 15)
  local t0; t0=$(ms)
  for dev in cpu cuda; do
    rm -f "$WORK/bench-$dev.json"
    if [ "$dev" = cuda ] && [ "$GPUS" -eq 0 ]; then echo "== bench cuda: no GPU here =="; continue; fi
    run_timed "bench-$dev" "$t" "$PY" -m byteps.launcher.bpsrun -n 1 -s 1 --force-distributed --timeout "$((t - 3))" \
      -- "$REPO/python/byteps/_bin/byteps-core" bench --min-bytes 4M --max-bytes 64M --step-factor 4 --iters 10 \
      --device "$dev" --json "$WORK/bench-$dev.json"
    if [ "$RC" -eq -1 ]; then record bench failed "$(secs_since "$t0")" "$(rc_reason -1)"; return; fi
  done
  verdict "$("$REPORT_PY" "$REPORT" bench "$WORK/bench-cpu.json" "$WORK/bench-cuda.json" "$WORK/bench.json" "$GPUS")"
  record bench "$STATUS" "$(secs_since "$t0")" "$REASON" "$WORK/bench.json"
}

build_step
gtest_step device_test 30 "$BUILD_DIR/tests/unit/device_test"
gtest_step cluster_device 30 "$BUILD_DIR/tests/integration/cluster_test" --gtest_filter='Device*:NcclGroup*:*Cuda*:*Nccl*'
py_step dtypes 1 40
py_step speed 1 30
py_step copies 0 30
py_step collectives 2 35
py_step worker 2 40
bench_step
# byteps.dlpack on CuPy / JAX device arrays: NEVER RUN ON A GPU YET. Last, so that it cannot take
# time from the steps above (its 30 s are beyond what they count on: where the budget is spent it
# is not run, and says so); GPU_CHECK_DLPACK=0 leaves it out.
if [ "${GPU_CHECK_DLPACK:-1}" != 0 ]; then py_step dlpack 2 30; fi

echo "== the check took $(secs_since "$START") s =="
"$REPORT_PY" "$REPORT" final "$RECORDS" "$MODE" "$JSON"
rc=$?
echo "== $JSON, $LOG =="
exec 1>&- 2>&-
wait "$TEE_PID"
exit $rc
