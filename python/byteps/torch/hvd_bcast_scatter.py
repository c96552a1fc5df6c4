"""Horovod's broadcast and reducescatter families on byteps' servers (async and in-place forms).

* broadcast: the servers forward the root's bytes (dtypes the core has no code for, int16 and
  bool, travel as bytes).  ``root_rank`` must be a worker's rank (ValueError otherwise).
* reducescatter: an allreduce on the servers, then this worker's rows: worker r keeps rows
  ``[off_r, off_r + c_r)`` with ``c_r = d0 // n + (1 if r < d0 % n else 0)`` (Horovod's split);
  Sum and Average only (another op: HorovodInternalError, as Horovod's).
"""

from __future__ import annotations

import torch

from .. import _basics
from . import hvd_common as C
from . import hvd_handles as H
from .hvd_allreduce import begin_allreduce, keys_for
from .hvd_common import Average, Sum, global_process_set

__all__ = ["broadcast_async", "broadcast_async_", "broadcast_", "reducescatter_async",
           "grouped_reducescatter_async", "row_range"]


def check_root(root_rank, what: str) -> None:
    n = _basics.size()
    if isinstance(root_rank, bool) or not isinstance(root_rank, int) or not 0 <= root_rank < n:
        raise ValueError(f"{what}: root_rank={root_rank!r} is not a worker rank (0..{n - 1})")


def _broadcast(tensor, root_rank, name, process_set, what, inplace) -> int:
    process_set = C.check_process_set(process_set, what)
    C.check_tensor(tensor, C.MOVE_DTYPES, what)
    check_root(root_rank, what)
    if root_rank not in process_set.ranks:
        raise ValueError(f"{what}: root_rank={root_rank} is not a member of process set "
                         f"{process_set.process_set_id} {process_set.ranks} (root_rank is a global rank)")
    handle = C.next_handle(process_set)
    key = C.op_key("broadcast", name, handle, process_set)
    C.claim([key], what)
    buf = tensor if inplace else tensor.detach().clone(memory_format=torch.contiguous_format)
    try:
        h = C.start_broadcast(key, buf, root_rank, C.call_attrs("broadcast", buf, root=root_rank,
                                                                members=C.members_attr(process_set)))
    except BaseException:
        C.unclaim([key])
        raise
    return H.submit(handle, H.Work([h], lambda _o: buf, [key]))


def broadcast_async(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """Starts copying ``root_rank``'s tensor into a new tensor on every worker; returns a handle."""
    return _broadcast(tensor, root_rank, name, process_set, "broadcast_async", False)


def broadcast_async_(tensor, root_rank, name=None, process_set=global_process_set) -> int:
    """Starts overwriting ``tensor`` with ``root_rank``'s, in place; returns a handle."""
    return _broadcast(tensor, root_rank, name, process_set, "broadcast_async_", True)


def broadcast_(tensor, root_rank, name=None, process_set=global_process_set) -> torch.Tensor:
    """Overwrites ``tensor`` with ``root_rank``'s, in place; returns it."""
    return H.synchronize(broadcast_async_(tensor, root_rank, name, process_set))


def row_range(d0: int, n: int, r: int) -> tuple:
    """(offset, count) of worker r's rows in a reducescatter of d0 rows over n workers."""
    counts = [d0 // n + (1 if q < d0 % n else 0) for q in range(n)]
    return sum(counts[:r]), counts[r]


def _scatter_attr(tensor, n: int):
    """The servers' ``scatter`` attribute: the byte offsets where each member's rows start (and
    the end), so that each worker pulls only its own rows (1/n of the bytes).  None where a host's
    processes share one pull (BYTEPS_LOCAL_SIZE > 1: the host's root would get only its own rows)
    or there are no servers."""
    if n < 2 or _basics.local_size() != 1:
        return None
    d0 = tensor.shape[0]
    row = tensor.element_size() * (tensor.numel() // d0 if d0 else 0)
    return ",".join(str(row_range(d0, n, i)[0] * row) for i in range(n)) + f",{d0 * row}"


def _check_scatter_op(op, what: str) -> int:
    if isinstance(op, str):
        op = C._LEGACY.get(op, op)
    if isinstance(op, bool) or op not in (Average, Sum):
        raise C.internal_error(f"{what}: reducescatter takes op=hvd.Average or hvd.Sum, got "
                               f"{C.OP_NAMES.get(op, op)!r}")
    return op


def _reducescatter(tensors, name, op, process_set, pre, post, what, prefix, single) -> int:
    process_set = C.check_process_set(process_set, what)
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what}: the list of tensors is empty")
    for t in tensors:
        C.check_tensor(t, C.REDUCE_DTYPES, what)
        if t.dim() == 0:
            raise ValueError(f"{what}: cannot scatter a 0-d tensor (it has no rows)")
    op = _check_scatter_op(op, what)
    C.same_device(tensors, what)
    handle = C.next_handle(process_set)
    keys = keys_for(prefix, name, None if single else len(tensors), handle, process_set)
    outs = [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    n, me = C.set_size(process_set), C.set_rank(process_set)
    core_handles, finish = begin_allreduce(tensors, outs, keys, op, pre, post, what, inplace=False,
                                           process_set=process_set, join_fails=True,
                                           scatter=[_scatter_attr(t, n) for t in tensors])

    def stage(_outputs):
        mine = []
        for full in finish():
            off, count = row_range(full.shape[0], n, me)
            mine.append(full[off:off + count].clone())
        return mine[0] if single else tuple(mine)

    return H.submit(handle, H.Work(core_handles, stage, keys))


def reducescatter_async(tensor, name=None, op=Average, process_set=global_process_set, prescale_factor=1.0,
                        postscale_factor=1.0) -> int:
    """Starts a reducescatter; :func:`synchronize` returns this worker's rows of the reduction."""
    return _reducescatter([tensor], name, op, process_set, prescale_factor, postscale_factor,
                          "reducescatter_async", "reducescatter", True)


def grouped_reducescatter_async(tensors, name=None, op=Average, process_set=global_process_set,
                                prescale_factor=1.0, postscale_factor=1.0) -> int:
    """Starts a reducescatter of each tensor of the list; :func:`synchronize` returns a tuple."""
    return _reducescatter(tensors, name, op, process_set, prescale_factor, postscale_factor,
                          "grouped_reducescatter_async", "grouped_reducescatter", False)
