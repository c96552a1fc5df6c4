#!/usr/bin/env python3
"""The digits training of ``train_digits.py`` with byteps' DistributedDataParallel wrapper.

Instead of wrapping the optimizer, the model is wrapped:
``byteps.torch.parallel.DistributedDataParallel(model)`` broadcasts rank 0's weights when it is
built, and its backward leaves every gradient averaged over the workers, so a plain torch
optimizer follows.  ``--accumulate N`` demonstrates gradient accumulation: each optimizer step
uses N micro-batches, the first N-1 backward passes inside ``model.no_sync()`` (gradients add
up locally, nothing is sent) and the last one outside it (the sums are averaged over workers).
The loss is divided by N so that a step sees the mean gradient of its N micro-batches.

Data, model, defaults and output (per-epoch lines, test accuracy, samples/sec, ``RESULT {...}``)
are those of ``train_digits.py``; the accuracy is the same (about 0.97 after 20 epochs; with
``--accumulate N`` the steps are N times larger and fewer, so raise ``--lr`` or ``--epochs``).
``--ddp-baseline`` uses torch's own DistributedDataParallel (gloo) with the same loop.

Run it (2 workers, 1 server, on this machine)::

    PYTHONPATH=python python3 -m byteps.launcher.bpsrun -n 2 -s 1 -- \\
        python3 examples/pytorch/train_ddp.py --accumulate 2
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import byteps.torch as bps
from byteps.torch.parallel import DistributedDataParallel
from train_digits import BytePSOptimizerBackend, TorchDDPBackend, parse_args, train  # same folder


class BytePSDDPBackend(BytePSOptimizerBackend):
    """byteps.torch.parallel.DistributedDataParallel around the model, plain optimizer."""

    mode = "byteps-ddp"

    def wrap(self, model, optimizer):
        model = DistributedDataParallel(model)  # broadcasts rank 0's state_dict
        bps.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, optimizer

    def no_sync(self, model):
        return model.no_sync()


def add_accumulate(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accumulate", type=int, default=1, metavar="N",
                        help="micro-batches per optimizer step (N-1 of them under no_sync())")


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv, description=__doc__.splitlines()[0], extra=add_accumulate)
    if args.accumulate < 1:
        raise SystemExit("--accumulate must be at least 1")
    if args.compression != "none":
        raise SystemExit(f"train_ddp.py: --compression {args.compression}: compression is train_digits.py's "
                         f"(DistributedOptimizer); this script's DistributedDataParallel takes none")
    backend = TorchDDPBackend() if args.ddp_baseline else BytePSDDPBackend(wire_bytes=args.wire_bytes)
    train(backend, args, accumulate=args.accumulate)
    backend.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
