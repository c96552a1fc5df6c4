"""Horovod's allreduce family on byteps' servers (the async and in-place forms; the differentiable
``allreduce`` / ``grouped_allreduce`` are in :mod:`byteps.torch.hvd_autograd`).

* ``Average`` / ``Sum``: a core sum on the servers; the scaling is done here with Horovod's
  arithmetic (:func:`hvd_common.scale_`): ``prescale_factor`` on each worker's input,
  ``postscale_factor`` (divided by n for Average) on the sum.  Integer Average is the truncating
  division of the integer sum by n.
* ``Min`` / ``Max`` / ``Product``: a reduction on the servers (their key policy for the name),
  of every worker's prescaled tensor; the postscale factor is applied here.
* ``Adasum``: the servers' "adasum" key policy (:func:`_start_adasum`): each worker's whole
  (prescaled) tensor, combined in rank order by Horovod's tree of pairwise Adasum; the postscale is
  applied here.  float16/32/64, global process set, any world size; with several processes per
  host a host's CPU tensors combine by the same tree first (CUDA tensors there: refused).
* Grouped calls: one handle for the group; members are keyed ``"<key>_<i>of<k>"``.
"""

from __future__ import annotations

from typing import Optional

import torch

from .. import _basics
from . import hvd_common as C
from . import hvd_handles as H
from .compression import attrs_for
from .hvd_common import Adasum, Average, Sum, global_process_set

__all__ = ["allreduce_async", "allreduce_", "allreduce_async_", "grouped_allreduce_async", "grouped_allreduce_",
           "grouped_allreduce_async_", "start_allreduce", "begin_allreduce", "keys_for"]

def _post_factor(op: int, post: float, n: int) -> float:
    return post / n if op == Average else post


def _finish_scaling(out: torch.Tensor, op: int, post: float, n: int) -> torch.Tensor:
    """Average divides by ``n``: the size of the op's process set."""
    if op == Average and post == 1.0 and not out.dtype.is_floating_point:
        out.copy_(torch.div(out, n, rounding_mode="trunc"))  # truncating division of the integer sum
        return out
    return C.scale_(out, _post_factor(op, post, n))


def _start_min_max_product(key, tensor, output, op, post, attrs, process_set=global_process_set):
    """Min/Max/Product on the servers (a key policy: every member's push reduced element-wise;
    a process set's members travel in ``attrs``); the postscale factor is applied here once the
    result is in."""
    handle = C.start_reduce(key, tensor, output, op, attrs)

    def stage(_outputs):
        return C.scale_(output, post)

    return [handle], stage


def _start_adasum(key, tensor, output, post, attrs):
    """Adasum on the servers (``_basics.start_reduce`` with ``OP_ADASUM``); the postscale here."""
    from . import ops  # noqa: PLC0415 - as hvd_common does

    code = ops.check_tensor(tensor)
    handle = _basics.start_reduce(key, tensor.data_ptr(), output.data_ptr(), tensor.numel() * tensor.element_size(),
                                  code, _basics.core().OP_ADASUM, False, 0, device=C._device(tensor),
                                  attrs=attrs or "", pending=_basics.Pending(tensor, output, ""))

    def stage(_outputs):
        return C.scale_(output, post)

    return [handle], stage


def begin_allreduce(tensors: list, outputs: list, keys: list, op: int, pre: float, post: float, what: str,
                    inplace: bool, process_set=global_process_set, join_fails: bool = False,
                    scatter=None, compression: str = "") -> tuple:
    """Starts the core operations of an allreduce of ``tensors`` (into ``outputs``, the tensors
    themselves when ``inplace``) under ``keys``, which it claims, among ``process_set``'s members;
    returns ``(core handles, finish)``, ``finish()`` giving the list of reduced outputs once the
    handles are done.  ``join_fails``: its rounds fail while a worker has joined (a reducescatter,
    as Horovod's) instead of counting that worker as zeros.  ``scatter``: per tensor, the servers'
    ``scatter`` attribute or None (a reducescatter: each worker receives only its rows).
    ``compression``: compression attributes appended to each call's (the core compresses the sums;
    other ops reject them, naming the tensor)."""
    n = C.set_size(process_set)
    for t in tensors:
        C.check_tensor(t, C.ADASUM_DTYPES if op == Adasum else C.REDUCE_DTYPES, what)
    C.same_device(tensors, what)
    C.claim(keys, what)
    handles, stages = [], []
    try:
        for i, (key, t, out) in enumerate(zip(keys, tensors, outputs)):
            attrs = C.call_attrs("allreduce", t, reduce=C.OP_NAMES[op], pre=float(pre), post=float(post),
                                 members=C.members_attr(process_set), join="fail" if join_fails else None,
                                 scatter=scatter[i] if scatter else None)
            extra = attrs_for(compression, t.dtype.is_floating_point)
            if extra:
                attrs = attrs + ";" + extra
            with torch.no_grad():
                src = t
                if pre != 1.0:
                    src = C.scale_(t if inplace else t.clone(), pre)
                if op in (Average, Sum):
                    handles.append([C.start_push_pull(key, src, out, attrs)])
                    stages.append(lambda _o, out=out: _finish_scaling(out, op, post, n))
                elif op == Adasum:
                    hs, stage = _start_adasum(key, src, out, post, attrs)
                    handles.append(hs)
                    stages.append(stage)
                else:
                    hs, stage = _start_min_max_product(key, src, out, op, post, attrs, process_set)
                    handles.append(hs)
                    stages.append(stage)
    except BaseException:
        for hs in handles:
            for h in hs:
                try:
                    _basics.wait(h, 0.0)
                except Exception:  # noqa: BLE001 - the start's error is the one to report
                    pass
        C.unclaim(keys)
        raise

    def finish():
        with torch.no_grad():
            return [stage(None) for stage in stages]

    return [h for hs in handles for h in hs], finish


