"""Byteps jobs on this machine, for the tests (tests/python) and the benchmarks' own tests.

* Paths of this checkout: the package (``python/``), the built core; :func:`missing_core` says
  why the core cannot be used (not built).
* :func:`hermetic_env`: an environment for a child process without the byteps/ps-lite settings
  of whoever runs us (``BYTEPS_*``, ``DMLC_*``, ``PS_*``), with this checkout's ``python/`` on
  PYTHONPATH and unbuffered output.
* :func:`run_bpsrun`: a worker script run through the real launcher (``bpsrun``) under a
  timeout; every process of the job records its PID, so :class:`JobResult` also says which of
  them outlived bpsrun (they are killed then).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parents[1]
PYTHON_DIR = REPO / "python"
PACKAGE_DIR = PYTHON_DIR / "byteps"
CORE_BINARY = PACKAGE_DIR / "_bin" / "byteps-core"
CONFIG_PREFIXES = ("BYTEPS_", "DMLC_", "PS_")


def missing_core() -> Optional[str]:
    """Why the real core cannot be used, or None when it is built."""
    if not list(PACKAGE_DIR.glob("_core*.so")):
        return f"byteps._core is not built ({PACKAGE_DIR}/_core*.so missing; run scripts/build.sh)"
    if not os.access(CORE_BINARY, os.X_OK):
        return f"the core binary is not built ({CORE_BINARY} missing; run scripts/build.sh)"
    return None


def clean_config_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` without byteps/ps-lite settings."""
    return {k: v for k, v in env.items() if not k.startswith(CONFIG_PREFIXES)}


def hermetic_env(extra: Optional[dict[str, str]] = None, python_dir: Path = PYTHON_DIR) -> dict[str, str]:
    """Our environment without byteps/ps-lite settings, ``python_dir`` first on PYTHONPATH,
    PYTHONUNBUFFERED=1, then ``extra``."""
    env = clean_config_env(dict(os.environ))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(python_dir), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_script(directory: Path, text: str, name: str = "worker.py") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(text))
    return path


class JobResult:
    """Unpacks as ``(returncode, stdout, stderr)``; also has ``output``, ``elapsed``, ``pids``
    (every process of the job), ``leftovers`` (those still alive after bpsrun returned; killed
    then) and ``hung`` (bpsrun itself did not return in time: killed)."""

    def __init__(self, returncode: int, stdout: str, stderr: str, elapsed: float, pids: list[int],
                 leftovers: list[int], hung: bool = False):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr
        self.elapsed, self.pids, self.leftovers, self.hung = elapsed, pids, leftovers, hung

    def __iter__(self):
        return iter((self.returncode, self.stdout, self.stderr))

    @property
    def output(self) -> str:
        return self.stdout + self.stderr

    def __repr__(self) -> str:  # shown by pytest when an assertion fails
        return (f"JobResult(rc={self.returncode}, elapsed={self.elapsed:.1f}s, leftovers={self.leftovers}"
                f"{', bpsrun hung' if self.hung else ''})\n"
                f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}")


# Records its PID (kept by exec) so that no process of the job can outlive it unseen.
_PID_WRAPPER = '#!/bin/sh\necho $$ > "$BPS_TEST_PID_DIR/$$.pid"\nexec "$@"\n'


def _make_wrappers(directory: Path) -> tuple[Path, Path]:
    (directory / "pids").mkdir(exist_ok=True)
    record = directory / "record-pid.sh"
    record.write_text(_PID_WRAPPER)
    core = directory / "byteps-core"  # BYTEPS_CORE_BINARY: the real binary, PID recorded
    core.write_text(_PID_WRAPPER.replace('exec "$@"', f'exec "{CORE_BINARY}" "$@"'))
    for path in (record, core):
        path.chmod(0o755)
    return record, core


def run_bpsrun(work: Path, n: int, s: int, script_text: str, env: dict[str, str], timeout: float = 60,
               force_distributed: bool = False, args: tuple[str, ...] = (), grace: float = 2,
               bpsrun_args: tuple[str, ...] = ()) -> JobResult:
    """Writes ``script_text`` to ``work`` (a new, empty folder) and runs ``bpsrun -n N -s S
    --timeout T --grace G BPSRUN_ARGS -- python script ARGS`` with ``env``; bpsrun itself gets
    ``timeout`` + 30 s before it is killed (``JobResult.hung``)."""
    script = write_script(work, script_text)
    record, core = _make_wrappers(work)
    full_env = {**env, "BYTEPS_CORE_BINARY": str(core), "BPS_TEST_PID_DIR": str(work / "pids")}
    argv = [sys.executable, "-m", "byteps.launcher.bpsrun", "-n", str(n), "-s", str(s), "--timeout", str(timeout),
            "--grace", str(grace)]
    if force_distributed:
        argv.append("--force-distributed")
    argv += [*bpsrun_args, "--", str(record), sys.executable, str(script), *args]
    start = time.monotonic()
    proc = subprocess.Popen(argv, env=full_env, cwd=work, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    hung = False
    try:
        out, err = proc.communicate(timeout=timeout + 30)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    elapsed = time.monotonic() - start
    pids = [int(p.stem) for p in (work / "pids").glob("*.pid")]
    leftovers = [pid for pid in pids if pid_alive(pid)]
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    return JobResult(proc.returncode, out, err, elapsed, pids, leftovers, hung)
