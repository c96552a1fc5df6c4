"""byteps for PyTorch: ``import byteps.torch as bps`` (the BytePS / Horovod API).

    bps.init()
    model.load_state_dict(...)                       # or any init
    optimizer = bps.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    bps.broadcast_parameters(model.state_dict(), root_rank=0)
    bps.broadcast_optimizer_state(optimizer, root_rank=0)
    for x, y in data:                                # this worker's share of each batch
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()              # gradients push_pulled as they are ready
        optimizer.step()                             # waits, applies the average over workers

or wrap the model instead: ``byteps.torch.parallel.DistributedDataParallel(model)``.

This build takes CPU tensors (dense, contiguous; uint8, int8, int32, int64, float16, bfloat16,
float32, float64), and CUDA tensors of the process's current device where the core was built with
CUDA.  See :mod:`byteps.torch.ops` for the
operations and naming rules, :mod:`byteps._basics` for init/shutdown.  Unlike BytePS, rank() and
size() raise before init(), and unnamed tensors do not collide; ``BYTEPS_ENABLE_ASYNC=1`` runs
synchronous training with a warning.  Horovod's whole PyTorch API works too (``import
byteps.torch as hvd``): :mod:`byteps.torch.horovod`, docs/migration.md.
"""

from __future__ import annotations

from .._basics import get_pushpull_speed
from . import elastic
from .compression import Compression
from .functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from .horovod import *  # noqa: F401,F403 - Horovod's names
from .horovod import __all__ as _horovod_names
from .ops import (
    byteps_push_pull, byteps_torch_set_num_grads, declare, declare_tensor, local_rank, local_size, push_pull,
    push_pull_async, push_pull_async_inplace, push_pull_group_sync_inplace, push_pull_inplace, rank, resume,
    set_learning_rate, size, suspend,
)
from .optimizer import DistributedOptimizer, _DistributedOptimizer
from .sync_batch_norm import SyncBatchNorm

__all__ = sorted(set(_horovod_names) | {
    "init", "shutdown", "suspend", "resume", "size", "local_size", "rank", "local_rank", "cross_size",
    "cross_rank", "declare", "push_pull", "push_pull_async", "push_pull_async_inplace", "byteps_push_pull",
    "push_pull_inplace", "push_pull_group_sync_inplace", "byteps_torch_set_num_grads",
    "poll", "synchronize", "broadcast_parameters", "broadcast_optimizer_state", "broadcast_object",
    "Compression", "declare_tensor", "set_learning_rate", "DistributedOptimizer", "_DistributedOptimizer", "get_pushpull_speed", "SyncBatchNorm", "elastic",
})


def cross_size() -> int:
    """Horovod's cross_size: the number of hosts that have a worker of this local rank."""
    return size() // local_size()


def cross_rank() -> int:
    """Horovod's cross_rank: this host's index among them."""
    return rank() // local_size()


def __getattr__(name: str):
    if name in ("BytePSError", "HorovodInternalError"):  # lazily: importing needs no built core
        from .. import _basics  # noqa: PLC0415

        return _basics.error_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
