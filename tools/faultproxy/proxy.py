"""FaultProxy: a TCP proxy in user space that injects faults into the links it carries.

The kernel we test on has no netem, so a link is made faulty by routing it through this proxy:
clients connect to ``proxy.port``; for every accepted connection the proxy opens one to
``upstream`` and forwards bytes both ways ("up" = client -> upstream, "down" = upstream ->
client), one *chunk* (whatever one ``recv`` returned, at most :data:`CHUNK` bytes) at a time.
Faults are asked for by method calls from any thread and act on the connections (pairs) the
proxy holds at that moment or on the next chunks it reads.

Threads: one event-loop thread per proxy (``faultproxy-<port>``, non-blocking sockets on a
``selectors`` selector) owns every socket.  The public methods are thread-safe: each runs its
action on the loop thread and returns when it is done (``reset_all`` returns after the RSTs went
out), so a test may inject a fault and then immediately look for its effect.

Ordering: chunks of one direction are forwarded in order; a held chunk (delay, pause) holds back
those behind it.  While a direction holds more than :data:`QUEUE_CAP` bytes the proxy stops
reading its source, so TCP flow control pushes back on the sender.
"""

from __future__ import annotations

import errno
import random
import selectors
import socket
import threading
import time
from collections import deque
from typing import Callable, Optional

from .pair import Pair
from .relay import CHUNK, QUEUE_CAP, Relay, _abort  # noqa: F401 (CHUNK, QUEUE_CAP: re-exported)
DIRECTIONS = ("up", "down")
FAULT_KINDS = ("corrupt", "duplicate", "truncate", "reset", "cut", "refused")
_CALL_TIMEOUT_S = 10.0


def _directions(direction: str) -> tuple[str, ...]:
    if direction == "both":
        return DIRECTIONS
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be 'up', 'down' or 'both', not {direction!r}")
    return (direction,)


