"""What every Horovod-style call of byteps.torch shares: reduce ops, the error type, process sets,
dtype checks, op names (in-flight tracking), the cross-worker attributes of a call, the scaling
arithmetic, and the handle table (:class:`Work`).

Handles (:mod:`.hvd_handles`): Horovod's ``*_async`` calls return an int from a per-process
counter starting at 1 (:func:`next_handle`); each op call, ``barrier`` included, consumes one, and
unnamed ops are keyed ``"<op>.noname.<handle>"``, so auto-names agree across workers that make
the same calls in the same order.

Errors: local argument checks raise ``ValueError`` on the calling worker only; what the workers
learn together (a cross-worker mismatch, a failed or timed-out operation) raises
:data:`HorovodInternalError` (= ``byteps._core.BytePSError``, a RuntimeError) from ``synchronize``
on every worker.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from typing import Optional

import torch

from .. import _basics
from .._tensor_view import check_layout

# Horovod's reduce ops (plain ints, as its C library's).
Average, Sum, Adasum, Min, Max, Product = 0, 1, 2, 3, 4, 5
OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max", Product: "Product"}
_LEGACY = {name: code for code, name in OP_NAMES.items()}  # byteps' earlier string constants

# Dtypes per op family (Horovod's table, plus bfloat16 for reductions and bool for data moves).
REDUCE_DTYPES = (torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32, torch.float64)
ADASUM_DTYPES = (torch.float16, torch.float32, torch.float64)  # Horovod's; the servers refuse the rest
MOVE_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16,
               torch.float32, torch.float64, torch.bool)


def internal_error_type() -> type:
    """HorovodInternalError: byteps' core error type (so every core failure is catchable as it)."""
    return _basics.error_type()


def internal_error(message: str) -> Exception:
    return internal_error_type()(message)


def resolve_op(op, average, what: str) -> int:
    """Horovod's ``op`` / deprecated ``average`` rules: both → ValueError; ``average`` alone warns."""
    if op is not None and average is not None:
        raise ValueError(f"{what}: the op parameter supersedes average; give either op= or the deprecated "
                         f"average=, not both")
    if op is None:
        if average is None:
            return Average
        warnings.warn("average= is deprecated; use op=hvd.Average or op=hvd.Sum", DeprecationWarning, stacklevel=3)
        return Average if average else Sum
    op = _LEGACY.get(op, op) if isinstance(op, str) else op
    if isinstance(op, bool) or op not in OP_NAMES:
        raise ValueError(f"{what}: unknown reduce op {op!r} (hvd.Average, Sum, Adasum, Min, Max or Product)")
    return op


def check_adasum(process_set, what: str) -> None:
    """Where byteps runs Adasum: the global set.  Any world size works (Horovod needs a power of two
    on CPU; the servers' tree is the same for one).  With several processes per host a host tensor's
    processes combine locally first (the tree in local-rank order), then the servers across hosts:
    Horovod's order when the local size and the host count are powers of two; a CUDA tensor there is
    refused by the core (Horovod's GPU semantics are not built)."""
    if process_set is not None and process_set is not global_process_set:
        raise NotImplementedError(f"{what}: op=Adasum runs on the global process set only (as in Horovod); got "
                                  f"{process_set!r}")


# ---- process sets: hvd_process_sets.py (re-exported at the end of this module)


# ---- tensors, names, attributes


def check_tensor(tensor, allowed, what: str) -> None:
    """Horovod's local checks: a tensor, of a dtype the op takes, contiguous, initialized job."""
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"{what}: expected a torch.Tensor, got {type(tensor).__name__}")
    if not _basics.is_initialized():
        raise internal_error("Horovod has not been initialized; use hvd.init().")
    if tensor.dtype not in allowed:
        names = ", ".join(str(d).replace("torch.", "") for d in allowed)
        raise ValueError(f"Tensor type {tensor.type()} is not supported. ({what} takes {names})")
    if tensor.layout != torch.strided:
        raise ValueError(f"{what}: {tensor.layout} tensors are not supported; pass a dense tensor")
    check_layout(tensor.is_contiguous(), True, (what, tensor), _label, "", "tensor.contiguous()")


