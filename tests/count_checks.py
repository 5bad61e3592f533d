"""Count the checks the test suite makes, to show that a change to the suite (speed, fixtures,
markers) kept every one: ``python tests/count_checks.py`` prints, over the test files
(tests/test_*.py; not conftest.py and the helper modules, whose checks are reached through the
tests), the number of test functions and of checks, where a check is

- an ``assert`` statement,
- a ``pytest.raises`` / ``pytest.warns`` / ``pytest.approx`` / ``pytest.fail`` call,
- a call of any function or method whose name starts with ``assert`` (``np.testing.assert_allclose``,
  ``pd.testing.assert_frame_equal``, ``mock.assert_called_once_with``, a helper ``assert_...``).

It counts source, not runs: a parametrised test counts once here; ``pytest --collect-only -q``
counts its cases. ``--per-file`` prints the counts of each file too.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
PYTEST_CHECKS = {"raises", "warns", "approx", "fail"}


def _called_name(call: ast.Call) -> tuple[str, str]:
    """(object name, function name) of a call: ``pytest.raises(...)`` -> ("pytest", "raises")."""
    func = call.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ""
        return owner, func.attr
    if isinstance(func, ast.Name):
        return "", func.id
    return "", ""


def counts_of(path: Path) -> tuple[int, int]:
    """(test functions, checks) in one file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    tests = checks = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
            "test"
        ):
            tests += 1
        elif isinstance(node, ast.Assert):
            checks += 1
        elif isinstance(node, ast.Call):
            owner, name = _called_name(node)
            if (owner == "pytest" and name in PYTEST_CHECKS) or name.startswith("assert"):
                checks += 1
    return tests, checks


def main(argv: list[str]) -> int:
    total_tests = total_checks = 0
    for path in sorted(TESTS.glob("test_*.py")):
        tests, checks = counts_of(path)
        total_tests += tests
        total_checks += checks
        if "--per-file" in argv:
            print(f"{path.name}\t{tests}\t{checks}")
    print(f"test functions: {total_tests}\nchecks: {total_checks}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
