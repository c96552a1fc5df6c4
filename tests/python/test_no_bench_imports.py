"""The tests do not depend on bench/: what tests and benchmarks share lives in tools/ or in the
byteps package.  Checked on the syntax tree of every Python file under tests/: its import
statements, and the import lines of the scripts it embeds as strings (worker programs).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
_SCRIPT_IMPORT = re.compile(r"^\s*(?:import\s+bench(?:\.|\s|,|$)|from\s+bench(?:\.|\s))", re.MULTILINE)


def _is_bench(module: str) -> bool:
    return module == "bench" or module.startswith("bench.")


def bench_imports(source: str) -> list[int]:
    """Line numbers where ``source`` imports bench, itself or in an embedded script."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import) and any(_is_bench(alias.name) for alias in node.names):
            lines.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_bench(node.module or ""):
            lines.append(node.lineno)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and _SCRIPT_IMPORT.search(node.value):
            lines.append(node.lineno)
    return sorted(lines)


def test_the_check_finds_bench_imports():
    found = bench_imports("import bench.faults.job\nfrom bench.collective import model\nimport os, bench\n"
                          "SCRIPT = '''\nimport numpy\nfrom bench.faults import job\n'''\n")
    assert found == [1, 2, 3, 4]
    assert bench_imports("import benchmark_byteps\nfrom tools import bench_util\nx = 'bench is a word'\n") == []


def test_no_file_under_tests_imports_bench():
    this = Path(__file__).resolve()  # its samples above import bench on purpose
    offenders = {str(path.relative_to(TESTS)): lines for path in sorted(TESTS.rglob("*.py"))
                 if path.resolve() != this and (lines := bench_imports(path.read_text()))}
    assert not offenders, f"files under tests/ that import bench (file: lines): {offenders}"