def _label(what_tensor: tuple) -> str:
    what, tensor = what_tensor
    return f"{what}: tensor of shape {tuple(tensor.shape)}"


def same_device(tensors, what: str) -> None:
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise internal_error(f"{what}: the tensors of a group are on different devices ({sorted(map(str, devices))})")


_counter = itertools.count(1)
_lock = threading.Lock()
_in_flight: set = set()


_set_handles = 0     # handles consumed by ops of sets other than the global one
_set_seq: dict = {}  # set id -> handles its ops consumed
_auto_seq: dict = {}  # handle of a set op -> its position among that set's ops
_barrier_seq: dict = {}  # set id (None: global) -> barriers made


def next_handle(process_set=None) -> int:
    """A new handle.  An op of another set than the global one counts apart, so that unnamed ops
    of every set are numbered alike on the workers that make them (a non-member skips the set's
    calls): the global set's ``n``-th op is named by ``handle - (set handles before it)``."""
    global _set_handles
    with _lock:
        handle = next(_counter)
        if not is_global(process_set):
            _set_handles += 1
            seq = _set_seq.get(process_set.process_set_id, 0) + 1
            _set_seq[process_set.process_set_id] = seq
            _auto_seq[handle] = seq
        else:
            _auto_seq[handle] = handle - _set_handles
        return handle


def barrier_number(process_set, handle: int) -> int:
    """The number of this barrier among the set's barriers on this worker: barriers are numbered
    apart from the other ops, so that workers that made different numbers of ops (one that ran out
    of data and joined) still meet at the same barrier."""
    scope = None if is_global(process_set) else process_set.process_set_id
    with _lock:
        _auto_seq.pop(handle, None)
        n = _barrier_seq.get(scope, 0) + 1
        _barrier_seq[scope] = n
        return n


def op_key(prefix: str, name: Optional[str], handle: int, process_set=None) -> str:
    """``"<op>.<name>"``, or ``"<op>.noname.<n>"`` for an unnamed op; ``"ps<id>."`` before it for a
    set other than the global one."""
    scope = "" if is_global(process_set) else f"ps{process_set.process_set_id}."
    if name is None:
        with _lock:
            seq = _auto_seq.pop(handle, handle)
        return f"{scope}{prefix}.noname.{seq}"
    if not isinstance(name, str) or not name:
        raise ValueError(f"{prefix}: name must be a non-empty str or None, got {name!r}")
    return f"{scope}{prefix}.{name}"


def claim(keys: list, what: str) -> None:
    """Marks ``keys`` in flight on this worker; ValueError if one already is (a duplicate name)."""
    with _lock:
        dup = [k for k in keys if k in _in_flight] or [k for k in set(keys) if keys.count(k) > 1]
        if dup:
            raise ValueError(f"{what}: a tensor named '{dup[0]}' is already in flight on this worker (duplicate "
                             f"name); synchronize its handle first or use another name")
        _in_flight.update(keys)


def unclaim(keys) -> None:
    with _lock:
        _in_flight.difference_update(keys)


def _fmt(x) -> str:
    return repr(float(x)) if isinstance(x, float) else str(x)


def call_attrs(kind: str, tensor: Optional[torch.Tensor] = None, **extra) -> str:
    """The attributes of one call that every worker must agree on, as one string (e.g.
    ``"op=allreduce;dtype=float32;shape=2x3;reduce=Sum;pre=1.0;post=1.0"``): passed to the core
    with the declaration (see :func:`start_push_pull`), whose servers compare them."""
    parts = [f"op={kind}"]
    if tensor is not None:
        parts.append(f"dtype={str(tensor.dtype).replace('torch.', '')}")
        parts.append("shape=" + "x".join(str(d) for d in tensor.shape))
    parts += [f"{k}={_fmt(v)}" for k, v in extra.items() if v is not None]
    return ";".join(parts)


def _device(tensor):
    from . import ops  # noqa: PLC0415 - ops imports nothing from here; lazy keeps the import order free

    return ops._device_of(tensor)  # byteps._tensor_view's device tuple


