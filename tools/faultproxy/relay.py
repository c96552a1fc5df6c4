"""The proxy's data path: reading each direction's chunks, applying the faults asked for to them,
writing them on, and closing a pair (FIN or RST).  A mixin of :class:`FaultProxy` (proxy.py),
run only on its event-loop thread; the fault state it reads lives on the proxy and its pairs.
"""

from __future__ import annotations

import selectors
import socket
import struct
import time
import traceback

from .pair import Direction, Pair

CHUNK = 64 * 1024
QUEUE_CAP = 64 << 20


def _abort(sock: socket.socket) -> None:
    """Closes ``sock`` with an RST (SO_LINGER on, timeout 0) instead of a FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    sock.close()


def _close_with_fin(sock: socket.socket) -> None:
    """Sends FIN after whatever the kernel still holds; unread input is drained first so that
    close() does not turn the FIN into an RST."""
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    try:
        for _ in range(64):
            if not sock.recv(CHUNK):
                break
    except OSError:
        pass
    sock.close()




class Relay:
    """The data path of :class:`FaultProxy` (see the module docstring)."""

    def _on_event(self, pair: Pair, sock: socket.socket, mask: int) -> None:
        try:
            self._handle(pair, sock, mask)
        except Exception:  # a bug here must not stop the proxy: report it, drop this pair
            traceback.print_exc()
            self._finish(pair, abort=True)

    def _handle(self, pair: Pair, sock: socket.socket, mask: int) -> None:
        if pair.closed:
            return
        if pair.connecting and sock is pair.upstream and mask & selectors.EVENT_WRITE:
            if sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):
                self._finish(pair, abort=True)  # upstream refused: the client sees an RST
                return
            pair.connecting = False
        now = time.monotonic()
        for d in (pair.up, pair.down):
            if pair.closed:
                return
            if d.dst is sock and mask & selectors.EVENT_WRITE:
                d.blocked = False
                self._flush(pair, d, now)
            if not pair.closed and d.src is sock and mask & selectors.EVENT_READ:
                self._read(pair, d, now)
        if not pair.closed:
            self._update(pair)

    def _read(self, pair: Pair, d: Direction, now: float) -> None:
        try:
            data = d.src.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._finish(pair, abort=True)  # the source reset: pass the RST on
            return
        if not data:
            d.eof = True
        else:
            due = now + self._delay
            for chunk in self._faulted(pair, d, data):
                d.queue.append([due, memoryview(chunk)])
                d.queued += len(chunk)
        self._flush(pair, d, now)

    def _faulted(self, pair: Pair, d: Direction, data: bytes) -> list[bytes]:
        """The chunk(s) to forward for ``data`` after the pending faults of its direction."""
        if self._corrupt[d.name]:
            offset = self._corrupt[d.name].popleft()
            i = self._rng.randrange(len(data)) if offset is None else min(max(int(offset), 0), len(data) - 1)
            buf = bytearray(data)
            buf[i] ^= 0xFF
            data = bytes(buf)
            self._faults["corrupt"] += 1
        if self._truncate[d.name]:
            self._truncate[d.name] -= 1
            self._faults["truncate"] += 1
            d.close_after = True
            return [data[:len(data) // 2]]
        if self._duplicate[d.name]:
            self._duplicate[d.name] -= 1
            self._faults["duplicate"] += 1
            return [data, data]
        return [data]

    def _flush(self, pair: Pair, d: Direction, now: float) -> None:
        """Sends the chunks of ``d`` that are due; ends or half-closes the pair when done."""
        if pair.closed or pair.connecting or now < self._pause_until:
            return
        counter = "bytes_" + d.name
        while d.queue:
            entry = d.queue[0]
            if entry[0] > now:
                break
            view = entry[1]
            try:
                n = d.dst.send(view)
            except (BlockingIOError, InterruptedError):
                d.blocked = True
                break
            except OSError:
                self._finish(pair, abort=True)
                return
            d.queued -= n
            self._stats[counter] += n
            if n < len(view):
                entry[1] = view[n:]
                d.blocked = True
                break
            d.queue.popleft()
        if d.queue:
            return
        if d.close_after:
            self._finish(pair, abort=False)
        elif d.eof and not d.shut:
            d.shut = True
            try:
                d.dst.shutdown(socket.SHUT_WR)
            except OSError:
                self._finish(pair, abort=True)
                return
            if pair.up.shut and pair.down.shut:
                self._finish(pair, abort=False)

    def _update(self, pair: Pair) -> None:
        """(Re)registers the pair's sockets for the events its state needs."""
        for sock in (pair.client, pair.upstream):
            mask = 0
            for d in (pair.up, pair.down):
                if d.src is sock and not d.eof and not d.close_after and d.queued < QUEUE_CAP:
                    if not (pair.connecting and sock is pair.upstream):
                        mask |= selectors.EVENT_READ
                if d.dst is sock and d.blocked:
                    mask |= selectors.EVENT_WRITE
            if pair.connecting and sock is pair.upstream:
                mask |= selectors.EVENT_WRITE
            old = self._masks.get(sock, 0)
            if mask == old:
                continue
            handler = lambda s, m, p=pair: self._on_event(p, s, m)  # noqa: E731
            if not old:
                self._sel.register(sock, mask, handler)
            elif not mask:
                self._sel.unregister(sock)
            else:
                self._sel.modify(sock, mask, handler)
            if mask:
                self._masks[sock] = mask
            else:
                self._masks.pop(sock, None)

    def _finish(self, pair: Pair, abort: bool) -> None:
        """Closes both sockets of ``pair``: RST when ``abort``, else FIN."""
        if pair.closed:
            return
        pair.closed = True
        self._pairs.discard(pair)
        for sock in (pair.client, pair.upstream):
            if self._masks.pop(sock, 0):
                self._sel.unregister(sock)
            if abort:
                _abort(sock)
            else:
                _close_with_fin(sock)

    def _end_all(self, abort: bool) -> int:
        pairs = list(self._pairs)
        for pair in pairs:
            self._finish(pair, abort)
        self._faults["reset" if abort else "cut"] += len(pairs)
        return len(pairs)
