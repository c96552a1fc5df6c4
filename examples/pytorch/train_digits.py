#!/usr/bin/env python3
"""Data-parallel training on real data: scikit-learn's handwritten digits, with byteps.torch.

The dataset (``sklearn.datasets.load_digits``: 1,797 8x8 images, 10 classes) ships with
scikit-learn, so nothing is downloaded.  Every worker makes the same 80/20 train/test split
(fixed seed), trains on its shard of the training set (samples ``rank::size``, cut to the same
length on every worker so that all take the same number of steps) and averages gradients
through ``byteps.torch.DistributedOptimizer``.  Rank 0's initial weights and optimizer state
are broadcast first, so all workers hold the same model throughout.

The model is a small MLP (64-128-64-10) trained with Adam; the learning rate is not scaled with
the number of workers.  With the defaults (20 epochs, batch 32 per worker, lr 0.005) it
reaches a test accuracy of about 0.97 (0.96-0.98 depending on the number of workers; >= 0.95
in our runs with 1, 2 and 4 workers); 3 epochs give about 0.9.

Rank 0 shows a tqdm progress bar when stderr is a terminal and prints one line per epoch; at
the end it prints the test accuracy, the throughput (training samples per second, summed over
the workers) and a machine-readable ``RESULT {...}`` line.

``--compression NAME`` (none, fp16, onebit, topk, randomk, dithering; default none) compresses
the gradients on the wire (``byteps.torch.Compression.named``, passed to DistributedOptimizer;
the summary names it).  Every tensor of this model is under BYTEPS_MIN_COMPRESS_BYTES (64 KiB by
default) and so travels uncompressed unless that is lowered: ``BYTEPS_MIN_COMPRESS_BYTES=0``.
``--wire-bytes`` adds the payload bytes each step pushes and pulls (this worker's metrics
endpoint, docs/metrics.md) to the RESULT line, which also carries the accuracy after each epoch.

``--ddp-baseline`` trains the same model the same way with ``torch.nn.parallel.
DistributedDataParallel`` over torch.distributed (gloo) instead of byteps, for comparison (rank
and world size from RANK/WORLD_SIZE or DMLC_WORKER_ID/DMLC_NUM_WORKER; see
``benchmark_byteps.init_gloo``).  ``train_ddp.py`` is the variant with byteps'
DistributedDataParallel.

Run it (2 workers, 1 server, on this machine)::

    PYTHONPATH=python python3 -m byteps.launcher.bpsrun -n 2 -s 1 -- \\
        python3 examples/pytorch/train_digits.py
    PYTHONPATH=python python3 -m byteps.launcher.bpsrun -n 2 -s 1 -- \\
        python3 examples/pytorch/train_digits.py --ddp-baseline
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Callable, ContextManager, Iterator, Optional, Sequence

import torch
import torch.nn.functional as F

import byteps.torch as bps
from benchmark_byteps import finish_gloo, init_gloo  # examples/pytorch is on sys.path

Batches = list[tuple[torch.Tensor, torch.Tensor]]


def parse_args(argv: Optional[Sequence[str]] = None, description: str = __doc__.splitlines()[0],
               extra: Optional[Callable[[argparse.ArgumentParser], None]] = None) -> argparse.Namespace:
    """The common options; ``extra`` adds a script's own."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    p.add_argument("--lr", type=float, default=0.005, help="Adam learning rate (not scaled)")
    p.add_argument("--seed", type=int, default=0, help="model init and shuffling")
    p.add_argument("--ddp-baseline", action="store_true",
                   help="use torch DistributedDataParallel (gloo) instead of byteps")
    p.add_argument("--compression", default="none", choices=COMPRESSIONS,
                   help="gradient compression of the byteps DistributedOptimizer "
                        "(byteps.torch.Compression.named); tensors under BYTEPS_MIN_COMPRESS_BYTES "
                        "(default 64 KiB, more than any of this model's) travel uncompressed")
    p.add_argument("--wire-bytes", action="store_true",
                   help="byteps: count the payload bytes this worker pushes and pulls per step "
                        "(its metrics endpoint, docs/metrics.md, scraped before and after training)")
    if extra is not None:
        extra(p)
    args = p.parse_args(argv)
    if args.epochs < 1 or args.batch_size < 1 or args.lr <= 0:
        p.error("--epochs and --batch-size must be at least 1 and --lr positive")
    if args.ddp_baseline and args.compression != "none":
        p.error("--compression applies to byteps only, not to --ddp-baseline")
    return args


COMPRESSIONS = ("none", "fp16", "onebit", "topk", "randomk", "dithering")


def compressor(name: str):
    """``byteps.torch.Compression.named(name)``; "none" also without it (older builds)."""
    named = getattr(bps.Compression, "named", None)
    if named is None:
        if name == "none":
            return bps.Compression.none
        raise SystemExit(f"train_digits: --compression {name}: this byteps has no "
                         f"byteps.torch.Compression.named (the gradient compression API of issue 32 "
                         f"is not in this build); only --compression none works here")
    return named(name)


