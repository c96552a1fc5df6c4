"""Horovod's differentiable collectives (the non-underscore, non-async forms), with Horovod's
backward rules:

| op | gradient of the input, from the upstream gradient g |
| --- | --- |
| allreduce(op, pre, post) | allreduce(g) with the same op / pre / post |
| grouped_allreduce | grouped_allreduce of the gradients, same arguments |
| allgather | allreduce(g, Average), then this worker's rows (offsets from the forward's sizes) |
| grouped_allgather | the same per tensor, as one grouped allreduce |
| broadcast(root) | allreduce(g, Average), times 0 unless this worker is the root |
| alltoall | alltoall(g, splits=received_splits): each block goes back to its source |
| reducescatter(op, pre, post) | g × (n for Sum, else 1) × pre × post, then allgather |
| grouped_reducescatter | the same per tensor, as one grouped allgather |

The backward collectives are unnamed (auto-names), as Horovod's: every worker runs backward in
the same order.  With compression (allreduce, grouped_allreduce), the forward's sums carry the
compressor's attrs (the core compresses between hosts) and the gradient flows back uncompressed;
reducescatter's result is exact (a custom Python compressor still runs around it).
"""

from __future__ import annotations

import torch

from .. import _basics
from . import hvd_allreduce as AR
from . import hvd_bcast_scatter as BS
from . import hvd_common as C
from . import hvd_handles as H
from . import hvd_gather as G
from .compression import Compression, attrs_of
from .hvd_common import Average, Sum, global_process_set

__all__ = ["allreduce", "grouped_allreduce", "allgather", "grouped_allgather", "broadcast", "alltoall",
           "reducescatter", "grouped_reducescatter"]


class _Allreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, name, op, pre, post, ps, attrs=""):
        ctx.args = (op, pre, post, ps)
        return H.synchronize(AR.allreduce_compressed_async(tensor, None, name, op, pre, post, ps, attrs))

    @staticmethod
    def backward(ctx, g):
        op, pre, post, ps = ctx.args
        return H.synchronize(AR.allreduce_async(g.contiguous(), None, None, op, pre, post, ps)), None, None, None, \
            None, None, None


class _GroupedAllreduce(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, pre, post, ps, attrs, *tensors):
        ctx.args = (op, pre, post, ps)
        return H.synchronize(AR.grouped_allreduce_compressed_async(list(tensors), None, name, op, pre, post, ps,
                                                                   attrs))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, ps = ctx.args
        out = H.synchronize(AR.grouped_allreduce_async([g.contiguous() for g in grads], None, None, op, pre, post,
                                                       ps))
        return (None, None, None, None, None, None, *out)


def allreduce(tensor, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set) -> torch.Tensor:
    """The reduction (``op``, default Average) of ``tensor`` over the workers, as a new tensor."""
    op = C.resolve_op(op, average, "allreduce")
    process_set = C.check_process_set(process_set, "allreduce", op)
    compressed, cctx = compression.compress(tensor)
    return compression.decompress(_Allreduce.apply(compressed, name, op, prescale_factor, postscale_factor,
                                                   process_set, attrs_of(compression)), cctx)


def grouped_allreduce(tensors, average=None, name=None, compression=Compression.none, op=None, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set) -> list:
    """Reduces each tensor of the list (one group, one handle); returns a list of new tensors."""
    op = C.resolve_op(op, average, "grouped_allreduce")
    process_set = C.check_process_set(process_set, "grouped_allreduce", op)
    pairs = [compression.compress(t) for t in tensors]
    outs = _GroupedAllreduce.apply(name, op, prescale_factor, postscale_factor, process_set, attrs_of(compression),
                                   *[p for p, _ in pairs])
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]


def _rows_back(grads: list, counts: list, ps=global_process_set) -> list:
    """Average of the gradients over the set's workers (one grouped allreduce), this worker's rows."""
    summed = H.synchronize(AR.grouped_allreduce_async([g.contiguous() for g in grads], None, None, Average,
                                                      process_set=ps))
    me = C.set_rank(ps)
    return [s[sum(c[:me]):sum(c[:me]) + c[me]] for s, c in zip(summed, counts)]


class _Allgather(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, prefix, ps, *tensors):
        outs, ctx.counts = G.gather_now(prefix, name, list(tensors), prefix, ps)
        ctx.ps = ps
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, None, *_rows_back(list(grads), ctx.counts, ctx.ps))


