"""Model-shaped emulated training: real gradient sizes of VGG-16 / ResNet-50, replayed compute.

Run as every worker of a job (bpsrun, bpslaunch or the testbed's launcher)::

    python3 -m bench.model_shaped.workload --model vgg16|resnet50 \\
        --mode byteps|byteps-nopriority|ddp|byteps-optimizer|byteps-cross-barrier|ddp-torch \\
        --iters N --warmup W --link-gbit 1.0 [--time-scale S] [--shrink K] [--credit C] \\
        [--compression NAME]

Every worker holds float32 gradient tensors with the model's names and shapes (parameters of
a dummy ``nn.Module`` built in forward order, so ``named_parameters()`` is the model's) and
replays one training iteration per step on a virtual compute stream (a GPU's, in effect):

* **forward**: layers first to last; before "computing" layer i (sleeping its forward time)
  it waits until layer i's parameters are up to date, i.e. until the averaging of layer i's
  gradients of the previous iteration has finished;
* **backward**: layers last to first; after layer i's backward time, its gradients are ready
  and their communication starts at once.

Times come from :mod:`bench.model_shaped.profiles` (V100, batch 64), dilated by
``20 / link_gbit`` (compute/communication as on the original 20 Gbit/s) and by ``--time-scale``
(tests only).  The compute stream is a virtual timeline: a sleep ends at the stream's
deadline, so sleep overshoot and Python overhead do not accumulate; a wait that really blocks
moves the stream to "now".

Modes (README.md, "Method"):

* ``byteps``: each gradient goes out through ``byteps.torch.push_pull_async_inplace`` as it
  is ready, named ``"Gradient.<param>"`` and with priority ``-forward_index`` (what
  DistributedOptimizer's hooks do); the forward waits per layer (``synchronize`` of that
  layer's handles), so the first layers' small gradients, sent first, let the next forward
  start before the big late ones are done.
* ``byteps-nopriority``: the same with priority 0 for every tensor.  The tensors are declared
  in backward order in both byteps modes, so the core's (priority, key) order reduces here to
  the order the gradients became ready (FIFO), and server placement is identical.
* ``ddp``: what torch DDP does, with the same replayed compute: gradients in buckets of 25 MiB
  (the first 1 MiB) in backward order, each bucket divided by the world size and all-reduced
  (``torch.distributed.all_reduce(async_op=True)``, gloo) when its last gradient is ready;
  the next forward waits for every bucket (DDP finishes the reduction at the end of backward).
* ``byteps-optimizer`` / ``ddp-torch`` (cross-checks with the real plugins): a chain of
  autograd functions that sleep the layer times drives the real
  ``byteps.torch.DistributedOptimizer`` (its hooks; ``step()`` waits for every gradient
  before the next forward) or the real ``torch.nn.parallel.DistributedDataParallel``.
* ``compute``: the replay with no communication at all (the compute time alone, as measured
  here: the profile's compute time plus the replay's own overhead).
* ``byteps-cross-barrier``: the same chain with the real ``byteps.torch.cross_barrier.CrossBarrier``:
  ``step()`` returns at once, and before each layer's forward the pre-hooks of the modules
  holding its parameters wait for their updates (what ``nn.Module.__call__`` would run).

``--compression NAME`` (byteps modes; none, fp16, onebit, topk, randomk, dithering): every
gradient is compressed on the wire with ``byteps.torch.Compression.named(NAME)``'s parameters,
declared per tensor name (``declare_tensor_params``) before the first push_pull, so the
push_pulls carry them; byteps-optimizer passes the compressor to DistributedOptimizer.  Tensors
under BYTEPS_MIN_COMPRESS_BYTES (default 64 KiB: VGG-16's biases) stay uncompressed.

Rank 0 prints each timed iteration and a final ``RESULT {...}`` JSON line: img_per_sec
(= 64 x workers / mean iteration time, measured here), img_per_sec_v100 (the same in the time
of the original setup: x 20/link_gbit / time_scale), iter_time_s, compute_time_s (the replayed
compute per iteration), stall_s (time the compute stream waited for communication per
iteration), bytes (gradient bytes per worker per iteration) and the settings.

The ddp modes join torch.distributed (gloo) through ``init_gloo`` of
examples/pytorch/benchmark_byteps.py (RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT, else the
DMLC_* variables); under a byteps launcher without MASTER_ADDR, rank 0's DMLC_NODE_HOST
(else 127.0.0.1) is shared through byteps first, so rank 0 need not run on the scheduler's host.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Optional, Sequence

import torch
from torch import nn

from . import profiles

REPO = Path(__file__).resolve().parents[2]
BATCH = profiles.BATCH
MODES = ("byteps", "byteps-nopriority", "ddp", "byteps-optimizer", "byteps-cross-barrier", "ddp-torch", "compute")
COMPRESSIONS = ("none", "fp16", "onebit", "topk", "randomk", "dithering")
DDP_BUCKET_BYTES = 25 * 1024 * 1024  # torch DDP's bucket_cap_mb default
DDP_FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="model-shaped emulated training workload",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--model", choices=profiles.MODELS, required=True)
    p.add_argument("--mode", choices=MODES, required=True)
    p.add_argument("--iters", type=int, default=10, help="timed iterations")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    p.add_argument("--link-gbit", type=float, default=1.0,
                   help="link rate R of the cluster: compute is dilated by 20/R")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="extra factor on every compute time (< 1 to shrink runs for tests)")
    p.add_argument("--shrink", type=int, default=1,
                   help="divide every tensor's element count by this (tests; names and order kept, "
                        "tensors become 1-D)")
    p.add_argument("--credit", type=int, default=None,
                   help="sets BYTEPS_SCHEDULING_CREDIT (partitions in flight) before joining")
    p.add_argument("--no-check", action="store_true", help="skip the check of the averaged values")
    p.add_argument("--compression", choices=COMPRESSIONS, default="none",
                   help="byteps modes: gradient compression (byteps.torch.Compression.named)")
    args = p.parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        p.error("--iters must be >= 1 and --warmup >= 0")
    if not args.link_gbit > 0 or not args.time_scale > 0:
        p.error("--link-gbit and --time-scale must be positive")
    if args.shrink < 1:
        p.error("--shrink must be >= 1")
    if args.compression != "none" and args.mode not in ("byteps", "byteps-nopriority", "byteps-optimizer"):
        p.error(f"--compression applies to byteps, byteps-nopriority and byteps-optimizer, not to {args.mode}")
    if args.compression not in ("none", "fp16") and not args.no_check:
        args.no_check = True  # a lossy compressor does not return the exact averaged marker
    return args


def compressor(name: str):
    """``byteps.torch.Compression.named(name)``, or a clear exit when this build lacks it."""
    import byteps.torch as bps  # noqa: PLC0415

    named = getattr(bps.Compression, "named", None)
    if named is None:
        if name == "none":
            return bps.Compression.none
        raise SystemExit(f"model_shaped: --compression {name}: this byteps has no "
                         f"byteps.torch.Compression.named (the gradient compression API of issue 32 "
                         f"is not in this build)")
    return named(name)


def compression_params(name: str) -> dict[str, str]:
    """The declaration parameters of compressor ``name`` (its ``attrs``, as a dict); {} for none."""
    if name == "none":
        return {}
    attrs = getattr(compressor(name), "attrs", "")
    return dict(kv.split("=", 1) for kv in attrs.split(";") if "=" in kv)


# --------------------------------------------------------------------------------------------
# The virtual compute stream


class Stream:
    """The compute stream's timeline: ``compute(dt)`` advances it by dt and sleeps until then;
    ``waited()`` after a blocking wait moves it to now (the GPU sat idle meanwhile)."""

    def __init__(self) -> None:
        self.t = time.perf_counter()

    def compute(self, dt: float) -> None:
        self.t += dt
        left = self.t - time.perf_counter()
        if left > 0:
            time.sleep(left)

    def waited(self) -> None:
        self.t = max(self.t, time.perf_counter())

    def now(self) -> float:
        """Where the stream is (its deadline, or now when it is idle)."""
        return max(self.t, time.perf_counter())


class Layer:
    """A layer of the replay: its tensors (indices in forward order) and scaled times."""

    def __init__(self, name: str, tensors: list[int], fwd_s: float, bwd_s: float) -> None:
        self.name, self.tensors, self.fwd_s, self.bwd_s = name, tensors, fwd_s, bwd_s


class Replay:
    """The model's tensors (forward order), the dummy module holding them, and the layers."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.profile = profiles.profile(args.model)
        self.scale = profiles.link_scale(args.link_gbit) * args.time_scale
        self.tensors = self.profile.forward_tensors
        self.shapes = [t.shape if args.shrink == 1 else (max(1, math.ceil(t.numel / args.shrink)),)
                       for t in self.tensors]
        self.layers: list[Layer] = []
        index = 0
        for layer in self.profile.layers:
            idx = list(range(index, index + len(layer.tensors)))
            index += len(idx)
            self.layers.append(Layer(layer.name, idx, layer.fwd_s * self.scale, layer.bwd_s * self.scale))
        self.compute_s = self.profile.iteration_s * self.scale
        self.nbytes = sum(math.prod(s) * 4 for s in self.shapes)
        self.module = build_module([t.name for t in self.tensors], self.shapes)
        self.params = [p for _, p in self.module.named_parameters()]
        self.names = [t.name for t in self.tensors]


