"""DistributedOptimizer(op=Adasum) with more than one worker: Horovod's "delta optimizer"
(reference section 7), over byteps' Adasum servers.

Per parameter ``p``, once its gradient has landed ``backward_passes_per_step`` times: remember
``start = p``, run the wrapped optimizer's step for ``p`` alone, turn ``p`` into its local update
``delta = p - start`` and start an in-place Adasum allreduce of it (named after the parameter,
compressed).  ``step()`` evaluates the closure, does the same for parameters whose hook did not
fire (a missing gradient: the wrapped step leaves ``p`` alone, so its delta is zero), then for
each parameter waits and sets ``p = start + Adasum(delta)``.  Adasum is applied to the updates, not
to the gradients, so the wrapped optimizer's state (momentum, Adam's moments) stays per worker.

``synchronize()`` does nothing (there is nothing to wait for before ``step()``);
``skip_synchronize()`` raises AssertionError, as Horovod's does.

Thread-safety: drive an optimizer from one thread (the hooks run on the thread that calls
backward).
"""

from __future__ import annotations

from contextlib import contextmanager

import torch

from .compression import Compression, attrs_of
from .hvd_allreduce import allreduce_compressed_async
from .hvd_common import Adasum
from .hvd_handles import synchronize as hvd_synchronize
from .gradients import EXCEEDED, declare_parameters, hook_gradients, parameter_names, zero_grad_when_idle

__all__ = ["_DistributedAdasumOptimizer"]



class _DistributedAdasumOptimizer(torch.optim.Optimizer):
    """The methods of a DistributedOptimizer with op=Adasum (see the module docstring)."""

    _bps_base = torch.optim.Optimizer  # the wrapped optimizer's class (set on the built class)

    def __init__(self, params, named_parameters, compression=Compression.none, backward_passes_per_step=1):
        self._bps_base.__init__(self, params)
        self._compression = compression
        all_params = [p for group in self.param_groups for p in group["params"]]
        self._parameter_names, order = parameter_names(named_parameters, all_params, "DistributedOptimizer")
        declare_parameters(order, compression, "DistributedOptimizer")
        self.backward_passes_per_step = backward_passes_per_step
        self._delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}  # p -> (hvd handle or None, compression context)
        self._start = {p: torch.zeros_like(p, requires_grad=False) for p in all_params}
        self._requires_update = [p for p in all_params if p.requires_grad]
        self._grad_accs = hook_gradients(self._requires_update, self._make_hook)

    def set_backward_passes_per_step(self, passes):
        self.backward_passes_per_step = passes
        for p in self._delay:
            self._delay[p] = passes

    def _step_alone(self, p):
        """The wrapped optimizer's step for ``p`` only (its group's options, the others hidden)."""
        stashed = [group["params"] for group in self.param_groups]
        try:
            for group in self.param_groups:
                group["params"] = [p] if any(p is q for q in group["params"]) else []
            self._bps_base.step(self)
        finally:
            for group, params in zip(self.param_groups, stashed):
                group["params"] = params

    def _start_delta(self, p):
        """Local update of ``p``, then its in-place Adasum allreduce; returns (handle, ctx)."""
        with torch.no_grad():
            start = self._start[p]
            start.copy_(p)
            self._step_alone(p)
            p.sub_(start)  # p holds the local update until step() restores it
            compressed, ctx = self._compression.compress(p.data)
            # Compression attributes go along: the core refuses them for Adasum, naming the tensor.
            handle = allreduce_compressed_async(compressed, name="Gradient." + self._parameter_names[p], op=Adasum,
                                                compression=attrs_of(self._compression), inplace=True)
        return handle, ctx

    def _make_hook(self, p):
        def hook(*ignore):
            if self._handles.get(p, (None, None))[0] is not None and self._delay[p] <= 0:
                raise AssertionError(EXCEEDED)
            assert not p.grad.requires_grad
            assert self._delay[p] > 0
            self._delay[p] -= 1
            if self._delay[p] == 0:
                self._handles[p] = self._start_delta(p)
            else:
                self._handles[p] = (None, None)
        return hook

    def synchronize(self):
        """Nothing to do: the deltas are reduced and applied in step() (as in Horovod)."""

    @contextmanager
    def skip_synchronize(self):
        raise AssertionError("Skipping synchronization is not supported when using Adasum optimizer.")
        yield  # pragma: no cover - a generator for contextmanager

    def step(self, closure=None):
        loss = closure() if closure is not None else None
        for p in self._requires_update:
            if self._handles.get(p, (None, None))[0] is None:
                self._handles[p] = self._start_delta(p)
        handles, self._handles = self._handles, {}
        try:
            with torch.no_grad():
                for p, (handle, ctx) in handles.items():
                    delta = self._compression.decompress(hvd_synchronize(handle), ctx)
                    start = self._start[p]
                    start.add_(delta.to(start.dtype))
                    p.copy_(start)
        finally:
            for p in handles:
                self._delay[p] = self.backward_passes_per_step
        return loss

    zero_grad = zero_grad_when_idle
