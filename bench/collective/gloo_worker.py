#!/usr/bin/python3
"""One rank of the gloo peer of the collective benchmark: torch.distributed (gloo) all_reduce of
one float32 tensor per size, every size in one process group::

    GLOO_SOCKET_IFNAME=eth0 python3 bench/collective/gloo_worker.py --rank 0 --world-size 4 \\
        --master-addr 198.18.0.1 --master-port 29500 --sizes 4194304:20,16777216:10 --warmup 1

``--sizes`` is a list of ``bytes:iterations``.  Every iteration is preceded by a barrier and
times one ``all_reduce`` (what bench/gloo_allreduce.py does); with ``--back-to-back`` the
all_reduces follow each other with nothing in between (a tensor of zeros, after one untimed
all_reduce of ones that checks the sum).  Rank 0 prints one line per size
``JSON {"bytes": ..., "iters": ..., "median_s": ..., "times_s": [...]}`` (its own times, as
``byteps-core bench`` reports rank 0's) and checks the sum.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time


def parse_sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        nbytes, _, iters = item.partition(":")
        out.append((int(nbytes), int(iters or 5)))
    return out


def check_sum(t, expected: int) -> bool:
    if t[0].item() != expected or t[-1].item() != expected:
        print(f"gloo_worker: wrong sum {t[0].item()} (expected {expected})", file=sys.stderr)
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world-size", type=int, required=True)
    ap.add_argument("--master-addr", required=True)
    ap.add_argument("--master-port", type=int, default=29500)
    ap.add_argument("--sizes", required=True, help="bytes:iters,bytes:iters,...")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600, help="process group timeout (s)")
    ap.add_argument("--back-to-back", action="store_true",
                    help="no barrier and no refill between the timed all_reduces")
    args = ap.parse_args(argv)

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://{args.master_addr}:{args.master_port}",
                            rank=args.rank, world_size=args.world_size,
                            timeout=datetime.timedelta(seconds=args.timeout))
    n = dist.get_world_size()
    for nbytes, iters in parse_sizes(args.sizes):
        t = torch.ones(nbytes // 4, dtype=torch.float32)
        if args.back_to_back:  # check the sum once, then sum zeros (a sum of ones would overflow)
            dist.all_reduce(t)
            if not check_sum(t, n):
                return 1
            t.zero_()
        times = []
        for i in range(args.warmup + iters):
            if not args.back_to_back:
                t.fill_(1.0)
                dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            dt = time.perf_counter() - t0
            if i >= args.warmup:
                times.append(dt)
        if not check_sum(t, 0 if args.back_to_back else n):
            return 1
        if args.rank == 0:
            print("JSON " + json.dumps({"bytes": nbytes, "iters": iters,
                                        "median_s": statistics.median(times), "times_s": times}),
                  flush=True)
        del t
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    sys.exit(main())