def build_module(names: Sequence[str], shapes: Sequence[tuple[int, ...]]) -> nn.Module:
    """A module whose named_parameters() are ``names`` (dotted paths) with ``shapes``, in this
    order.  The parameters are uninitialised (torch.empty: no memory is touched)."""
    root = nn.Module()
    for name, shape in zip(names, shapes):
        path, leaf = name.rsplit(".", 1) if "." in name else ("", name)
        mod = root
        for seg in filter(None, path.split(".")):
            if seg not in mod._modules:
                mod.add_module(seg, nn.Module())
            mod = mod._modules[seg]
        mod.register_parameter(leaf, nn.Parameter(torch.empty(shape)))
    got = [n for n, _ in root.named_parameters()]
    if got != list(names):
        raise RuntimeError("the dummy module does not reproduce the parameter order")
    return root


# --------------------------------------------------------------------------------------------
# Communication: byteps replay, DDP replay


class CheckError(RuntimeError):
    pass


def _check(value: float, expected: float, what: str) -> None:
    if abs(value - expected) > 1e-4 * max(1.0, abs(expected)):
        raise CheckError(f"{what}: averaged marker {value} != {expected}")


class BytePSComm:
    """push_pull per gradient, per-tensor waits (the byteps modes)."""

    def __init__(self, replay: Replay, priority: bool, check: bool, compression: str = "none") -> None:
        import byteps.torch as bps  # noqa: PLC0415
        from byteps import _basics  # noqa: PLC0415
        from byteps.torch import ops  # noqa: PLC0415

        self.bps, self.replay, self.check = bps, replay, check
        self.rank, self.size = bps.rank(), bps.size()
        self.grads = [torch.zeros(s) for s in replay.shapes]
        for p, g in zip(replay.params, self.grads):
            p.grad = g
        params = compression_params(compression)
        declare_params = getattr(_basics.core(), "declare_tensor_params", None)
        if params and declare_params is None:
            raise SystemExit(f"model_shaped: --compression {compression}: this byteps core has no "
                             f"declare_tensor_params (issue 32's per-name compression parameters)")
        # Declared in backward order, in both modes (see the module docstring).
        for i in reversed(range(len(self.grads))):
            if params:  # before the declaration: every push_pull of the name carries them
                declare_params(_basics.core_name("Gradient." + replay.names[i]), params)
            ops.declare_tensor("Gradient." + replay.names[i], self.grads[i])
        self.priority = [-i if priority else 0 for i in range(len(self.grads))]
        self.handles: dict[int, int] = {}
        self.expected = (self.size + 1) / 2.0

    def barrier(self, name: str) -> None:
        self.bps.push_pull_inplace(torch.zeros(1), name="model_shaped." + name)

    def ready(self, layer: Layer) -> None:
        for i in reversed(layer.tensors):
            g = self.grads[i]
            g.view(-1)[0] = float(self.rank + 1)
            self.handles[i] = self.bps.push_pull_async_inplace(
                g, average=True, name="Gradient." + self.replay.names[i], priority=self.priority[i])

    def wait_layer(self, layer: Layer, stream: Stream) -> None:
        for i in layer.tensors:
            self._wait(i, stream)

    def _wait(self, i: int, stream: Stream) -> None:
        handle = self.handles.pop(i, None)
        if handle is None:
            return
        if self.bps.poll(handle):
            self.bps.synchronize(handle)
        else:
            self.bps.synchronize(handle)
            stream.waited()
        if self.check:
            _check(float(self.grads[i].view(-1)[0]), self.expected, self.replay.names[i])

    def drain(self, stream: Stream) -> None:
        for i in list(self.handles):
            self._wait(i, stream)

    def finish(self) -> None:
        self.bps.shutdown()


