"""Horovod's elastic states on byteps: :class:`State` (the protocol ``hvd.elastic.run`` drives),
:class:`ObjectState` (plain attributes) and :class:`TorchState` (models, optimizers, samplers).

``commit()`` saves a copy in memory; ``restore()`` goes back to the last one; ``sync()`` makes
every worker's state rank 0's (broadcast_parameters / broadcast_optimizer_state /
broadcast_object through the servers).  Every worker must make the same calls in the same order.
"""

from __future__ import annotations

import copy
from typing import Callable, Iterable

import torch

from ... import _basics
from ..functions import broadcast_object, broadcast_optimizer_state, broadcast_parameters
from .sampler import ElasticSampler

__all__ = ["State", "ObjectState", "TorchState"]


class State:
    """What :func:`byteps.torch.elastic.run` needs of a state: ``save`` / ``restore`` / ``sync``,
    ``commit`` and ``check_host_updates``, and reset callbacks."""

    def __init__(self) -> None:
        self._reset_callbacks: list = []

    def register_reset_callbacks(self, callbacks: Iterable[Callable[[], None]]) -> None:
        """Callables run, in order, after every reset of the job (see :func:`run`)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self) -> None:
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self) -> None:
        """Saves the state (the point :meth:`restore` returns to), then checks for host updates."""
        self.commits = getattr(self, "commits", 0) + 1  # run() tells progress from a failure loop
        self.save()
        self.check_host_updates()

    def check_host_updates(self) -> None:
        """Horovod raises HostsUpdatedInterrupt here when its driver added or removed hosts.
        byteps has no host discovery (a job keeps its workers), so there is never an update: a
        no-op, without the collective Horovod makes."""

    def save(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.save")

    def restore(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.restore")

    def sync(self) -> None:
        raise NotImplementedError(f"{type(self).__name__}.sync")

    def reset(self) -> None:
        """A hook for subclasses, run after each reset before the reset callbacks."""


class ObjectState(State):
    """Keyword arguments become attributes; ``save`` snapshots them (deep copies), ``restore``
    reassigns the snapshot, ``sync`` broadcasts the snapshot from rank 0 and restores it.

    ``bcast_object(obj)`` and ``get_rank()`` are Horovod's hooks (e.g. ``hvd.broadcast_object``
    and ``hvd.rank``).
    """

    def __init__(self, bcast_object: Callable, get_rank: Callable[[], int], **kwargs) -> None:
        self._bcast_object = bcast_object
        self._rank = get_rank
        self._saved_state = copy.deepcopy(kwargs)
        for name, value in kwargs.items():
            object.__setattr__(self, name, value)
        super().__init__()

    def save(self) -> None:
        self._saved_state = {name: copy.deepcopy(getattr(self, name)) for name in self._saved_state}

    def restore(self) -> None:
        self._restore_attributes()

    def sync(self) -> None:
        if self._saved_state:
            self._saved_state = self._bcast_object(self._saved_state)
            self._restore_attributes()  # the attributes only: a subclass's restore() would undo its own sync

    def _restore_attributes(self) -> None:
        for name, value in self._saved_state.items():
            object.__setattr__(self, name, copy.deepcopy(value))


class _Handler:
    """Save / restore / sync of one torch object held by a TorchState."""

    def __init__(self, value) -> None:
        self.value = value
        self.save()

    def set_value(self, value) -> None:
        self.value = value
        self.save()

    def save(self) -> None:
        self._saved = copy.deepcopy(self.value.state_dict())

    def restore(self) -> None:
        self.value.load_state_dict(copy.deepcopy(self._saved))


class _ModelHandler(_Handler):
    def sync(self) -> None:
        broadcast_parameters(self.value.state_dict(), root_rank=0)


class _OptimizerHandler(_Handler):
    def sync(self) -> None:
        broadcast_optimizer_state(self.value, root_rank=0)


class _SamplerHandler(_Handler):
    def __init__(self, value, name: str) -> None:
        self.name = name
        super().__init__(value)

    def sync(self) -> None:
        self.value.load_state_dict(broadcast_object(self.value.state_dict(), 0, name=f"elastic.sampler.{self.name}"))


def _handler_for(name: str, value):
    if isinstance(value, torch.nn.Module):
        return _ModelHandler(value)
    if isinstance(value, torch.optim.Optimizer):
        return _OptimizerHandler(value)
    if isinstance(value, ElasticSampler):
        return _SamplerHandler(value, name)
    return None


class TorchState(ObjectState):
    """An elastic state for PyTorch training: ``nn.Module``, ``Optimizer`` and
    :class:`ElasticSampler` values (``model``, ``optimizer`` or any keyword) are saved as deep
    copies of their ``state_dict()``, restored with ``load_state_dict`` and synced from rank 0 with
    broadcast_parameters / broadcast_optimizer_state / broadcast_object; other keywords (e.g.
    ``epoch=0, batch=0``) are plain attributes (:class:`ObjectState`).  Assigning a new object to
    a handled attribute saves it at once.  ``sync`` does the handled objects first, then the plain
    attributes (one broadcast_object named ``"elastic.state"``)."""

    def __init__(self, model=None, optimizer=None, **kwargs) -> None:
        kwargs.update(model=model, optimizer=optimizer)
        handlers, plain = {}, {}
        for name, value in kwargs.items():
            handler = _handler_for(name, value)
            if handler is None:
                plain[name] = value
            else:
                handlers[name] = handler
        object.__setattr__(self, "_handlers", handlers)
        super().__init__(bcast_object=lambda obj: broadcast_object(obj, 0, name="elastic.state"),
                         get_rank=_basics.rank, **plain)
        for name, handler in handlers.items():
            object.__setattr__(self, name, handler.value)

    def __setattr__(self, name, value) -> None:
        handlers = self.__dict__.get("_handlers", {})
        if name in handlers:
            handlers[name].set_value(value)
        super().__setattr__(name, value)

    def save(self) -> None:
        for handler in self._handlers.values():
            handler.save()
        super().save()

    def restore(self) -> None:
        for handler in self._handlers.values():
            handler.restore()
        super().restore()

    def sync(self) -> None:
        for handler in self._handlers.values():
            handler.sync()
        super().sync()
