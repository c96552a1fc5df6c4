"""Hostfiles for ``byteps launch --hostfile`` (:mod:`byteps.launcher.ssh`).

One host per line, in any of three forms::

    node1                 # one worker process (BYTEPS_LOCAL_SIZE unset: bpslaunch decides)
    node2 slots=4         # OpenMPI style: 4 worker processes on this host
    node3:4               # Horovod style: the same
    user@node4 slots=2    # ssh's user@host is kept for ssh; the host part is the job's address

``#`` starts a comment (to the end of the line); blank lines are skipped.  Slots are the worker
processes on that host (``BYTEPS_LOCAL_SIZE`` of its worker).  A host may be listed once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .config_error import LaunchConfigError

_NAME = r"(?:[A-Za-z0-9_.-]+@)?[A-Za-z0-9_][A-Za-z0-9_.-]*"
_FORMS = (re.compile(rf"(?P<name>{_NAME})"),
          re.compile(rf"(?P<name>{_NAME})\s+slots\s*=\s*(?P<slots>\d+)"),
          re.compile(rf"(?P<name>{_NAME}):(?P<slots>\d+)"))


@dataclass(frozen=True)
class HostEntry:
    """One line of a hostfile: ``ssh_target`` as written (``user@host`` or ``host``), its slots
    (None when not given) and its line number."""

    ssh_target: str
    slots: Optional[int]
    line: int

    @property
    def address(self) -> str:
        """The host part, without ``user@``: the address the job's processes announce."""
        return self.ssh_target.rpartition("@")[2]


def parse_line(text: str, path: str, number: int) -> Optional[HostEntry]:
    """The entry of one line, or None for a blank or comment line.

    Raises:
        LaunchConfigError: the line is none of the forms (the message says ``file:line``).
    """
    body = text.split("#", 1)[0].strip()
    if not body:
        return None
    for form in _FORMS:
        match = form.fullmatch(body)
        if match:
            slots = match.groupdict().get("slots")
            if slots is not None and int(slots) < 1:
                break
            return HostEntry(match["name"], int(slots) if slots is not None else None, number)
    raise LaunchConfigError(f"{path}:{number}: malformed hostfile line {body!r}: expected 'host', "
                            f"'host slots=N' or 'host:N' (N >= 1), optionally 'user@host'")


def parse(text: str, path: str) -> list[HostEntry]:
    """Every host of a hostfile's text, in order.

    Raises:
        LaunchConfigError: a malformed line, a host listed twice (names both lines), no host.
    """
    hosts: list[HostEntry] = []
    seen: dict[str, HostEntry] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        entry = parse_line(line, path, number)
        if entry is None:
            continue
        first = seen.get(entry.address)
        if first is not None:
            raise LaunchConfigError(f"{path}: host {entry.address} is listed twice (lines {first.line} "
                                    f"and {entry.line}); list each host once, with slots=N for "
                                    f"several worker processes")
        seen[entry.address] = entry
        hosts.append(entry)
    if not hosts:
        raise LaunchConfigError(f"hostfile {path} lists no host")
    return hosts


def read(path: str) -> list[HostEntry]:
    """The hosts of the hostfile at *path*.

    Raises:
        LaunchConfigError: the file is missing or unreadable, or :func:`parse` refuses it.
    """
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
        raise LaunchConfigError(f"cannot read hostfile {path}: {why}") from None
    return parse(text, path)