def ddp_buckets(shapes: Sequence[tuple[int, ...]], elem_bytes: int = 4) -> list[list[int]]:
    """DDP's buckets (tensor indices, forward order numbering) once it has rebuilt them in
    gradient-ready order: tensors taken in backward order, a bucket closed as soon as it
    holds at least its cap (1 MiB for the first, 25 MiB after), as
    ``torch.distributed._compute_bucket_assignment_by_size`` does."""
    buckets: list[list[int]] = [[]]
    size, cap = 0, DDP_FIRST_BUCKET_BYTES
    for i in reversed(range(len(shapes))):
        buckets[-1].append(i)
        size += math.prod(shapes[i]) * elem_bytes
        if size >= cap:
            buckets.append([])
            size, cap = 0, DDP_BUCKET_BYTES
    return [b for b in buckets if b]


class DDPComm:
    """DDP's bucketed all-reduce over gloo (the ddp mode)."""

    def __init__(self, replay: Replay, check: bool) -> None:
        import torch.distributed as dist  # noqa: PLC0415

        self.dist, self.replay, self.check = dist, replay, check
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.buckets = ddp_buckets(replay.shapes)
        self.flats, self.grads = [], [None] * len(replay.shapes)
        for b in self.buckets:  # gradient_as_bucket_view: the grads are views of the bucket
            flat = torch.zeros(sum(math.prod(replay.shapes[i]) for i in b))
            offset = 0
            for i in b:
                n = math.prod(replay.shapes[i])
                self.grads[i] = flat[offset:offset + n].view(replay.shapes[i])
                replay.params[i].grad = self.grads[i]
                offset += n
            self.flats.append(flat)
        self.bucket_of = {i: k for k, b in enumerate(self.buckets) for i in b}
        self.pending = [len(b) for b in self.buckets]
        self.next_bucket = 0
        self.works: list = []
        self.expected = (self.size + 1) / 2.0

    def barrier(self, name: str) -> None:
        del name
        self.dist.barrier()

    def ready(self, layer: Layer) -> None:
        for i in reversed(layer.tensors):
            self.pending[self.bucket_of[i]] -= 1
        # Buckets go out in order, each once all its gradients are ready.
        while self.next_bucket < len(self.buckets) and self.pending[self.next_bucket] == 0:
            flat = self.flats[self.next_bucket]
            flat[0] = float(self.rank + 1)
            flat.div_(self.size)
            self.works.append((self.next_bucket, self.dist.all_reduce(flat, async_op=True)))
            self.next_bucket += 1

    def wait_layer(self, layer: Layer, stream: Stream) -> None:
        if layer is self.replay.layers[0]:
            self.drain(stream)

    def drain(self, stream: Stream) -> None:
        for k, work in self.works:
            if work.is_completed():
                work.wait()
            else:
                work.wait()
                stream.waited()
            if self.check:
                _check(float(self.flats[k][0]), self.expected, f"bucket {k}")
        self.works = []
        self.pending = [len(b) for b in self.buckets]
        self.next_bucket = 0

    def finish(self) -> None:
        _benchmark().finish_gloo()


