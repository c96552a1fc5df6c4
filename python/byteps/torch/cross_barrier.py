"""BytePS's ``CrossBarrier``: the next iteration's forward overlaps the gradients' push_pulls.

A DistributedOptimizer waits in ``step()`` for every gradient, then updates every parameter: the
iteration barrier.  ``CrossBarrier(model, optimizer, ...)`` removes it, as BytePS (and
ByteScheduler) do:

* as backward produces a gradient, its push_pull starts and the parameter is marked pending;
* a poller thread takes each push_pull as it completes, in whatever order, writes the average to
  ``p.grad``, applies the wrapped optimizer's update to that parameter alone, zeroes ``p.grad``
  and clears the mark;
* ``step()`` only starts the push_pulls of parameters that got no gradient (they count as zeros,
  as with DistributedOptimizer) and returns at once; ``zero_grad()`` does nothing (the poller
  zeroes each gradient once it is applied);
* a forward pre-hook on every module that holds parameters waits until those parameters are no
  longer pending, so the first layers, whose push_pulls have the highest priority, compute the
  next forward while the last layers' gradients are still on the wire.

The result is the same training as DistributedOptimizer's, step for step.  Only SGD, Adam and
RMSprop are accepted, as in BytePS: their update of one parameter depends on that parameter's
state alone, so updating one at a time is the same update.  The update uses the optimizer's live
param group (a learning-rate schedule applies from the next update on).

After ``num_steps`` calls of ``step()`` the optimizer waits for every update and goes on as a
plain DistributedOptimizer.  Anything that reads the parameters outside a forward (evaluation
code that bypasses modules, saving a checkpoint) calls ``optimizer.synchronize()`` first, which
waits for every started update; ``state_dict()`` does so itself.  A failed push_pull is raised by
the next forward, ``step()`` or ``synchronize()``, naming the tensor.
"""

from __future__ import annotations

import copy
import threading
import time

import torch

from . import ops
from .compression import Compression
from .gradients import finish_push_pulls, update_learning_rate
from .optimizer import _DistributedOptimizer, _EXCEEDED

__all__ = ["CrossBarrier"]

_SUPPORTED = (torch.optim.SGD, torch.optim.Adam, torch.optim.RMSprop)
_POLL_S = 0.0005  # the poller's sleep when nothing completed: the added latency of one update


