"""The house's size limits, measured with ast over catwalk_steps/: no file over 350 lines, no
function over 60, no class over 200 (a room per idea, a function that fits one screen)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "catwalk_steps"
FILE_LINES, FUNCTION_LINES, CLASS_LINES = 350, 60, 200


# Being split in another branch; the lead removes each name when it lands.
def offenders(package: Path = PACKAGE) -> list[str]:
    """`path` (a file over the limit) or `path:name` (a function or class), with its lines."""
    found = []
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(package.parent).as_posix()
        source = path.read_text()
        if len(source.splitlines()) > FILE_LINES:
            found.append((name, len(source.splitlines())))
        for node in ast.walk(ast.parse(source)):
            limit = (
                FUNCTION_LINES
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                else CLASS_LINES
                if isinstance(node, ast.ClassDef)
                else None
            )
            lines = node.end_lineno - node.lineno + 1 if limit else 0
            if limit and lines > limit:
                found.append((f"{name}:{node.name}", lines))
    return [f"{where} ({lines} lines)" for where, lines in found]


def test_no_file_function_or_class_over_the_limits():
    assert offenders() == []


def test_the_measure_finds_a_long_function(tmp_path):
    package = tmp_path / "catwalk_steps"
    package.mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(FUNCTION_LINES))
    (package / "long.py").write_text(f"def long():\n{body}")
    assert offenders(package) == [f"catwalk_steps/long.py:long ({FUNCTION_LINES + 1} lines)"]
