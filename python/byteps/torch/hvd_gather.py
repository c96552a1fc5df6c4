"""Horovod's allgather, grouped allgather, alltoall, sparse allreduce and allgather_object on
byteps' servers (async forms; the differentiable ones are in :mod:`byteps.torch.hvd_autograd`).

An allgather runs in two steps under one handle: the workers first allgather a small int64
record per tensor (ndim, dtype, rows, other dims; for alltoall also the splits), so every worker
knows every worker's shape and finds a mismatch the same way (HorovodInternalError on every
worker, nothing moved); then each worker's rows land at its offset of the output on every
worker (the servers concatenate).

alltoall goes through the servers too (no worker-to-worker mesh): each worker sends the rows it
gives away (the sum of its splits) in one allgather, and keeps from every source the block meant
for it.  Every worker receives n times the bytes it keeps, which suits the sizes Horovod scripts
exchange; a direct exchange would be a later server policy.
"""

from __future__ import annotations

import math
import pickle
from typing import Optional

import torch

from .. import _basics
from . import hvd_common as C
from . import hvd_handles as H
from .hvd_common import Average, global_process_set

__all__ = ["allgather_async", "grouped_allgather_async", "alltoall_async", "sparse_allreduce_async",
           "allgather_object", "gather_now"]

_W = 12  # int64 slots per tensor in the size record: ndim, dtype, rows, up to 9 other dims
_MAX_DIMS = 10


def _record(t: torch.Tensor) -> list:
    dims = list(t.shape)
    return [t.dim(), C.MOVE_DTYPES.index(t.dtype), dims[0] if dims else 0] + dims[1:] + [0] * (_W - 2 - max(t.dim(), 1))


def _shape_of(rec: list) -> tuple:
    ndim = int(rec[0])
    return tuple(int(x) for x in ([rec[2]] + list(rec[3:3 + ndim - 1]))) if ndim else ()


def _check_records(key: str, recs: list, what: str) -> None:
    """recs[w] = worker w's record; a difference is a coordinated error (every worker raises it)."""
    shapes = {w: _shape_of(r) for w, r in enumerate(recs)}
    dtypes = {w: str(C.MOVE_DTYPES[int(r[1])]).replace("torch.", "") for w, r in enumerate(recs)}
    if any(int(r[0]) == 0 for r in recs):
        zero = [w for w, r in enumerate(recs) if int(r[0]) == 0]
        raise C.internal_error(f"{what} of '{key}': worker(s) {zero} passed a 0-d tensor; {what} needs at least "
                               f"one dimension")
    if len(set(dtypes.values())) > 1:
        raise C.internal_error(f"{what} of '{key}': the workers' dtypes differ: {dtypes}")
    if len({s[1:] for s in shapes.values()}) > 1 or len({len(s) for s in shapes.values()}) > 1:
        raise C.internal_error(f"{what} of '{key}': only the first dimension may differ between workers; their "
                               f"shapes are {shapes}")


def _start(prefix: str, name, tensors: list, what: str, splits: Optional[list] = None,
           with_counts: bool = False, process_set=global_process_set) -> int:
    """Starts an allgather (``splits`` None) or an alltoall of ``tensors`` among ``process_set``'s
    members (rows in set-rank order); returns the handle."""
    n, me = C.set_size(process_set), C.set_rank(process_set)
    members = C.members_attr(process_set)
    for t in tensors:
        C.check_tensor(t, C.MOVE_DTYPES, what)
        if t.dim() > _MAX_DIMS:
            raise ValueError(f"{what}: tensor of {t.dim()} dimensions (at most {_MAX_DIMS})")
    C.same_device(tensors, what)
    handle = C.next_handle(process_set)
    base = C.op_key(prefix, name, handle, process_set)
    count = len(tensors)
    keys = [base] if count == 1 and prefix in ("allgather", "alltoall") else [f"{base}_{i}of{count}"
                                                                            for i in range(1, count + 1)]
    C.claim(keys, what)
    width = count * _W + (n if splits is not None else 0)
    mine = [v for t in tensors for v in _record(t)] + (list(splits) if splits is not None else [])
    record = torch.tensor(mine, dtype=torch.int64)
    table = torch.zeros(n * width, dtype=torch.int64)
    try:
        h = C.start_allgather(f"{base}.meta{count}", record, table, me * width * 8,
                              C.call_attrs(prefix + ".meta", None, members=members) if members else None)
    except BaseException:
        C.unclaim(keys)
        raise

    def after_sizes(_outputs):
        rows_of = table.reshape(n, width)
        results, starts = [], []
        for i, (key, t) in enumerate(zip(keys, tensors)):
            recs = [rows_of[w, i * _W:(i + 1) * _W].tolist() for w in range(n)]
            _check_records(key, recs, what)
            if splits is None:
                counts = [int(r[2]) for r in recs]
                send = t
            else:
                all_splits = rows_of[:, count * _W:].tolist()  # all_splits[s][d]: rows s sends to d
                counts = [sum(all_splits[w]) for w in range(n)]
                send = t[:counts[me]]
            row_shape = tuple(t.shape[1:])
            gathered = torch.empty((sum(counts), *row_shape), dtype=t.dtype, device=t.device)
            row_bytes = math.prod(row_shape) * t.element_size()
            total = sum(counts) * row_bytes
            starts.append(C.start_allgather(f"{key}.data.{total}", send.contiguous(), gathered,
                                            sum(counts[:me]) * row_bytes,
                                            C.call_attrs(prefix, None, rows=sum(counts), row="x".join(
                                                map(str, row_shape)), members=members)))
            results.append((gathered, counts))

        def done(_outs):
            if splits is None:
                outs = [g for g, _ in results]
                if with_counts:
                    return outs, [c for _, c in results]
                return outs[0] if count == 1 else tuple(outs)
            gathered, counts = results[0]
            all_splits = rows_of[:, count * _W:].tolist()
            blocks, received = [], []
            for s in range(n):
                first = sum(counts[:s]) + sum(all_splits[s][:me])
                blocks.append(gathered[first:first + all_splits[s][me]])
                received.append(all_splits[s][me])
            return torch.cat(blocks), torch.tensor(received, dtype=torch.int32)

        return starts, done

    return H.submit(handle, H.Work([h], after_sizes, keys))


