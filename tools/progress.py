"""Progress of long work on stderr: a tqdm bar on a terminal, one plain line per step otherwise
(a log, a pipe, CI), nothing with ``BYTEPS_PROGRESS=0``.  Never stdout: the benchmarks print
their tables and ``JSON`` lines there, and tests and docs parse them.

    with Progress(len(plan), "collective") as p:
        for cfg in plan:
            p.step(cfg.name)      # the step about to run
            ...

A plain line reads ``[collective 3/12 41 s] n=4 byteps 100M`` (step, total, seconds since the
start); without a total (``None``) the steps are counted, ``[soak 3 41 s] ...``.  :func:`track`
wraps an iterable the same way.

``BYTEPS_PROGRESS`` is read once, when this module is imported, and removed from this process's
environment, so that the jobs a benchmark starts do not show progress of their own.  Lives in tools/ (not bench/) because tests may not import bench.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Callable, Iterable, Iterator, Optional, TextIO, TypeVar

ENV = "BYTEPS_PROGRESS"
_OFF = os.environ.pop(ENV, "").strip() == "0"

T = TypeVar("T")


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _AboveTheBar:
    """``sys.stdout`` while a bar shows on the same terminal: each whole line is written above
    the bar (cleared, the line written, drawn again) instead of after it on its line."""

    def __init__(self, out: TextIO, bar) -> None:
        self.out, self._bar, self._pending = out, bar, ""

    def write(self, text: str) -> int:
        self._pending += text
        if "\n" in self._pending:
            lines, _, self._pending = self._pending.rpartition("\n")
            self._bar.clear()
            self.out.write(lines + "\n")
            self.out.flush()
            self._bar.refresh()
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        """Writes a partial last line; the terminal itself stays open."""
        if self._pending:
            self._bar.clear()
            self.out.write(self._pending)
            self.out.flush()
            self._pending = ""

    def __getattr__(self, name: str):
        return getattr(self.out, name)


class Progress:
    """Steps of one long run; a context manager.  ``step(label)`` announces the next step, which
    counts as done when the following one starts or the block ends.  ``enabled`` overrides
    ``BYTEPS_PROGRESS``; ``stream`` defaults to the ``sys.stderr`` of the time of the call."""

    def __init__(self, total: Optional[int], name: str, stream: Optional[TextIO] = None,
                 enabled: Optional[bool] = None) -> None:
        self.total = total
        self.name = name
        self.count = 0
        self._stream = stream if stream is not None else sys.stderr
        self._on = (not _OFF) if enabled is None else enabled
        self._bar = None
        self._above: Optional[_AboveTheBar] = None
        self._t0 = time.perf_counter()

    def __enter__(self) -> "Progress":
        self._t0 = time.perf_counter()
        if self._on and _is_terminal(self._stream):
            try:
                from tqdm import tqdm  # noqa: PLC0415 - only a terminal needs it
            except ImportError:  # python3-tqdm missing: the plain lines still say where we are
                return self
            self._bar = tqdm(total=self.total, desc=self.name, file=self._stream, unit="step",
                             dynamic_ncols=True)
            if _is_terminal(sys.stdout):  # the same screen: lines printed go above the bar
                self._above = _AboveTheBar(sys.stdout, self._bar)
                sys.stdout = self._above
        return self

    def step(self, label: str) -> None:
        if not self._on:
            return
        self.count += 1
        if self._bar is not None:
            self._bar.set_postfix_str(label, refresh=False)
            if self.count > 1:
                self._bar.update(1)
            self._bar.refresh()  # update() may skip drawing within tqdm's mininterval
            return
        of = "" if self.total is None else f"/{self.total}"
        self._stream.write(f"[{self.name} {self.count}{of} {time.perf_counter() - self._t0:.0f} s] {label}\n")
        self._stream.flush()

    def __exit__(self, exc_type, *_) -> None:
        if self._above is not None:
            self._above.close()  # writes what is left of a line
            if sys.stdout is self._above:
                sys.stdout = self._above.out
            self._above = None
        if self._bar is not None:
            if self.count and exc_type is None:
                self._bar.update(1)
            self._bar.close()
            self._bar = None


def track(items: Iterable[T], name: str, label: Callable[[T], str] = str,
          total: Optional[int] = None) -> Iterator[T]:
    """``items`` with one :class:`Progress` step each, labelled ``label(item)``; the total is
    ``len(items)`` where it has one."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with Progress(total, name) as p:
        for item in items:
            p.step(label(item))
            yield item
