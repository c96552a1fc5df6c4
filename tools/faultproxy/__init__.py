"""A user-space fault-injecting TCP proxy (the kernel we test on has no netem).

::

    from tools.faultproxy import FaultProxy
    with FaultProxy(upstream=("127.0.0.1", 9000)) as p:   # serving at once, on p.port
        p.set_delay(0.5); p.pause(2); p.reset_all(); p.cut_all()
        p.corrupt_next("up"); p.duplicate_next("down"); p.truncate_next("up"); p.refuse(True)
        p.stats()

CLI (proxy in its own process, driven over a Unix socket)::

    /usr/bin/python3 -m tools.faultproxy --listen 127.0.0.1:PORT --upstream HOST:PORT [--control SOCK]
    /usr/bin/python3 -m tools.faultproxy send SOCK "reset"

See proxy.py (semantics of every fault) and control.py (the command lines).
"""

from .control import ControlServer, execute, send_command
from .proxy import CHUNK, FaultProxy

__all__ = ["FaultProxy", "ControlServer", "execute", "send_command", "CHUNK"]
