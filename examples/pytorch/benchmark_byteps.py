#!/usr/bin/env python3
"""Synthetic-data training throughput of a torchvision model with byteps.torch.

Every worker trains the same model on random images (no data loading, no accuracy: only the
speed of forward + backward + gradient averaging + update counts).  Rank 0 prints img/sec for
each timed iteration (``--num-batches-per-iter`` batches), then::

    Img/sec per worker: X +- Y
    Total img/sec on N worker(s): Z +- W
    Comm wait per iter: ...

and a final machine-readable line ``RESULT {...}`` (img_per_sec = total over all workers).  The
+- figures are 1.96 standard deviations over the iterations, as in the BytePS/Horovod
benchmarks; the total is rank 0's figure times the number of workers.

"Comm wait" is the time a step spends blocked in ``optimizer.synchronize()`` -- gradients whose
push_pull did not finish while backward was still running.  The step is written out as
``optimizer.synchronize()`` followed by ``with optimizer.skip_synchronize(): optimizer.step()``
so that this wait can be timed on its own.

``--ddp-baseline`` runs the same loop with ``torch.nn.parallel.DistributedDataParallel`` over
torch.distributed (gloo) instead of byteps, for an apples-to-apples comparison in the same job.
Its ranks come from RANK/WORLD_SIZE, else DMLC_WORKER_ID/DMLC_NUM_WORKER; MASTER_ADDR defaults
to DMLC_PS_ROOT_URI or 127.0.0.1; without MASTER_PORT, rank 0 picks a free port and tells the
others through byteps.  When started by a byteps launcher (DMLC_ROLE set) this mode still joins
the byteps job, so that its scheduler and servers finish normally.  DDP has no separate
synchronize, so comm_wait is not reported for it (null).

CPU only: this byteps build takes CPU tensors, so ``--no-cuda`` is accepted and has no effect.
The default ``--image-size`` is 64 (the original used 224) to keep CPU runs short; pass
``--image-size 224`` for the usual ImageNet shape.

Run it (2 workers, 1 server, on this machine)::

    PYTHONPATH=python python3 -m byteps.launcher.bpsrun -n 2 -s 1 -- \\
        python3 examples/pytorch/benchmark_byteps.py --model resnet18 --batch-size 16
    PYTHONPATH=python python3 -m byteps.launcher.bpsrun -n 2 -s 1 -- \\
        python3 examples/pytorch/benchmark_byteps.py --model resnet18 --batch-size 16 --ddp-baseline
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Callable, Optional, Sequence

import numpy as np
import torch
import torch.nn.functional as F

import byteps.torch as bps
from byteps.launcher.ports import free_port


def make_parser(description: str) -> argparse.ArgumentParser:
    """The arguments every synthetic benchmark takes (the original's names)."""
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", default="resnet18", help="a torchvision.models constructor name")
    p.add_argument("--batch-size", type=int, default=32, help="images per worker per step")
    p.add_argument("--num-warmup-batches", type=int, default=2, help="untimed steps first")
    p.add_argument("--num-batches-per-iter", type=int, default=5, help="steps per timed iteration")
    p.add_argument("--num-iters", type=int, default=5, help="timed iterations")
    p.add_argument("--num-classes", type=int, default=1000)
    p.add_argument("--image-size", type=int, default=64,
                   help="side of the square images (small by default for CPU; 224 = ImageNet)")
    p.add_argument("--no-cuda", action="store_true", help="accepted; CPU is the only mode here")
    p.add_argument("--seed", type=int, default=42)
    return p


def check_args(p: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.Namespace:
    """``args`` after the range checks (``p.error`` otherwise)."""
    for name in ("batch_size", "num_batches_per_iter", "num_iters", "num_classes", "image_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.num_warmup_batches < 0:
        p.error("--num-warmup-batches must be >= 0")
    return args


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = make_parser("PyTorch synthetic benchmark over byteps")
    p.add_argument("--fp16-pushpull", action="store_true", help="send gradients as float16")
    p.add_argument("--ddp-baseline", action="store_true",
                   help="use torch DistributedDataParallel (gloo) instead of byteps")
    return check_args(p, p.parse_args(argv))


def build_model(name: str, num_classes: int) -> torch.nn.Module:
    """``torchvision.models.<name>(num_classes=...)``, randomly initialised."""
    from torchvision import models  # here, so that --help works without torchvision

    constructor = getattr(models, name, None)
    if not name.islower() or name.startswith("_") or not callable(constructor):
        known = sorted(n for n in dir(models) if n.islower() and not n.startswith("_")
                       and callable(getattr(models, n)) and not n.startswith(("get_", "list_")))
        raise SystemExit(f"unknown model {name!r}; torchvision.models has: {', '.join(known)}")
    return constructor(num_classes=num_classes)


# --------------------------------------------------------------------------------------------
# The two ways of training: byteps DistributedOptimizer, or torch DDP (gloo)


class BytePSTrainer:
    """One SGD step with byteps.torch; records the time blocked on gradient communication."""

    def __init__(self, model: torch.nn.Module, args: argparse.Namespace) -> None:
        self.model = model
        compression = bps.Compression.fp16 if args.fp16_pushpull else bps.Compression.none
        base = torch.optim.SGD(model.parameters(), lr=0.01 * bps.size(), momentum=0.9)
        self.optimizer = bps.DistributedOptimizer(base, named_parameters=model.named_parameters(),
                                                  compression=compression)
        bps.broadcast_parameters(model.state_dict(), root_rank=0)
        bps.broadcast_optimizer_state(self.optimizer, root_rank=0)
        self.comm_wait_s = 0.0

    def step(self, data: torch.Tensor, target: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        F.cross_entropy(self.model(data), target).backward()
        start = time.perf_counter()
        self.optimizer.synchronize()
        self.comm_wait_s += time.perf_counter() - start
        with self.optimizer.skip_synchronize():
            self.optimizer.step()


class DDPTrainer:
    """The same step with torch.nn.parallel.DistributedDataParallel over gloo."""

    comm_wait_s: Optional[float] = None  # DDP waits inside backward: not separately measurable

    def __init__(self, model: torch.nn.Module, args: argparse.Namespace) -> None:
        del args
        world = torch.distributed.get_world_size()
        self.model = torch.nn.parallel.DistributedDataParallel(model)  # broadcasts rank 0's state
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01 * world, momentum=0.9)

    def step(self, data: torch.Tensor, target: torch.Tensor) -> None:
        self.optimizer.zero_grad()
        F.cross_entropy(self.model(data), target).backward()
        self.optimizer.step()


def init_gloo() -> tuple[int, int]:
    """Joins torch.distributed (gloo) from RANK/WORLD_SIZE or the DMLC_* variables; returns
    (rank, world size).  Under a byteps launcher (DMLC_ROLE set) it also joins the byteps job
    (see the module docstring), which is how rank 0 shares a free MASTER_PORT when none is
    given; without one, MASTER_PORT is required for more than one worker."""
    env = os.environ
    rank = int(env.get("RANK", env.get("DMLC_WORKER_ID", "0")))
    world = int(env.get("WORLD_SIZE", env.get("DMLC_NUM_WORKER", "1")))
    if "DMLC_ROLE" in env:
        bps.init()
    if "MASTER_PORT" not in env:
        if world > 1 and "DMLC_ROLE" not in env:
            raise SystemExit("--ddp-baseline: set MASTER_PORT (or start the job with a byteps launcher)")
        # Rank 0 hosts the gloo rendezvous: it shares its own address (not the scheduler's, which
        # may be another machine) and a free port with the others through byteps.
        addr = env.get("MASTER_ADDR", env.get("DMLC_NODE_HOST", "127.0.0.1"))
        port = free_port("") if rank == 0 else 0  # gloo's store listens on every address
        if world > 1:
            addr, port = bps.broadcast_object((addr, port), root_rank=0, name="ddp_master_addr")
        env["MASTER_ADDR"], env["MASTER_PORT"] = addr, str(port)
    env.setdefault("MASTER_ADDR", env.get("DMLC_PS_ROOT_URI", "127.0.0.1"))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    return rank, world


def finish_gloo() -> None:
    """Leaves torch.distributed, and the byteps job if :func:`init_gloo` joined it."""
    torch.distributed.destroy_process_group()
    if "DMLC_ROLE" in os.environ:
        bps.shutdown()


# --------------------------------------------------------------------------------------------
# Measuring


def timed_iterations(step: Callable[[], None], args: argparse.Namespace,
                     log: Callable[[str], None]) -> list[float]:
    """Runs the warm-up steps, then ``num_iters`` timed iterations; returns img/sec of each."""
    for _ in range(args.num_warmup_batches):
        step()
    rates = []
    for i in range(args.num_iters):
        start = time.perf_counter()
        for _ in range(args.num_batches_per_iter):
            step()
        rate = args.batch_size * args.num_batches_per_iter / (time.perf_counter() - start)
        log(f"Iter #{i}: {rate:.1f} img/sec per worker")
        rates.append(rate)
    return rates


def summarize(rates: list[float], workers: int, comm_wait_s: Optional[float],
              args: argparse.Namespace, mode: str) -> tuple[list[str], dict]:
    """The human-readable report lines and the RESULT record."""
    mean, conf = float(np.mean(rates)), 1.96 * float(np.std(rates))
    lines = [f"Img/sec per worker: {mean:.1f} +- {conf:.1f}",
             f"Total img/sec on {workers} worker(s): {workers * mean:.1f} +- {workers * conf:.1f}"]
    # The warm-up steps are not timed, but their waits are included: count them as steps too.
    steps = args.num_warmup_batches + args.num_iters * args.num_batches_per_iter
    per_iter = None
    if comm_wait_s is not None:
        per_step = comm_wait_s / steps
        per_iter = per_step * args.num_batches_per_iter
        lines.append(f"Comm wait per iter: {per_iter * 1e3:.1f} ms "
                     f"({per_step * 1e3:.2f} ms per step of {args.batch_size} images)")
    result = {"mode": mode, "model": args.model, "batch": args.batch_size, "workers": workers,
              "image_size": args.image_size, "fp16_pushpull": args.fp16_pushpull,
              "img_per_sec": round(workers * mean, 2), "img_per_sec_per_worker": round(mean, 2),
              "img_per_sec_conf": round(workers * conf, 2),
              "comm_wait_s_per_iter": None if per_iter is None else round(per_iter, 6),
              "batches_per_iter": args.num_batches_per_iter, "iters": args.num_iters}
    return lines, result


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    torch.manual_seed(args.seed)
    model = build_model(args.model, args.num_classes)  # before joining: a bad name fails fast
    if args.ddp_baseline:
        rank, workers = init_gloo()
        mode = "torch-ddp-gloo"
    else:
        bps.init()
        rank, workers = bps.rank(), bps.size()
        mode = "byteps"

    def log(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    trainer = DDPTrainer(model, args) if args.ddp_baseline else BytePSTrainer(model, args)
    data = torch.randn(args.batch_size, 3, args.image_size, args.image_size)
    target = torch.randint(0, args.num_classes, (args.batch_size,))

    log(f"Model: {args.model} ({mode}), batch size {args.batch_size}, image size "
        f"{args.image_size}, {workers} worker(s), {torch.get_num_threads()} thread(s) each, CPU")
    rates = timed_iterations(lambda: trainer.step(data, target), args, log)
    lines, result = summarize(rates, workers, trainer.comm_wait_s, args, mode)
    for line in lines:
        log(line)
    log("RESULT " + json.dumps(result))
    if args.ddp_baseline:
        finish_gloo()
    else:
        bps.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
