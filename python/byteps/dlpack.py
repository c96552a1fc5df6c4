"""byteps for any array that speaks DLPack: ``import byteps.dlpack as bps``.

NumPy (>= 1.22), PyTorch, CuPy, JAX, TensorFlow (``tf.experimental.dlpack.to_dlpack``) and MXNet
all export their arrays through DLPack; this module reads the pointer, dtype, shape, strides and
device from the DLPack tensor itself, so one code path serves every library::

    bps.init()
    g = torch.ones(1000)                              # or np.ones, cupy.ones, jnp.ones...
    mean = bps.push_pull(g, name="grad.0")            # a new array of g's library: the mean
    h = bps.push_pull_async_inplace(g, average=False, name="grad.1")
    bps.synchronize(h)                                # g now holds the sum

Inputs: an object with ``__dlpack__`` and ``__dlpack_device__``, or a DLPack capsule (a capsule is
consumed: it can be passed once).  Dtypes: int8/16/32/64, uint8, float16/32/64, bfloat16, bool
(one lane); C-contiguous only.  Devices: kDLCPU and kDLCUDAHost (host memory), kDLCUDA (the
core's CUDA device path).

Device arrays: byteps calls ``x.__dlpack__(stream=s)`` with ``s = 1`` (DLPack's code for CUDA's
legacy default stream) unless the call is given ``stream=``: the producer orders its pending
writes before ``s``, the core records its start on ``s`` (the legacy default stream is the core's
null stream) and makes ``s`` wait for the result before the handle completes.  A library that
works on a non-blocking stream of its own passes that stream's handle as ``stream=`` (e.g.
``cupy.cuda.get_current_stream().ptr``), so no extra synchronisation is added.

Results: the in-place calls write into the array (its memory, whatever library owns it) and
return it.  The out-of-place calls allocate the output in the caller's library: NumPy ->
``np.empty``; torch -> ``torch.empty`` on the input's device; others -> ``empty(shape, dtype=)`` of
the array's namespace (``x.__array_namespace__()``, else the package of ``type(x)``, with JAX's
arrays mapped to ``jax.numpy``), checked to be on the input's device; a host array whose library
has no ``empty`` (or a capsule) -> a NumPy buffer, returned through the library's ``from_dlpack``
(a capsule: the NumPy array itself).  A device array whose library has no ``empty``: TypeError
(use the in-place call).

An async call's array must not be modified (in place: not read either) until its handle is
synchronized; byteps keeps the DLPack tensor (and so its memory) alive until then and releases it
(the producer's deleter, once) at :func:`synchronize`.  Names and ordering: as ``byteps.numpy``.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any, Optional

from . import _basics, _tensor_view
from ._basics import declare, init, local_rank, local_size, poll, rank, shutdown, size
from ._tensor_view import DL_CUDA, DL_NUMPY_NAMES, dlpack_view, label

__all__ = [
    "init", "shutdown", "rank", "size", "local_rank", "local_size", "declare", "push_pull", "push_pull_async",
    "push_pull_inplace", "push_pull_async_inplace", "broadcast", "allgather", "poll", "synchronize",
]

# Packages whose array type lives in a module without the array functions.
_NAMESPACES = {"jaxlib": "jax.numpy", "jax": "jax.numpy"}


def __getattr__(name: str):
    if name == "BytePSError":  # lazily, so that importing this module needs no built core
        return _basics.error_type()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _attrs(compression, view) -> str:
    """As byteps.numpy's: an attrs string or a compressor with ``.attrs``; a cast leaves arrays
    that are not floating-point (DLPack codes 2 and 4) alone."""
    if compression is None:
        return ""
    attrs = compression if isinstance(compression, str) else getattr(compression, "attrs", None)
    if not isinstance(attrs, str):
        raise TypeError(f"compression must be an attrs string or a compressor with .attrs, "
                        f"got {type(compression).__name__}")
    floating = view.dl_dtype[0] in (2, 4)
    return "" if not floating and attrs in ("cast=fp16", "cast=bf16") else attrs


def _namespace(x: Any):
    """The array library of ``x`` (its module of array functions), or None."""
    get = getattr(x, "__array_namespace__", None)
    if get is not None:
        try:
            return get()
        except Exception:  # noqa: BLE001 - an optional protocol; fall back to the package
            pass
    root = type(x).__module__.split(".")[0]
    module = _NAMESPACES.get(root, root)
    if module == "builtins":
        return None
    return sys.modules.get(module) or importlib.import_module(module)


def _allocate(x: Any, view, shape: tuple, name: Optional[str]):
    """A new output for ``x``'s result, of ``shape``: (object, data pointer, what to keep alive,
    how synchronize turns the object into the result or None)."""
    np = _tensor_view._np
    t = type(x)
    if np is not None and t is np.ndarray:
        out = np.empty(shape, x.dtype)
        return out, out.ctypes.data, None, None
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(x, torch.Tensor):
        same = shape is view.shape  # x is C-contiguous: so is empty_like's output
        out = torch.empty_like(x) if same else torch.empty(shape, dtype=x.dtype, device=x.device)
        return out, out.data_ptr(), None, None
    ns = None if t.__name__ == "PyCapsule" else _namespace(x)
    empty = getattr(ns, "empty", None)
    if empty is not None and hasattr(x, "dtype"):
        out = empty(shape, dtype=x.dtype)
        out_view = dlpack_view(out, name)
        if (out_view.device_type, out_view.device_id) != (view.device_type, view.device_id):
            lib = getattr(ns, "__name__", type(ns).__name__)
            raise ValueError(f"byteps.dlpack: {label(x, name)} is on DLPack device {view.device_type}:"
                             f"{view.device_id}, but {lib}.empty allocated the output on "
                             f"{out_view.device_type}:{out_view.device_id}; use the in-place call")
        return out, out_view.ptr, out_view.owner, None
    if view.device_type == DL_CUDA:
        raise TypeError(f"byteps.dlpack: cannot allocate an output for {label(x, name)} on its CUDA device: "
                        f"its library has no empty(); use push_pull_inplace / push_pull_async_inplace")
    dt = DL_NUMPY_NAMES[view.dl_dtype[:2]]
    if dt == "bfloat16":
        import ml_dtypes  # noqa: PLC0415,F401 - registers NumPy's bfloat16; ImportError names it
    out = np.empty(shape, dt)
    convert = getattr(ns, "from_dlpack", None)
    return out, out.ctypes.data, None, convert


def push_pull_async(x: Any, average: bool = True, name: Optional[str] = None, priority: int = 0,
                    compression=None, stream: Optional[int] = None) -> int:
    """Starts summing ``x`` over all workers into a new array of ``x``'s library; returns a handle.

    ``x`` is not modified.  :func:`synchronize` returns the result.  ``average``: divide by
    ``size()`` (floor division for integers).  ``compression``: as in byteps.numpy.  ``stream``:
    the consumer stream for a CUDA array (module doc)."""
    view = dlpack_view(x, name, stream)
    out, out_ptr, out_owner, convert = _allocate(x, view, view.shape, name)
    keep = view.owner if out_owner is None else (view.owner, out_owner)
    return _basics.start(name, view.ptr, out_ptr, view.nbytes, view.code, average, priority, keep, out,
                         meta=convert, device=view.device, attrs=_attrs(compression, view))


def push_pull_async_inplace(x: Any, average: bool = True, name: Optional[str] = None, priority: int = 0,
                            compression=None, stream: Optional[int] = None) -> int:
    """Starts summing ``x`` over all workers, in place; returns a handle (:func:`synchronize`
    returns ``x``)."""
    view = dlpack_view(x, name, stream)
    return _basics.start(name, view.ptr, view.ptr, view.nbytes, view.code, average, priority, view.owner, x,
                         device=view.device, attrs=_attrs(compression, view))


def push_pull(x: Any, average: bool = True, name: Optional[str] = None, priority: int = 0,
              compression=None, stream: Optional[int] = None) -> Any:
    """The sum (or mean) of ``x`` over all workers, as a new array of ``x``'s library."""
    return synchronize(push_pull_async(x, average, name, priority, compression, stream))


