"""tools/progress.py, the benchmarks' progress output: plain lines on stderr when stderr is not a
terminal, a tqdm bar on a real pseudo-terminal, nothing with BYTEPS_PROGRESS=0, and never a byte
on stdout that the program did not print itself."""

from __future__ import annotations

import errno
import fcntl
import io
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
from typing import Optional

import pytest

from tools.localjob import REPO
from tools.progress import Progress, track

# Three steps with a total, two without, a table line of its own on stdout in the middle.
SCRIPT = """
import os
from tools.progress import Progress, track
print("inherited", os.environ.get("BYTEPS_PROGRESS"), flush=True)
with Progress(3, "demo") as p:
    for i in range(3):
        p.step(f"item {i}")
        print(f"row {i} measured", flush=True)
for x in track(iter("ab"), "count"):
    pass
print("JSON {}", flush=True)
"""
STDOUT = "inherited None\nrow 0 measured\nrow 1 measured\nrow 2 measured\nJSON {}\n"


def _env(progress: Optional[str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "BYTEPS_PROGRESS"}
    env["PYTHONPATH"] = str(REPO)
    if progress is not None:
        env["BYTEPS_PROGRESS"] = progress
    return env


def _run_piped(progress: Optional[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT], cwd=REPO, env=_env(progress), capture_output=True,
                          text=True, timeout=60)


def _run_on_pty(progress: Optional[str], stdout_too: bool) -> tuple[str, str]:
    """Runs SCRIPT with stderr (and with ``stdout_too`` stdout as well) on a fresh 100-column
    pseudo-terminal; returns (what the terminal got, stdout when piped)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=REPO, env=_env(progress),
                            stdin=subprocess.DEVNULL, stdout=slave if stdout_too else subprocess.PIPE, stderr=slave)
    os.close(slave)
    screen = b""
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(master, 65536)
            except OSError as err:  # EIO: every writer of the terminal has closed it
                if err.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            screen += chunk
        piped = proc.stdout.read().decode() if proc.stdout else ""
        assert proc.wait(timeout=max(1.0, deadline - time.monotonic())) == 0, screen.decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    return screen.decode(errors="replace"), piped


def test_plain_lines_go_to_stderr_and_nothing_to_stdout():
    r = _run_piped(None)
    assert r.returncode == 0, r.stderr
    assert r.stdout == STDOUT
    lines = r.stderr.splitlines()
    assert len(lines) == 5, r.stderr
    for i, line in enumerate(lines[:3]):
        assert re.fullmatch(rf"\[demo {i + 1}/3 \d+ s\] item {i}", line), line
    assert re.fullmatch(r"\[count 1 \d+ s\] a", lines[3]), lines[3]  # no total: counted
    assert re.fullmatch(r"\[count 2 \d+ s\] b", lines[4]), lines[4]


def test_progress_0_prints_nothing_and_the_jobs_do_not_inherit_it():
    r = _run_piped("0")
    assert r.returncode == 0, r.stderr
    assert r.stdout == STDOUT  # "inherited None": removed from the environment children get
    assert r.stderr == ""
    screen, piped = _run_on_pty("0", stdout_too=False)
    assert screen == "" and piped == STDOUT


def test_a_terminal_shows_the_tqdm_bar_and_stdout_stays_clean():
    screen, piped = _run_on_pty(None, stdout_too=False)
    assert piped == STDOUT
    assert re.search(r"demo: 100%\|[^|]*\| 3/3 ", screen), screen
    assert "step/s" in screen and "item 2" in screen
    assert re.search(r"count: 2step ", screen), screen  # no total: a counter, no bar
    assert "[demo 1/3" not in screen  # not the plain lines


def test_lines_printed_on_the_same_terminal_go_above_the_bar():
    screen, _ = _run_on_pty(None, stdout_too=True)
    for i in range(3):
        # The bar is cleared (carriage return, blanks, carriage return) before the line.
        assert re.search(rf"\r +\rrow {i} measured\r?\n", screen), screen
    assert not re.search(r"\]row \d", screen), screen  # never glued to the end of the bar
    assert "JSON {}" in screen


def test_in_process_lines_and_the_count_after_an_error():
    out = io.StringIO()
    with pytest.raises(RuntimeError):
        with Progress(None, "x", stream=out, enabled=True) as p:
            p.step("first")
            raise RuntimeError("boom")
    assert re.fullmatch(r"\[x 1 \d+ s\] first\n", out.getvalue())
    assert p.count == 1
    quiet = io.StringIO()
    with Progress(2, "y", stream=quiet, enabled=False) as p:
        p.step("a")
    assert quiet.getvalue() == "" and p.count == 0


def test_track_yields_every_item_in_order(capsys):
    assert list(track([3, 1, 2], "t", label=lambda v: f"value {v}")) == [3, 1, 2]
    err = capsys.readouterr().err
    if err:  # BYTEPS_PROGRESS=0 in the environment of this test run turns it off
        assert re.findall(r"\[t (\d)/3 \d+ s\] value (\d)", err) == [("1", "3"), ("2", "1"), ("3", "2")]
