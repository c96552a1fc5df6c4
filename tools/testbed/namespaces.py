"""The emulated cluster's namespaces, processes and records (see :mod:`tools.testbed.netns`).

Commands (``ip``/``tc``, batched), the processes inside namespaces and their removal, and the
record every testbed keeps in ``/run/byteps-testbed/<prefix>`` (creator PID and start time,
namespaces), from which :func:`list_testbeds`, :func:`destroy` and :func:`cleanup_stale` find
testbeds whose creator died.  ``netns`` re-exports every public name.

Thread-safety: the functions keep no state of their own; several may run at once.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterable, Optional, Sequence

RUN_DIR = Path("/run/byteps-testbed")
NETNS_DIR = Path("/run/netns")
DEFAULT_PREFIX = "bpst"
_COMMAND_TIMEOUT_S = 30.0
_KILL_WAIT_S = 5.0
# A record younger than this that cannot be read yet belongs to a testbed being created.
_RECORD_SETTLE_S = 60.0


class TestbedError(RuntimeError):
    """A namespace, link or qdisc could not be created or changed."""

    __test__ = False  # not a pytest test class


# --------------------------------------------------------------------------------------------
# Commands


def _run_cmd(argv: Sequence[str], stdin: Optional[str] = None, check: bool = True,
             timeout: float = _COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(list(argv), input=stdin, capture_output=True, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TestbedError(f"{' '.join(argv)}: {err}") from err
    if check and proc.returncode != 0:
        lines = f" (input:\n{stdin.rstrip()})" if stdin else ""
        raise TestbedError(f"{' '.join(argv)} failed with code {proc.returncode}: "
                           f"{(proc.stderr or proc.stdout).strip()}{lines}")
    return proc


def _batch(tool: str, lines: Iterable[str], namespace: Optional[str] = None,
           force: bool = False) -> None:
    """Runs ``ip``/``tc`` commands in one process (``-batch -``), inside *namespace* if given."""
    text = "".join(line + "\n" for line in lines)
    if not text:
        return
    argv = [tool] + (["-n", namespace] if namespace else []) + (["-force"] if force else [])
    _run_cmd(argv + ["-batch", "-"], stdin=text, check=not force)


# --------------------------------------------------------------------------------------------
# Processes and namespaces


def proc_stat_fields(pid) -> Optional[list[bytes]]:
    """The fields of /proc/<pid>/stat after the command name (field 3 onwards), or None if the
    process is gone. fields[0] is the state, fields[11]/[12] utime/stime, fields[19] start time."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(b")") + 2:].split()


def _proc_start_time(pid: int) -> Optional[int]:
    """Start time (clock ticks since boot) of a live, non-zombie process, else None."""
    fields = proc_stat_fields(pid)
    if fields is None:
        return None
    if fields[0] in (b"Z", b"X"):
        return None
    return int(fields[19])


def pid_alive(pid: int, start_time: Optional[int] = None) -> bool:
    """True if *pid* runs (zombies count as dead) and, if given, started at *start_time*."""
    started = _proc_start_time(pid)
    return started is not None and (start_time is None or started == start_time)


def existing_namespaces() -> set[str]:
    try:
        return set(os.listdir(NETNS_DIR))
    except FileNotFoundError:
        return set()


def namespace_pids(namespaces: Iterable[str]) -> dict[str, list[int]]:
    """PIDs of the processes inside each named namespace (what ``ip netns pids`` does, for many
    namespaces in one scan of /proc).  Our own process is never listed."""
    wanted: dict[tuple[int, int], str] = {}
    for name in namespaces:
        try:
            st = os.stat(NETNS_DIR / name)
        except OSError:
            continue
        wanted[(st.st_dev, st.st_ino)] = name
    found: dict[str, list[int]] = {name: [] for name in wanted.values()}
    if not wanted:
        return found
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue  # gone, a zombie, or a kernel thread
        name = wanted.get((st.st_dev, st.st_ino))
        if name is not None:
            found[name].append(int(entry))
    return found


def kill_namespace_processes(namespaces: Iterable[str], wait_s: float = _KILL_WAIT_S) -> list[int]:
    """SIGKILLs every process inside the namespaces, until none is left or *wait_s* passed.

    Returns the PIDs that could not be removed (e.g. stuck in the kernel)."""
    names = list(namespaces)
    deadline = time.monotonic() + wait_s
    while True:
        pids = [pid for group in namespace_pids(names).values() for pid in group]
        if not pids or time.monotonic() >= deadline:
            return pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)


