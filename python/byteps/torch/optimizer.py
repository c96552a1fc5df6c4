"""DistributedOptimizer: wraps a torch optimizer so that ``step()`` applies gradients averaged
over all workers.

As in BytePS, ``DistributedOptimizer(opt, ...)`` returns an instance of a class created on the
fly: a subclass of ``type(opt)`` (same name) whose methods come from
:class:`_DistributedOptimizer`, built on ``opt.param_groups``.  With more than one worker, a hook
on each parameter's gradient accumulator starts the push_pull of that gradient as soon as
backward has produced it, so communication overlaps the rest of backward; earlier layers (first
in parameter order) get a higher priority, because the next forward needs them first.
``step()`` waits for all of them, writes the averaged gradients and runs the wrapped step.

Tensor names: ``"Gradient." + name`` for the gradients and ``"Parameter." + name`` for
:func:`broadcast_parameters`, declared (with sizes, so the core balances bytes over servers) in
sorted name order, the same on every worker.  Before that, the workers check that they have the
same parameters (names, shapes, dtypes); a difference is a ValueError naming the parameter.

Thread-safety: drive an optimizer from one thread (the hooks run on the thread that calls
backward, as autograd does for CPU tensors).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from . import ops
from .compression import Compression
from .gradients import (declare_parameters, finish_push_pulls, find_duplicates, hook_gradients, parameter_names,
                        priorities, start_push_pull)

__all__ = ["DistributedOptimizer", "_DistributedOptimizer"]

_EXCEEDED = ("Gradients were computed more than backward_passes_per_step times before call to step(). "
             "Increase backward_passes_per_step to accumulate gradients locally.")


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods of a DistributedOptimizer (see :func:`DistributedOptimizer`)."""

    _bps_base = torch.optim.Optimizer  # the wrapped optimizer's class (set on the built class)

    def __init__(self, params, named_parameters, compression=Compression.none, backward_passes_per_step=1,
                 op=None, gradient_predivide_factor=1.0):
        self._bps_base.__init__(self, params)
        self._compression = compression
        # Horovod's op and gradient_predivide_factor: Sum adds the gradients; Average divides the
        # sum by the number of workers, in two steps with a predivide factor f (1/f before, f/size
        # after, which keeps float16 sums in range).
        if op not in (None, "Average", "Sum"):
            raise ValueError(f"DistributedOptimizer: op={op!r} is not supported by byteps (its servers sum); use "
                             "Average or Sum")
        if gradient_predivide_factor != 1.0 and op == "Sum":
            raise ValueError("DistributedOptimizer: gradient_predivide_factor applies to op=Average only")
        if not gradient_predivide_factor > 0:
            raise ValueError(f"DistributedOptimizer: gradient_predivide_factor={gradient_predivide_factor!r} must be "
                             "> 0")
        predivide = gradient_predivide_factor != 1.0
        self._average = op != "Sum" and not predivide
        self._prescale = 1.0 / gradient_predivide_factor if predivide else 1.0
        self._postscale = gradient_predivide_factor / ops.size() if predivide else 1.0
        all_params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names, order = parameter_names(named_parameters, all_params, "DistributedOptimizer")
        self._priority = priorities(order)
        self.backward_passes_per_step = backward_passes_per_step
        # Every parameter gets a counter (BytePS built them from named_parameters only, quirk §11.11).
        self._push_pull_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = []
        self._should_sync = True
        declare_parameters(order, compression, "DistributedOptimizer")
        if ops.size() > 1:
            self._requires_update = [p for group in self.param_groups for p in group["params"] if p.requires_grad]
            self._grad_accs = hook_gradients(self._requires_update, self._make_hook)

    @staticmethod
    def find_duplicates(lst):
        return find_duplicates(lst)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._push_pull_delay:
            self._push_pull_delay[p] = passes

    def _push_pull_grad_async(self, p):
        return start_push_pull(p, self._parameter_names[p], self._priority[p], self._compression, self._average,
                               self._prescale)

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None and self._push_pull_delay[p] <= 0:
                raise AssertionError(_EXCEEDED)
            assert not p.grad.requires_grad
            assert self._push_pull_delay[p] > 0
            handle, ctx = None, None
            self._push_pull_delay[p] -= 1
            if self._push_pull_delay[p] == 0:
                handle, ctx = self._push_pull_grad_async(p)
            self._handles[p] = (handle, ctx)
        return hook

    def synchronize(self):
        """Waits for every gradient's push_pull (starting those not started yet: parameters that
        got no gradient, or fewer than backward_passes_per_step) and writes the averages to
        ``p.grad``.  Does nothing with one worker."""
        for p in self._requires_update:
            if self._handles.get(p, (None, None))[0] is None:
                self._handles[p] = self._push_pull_grad_async(p)
        handles, self._handles = self._handles, {}
        try:
            finish_push_pulls(handles, self._compression, self._postscale)
        finally:
            # After a failure, forget the rest (the core keeps their tensors alive) and start over.
            for p in handles:
                self._push_pull_delay[p] = self.backward_passes_per_step

    @contextmanager
    def skip_synchronize(self):
        """The next ``step()`` inside this block skips its synchronize (call ``synchronize()``
        yourself first, e.g. to clip the averaged gradients)."""
        self._should_sync = False
        try:
            yield
        finally:
            self._should_sync = True

    def step(self, closure=None):
        if self._should_sync:
            self.synchronize()
        return self._bps_base.step(self, closure)

    def zero_grad(self, *args, **kwargs):
        if self._handles:
            raise AssertionError("optimizer.zero_grad() was called after loss.backward() but before "
                                 "optimizer.step() or optimizer.synchronize(). This is prohibited as it can cause "
                                 "a race condition.")
        return self._bps_base.zero_grad(self, *args, **kwargs)


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=None, gradient_predivide_factor=1.0):
    """An optimizer that averages gradients over all workers before applying them.

    push_pulls start during ``loss.backward()`` as each gradient becomes ready; ``step()`` waits
    for them.  ``synchronize()`` waits explicitly (e.g. before clipping gradients; then use
    ``with optimizer.skip_synchronize(): optimizer.step()``).

    Args:
        optimizer: the torch optimizer to wrap (its param_groups are used; its state is not).
        named_parameters: ``model.named_parameters()``: names the push_pulls (recommended).
            Without it the names are ``push_pull.noname.<i>`` by position, which all workers
            must then have in the same order.
        compression: ``Compression.none`` or ``Compression.fp16``.
        backward_passes_per_step: backward passes to accumulate locally per ``step()``.
        op: Horovod's ``Average`` (default) or ``Sum`` of the workers' gradients (``Adasum``: ValueError).
        gradient_predivide_factor: Horovod's: with ``Average``, gradients are divided by it before
            the sum and multiplied by it / size after.

    Raises:
        ValueError: bad ``named_parameters``, or workers with different parameters (the message
            names the parameter).
    """
    base = optimizer.__class__
    body = {k: v for k, v in _DistributedOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")}
    body["_bps_base"] = base
    body["__qualname__"] = base.__qualname__
    cls = type(base.__name__, (base,), body)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor)
