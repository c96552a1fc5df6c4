"""What ``byteps doctor`` found: one :class:`Finding` per check, and the report worker 0 prints.

A finding has a level (``OK``, ``WARNING``, ``ERROR``), the figure it is about (measured or read)
and, unless it is OK, the fix.  The verdict (exit status) is 1 when any finding is an ERROR.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

OK, WARNING, ERROR = "OK", "WARNING", "ERROR"
LEVELS = (OK, WARNING, ERROR)


@dataclass(frozen=True)
class Finding:
    check: str      # e.g. "open files", "bandwidth server 1"
    level: str      # OK / WARNING / ERROR
    figure: str     # what was measured or read, with units
    fix: str = ""   # what to do (empty for OK)

    def __post_init__(self) -> None:
        if self.level not in LEVELS:
            raise ValueError(f"finding {self.check!r}: level must be one of {LEVELS}, not {self.level!r}")

    def line(self) -> str:
        text = f"{self.level:<7} {self.check}: {self.figure}"
        return f"{text}\n        fix: {self.fix}" if self.fix else text


def exit_code(findings: list[Finding]) -> int:
    """0 when no finding is an ERROR, 1 otherwise."""
    return 1 if any(f.level == ERROR for f in findings) else 0


def render(findings: list[Finding], title: str) -> str:
    errors = sum(f.level == ERROR for f in findings)
    warnings = sum(f.level == WARNING for f in findings)
    verdict = "FAILED" if errors else "passed"
    lines = [f"byteps doctor: {title}"]
    lines += [f.line() for f in findings]
    lines.append(f"byteps doctor: {verdict}: {errors} error(s), {warnings} warning(s), "
                 f"{len(findings) - errors - warnings} OK")
    return "\n".join(lines)


def to_json(findings: list[Finding], title: str, extra: dict | None = None) -> str:
    return json.dumps({"title": title, "exit_code": exit_code(findings),
                       "findings": [asdict(f) for f in findings], **(extra or {})}, indent=1)