def push_pull_inplace(x: Any, average: bool = True, name: Optional[str] = None, priority: int = 0,
                      compression=None, stream: Optional[int] = None) -> Any:
    """Replaces ``x`` by its sum (or mean) over all workers and returns it."""
    return synchronize(push_pull_async_inplace(x, average, name, priority, compression, stream))


def broadcast(x: Any, root_rank: int, name: Optional[str] = None, priority: int = 0,
              stream: Optional[int] = None) -> Any:
    """Replaces ``x`` by ``root_rank``'s, in place (every worker passes the same shape and dtype),
    and returns it."""
    view = dlpack_view(x, name, stream)
    h = _basics.start_broadcast(name, view.ptr, view.nbytes, view.code, int(root_rank), priority, view.owner,
                                device=view.device)
    _basics.wait(h)
    return x


def allgather(x: Any, name: Optional[str] = None, priority: int = 0, stream: Optional[int] = None) -> Any:
    """Every worker's ``x`` concatenated along dimension 0, in rank order, as a new array of ``x``'s
    library (dimension 0 may differ between workers; the others must match).  Two steps: the
    workers' row counts (a small host allgather, ``<name>.rows``), then the data."""
    view = dlpack_view(x, name, stream)
    if not view.shape:
        raise ValueError(f"byteps.dlpack: allgather of {label(x, name)}: a 0-d array has no dimension 0 "
                         f"to concatenate along; pass x.reshape(1)")
    np = _tensor_view._np
    base = name if name is not None else _basics.core_name(None)[len("byteps."):]
    n, me = size(), rank()
    rows = np.zeros(n, np.int64)
    mine = np.array([view.shape[0]], np.int64)
    h = _basics.start_allgather(f"{base}.rows", mine.ctypes.data, 8, rows.ctypes.data, 8 * n, 8 * me,
                                _basics.core().INT64, priority, mine, rows)
    _basics.wait(h)
    row_bytes = view.nbytes // view.shape[0] if view.shape[0] else _row_bytes(view)
    total = int(rows.sum())
    out, out_ptr, out_owner, convert = _allocate(x, view, (total,) + tuple(view.shape[1:]), name)
    h = _basics.start_allgather(base, view.ptr, view.nbytes, out_ptr, total * row_bytes,
                                int(rows[:me].sum()) * row_bytes, view.code, priority,
                                (view.owner, out_owner), out, meta=convert, device=view.device)
    return synchronize(h)


def _row_bytes(view) -> int:
    count = 1
    for d in view.shape[1:]:
        count *= d
    return count * view.dl_dtype[1] * view.dl_dtype[2] // 8


def synchronize(handle: int, timeout: Optional[float] = None) -> Any:
    """Waits for ``handle`` and returns its result (the array itself for in-place calls); releases
    the DLPack tensors the call held.  Errors as :func:`byteps._basics.synchronize`."""
    pending = _basics.wait(handle, timeout)
    convert = pending.meta
    return pending.output if convert is None else convert(pending.output)
