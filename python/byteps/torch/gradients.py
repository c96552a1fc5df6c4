"""Gradients push_pulled as backward produces them: what DistributedOptimizer and
DistributedDataParallel share.

* :func:`parameter_names` checks ``named_parameters`` (as BytePS does) and names every
  parameter; :func:`declare_parameters` checks that every worker has the same parameters and
  declares ``"Gradient.<name>"`` and ``"Parameter.<name>"`` in sorted name order.
* :func:`hook_gradients` runs a callback on each parameter's gradient accumulator, i.e. as soon
  as backward has produced that gradient; :func:`start_push_pull` then starts averaging
  ``p.grad`` in place (compressed), and :func:`finish_push_pulls` waits for the started ones
  and writes the averages back to ``p.grad``.

Earlier layers (first in model order) get a higher priority: the next forward needs them first.
"""

from __future__ import annotations

from typing import Callable, Iterable

import torch

from . import ops
from .compression import has_error_feedback, wire_dtype
from .functions import verify_same_tensors


EXCEEDED = ("Gradients were computed more than backward_passes_per_step times before call to step(). "
            "Increase backward_passes_per_step to accumulate gradients locally.")


def zero_grad_when_idle(optimizer, *args, **kwargs):
    """Both DistributedOptimizers' ``zero_grad``: AssertionError while reductions started by
    backward are outstanding (``optimizer._handles``), else the wrapped class's ``zero_grad``."""
    if optimizer._handles:
        raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                             "optimizer.step() or optimizer.synchronize(). This is prohibited as it can cause "
                             "a race condition.")
    return optimizer._bps_base.zero_grad(optimizer, *args, **kwargs)


def find_duplicates(names) -> set:
    seen, dups = set(), set()
    for name in names:
        if name in seen:
            dups.add(name)
        seen.add(name)
    return dups


def parameter_names(named_parameters, params, what):
    """Validates ``named_parameters`` (as BytePS does) and returns ``(names, order)``: a dict
    param -> name, and the list of (name, tensor) in the order given (model order)."""
    if named_parameters is not None:
        named_parameters = list(named_parameters)
    else:
        named_parameters = []
    if any(not isinstance(p, tuple) for p in named_parameters):
        raise ValueError("named_parameters should be a sequence of tuples (name, parameter), usually produced by "
                         "model.named_parameters().")
    dups = find_duplicates([k for k, _ in named_parameters])
    if dups:
        raise ValueError("Parameter names in named_parameters must be unique. Found duplicates: %s"
                         % ", ".join(sorted(dups)))
    if named_parameters and any(not isinstance(p, torch.Tensor) for _, p in named_parameters):
        raise ValueError("named_parameters should consistently be a sequence of tuples (name, torch.Tensor)")
    if named_parameters:
        names = {}
        for name, p in named_parameters:
            names.setdefault(p, name)  # a tensor listed twice (tied) keeps its first name
        unnamed = [i for i, p in enumerate(params) if p not in names]
        if unnamed:
            raise ValueError(f"{what}: named_parameters was given, but {len(unnamed)} parameter(s) of the "
                             f"optimizer are not in it (positions {unnamed[:10]} in its param groups)")
        return names, named_parameters
    order = [("push_pull.noname.%d" % i, p) for i, p in enumerate(params)]
    return {p: name for name, p in order}, order


def declare_parameters(order, compression, what):
    """Checks that all workers have the same parameters, then declares "Gradient.<name>" for all
    names sorted, then "Parameter.<name>" (the same order on every worker)."""
    entries = sorted((name, p) for name, p in order)
    if ops.size() > 1:
        verify_same_tensors([(name, tuple(p.shape), p.dtype) for name, p in entries], what)
    for name, p in entries:
        wire = wire_dtype(compression, p.dtype)
        if wire is not None and wire in ops._CODES:
            ops.declare_tensor("Gradient." + name, p.numel() * torch.empty(0, dtype=wire).element_size(), wire)
        else:
            ops.declare("Gradient." + name)
    for name, p in entries:
        if p.dtype in ops._CODES:
            ops.declare_tensor("Parameter." + name, p)
        else:
            ops.declare("Parameter." + name)


def priorities(order) -> dict:
    """param -> push_pull priority: earlier in ``order`` (model order) is higher."""
    return {p: -i for i, (_, p) in enumerate(order)}


def hook_gradients(params: Iterable[torch.Tensor], make_hook: Callable[[torch.Tensor], Callable]) -> list:
    """Gives each parameter a zero gradient and registers ``make_hook(p)`` on its gradient
    accumulator; returns the accumulators (they must be kept alive for the hooks to run)."""
    accumulators = []
    for p in params:
        p.grad = p.data.new(p.size()).zero_()
        accumulator = p.expand_as(p).grad_fn.next_functions[0][0]
        accumulator.register_hook(make_hook(p))
        accumulators.append(accumulator)
    return accumulators


def start_push_pull(p: torch.Tensor, name: str, priority: int, compression, average: bool = True,
                    prescale: float = 1.0):
    """Starts averaging (or summing) ``p.grad`` over the workers (in place, compressed, first
    multiplied by ``prescale``) as "Gradient.<name>"; returns ``(handle, compression context)``.
    A missing gradient counts as zeros."""
    if p.grad is None:
        p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
    elif not p.grad.is_contiguous():
        p.grad = p.grad.contiguous()
    if prescale != 1.0:
        p.grad.mul_(prescale)
    compressed, ctx = compression.compress(p.grad)
    handle = ops.push_pull_async_inplace(compressed, average=average, name="Gradient." + name, priority=priority,
                                         compression=compression)
    return handle, ctx


def finish_push_pulls(handles: dict, compression, postscale: float = 1.0, sync=None) -> None:
    """Waits for each ``p -> (handle, ctx)`` of ``handles`` (with ``sync``, default
    ``ops.synchronize``) and writes the result (times ``postscale``) to ``p.grad``."""
    sync = sync or ops.synchronize
    for p, (handle, ctx) in handles.items():
        grad = compression.decompress(sync(handle), ctx)
        if grad is not p.grad:
            p.grad.copy_(grad)
        if postscale != 1.0:
            p.grad.mul_(postscale)


def update_learning_rate(optimizer, compression) -> None:
    """Error feedback needs the learning rate: hands the core ``param_groups[0]["lr"]`` when
    ``compression`` has ``ef``."""
    if has_error_feedback(compression) and optimizer.param_groups and "lr" in optimizer.param_groups[0]:
        ops.set_learning_rate(optimizer.param_groups[0]["lr"])
