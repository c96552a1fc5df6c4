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
    if op == Adasum:
        raise NotImplementedError(f"{what}: op=Adasum is not built yet in byteps (a later version runs it on the "
                                  f"servers); use Average or Sum")
    return op


# ---- process sets (reference section 12)


class ProcessSet:
    """Horovod's ProcessSet: a scope of keys on the servers.  Registered sets get ids in call
    order (the same on every worker); an op given one runs among its members only: names are
    scoped ``"ps<id>.<op>.<name>"``, the declaration carries ``members=<ranks>`` (the servers
    complete a round when every member pushed and refuse anyone else), Average divides by the set
    size and allgather/alltoall/reducescatter go by set rank."""

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

    def rank(self) -> int:
        return _basics.rank()


global_process_set = _GlobalProcessSet()

_sets: dict = {}  # id -> registered ProcessSet (the global set is not in it)
_set_ids = itertools.count(1)
_dynamic = False


def is_global(process_set) -> bool:
    return process_set is None or process_set is global_process_set


MEMBERS = "members"  # the declaration attribute that scopes a key to a set (protocol::kAttrMembers)


def members_attr(process_set) -> Optional[str]:
    """The ``members`` declaration attribute of a set's keys (None for the global set)."""
    return None if is_global(process_set) else ",".join(str(r) for r in process_set.ranks)


def set_size(process_set) -> int:
    return _basics.size() if is_global(process_set) else len(process_set.ranks)


def set_rank(process_set) -> int:
    return _basics.rank() if is_global(process_set) else process_set.ranks.index(_basics.rank())


def check_process_set(process_set, what: str):
    """The set an op runs on (the global set for None): a registered set this worker belongs to.
    Unregistered or removed set, or a call from a non-member → ValueError; not a ProcessSet →
    ValueError; another set with several processes per host → NotImplementedError."""
    if is_global(process_set):
        return global_process_set
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"{what}: process_set must be a hvd.ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None or _sets.get(process_set.process_set_id) is not process_set:
        raise ValueError(f"{what}: {process_set!r} is not registered (hvd.init(process_sets=[...]) or "
                         f"hvd.add_process_set)")
    if not process_set.included():
        raise ValueError(f"{what}: rank {_basics.rank()} is not a member of process set "
                         f"{process_set.process_set_id} {process_set.ranks}; only its members call its ops")
    _check_local_size(what)
    return process_set


def _check_local_size(what: str) -> None:
    if _basics.local_size() > 1:
        raise NotImplementedError(f"{what}: process sets need one worker process per host in byteps so far "
                                  f"(BYTEPS_LOCAL_SIZE={_basics.local_size()}): a host's processes reduce locally "
                                  f"before the servers, and that local reduce does not yet run among members only")


def register_process_sets(sets, dynamic: bool) -> None:
    """``init(process_sets=...)``: ids in list order; each registration is agreed by every worker."""
    global _dynamic
    sets = list(sets or [])
    seen = set()
    for ps in sets:
        if not isinstance(ps, ProcessSet):
            raise ValueError(f"init(process_sets=...): expected hvd.ProcessSet objects, got {type(ps).__name__}")
        key = "global" if is_global(ps) else tuple(ps.ranks)
        if key in seen:
            raise ValueError(f"init(process_sets=...): process set {ps.ranks} is listed twice")
        seen.add(key)
    _dynamic = dynamic
    for ps in sets:
        if not is_global(ps):
            _register(ps, "init(process_sets=...)")


def dynamic_enabled() -> bool:
    import os  # noqa: PLC0415

    return _dynamic or os.environ.get("HOROVOD_DYNAMIC_PROCESS_SETS", "0") not in ("", "0")


