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

import inspect
import itertools
import threading
import warnings
from typing import Optional

import torch

from .. import _basics

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
    """Where byteps runs Adasum (on the servers): the global set, one process per host.  Any world
    size works (Horovod needs a power of two on CPU; the servers' tree is the same for one)."""
    if process_set is not None and process_set is not global_process_set:
        raise NotImplementedError(f"{what}: op=Adasum runs on the global process set only (as in Horovod); got "
                                  f"{process_set!r}")
    if _basics.is_initialized() and _basics.local_size() > 1:
        raise NotImplementedError(
            f"{what}: op=Adasum with several processes per host (local_size={_basics.local_size()}) is not built yet "
            f"in byteps (Horovod's GPU semantics there: Adasum across hosts of per-host averages); run one process "
            f"per host")


# ---- process sets


class ProcessSet:
    """Horovod's ProcessSet.  Only the global set is built in byteps so far: another set may be
    described, but an op given one raises NotImplementedError."""

    def __init__(self, ranks_or_comm) -> None:
        if not isinstance(ranks_or_comm, (list, tuple, range)):
            raise ValueError("ProcessSet: pass a list of ranks (mpi4py communicators need an MPI build, and byteps "
                             "is not one)")
        if any(isinstance(r, bool) or not isinstance(r, int) for r in ranks_or_comm):
            raise ValueError(f"ProcessSet: ranks must be ints, got {list(ranks_or_comm)!r}")
        self._ranks = sorted(ranks_or_comm)
        self.process_set_id: Optional[int] = None
        self.mpi_comm = None

    @property
    def ranks(self) -> list:
        return self._ranks

    def size(self) -> Optional[int]:
        return None if self.process_set_id is None else len(self.ranks)

    def rank(self) -> int:
        me = _basics.rank()
        if me not in self.ranks:
            raise ValueError(f"rank {me} is not a member of process set {self.ranks}")
        return self.ranks.index(me)

    def included(self) -> bool:
        return _basics.rank() in self.ranks

    def __repr__(self) -> str:
        return f"ProcessSet(process_set_id={self.process_set_id}, ranks={self.ranks})"


class _GlobalProcessSet(ProcessSet):
    def __init__(self) -> None:
        super().__init__([])
        self.process_set_id = 0

    @property
    def ranks(self) -> list:
        return list(range(_basics.size())) if _basics.is_initialized() else []

    def size(self) -> Optional[int]:
        return _basics.size()


global_process_set = _GlobalProcessSet()

NOT_BUILT_SETS = ("process sets other than hvd.global_process_set are not built yet in byteps (a later version "
                  "adds them); leave process_set out")


def check_process_set(process_set, what: str, op: Optional[int] = None) -> None:
    """The global set passes; another ProcessSet → NotImplementedError; anything else → ValueError.
    With ``op`` (a resolved reduce op): Adasum's own rules first (:func:`check_adasum`)."""
    if op == Adasum:
        check_adasum(process_set, what)
    if process_set is None or process_set is global_process_set:
        return
    if isinstance(process_set, ProcessSet):
        raise NotImplementedError(f"{what}: {NOT_BUILT_SETS} (got {process_set!r})")
    raise ValueError(f"{what}: process_set must be a hvd.ProcessSet, got {type(process_set).__name__}")


def add_process_set(process_set) -> ProcessSet:
    raise NotImplementedError(f"add_process_set: {NOT_BUILT_SETS}")


def remove_process_set(process_set) -> bool:
    """False: no set but the global one is ever registered in byteps (Horovod returns False for the
    global set and for unregistered ones)."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"remove_process_set: expected a hvd.ProcessSet, got {type(process_set).__name__}")
    return False


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
    if not tensor.is_contiguous():
        raise ValueError(f"{what}: tensor of shape {tuple(tensor.shape)} is not contiguous; pass tensor.contiguous()")


def same_device(tensors, what: str) -> None:
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise internal_error(f"{what}: the tensors of a group are on different devices ({sorted(map(str, devices))})")


_counter = itertools.count(1)
_lock = threading.Lock()
_in_flight: set = set()


def next_handle() -> int:
    with _lock:
        return next(_counter)


def op_key(prefix: str, name: Optional[str], handle: int) -> str:
    if name is None:
        return f"{prefix}.noname.{handle}"
    if not isinstance(name, str) or not name:
        raise ValueError(f"{prefix}: name must be a non-empty str or None, got {name!r}")
    return f"{prefix}.{name}"


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


def _takes_attrs(fn) -> bool:
    try:
        return "attrs" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


def attrs_supported() -> bool:
    """Whether this core compares declaration attributes across workers (``_basics.start(attrs=)``)."""
    return _takes_attrs(_basics.start)


def _with_attrs(fn, attrs: Optional[str]) -> dict:
    return {"attrs": attrs} if attrs is not None and _takes_attrs(fn) else {}


def _device(tensor):
    from . import ops  # noqa: PLC0415 - ops imports nothing from here; lazy keeps the import order free

    return ops._device_of(tensor)


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


def start_push_pull(key: str, tensor: torch.Tensor, output: torch.Tensor, attrs: Optional[str] = None) -> int:
    """A core sum (never the core's average: scaling is done here, as Horovod does it)."""
    from . import ops  # noqa: PLC0415

    code = ops.check_tensor(tensor)
    return _basics.start(key, tensor.data_ptr(), output.data_ptr(), tensor.numel() * tensor.element_size(), code,
                         False, 0, tensor, output, device=_device(tensor), **_with_attrs(_basics.start, attrs))


def start_broadcast(key: str, buf: torch.Tensor, root_rank: int, attrs: Optional[str] = None) -> int:
    code = core_code(buf.dtype)
    if code is None:
        buf, code = as_bytes(buf), core_code(torch.uint8)
    return _basics.start_broadcast(key, buf.data_ptr(), buf.numel() * buf.element_size(), code, root_rank, 0, buf,
                                   device=_device(buf), **_with_attrs(_basics.start_broadcast, attrs))


def start_allgather(key: str, tensor: torch.Tensor, output: torch.Tensor, offset_bytes: int,
                    attrs: Optional[str] = None) -> int:
    code = core_code(tensor.dtype)
    if code is None:
        tensor, output, code = as_bytes(tensor), as_bytes(output), core_code(torch.uint8)
    return _basics.start_allgather(key, tensor.data_ptr(), tensor.numel() * tensor.element_size(),
                                   output.data_ptr(), output.numel() * output.element_size(), offset_bytes, code, 0,
                                   tensor, output, device=_device(tensor),
                                   **_with_attrs(_basics.start_allgather, attrs))


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
    global _counter
    with _lock:
        _counter = itertools.count(1)
        _in_flight.clear()