class FaultProxy(Relay):
    """Forwards ``listen`` -> ``upstream`` and injects faults on request.  Starts serving in the
    constructor; :meth:`close` (or leaving a ``with`` block) stops it and closes every socket.

    Args:
        upstream: (host, port) every accepted connection is forwarded to.
        listen: (host, port) to bind; port 0 picks a free one (see :attr:`port`).
        seed: seeds the choice of the corrupted byte when no offset is given.
    """

    def __init__(self, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0),
                 seed: Optional[int] = None) -> None:
        self.upstream = (upstream[0], int(upstream[1]))
        self._listener = socket.create_server(listen, backlog=128, reuse_port=False)
        self._listener.setblocking(False)
        self.host, self.port = self._listener.getsockname()[:2]
        self._sel = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._commands: deque[tuple[Callable[[], object], dict]] = deque()
        self._commands_lock = threading.Lock()
        self._rng = random.Random(seed)
        self._pairs: set[Pair] = set()
        self._masks: dict[socket.socket, int] = {}
        # Fault settings, touched by the loop thread only.
        self._delay = 0.0
        self._pause_until = 0.0
        self._refuse = False
        self._corrupt: dict[str, deque[Optional[int]]] = {d: deque() for d in DIRECTIONS}
        self._duplicate = dict.fromkeys(DIRECTIONS, 0)
        self._truncate = dict.fromkeys(DIRECTIONS, 0)
        self._stats = {"accepted": 0, "bytes_up": 0, "bytes_down": 0}
        self._faults = dict.fromkeys(FAULT_KINDS, 0)
        self._stopping = False
        self._closed = False
        self._sel.register(self._listener, selectors.EVENT_READ, self._on_accept)
        self._sel.register(self._wake_r, selectors.EVENT_READ, self._on_wake)
        self._thread = threading.Thread(target=self._loop, name=f"faultproxy-{self.port}", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- public API (any thread)

    def __enter__(self) -> "FaultProxy":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FaultProxy({self.host}:{self.port} -> {self.upstream[0]}:{self.upstream[1]})"

    def set_delay(self, seconds: float) -> None:
        """Holds every chunk read from now on ``seconds`` before forwarding it (both directions);
        0 turns the delay off (chunks already held keep their time)."""
        seconds = float(seconds)
        if not seconds >= 0:
            raise ValueError(f"delay must be >= 0, not {seconds}")
        self._call(lambda: setattr(self, "_delay", seconds))

    def pause(self, seconds: float) -> None:
        """Forwards nothing in either direction for ``seconds`` from now (0 ends a pause).  Data
        read meanwhile is kept and forwarded afterwards; connections stay open and new ones are
        accepted."""
        seconds = float(seconds)
        if not seconds >= 0:
            raise ValueError(f"pause must be >= 0, not {seconds}")
        self._call(lambda: setattr(self, "_pause_until", time.monotonic() + seconds))

    def reset_all(self) -> int:
        """Aborts every current pair with an RST on both sides; returns how many.  New
        connections are accepted normally afterwards (unless :meth:`refuse` is on)."""
        return self._call(lambda: self._end_all(abort=True))

    def cut_all(self) -> int:
        """Closes every current pair with a FIN on both sides (data the proxy still holds is
        dropped); returns how many."""
        return self._call(lambda: self._end_all(abort=False))

    def corrupt_next(self, direction: str = "up", count: int = 1, offset: Optional[int] = None) -> None:
        """Flips every bit of one byte in each of the next ``count`` chunks of ``direction``
        ("both": ``count`` chunks in each direction).  ``offset``: the byte's index in the
        chunk (clamped to the chunk's last byte); None: a random byte."""
        dirs, count = _directions(direction), self._count(count)
        self._call(lambda: [self._corrupt[d].extend([offset] * count) for d in dirs])

    def duplicate_next(self, direction: str = "up", count: int = 1) -> None:
        """Forwards each of the next ``count`` chunks of ``direction`` twice in a row."""
        dirs, count = _directions(direction), self._count(count)
        self._call(lambda: [self._bump(self._duplicate, d, count) for d in dirs])

    def truncate_next(self, direction: str = "up") -> None:
        """Forwards the first half (``len // 2`` bytes) of the next chunk of ``direction``, then
        closes that pair (FIN both sides) once the half is out."""
        dirs = _directions(direction)
        self._call(lambda: [self._bump(self._truncate, d, 1) for d in dirs])

    def refuse(self, on: bool = True) -> None:
        """While on, new connections are accepted and at once reset (RST); current pairs are
        not touched (combine with :meth:`reset_all`)."""
        self._call(lambda: setattr(self, "_refuse", bool(on)))

    def stats(self) -> dict:
        """``accepted`` (pairs opened), ``active`` (pairs open now), ``refused``, ``bytes_up`` /
        ``bytes_down`` (bytes delivered, duplicates counted), ``faults`` (total injected),
        ``by_fault`` (per kind: corrupt/duplicate/truncate = chunks, reset/cut = pairs, refused
        = connections), ``delay`` and ``paused`` (seconds of pause left)."""
        return self._call(self._snapshot)

    def close(self) -> None:
        """Stops the proxy and closes every socket (idempotent)."""
        if self._closed:
            return
        if self._thread.is_alive():
            try:
                self._call(lambda: setattr(self, "_stopping", True))
            except RuntimeError:
                pass
            self._thread.join(timeout=_CALL_TIMEOUT_S)
        self._closed = True
        for pair in list(self._pairs):
            self._finish(pair, abort=False)
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()
        self._sel.close()

    # ---------------------------------------------------------------- plumbing

    @staticmethod
    def _count(count: int) -> int:
        if int(count) < 1:
            raise ValueError(f"count must be >= 1, not {count}")
        return int(count)

    @staticmethod
    def _bump(table: dict, key: str, n: int) -> None:
        table[key] += n

    def _call(self, fn: Callable[[], object]):
        """Runs ``fn`` on the loop thread and returns its result (re-raising its exception)."""
        if self._closed or not self._thread.is_alive():
            raise RuntimeError(f"{self!r} is closed")
        if threading.current_thread() is self._thread:
            return fn()
        slot: dict = {"done": threading.Event()}
        with self._commands_lock:
            self._commands.append((fn, slot))
        try:
            self._wake_w.send(b"x")
        except BlockingIOError:
            pass  # the loop has wake-ups pending already
        if not slot["done"].wait(_CALL_TIMEOUT_S):
            raise RuntimeError(f"{self!r}: the proxy loop did not answer within {_CALL_TIMEOUT_S}s")
        if "error" in slot:
            raise slot["error"]
        return slot.get("result")

    def _snapshot(self) -> dict:
        return {**self._stats, "active": len(self._pairs), "refused": self._faults["refused"],
                "faults": sum(self._faults.values()), "by_fault": dict(self._faults),
                "delay": self._delay, "paused": round(max(0.0, self._pause_until - time.monotonic()), 3)}

    def _on_wake(self, _sock, _mask) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except BlockingIOError:
            pass
        while True:
            with self._commands_lock:
                if not self._commands:
                    return
                fn, slot = self._commands.popleft()
            try:
                slot["result"] = fn()
            except Exception as err:  # handed to the caller
                slot["error"] = err
            slot["done"].set()

    def _loop(self) -> None:
        while not self._stopping:
            for key, mask in self._sel.select(self._next_timeout()):
                key.data(key.fileobj, mask)
            now = time.monotonic()
            if now >= self._pause_until:
                for pair in list(self._pairs):
                    due = [d for d in (pair.up, pair.down) if d.queue and not d.blocked and d.queue[0][0] <= now]
                    for d in due:
                        self._flush(pair, d, now)
                    if due and not pair.closed:
                        self._update(pair)

    def _next_timeout(self) -> Optional[float]:
        now = time.monotonic()
        waiting = [d.queue[0][0] for pair in self._pairs for d in (pair.up, pair.down)
                   if d.queue and not d.blocked]
        if not waiting:
            return None
        return max(0.0, max(min(waiting), self._pause_until) - now)

    # ---------------------------------------------------------------- connections

    def _on_accept(self, _sock, _mask) -> None:
        for _ in range(64):
            try:
                client, _addr = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # EMFILE, ECONNABORTED: try again on the next event
            if self._refuse:
                self._faults["refused"] += 1
                _abort(client)
                continue
            client.setblocking(False)
            upstream = socket.socket(socket.AF_INET6 if ":" in self.upstream[0] else socket.AF_INET)
            upstream.setblocking(False)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            err = upstream.connect_ex(self.upstream)
            if err not in (0, errno.EINPROGRESS):
                _abort(client)
                upstream.close()
                continue
            pair = Pair(client, upstream, connecting=True)
            self._pairs.add(pair)
            self._stats["accepted"] += 1
            self._update(pair)