def core_code(dtype: torch.dtype) -> Optional[int]:
    """The core's dtype code, or None when the core has none (the tensor then moves as bytes)."""
    from . import ops  # noqa: PLC0415

    try:
        return ops.dtype_code(dtype)
    except TypeError:
        return None


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """A flat uint8 view of a contiguous tensor (for data moves of dtypes the core lacks)."""
    flat = tensor.reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8, device=tensor.device)


def start_reduce(key: str, tensor: torch.Tensor, output: torch.Tensor, op: int, attrs: Optional[str] = None) -> int:
    """A reduction on the servers (``op``: Sum, Min, Max or Product; never the core's average:
    scaling is done here, as Horovod does it).  ``attrs`` go with the declaration: the servers
    compare them across workers (a difference is a HorovodInternalError on every worker)."""
    from . import ops  # noqa: PLC0415

    code = ops.check_tensor(tensor)
    core_op = {Sum: _basics.core().OP_SUM, Average: _basics.core().OP_SUM, Min: _basics.core().OP_MIN,
               Max: _basics.core().OP_MAX, Product: _basics.core().OP_PRODUCT}[op]
    return _basics.start_reduce(key, tensor.data_ptr(), output.data_ptr(), tensor.numel() * tensor.element_size(),
                                code, core_op, False, 0, device=_device(tensor), attrs=attrs or "",
                                pending=_basics.Pending(tensor, output, key))


def start_push_pull(key: str, tensor: torch.Tensor, output: torch.Tensor, attrs: Optional[str] = None,
                    compare: bool = True) -> int:
    """A core sum (never the core's average: scaling is done here, as Horovod does it); the
    servers always compare ``attrs`` (``compare`` is kept for callers that ask for it)."""
    return start_reduce(key, tensor, output, Sum, attrs)


def start_broadcast(key: str, buf: torch.Tensor, root_rank: int, attrs: Optional[str] = None) -> int:
    code = core_code(buf.dtype)
    if code is None:
        buf, code = as_bytes(buf), core_code(torch.uint8)
    return _basics.start_broadcast(key, buf.data_ptr(), buf.numel() * buf.element_size(), code, root_rank, 0, buf,
                                   device=_device(buf), attrs=attrs or "")


def start_allgather(key: str, tensor: torch.Tensor, output: torch.Tensor, offset_bytes: int,
                    attrs: Optional[str] = None) -> int:
    code = core_code(tensor.dtype)
    if code is None:
        tensor, output, code = as_bytes(tensor), as_bytes(output), core_code(torch.uint8)
    return _basics.start_allgather(key, tensor.data_ptr(), tensor.numel() * tensor.element_size(),
                                   output.data_ptr(), output.numel() * output.element_size(), offset_bytes, code, 0,
                                   tensor, output, device=_device(tensor),
                                   attrs=attrs or "")


# ---- scaling (reference section 4)


def scale_(tensor: torch.Tensor, factor: float) -> torch.Tensor:
    """``tensor *= factor`` in place with Horovod's arithmetic: integers in float64 then truncated
    toward zero; float16/bfloat16 in float32 then rounded; float32/float64 in their own type."""
    if factor == 1.0:
        return tensor
    if not tensor.dtype.is_floating_point:
        tensor.copy_(tensor.to(torch.float64).mul_(factor).trunc_())
    elif tensor.dtype in (torch.float16, torch.bfloat16):
        tensor.copy_(tensor.to(torch.float32).mul_(factor))
    else:
        tensor.mul_(factor)
    return tensor


def reset_names() -> None:
    """After shutdown: auto-names restart from handle 1 and nothing is in flight."""
    global _counter, _set_handles
    with _lock:
        _counter = itertools.count(1)
        _in_flight.clear()
        _set_handles = 0
        _set_seq.clear()
        _auto_seq.clear()
        _barrier_seq.clear()


# Process sets use the starts above; their names are part of this module's surface.
from .hvd_process_sets import (MEMBERS, ProcessSet, _GlobalProcessSet, add_process_set,  # noqa: E402,F401
                               check_process_set, dynamic_enabled, global_process_set, is_global, members_attr,
                               register_process_sets, remove_process_set, reset_process_sets, set_rank, set_size)
