#!/usr/bin/env python3
"""Layering check for src/: every `#include "<folder>/..."` of a file in src/<layer>/ names its own
layer or a layer on a lower level. The levels come from the layer table in docs/architecture.md
(section "Layers", rows `| <level> | <library> | src/<folder> | ... |`), so the page and the check
agree by construction. An include of a layer on the same level (sideways) or a higher one (upward)
fails, and so does a folder of src/ that the table does not list. The build enforces the same
through each library's public headers (cmake/BytepsLibrary.cmake); this check also covers what the
build cannot see (a header no source includes yet) and says which rule a line breaks.

    check_layers.py [--root DIR]   check DIR (default: the repository holding this script)
    check_layers.py --self-test    check the checker against small made-up trees

Exit status 0 when clean, 1 with one line per offending include otherwise.
"""
import argparse
import pathlib
import re
import sys
import tempfile

ROW = re.compile(r"^\|\s*(\d+)\s*\|[^|]*\|\s*`?src/([A-Za-z0-9_]+)/?`?\s*\|")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/[^"]*"')
SOURCES = {".h", ".hpp", ".cc", ".cpp"}


def read_levels(doc: pathlib.Path) -> dict:
    """{folder: level} from the table of the doc's "Layers" section."""
    levels, in_section = {}, False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            in_section = line.startswith("## Layers")
        elif in_section and (m := ROW.match(line)):
            levels[m.group(2)] = int(m.group(1))
    return levels


def check(root: pathlib.Path) -> list:
    doc = root / "docs" / "architecture.md"
    levels = read_levels(doc)
    if not levels:
        return [f"{doc}: no layer table (rows '| <level> | <library> | src/<folder> | ... |' under '## Layers')"]
    errors = []
    src = root / "src"
    for path in sorted(p for p in src.rglob("*") if p.suffix in SOURCES and p.is_file()):
        rel = path.relative_to(root)
        layer = path.relative_to(src).parts[0]
        if layer not in levels:
            errors.append(f"{rel}: src/{layer} is not in the layer table of {doc.relative_to(root)}")
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            m = INCLUDE.match(line)
            if not m or m.group(1) == layer or m.group(1) not in levels:
                continue  # its own layer, or not a layer (e.g. "byteps/c_api.h", the public C API)
            target = m.group(1)
            if levels[target] >= levels[layer]:
                way = "sideways" if levels[target] == levels[layer] else "upward"
                errors.append(f"{rel}:{number}: {line.strip()} points {way}: {layer} is on level "
                              f"{levels[layer]}, {target} on level {levels[target]}")
    return errors


def self_test() -> list:
    """The checker on made-up trees: what it must pass and what it must catch."""
    doc = ("# A\n\n## Layers\n\n| level | library | folder | holds |\n|---|---|---|---|\n"
           "| 2 | lib_top | src/top | x |\n| 1 | lib_a | src/a | x |\n| 1 | lib_b | src/b | x |\n"
           "| 0 | lib_base | `src/base` | x |\n\n## Other\n\n| 9 | not | src/ignored | x |\n")
    cases = [  # (files, expected fragments of the errors; empty: clean)
        ({"top/t.cc": '#include "a/x.h"\n#include "base/y.h"\n#include "top/t.h"\n#include "byteps/c_api.h"\n'}, []),
        ({"a/x.h": '#include "top/t.h"\n'}, ["a/x.h:1", "upward"]),
        ({"a/x.cc": '#include "base/y.h"\n  #  include "b/z.h"\n'}, ["a/x.cc:2", "sideways"]),
        ({"base/sub/y.cc": '#include "a/x.h"\n'}, ["upward", "base is on level 0"]),
        ({"ignored/z.cc": "\n"}, ["src/ignored is not in the layer table"]),
        ({"top/t.cc": '// #include "x/y.h" is not an include\n#include <a/x.h>\n'}, []),
    ]
    failures = []
    for files, expected in cases:
        with tempfile.TemporaryDirectory() as tmp:
            root = pathlib.Path(tmp)
            (root / "docs").mkdir()
            (root / "docs" / "architecture.md").write_text(doc)
            for name, text in files.items():
                (root / "src" / name).parent.mkdir(parents=True, exist_ok=True)
                (root / "src" / name).write_text(text)
            errors = check(root)
            joined = "\n".join(errors)
            if not expected and errors:
                failures.append(f"{files}: expected clean, got: {joined}")
            if expected and (len(errors) != 1 or not all(e in joined for e in expected)):
                failures.append(f"{files}: expected one error with {expected}, got: {joined or 'none'}")
    with tempfile.TemporaryDirectory() as tmp:  # no table at all
        (pathlib.Path(tmp) / "docs").mkdir()
        (pathlib.Path(tmp) / "docs" / "architecture.md").write_text("# nothing\n")
        if not check(pathlib.Path(tmp)):
            failures.append("a doc without a layer table passed")
    return failures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=pathlib.Path, default=pathlib.Path(__file__).resolve().parent.parent)
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    problems = self_test() if args.self_test else check(args.root)
    for p in problems:
        print(p)
    if not problems:
        print("layering: self-test passed" if args.self_test else "layering: src/ follows docs/architecture.md")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