# --------------------------------------------------------------------------------------------
# Cross-checks with the real plugins: autograd drives DistributedOptimizer / DDP


class _LayerFn(torch.autograd.Function):
    """Forward: sleeps the layer's forward time.  Backward: sleeps its backward time and
    returns (zero) gradients for the layer's parameters."""

    @staticmethod
    def forward(ctx, x, stream, layer, *params):
        stream.compute(layer.fwd_s)
        ctx.stream, ctx.layer = stream, layer
        ctx.shapes = [p.shape for p in params]
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        ctx.stream.compute(ctx.layer.bwd_s)
        zero = torch.zeros((), dtype=grad.dtype)
        # Broadcast zeros: accumulated in place into p.grad, no new gradient memory.
        return (grad, None, None, *[zero.expand(s) for s in ctx.shapes])


class ReplayNet(nn.Module):
    """The layers' chain; with ``pre_hooks``, each layer first runs the forward pre-hooks of the
    dummy modules that hold its parameters (CrossBarrier's waits for their updates)."""

    def __init__(self, replay: Replay, stream: Stream, pre_hooks: bool = False) -> None:
        super().__init__()
        self.inner = replay.module
        self.replay, self.stream = replay, stream
        self.owners = [[] for _ in replay.layers]
        if pre_hooks:
            owner_of = {id(p): m for m in replay.module.modules() for p in m.parameters(recurse=False)}
            for layer, owners in zip(replay.layers, self.owners):
                for i in layer.tensors:
                    m = owner_of[id(replay.params[i])]
                    if all(m is not o for o in owners):
                        owners.append(m)

    def forward(self, x):
        for layer, owners in zip(self.replay.layers, self.owners):
            if owners:
                start = time.perf_counter()
                for m in owners:
                    for hook in m._forward_pre_hooks.values():
                        hook(m, (x,))
                if time.perf_counter() - start > 1e-4:  # it really waited: the stream sat idle
                    self.stream.waited()
            x = _LayerFn.apply(x, self.stream, layer, *[self.replay.params[i] for i in layer.tensors])
        return x


