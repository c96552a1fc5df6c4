"""``python3 -m tools.faultproxy --listen HOST:PORT --upstream HOST:PORT [--control SOCK] [--delay S]``
runs a proxy until SIGINT/SIGTERM or a ``close`` control command; it prints
``faultproxy listening on HOST:PORT -> HOST:PORT`` once serving (PORT 0 picks a free port).

``python3 -m tools.faultproxy send SOCK COMMAND...`` sends one control command and prints the
reply (exit status 1 on ``error:``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Optional, Sequence

from .control import ControlServer, send_command
from .proxy import FaultProxy


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["send"]:
        if len(argv) < 3:
            print("usage: python3 -m tools.faultproxy send SOCK COMMAND...", file=sys.stderr)
            return 2
        try:
            print(send_command(argv[1], " ".join(argv[2:])))
        except (OSError, RuntimeError) as err:
            print(err, file=sys.stderr)
            return 1
        return 0
    parser = argparse.ArgumentParser(prog="python3 -m tools.faultproxy", description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT to accept on (PORT 0: any)")
    parser.add_argument("--upstream", type=_address, required=True, help="HOST:PORT to forward to")
    parser.add_argument("--control", help="Unix socket path for line commands (see control.py)")
    parser.add_argument("--delay", type=float, default=0.0, help="initial delay per chunk, seconds")
    args = parser.parse_args(argv)

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        proxy = FaultProxy(upstream=args.upstream, listen=args.listen)
    except OSError as err:
        print(f"faultproxy: cannot listen on {args.listen[0]}:{args.listen[1]}: {err}", file=sys.stderr)
        return 1
    control = ControlServer(proxy, args.control, on_close=stop.set) if args.control else None
    if args.delay:
        proxy.set_delay(args.delay)
    print(f"faultproxy listening on {proxy.host}:{proxy.port} -> {args.upstream[0]}:{args.upstream[1]}",
          flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        if control:
            control.stop()
        proxy.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