def delete_namespaces(namespaces: Iterable[str]) -> None:
    """Kills what runs inside the namespaces, then deletes those that exist."""
    names = [ns for ns in namespaces if ns in existing_namespaces()]
    if not names:
        return
    stuck = kill_namespace_processes(names)
    _batch("ip", (f"netns del {ns}" for ns in names), force=True)
    left = [ns for ns in names if ns in existing_namespaces()]
    if left:
        raise TestbedError(f"could not delete namespaces {left} (processes left: {stuck})")


# --------------------------------------------------------------------------------------------
# Records: who created which testbed


def _record_path(prefix: str) -> Path:
    return RUN_DIR / prefix


def _read_record(prefix: str) -> Optional[dict]:
    try:
        return json.loads(_record_path(prefix).read_text())
    except (OSError, ValueError):
        return None


def _write_record(prefix: str, record: dict, exclusive: bool) -> None:
    path = _record_path(prefix)
    if exclusive:
        RUN_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f)
        return
    tmp = path.with_name(f".{prefix}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)


def _remove_record(prefix: str) -> None:
    try:
        _record_path(prefix).unlink()
    except FileNotFoundError:
        pass


def _split_namespace(name: str) -> Optional[tuple[str, str]]:
    """"P-h3" -> ("P", "h3"), "P-br" -> ("P", "br"); None for names no testbed makes."""
    match = re.fullmatch(r"(.+)-(br|h\d+)", name)
    return (match.group(1), match.group(2)) if match else None


def list_testbeds(prefix: str = DEFAULT_PREFIX) -> list[dict]:
    """Every testbed whose prefix starts with *prefix*: dicts with ``prefix``, ``namespaces``
    (existing), ``record`` (or None) and ``state``: "alive" (creator runs), "kept" (left up by
    ``up``), "creating" (record being written), "stale" (creator dead) or "orphan" (no record)."""
    groups: dict[str, list[str]] = {}
    for ns in sorted(existing_namespaces()):
        parts = _split_namespace(ns)
        if parts and parts[0].startswith(prefix):
            groups.setdefault(parts[0], []).append(ns)
    try:
        recorded = [p.name for p in RUN_DIR.iterdir()
                    if p.name.startswith(prefix) and not p.name.startswith(".")]
    except FileNotFoundError:
        recorded = []
    for name in recorded:
        groups.setdefault(name, [])
    out = []
    for tb_prefix, namespaces in sorted(groups.items()):
        record = _read_record(tb_prefix)
        if record is None and tb_prefix in recorded:
            try:
                age = time.time() - _record_path(tb_prefix).stat().st_mtime
            except FileNotFoundError:
                age = _RECORD_SETTLE_S
            state = "creating" if age < _RECORD_SETTLE_S else "stale"
        elif record is None:
            state = "orphan"
        elif record.get("keep"):
            state = "kept"
        elif pid_alive(record.get("pid", -1), record.get("start_time")):
            state = "alive"
        else:
            state = "stale"
        out.append({"prefix": tb_prefix, "namespaces": namespaces, "record": record,
                    "state": state})
    return out


def destroy(prefix: str) -> list[str]:
    """Tears down the testbed *prefix* whoever made it: kills its processes, deletes its
    namespaces and its record.  Returns the namespaces deleted."""
    record = _read_record(prefix) or {}
    names = set(record.get("namespaces", []))
    names |= {ns for ns in existing_namespaces()
              if (_split_namespace(ns) or ("",))[0] == prefix}
    present = sorted(ns for ns in names if ns in existing_namespaces())
    delete_namespaces(present)
    _remove_record(prefix)
    return present


def cleanup_stale(prefix: str = DEFAULT_PREFIX, include_kept: bool = False) -> list[str]:
    """Removes the testbeds (prefix starting with *prefix*) whose creator is dead, and
    namespaces of the testbed naming scheme that have no record at all.  Testbeds left up on
    purpose (``python3 -m tools.testbed up``) stay unless *include_kept*.  Returns the prefixes
    of the testbeds removed."""
    removed = []
    for tb in list_testbeds(prefix):
        if tb["state"] in ("stale", "orphan") or (include_kept and tb["state"] == "kept"):
            destroy(tb["prefix"])
            removed.append(tb["prefix"])
    return removed