def start_allreduce(handle: int, tensors: list, outputs: list, keys: list, op: int, pre: float, post: float,
                    what: str, inplace: bool, single: bool, process_set=global_process_set,
                    compression: str = "") -> int:
    """:func:`begin_allreduce` as Horovod handle ``handle`` (returned); its result is the output
    (``single``) or the tuple of outputs."""
    core_handles, finish = begin_allreduce(tensors, outputs, keys, op, pre, post, what, inplace, process_set,
                                           compression=compression)

    def stage(_outputs):
        results = finish()
        return results[0] if single else tuple(results)

    return H.submit(handle, H.Work(core_handles, stage, keys))


def keys_for(prefix: str, name, count: Optional[int], handle: int, process_set=global_process_set) -> list:
    """The op's key, or a group's member keys ``"<key>_<i>of<k>"``."""
    base = C.op_key(prefix, name, handle, process_set)
    return [base] if count is None else [f"{base}_{i}of{count}" for i in range(1, count + 1)]


def _allreduce(tensor, average, name, op, pre, post, process_set, what, inplace, compression=""):
    op = C.resolve_op(op, average, what)
    process_set = C.check_process_set(process_set, what, op)
    C.check_tensor(tensor, C.REDUCE_DTYPES, what)
    out = tensor if inplace else torch.empty_like(tensor, memory_format=torch.contiguous_format)
    handle = C.next_handle(process_set)
    keys = keys_for("allreduce", name, None, handle, process_set)
    return start_allreduce(handle, [tensor], [out], keys, op, pre, post, what, inplace, single=True,
                           process_set=process_set, compression=compression)


def allreduce_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                    process_set=global_process_set) -> int:
    """Starts reducing ``tensor`` over the workers into a new tensor; :func:`synchronize` returns it."""
    return _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set, "allreduce_async",
                      False)


def allreduce_async_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                     process_set=global_process_set) -> int:
    """In-place :func:`allreduce_async`: ``tensor`` holds the result once synchronized."""
    return _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set,
                      "allreduce_async_", True)


def allreduce_(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
               process_set=global_process_set) -> torch.Tensor:
    """Reduces ``tensor`` over the workers in place; returns it."""
    return H.synchronize(allreduce_async_(tensor, average, name, op, prescale_factor, postscale_factor,
                                          process_set))


def _grouped(tensors, average, name, op, pre, post, process_set, what, inplace, compression=""):
    op = C.resolve_op(op, average, what)
    process_set = C.check_process_set(process_set, what, op)
    tensors = list(tensors)
    if not tensors:
        raise ValueError(f"{what}: the list of tensors is empty")
    for t in tensors:
        C.check_tensor(t, C.REDUCE_DTYPES, what)
    outs = tensors if inplace else [torch.empty_like(t, memory_format=torch.contiguous_format) for t in tensors]
    C.same_device(tensors, what)
    handle = C.next_handle(process_set)
    keys = keys_for("grouped_allreduce", name, len(tensors), handle, process_set)
    return start_allreduce(handle, tensors, outs, keys, op, pre, post, what, inplace, single=False,
                           process_set=process_set, compression=compression)


def grouped_allreduce_async(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                            process_set=global_process_set) -> int:
    """Starts reducing each tensor of the list; :func:`synchronize` returns a tuple of new tensors."""
    return _grouped(tensors, average, name, op, prescale_factor, postscale_factor, process_set,
                    "grouped_allreduce_async", False)


def grouped_allreduce_async_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                             process_set=global_process_set) -> int:
    """In-place :func:`grouped_allreduce_async`."""
    return _grouped(tensors, average, name, op, prescale_factor, postscale_factor, process_set,
                    "grouped_allreduce_async_", True)


def grouped_allreduce_(tensors, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                       process_set=global_process_set) -> tuple:
    """Reduces each tensor of the list in place; returns them as a tuple."""
    return H.synchronize(grouped_allreduce_async_(tensors, average, name, op, prescale_factor, postscale_factor,
                                                  process_set))


def allreduce_compressed_async(tensor, average=None, name=None, op=None, prescale_factor=1.0, postscale_factor=1.0,
                               process_set=global_process_set, compression: str = "", inplace: bool = False) -> int:
    """:func:`allreduce_async` (or, ``inplace``, :func:`allreduce_async_`) whose sums carry the
    compression attributes ``compression`` (what ``compression=`` of the Horovod API and the
    DistributedOptimizer on a process set use)."""
    what = "allreduce_async_" if inplace else "allreduce_async"
    return _allreduce(tensor, average, name, op, prescale_factor, postscale_factor, process_set, what, inplace,
                      compression)


def grouped_allreduce_compressed_async(tensors, average=None, name=None, op=None, prescale_factor=1.0,
                                       postscale_factor=1.0, process_set=global_process_set,
                                       compression: str = "") -> int:
    """:func:`grouped_allreduce_async` whose sums carry the compression attributes ``compression``."""
    return _grouped(tensors, average, name, op, prescale_factor, postscale_factor, process_set,
                    "grouped_allreduce_async", False, compression)
