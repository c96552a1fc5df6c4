"""A short TCP probe of the rate between two machines, for ``byteps plan --probe``.

On one machine ``byteps plan --listen PORT`` waits (at most ``--listen-timeout`` s) for one probe;
on the other ``byteps plan --probe HOST:PORT ...`` connects and:

1. sends for ``seconds`` as fast as it can, then half-closes; the listener counts the bytes from
   the first to the last and answers with (bytes, nanoseconds);
2. reads for as long as the listener sends (``seconds``), counting the same way.

Each direction's goodput is bytes / time at the receiver; the plan takes the smaller as the
worker machines' rate (TCP goodput, so no goodput factor is applied on top).  Every socket
operation has a deadline.
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Callable, Optional

CHUNK = 1 << 20
_HEADER = struct.Struct("!d")     # the sender's phase length in seconds
_RESULT = struct.Struct("!QQ")    # bytes, nanoseconds


class ProbeError(OSError):
    """The probe could not run; the message says where and what to do."""


def _count(sock: socket.socket) -> tuple[int, int]:
    """Bytes read until EOF and the ns between the first and the last byte."""
    total, first, last = 0, None, None
    buf = bytearray(CHUNK)
    while True:
        got = sock.recv_into(buf)
        if not got:
            break
        now = time.monotonic_ns()
        first = now if first is None else first
        last = now
        total += got
    return total, (last - first) if first is not None and last is not None else 0


def _send_for(sock: socket.socket, seconds: float) -> None:
    data = b"\0" * CHUNK
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int, what: str) -> bytes:
    out = b""
    while len(out) < n:
        got = sock.recv(n - len(out))
        if not got:
            raise ProbeError(f"probe: the peer closed the connection before sending {what}")
        out += got
    return out


def listen(port: int, timeout_s: float = 60.0, host: str = "",
           ready: Optional[Callable[[int], None]] = None) -> float:
    """Serve one probe on *port* (0: any; *ready* gets the port); returns the bytes/s received."""
    with socket.create_server((host, port), reuse_port=False) as srv:
        srv.settimeout(timeout_s)
        if ready is not None:
            ready(srv.getsockname()[1])
        try:
            conn, _ = srv.accept()
        except socket.timeout as err:
            raise ProbeError(f"--listen {port}: no probe arrived within {timeout_s:g} s "
                             f"(run `byteps plan --probe THIS_HOST:{port} ...` on the other machine)") from err
    with conn:
        seconds = _HEADER.unpack(_recv_exact(conn, _HEADER.size, "the probe's length"))[0]
        conn.settimeout(seconds + timeout_s)
        nbytes, ns = _count(conn)
        conn.sendall(_RESULT.pack(nbytes, ns))
        _send_for(conn, seconds)
        conn.shutdown(socket.SHUT_WR)
    return nbytes * 1e9 / max(ns, 1)


def probe(address: str, seconds: float = 2.0, timeout_s: float = 10.0) -> tuple[float, float]:
    """Probe a listener at HOST:PORT; returns (bytes/s out, bytes/s in)."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ProbeError(f"--probe {address!r}: expected HOST:PORT, e.g. --probe 10.0.0.2:9100")
    try:
        sock = socket.create_connection((host, int(port)), timeout=timeout_s)
    except OSError as err:
        raise ProbeError(f"--probe {address}: cannot connect ({err.strerror or err}): start "
                         f"`byteps plan --listen {port}` on that machine first") from err
    with sock:
        sock.settimeout(seconds + timeout_s)
        sock.sendall(_HEADER.pack(seconds))
        _send_for(sock, seconds)
        sock.shutdown(socket.SHUT_WR)
        out = _RESULT.unpack(_recv_exact(sock, _RESULT.size, "its count"))
        nbytes, ns = _count(sock)
    return out[0] * 1e9 / max(out[1], 1), nbytes * 1e9 / max(ns, 1)
