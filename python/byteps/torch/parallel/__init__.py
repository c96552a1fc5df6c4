"""byteps.torch.parallel.DistributedDataParallel: a module wrapper whose backward leaves
gradients averaged over all workers (use it with a plain torch optimizer).

    model = DistributedDataParallel(model)          # rank 0's state_dict is broadcast here
    loss = loss_fn(model(x), y)
    loss.backward()                                 # grads are averaged when this returns
    optimizer.step()

Each parameter's gradient is push_pulled as soon as backward produces it (earlier layers get a
higher priority); the hook of the last gradient waits for all of them and writes the averages.
If some parameters got no gradient (a branch not taken), call :meth:`synchronize` after
backward.  :meth:`no_sync` accumulates gradients locally instead.  With ``broadcast_buffers``,
rank 0's buffers (e.g. BatchNorm statistics) are broadcast before every forward.

CPU tensors only in this build; no C++ extension is involved.
"""

from __future__ import annotations

from contextlib import contextmanager

from torch.nn.modules import Module

from .. import ops
from ..compression import Compression
from ..functions import broadcast_parameters
from ..gradients import (declare_parameters, finish_push_pulls, hook_gradients, parameter_names, priorities,
                         start_push_pull)

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    """Data parallelism over byteps push_pull (see the module docstring).

    Args:
        module: the module to replicate; all its parameters and buffers must exist now.
        device_ids: None (CPU), or a list with exactly one entry (as in BytePS).
        broadcast_buffers: broadcast rank 0's buffers at the start of every forward.
        compression: a compressor of :class:`Compression` for the gradients (``none``, ``fp16``,
            ``bf16``, ``topk(k)``...; docs/compression.md).  With error feedback, tell the core
            the learning rate: ``byteps.torch.set_learning_rate(lr)`` (no optimizer here to ask).

    Construction, forward (with buffers to broadcast) and backward are collective: every worker
    must run them.  Workers with different parameters get a ValueError naming one.
    """

    def __init__(self, module, device_ids=None, broadcast_buffers=True, compression=Compression.none):
        super().__init__()
        if device_ids is not None:
            device_ids = list(device_ids)
            assert len(device_ids) == 1, (
                "DistributedDataParallel device_ids contain exactly one entry, but got {}.").format(device_ids)
        self.device_ids = device_ids
        self.module = module
        self.broadcast_buffers = broadcast_buffers
        self.require_forward_param_sync = broadcast_buffers
        self._compression = compression
        self._require_backward_grad_sync = True
        named = list(module.named_parameters())
        self._parameter_names, order = parameter_names(named, [p for _, p in named], "DistributedDataParallel")
        self._priority = priorities(order)
        self._requires_update = [p for _, p in named if p.requires_grad]
        self._num_grads = len(self._requires_update)
        self._grad_count = 0
        self._handles = {}
        self._grad_accs = []
        declare_parameters(order, compression, "DistributedDataParallel")
        if ops.size() > 1:
            self._grad_accs = hook_gradients(self._requires_update, self._make_hook)
        state = self.module.state_dict()
        if len(state) > 0:
            broadcast_parameters(state, root_rank=0)

    @contextmanager
    def no_sync(self):
        """Inside this block backward accumulates gradients locally; the first backward after it
        averages the accumulated gradients."""
        old = self._require_backward_grad_sync
        self._require_backward_grad_sync = False
        try:
            yield
        finally:
            self._require_backward_grad_sync = old

    def forward(self, *inputs, **kwargs):
        if self.require_forward_param_sync:
            self._sync_params()
        return self.module(*inputs, **kwargs)

    def _sync_params(self):
        if ops.size() > 1 and self.broadcast_buffers:
            buffers = list(self.module.named_buffers())
            if buffers:
                broadcast_parameters(buffers, root_rank=0)

    def _push_pull_grad_async(self, p):
        return start_push_pull(p, self._parameter_names[p], self._priority[p], self._compression)

    def _make_hook(self, p):
        def hook(*ignore):
            if not self._require_backward_grad_sync:
                return
            self._handles[p] = self._push_pull_grad_async(p)
            self._grad_count += 1
            if self._grad_count >= self._num_grads:
                self.synchronize()  # the last gradient of this backward: wait for all
        return hook

    def synchronize(self):
        """Starts the push_pull of every gradient not started in this backward, waits for all
        and writes the averages to ``p.grad``.  Does nothing with one worker."""
        if ops.size() <= 1:
            return
        for p in self._requires_update:
            if p not in self._handles:
                self._handles[p] = self._push_pull_grad_async(p)
        handles, self._handles = self._handles, {}
        self._grad_count = 0
        finish_push_pulls(handles, self._compression)
