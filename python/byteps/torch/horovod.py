"""Horovod's collective calls on byteps, so that a Horovod script runs by changing its import.

Every call goes through the summation servers:

* ``allreduce`` family: a push_pull (``op=Average`` divides by the number of workers, ``Sum``
  does not), with Horovod's ``prescale_factor`` / ``postscale_factor`` and ``compression``;
* ``broadcast`` family: the root contributes its tensor and every other worker zeros, so the sum
  is the root's tensor, exactly, for every dtype;
* ``allgather``: the workers first learn every worker's first dimension (an int64 push_pull),
  then each writes its rows at its offset in a zero buffer of the total length and the sum is the
  concatenation (in rank order), exactly.  The sum moves n times the bytes of a concatenation;
  fine for the metadata and small tensors Horovod scripts gather.

What byteps cannot do the same way raises an error that says so: ``op=Adasum``, ``join()``
(workers with uneven numbers of steps), ``process_set`` arguments.

Names: Horovod scripts often leave ``name`` out; then the calls are numbered per kind in call
order (``allreduce.noname.<i>``), which every worker must make in the same order.
"""

from __future__ import annotations

import itertools
import math
import threading
from typing import Optional

import torch

from .. import _basics
from .._basics import rank, size
from .compression import Compression
from . import ops
from .ops import push_pull_async, push_pull_async_inplace

__all__ = [
    "Average", "Sum", "Adasum", "allreduce", "allreduce_async", "allreduce_", "allreduce_async_", "broadcast",
    "broadcast_", "broadcast_async", "broadcast_async_", "allgather", "allgather_async", "join", "synchronize",
]

# Horovod's reduce ops (hvd.Average, hvd.Sum, hvd.Adasum).
Average = "Average"
Sum = "Sum"
Adasum = "Adasum"

_counters = {kind: itertools.count() for kind in ("allreduce", "broadcast", "allgather")}
_counter_lock = threading.Lock()
# Async allreduce handles with a postscale factor or compression: what synchronize must undo.
_pending: dict[int, tuple] = {}


def _name(kind: str, name: Optional[str]) -> str:
    if name is not None:
        return f"{kind}.{name}"
    with _counter_lock:
        return f"{kind}.noname.{next(_counters[kind])}"


def _average(average: Optional[bool], op: Optional[str]) -> bool:
    if op is not None and average is not None:
        raise ValueError("allreduce: give either op= or the deprecated average=, not both")
    if op is None:
        return True if average is None else bool(average)
    if op == Adasum:
        raise ValueError("allreduce: op=Adasum is not supported by byteps (its servers sum); use Average or Sum")
    if op not in (Average, Sum):
        raise ValueError(f"allreduce: unknown op {op!r}; byteps supports Average and Sum")
    return op == Average


def _no_process_set(kwargs: dict, what: str) -> None:
    if kwargs.get("process_set") is not None:
        raise ValueError(f"{what}: process sets are not supported by byteps; every worker takes part in every call")
    unknown = set(kwargs) - {"process_set"}
    if unknown:
        raise TypeError(f"{what}() got unexpected keyword argument(s) {sorted(unknown)}")


def allreduce_async(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
                    op: Optional[str] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                    compression=Compression.none, **kwargs) -> int:
    """Starts the average (``op=Average``, the default) or sum of ``tensor`` over all workers into
    a new tensor; :func:`synchronize` returns it.  ``tensor`` is not modified."""
    _no_process_set(kwargs, "allreduce_async")
    avg = _average(average, op)
    data = tensor * prescale_factor if prescale_factor != 1.0 else tensor
    compressed, ctx = compression.compress(data)
    handle = push_pull_async(compressed.contiguous(), average=avg, name=_name("allreduce", name))
    if postscale_factor != 1.0 or compression is not Compression.none:
        _pending[handle] = (compression, ctx, postscale_factor)
    return handle


def allreduce_async_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
                     op: Optional[str] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
                     **kwargs) -> int:
    """In-place :func:`allreduce_async`: ``tensor`` holds the result once synchronized."""
    _no_process_set(kwargs, "allreduce_async_")
    avg = _average(average, op)
    if prescale_factor != 1.0:
        tensor.mul_(prescale_factor)
    handle = push_pull_async_inplace(tensor, average=avg, name=_name("allreduce", name))
    if postscale_factor != 1.0:
        _pending[handle] = (Compression.none, None, postscale_factor)
    return handle


def synchronize(handle: int, timeout: Optional[float] = None):
    """Waits for ``handle`` and returns its output, with what an async allreduce still owes it
    (its postscale factor, the compression undone); see :func:`byteps._basics.synchronize`."""
    out = _basics.synchronize(handle, timeout)
    compression, ctx, post = _pending.pop(handle, (Compression.none, None, 1.0))
    out = compression.decompress(out, ctx)
    if post != 1.0:
        out.mul_(post)
    return out



