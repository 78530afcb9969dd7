"""No product function is longer than FUNCTION_LINES_MAX lines: a long function is split
into a decision and the steps that carry it out (ruff's complexity and statement-count
rules, set in pyproject.toml, hold the rest)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("bookie", "blobstore", "s3api")
FUNCTION_LINES_MAX = 80


def long_functions(path: Path, limit: int, root: Path = ROOT) -> list[str]:
    """`file:line name (n lines)` of every function or method in a file over `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            if lines > limit:
                found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_product_function_is_too_long() -> None:
    too_long = [
        where
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        for where in long_functions(path, FUNCTION_LINES_MAX)
    ]
    assert not too_long, f"functions over {FUNCTION_LINES_MAX} lines:\n" + "\n".join(too_long)


def test_the_measure_counts_a_method_whole(tmp_path: Path) -> None:
    body = "".join(f"        x{i} = {i}\n" for i in range(5))
    sample = tmp_path / "sample.py"
    sample.write_text(f"class C:\n    async def m(self) -> None:\n{body}")
    assert long_functions(sample, 5, tmp_path) == ["sample.py:2 m (6 lines)"]
    assert long_functions(sample, 6, tmp_path) == []