# --------------------------------------------------------------------------------------------
# Data and model


def load_digits_split() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(train x, train y, test x, test y): the same stratified 80/20 split on every worker;
    pixels scaled to [0, 1]."""
    from sklearn.datasets import load_digits  # here, so that --help works without sklearn
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data / 16.0, digits.target, test_size=0.2, random_state=0, stratify=digits.target)
    as_x = lambda a: torch.tensor(a, dtype=torch.float32)  # noqa: E731
    as_y = lambda a: torch.tensor(a, dtype=torch.int64)  # noqa: E731
    return as_x(x_train), as_y(y_train), as_x(x_test), as_y(y_test)


def shard(x: torch.Tensor, y: torch.Tensor, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This worker's samples ``rank::size``, cut to ``len // size`` so every shard has the same
    length (each worker must take the same number of steps, or the others would wait for it)."""
    n = len(x) // size
    return x[rank::size][:n], y[rank::size][:n]


def build_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(64, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10))


def epoch_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, seed: int) -> Batches:
    """The shard in a fresh random order, cut into batches (the last one may be smaller)."""
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))
    return [(x[idx], y[idx]) for idx in order.split(batch_size)]


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    correct = (model(x).argmax(dim=1) == y).sum().item()
    model.train()
    return correct / len(y)


# --------------------------------------------------------------------------------------------
# Backends: how gradients are averaged


class Backend:
    """Joins the job, wraps the model/optimizer, sums metrics over workers, leaves the job."""

    mode = "?"
    rank = 0
    size = 1

    def wrap(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer
             ) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        raise NotImplementedError

    def allsum(self, value: float, name: str) -> float:
        raise NotImplementedError

    def no_sync(self, model: torch.nn.Module) -> ContextManager:
        """Context in which backward accumulates gradients without averaging them."""
        del model
        return contextlib.nullcontext()

    def finish(self) -> None:
        raise NotImplementedError


class BytePSOptimizerBackend(Backend):
    """byteps.torch.DistributedOptimizer: gradients are push_pulled during backward."""

    mode = "byteps"

    def __init__(self, compression: str = "none", wire_bytes: bool = False) -> None:
        self.compression_name = compression
        self.compression = compressor(compression)
        self.metrics_url = _own_metrics_url() if wire_bytes else None
        bps.init()
        self.rank, self.size = bps.rank(), bps.size()

    def wrap(self, model, optimizer):
        optimizer = bps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                             compression=self.compression)
        bps.broadcast_parameters(model.state_dict(), root_rank=0)
        bps.broadcast_optimizer_state(optimizer, root_rank=0)
        return model, optimizer

    def allsum(self, value: float, name: str) -> float:
        total = bps.push_pull(torch.tensor([value], dtype=torch.float64), average=False, name=f"metric.{name}")
        return float(total.item())

    def finish(self) -> None:
        bps.shutdown()


def _own_metrics_url() -> str:
    """Makes this worker serve its metrics (docs/metrics.md) and returns the endpoint's URL:
    BYTEPS_METRICS_PORT as set (a launcher's per-process port), else a port free right now."""
    import socket  # noqa: PLC0415

    port = int(os.environ.get("BYTEPS_METRICS_PORT", "0") or 0)
    host = os.environ.get("DMLC_NODE_HOST", "").strip() or "127.0.0.1"
    if port <= 0:
        with socket.socket() as s:
            s.bind((host, 0))
            port = s.getsockname()[1]
        os.environ["BYTEPS_METRICS_PORT"] = str(port)
    return f"http://{host}:{port}/metrics"


def wire_bytes(url: str) -> tuple[float, float]:
    """(payload bytes pushed, pulled) so far by this worker, summed over the servers."""
    import urllib.request  # noqa: PLC0415

    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode()
    sums = {"byteps_worker_pushed_bytes_total": 0.0, "byteps_worker_pulled_bytes_total": 0.0}
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in sums:
            sums[name] += float(line.rsplit(" ", 1)[1])
    return sums["byteps_worker_pushed_bytes_total"], sums["byteps_worker_pulled_bytes_total"]


class TorchDDPBackend(Backend):
    """torch.nn.parallel.DistributedDataParallel over gloo (the baseline)."""

    mode = "torch-ddp-gloo"

    def __init__(self) -> None:
        self.rank, self.size = init_gloo()

    def wrap(self, model, optimizer):
        return torch.nn.parallel.DistributedDataParallel(model), optimizer  # broadcasts rank 0's state

    def allsum(self, value: float, name: str) -> float:
        del name
        total = torch.tensor([value], dtype=torch.float64)
        torch.distributed.all_reduce(total)
        return float(total.item())

    def no_sync(self, model):
        return model.no_sync()

    def finish(self) -> None:
        finish_gloo()


# --------------------------------------------------------------------------------------------
# Training


