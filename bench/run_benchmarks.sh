#!/usr/bin/env bash
# Runs every core benchmark of docs/benchmarks.md in one go, on this machine, and prints the
# figures (medians) next to their same-run baselines. Results (JSON) go to ${OUT:-bench-results}/.
#   bash bench/run_benchmarks.sh            # all
#   ONLY=loopback bash bench/run_benchmarks.sh   # one of: loopback reducer small gloo torch checksum
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-bench-results}
mkdir -p "$OUT"
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
CORE=python/byteps/_bin/byteps-core
BPSRUN="/usr/bin/python3 -m byteps.launcher.bpsrun --timeout 900"
[ -x "$CORE" ] || bash scripts/build.sh
want() { [ -z "${ONLY:-}" ] || [ "$ONLY" = "$1" ]; }
jline() { grep '^\[worker:0\] JSON \|^JSON ' | sed 's/^\[worker:0\] //; s/^JSON //' ; }

if want loopback; then
  echo "== 1 worker + 1 server, 64 MiB float32 push_pull vs plain TCP (same run) =="
  $CORE bench --raw-tcp --raw-seconds 3 --json "$OUT/raw_tcp.json" | grep -v '^JSON'
  $BPSRUN -n 1 -s 1 --force-distributed -- $CORE bench --min-bytes 64M --max-bytes 64M --iters 20 \
    --json "$OUT/loopback_64M.json" 2>&1 | grep -v 'JSON\|bpsrun:'
  /usr/bin/python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
raw = json.load(open(f"{out}/raw_tcp.json"))
bps = json.load(open(f"{out}/loopback_64M.json"))["rows"][0]["algbw_GBps"]
print(f"push_pull algbw {bps:.3f} GB/s = {bps / raw['stream_GBps']:.0%} of the one-way TCP stream "
      f"({raw['stream_GBps']:.3f}), {bps / raw['echo_GBps']:.0%} of the TCP echo ({raw['echo_GBps']:.3f})")
PY
fi

if want reducer; then
  echo "== server reducer (Google Benchmark) =="
  [ -x build/bench/reducer_bench ] || bash scripts/build.sh
  build/bench/reducer_bench --benchmark_min_time=0.3 --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true --benchmark_filter='Memcpy|SumInto' \
    --benchmark_out="$OUT/reducer.json" --benchmark_out_format=json 2>/dev/null | grep -E 'median|^Benchmark|---' || true
fi

if want small; then
  echo "== 1,000 tensors of 4 KiB per iteration (per-tensor overhead) =="
  for nw in 1 2; do
    $BPSRUN -n $nw -s $nw --force-distributed -- $CORE bench --tensors 1000 --tensor-bytes 4096 --iters 30 \
      --json "$OUT/small_${nw}w.json" 2>&1 | grep -E 'per_tensor_us|# '
  done
fi

if want gloo; then
  echo "== n=4 workers, k=4 servers, 100 MB float32: byteps push_pull vs torch.distributed gloo all_reduce =="
  $BPSRUN -n 4 -s 4 -- $CORE bench --min-bytes 100000000 --max-bytes 100000000 --iters 5 \
    --json "$OUT/ps_4x4_100MB.json" 2>&1 | grep -v 'JSON\|bpsrun:'
  if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    /usr/bin/python3 bench/gloo_allreduce.py -n 4 --bytes 100000000 --iters 5 | tee "$OUT/gloo_4.txt" | grep -v '^JSON'
    /usr/bin/python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
ps = json.load(open(f"{out}/ps_4x4_100MB.json"))["rows"][0]["time_us_median"] / 1e6
g = float(re.search(r"median_s=([0-9.]+)", open(f"{out}/gloo_4.txt").read()).group(1))
print(f"byteps {ps:.3f} s vs gloo {g:.3f} s: byteps/gloo speed ratio {g / ps:.2f}x")
PY
  else
    echo "(python3-torch not installed: apt-get install python3-torch for the gloo baseline)"
  fi
fi

if want torch; then
  echo "== PyTorch synthetic benchmark: resnet18, 2 workers + 2 servers, byteps vs torch DDP (gloo) =="
  ARGS="--model resnet18 --batch-size 16 --image-size 64 --num-iters 5 --num-batches-per-iter 3 --num-classes 100"
  export OMP_NUM_THREADS=1
  $BPSRUN -n 2 -s 2 -- /usr/bin/python3 examples/pytorch/benchmark_byteps.py $ARGS 2>&1 \
    | tee "$OUT/torch_byteps.txt" | grep -E 'Img/sec|comm|RESULT' || true
  $BPSRUN -n 2 -s 2 -- /usr/bin/python3 examples/pytorch/benchmark_byteps.py $ARGS --ddp-baseline 2>&1 \
    | tee "$OUT/torch_ddp.txt" | grep -E 'Img/sec|comm|RESULT' || true
  /usr/bin/python3 - "$OUT" <<'PY'
import json, sys
def result(p):
    for line in open(p):
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
b, d = result(f"{sys.argv[1]}/torch_byteps.txt"), result(f"{sys.argv[1]}/torch_ddp.txt")
print(f"byteps {b['img_per_sec']:.1f} img/s vs DDP {d['img_per_sec']:.1f} img/s: {b['img_per_sec'] / d['img_per_sec']:.2f}x; "
      f"byteps comm wait {b.get('comm_wait_s_per_iter', float('nan')) * 1000:.1f} ms/iter")
PY
fi

if want checksum; then
  echo "== cost of BYTEPS_CHECKSUM=1 (CRC-32C on every frame): 1 worker + 1 server, off/on alternated 3x =="
  for i in 1 2 3; do
    for c in 0 1; do
      BYTEPS_CHECKSUM=$c $BPSRUN -n 1 -s 1 --force-distributed -- $CORE bench --min-bytes 4M --max-bytes 64M \
        --iters 10 --json "$OUT/checksum_${c}_$i.json" > /dev/null 2>&1
    done
  done
  /usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
rows = {c: [json.load(open(f"{out}/checksum_{c}_{i}.json"))["rows"] for i in (1, 2, 3)] for c in (0, 1)}
print(f"{'bytes':>12} {'off GB/s':>9} {'on GB/s':>9} {'on/off':>7}")
for k, row in enumerate(rows[0][0]):
    off = statistics.median(r[k]["algbw_GBps"] for r in rows[0])
    on = statistics.median(r[k]["algbw_GBps"] for r in rows[1])
    print(f"{row['bytes']:>12} {off:>9.3f} {on:>9.3f} {on / off:>7.2f}")
PY
fi