class _NullOptimizer(torch.optim.Optimizer):
    """Applies nothing (the update's time is part of the calibrated compute)."""

    def __init__(self, params) -> None:
        super().__init__(params, {})

    def step(self, closure=None):
        del closure


class _NullSGD(torch.optim.SGD):
    """An SGD (CrossBarrier takes SGD, Adam or RMSprop only) that applies nothing."""

    def __init__(self, params) -> None:
        super().__init__(params, lr=0.0)

    def step(self, closure=None):
        del closure


class NullComm:
    """No communication (the compute mode): only the start and end barriers go through byteps."""

    def __init__(self) -> None:
        import byteps.torch as bps  # noqa: PLC0415

        self.bps = bps

    def barrier(self, name: str) -> None:
        self.bps.push_pull_inplace(torch.zeros(1), name="model_shaped." + name)

    def ready(self, layer: Layer) -> None:
        del layer

    def wait_layer(self, layer: Layer, stream: Stream) -> None:
        del layer, stream

    def drain(self, stream: Stream) -> None:
        del stream

    def finish(self) -> None:
        self.bps.shutdown()


class AutogradRunner:
    """One iteration through autograd with the real DistributedOptimizer or DDP."""

    def __init__(self, replay: Replay, stream: Stream, mode: str, compression: str = "none") -> None:
        self.replay, self.stream, self.mode = replay, stream, mode
        for p in replay.params:
            p.grad = torch.zeros_like(p)
        net = ReplayNet(replay, stream, pre_hooks=mode == "byteps-cross-barrier")
        if mode == "ddp-torch":
            import torch.distributed as dist  # noqa: PLC0415

            self.dist = dist
            self.net = torch.nn.parallel.DistributedDataParallel(net, gradient_as_bucket_view=True)
            self.optimizer = _NullOptimizer(replay.module.parameters())
        else:
            import byteps.torch as bps  # noqa: PLC0415

            self.bps, self.net = bps, net
            if mode == "byteps-cross-barrier":
                from byteps.torch.cross_barrier import CrossBarrier  # noqa: PLC0415

                self.optimizer = CrossBarrier(replay.module, _NullSGD(replay.module.parameters()),
                                              named_parameters=replay.module.named_parameters())
            else:
                self.optimizer = bps.DistributedOptimizer(_NullOptimizer(replay.module.parameters()),
                                                          named_parameters=replay.module.named_parameters(),
                                                          compression=compressor(compression))
        self.x = torch.zeros(())

    def barrier(self, name: str) -> None:
        if self.mode == "ddp-torch":
            self.dist.barrier()
        else:
            self.bps.push_pull_inplace(torch.zeros(1), name="model_shaped." + name)

    def iteration(self) -> None:
        out = self.net(self.x)
        out.backward()  # ddp-torch: waits for every bucket at its end
        self.optimizer.step()  # byteps-optimizer: waits for every gradient; cross-barrier: returns
        self.stream.waited()

    def finish(self) -> None:
        if self.mode == "ddp-torch":
            _benchmark().finish_gloo()
        else:
            if self.mode == "byteps-cross-barrier":
                self.optimizer.stop()  # the last updates, before the core goes
            self.bps.shutdown()


