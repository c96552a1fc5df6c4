"""The ``byteps`` console command: runs the native ``byteps-core`` with the same arguments.

``byteps info``, ``byteps scheduler``, ``byteps server`` and ``byteps bench`` are subcommands of
the native binary; this wrapper only finds it (see :mod:`byteps.launcher.corebin`) and replaces
the Python process with it, so signals, exit codes and output are the binary's own.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from .launcher import corebin

EXIT_CANNOT_START = 127


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``byteps``; returns only when the binary cannot be started."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        binary = corebin.find_core_binary()
    except FileNotFoundError as err:
        print(f"byteps: {err}", file=sys.stderr)
        return EXIT_CANNOT_START
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execv(binary, ["byteps", *args])  # argv[0] "byteps": the binary's usage text says so
    except OSError as err:
        print(f"byteps: cannot run {binary}: {err}", file=sys.stderr)
        return EXIT_CANNOT_START


if __name__ == "__main__":
    sys.exit(main())
