"""The ``byteps`` console command.

``byteps plan ...`` is Python (:func:`byteps.sim.plan.main`: which placement to run and the
predicted speedup, from the simulator; no native binary needed), and so are ``byteps trace merge
...`` (:func:`byteps.trace_merge.main`: every node's timeline in one file) and ``byteps doctor``
(:mod:`byteps.doctor`: a deployment's check, run as a job's workers).  Everything else (``byteps
info``, ``byteps scheduler``, ``byteps server``, ``byteps bench``) is a subcommand of the native
``byteps-core``: this wrapper finds it (see :mod:`byteps.launcher.corebin`) and replaces the
Python process with it, with the same arguments, so signals, exit codes and output are the
binary's own.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from .launcher import corebin

EXIT_CANNOT_START = 127


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``byteps``; for the binary's subcommands returns only when it cannot be started."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "plan":
        from .sim import plan  # noqa: PLC0415 - only this subcommand needs it

        return plan.main(args[1:])
    if args and args[0] == "trace":
        from . import trace_merge  # noqa: PLC0415 - only this subcommand needs it

        return trace_merge.main(args[1:])
    if args and args[0] == "doctor":  # byteps.doctor: checks a deployment, run as a job's workers
        from . import doctor  # noqa: PLC0415 - only this subcommand needs it

        return doctor.main(args[1:])
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
