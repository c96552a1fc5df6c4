"""The ``byteps`` console command.

``byteps plan ...`` is Python (:func:`byteps.sim.plan.main`: which placement to run and the
predicted speedup, from the simulator; no native binary needed), and so are ``byteps trace merge
...`` (:func:`byteps.trace_merge.main`: every node's timeline in one file) and ``byteps doctor``
(:mod:`byteps.doctor`: a deployment's check, run as a job's workers), and so is ``byteps launch
--hostfile ...`` (:func:`byteps.launcher.ssh.main`: a whole job on a hostfile's hosts over ssh).  ``byteps top`` is the
binary's, after this wrapper found the job when none was named (:func:`find_top_job`).  Everything else (``byteps
info``, ``byteps scheduler``, ``byteps server``, ``byteps bench``) is a subcommand of the native
``byteps-core``: this wrapper finds it (see :mod:`byteps.launcher.corebin`) and replaces the
Python process with it, with the same arguments, so signals, exit codes and output are the
binary's own.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

from .launcher import corebin, jobfiles

EXIT_CANNOT_START = 127


def find_top_job(args: list[str]) -> Optional[list[str]]:
    """``byteps top``'s job when the user named none: the one bpsrun job running on this machine
    (:mod:`byteps.launcher.jobfiles`), with its secret unless one is set.  Returns the arguments to
    run (``--scheduler`` added), or None after printing why there is no single job to pick."""
    named = next((a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else "")
                  for i, a in enumerate(args) if a == "--scheduler" or a.startswith("--scheduler=")), None)
    if named is None and os.environ.get("DMLC_PS_ROOT_PORT"):
        return args  # the job's own environment
    jobs = jobfiles.running()
    if named is None:
        if len(jobs) > 1:
            print("byteps top: several bpsrun jobs run on this machine; pick one with --scheduler HOST:PORT: "
                  + ", ".join(j["scheduler"] for j in jobs), file=sys.stderr)
            return None
        if not jobs:
            return args  # the binary says what to give it
        named = jobs[0]["scheduler"]
        args = [*args, "--scheduler", named]
    job = next((j for j in jobs if j["scheduler"] == named), None)
    if job and not os.environ.get("BYTEPS_JOB_SECRET"):
        os.environ["BYTEPS_JOB_SECRET"] = job["secret"]
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``byteps``; for the binary's subcommands returns only when it cannot be started."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "plan":
        from .sim import plan  # noqa: PLC0415 - only this subcommand needs it

        return plan.main(args[1:])
    if args and args[0] == "launch":  # byteps.launcher.ssh: a job on a hostfile's hosts over ssh
        from .launcher import ssh  # noqa: PLC0415 - only this subcommand needs it

        return ssh.main(args[1:])
    if args and args[0] == "trace":
        from . import trace_merge  # noqa: PLC0415 - only this subcommand needs it

        return trace_merge.main(args[1:])
    if args and args[0] == "doctor":  # byteps.doctor: checks a deployment, run as a job's workers
        from . import doctor  # noqa: PLC0415 - only this subcommand needs it

        return doctor.main(args[1:])
    if args and args[0] == "top":
        found = find_top_job(args)
        if found is None:
            return 2
        args = found
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