def progress(batches: Batches, enabled: bool, label: str) -> Iterator:
    """tqdm over ``batches`` when ``enabled`` and stderr is a terminal; the plain list otherwise."""
    if not enabled or not sys.stderr.isatty() or os.environ.get("BYTEPS_PROGRESS", "").strip() == "0":
        return iter(batches)
    from tqdm import tqdm  # noqa: PLC0415 - only rank 0 in a terminal needs it

    return iter(tqdm(batches, desc=label, leave=False, unit="batch"))


def train_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer, batches: Batches,
                backend: Backend, accumulate: int, bar_label: str) -> float:
    """One pass over ``batches``; every ``accumulate`` micro-batches make one optimizer step
    (the first ones under ``backend.no_sync``).  Returns the mean training loss."""
    usable = len(batches) - len(batches) % accumulate  # same on every worker
    total_loss = 0.0
    for i, (x, y) in enumerate(progress(batches[:usable], backend.rank == 0, bar_label)):
        last_of_step = (i + 1) % accumulate == 0
        if i % accumulate == 0:
            optimizer.zero_grad()
        with contextlib.nullcontext() if last_of_step else backend.no_sync(model):
            loss = F.cross_entropy(model(x), y)
            (loss / accumulate).backward()
        total_loss += loss.item()
        if last_of_step:
            optimizer.step()
    return total_loss / max(1, usable)


def train(backend: Backend, args: argparse.Namespace, accumulate: int = 1) -> dict:
    """Trains, evaluates and prints the report on rank 0; returns the RESULT record."""
    rank, size = backend.rank, backend.size
    log = (lambda text: print(text, flush=True)) if rank == 0 else (lambda text: None)
    x_train, y_train, x_test, y_test = load_digits_split()
    x_mine, y_mine = shard(x_train, y_train, rank, size)
    torch.manual_seed(args.seed)
    model = build_model()
    model, optimizer = backend.wrap(model, torch.optim.Adam(model.parameters(), lr=args.lr))
    compression = getattr(backend, "compression_name", "none")
    log(f"{backend.mode}: {size} worker(s), {len(x_mine)} training samples each, "
        f"{len(x_test)} test samples, batch {args.batch_size}, lr {args.lr}, compression {compression}")

    url = getattr(backend, "metrics_url", None)
    bytes_before = wire_bytes(url) if url else None
    train_time, samples, loss, steps = 0.0, 0, float("nan"), 0
    curve = []  # per epoch: accuracy after it and the training time so far
    for epoch in range(args.epochs):
        batches = epoch_batches(x_mine, y_mine, args.batch_size, seed=args.seed + 1000 * epoch + rank)
        start = time.perf_counter()
        loss = train_epoch(model, optimizer, batches, backend, accumulate,
                           f"epoch {epoch + 1}/{args.epochs}")
        train_time += time.perf_counter() - start
        samples += sum(len(y) for _, y in batches[:len(batches) - len(batches) % accumulate])
        steps += len(batches) // accumulate
        epoch_acc = accuracy(model, x_test, y_test)
        curve.append({"epoch": epoch + 1, "accuracy": round(epoch_acc, 4), "train_time_s": round(train_time, 3)})
        log(f"epoch {epoch + 1}/{args.epochs}: train loss {loss:.4f}, test accuracy {epoch_acc:.4f}")
    bytes_after = wire_bytes(url) if url else None

    acc = accuracy(model, x_test, y_test)
    mean_acc = backend.allsum(acc, "accuracy") / size  # equal on all workers in sync training
    rate = samples / train_time
    total_rate = backend.allsum(rate, "samples_per_sec")
    log(f"Test accuracy: {acc:.4f} (mean over workers {mean_acc:.4f})")
    log(f"Throughput: {total_rate:.0f} samples/sec on {size} worker(s) ({rate:.0f} per worker)")
    if backend.mode == "byteps":
        log(f"Compression: {compression}")
    result = {"mode": backend.mode, "accuracy": round(acc, 4), "samples_per_sec": round(total_rate, 1),
              "samples_per_sec_per_worker": round(rate, 1), "epochs": args.epochs, "workers": size,
              "batch": args.batch_size, "lr": args.lr, "train_time_s": round(train_time, 3),
              "final_loss": round(loss, 5), "compression": compression, "steps": steps,
              "iter_time_s": round(train_time / max(1, steps), 6), "curve": curve}
    if bytes_before is not None and bytes_after is not None:
        # This worker's payload bytes per step (gradients; the first step's declarations too).
        result["pushed_bytes_per_step"] = round((bytes_after[0] - bytes_before[0]) / max(1, steps), 1)
        result["pulled_bytes_per_step"] = round((bytes_after[1] - bytes_before[1]) / max(1, steps), 1)
    if accumulate > 1:
        result["accumulate"] = accumulate
    log("RESULT " + json.dumps(result))
    return result


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    backend = TorchDDPBackend() if args.ddp_baseline else BytePSOptimizerBackend(args.compression, args.wire_bytes)
    train(backend, args)
    backend.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