def _register(ps, what: str) -> None:
    if not _basics.is_initialized():
        raise internal_error("Horovod has not been initialized; use hvd.init().")
    size = _basics.size()
    bad = [r for r in ps.ranks if not 0 <= r < size]
    if not ps.ranks or bad or len(set(ps.ranks)) != len(ps.ranks):
        raise ValueError(f"{what}: process set {ps.ranks} must be distinct ranks of 0..{size - 1}")
    for other in _sets.values():
        if other.ranks == ps.ranks:
            raise ValueError(f"{what}: a process set with ranks {ps.ranks} is already registered (id "
                             f"{other.process_set_id})")
    if ps.ranks == list(range(size)):
        raise ValueError(f"{what}: ranks {ps.ranks} are the global process set")
    _check_local_size(what)
    with _lock:
        set_id = next(_set_ids)
    # One global sum every worker makes, whose attributes carry the set: workers that disagree on
    # the set (or its id) all fail with the servers' mismatch error.
    flag = torch.zeros(1, dtype=torch.int32)
    h = start_push_pull(f"process_set.register.{set_id}", flag, flag,
                        f"op=process_set;set={set_id}:" + ",".join(map(str, ps.ranks)), compare=True)
    _basics.wait(h, None)
    ps.process_set_id = set_id
    _sets[set_id] = ps


def add_process_set(process_set) -> ProcessSet:
    """Registers a set (every worker calls it identically, in the same order); needs dynamic
    process sets (``init(process_sets="dynamic")`` or ``HOROVOD_DYNAMIC_PROCESS_SETS=1``)."""
    if not dynamic_enabled():
        raise ValueError("add_process_set: dynamic process sets are off; call hvd.init(process_sets='dynamic') or "
                         "set HOROVOD_DYNAMIC_PROCESS_SETS=1")
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    if ps.process_set_id is not None:
        raise ValueError(f"add_process_set: {ps!r} is already registered")
    _register(ps, "add_process_set")
    return ps


def remove_process_set(process_set) -> bool:
    """Unregisters a set (every worker, identically); False for the global set and unregistered
    ones.  The object is invalid afterwards (its id is None)."""
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"remove_process_set: expected a hvd.ProcessSet, got {type(process_set).__name__}")
    if is_global(process_set) or _sets.get(process_set.process_set_id) is not process_set:
        return False
    if not dynamic_enabled():
        raise ValueError("remove_process_set: dynamic process sets are off; call hvd.init(process_sets='dynamic') or "
                         "set HOROVOD_DYNAMIC_PROCESS_SETS=1")
    # Every worker agrees that the set goes, as it agreed that it came.
    flag = torch.zeros(1, dtype=torch.int32)
    h = start_push_pull(f"process_set.remove.{process_set.process_set_id}", flag, flag,
                        f"op=process_set_remove;set={process_set.process_set_id}:" + members_attr(process_set),
                        compare=True)
    _basics.wait(h, None)
    del _sets[process_set.process_set_id]
    process_set.process_set_id = None
    return True


def reset_process_sets() -> None:
    """After shutdown: no set but the global one; ids restart from 1."""
    global _set_ids, _dynamic
    for ps in _sets.values():
        ps.process_set_id = None
    _sets.clear()
    _set_ids = itertools.count(1)
    _dynamic = False


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


_set_handles = 0     # handles consumed by ops of sets other than the global one
_set_seq: dict = {}  # set id -> handles its ops consumed
_auto_seq: dict = {}  # handle of a set op -> its position among that set's ops


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


def start_push_pull(key: str, tensor: torch.Tensor, output: torch.Tensor, attrs: Optional[str] = None,
                    compare: bool = False) -> int:
    """A core sum (never the core's average: scaling is done here, as Horovod does it).  The
    servers compare ``attrs`` when ``compare`` or when they scope the key to a process set."""
    from . import ops  # noqa: PLC0415

    code = ops.check_tensor(tensor)
    if attrs and (compare or f"{MEMBERS}=" in attrs) and not _takes_attrs(_basics.start):  # a set's key: its members must reach
        return _basics.start_reduce(key, tensor.data_ptr(), output.data_ptr(),  # the servers
                                    tensor.numel() * tensor.element_size(), code, _basics.core().OP_SUM, False, 0,
                                    device=_device(tensor), attrs=attrs,
                                    pending=_basics.Pending(tensor, output, key))
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
    global _counter, _set_handles
    with _lock:
        _counter = itertools.count(1)
        _in_flight.clear()
        _set_handles = 0
        _set_seq.clear()
        _auto_seq.clear()
