#!/usr/bin/env bash
# Builds the libFuzzer targets (fuzz/) into build-fuzz/ with clang, coverage instrumentation and
# ASan+UBSan, replays the saved crash reproducers (fuzz/regressions/<target>/), then fuzzes each
# target for N seconds on a scratch copy of its seed corpus (the repository's corpus is never
# written). Prints executions, exec/s and crashes per target; exits non-zero if any target crashed.
#
#   bash scripts/fuzz.sh [seconds_per_target] [target...]      (default 60 s; all targets)
#
# Environment: FUZZ_BUILD_JOBS (parallel compile jobs, default nproc), FUZZ_ARGS (extra libFuzzer
# flags, e.g. "-jobs=2 -workers=2"), BUILD_DIR (default build-fuzz). Findings and the grown corpus
# stay in $BUILD_DIR/run/<target>/ (see fuzz/README.md for minimizing a crash).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(fuzz_frame fuzz_server fuzz_stream fuzz_shm_ring fuzz_codec)
  pkg-config --exists ucx 2>/dev/null && TARGETS+=(fuzz_ucx_header)  # built only with UCX
fi
BUILD_DIR=${BUILD_DIR:-build-fuzz}

echo "== build ($BUILD_DIR) =="
build_start=$(date +%s)
CC=clang CXX=clang++ cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DBYTEPS_FUZZ=ON -DBYTEPS_SANITIZE=fuzzer-no-link,address,undefined \
  -DBYTEPS_BUILD_TESTS=OFF -DBYTEPS_BUILD_BENCH=OFF -DBYTEPS_BUILD_PYTHON=OFF \
  > "$BUILD_DIR.configure.log" 2>&1 || { cat "$BUILD_DIR.configure.log"; exit 1; }
cmake --build "$BUILD_DIR" -j "${FUZZ_BUILD_JOBS:-$(nproc)}" --target "${TARGETS[@]}"
echo "build took $(( $(date +%s) - build_start )) s"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}

max_len() {
  case "$1" in
    fuzz_stream) echo 40000 ;;  # room for the 36 KiB seed that takes the direct-receive path
    fuzz_server) echo 8192 ;;
    *) echo 4096 ;;
  esac
}

failed=0
summary=()
for t in "${TARGETS[@]}"; do
  bin=$root/$BUILD_DIR/fuzz/$t
  run=$root/$BUILD_DIR/run/$t
  rm -rf "$run"
  mkdir -p "$run/corpus" "$run/artifacts"
  cp fuzz/corpus/"$t"/* "$run/corpus/"

  crashes=0
  if compgen -G "fuzz/regressions/$t/*" > /dev/null; then
    echo "== $t: replaying fuzz/regressions/$t =="
    if ! "$bin" -runs=1 fuzz/regressions/"$t"/* > "$run/regressions.txt" 2>&1; then
      tail -n 40 "$run/regressions.txt"
      echo "$t: a saved reproducer crashes again (log: $run/regressions.txt)"
      crashes=$((crashes + 1))
    fi
  fi

  echo "== $t: fuzzing for $SECONDS_PER_TARGET s =="
  status=0
  # shellcheck disable=SC2086  # FUZZ_ARGS is a list of flags
  (cd "$run" && "$bin" -max_total_time="$SECONDS_PER_TARGET" -timeout=30 -max_len="$(max_len "$t")" \
      -dict="$root/fuzz/byteps.dict" -artifact_prefix="$run/artifacts/" -print_final_stats=1 \
      ${FUZZ_ARGS:-} corpus > "$run/fuzz.log" 2>&1) || status=$?
  # With -jobs the output goes to fuzz-<n>.log files in $run.
  execs=$(cat "$run"/*.log | sed -n 's/^stat::number_of_executed_units: *//p' | awk '{s += $1} END {print s + 0}')
  rate=$(cat "$run"/*.log | sed -n 's/^stat::average_exec_per_sec: *//p' | awk '{s += $1} END {print s + 0}')
  found=$(find "$run/artifacts" -type f | wc -l)
  crashes=$((crashes + found))
  if [ "$status" -ne 0 ] || [ "$crashes" -ne 0 ]; then
    failed=1
    grep -h -A 30 -m 1 'ERROR: \|runtime error\|invariant violated\|deadly signal' "$run"/*.log | head -n 60 || true
    find "$run/artifacts" -type f -printf '  reproducer: %p\n'
  fi
  summary+=("$(printf '%-12s %12s execs  %8s exec/s  %3s crashes  corpus %s -> %s' "$t" "$execs" "$rate" \
    "$crashes" "$(ls fuzz/corpus/"$t" | wc -l)" "$(ls "$run/corpus" | wc -l)")")
done

echo "== summary (${SECONDS_PER_TARGET} s per target) =="
printf '%s\n' "${summary[@]}"
exit $failed