def allgather(tensor, name=None, process_set=global_process_set) -> torch.Tensor:
    """The workers' tensors concatenated along dim 0, in rank order (dim 0 may differ)."""
    process_set = C.check_process_set(process_set, "allgather")
    return _Allgather.apply(name, "allgather", process_set, tensor)[0]


def grouped_allgather(tensors, name=None, process_set=global_process_set) -> tuple:
    """:func:`allgather` of each tensor of the list, as one group; returns a tuple."""
    process_set = C.check_process_set(process_set, "grouped_allgather")
    tensors = list(tensors)
    if not tensors:
        raise ValueError("grouped_allgather: the list of tensors is empty")
    return tuple(_Allgather.apply(name, "grouped_allgather", process_set, *tensors))


class _Broadcast(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, root_rank, name, ps):
        ctx.root, ctx.ps = root_rank, ps
        return H.synchronize(BS.broadcast_async(tensor, root_rank, name, ps))

    @staticmethod
    def backward(ctx, g):
        avg = H.synchronize(AR.allreduce_async(g.contiguous(), None, None, Average, process_set=ctx.ps))
        return (avg if _basics.rank() == ctx.root else avg * 0), None, None, None


def broadcast(tensor, root_rank, name=None, process_set=global_process_set) -> torch.Tensor:
    """``root_rank``'s tensor, as a new tensor on every worker (the input is not modified)."""
    process_set = C.check_process_set(process_set, "broadcast")
    if not tensor.dtype.is_floating_point:
        return H.synchronize(BS.broadcast_async(tensor, root_rank, name, process_set))  # not differentiable anyway
    return _Broadcast.apply(tensor, root_rank, name, process_set)


class _Alltoall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, tensor, splits, name, ps):
        out, received = H.synchronize(G.alltoall_async(tensor, splits, name, ps))
        ctx.received, ctx.ps = received, ps
        ctx.mark_non_differentiable(received)
        return out, received

    @staticmethod
    def backward(ctx, g, _g_received):
        out, _ = H.synchronize(G.alltoall_async(g.contiguous(), ctx.received, process_set=ctx.ps))
        return out, None, None, None


def alltoall(tensor, splits=None, name=None, process_set=global_process_set):
    """Sends ``splits[d]`` rows to each worker d (even split without ``splits``) and returns the
    blocks received, in source order; with ``splits`` also the received splits (int32)."""
    process_set = C.check_process_set(process_set, "alltoall")
    if not isinstance(tensor, torch.Tensor):
        raise ValueError(f"alltoall: expected a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype.is_floating_point:
        out, received = _Alltoall.apply(tensor, splits, name, process_set)
    else:
        out, received = H.synchronize(G.alltoall_async(tensor, splits, name, process_set))
    return out if splits is None else (out, received)


class _Reducescatter(torch.autograd.Function):
    @staticmethod
    def forward(ctx, name, op, pre, post, single, ps, *tensors):
        ctx.args = (op, pre, post, single, ps)
        if single:
            return H.synchronize(BS.reducescatter_async(tensors[0], name, op, ps, pre, post))
        return H.synchronize(BS.grouped_reducescatter_async(list(tensors), name, op, ps, pre, post))

    @staticmethod
    def backward(ctx, *grads):
        op, pre, post, _, ps = ctx.args
        factor = (C.set_size(ps) if op == Sum else 1) * pre * post
        scaled = [C.scale_(g.contiguous().clone(), factor) for g in grads]
        outs, _counts = G.gather_now("grouped_allgather", None, scaled, "reducescatter backward", ps)
        return (None, None, None, None, None, None, *outs)


def reducescatter(tensor, name=None, compression=Compression.none, op=Average, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0) -> torch.Tensor:
    """This worker's rows of the reduction (Sum or Average) of ``tensor`` over the workers."""
    process_set = C.check_process_set(process_set, "reducescatter")
    compressed, cctx = compression.compress(tensor)
    out = _Reducescatter.apply(name, op, prescale_factor, postscale_factor, True, process_set, compressed)
    return compression.decompress(out, cctx)


def grouped_reducescatter(tensors, name=None, compression=Compression.none, op=Average,
                          process_set=global_process_set, prescale_factor=1.0, postscale_factor=1.0) -> list:
    """:func:`reducescatter` of each tensor of the list, as one group; returns a list."""
    process_set = C.check_process_set(process_set, "grouped_reducescatter")
    pairs = [compression.compress(t) for t in tensors]
    outs = _Reducescatter.apply(name, op, prescale_factor, postscale_factor, False, process_set,
                                *[p for p, _ in pairs])
    return [compression.decompress(o, c) for o, (_, c) in zip(outs, pairs)]
