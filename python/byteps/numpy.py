"""byteps for NumPy arrays: ``import byteps.numpy as bps``.

The same names and semantics as ``byteps.torch``, over ``numpy.ndarray``::

    bps.init()
    g = np.ones(1000, np.float32)
    mean = bps.push_pull(g, name="grad.0")              # new array: the mean over all workers
    h = bps.push_pull_async_inplace(g, average=False, name="grad.1")
    ...
    bps.synchronize(h)                                  # g now holds the sum

push_pull sums an array elementwise over all ``size()`` workers; ``average=True`` divides by
``size()`` (floor division for integer dtypes, done in the core).  Arrays must be C-contiguous
and of a supported dtype (:data:`SUPPORTED_DTYPES`).  Every worker must use the same name for the
same logical tensor, with the same shape and dtype, and use the names in the same order; unnamed
calls get a fresh per-process name each (``"byteps.noname.<n>"``), so they must be made in the
same order on all workers.  See :mod:`byteps._basics` for init/shutdown and the handle rules.

An array passed to an async call must not be modified (in-place: not read or modified) until its
handle is synchronized; byteps keeps it alive until then.
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from . import _basics, _tensor_view
from ._basics import (declare, get_pushpull_speed, init, local_rank, local_size, poll, rank, resume, shutdown, size,
                      suspend, synchronize)

__all__ = [
    "init", "shutdown", "suspend", "resume", "rank", "size", "local_rank", "local_size", "declare",
    "push_pull", "push_pull_async", "push_pull_async_inplace", "byteps_push_pull",
    "push_pull_inplace", "poll", "synchronize", "get_pushpull_speed", "SUPPORTED_DTYPES", "declare_tensor",
    "set_learning_rate",
]

# The dtype, contiguity and read-only checks live in _tensor_view (shared with byteps.dlpack).
SUPPORTED_DTYPES = _tensor_view.SUPPORTED_DTYPES
_dtype_code = _tensor_view.numpy_dtype_code
_check = _tensor_view.check_numpy


def __getattr__(name: str):
    if name == "BytePSError":  # lazily, so that importing this module needs no built core
        return _basics.error_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _attrs(compression, array: np.ndarray) -> str:
    """The compression attributes of ``compression``: None, an attrs string
    (``"compressor=topk;k=0.01"``), or a compressor of ``byteps.torch.Compression`` (its ``attrs``).
    A cast alone leaves arrays that are not floating-point as they are."""
    if compression is None:
        return ""
    attrs = compression if isinstance(compression, str) else getattr(compression, "attrs", None)
    if not isinstance(attrs, str):
        raise TypeError(f"compression must be an attrs string or a compressor with .attrs, "
                        f"got {type(compression).__name__}")
    floating = _tensor_view.numpy_is_floating(array)
    return "" if not floating and attrs in ("cast=fp16", "cast=bf16") else attrs


def push_pull_async(array: np.ndarray, average: bool = True, name: Optional[str] = None,
                    priority: int = 0, compression=None) -> int:
    """Starts summing ``array`` over all workers into a new array; returns a handle.

    ``array`` is not modified.  :func:`synchronize` returns the result.  A larger ``priority``
    is sent first.  ``compression``: an attrs string (``"compressor=topk;k=0.01;ef=vanilla"``)
    or a compressor of ``byteps.torch.Compression``; the core compresses between hosts
    (docs/compression.md).
    """
    code = _check(array, inplace=False)
    out = np.empty(array.shape, dtype=array.dtype)
    return _basics.start(name, array.ctypes.data, out.ctypes.data, array.nbytes, code, average, priority,
                         array, out, attrs=_attrs(compression, array))


def push_pull_async_inplace(array: np.ndarray, average: bool = True, name: Optional[str] = None,
                            priority: int = 0, compression=None) -> int:
    """Starts summing ``array`` over all workers in place; returns a handle."""
    code = _check(array, inplace=True)
    ptr = array.ctypes.data
    return _basics.start(name, ptr, ptr, array.nbytes, code, average, priority, array, array,
                         attrs=_attrs(compression, array))


byteps_push_pull = push_pull_async_inplace


def push_pull(array: np.ndarray, average: bool = True, name: Optional[str] = None,
              priority: int = 0, compression=None) -> np.ndarray:
    """The sum (or mean) of ``array`` over all workers, as a new array."""
    return synchronize(push_pull_async(array, average, name, priority, compression))


def push_pull_inplace(array: np.ndarray, average: bool = True, name: Optional[str] = None,
                      priority: int = 0, compression=None) -> np.ndarray:
    """Replaces ``array`` by its sum (or mean) over all workers and returns it."""
    return synchronize(push_pull_async_inplace(array, average, name, priority, compression))


def declare_tensor(name: str, **byteps_kwargs) -> None:
    """MXNet's ``byteps_declare_tensor(name, byteps_compressor_type="topk", byteps_compressor_k=0.01, ...)``:
    compression parameters the core applies to later push_pulls of ``name`` that carry none."""
    bad = sorted(k for k in byteps_kwargs if not k.startswith("byteps_"))
    if bad:
        raise TypeError(f"declare_tensor({name!r}): unexpected keyword argument {bad[0]!r} "
                        f"(compression parameters start with byteps_)")
    _basics.declare_tensor_params(name, byteps_kwargs)


def set_learning_rate(lr: float) -> None:
    """Tells the core the current learning rate (error feedback, ``ef=vanilla``, needs it)."""
    _basics.set_learning_rate(lr)