def allreduce(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
              compression=Compression.none, op: Optional[str] = None, prescale_factor: float = 1.0,
              postscale_factor: float = 1.0, **kwargs) -> torch.Tensor:
    """The average (``op=Average``, the default) or sum of ``tensor`` over all workers, as a new
    tensor."""
    return synchronize(allreduce_async(tensor, average, name, op, prescale_factor, postscale_factor, compression,
                                   **kwargs))


def allreduce_(tensor: torch.Tensor, average: Optional[bool] = None, name: Optional[str] = None,
               op: Optional[str] = None, prescale_factor: float = 1.0, postscale_factor: float = 1.0,
               **kwargs) -> torch.Tensor:
    """In-place :func:`allreduce`; returns ``tensor``."""
    return synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor, **kwargs))


def _check_root(root_rank: int, what: str) -> None:
    if not isinstance(root_rank, int) or not 0 <= root_rank < size():
        raise ValueError(f"{what}: root_rank={root_rank!r} is not a worker rank (0..{size() - 1})")


def broadcast_async_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None, **kwargs) -> int:
    """Starts replacing ``tensor`` by ``root_rank``'s, in place; returns a handle."""
    _no_process_set(kwargs, "broadcast_async_")
    _check_root(root_rank, "broadcast")
    return ops.broadcast_async_inplace(tensor, root_rank, name=_name("broadcast", name))


def broadcast_async(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None, **kwargs) -> int:
    """Starts broadcasting ``root_rank``'s ``tensor`` into a new tensor; returns a handle."""
    out = tensor.detach().clone() if rank() == root_rank else torch.zeros_like(tensor)
    return broadcast_async_(out.contiguous(), root_rank, name, **kwargs)


def broadcast_(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None, **kwargs) -> torch.Tensor:
    """Replaces ``tensor`` by ``root_rank``'s, in place; returns it."""
    return synchronize(broadcast_async_(tensor, root_rank, name, **kwargs))


def broadcast(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None, **kwargs) -> torch.Tensor:
    """``root_rank``'s ``tensor``, as a new tensor on every worker."""
    return synchronize(broadcast_async(tensor, root_rank, name, **kwargs))


def allgather(tensor: torch.Tensor, name: Optional[str] = None, **kwargs) -> torch.Tensor:
    """The workers' tensors concatenated along the first dimension, in rank order.  The first
    dimension may differ between workers; the other dimensions and the dtype must not."""
    _no_process_set(kwargs, "allgather")
    t = tensor if tensor.dim() > 0 else tensor.reshape(1)
    if t.dim() > 9:
        raise ValueError(f"allgather: {t.dim()} dimensions (at most 9)")
    base = _name("allgather", name)
    # Every worker's first dimension, and every worker's other dimensions (8 slots each), so that
    # all workers see a mismatch and fail alike instead of waiting for each other.
    n, me = size(), rank()
    meta = torch.zeros(n + 8 * n, dtype=torch.int64)
    meta[me] = t.shape[0]
    meta[n + 8 * me:n + 8 * me + t.dim()] = torch.tensor([t.dim(), *t.shape[1:]], dtype=torch.int64)
    meta = synchronize(push_pull_async_inplace(meta, average=False, name=f"{base}.rows"))
    shapes = [tuple(int(x) for x in meta[n + 8 * w + 1:n + 8 * w + int(meta[n + 8 * w])]) for w in range(n)]
    if any(sh != shapes[0] for sh in shapes):
        raise ValueError(f"allgather of '{base}': only the first dimension may differ between workers; their other "
                         f"dimensions are {dict(enumerate(shapes))}")
    counts = [int(x) for x in meta[:size()]]
    out = torch.empty((sum(counts), *t.shape[1:]), dtype=t.dtype, device=t.device)
    row_bytes = math.prod(t.shape[1:]) * t.element_size()
    # The servers concatenate: each worker sends only its rows. A name keeps its size in the core:
    # the total length is part of the data's name.
    handle = ops.allgather_async_into(t.contiguous(), out, sum(counts[:rank()]) * row_bytes,
                                      name=f"{base}.data.{sum(counts)}")
    return synchronize(handle)


def allgather_async(tensor: torch.Tensor, name: Optional[str] = None, **kwargs):
    """Horovod's async allgather cannot be offered: byteps' allgather needs the sizes first."""
    raise ValueError("allgather_async is not supported by byteps (it learns every worker's size first); use "
                     "allgather")


def join(device: int = -1) -> int:
    """Horovod's join (workers with uneven numbers of steps) cannot be offered: byteps needs every
    worker in every push_pull."""
    raise ValueError("join() is not supported by byteps: every worker must make every push_pull (give every worker "
                     "the same number of steps, e.g. drop the last uneven batch)")
