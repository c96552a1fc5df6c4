"""Horovod's ``hvd.elastic`` on byteps: :func:`run`, :class:`State`, :class:`ObjectState`,
:class:`TorchState`, :class:`ElasticSampler` and :class:`HostsUpdatedInterrupt`.

    @hvd.elastic.run
    def train(state):
        for state.epoch in range(state.epoch, epochs):
            for state.batch, (x, y) in enumerate(loader, start=...):
                ...
                state.commit()

    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)
    train(state)

What differs from Horovod:

* byteps has no host discovery: a job keeps the workers bpsrun/bpslaunch started, so byteps
  itself never raises :class:`HostsUpdatedInterrupt` (``check_host_updates`` is a no-op).  A
  function that raises one still gets Horovod's handling (no restore; sync unless ``skip_sync``).
* Horovod resets with ``shutdown(); init()`` and its driver's new host set.  In byteps
  ``shutdown()`` ends the job (its scheduler and servers exit once every worker has left), so
  :func:`run` keeps the job instead: it forgets the Horovod handles still pending, and the
  workers meet in one small collective (``"elastic.reset"``) that also agrees on the next
  auto-name, so rank and size are unchanged.  It recovers from the errors after which the job
  is alive (every worker raised HorovodInternalError: a cross-worker mismatch, a failed
  operation every worker saw, or one the function raises on every worker).  A lost worker or
  server fails the job: the reset raises that error, and :func:`run` propagates it.
"""

from __future__ import annotations

import functools
import itertools

import torch

from ... import _basics
from .. import hvd_common as C
from .. import hvd_handles as H
from .sampler import ElasticSampler
from .state import ObjectState, State, TorchState

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler", "HostsUpdatedInterrupt"]


class HostsUpdatedInterrupt(RuntimeError):
    """Horovod's signal that hosts were added or removed (never raised by byteps itself: it has no
    host discovery).  ``skip_sync``: the state need not be synced after the reset."""

    def __init__(self, skip_sync: bool = False) -> None:
        super().__init__(f"hosts updated (skip_sync={skip_sync})")
        self.skip_sync = skip_sync


def _reset() -> None:
    """byteps' stand-in for Horovod's ``shutdown(); init()`` (see the module docstring)."""
    if not _basics.is_initialized():
        raise C.internal_error("hvd.elastic.run: byteps is not initialized; call hvd.init() before the elastic "
                               "function (byteps cannot rejoin a job after shutdown())")
    with H._lock:
        dropped = list(H._works.values())
        H._works.clear()
        H._synchronized.clear()
    for work in dropped:
        C.unclaim(work.keys)
    from ..hvd_allreduce import allreduce_async_  # noqa: PLC0415 - after the handle table is cleared

    # Every worker continues from the largest handle any of them reached, so auto-names agree
    # even if the workers failed at different calls.
    mine = torch.tensor([C.next_handle()], dtype=torch.int64)
    H.synchronize(allreduce_async_(mine, name="elastic.reset", op=C.Max))
    with C._lock:
        C._counter = itertools.count(int(mine[0]) + 1)


# The failures in a row, without a commit between them, after which run() re-raises.
MAX_FAILURES_WITHOUT_PROGRESS = 5


def run(func):
    """Decorates ``func(state, *args, **kwargs)`` for elastic training.

    Loop: ``state.sync()`` (unless skipped), then return ``func(state, ...)``.  On
    HorovodInternalError: ``state.restore()`` (the last commit), reset, ``state.on_reset()``,
    sync again and retry.  On :class:`HostsUpdatedInterrupt`: no restore; reset and retry,
    syncing unless its ``skip_sync``.  Other exceptions propagate; so does an error of the reset
    itself (the job failed: byteps cannot replace a worker).
    """

    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        internal_error = C.internal_error_type()
        skip_sync = False
        failures, commits_then = 0, None
        while True:
            try:
                if not skip_sync:
                    state.sync()
                return func(state, *args, **kwargs)
            except internal_error as e:
                # Horovod's driver bounds the resets; byteps has none, so a failure that comes
                # back MAX_FAILURES_WITHOUT_PROGRESS times with no commit in between is final.
                commits = getattr(state, "commits", 0)
                failures = failures + 1 if commits == commits_then else 1
                commits_then = commits
                if failures >= MAX_FAILURES_WITHOUT_PROGRESS:
                    raise internal_error(f"hvd.elastic.run: {failures} failures in a row without a "
                                         f"state.commit() in between; giving up: {e}") from e
                state.restore()
                skip_sync = False
            except HostsUpdatedInterrupt as interrupt:
                skip_sync = interrupt.skip_sync
            _reset()
            state.on_reset()

    return wrapper
