"""Locate the BytePS core executable (``byteps-core``).

The C++ build produces one executable that runs the non-worker roles
(``byteps-core scheduler`` / ``byteps-core server``).  The launcher finds it in this order:

1. an explicit path (``bpsrun --core-binary PATH``);
2. the environment variable ``BYTEPS_CORE_BINARY``;
3. ``<package dir>/_bin/byteps-core``, where a Python build/install places it;
4. ``byteps-core`` on ``PATH``.

An explicit path or ``BYTEPS_CORE_BINARY`` is authoritative: if it is set but does not name an
executable file, the lookup fails instead of silently falling back to some other (possibly
stale) binary.  Only the two implicit locations fall through to the next one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Optional

ENV_VAR = "BYTEPS_CORE_BINARY"
BINARY_NAME = "byteps-core"


def package_binary() -> Path:
    """Return the path where a packaged build puts the core binary (``byteps/_bin/byteps-core``)."""
    return Path(__file__).resolve().parent.parent / "_bin" / BINARY_NAME


def is_executable_file(path: str | os.PathLike[str]) -> bool:
    """True if *path* is a regular file (after following links) that we may execute."""
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _not_found(looked: list[str], reason: str) -> FileNotFoundError:
    places = "\n".join(f"  - {place}" for place in looked)
    return FileNotFoundError(
        f"cannot find the BytePS core executable '{BINARY_NAME}' ({reason}). Looked at:\n"
        f"{places}\n"
        f"Build it with CMake (cmake -S . -B build && cmake --build build) and pass its path with "
        f"--core-binary, or set {ENV_VAR}=/path/to/{BINARY_NAME}."
    )


def find_core_binary(explicit: Optional[str] = None) -> str:
    """Return the absolute path of the core executable.

    Args:
        explicit: a path given by the user (e.g. ``--core-binary``); takes precedence over all
            other sources.

    Raises:
        FileNotFoundError: no usable executable was found; the message lists every place that
            was checked and how to fix it.
    """
    for source, value in (("--core-binary", explicit), (ENV_VAR, os.environ.get(ENV_VAR))):
        if value:
            if is_executable_file(value):
                return os.path.abspath(value)
            raise _not_found([f"{source}: {value}"], f"{source} does not name an executable file")

    looked = [f"{ENV_VAR}: (not set)"]
    packaged = package_binary()
    if is_executable_file(packaged):
        return str(packaged)
    looked.append(f"package directory: {packaged}")

    on_path = shutil.which(BINARY_NAME)
    if on_path and is_executable_file(on_path):
        return os.path.abspath(on_path)
    looked.append(f"PATH: {BINARY_NAME} (not found)")
    raise _not_found(looked, "no executable found")
