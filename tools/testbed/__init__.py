"""Emulated cluster on one machine (network namespaces + shaped bridge); see netns.py and job.py.

CLI: ``python3 -m tools.testbed {up,run,down,list,cleanup,job} ...`` (see __main__.py).
"""

from .netns import (Host, Testbed, TestbedError, cleanup_stale, destroy, list_testbeds,
                    TCP_GOODPUT_FACTOR)

__all__ = ["Host", "Testbed", "TestbedError", "cleanup_stale", "destroy", "list_testbeds",
           "TCP_GOODPUT_FACTOR", "run_job", "run_on_hosts", "JobResult"]


def __getattr__(name: str):
    # job.py imports byteps.launcher; load it only when asked.
    if name in ("run_job", "run_on_hosts", "JobResult"):
        from . import job
        return getattr(job, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