def allgather_async(tensor, name=None, process_set=global_process_set) -> int:
    """Starts concatenating the workers' tensors along dim 0 (rank order); returns a handle."""
    process_set = C.check_process_set(process_set, "allgather_async")
    return _start("allgather", name, [tensor], "allgather", process_set=process_set)


def grouped_allgather_async(tensors, name=None, process_set=global_process_set) -> int:
    """Starts allgathering each tensor of the list; :func:`synchronize` returns a tuple."""
    process_set = C.check_process_set(process_set, "grouped_allgather_async")
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allgather_async: the list of tensors is empty")
    return _start("grouped_allgather", name, tensors, "grouped_allgather", process_set=process_set)


def gather_now(prefix: str, name, tensors: list, what: str, process_set=global_process_set) -> tuple:
    """Allgathers now; returns (outputs, counts per tensor: every member's dim 0)."""
    return H.synchronize(_start(prefix, name, list(tensors), what, with_counts=True, process_set=process_set))


def check_splits(tensor: torch.Tensor, splits, what: str, n: Optional[int] = None) -> Optional[list]:
    """Horovod's local alltoall checks (``n`` workers: the set's size); returns the splits as a
    list, or None for an even split."""
    n = _basics.size() if n is None else n
    if splits is None:
        if tensor.dim() == 0 or tensor.shape[0] % n:
            raise ValueError(f"{what}: without splits, dim 0 ({tuple(tensor.shape)[:1]}) must divide evenly over "
                             f"the {n} workers")
        return [tensor.shape[0] // n] * n
    if isinstance(splits, torch.Tensor):
        if splits.dtype != torch.int32 or splits.dim() != 1:
            raise ValueError(f"{what}: splits must be a 1-D int32 tensor, got {splits.dtype} of shape "
                             f"{tuple(splits.shape)}")
        splits = [int(x) for x in splits.cpu().tolist()]
    else:
        splits = list(splits)
        if any(isinstance(x, bool) or not isinstance(x, int) for x in splits):
            raise ValueError(f"{what}: splits must be ints, got {splits!r}")
    if len(splits) != n:
        raise ValueError(f"{what}: {len(splits)} splits for {n} workers")
    if any(x < 0 for x in splits):
        raise ValueError(f"{what}: negative splits {splits}")
    if tensor.dim() == 0 or sum(splits) > tensor.shape[0]:
        raise ValueError(f"{what}: the splits {splits} add up to more rows than the tensor's dim 0 "
                         f"({tuple(tensor.shape)})")
    return splits


def alltoall_async(tensor, splits=None, name=None, process_set=global_process_set) -> int:
    """Starts an alltoall; :func:`synchronize` returns ``(output, received_splits)``."""
    process_set = C.check_process_set(process_set, "alltoall_async")
    C.check_tensor(tensor, C.MOVE_DTYPES, "alltoall")
    return _start("alltoall", name, [tensor], "alltoall",
                  check_splits(tensor, splits, "alltoall", C.set_size(process_set)), process_set=process_set)


def sparse_allreduce_async(tensor, name, op, process_set=global_process_set):
    """Horovod's sparse allreduce: allgathers the COO indices (``"<name>.indices"``) and values
    (``"<name>.values"``); returns a callable that waits and builds the uncoalesced sum (values
    divided by n for Average)."""
    process_set = C.check_process_set(process_set, "sparse_allreduce_async")
    if not isinstance(tensor, torch.Tensor) or not tensor.is_sparse:
        raise ValueError("sparse_allreduce_async: expected a sparse COO tensor")
    indices = tensor._indices().transpose(0, 1).contiguous()
    values = tensor._values().contiguous()
    h_idx = allgather_async(indices, name=f"{name}.indices", process_set=process_set)
    h_val = allgather_async(values, name=f"{name}.values", process_set=process_set)

    def wait():
        idx = H.synchronize(h_idx)
        vals = H.synchronize(h_val)
        if op == Average:
            vals = vals / C.set_size(process_set)
        return torch.sparse_coo_tensor(idx.transpose(0, 1), vals, tensor.size())

    return wait


def allgather_object(obj, name=None) -> list:
    """Every worker's ``obj`` (pickled; cloudpickle when installed), in rank order."""
    from .functions import _dumps  # noqa: PLC0415 - functions imports ops, not this module

    if name is None:
        name = type(obj).__name__
    data = torch.frombuffer(bytearray(_dumps(obj)), dtype=torch.uint8)
    (gathered,), (counts,) = gather_now("allgather", f"{name}.t", [data], "allgather_object")
    out, start = [], 0
    for c in counts:
        out.append(pickle.loads(gathered[start:start + c].numpy().tobytes()))
        start += c
    return out
