"""The testbeds this process created, closed when it exits: an ``atexit`` hook, and SIGTERM or
SIGHUP turned into ``SystemExit`` (so ``with`` blocks and ``finally`` clauses run first) where
nobody else handles them.  A forked child never tears down its parent's testbeds.

Thread-safety: thread-safe (one lock around the registry).
"""

from __future__ import annotations

import atexit
import os
import signal
import threading

_LIVE: dict[int, object] = {}   # id -> Testbed (anything with close() and _owner_pid)
_LIVE_LOCK = threading.Lock()
_HOOKS_INSTALLED = False
_TEARDOWN_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def register(testbed) -> None:
    """Closes *testbed* at exit unless :func:`unregister` is called first."""
    with _LIVE_LOCK:
        _LIVE[id(testbed)] = testbed
    _install_hooks()


def unregister(testbed) -> None:
    with _LIVE_LOCK:
        _LIVE.pop(id(testbed), None)


def _close_live_testbeds() -> None:
    with _LIVE_LOCK:
        live = list(_LIVE.values())
    for tb in live:
        if tb._owner_pid == os.getpid():  # a forked child must not tear down its parent's
            try:
                tb.close()
            except Exception as err:  # noqa: BLE001 - at exit, report and go on
                print(f"testbed: teardown of {tb.prefix} failed: {err}", flush=True)


def _exit_on_signal(signum: int, _frame: object) -> None:
    # Unwinds the stack, so `with Testbed(...)` blocks and finally clauses run, then atexit.
    raise SystemExit(128 + signum)


def _install_hooks() -> None:
    global _HOOKS_INSTALLED
    if _HOOKS_INSTALLED:
        return
    _HOOKS_INSTALLED = True
    atexit.register(_close_live_testbeds)
    if threading.current_thread() is threading.main_thread():
        for sig in _TEARDOWN_SIGNALS:
            # Only where the default action (die without cleanup) would apply: a program that
            # handles the signal itself (pytest, bpsrun, job.py) keeps its handler.
            if signal.getsignal(sig) == signal.SIG_DFL:
                signal.signal(sig, _exit_on_signal)
