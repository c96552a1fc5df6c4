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
from .compression import Compression, wire_dtype

__all__ = ["DistributedOptimizer", "_DistributedOptimizer"]

_EXCEEDED = ("Gradients were computed more than backward_passes_per_step times before call to step(). "
             "Increase backward_passes_per_step to accumulate gradients locally.")


def _find_duplicates(names):
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
    dups = _find_duplicates([k for k, _ in named_parameters])
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
    from .functions import verify_same_tensors  # noqa: PLC0415 - functions imports this module

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


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods of a DistributedOptimizer (see :func:`DistributedOptimizer`)."""

    _bps_base = torch.optim.Optimizer  # the wrapped optimizer's class (set on the built class)

    def __init__(self, params, named_parameters, compression=Compression.none, backward_passes_per_step=1):
        self._bps_base.__init__(self, params)
        self._compression = compression
        all_params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names, order = parameter_names(named_parameters, all_params, "DistributedOptimizer")
        position = {p: i for i, (_, p) in enumerate(order)}
        # Earlier layers first: the next forward needs them first.
        self._priority = {p: -position[p] for p in all_params}
        self.backward_passes_per_step = backward_passes_per_step
        # Every parameter gets a counter (BytePS built them from named_parameters only, quirk §11.11).
        self._push_pull_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = []
        self._should_sync = True
        declare_parameters(order, compression, "DistributedOptimizer")
        if ops.size() > 1:
            self._register_hooks()

    @staticmethod
    def find_duplicates(lst):
        return _find_duplicates(lst)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._push_pull_delay:
            self._push_pull_delay[p] = passes

    def _register_hooks(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.requires_grad:
                    p.grad = p.data.new(p.size()).zero_()
                    self._requires_update.append(p)
                    grad_acc = p.expand_as(p).grad_fn.next_functions[0][0]
                    grad_acc.register_hook(self._make_hook(p))
                    self._grad_accs.append(grad_acc)

    def _push_pull_grad_async(self, p):
        name = self._parameter_names[p]
        if p.grad is None:
            p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
        elif not p.grad.is_contiguous():
            p.grad = p.grad.contiguous()
        compressed, ctx = self._compression.compress(p.grad)
        handle = ops.push_pull_async_inplace(compressed, average=True, name="Gradient." + name,
                                             priority=self._priority[p])
        return handle, ctx

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
            for p, (handle, ctx) in handles.items():
                output = ops.synchronize(handle)
                self._push_pull_delay[p] = self.backward_passes_per_step
                grad = self._compression.decompress(output, ctx)
                if grad is not p.grad:
                    p.grad.copy_(grad)
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
                         backward_passes_per_step=1):
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

    Raises:
        ValueError: bad ``named_parameters``, or workers with different parameters (the message
            names the parameter).
    """
    base = optimizer.__class__
    body = {k: v for k, v in _DistributedOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")}
    body["_bps_base"] = base
    body["__qualname__"] = base.__qualname__
    cls = type(base.__name__, (base,), body)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)