# --------------------------------------------------------------------------------------------
# Joining the job


_BENCH = None


def _benchmark():
    """examples/pytorch/benchmark_byteps.py as a module (for init_gloo / finish_gloo)."""
    global _BENCH
    if _BENCH is None:
        path = REPO / "examples" / "pytorch" / "benchmark_byteps.py"
        spec = importlib.util.spec_from_file_location("_benchmark_byteps", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _BENCH = module
    return _BENCH


def join(args: argparse.Namespace) -> tuple[int, int]:
    """Joins the job (byteps, or gloo for the ddp modes); returns (rank, workers)."""
    if args.credit is not None:
        os.environ["BYTEPS_SCHEDULING_CREDIT"] = str(args.credit)
    import byteps.torch as bps  # noqa: PLC0415

    if args.mode in ("ddp", "ddp-torch"):
        env = os.environ
        world = int(env.get("WORLD_SIZE", env.get("DMLC_NUM_WORKER", "1")))
        if "DMLC_ROLE" in env and "MASTER_ADDR" not in env and world > 1:
            bps.init()
            env["MASTER_ADDR"] = bps.broadcast_object(env.get("DMLC_NODE_HOST", "127.0.0.1"), root_rank=0,
                                                      name="model_shaped_master_addr")
        return _benchmark().init_gloo()
    bps.init()
    return bps.rank(), bps.size()


# --------------------------------------------------------------------------------------------
# Main


def timed(args: argparse.Namespace, stream: Stream, iteration, workers: int, log) -> tuple[list[float], list[float]]:
    """Runs ``iteration()`` warm-up + timed times; returns the timed iterations' durations and
    stalls.  An iteration starts when its forward may start (the stream is free) and ends where
    the next one starts, so each duration includes the wait for the previous gradients."""
    stream.waited()  # the stream was idle until now (joining, barrier)
    marks, stalls = [], []
    for _ in range(args.warmup + args.iters):
        marks.append(stream.now())
        stalls.append(iteration())
    marks.append(stream.now())
    durations = [marks[i + 1] - marks[i] for i in range(args.warmup, args.warmup + args.iters)]
    for k, d in enumerate(durations):
        log(f"iter {k}: {d:.3f} s, {BATCH * workers / d:.3f} img/s, stall {stalls[args.warmup + k]:.3f} s")
    return durations, stalls[args.warmup:]


def replay_iteration(replay: Replay, comm, stream: Stream) -> float:
    """One forward + backward of the replay; returns the time the stream waited."""
    t0 = stream.now()
    for layer in replay.layers:
        comm.wait_layer(layer, stream)
        stream.compute(layer.fwd_s)
    for layer in reversed(replay.layers):
        stream.compute(layer.bwd_s)
        comm.ready(layer)
    return max(0.0, (stream.now() - t0) - replay.compute_s)


def autograd_iteration(replay: Replay, runner: "AutogradRunner") -> float:
    t0 = runner.stream.now()
    runner.iteration()
    return max(0.0, (runner.stream.now() - t0) - replay.compute_s)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    replay = Replay(args)
    rank, workers = join(args)

    def log(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    check = not args.no_check
    if args.mode in ("byteps", "byteps-nopriority"):
        comm = BytePSComm(replay, priority=args.mode == "byteps", check=check, compression=args.compression)
    elif args.mode == "ddp":
        comm = DDPComm(replay, check=check)
    elif args.mode == "compute":
        comm = NullComm()
    else:
        comm = AutogradRunner(replay, Stream(), args.mode, args.compression)
    log(f"model-shaped {args.model} ({args.mode}): {len(replay.tensors)} tensors, "
        f"{replay.nbytes / 1e6:.1f} MB of gradients, {workers} worker(s); compute "
        f"{replay.compute_s:.3f} s per iteration (V100 {replay.profile.iteration_s * 1e3:.1f} ms "
        f"x {replay.scale:g})")
    comm.barrier("start")
    if isinstance(comm, AutogradRunner):
        durations, stalls = timed(args, comm.stream, lambda: autograd_iteration(replay, comm), workers, log)
    else:
        stream = Stream()
        durations, stalls = timed(args, stream, lambda: replay_iteration(replay, comm, stream), workers, log)
        comm.drain(stream)  # the last iteration's gradients (untimed)
    comm.barrier("end")
    iter_s = statistics.mean(durations)
    img_s = BATCH * workers / iter_s
    dilation = profiles.link_scale(args.link_gbit) * args.time_scale
    result = {
        "model": args.model, "mode": args.mode, "workers": workers, "compression": args.compression,
        "servers": int(os.environ.get("DMLC_NUM_SERVER", "0")) if args.mode.startswith("byteps") else 0,
        "img_per_sec": round(img_s, 4), "img_per_sec_v100": round(img_s * dilation, 2),
        "iter_time_s": round(iter_s, 6),
        "iter_time_s_stdev": round(statistics.stdev(durations), 6) if len(durations) > 1 else 0.0,
        "compute_time_s": round(replay.compute_s, 6),
        "efficiency": round(replay.compute_s / iter_s, 4),
        "stall_s": round(statistics.mean(stalls), 6),
        "bytes": replay.nbytes, "model_bytes": replay.profile.nbytes, "tensors": len(replay.tensors),
        "link_gbit": args.link_gbit, "time_scale": args.time_scale, "shrink": args.shrink,
        "iters": args.iters, "warmup": args.warmup, "batch": BATCH,
        "credit": os.environ.get("BYTEPS_SCHEDULING_CREDIT"),
        "partition_bytes": os.environ.get("BYTEPS_PARTITION_BYTES"),
    }
    log("RESULT " + json.dumps(result))
    comm.finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
