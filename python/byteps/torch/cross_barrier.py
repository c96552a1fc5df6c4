"""BytePS's ``CrossBarrier``: same calls and the same training results as BytePS, without its
overlap across the iteration barrier.

BytePS's CrossBarrier lets the next iteration's forward start while gradients are still being
summed, by applying a per-parameter SGD / Adam / RMSprop step as each gradient arrives.  That
overlap is not built here: ``CrossBarrier(model, optimizer, ...)`` returns a
:func:`~byteps.torch.DistributedOptimizer`, so a script written for it trains to the same
results (every step waits for the summed gradients), and says so once with a warning.  As in
BytePS, only SGD, Adam and RMSprop are accepted.
"""

from __future__ import annotations

import warnings

import torch

from .compression import Compression
from .optimizer import DistributedOptimizer

__all__ = ["CrossBarrier"]

_SUPPORTED = (torch.optim.SGD, torch.optim.Adam, torch.optim.RMSprop)


def CrossBarrier(model, optimizer, named_parameters=None, compression=Compression.none, backward_passes_per_step=1,
                 num_steps=10**6):
    """A DistributedOptimizer for ``optimizer`` (SGD, Adam or RMSprop), with BytePS's CrossBarrier
    signature; ``model`` and ``num_steps`` are accepted for compatibility."""
    del num_steps
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"CrossBarrier: model must be a torch.nn.Module, got {type(model).__name__}")
    if not isinstance(optimizer, _SUPPORTED):
        raise ValueError(f"CrossBarrier supports SGD, Adam and RMSprop (as in BytePS), not "
                         f"{type(optimizer).__name__}")
    warnings.warn("byteps CrossBarrier: the overlap across the iteration barrier is not built; training runs as "
                  "DistributedOptimizer (same results, each step waits for the summed gradients)", stacklevel=2)
    return DistributedOptimizer(optimizer, named_parameters=named_parameters, compression=compression,
                                backward_passes_per_step=backward_passes_per_step)
