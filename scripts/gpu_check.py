#!/usr/bin/env python3
"""The GPU path on a machine with a GPU (run by scripts/gpu-check.sh): every check prints one line
and adds its figures to a JSON file.

    python3 scripts/gpu_check.py single OUT.json    # one process: CUDA vs CPU push_pull, copy bandwidth
    python3 scripts/gpu_check.py worker             # one worker of a bpsrun job (2 on one GPU)

single: for every dtype and size class, push_pull of a CUDA tensor (in place and out of place,
average or not) equals the CPU path's; the time of a CUDA-tensor push_pull against a CPU-tensor
one of the same size; pinned cudaMemcpy bandwidth (torch's copy from pinned memory) against what
the copy stages reach (a 1-process job: copy-in + copy-out of 256 MiB).
worker: exact sums of CUDA tensors across 2 processes sharing the GPU, and DistributedOptimizer
on CUDA against single-process training of the same data.
"""
from __future__ import annotations

import json
import os
import sys
import time

import torch

import byteps.torch as bps

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8,
          torch.uint8]
SIZES = [1, 1000, 1 << 20, 16 << 20]  # elements: tiny, small, 1 Mi, 16 Mi


def timed(fn, reps: int) -> float:
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def single(out_path: str) -> int:
    bps.init()
    torch.cuda.set_device(0)
    fails, figures = [], {}
    for dt in DTYPES:
        for n in SIZES:
            if n > (1 << 20) and dt not in (torch.float32, torch.uint8):
                continue
            base = (torch.arange(n) % 7).to(dt)
            for in_place in (False, True):
                for average in ((False, True) if dt.is_floating_point else (False,)):
                    name = f"chk.{dt}.{n}.{in_place}.{average}"
                    cpu = bps.push_pull(base.clone(), average=average, name=name + ".cpu")
                    x = base.cuda()
                    got = bps.push_pull_inplace(x, average=average, name=name) if in_place else \
                        bps.push_pull(x, average=average, name=name)
                    if got.device.type != "cuda" or not torch.equal(got.cpu(), cpu):
                        fails.append(name)
    print(f"CHECK push_pull CUDA == CPU: {len(fails)} mismatches {fails[:5]}", flush=True)
    for mib in (4, 64, 256):
        n = mib << 18  # float32 elements
        cpu_t, gpu_t = torch.ones(n), torch.ones(n, device="cuda")
        t_cpu = timed(lambda: bps.push_pull_inplace(cpu_t, average=False, name=f"speed.cpu.{mib}"), 7)
        t_gpu = timed(lambda: bps.push_pull_inplace(gpu_t, average=False, name=f"speed.gpu.{mib}"), 7)
        pinned = torch.ones(n).pin_memory()
        dev = torch.empty(n, device="cuda")
        t_h2d = timed(lambda: dev.copy_(pinned, non_blocking=True), 7)
        figures[f"{mib}MiB"] = {"push_pull_cpu_s": t_cpu, "push_pull_cuda_s": t_gpu, "cuda_over_cpu": t_gpu / t_cpu,
                                "pinned_h2d_GBps": n * 4 / t_h2d / 1e9}
        print(f"FIGURE {mib} MiB: CUDA push_pull {t_gpu * 1e3:.2f} ms vs CPU {t_cpu * 1e3:.2f} ms "
              f"({t_gpu / t_cpu:.2f}x); pinned H2D {n * 4 / t_h2d / 1e9:.1f} GB/s", flush=True)
    bps.shutdown()
    with open(out_path, "w") as f:
        json.dump({"mismatches": fails, "figures": figures}, f, indent=1)
    return 1 if fails else 0


def worker() -> int:
    bps.init()
    torch.cuda.set_device(0)
    rank, size = bps.rank(), bps.size()
    fails = []
    for dt in DTYPES:
        for n in (3, 70001):
            x = ((torch.arange(n) % 5) * (rank + 1)).to(dt).cuda()
            want = sum(((torch.arange(n) % 5) * (r + 1)) for r in range(size)).to(dt)
            if not torch.equal(bps.push_pull(x, average=False, name=f"w.{dt}.{n}").cpu(), want):
                fails.append(f"{dt}[{n}]")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
    reference = [p.detach().clone() for p in model.parameters()]
    opt = bps.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    data = [(torch.randn(16, 32, generator=torch.Generator().manual_seed(s)),
             torch.randn(16, 4, generator=torch.Generator().manual_seed(100 + s))) for s in range(2 * 5)]
    for step in range(5):
        x, y = data[2 * step + rank]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x.cuda()), y.cuda()).backward()
        opt.step()
    # Single-process training on both workers' batches (the mean of the two gradients).
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).cuda()
    with torch.no_grad():
        for p, q in zip(ref.parameters(), reference):
            p.copy_(q)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(5):
        ref_opt.zero_grad()
        loss = sum(torch.nn.functional.mse_loss(ref(x.cuda()), y.cuda()) for x, y in data[2 * step:2 * step + 2]) / 2
        loss.backward()
        ref_opt.step()
    diff = max(float((p - q).abs().max()) for p, q in zip(model.parameters(), ref.parameters()))
    if diff > 1e-4:
        fails.append(f"training differs from single-process by {diff}")
    print(f"CHECK worker {rank}: {len(fails)} failures {fails}", flush=True)
    bps.shutdown()
    return 1 if fails else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["single"]:
        sys.exit(single(sys.argv[2]))
    sys.exit(worker())
