#!/usr/bin/python3
"""torch.distributed gloo all_reduce of one float32 tensor, n processes on loopback: the all-reduce
peer that byteps push_pull is compared with in docs/benchmarks.md.

    python3 bench/gloo_allreduce.py -n 4 --bytes 100000000 --iters 5

Prints a line `gloo_allreduce n=4 bytes=... median_s=... algbw_GBps=...` and a JSON line.
"""
import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))  # this checkout's byteps
from byteps.launcher.ports import free_port  # noqa: E402


def worker(rank, n, port, nbytes, iters, warmup, queue):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    t = torch.ones(nbytes // 4, dtype=torch.float32)
    times = []
    for i in range(warmup + iters):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        dt = time.perf_counter() - t0
        if i >= warmup:
            times.append(dt)
    if rank == 0:
        queue.put(times)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("--bytes", type=int, default=100_000_000)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    args = ap.parse_args()
    try:
        import torch.multiprocessing as mp
    except ImportError:
        print("gloo_allreduce: python3-torch is not installed (apt-get install python3-torch)", file=sys.stderr)
        return 2
    port = free_port()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args.n, port, args.bytes, args.iters, args.warmup, q))
             for r in range(args.n)]
    for p in procs:
        p.start()
    times = q.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    med = statistics.median(times)
    print(f"gloo_allreduce n={args.n} bytes={args.bytes} median_s={med:.4f} algbw_GBps={args.bytes / med / 1e9:.3f}")
    print("JSON " + json.dumps({"mode": "gloo_allreduce", "n": args.n, "bytes": args.bytes,
                               "median_s": med, "times_s": times}))
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
