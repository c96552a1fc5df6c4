"""The table of Horovod handles: each stands for a :class:`Work`, one or more core operations run
in stages (e.g. an allgather first learns every worker's size, then moves the data), finished by
a Python function.  :func:`poll` and :func:`synchronize` take these handles, and also the core
handles of byteps' own ``push_pull_async`` (an int not in the table).

A failure the core reports from the wait is HorovodInternalError on every worker that waits, as
Horovod's coordinated errors are: a cross-worker mismatch (the servers' kMismatch, already a
BytePSError) and a server's refusal of a push (an invalid argument, raised by the core as
ValueError, re-raised here as HorovodInternalError); a timeout keeps the handle valid
(synchronize may be called again).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Optional

from .. import _basics
from . import hvd_common as C

_lock = threading.Lock()


class Work:
    """One Horovod-level operation: ``stage(outputs)`` gets the outputs of the current core handles
    and returns either the result or a new ``(handles, stage)`` pair.  ``keys`` are its in-flight
    names, released when it ends (successfully or not)."""

    def __init__(self, handles: list, stage: Callable, keys: list) -> None:
        self.handles, self.stage, self.keys = list(handles), stage, keys
        self.done, self.result, self.error = False, None, None

    def _advance(self, outputs: list) -> None:
        try:
            nxt = self.stage(outputs)
        except BaseException as err:  # noqa: BLE001 - kept for synchronize
            self._finish(error=err)
            return
        if isinstance(nxt, tuple) and len(nxt) == 2 and isinstance(nxt[0], list) and callable(nxt[1]):
            self.handles, self.stage = nxt
            if not self.handles:
                self._advance([])
        else:
            self._finish(result=nxt)

    def _finish(self, result: Any = None, error: Optional[BaseException] = None) -> None:
        for h in self.handles:  # after a failure, release what is still outstanding
            try:
                _basics.wait(h, 0.0)
            except Exception:  # noqa: BLE001 - the first error is the one reported
                pass
        self.handles, self.done, self.result, self.error = [], True, result, error
        C.unclaim(self.keys)

    def _collect(self, timeout: Optional[float]) -> Optional[list]:
        outputs = []
        for i, h in enumerate(list(self.handles)):
            try:
                outputs.append(_basics.synchronize(h, timeout))
            except ValueError as err:  # a server refused the tensor's push: every worker sees it
                self.handles = self.handles[i + 1:]
                self._finish(error=C.internal_error(str(err)))
                return None
            except C.internal_error_type() as err:
                if _alive(h):
                    raise  # a timeout: the core op is still running, the handle stays valid
                self.handles = self.handles[i + 1:]
                self._finish(error=err)
                return None
        return outputs

    def poll(self) -> bool:
        while not self.done:
            if not all(_basics.poll(h) for h in self.handles):
                return False
            outputs = self._collect(None)
            if outputs is not None:
                self._advance(outputs)
        return True

    def wait(self, timeout: Optional[float] = None):
        while not self.done:
            outputs = self._collect(timeout)
            if outputs is not None:
                self._advance(outputs)
        if self.error is not None:
            raise self.error
        return self.result


def _alive(handle: int) -> bool:
    """Whether byteps still holds core ``handle`` (after a timeout it does; after a failure not)."""
    try:
        _basics.handles.get(handle)
    except ValueError:
        return False
    return True


_works: dict[int, Work] = {}
_synchronized: set = set()


def submit(handle: int, work: Work) -> int:
    with _lock:
        _works[handle] = work
    return handle


def finished(handle: int, result: Any) -> int:
    """A handle whose result is already known (e.g. an op with nothing to move)."""
    work = Work([], lambda _: None, [])
    work._finish(result=result)
    return submit(handle, work)


def poll(handle: int) -> bool:
    with _lock:
        work = _works.get(handle)
    if work is None:
        if handle in _synchronized:
            return True
        return _basics.poll(handle)  # a byteps push_pull_async handle
    return work.poll()


def synchronize(handle: int, timeout: Optional[float] = None):
    """Waits for ``handle`` and returns its output; frees it.  An already synchronized handle
    returns None.  Core handles of byteps' push_pull_async are accepted too."""
    with _lock:
        work = _works.get(handle)
    if work is None:
        if handle in _synchronized:
            return None
        return _basics.synchronize(handle, timeout)
    try:
        return work.wait(timeout)
    finally:
        if work.done:
            with _lock:
                _works.pop(handle, None)
                _synchronized.add(handle)


def reset() -> None:
    """After shutdown: handles and auto-names restart (as Horovod's)."""
    with _lock:
        _works.clear()
        _synchronized.clear()
    C.reset_names()
