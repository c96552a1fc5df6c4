#!/usr/bin/env bash
# The main job: install, build, then train on one machine as a real distributed job — a
# scheduler, 2 summation servers and N workers (default 2; WORKERS=4 for four) as separate
# processes via bpsrun — on scikit-learn's digits dataset, with byteps.torch DistributedOptimizer.
# The same model is then trained with torch DistributedDataParallel (gloo) in the same run, and
# the two are printed side by side (accuracy, samples/sec). COMPRESSION=<name> (none, fp16, onebit,
# topk, randomk, dithering) compresses byteps' gradients (train_digits.py --compression; digits'
# tensors are all under the default BYTEPS_MIN_COMPRESS_BYTES of 64 KiB, so with a compressor it is 0
# unless set).
set -euo pipefail
cd "$(dirname "$0")/.."
WORKERS=${WORKERS:-2}
EPOCHS=${EPOCHS:-20}
COMPRESSION=${COMPRESSION:-none}
if [ "$COMPRESSION" != none ]; then export BYTEPS_MIN_COMPRESS_BYTES=${BYTEPS_MIN_COMPRESS_BYTES:-0}; fi
bash scripts/install-deps.sh
bash scripts/build.sh -DBYTEPS_BUILD_TESTS=OFF -DBYTEPS_BUILD_BENCH=OFF
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export OMP_NUM_THREADS=1
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
BPSRUN="/usr/bin/python3 -m byteps.launcher.bpsrun -n $WORKERS -s 2 --timeout 1200"

echo "== byteps: scheduler + 2 servers + $WORKERS workers, digits MLP, $EPOCHS epochs, compression $COMPRESSION =="
$BPSRUN -- /usr/bin/python3 examples/pytorch/train_digits.py --epochs "$EPOCHS" --compression "$COMPRESSION" 2>&1 \
  | tee "$OUT/byteps.log"
echo
echo "== torch DistributedDataParallel (gloo), same model and data, $WORKERS workers =="
$BPSRUN -- /usr/bin/python3 examples/pytorch/train_digits.py --epochs "$EPOCHS" --ddp-baseline 2>&1 \
  | tee "$OUT/ddp.log"
echo
/usr/bin/python3 - "$OUT" <<'PY'
import json, sys
def result(path):
    for line in open(path):
        if "RESULT " in line:
            return json.loads(line.split("RESULT ", 1)[1])
    sys.exit(f"no RESULT line in {path}")
b, d = result(f"{sys.argv[1]}/byteps.log"), result(f"{sys.argv[1]}/ddp.log")
print(f"{'':24}{'byteps':>12}{'torch DDP':>12}")
print(f"{'test accuracy':24}{b['accuracy']:>12.4f}{d['accuracy']:>12.4f}")
print(f"{'samples/sec (total)':24}{b['samples_per_sec']:>12.0f}{d['samples_per_sec']:>12.0f}")
print(f"{'workers':24}{b['workers']:>12}{d['workers']:>12}")
print(f"byteps / DDP throughput: {b['samples_per_sec'] / d['samples_per_sec']:.2f}x")
PY
