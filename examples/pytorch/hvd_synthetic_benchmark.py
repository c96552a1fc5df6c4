#!/usr/bin/env python3
"""A Horovod-style synthetic benchmark (random data, a small CNN), run on byteps by changing one
line: ``import horovod.torch as hvd`` -> ``import byteps.torch as hvd``.

Launch: ``PYTHONPATH=python python3 -m byteps.launcher.bpsrun -n 2 -s 1 -- python3
examples/pytorch/hvd_synthetic_benchmark.py``.  Rank 0 prints img/sec per worker and in total,
and a ``RESULT {...}`` line (also a checksum of the final weights: the run is seeded).
"""

import argparse
import json
import timeit

import torch
import torch.nn.functional as F

import byteps.torch as hvd  # the only change from a Horovod script

parser = argparse.ArgumentParser(description="Horovod-style synthetic benchmark")
parser.add_argument("--batch-size", type=int, default=16)
parser.add_argument("--num-warmup-batches", type=int, default=2)
parser.add_argument("--num-batches-per-iter", type=int, default=2)
parser.add_argument("--num-iters", type=int, default=3)
parser.add_argument("--fp16-allreduce", action="store_true")
args = parser.parse_args()

hvd.init()
torch.manual_seed(1234)
model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(4),
                            torch.nn.Flatten(), torch.nn.Linear(128, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * hvd.size())
compression = hvd.Compression.fp16 if args.fp16_allreduce else hvd.Compression.none
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(), compression=compression)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

data = torch.randn(args.batch_size, 3, 32, 32, generator=torch.Generator().manual_seed(hvd.rank()))
target = torch.randint(0, 10, (args.batch_size,), generator=torch.Generator().manual_seed(100 + hvd.rank()))


def benchmark_step():
    optimizer.zero_grad()
    F.cross_entropy(model(data), target).backward()
    optimizer.step()


timeit.timeit(benchmark_step, number=args.num_warmup_batches)
img_secs = []
for _ in range(args.num_iters):
    t = timeit.timeit(benchmark_step, number=args.num_batches_per_iter)
    img_secs.append(args.batch_size * args.num_batches_per_iter / t)
img_sec = sum(img_secs) / len(img_secs)
total = hvd.allreduce(torch.tensor(img_sec), op=hvd.Sum, name="img_sec").item()
checksum = sum(float(p.double().abs().sum()) for p in model.parameters())
if hvd.rank() == 0:
    print(f"Img/sec per worker: {img_sec:.1f}; total img/sec on {hvd.size()} workers: {total:.1f}")
    print("RESULT " + json.dumps({"workers": hvd.size(), "img_per_sec": total, "checksum": checksum}), flush=True)
hvd.shutdown()
