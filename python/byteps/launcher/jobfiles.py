"""The jobs ``bpsrun`` runs on this machine, for ``byteps top`` to find.

While a distributed job runs, bpsrun keeps a file ``<tmp>/byteps-<uid>/bpsrun-<port>.json`` (the
folder 0700, the file 0600: it holds the job's secret, which the same user could read from the
processes' environment anyway) with the scheduler's address, the job's ``BYTEPS_JOB_SECRET`` and
bpsrun's pid; it is removed when bpsrun returns.  ``byteps top`` with no ``--scheduler`` and no
``DMLC_PS_ROOT_PORT`` watches the one job found there (with several, it lists them), and with a
``--scheduler`` of such a job and no secret set it takes the job's secret.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Optional


def folder() -> str:
    return os.path.join(tempfile.gettempdir(), f"byteps-{os.getuid()}")


def write(host: str, port: int, secret: str) -> Optional[str]:
    """Writes this job's file; returns its path, or None when it cannot be written (top then needs
    --scheduler and the secret)."""
    try:
        os.makedirs(folder(), mode=0o700, exist_ok=True)
        path = os.path.join(folder(), f"bpsrun-{port}.json")
        fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"scheduler": f"{host}:{port}", "secret": secret, "pid": os.getpid()}, f)
        os.replace(path + ".tmp", path)
        return path
    except OSError:
        return None


def remove(path: Optional[str]) -> None:
    if path:
        try:
            os.unlink(path)
        except OSError:
            pass


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running() -> list[dict]:
    """The jobs of live bpsrun processes, by scheduler address; stale files are skipped."""
    jobs = []
    try:
        names = sorted(os.listdir(folder()))
    except OSError:
        return []
    for name in names:
        if not (name.startswith("bpsrun-") and name.endswith(".json")):
            continue
        try:
            with open(os.path.join(folder(), name), encoding="utf-8") as f:
                job = json.load(f)
        except (OSError, ValueError):
            continue
        if isinstance(job, dict) and isinstance(job.get("pid"), int) and alive(job["pid"]):
            jobs.append(job)
    return jobs
