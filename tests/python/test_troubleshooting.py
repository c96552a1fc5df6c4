"""docs/troubleshooting.md has an entry for every error message the code can print, taken from:

* C++ under src/: the first argument of the Status constructors of src/common/status.h
  (``InvalidArgument("...")``, ``Unavailable(fmt::format("...", ...))``, ...) and the format string
  of ``BYTEPS_LOG(Error|Warning|Fatal, "...")``; adjacent string literals are joined.
* Python under python/byteps/: ``raise XxxError("...")`` / ``raise XxxError(f"...")`` and
  ``parser.error("...")`` (bpsrun's usage errors), read from the syntax tree.

A message's key is its longest run of literal text between placeholders (``{}``, ``{:.1f}``,
f-string fields, ``%s``), whitespace-normalised; the page must contain every key verbatim (keys
under MIN_KEY characters, e.g. of "{}: {}", are too generic and skipped).  Messages built
elsewhere and passed as a variable are not seen here; the page covers those by hand.  The other
way round, each line of the page's ```text blocks (``<...>`` for values) must share a run of
MIN_KEY characters with some string literal of the code: a removed message must leave the page.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path
from typing import NamedTuple

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "troubleshooting.md"
MIN_KEY = 12
MIN_MESSAGES = 150  # well below what the code has: an extractor that finds nothing cannot pass

_CALL = re.compile(r"\b(?:InvalidArgument|Precondition|Unavailable|DeadlineExceeded|Aborted|ProtocolError|Internal)"
                   r"\(\s*(?:fmt::format\(\s*)?(?=\")"
                   r"|\bBYTEPS_LOG\(\s*(?:Error|Warning|Fatal)\s*,\s*(?=\")")
# One or more string literals separated by whitespace or comments: C++ joins them into one.
_LITERALS = re.compile(r'"(?:[^"\\\n]|\\.)*"(?:(?:\s|//[^\n]*\n)*"(?:[^"\\\n]|\\.)*")*')
_LITERAL = re.compile(r'"((?:[^"\\\n]|\\.)*)"')
_FMT_FIELD = re.compile(r"\{[^{}]*\}")
_PY_FIELD = "\x00"  # stands for an f-string field or a %-conversion
_DOC_VALUE = re.compile(r"<[^<>]*>")  # a value in a message on the page: <tensor>, <host>:<port>


class Message(NamedTuple):
    where: str  # file:line
    text: str  # the literal text, placeholders replaced by _PY_FIELD

    @property
    def key(self) -> str:
        return max((_normalise(run) for run in self.text.split(_PY_FIELD)), key=len)


def _normalise(text: str) -> str:
    return " ".join(text.split())


def cpp_messages(root: Path) -> list[Message]:
    found = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".cc", ".h"):
            continue
        source = path.read_text(encoding="utf-8")
        for call in _CALL.finditer(source):
            line = source.count("\n", 0, call.start()) + 1
            text = _cpp_text(_LITERALS.match(source, call.end()).group(0))
            found.append(Message(f"{os.path.relpath(path, REPO)}:{line}", text))
    return found


def _cpp_text(literals: str) -> str:
    """The text of adjacent C++ string literals, fmt fields replaced by _PY_FIELD."""
    text = "".join(m.group(1) for m in _LITERAL.finditer(literals))
    text = text.replace('\\"', '"').replace("\\\\", "\\").replace("\\n", " ")
    return _FMT_FIELD.sub(_PY_FIELD, text).replace("{{", "{").replace("}}", "}")


def _python_text(node: ast.expr) -> str | None:
    """The literal text of a str / f-string / "..." % x argument, or None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else _PY_FIELD for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        text = _python_text(node.left)
        return None if text is None else re.sub(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfgx]", _PY_FIELD, text)
    return None


