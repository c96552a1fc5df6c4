"""Slurm's list syntaxes, for :mod:`byteps.launcher.slurm`: hostlist expressions
(``node[01-03,07],gpu-a[1-2]-x``, expanded by ``scontrol show hostnames`` where it works, else by
:func:`expand_hostlist`), task counts per node (``2(x3),1``), the step's GPUs, and integer
variables.  Every malformed value is a LaunchConfigError naming the variable and the text.

Pure functions, apart from :func:`scontrol_hostnames` (runs scontrol, with a deadline).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import Mapping, Optional

from .config_error import LaunchConfigError

SCONTROL_TIMEOUT_S = 10.0


# --------------------------------------------------------------------------------------------
# Hostlist expressions


def _split_top_level(text: str, variable: str) -> list[str]:
    """Splits at commas outside brackets; checks that brackets pair and do not nest."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise LaunchConfigError(f"malformed Slurm hostlist in {variable}: {text!r} (nested '[')")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise LaunchConfigError(f"malformed Slurm hostlist in {variable}: {text!r} (']' without '[')")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise LaunchConfigError(f"malformed Slurm hostlist in {variable}: {text!r} (unclosed '[')")
    items.append(text[start:])
    return items


def _expand_range_set(body: str, text: str, variable: str) -> list[str]:
    """``"01-03,07"`` -> ``["01", "02", "03", "07"]``: the width of a zero-padded low end is kept."""
    values: list[str] = []
    for part in body.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise LaunchConfigError(f"malformed Slurm hostlist in {variable}: {text!r} "
                                    f"(bad range {part!r} in [{body}])")
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise LaunchConfigError(f"malformed Slurm hostlist in {variable}: {text!r} "
                                    f"(reversed range {part!r})")
        width = len(low) if low.startswith("0") and len(low) > 1 else 0
        values.extend(str(n).zfill(width) for n in range(first, last + 1))
    return values


def _expand_item(item: str, text: str, variable: str) -> list[str]:
    """One top-level item, e.g. ``gpu-a[1-2]-x[01,03]``: the product of its bracket groups."""
    if not item:
        raise LaunchConfigError(f"malformed Slurm hostlist in {variable}: {text!r} (empty host name)")
    names = [""]
    for literal, body in re.findall(r"([^\[\]]*)(?:\[([^\[\]]*)\])?", item):
        names = [name + literal for name in names]
        if body is not None and body != "":
            names = [name + value for name in names for value in _expand_range_set(body, text, variable)]
    if re.search(r"\[\]", item):
        raise LaunchConfigError(f"malformed Slurm hostlist in {variable}: {text!r} (empty '[]')")
    return names


def expand_hostlist(text: str, variable: str = "SLURM_JOB_NODELIST") -> list[str]:
    """Expands a Slurm hostlist expression: ``"node[01-03,07],login"`` -> ``["node01", "node02",
    "node03", "node07", "login"]``.  Several bracket groups in one name multiply (the first
    varies slowest); commas separate hosts only outside brackets.

    Raises:
        LaunchConfigError: a malformed expression (names ``variable`` and the text).
    """
    text = text.strip()
    if not text:
        raise LaunchConfigError(f"malformed Slurm hostlist in {variable}: {text!r} (empty)")
    hosts: list[str] = []
    for item in _split_top_level(text, variable):
        hosts.extend(_expand_item(item.strip(), text, variable))
    return hosts


def scontrol_hostnames(text: str, variable: str) -> Optional[list[str]]:
    """``scontrol show hostnames TEXT`` when scontrol is on PATH (None otherwise)."""
    scontrol = shutil.which("scontrol")
    if scontrol is None:
        return None
    try:
        out = subprocess.run([scontrol, "show", "hostnames", text], capture_output=True, text=True,
                             timeout=SCONTROL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise LaunchConfigError(f"scontrol show hostnames failed for {variable}={text!r}: {err}") from None
    if out.returncode != 0 or not out.stdout.split():
        raise LaunchConfigError(f"malformed Slurm hostlist in {variable}: {text!r} "
                                f"(scontrol: {out.stderr.strip()})")
    return out.stdout.split()


def hostnames(text: str, variable: str) -> list[str]:
    """The hosts of a nodelist: scontrol's expansion where it works, else :func:`expand_hostlist`.
    scontrol needs a Slurm configuration (Slurm gives its tasks SLURM_CONF), so its failure is an
    error only where bpslaunch's parser cannot read the text either (with scontrol's message)."""
    try:
        hosts = scontrol_hostnames(text, variable)
    except LaunchConfigError as scontrol_error:
        try:
            return expand_hostlist(text, variable)
        except LaunchConfigError:
            raise scontrol_error from None
    return hosts or expand_hostlist(text, variable)


# --------------------------------------------------------------------------------------------
# Tasks and GPUs


def expand_tasks_per_node(text: str, variable: str = "SLURM_TASKS_PER_NODE") -> list[int]:
    """``"2(x3),1"`` -> ``[2, 2, 2, 1]``.

    Raises:
        LaunchConfigError: a malformed value (names the variable and the text).
    """
    counts: list[int] = []
    for part in text.strip().split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not m or (m.group(2) is not None and int(m.group(2)) < 1):
            raise LaunchConfigError(f"malformed {variable}: {text!r} (expected N or N(xM), comma-separated)")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


def step_gpus(env: Mapping[str, str]) -> Optional[list[str]]:
    """The GPUs Slurm gave the step: SLURM_STEP_GPUS, else SLURM_JOB_GPUS, else
    CUDA_VISIBLE_DEVICES; None when none of them is set."""
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        if name in env:
            return [g.strip() for g in env[name].split(",") if g.strip()]
    return None


def _int(env: Mapping[str, str], name: str, minimum: int = 0) -> int:
    text = env.get(name, "").strip()
    try:
        value = int(text)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise LaunchConfigError(f"The env {name} must be an integer >= {minimum}, got {env.get(name)!r}")
    return value
