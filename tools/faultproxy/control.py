"""Line commands for a FaultProxy in another process, over a Unix stream socket.

One command per line, one reply line each: ``ok`` (``ok N`` for reset/cut: pairs closed), a JSON
object for ``stats``, or ``error: <why>``.  Commands mirror the Python API::

    delay 0.5            pause 2              reset                cut
    corrupt up 1 [OFF]   duplicate down 1     truncate up          refuse on|off
    stats                close (stops the proxy process)

:func:`send_command` is the client.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from typing import Callable, Optional

from .proxy import FaultProxy


def execute(proxy: FaultProxy, line: str) -> str:
    """Runs one command line against ``proxy``; returns the reply line (without newline)."""
    words = line.split()
    if not words:
        return "error: empty command"
    cmd, args = words[0].lower(), words[1:]
    try:
        if cmd == "delay" and len(args) == 1:
            proxy.set_delay(float(args[0]))
        elif cmd == "pause" and len(args) == 1:
            proxy.pause(float(args[0]))
        elif cmd == "reset" and not args:
            return f"ok {proxy.reset_all()}"
        elif cmd == "cut" and not args:
            return f"ok {proxy.cut_all()}"
        elif cmd == "corrupt" and len(args) <= 3:
            offset = int(args[2]) if len(args) == 3 else None
            proxy.corrupt_next(args[0] if args else "up", int(args[1]) if len(args) > 1 else 1, offset)
        elif cmd == "duplicate" and len(args) <= 2:
            proxy.duplicate_next(args[0] if args else "up", int(args[1]) if len(args) > 1 else 1)
        elif cmd == "truncate" and len(args) <= 1:
            proxy.truncate_next(args[0] if args else "up")
        elif cmd == "refuse" and len(args) <= 1 and (not args or args[0].lower() in ("on", "off")):
            proxy.refuse(not args or args[0].lower() == "on")
        elif cmd == "stats" and not args:
            return json.dumps(proxy.stats(), sort_keys=True)
        else:
            return f"error: bad command {line.strip()!r}"
    except (ValueError, RuntimeError) as err:
        return f"error: {err}"
    return "ok"


class ControlServer:
    """Serves :func:`execute` on a Unix socket at ``path`` (one thread per client, daemon
    threads); ``close`` on a client line calls ``on_close``.  :meth:`stop` removes the socket."""

    def __init__(self, proxy: FaultProxy, path: str, on_close: Optional[Callable[[], None]] = None) -> None:
        self.proxy, self.path, self.on_close = proxy, path, on_close
        if os.path.exists(path):
            os.unlink(path)
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(path)
        self._sock.listen(16)
        self._thread = threading.Thread(target=self._accept, name="faultproxy-control", daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return  # stopped
            threading.Thread(target=self._serve, args=(conn,), name="faultproxy-ctl-client", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rw", encoding="utf-8", newline="\n") as f:
            for line in f:
                if line.strip().lower() == "close":
                    f.write("ok\n")
                    f.flush()
                    if self.on_close:
                        self.on_close()
                    return
                f.write(execute(self.proxy, line) + "\n")
                f.flush()

    def stop(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._sock.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


def send_command(path: str, line: str, timeout: float = 15.0) -> str:
    """Sends one command to the control socket at ``path``; returns the reply line.  Raises
    RuntimeError for an ``error:`` reply (``stats`` replies are returned as JSON text)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(line.strip().encode() + b"\n")
        reply = b""
        while not reply.endswith(b"\n"):
            part = s.recv(65536)
            if not part:
                break
            reply += part
    text = reply.decode().strip()
    if text.startswith("error:") or not text:
        raise RuntimeError(f"faultproxy control {path}: {line.strip()!r}: {text or 'no reply'}")
    return text