def python_messages(root: Path) -> list[Message]:
    found = []
    for path in sorted(root.rglob("*.py")):
        nodes = sorted(ast.walk(ast.parse(path.read_text(encoding="utf-8"))), key=lambda n: getattr(n, "lineno", 0))
        for node in nodes:
            call = node.exc if isinstance(node, ast.Raise) else node  # raise X("..."), parser.error("...")
            if isinstance(call, ast.Call) and call.args and (
                    isinstance(node, ast.Raise) or isinstance(call.func, ast.Attribute) and call.func.attr == "error"):
                if (text := _python_text(call.args[0])) is not None:
                    found.append(Message(f"{os.path.relpath(path, REPO)}:{call.lineno}", text))
    return found


def all_messages() -> list[Message]:
    return cpp_messages(REPO / "src") + python_messages(REPO / "python" / "byteps")


def code_literal_runs() -> list[str]:
    """The literal runs of every string literal of the code, whitespace-normalised."""
    texts = []
    for path in sorted((REPO / "src").rglob("*")):
        if path.suffix in (".cc", ".h"):
            texts += [_cpp_text(m.group(0)) for m in _LITERALS.finditer(path.read_text(encoding="utf-8"))]
    for path in sorted((REPO / "python" / "byteps").rglob("*.py")):
        texts += [_python_text(n) or "" for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(n, (ast.Constant, ast.JoinedStr))]
    return [_normalise(run) for text in texts for run in text.split(_PY_FIELD)]


def test_the_extractor_reads_literals_formats_and_fstrings(tmp_path):
    (tmp_path / "a.cc").write_text('return InvalidArgument(fmt::format("tensor \'{}\' of {} bytes: "\n'
                                   '    "too large (max {:.1f})", n, b, m));\n'
                                   'BYTEPS_LOG(Warning, "slow peer {}", p);\nfoo(Internal(msg));\n')
    (tmp_path / "b.py").write_text('raise ValueError(f"array of shape {s} is not "\n'
                                   '                 "C-contiguous; pass x")\n'
                                   'parser.error("missing the worker command")\nraise E(name)\n'
                                   'raise ValueError("duplicates: %s" % d)\n')
    cpp, py = cpp_messages(tmp_path), python_messages(tmp_path)
    assert [m.key for m in cpp] == ["bytes: too large (max", "slow peer"]
    assert [m.key for m in py] == ["is not C-contiguous; pass x", "missing the worker command", "duplicates:"]
    assert cpp[0].where.endswith("a.cc:1") and py[1].where.endswith("b.py:3")


def test_every_error_message_has_an_entry():
    messages = all_messages()
    assert len(messages) >= MIN_MESSAGES, f"found only {len(messages)} messages: is the extractor broken?"
    doc = _normalise(DOC.read_text(encoding="utf-8"))
    documented = [m for m in messages if len(m.key) >= MIN_KEY]
    print(f"{len(messages)} messages, {len(messages) - len(documented)} skipped (key under {MIN_KEY} characters)")
    missing = [f"  {m.where}: {m.key!r}" for m in documented if m.key not in doc]
    assert not missing, (f"{len(missing)} error message(s) have no entry in {os.path.relpath(DOC, REPO)}; add one "
                         "(the message, its cause, the fix) containing this text:\n" + "\n".join(missing))


def test_every_message_on_the_page_is_in_the_code():
    runs = code_literal_runs()
    joined, long_runs = _PY_FIELD.join(runs), [r for r in runs if len(r) >= MIN_KEY]
    in_block, stale, checked = False, [], 0
    for number, line in enumerate(DOC.read_text(encoding="utf-8").splitlines(), 1):
        if line.startswith("```"):
            in_block = line.strip() == "```text"
            continue
        pieces = [p for p in (_normalise(p) for p in _DOC_VALUE.split(line)) if len(p) >= MIN_KEY]
        if not (in_block and pieces):
            continue
        checked += 1
        # A piece of the page's message is part of a literal, or holds one (messages built from several).
        if not any(p.strip(" '\";:,.()") in joined or any(r in p for r in long_runs) for p in pieces):
            stale.append(f"  {os.path.relpath(DOC, REPO)}:{number}: {line}")
    assert checked >= MIN_MESSAGES, f"only {checked} message lines in ```text blocks: was the page's format changed?"
    assert not stale, ("messages on the page that no longer appear in the code (remove or update them):\n"
                       + "\n".join(stale))
