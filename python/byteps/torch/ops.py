"""byteps.torch operations on torch tensors (the layer under DistributedOptimizer & co.).

Each operation sums a tensor elementwise over all ``size()`` workers (``average=True``: divides
by ``size()``, floor division for integer dtypes, done in the core).  Tensors must be dense,
contiguous CPU tensors of a dtype in :data:`SUPPORTED_DTYPES`; the plugin hands the core the
tensor's data pointer and byte count, and keeps the input and output tensors alive until the
handle is synchronized.  An async operation's tensors must not be modified (in place: not read
either) until then.

Names: a user name ``n`` is the core tensor ``"byteps." + n``; every worker must use the same
name for the same logical tensor (same shape and dtype) and first use (or declare) the names in
the same order.  Unnamed calls get a fresh per-process name each (``"byteps.noname.<n>"``, not
BytePS's single colliding name), so they must be made in the same order on every worker.

Errors come from the core as exceptions carrying its message: ValueError for invalid
operations (e.g. workers disagreeing on a tensor's size), ``byteps._core.BytePSError`` (a
RuntimeError) for failed or timed-out ones.
"""

from __future__ import annotations

import os
import threading
from typing import Optional

import torch

from .. import _basics
from .._tensor_view import HOST_DEVICE, CoreCodes, check_layout, cuda_device, unsupported_dtype
from .._basics import local_rank, local_size, poll, rank, shutdown, size, suspend, synchronize
from .compression import Compression, attrs_for, attrs_of

__all__ = [
    "init", "shutdown", "suspend", "resume", "rank", "size", "local_rank", "local_size", "declare",
    "push_pull", "push_pull_async", "push_pull_async_inplace", "byteps_push_pull", "push_pull_inplace",
    "push_pull_group_sync_inplace", "byteps_torch_set_num_grads", "poll", "synchronize",
    "SUPPORTED_DTYPES", "declare_tensor", "set_learning_rate",
]

# torch dtype -> name of the core's dtype code constant (byteps._tensor_view.CORE_DTYPES).
_CODES = {
    torch.float32: "FLOAT32", torch.float64: "FLOAT64", torch.float16: "FLOAT16", torch.bfloat16: "BFLOAT16",
    torch.uint8: "UINT8", torch.int8: "INT8", torch.int32: "INT32", torch.int64: "INT64",
    torch.int16: "INT16", torch.bool: "BOOL",
}
SUPPORTED_DTYPES = tuple(str(dt).replace("torch.", "") for dt in _CODES)
_CORE_CODES = CoreCodes(_CODES)

# Per broadcast_object name, the buffer size of its first broadcast in this session (see
# byteps.torch.functions.broadcast_object); restarted by init() when not initialized.  (The names
# resume() declares again are kept by the core.)
object_capacity: dict[str, int] = {}


def init(lazy: bool = True) -> None:
    """Joins the job; see :func:`byteps._basics.init`.  Idempotent."""
    if not _basics.is_initialized():
        object_capacity.clear()
    _basics.init(lazy)


def dtype_code(dtype: torch.dtype) -> int:
    """The core's code for a torch dtype; TypeError naming the dtype when unsupported."""
    code = _CORE_CODES[dtype]
    if code is None:
        raise unsupported_dtype("tensors", dtype, SUPPORTED_DTYPES)
    return code


def _label(tensor) -> str:
    return f"tensor of shape {tuple(tensor.shape)}"


