"""The test suite's own layout: helpers shared between test modules live in support modules.

A test module that imports another test module couples the two (moving a test breaks the other)
and, when it imports a `test_*` function, makes pytest collect that test twice. Shared helpers go
to support modules (`*_support.py`, or named by what they are, e.g. relay_driver.py).
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).parents[1]


def is_test_module(module: str) -> bool:
    return module.startswith("tests.") and module.rsplit(".", 1)[-1].startswith("test_")


def imports_of(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
            found.extend(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            found.extend(f"tests.{alias.name}" for alias in node.names)  # `from . import test_x`
            if node.module:
                found.append(f"tests.{node.module}")
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return found


def test_no_module_of_the_suite_imports_a_test_module() -> None:
    offenders = [f"{path.relative_to(TESTS.parent)} imports {module}"
                 for path in sorted(TESTS.rglob("*.py")) if "node_modules" not in path.parts
                 for module in imports_of(path) if is_test_module(module)]
    assert offenders == []
