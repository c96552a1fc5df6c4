# One worker of bench/reducescatter/run.py: times hvd.reducescatter (each worker pulls only its
# rows from the servers) against hvd.allreduce of the same tensor followed by this worker's rows
# (what byteps' reducescatter did before it pulled only its share), alternating, in one job.
import json
import statistics
import sys
import time

import torch

import byteps.torch as hvd

MIB, ROUNDS, REPS = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
hvd.init()
r, n = hvd.rank(), hvd.size()
rows = MIB * 1024 * 256 // 64  # float32 rows of 64 elements: MIB MiB in all
x = torch.full((rows, 64), float(r + 1))
off, count = rows // n * r + min(r, rows % n), rows // n + (1 if r < rows % n else 0)
want = torch.full((count, 64), float(n * (n + 1) // 2))


def scatter():
    return hvd.reducescatter(x, name="rs", op=hvd.Sum)


def allreduce_rows():
    return hvd.allreduce(x, name="ar", op=hvd.Sum)[off:off + count]


times = {"reducescatter": [], "allreduce+rows": []}
for f in (scatter, allreduce_rows):  # warm-up: names, keys, the online tuner
    for _ in range(3):
        f()
for i in range(ROUNDS):
    for name, f in (("reducescatter", scatter), ("allreduce+rows", allreduce_rows))[:: 1 if i % 2 == 0 else -1]:
        samples = []
        for _ in range(REPS):
            hvd.barrier()
            t0 = time.perf_counter()
            got = f()
            samples.append(time.perf_counter() - t0)
            if not torch.equal(got, want):
                print(f"WRONG {name}", flush=True)
                sys.exit(1)
        times[name].append(statistics.median(samples))
print("RESULT " + json.dumps({"rank": r, "times": times}), flush=True)
hvd.shutdown()