class _CrossBarrier(_DistributedOptimizer):
    """The methods of a CrossBarrier optimizer (see :func:`CrossBarrier`)."""

    def __init__(self, params, named_parameters, compression, backward_passes_per_step, model, num_steps):
        self._overlap = False  # the hooks DistributedOptimizer registers consult it
        _DistributedOptimizer.__init__(self, params, named_parameters, compression, backward_passes_per_step)
        self._num_steps = num_steps
        self._steps = 0
        self._cv = threading.Condition()
        self._queue = []  # (param, handle, compression context), in start order
        self._pending = set()  # parameters whose update is not applied yet
        self._started = set()  # parameters started since the last step()
        self._error = None
        self._stopping = False
        self._poller = None
        self._forward_hooks = []
        self._groups = None  # param -> its group, for self._groups_of (load_state_dict replaces the groups)
        if ops.size() > 1:
            self._stepper = copy.copy(self)  # Optimizer's own copy: defaults, state, param_groups only
            owners = [m for m in model.modules() if any(True for _ in m.parameters(recurse=False))]
            self._forward_hooks = [m.register_forward_pre_hook(self._wait_for(list(m.parameters(recurse=False))))
                                   for m in owners]
            # Parameters no module of the model holds (used by the loss, say): step() waits for them.
            held = {id(p) for m in owners for p in m.parameters(recurse=False)}
            self._orphans = [p for p in self._requires_update if id(p) not in held]
            self._overlap = True
            self._poller = threading.Thread(target=self._poll_loop, name="bps-cross-barrier", daemon=True)
            self._poller.start()

    # -- the grad hook (DistributedOptimizer's, as long as there is no overlap) --------------------

    def _make_hook(self, p):
        synchronous = _DistributedOptimizer._make_hook(self, p)

        def hook(*ignore):
            if not self._overlap:
                return synchronous(*ignore)
            if self._push_pull_delay[p] <= 0:
                raise AssertionError(_EXCEEDED)
            self._push_pull_delay[p] -= 1
            if self._push_pull_delay[p] == 0:
                self._start(p)
        return hook

    def _start(self, p):
        with self._cv:
            self._raise_failure()
            if p in self._pending:  # cannot happen after a forward; never push a gradient twice
                raise AssertionError(f"CrossBarrier: {self._parameter_names[p]!r} got a second gradient before "
                                     "its update was applied (a backward without a forward in between?)")
            self._pending.add(p)
        handle, ctx = self._push_pull_grad_async(p)
        with self._cv:
            self._queue.append((p, handle, ctx))
            self._started.add(p)
            self._push_pull_delay[p] = self.backward_passes_per_step
            self._cv.notify_all()

    # -- the poller thread --------------------------------------------------------------------

    def _poll_loop(self):
        try:
            while True:
                with self._cv:
                    while not self._queue and not self._stopping:
                        self._cv.wait()
                    if not self._queue:
                        return
                    queued = list(self._queue)
                done = [item for item in queued if ops.poll(item[1])]
                if not done:
                    time.sleep(_POLL_S)
                    continue
                for item in done:
                    self._apply(*item)
        except BaseException as err:  # noqa: BLE001 - handed to the training thread
            with self._cv:
                self._error = err
                self._cv.notify_all()

    def _apply(self, p, handle, ctx):
        finish_push_pulls({p: (handle, ctx)}, self._compression, self._postscale)  # raises its error
        # The wrapped class's update of p alone, with p's live group and the optimizer's state.
        self._stepper.__dict__.update(defaults=self.defaults, state=self.state,
                                      param_groups=[{**self._group_of(p), "params": [p]}])
        self._bps_base.step(self._stepper)
        p.grad.zero_()
        with self._cv:
            self._queue = [item for item in self._queue if item[0] is not p]
            self._pending.discard(p)
            self._cv.notify_all()

    def _group_of(self, p):
        if self._groups is None or self._groups[0] is not self.param_groups:
            self._groups = (self.param_groups, {q: g for g in self.param_groups for q in g["params"]})
        return self._groups[1][p]

    def _raise_failure(self):
        if self._error is not None:
            raise RuntimeError(f"CrossBarrier: a gradient update failed: {self._error}") from self._error

    def _wait_for(self, params):
        def pre_hook(module, inputs):
            with self._cv:
                while self._error is None and any(p in self._pending for p in params):
                    self._cv.wait()
                self._raise_failure()
        return pre_hook

    # -- the optimizer's calls ----------------------------------------------------------------

    def synchronize(self):
        """Waits until every started gradient's update is applied (overlap), or does what
        DistributedOptimizer's synchronize does (one worker, or after ``num_steps``)."""
        if not self._overlap:
            return _DistributedOptimizer.synchronize(self)
        with self._cv:
            while self._error is None and self._pending:
                self._cv.wait()
            self._raise_failure()

    def step(self, closure=None):
        if not self._overlap:
            return _DistributedOptimizer.step(self, closure)
        update_learning_rate(self, self._compression)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for p in self._requires_update:  # no gradient this step: zeros, as DistributedOptimizer sends
            if p not in self._started:
                self._start(p)
        self._started = set()
        self._wait_for(self._orphans)(None, None)
        self._steps += 1
        if self._steps >= self._num_steps:
            self.stop()
        return loss

    def stop(self):
        """Waits for every update, stops the poller; from then on a plain DistributedOptimizer."""
        if not self._overlap:
            return
        try:
            self.synchronize()
        finally:
            self._overlap = False
            with self._cv:
                self._stopping = True
                self._cv.notify_all()
            self._poller.join()
            for h in self._forward_hooks:
                h.remove()
            self._forward_hooks = []
            for p in self._push_pull_delay:
                self._push_pull_delay[p] = self.backward_passes_per_step

    def zero_grad(self, *args, **kwargs):
        if self._overlap:
            return None  # each gradient is zeroed once its update is applied
        return _DistributedOptimizer.zero_grad(self, *args, **kwargs)

    def state_dict(self, *args, **kwargs):
        if self._overlap:
            self.synchronize()
        return self._bps_base.state_dict(self, *args, **kwargs)


def CrossBarrier(model, optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                 num_steps=10**6):
    """Wraps ``optimizer`` (SGD, Adam or RMSprop) like DistributedOptimizer, without the iteration
    barrier: see the module's text.

    Args:
        model: the ``torch.nn.Module`` whose forward waits for its parameters' updates.
        optimizer, named_parameters, compression, backward_passes_per_step: as DistributedOptimizer.
        num_steps: after this many ``step()`` calls, wait for every update and go on without overlap.

    Raises:
        TypeError: ``model`` is not a Module.  ValueError: another optimizer class, or bad
        ``named_parameters`` / ``num_steps``.
    """
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"CrossBarrier: model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, _SUPPORTED):
        raise ValueError(f"CrossBarrier supports SGD, Adam and RMSprop (as in BytePS), not "
                         f"{type(optimizer).__name__}")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or num_steps < 1:
        raise ValueError(f"CrossBarrier: num_steps must be a positive int, got {num_steps!r}")
    base = optimizer.__class__
    body = {k: v for k, v in _DistributedOptimizer.__dict__.items() if k not in ("__dict__", "__weakref__")}
    body.update({k: v for k, v in _CrossBarrier.__dict__.items() if k not in ("__dict__", "__weakref__")})
    body["_bps_base"] = base
    body["__qualname__"] = base.__qualname__
    cls = type(base.__name__, (base,), body)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, model, num_steps)
