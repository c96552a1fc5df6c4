"""Free TCP ports for the listening sockets of a job (scheduler, servers, a gloo rendezvous).

A port found free now is bound later by another process, and may be taken in between.  The
kernel hands out ports by itself -- to every connecting socket and to every bind to port 0 --
only from its ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999 by default), so a
port drawn there is the one most likely to be taken; a fault trial once lost a server that way.
:func:`free_port` therefore draws at random below that range, where only an explicit bind can
take a port, and falls back to a kernel-chosen one only when that range is crowded or absent.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port", "metrics_port"]

_LOWEST, _HIGHEST = 20000, 32000  # the default draw: below the default ephemeral range
_DRAWS = 200
_RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def _ephemeral_start() -> int:
    """The first port of the kernel's ephemeral range (32768 when it cannot be read)."""
    try:
        with open(_RANGE_FILE) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on which ``host`` can bind right now, drawn below the ephemeral range."""
    high = min(_HIGHEST, _ephemeral_start())
    rng = random.SystemRandom()
    for _ in range(_DRAWS if high > _LOWEST else 0):
        port = rng.randrange(_LOWEST, high)
        with socket.socket() as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as sock:  # crowded, or no room below the ephemeral range: any free port
        sock.bind((host, 0))
        return sock.getsockname()[1]


def metrics_port(env: dict, offset: int) -> dict:
    """``{"BYTEPS_METRICS_PORT": P + offset}`` when *env* sets a port P > 0, else nothing: the
    launchers give each process of a host its own metrics port (docs/metrics.md).  A value that
    is not a port is passed on untouched, for the process to refuse with its own message."""
    text = str(env.get("BYTEPS_METRICS_PORT", "")).strip()
    if not text.isdigit() or int(text) == 0:
        return {}
    port = int(text) + offset
    return {"BYTEPS_METRICS_PORT": str(port)} if port <= 65535 else {}
