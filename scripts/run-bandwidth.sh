#!/usr/bin/env bash
# The core's own demo: push_pull bandwidth from 4 B to 256 MiB (2 workers, 2 servers, separate
# processes on loopback) next to a plain TCP stream measured in the same run.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh -DBYTEPS_BUILD_TESTS=OFF -DBYTEPS_BUILD_BENCH=OFF
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
echo "== plain TCP over loopback (the ceiling on this machine) =="
python/byteps/_bin/byteps-core bench --raw-tcp --raw-seconds 2 | grep -v '^JSON'
echo "== byteps push_pull: 2 workers, 2 servers, 4 B .. 256 MiB float32 =="
/usr/bin/python3 -m byteps.launcher.bpsrun -n 2 -s 2 --timeout 600 -- \
  python/byteps/_bin/byteps-core bench --min-bytes 4 --max-bytes 256M --step-factor 4
