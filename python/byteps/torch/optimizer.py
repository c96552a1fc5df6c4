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

With ``process_set=ps`` (a registered set other than the global one) the gradients go through
Horovod's allreduce among ``ps``'s members (keys ``"ps<id>.allreduce.Gradient.<name>"``, Average
over the set's size), the parameter check runs among the members, nothing is declared up front;
on a worker outside ``ps`` the optimizer registers no hooks and ``step()`` is the wrapped one.

Thread-safety: drive an optimizer from one thread (the hooks run on the thread that calls
backward, as autograd does for CPU tensors).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

import torch

from . import ops
from .compression import Compression, attrs_of
from .hvd_allreduce import allreduce_compressed_async
from .. import _basics
from . import hvd_common as C
from .hvd_common import Adasum, Average, global_process_set
from .hvd_handles import synchronize as hvd_synchronize
from .hvd_gather import sparse_allreduce_async
from .optimizer_adasum import _DistributedAdasumOptimizer
from .optimizer_args import resolve, uses_push_pull, verify_same_in_set
from .gradients import (EXCEEDED, declare_parameters, finish_push_pulls, find_duplicates, hook_gradients,
                        parameter_names, priorities, start_push_pull, update_learning_rate, zero_grad_when_idle)

__all__ = ["DistributedOptimizer", "_DistributedOptimizer", "resolve_compression"]


def resolve_compression(compression, compression_params):
    """``compression`` or the compressor ``compression_params`` describes (not both: a
    ``compression`` other than the default ``Compression.none``)."""
    if compression_params is not None:
        if compression is not None and compression is not Compression.none:
            raise ValueError("DistributedOptimizer: pass compression or compression_params, not both")
        return Compression.from_params(compression_params)
    return Compression.none if compression is None else compression

_EXCEEDED = EXCEEDED  # (cross_barrier imports it from here)


class _DistributedOptimizer(torch.optim.Optimizer):
    """The methods of a DistributedOptimizer (see :func:`DistributedOptimizer`)."""

    _bps_base = torch.optim.Optimizer  # the wrapped optimizer's class (set on the built class)

    def __init__(self, params, named_parameters, compression=Compression.none, backward_passes_per_step=1,
                 op=Average, gradient_predivide_factor=1.0, num_groups=0, groups=None, sparse_as_dense=False,
                 process_set=global_process_set):
        self._bps_base.__init__(self, params)
        self._compression = compression
        all_params = [p for group in self.param_groups for p in group["params"]]
        # named_parameters first, as Horovod checks them: a bad list is a ValueError even before init().
        self._parameter_names, order = parameter_names(named_parameters, all_params, "DistributedOptimizer")
        # Horovod's op and gradient_predivide_factor (optimizer_args.resolve): Sum adds the
        # gradients; Average divides the sum by the number of workers, in two steps with a
        # predivide factor f (1/f before, f/size after, which keeps float16 sums in range);
        # Min/Max/Product go through Horovod's allreduce, and so does every op on a process set
        # other than the global one (Average over the set's size; non-members: a local optimizer).
        plist = [p for group in self.param_groups for p in group["params"]]
        self._reduction = resolve(op, gradient_predivide_factor, backward_passes_per_step, num_groups, groups,
                                  process_set, plist, ops.size())
        self._average = self._reduction.average
        self._prescale = self._reduction.prescale
        self._postscale = self._reduction.postscale
        self._sparse_as_dense = bool(sparse_as_dense)
        self._synchronized = False
        self._priority = priorities(order)
        self.backward_passes_per_step = backward_passes_per_step
        # Every parameter gets a counter (BytePS built them from named_parameters only, quirk §11.11).
        self._push_pull_delay = {p: backward_passes_per_step for p in all_params}
        self._handles = {}
        self._grad_accs = []
        self._requires_update = []
        self._should_sync = True
        self._densified = set()
        if C.is_global(self._reduction.process_set):
            declare_parameters(order, compression, "DistributedOptimizer")
        elif self._reduction.member and ops.size() > 1:
            verify_same_in_set(order, self._reduction.process_set, "DistributedOptimizer")
        # Horovod's contract: on a worker outside the set no hooks, and step() is purely local.
        if ops.size() > 1 and self._reduction.member:
            update_learning_rate(self, compression)  # before the first backward compresses
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
        if p.grad is not None and p.grad.is_sparse:
            if not self._sparse_as_dense:  # Horovod's sparse path: an allgather of indices and values
                return sparse_allreduce_async(p.grad, "Gradient." + self._parameter_names[p], self._reduction.op,
                                              self._reduction.process_set), "sparse"
            p.grad = p.grad.to_dense()
            self._densified.add(p)
        if not uses_push_pull(self._reduction):
            name = "Gradient." + self._parameter_names[p]
            if p.grad is None:
                p.grad = torch.zeros_like(p, memory_format=torch.contiguous_format)
            compressed, ctx = self._compression.compress(p.grad.contiguous())
            f = self._reduction.predivide  # Horovod's gradient_predivide_factor: 1/f before, f after
            return allreduce_compressed_async(compressed, name=name, op=self._reduction.op, prescale_factor=1.0 / f,
                                              postscale_factor=f, process_set=self._reduction.process_set,
                                              compression=attrs_of(self._compression), inplace=True), ctx
        return start_push_pull(p, self._parameter_names[p], self._priority[p], self._compression, self._average,
                               self._prescale)

    def _ready(self, p):
        """Marks ``p``'s gradient ready; starts it, or its whole group once every member is ready."""
        group = self._reduction.groups.get(p)
        if group is None:
            self._handles[p] = self._push_pull_grad_async(p)
            return
        self._handles[p] = (None, None)
        if all(self._push_pull_delay[q] == 0 for q in group):
            for q in group:
                self._handles[q] = self._push_pull_grad_async(q)

    def _make_hook(self, p):
        def hook(*ignore):
            if p in self._handles and self._handles[p][0] is not None and self._push_pull_delay[p] <= 0:
                raise AssertionError(EXCEEDED)
            assert not p.grad.requires_grad
            assert self._push_pull_delay[p] > 0
            self._push_pull_delay[p] -= 1
            if self._push_pull_delay[p] == 0:
                self._ready(p)
            else:
                self._handles[p] = (None, None)
        return hook

    def synchronize(self):
        """Waits for every gradient's push_pull (starting those not started yet: parameters that
        got no gradient, or fewer than backward_passes_per_step) and writes the averages to
        ``p.grad``.  Does nothing with one worker, or on a worker outside ``process_set``."""
        for p in self._requires_update:
            if self._handles.get(p, (None, None))[0] is None:
                self._handles[p] = self._push_pull_grad_async(p)
        handles, self._handles = self._handles, {}
        self._synchronized = True
        try:
            sparse = {p: h for p, (h, ctx) in handles.items() if ctx == "sparse"}
            for p, wait in sparse.items():
                p.grad = wait()
            dense = {p: hc for p, hc in handles.items() if p not in sparse}
            if uses_push_pull(self._reduction):
                finish_push_pulls(dense, self._compression, self._postscale, ops.synchronize)
            else:  # Horovod's allreduce applied its postscale factor itself
                finish_push_pulls(dense, self._compression, 1.0, hvd_synchronize)
            for p in self._densified:
                p.grad = p.grad.to_sparse()
        finally:
            self._densified = set()
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
        update_learning_rate(self, self._compression)
        if self._should_sync:
            if self._synchronized:
                warnings.warn("optimizer.step() called without optimizer.skip_synchronize() context after "
                              "optimizer.synchronize(). This can cause training slowdown. You may want to consider "
                              "using optimizer.skip_synchronize() context if you use optimizer.synchronize() in "
                              "your code.", UserWarning, stacklevel=2)
            self.synchronize()
        self._synchronized = False
        return self._bps_base.step(self, closure)

    zero_grad = zero_grad_when_idle


def DistributedOptimizer(optimizer, named_parameters=None, compression=Compression.none,
                         backward_passes_per_step=1, op=Average, gradient_predivide_factor=1.0, num_groups=0,
                         groups=None, sparse_as_dense=False, process_set=global_process_set, compression_params=None):
    """An optimizer that averages gradients over all workers (or a process set's) before applying them.

    push_pulls start during ``loss.backward()`` as each gradient becomes ready; ``step()`` waits
    for them.  ``synchronize()`` waits explicitly (e.g. before clipping gradients; then use
    ``with optimizer.skip_synchronize(): optimizer.step()``).

    Args:
        optimizer: the torch optimizer to wrap (its param_groups are used; its state is not).
        named_parameters: ``model.named_parameters()``: names the push_pulls (recommended).
            Without it the names are ``push_pull.noname.<i>`` by position, which all workers
            must then have in the same order.
        compression: a compressor of :class:`Compression` (default ``Compression.none``):
            ``fp16``/``bf16`` casts, ``onebit()``, ``topk(k)``, ``randomk(k)``, ``dithering(k)``
            (docs/compression.md); with ``ef``, ``step()`` hands the core ``param_groups[0]["lr"]``.
        compression_params: MXNet's dict (``{"compressor": "topk", "k": 0.01, "ef": "vanilla"}``),
            instead of ``compression`` (both: ValueError); see ``Compression.from_params``.
        backward_passes_per_step: backward passes to accumulate locally per ``step()``.
        op: Horovod's ``Average`` (default), ``Sum``, ``Min``, ``Max`` or ``Product`` of the
            workers' gradients, or ``Adasum``: with more than one worker Horovod's delta optimizer
            (:mod:`byteps.torch.optimizer_adasum`: each worker's local update of a parameter,
            combined by the servers' Adasum; ``groups``, ``sparse_as_dense`` and
            ``gradient_predivide_factor`` do not apply; global process set; CPU tensors with several
            processes per host).
        gradient_predivide_factor: Horovod's: with ``Average``, gradients are divided by it before
            the sum and multiplied by it / size after (another op: ValueError).
        num_groups: deprecated alias of ``groups`` (DeprecationWarning).
        groups: an int k > 0 (the gradient-requiring parameters in k contiguous groups) or a list
            of lists of parameters; a group's gradients are sent once all of them are ready.
        sparse_as_dense: densify sparse gradients for the allreduce (back to sparse after);
            otherwise they go through ``sparse_allreduce_async`` (an allgather).
        process_set: reduce only among this registered set's members (Average divides by the
            set's size; names ``"ps<id>.allreduce.Gradient.<name>"``).  On a worker outside it
            no hooks are registered and ``step()`` is purely local.  Adasum: the global set only
            (NotImplementedError).

    Raises:
        ValueError: bad ``named_parameters``, or workers with different parameters (the message
            names the parameter).
    """
    compression = resolve_compression(compression, compression_params)
    base = optimizer.__class__
    try:
        adasum = C.resolve_op(op, None, "DistributedOptimizer") == Adasum
    except ValueError:
        adasum = False  # the regular class reports a bad op, after checking named_parameters (as Horovod)
    # One worker: the regular class (no hooks), as Horovod. Before init() too: it reports that.
    adasum = adasum and _basics.is_initialized() and ops.size() > 1
    if adasum:
        # Horovod's checks first (named_parameters before anything that needs init() is in __init__).
        C.check_process_set(process_set, "DistributedOptimizer", Adasum)
        plist = [p for group in optimizer.param_groups for p in group["params"]]
        resolve(op, gradient_predivide_factor, backward_passes_per_step, num_groups, groups, process_set, plist,
                ops.size())
    impl = _DistributedAdasumOptimizer if adasum else _DistributedOptimizer
    body = {k: v for k, v in impl.__dict__.items() if k not in ("__dict__", "__weakref__")}
    body["_bps_base"] = base
    body["__qualname__"] = base.__qualname__
    cls = type(base.__name__, (base,), body)
    if adasum:
        return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step)
    return cls(optimizer.param_groups, named_parameters, compression, backward_passes_per_step, op,
               gradient_predivide_factor, num_groups, groups, sparse_as_dense, process_set)
