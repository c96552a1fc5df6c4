"""State of one proxied connection pair (client <-> upstream), owned by the proxy's loop thread."""

from __future__ import annotations

import socket
from collections import deque


class Direction:
    """One way of a pair: bytes read from ``src`` wait in ``queue`` until forwarded to ``dst``.

    ``queue`` holds ``[due, memoryview]`` entries (``due``: time.monotonic() before which the
    chunk is held); ``queued`` is their total size; ``blocked``: ``dst`` would block, so the
    proxy waits for it to become writable; ``eof``: ``src`` sent FIN; ``shut``: the FIN was passed
    on to ``dst``; ``close_after``: a truncated chunk is queued, the pair closes once it is out.
    """

    __slots__ = ("name", "src", "dst", "queue", "queued", "blocked", "eof", "shut", "close_after")

    def __init__(self, name: str, src: socket.socket, dst: socket.socket) -> None:
        self.name, self.src, self.dst = name, src, dst
        self.queue: deque[list] = deque()
        self.queued = 0
        self.blocked = False
        self.eof = False
        self.shut = False
        self.close_after = False


class Pair:
    """An accepted client connection and the proxy's connection to the upstream for it."""

    __slots__ = ("client", "upstream", "up", "down", "connecting", "closed")

    def __init__(self, client: socket.socket, upstream: socket.socket, connecting: bool) -> None:
        self.client, self.upstream = client, upstream
        self.up = Direction("up", client, upstream)
        self.down = Direction("down", upstream, client)
        self.connecting = connecting  # upstream connect() in progress: nothing is sent yet
        self.closed = False
