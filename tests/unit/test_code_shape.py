"""Issue 62: no function outside tests/ longer than 80 lines (a longer one is a step that wants a
name of its own). Complexity is ruff's C90 check (`make lint`, pyproject's [tool.ruff])."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 80


def _source_files() -> list[Path]:
    """Every .py of the repository outside tests/ and hidden folders (.venv, .git, ...)."""
    return sorted(p for p in REPO.rglob("*.py")
                  if not any(part == "tests" or part.startswith(".") for part in p.relative_to(REPO).parts[:-1]))


def long_functions(path: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """"file:line name" -> length in lines (decorators aside) of each function in `path` over `limit`."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {f"{path.relative_to(REPO)}:{node.lineno} {node.name}": node.end_lineno - node.lineno + 1
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > limit}


def test_the_walk_covers_the_packages_and_skips_tests():
    files = {str(p.relative_to(REPO)) for p in _source_files()}
    assert {"service/metrics.py", "training/card.py", "bench/report.py", "cli/main.py"} <= files
    assert not any(f.startswith(("tests/", ".venv/")) for f in files)


def test_a_function_over_the_limit_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(f"{__name__}.REPO", tmp_path)
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "long.py").write_text(f"def short():\n    pass\n\n\nasync def long():\n{body}\n")
    assert long_functions(tmp_path / "long.py") == {"long.py:5 long": MAX_FUNCTION_LINES + 1}


def test_no_function_outside_tests_over_80_lines():
    too_long = {}
    for path in _source_files():
        too_long.update(long_functions(path))
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines (cut them into named steps): {too_long}"
