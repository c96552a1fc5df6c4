"""Horovod's process sets (reference section 12) in byteps.torch: a set is a scope of keys on the
servers.  Registered sets get ids in call order (the same on every worker, agreed by one global
collective whose attributes carry the set); an op given one runs among its members only (names
``"ps<id>.<op>.<name>"``, the declaration attribute ``members=<ranks>``)."""

from __future__ import annotations

import itertools
from typing import Optional

import torch

from .. import _basics
from . import hvd_common as C

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


def check_process_set(process_set, what: str, op: Optional[int] = None, members_only: bool = True):
    """The set an op runs on (the global set for None): a registered set this worker belongs to.
    Unregistered or removed set, or a call from a non-member → ValueError (``members_only=False``:
    non-members pass, for DistributedOptimizer, which is a plain local optimizer on them); not a
    ProcessSet → ValueError.
    With ``op`` (a resolved reduce op): Adasum's own rules first (:func:`hvd_common.check_adasum`)."""
    if op == C.Adasum:
        C.check_adasum(process_set, what)
    if is_global(process_set):
        return global_process_set
    if not isinstance(process_set, ProcessSet):
        raise ValueError(f"{what}: process_set must be a hvd.ProcessSet, got {type(process_set).__name__}")
    if process_set.process_set_id is None or _sets.get(process_set.process_set_id) is not process_set:
        raise ValueError(f"{what}: {process_set!r} is not registered (hvd.init(process_sets=[...]) or "
                         f"hvd.add_process_set)")
    if members_only and not process_set.included():
        raise ValueError(f"{what}: rank {_basics.rank()} is not a member of process set "
                         f"{process_set.process_set_id} {process_set.ranks}; only its members call its ops")
    return process_set


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
        raise C.internal_error("Horovod has not been initialized; use hvd.init().")
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
    with C._lock:
        set_id = next(_set_ids)
    # One global sum every worker makes, whose attributes carry the set: workers that disagree on
    # the set (or its id) all fail with the servers' mismatch error.
    flag = torch.zeros(1, dtype=torch.int32)
    h = C.start_push_pull(f"process_set.register.{set_id}", flag, flag,
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
    h = C.start_push_pull(f"process_set.remove.{process_set.process_set_id}", flag, flag,
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
