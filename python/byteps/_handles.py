"""What each core handle keeps alive until it is synchronized (re-exported by ``byteps._basics``).

The core reads and writes an operation's input and output from its I/O threads until the
operation is synchronized, so :class:`HandleManager` holds them (and the plugin's metadata) by
handle until then.

Thread-safety: HandleManager is; a Pending is not shared once added.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any


@dataclass
class Pending:
    """What a handle keeps alive until it is synchronized."""

    input: Any
    output: Any
    name: str  # core name
    meta: Any = None  # plugin-specific (e.g. how to return the output)
    nbytes: int = 0  # the input bytes


class HandleManager:
    """Maps core handles to their :class:`Pending` operation.  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[int, Pending] = {}

    def add(self, handle: int, pending: Pending) -> int:
        with self._lock:
            self._pending[handle] = pending
        return handle

    def get(self, handle: int) -> Pending:
        with self._lock:
            pending = self._pending.get(handle)
        if pending is None:
            raise ValueError(f"unknown byteps handle {handle!r} (never returned by push_pull_async, "
                             f"or already synchronized)")
        return pending

    def remove(self, handle: int) -> None:
        with self._lock:
            self._pending.pop(handle, None)

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._pending)
