"""Horovod's ``SyncBatchNorm`` on byteps: batch normalisation whose statistics cover the global
batch (every worker's share), through the summation servers.

Training (or eval without running statistics) with more than one worker:

* forward: each worker's per-channel ``count`` / ``mean`` / biased ``var`` go in ONE allgather
  (``"sync_batch_norm.stats"``, float64; Horovod sends count, mean and invstd in three
  allgathers named ``sync_batch_norm.count/.mean/.invstd``); every worker combines them
  count-weighted into the global mean and variance (exact: no ``1/invstd^2 - eps`` round trip),
  normalises with them, and updates the running statistics with them (the running variance
  unbiased over the global count, as ``torch.nn.BatchNorm`` does);
* backward: the per-channel ``sum_dy`` and ``sum_dy_xmu`` go in one Sum allreduce
  (``"sync_batch_norm.sum_dy_xmu.<channels>"``); the input gradient uses the global sums, the
  weight and bias gradients stay local (not reduced: DistributedOptimizer averages them).

Net effect: outputs and running statistics equal ``torch.nn.BatchNorm`` over the concatenated
global batch, and the per-worker gradients averaged over the workers equal that BatchNorm's
gradients for the worker-averaged loss.  Workers may have batches of different sizes (even
empty ones); every worker must call every SyncBatchNorm layer in the same order.

Eval with running statistics, or a job of one worker: plain local batch norm (no collective).

Differences from Horovod: Horovod raises ValueError for a CPU input (it uses CUDA kernels);
byteps takes CPU tensors, and CUDA tensors of the process's device where the core was built with
CUDA.  float16/bfloat16 inputs are normalised in float32 and returned in their own dtype.
"""

from __future__ import annotations

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from .. import _basics
from . import hvd_handles as H
from .hvd_allreduce import allreduce_async_
from .hvd_common import Sum
from .hvd_gather import allgather_async

__all__ = ["SyncBatchNorm"]


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _channel_view(v: torch.Tensor, ndim: int) -> torch.Tensor:
    """A per-channel vector shaped to broadcast over (N, C, *spatial)."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def _global_stats(x: torch.Tensor, channels: int):
    """(global count, global mean, global biased var) over every worker's ``x``, in float64."""
    dims = [0] + list(range(2, x.dim()))
    count = x.numel() // channels if channels else 0
    xd = x.detach().to(torch.float64)
    if count:
        mean = xd.mean(dims)
        var = xd.var(dims, unbiased=False)
    else:  # an empty share: contributes nothing to the weighted combination
        mean = var = torch.zeros(channels, dtype=torch.float64, device=x.device)
    mine = torch.cat([torch.tensor([float(count)], dtype=torch.float64, device=x.device), mean, var]).unsqueeze(0)
    rows = H.synchronize(allgather_async(mine, name="sync_batch_norm.stats"))
    counts, means, vars_ = rows[:, :1], rows[:, 1:1 + channels], rows[:, 1 + channels:]
    total = float(counts.sum())
    if total <= 1:
        raise ValueError(f"SyncBatchNorm: expected more than 1 value per channel over all workers in training, got "
                         f"{int(total)} (input of shape {tuple(x.shape)} on rank {_basics.rank()})")
    g_mean = (counts * means).sum(0) / total
    g_var = (counts * (vars_ + (means - g_mean) ** 2)).sum(0) / total
    return total, g_mean, g_var


class _SyncBatchNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, running_mean, running_var, eps, momentum):
        channels = x.shape[1]
        total, mean, var = _global_stats(x, channels)
        if running_mean is not None and momentum is not None:
            with torch.no_grad():
                running_mean.mul_(1 - momentum).add_(mean.to(running_mean.dtype), alpha=momentum)
                unbiased = var * (total / (total - 1))
                running_var.mul_(1 - momentum).add_(unbiased.to(running_var.dtype), alpha=momentum)
        acc = _acc_dtype(x.dtype)
        mean_a, invstd = mean.to(acc), torch.rsqrt(var + eps).to(acc)
        y = (x.to(acc) - _channel_view(mean_a, x.dim())) * _channel_view(invstd, x.dim())
        if weight is not None:
            y = y * _channel_view(weight.to(acc), x.dim())
        if bias is not None:
            y = y + _channel_view(bias.to(acc), x.dim())
        ctx.save_for_backward(x, weight, mean_a, invstd)
        ctx.total = total
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, dy):
        x, weight, mean, invstd = ctx.saved_tensors
        acc, nd = mean.dtype, x.dim()
        dims = [0] + list(range(2, nd))
        dya = dy.to(acc)
        xmu = x.to(acc) - _channel_view(mean, nd)
        sum_dy = dya.sum(dims)
        sum_dy_xmu = (dya * xmu).sum(dims)
        grad_x = grad_w = grad_b = None
        if ctx.needs_input_grad[0]:
            channels = mean.numel()
            sums = torch.cat([sum_dy, sum_dy_xmu]).to(torch.float64)
            H.synchronize(allreduce_async_(sums, name=f"sync_batch_norm.sum_dy_xmu.{channels}", op=Sum))
            mean_dy = (sums[:channels] / ctx.total).to(acc)
            mean_dy_xmu = (sums[channels:] / ctx.total).to(acc)
            scale = invstd if weight is None else invstd * weight.to(acc)
            grad_x = (dya - _channel_view(mean_dy, nd) - xmu * _channel_view(invstd * invstd * mean_dy_xmu, nd))
            grad_x = (grad_x * _channel_view(scale, nd)).to(x.dtype)
        if weight is not None and ctx.needs_input_grad[1]:
            grad_w = (sum_dy_xmu * invstd).to(weight.dtype)
        if ctx.needs_input_grad[2]:
            grad_b = sum_dy.to(dy.dtype if weight is None else weight.dtype)
        return grad_x, grad_w, grad_b, None, None, None, None


class SyncBatchNorm(_BatchNorm):
    """Batch normalisation over the global batch of every worker (Horovod's ``hvd.SyncBatchNorm``;
    see the module docstring).  Takes inputs of at least 2 dimensions, ``(N, C, *)``."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device=device, dtype=dtype)

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError(f"SyncBatchNorm: expected at least 2D input (got {input.dim()}D input of shape "
                             f"{tuple(input.shape)})")

    def _run_bn(self, input, average_factor):
        use_batch = self.training or not self.track_running_stats
        return torch.nn.functional.batch_norm(
            input, self.running_mean if not self.training or self.track_running_stats else None,
            self.running_var if not self.training or self.track_running_stats else None,
            self.weight, self.bias, use_batch, average_factor, self.eps)

    def forward(self, input):
        self._check_input_dim(input)
        if input.shape[1] != self.num_features:
            raise ValueError(f"SyncBatchNorm: input of shape {tuple(input.shape)} has {input.shape[1]} channels, the "
                             f"layer {self.num_features}")
        # torch's _BatchNorm rule for the running-average factor (momentum None = cumulative average).
        average_factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats and self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            average_factor = 1.0 / float(self.num_batches_tracked) if self.momentum is None else self.momentum
        if (not self.training and self.track_running_stats) or _basics.size() == 1:
            return self._run_bn(input, average_factor)
        tracking = self.training and self.track_running_stats
        return _SyncBatchNormFunction.apply(input, self.weight, self.bias,
                                            self.running_mean if tracking else None,
                                            self.running_var if tracking else None, self.eps,
                                            average_factor if tracking else None)
