"""Free TCP ports for the listening sockets of a job (scheduler, servers, a gloo rendezvous).

A port found free now is bound later by another process, and may be taken in between.  The
kernel hands out ports by itself -- to every connecting socket and to every bind to port 0 --
only from its ephemeral range (``net.ipv4.ip_local_port_range``, 32768-60999 by default), so a
port drawn there is the one most likely to be taken; a fault trial once lost a server that way.
:func:`free_port` therefore draws at random below that range, where only an explicit bind can
take a port, and falls back to a kernel-chosen one only when that range is crowded or absent.

:func:`check_root_port`: bpslaunch's check, before it starts a scheduler, that the port the
scheduler will listen on is free on this host (a named error instead of a scheduler that dies
after the other roles started).
"""

from __future__ import annotations

import errno
import random
import socket
from typing import Mapping

from .config_error import LaunchConfigError

__all__ = ["check_root_port", "free_port", "metrics_port", "port_in_use"]

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


def port_in_use(host: str, port: int) -> str:
    """Why ``host``:``port`` is in use now ("" when it is not), bound as the core's listeners bind
    (SO_REUSEADDR set: only a live socket on the port counts) and closed again.  Other bind
    errors (an address not of this host, a privileged port) are left to the core to report."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            return (err.strerror or str(err)) if err.errno == errno.EADDRINUSE else ""
    return ""


def check_root_port(env: Mapping[str, str]) -> None:
    """bpslaunch, before it starts a scheduler: DMLC_PS_ROOT_PORT must be free on this host,
    bound as the scheduler binds it (DMLC_NODE_HOST, else 0.0.0.0).

    Raises:
        LaunchConfigError: the port is in use (names the port, the host and why).
    """
    text = str(env.get("DMLC_PS_ROOT_PORT", "")).strip()
    if not text.isdigit() or not 0 < int(text) <= 65535:
        return  # not a port: the scheduler refuses it with the core's own message
    port, bind_host = int(text), env.get("DMLC_NODE_HOST", "").strip() or "0.0.0.0"
    reason = port_in_use(bind_host, port)
    if reason:
        raise LaunchConfigError(f"DMLC_PS_ROOT_PORT={port} is already in use on "
                                f"{env.get('DMLC_PS_ROOT_URI') or bind_host} (binding {bind_host}:{port}: "
                                f"{reason}): another job? give another port (DMLC_PS_ROOT_PORT)")


def metrics_port(env: dict, offset: int) -> dict:
    """``{"BYTEPS_METRICS_PORT": P + offset}`` when *env* sets a port P > 0, else nothing: the
    launchers give each process of a host its own metrics port (docs/metrics.md).  A value that
    is not a port is passed on untouched, for the process to refuse with its own message."""
    text = str(env.get("BYTEPS_METRICS_PORT", "")).strip()
    if not text.isdigit() or int(text) == 0:
        return {}
    port = int(text) + offset
    return {"BYTEPS_METRICS_PORT": str(port)} if port <= 65535 else {}