def check_tensor(tensor) -> int:
    """Validates a tensor for push_pull and returns its dtype code.

    Raises:
        TypeError: not a tensor, or an unsupported dtype (named).
        ValueError: not dense, or not contiguous; on a device other than the CPU and the
            process's current CUDA device; a CUDA tensor in a byteps built without CUDA (how to
            rebuild) or in a process where torch sees no GPU.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"byteps.torch needs a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        if not tensor.is_cuda:
            raise ValueError(f"tensors on device {tensor.device} are not supported; pass a CPU or CUDA tensor")
        core = _basics.core()
        if not core.device_built(core.DEVICE_CUDA):
            raise ValueError(f"this byteps was built without CUDA: rebuild with the CUDA toolkit installed "
                             f"(pip install . or scripts/build.sh find it under /usr/local/cuda), or pass a CPU "
                             f"tensor (tensor on {tensor.device})")
        if not torch.cuda.is_available():
            raise ValueError(f"tensor on {tensor.device}, but torch finds no CUDA device in this process "
                             f"(torch.cuda.is_available() is False)")
        current = torch.cuda.current_device()
        if tensor.device.index != current:
            raise ValueError(f"tensor on {tensor.device}, but this process's GPU is cuda:{current} "
                             f"(torch.cuda.set_device(bps.local_rank()) before creating tensors)")
    if tensor.layout != torch.strided:
        raise ValueError(f"{tensor.layout} tensors are not supported; pass a dense tensor (tensor.to_dense())")
    code = dtype_code(tensor.dtype)
    check_layout(tensor.is_contiguous(), True, tensor, _label, "", "tensor.contiguous()")
    return code


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _device_of(tensor: torch.Tensor) -> tuple[int, int, int]:
    """(kind, index, stream) for the core: a CUDA tensor's device and torch's current stream there
    (its handle; 0, the null stream, for the default stream; handle 1, cudaStreamLegacy, goes to the
    core as 0, the same stream in a core built without per-thread default streams, as it is)."""
    if not tensor.is_cuda:
        return HOST_DEVICE
    return cuda_device(_basics.core(), tensor.device.index, torch.cuda.current_stream(tensor.device).cuda_stream)


def _start(tensor: torch.Tensor, output: torch.Tensor, code: int, average: bool, name: Optional[str],
           priority: int, compression=None) -> int:
    return _basics.start(name, tensor.data_ptr(), output.data_ptr(), _nbytes(tensor), code, average, priority,
                         tensor, output, device=_device_of(tensor),
                         attrs=attrs_for(compression, tensor.dtype.is_floating_point))


def broadcast_async_inplace(tensor: torch.Tensor, root_rank: int, name: Optional[str] = None,
                            priority: int = 0) -> int:
    """Starts replacing ``tensor`` by ``root_rank``'s, in place (the servers forward the root's
    bytes; the other ranks send none); returns a handle for :func:`synchronize`."""
    code = check_tensor(tensor)
    return _basics.start_broadcast(name, tensor.data_ptr(), _nbytes(tensor), code, root_rank, priority, tensor,
                                   device=_device_of(tensor))


def allgather_async_into(tensor: torch.Tensor, output: torch.Tensor, offset_bytes: int, name: Optional[str] = None,
                         priority: int = 0) -> int:
    """Starts an allgather in which ``tensor``'s bytes land at ``offset_bytes`` of ``output`` on
    every worker, next to the other workers' (the servers concatenate); returns a handle for
    :func:`synchronize`, which returns ``output``."""
    code = check_tensor(tensor)
    if check_tensor(output) != code:
        raise TypeError(f"allgather: output dtype {output.dtype} differs from the input's {tensor.dtype}")
    if output.device != tensor.device:
        raise ValueError(f"allgather: output on {output.device}, input on {tensor.device}; use one device")
    return _basics.start_allgather(name, tensor.data_ptr(), _nbytes(tensor), output.data_ptr(), _nbytes(output),
                                   offset_bytes, code, priority, tensor, output, device=_device_of(tensor))


def declare(name: str) -> int:
    """Declares tensor ``name`` (in the same order on every worker) and returns its key.

    Optional: a push_pull declares its name on first use.  Declaring up front fixes the keys
    (and so the servers) of a training loop's tensors regardless of the order they first run in.
    """
    return _basics.declare(name)


def declare_tensor(name: str, tensor_or_nbytes=None, dtype=None, **byteps_kwargs) -> Optional[int]:
    """Declares ``name`` with its size: a tensor (its bytes and dtype), or a byte count and a
    torch dtype.  The core places its partitions on the servers by bytes right away.

    MXNet style: ``byteps_*`` keyword arguments (``byteps_compressor_type="topk"``,
    ``byteps_compressor_k=0.01``, ``byteps_ef_type="vanilla"``...) are compression parameters
    the core remembers for ``name`` and applies to its later push_pulls that carry none (see
    docs/compression.md; a bad key or value raises, naming the tensor).  Returns the key when a
    size was given, else None.
    """
    bad = sorted(k for k in byteps_kwargs if not k.startswith("byteps_"))
    if bad:
        raise TypeError(f"declare_tensor({name!r}): unexpected keyword argument {bad[0]!r} "
                        f"(compression parameters start with byteps_)")
    if byteps_kwargs:
        _basics.declare_tensor_params(name, byteps_kwargs)
    if tensor_or_nbytes is None:
        return None
    if isinstance(tensor_or_nbytes, torch.Tensor):
        nbytes, code = _nbytes(tensor_or_nbytes), dtype_code(tensor_or_nbytes.dtype)
    else:
        nbytes, code = int(tensor_or_nbytes), dtype_code(dtype)
    return _basics.declare_tensor(name, nbytes, code)


def push_pull_async(tensor: torch.Tensor, average: bool = True, name: Optional[str] = None, version: int = 0,
                    priority: int = 0, compression=None) -> int:
    """Starts summing ``tensor`` over all workers into a new tensor; returns a handle.

    ``tensor`` is not modified; :func:`synchronize` returns the result.  A larger ``priority``
    is sent first.  ``version`` is accepted for compatibility and ignored.  ``compression``: a
    compressor of :class:`Compression` (or an attrs string), done by the core between hosts.
    """
    del version
    code = check_tensor(tensor)
    output = torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device)
    return _start(tensor, output, code, average, name, priority, compression)


def push_pull_async_inplace(tensor: torch.Tensor, average: bool = True, name: Optional[str] = None,
                            version: int = 0, priority: int = 0, compression=None) -> int:
    """Starts summing ``tensor`` over all workers in place; returns a handle (``compression``:
    as in :func:`push_pull_async`)."""
    del version
    code = check_tensor(tensor)
    return _start(tensor, tensor, code, average, name, priority, compression)


byteps_push_pull = push_pull_async_inplace


def push_pull_inplace(tensor: torch.Tensor, average: bool = True, name: Optional[str] = None, version: int = 0,
                      priority: int = 0) -> torch.Tensor:
    """Replaces ``tensor`` by its sum (or mean) over all workers and returns it."""
    return synchronize(push_pull_async_inplace(tensor, average, name, version, priority))


class _PushPull(torch.autograd.Function):
    """push_pull as an autograd op: the gradient of the result is push_pulled too."""

    @staticmethod
    def forward(ctx, tensor, average, name, version, priority, attrs):
        ctx.average, ctx.name, ctx.version, ctx.priority, ctx.attrs = average, name, version, priority, attrs
        return synchronize(push_pull_async(tensor, average, name, version, priority, attrs))

    @staticmethod
    def backward(ctx, grad_output):
        grad = synchronize(push_pull_async(grad_output.contiguous(), ctx.average, ctx.name, ctx.version,
                                           ctx.priority, ctx.attrs))
        return grad, None, None, None, None, None


def push_pull(tensor: torch.Tensor, average: bool = True, name: Optional[str] = None, version: int = 0,
              priority: int = 0, compression=Compression.none) -> torch.Tensor:
    """The sum (or mean) of ``tensor`` over all workers, as a new tensor (differentiable: the
    gradient flowing back is push_pulled under the same name).

    ``name`` is required, as in BytePS.  ``compression``: a compressor of :class:`Compression`
    (its attrs go to the core, which compresses between hosts); a custom one (no ``attrs``) is
    applied before and undone after, in Python.
    """
    assert name is not None, "To manually call push_pull, you must specify a name by name=..."
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"byteps.torch needs a torch.Tensor, got {type(tensor).__name__}")
    compressed, ctx = compression.compress(tensor)
    summed = _PushPull.apply(compressed, average, name, version, priority, attrs_of(compression))
    return compression.decompress(summed, ctx)


def set_learning_rate(lr: float) -> None:
    """Tells the core the current learning rate, which error feedback (``ef="vanilla"``) needs;
    the DistributedOptimizers call it at each step from ``param_groups[0]["lr"]``."""
    _basics.set_learning_rate(lr)


# ---- compatibility with byteps.torch.ops of BytePS (the group-sync counter used by its DDP)

_group = {"num_grads": 1, "count": 0}
_group_lock = threading.Lock()


def byteps_torch_set_num_grads(num_grads: int) -> None:
    """Sets the group size counted by :func:`push_pull_group_sync_inplace` and resets the count."""
    with _group_lock:
        _group["num_grads"], _group["count"] = int(num_grads), 0


def push_pull_group_sync_inplace(tensor: torch.Tensor, average: bool = True, name: Optional[str] = None,
                                 version: int = 0, priority: int = 0) -> tuple[int, int]:
    """:func:`push_pull_async_inplace` that also counts calls: returns ``(handle, count)``, the
    count wrapping to 0 after it reaches the number set by :func:`byteps_torch_set_num_grads`."""
    handle = push_pull_async_inplace(tensor, average, name, version, priority)
    with _group_lock:
        _group["count"] += 1
        count = _group["count"]
        if count >= _group["num_grads"]:
            _group["count"] = 0
    return handle, count


# ---- elastic training


def resume(num_workers: int, num_servers: int, global_rank: Optional[int] = None, context=None) -> None:
    """Rejoins a (new) job after :func:`suspend`, and declares again every tensor declared or used
    before, in the same order (so keys and server placement are the same): the core's
    ``byteps_resume``.

    Sets ``DMLC_NUM_WORKER``, ``DMLC_NUM_SERVER`` and (if given) ``BYTEPS_GLOBAL_RANK``, shuts
    down if still initialized, then joins again.  The rest of the new job's environment
    (scheduler address and port, ``DMLC_WORKER_ID``...) must already be set: a job with other
    counts has its own scheduler.  ``context`` is accepted for compatibility and ignored.
    Handles not yet synchronized are forgotten.
    """
    del context
    _basics.resume(num_workers, num_servers, global_rank)
