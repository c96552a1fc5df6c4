#!/usr/bin/env python3
"""Synthetic torchvision benchmark with BytePS's CrossBarrier: the calls of the original's
``example/pytorch/benchmark_cross_barrier_byteps.py`` (``CrossBarrier(model, optimizer,
named_parameters, compression, num_steps=...)``, ``--fp16-allreduce``), on CPU.

Each step is ``zero_grad(); backward(); step()``: ``step()`` returns at once and the next forward
waits, layer by layer, for its own parameters' updates, so there is no communication wait to
report (``comm_wait_s_per_iter`` is null).  The report is benchmark_byteps.py's, with
``"mode": "byteps-cross-barrier"`` in its ``RESULT {...}`` line.

    bpsrun -n 2 -s 1 -- python3 examples/pytorch/benchmark_cross_barrier_byteps.py --model resnet18
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Optional, Sequence

import torch
import torch.nn.functional as F

import byteps.torch as bps
from benchmark_byteps import build_model, check_args, make_parser, summarize, timed_iterations
from byteps.torch.cross_barrier import CrossBarrier


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = make_parser(__doc__.split("\n\n")[0])
    p.add_argument("--fp16-allreduce", action="store_true", help="send gradients as float16")
    args = check_args(p, p.parse_args(argv))
    args.fp16_pushpull = args.fp16_allreduce  # what summarize() reports
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    model = build_model(args.model, args.num_classes)
    bps.init()
    rank, workers = bps.rank(), bps.size()
    compression = bps.Compression.fp16 if args.fp16_allreduce else bps.Compression.none
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01 * workers, momentum=0.9)
    steps = args.num_warmup_batches + args.num_iters * args.num_batches_per_iter
    optimizer = CrossBarrier(model, optimizer, named_parameters=model.named_parameters(), compression=compression,
                             num_steps=steps)
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    bps.broadcast_optimizer_state(optimizer, root_rank=0)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))

    def step() -> None:
        optimizer.zero_grad()
        F.cross_entropy(model(data), target).backward()
        optimizer.step()  # the last of num_steps waits for every update

    def log(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    log(f"Model: {args.model} (byteps CrossBarrier), batch size {args.batch_size}, {workers} worker(s), CPU")
    rates = timed_iterations(step, args, log)
    lines, result = summarize(rates, workers, None, args, "byteps-cross-barrier")
    for line in lines:
        log(line)
    log("RESULT " + json.dumps(result))
    bps.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
