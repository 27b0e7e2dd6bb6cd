"""Strict tooling is part of the suite: ruff (lint and format), mypy --strict and the import contracts of app/
(import-linter, ``[tool.importlinter]`` in pyproject.toml) must be clean, and the tests keep their layout: helpers
in tests/support/ (and the fault campaign's harness, tests/chaos/), fixtures in conftest.py files, no test module
importing another or a conftest, and a module wholly of the system tier under tests/system/."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "ruff", "check", "."],
        ["-m", "ruff", "format", "--check", "."],
        ["-m", "mypy"],
        ["lint-imports", "--no-cache"],
    ],
    ids=lambda c: " ".join(c).removeprefix("-m "),
)
def test_tool_is_clean(command: list[str]) -> None:
    # lint-imports has no ``python -m`` entry: run its script from this interpreter's environment.
    argv = (
        [sys.executable, *command]
        if command[0] == "-m"
        else [str(Path(sys.executable).with_name(command[0])), *command[1:]]
    )
    result = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the tests' own layout --------------------------------------------------------------------------------------


def imported(module: str, source: str) -> Iterator[tuple[int, str]]:
    """(line, dotted name) of everything ``source`` (the text of ``module``) imports, relative imports resolved; for
    ``from a import b`` both ``a`` and ``a.b`` (b may be a module)."""
    is_package = module.endswith(".__init__")
    package = module.removesuffix(".__init__") if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            base = ".".join(p for p in (base, node.module) if p)
            yield node.lineno, base
            yield from ((node.lineno, f"{base}.{alias.name}") for alias in node.names)


#: Packages of tests/ that test modules may import: the helpers, and the fault campaign (``python -m tests.chaos``).
HELPER_PACKAGES = ("tests.support", "tests.chaos")


def layout_violations(module: str, source: str) -> list[str]:
    """The imports of ``module`` (a dotted name under tests) that reach into tests/ outside HELPER_PACKAGES: another
    test module, a conftest, or any other helper kept beside the tests."""
    found: dict[int, str] = {}
    for line, name in imported(module, source):
        helper = any(name == p or name.startswith(f"{p}.") for p in HELPER_PACKAGES)
        if name.startswith("tests.") and not helper:
            found.setdefault(line, name)  # of `from a import b`, a: it comes first
    return [f"{module}:{line} imports {name}" for line, name in sorted(found.items())]


def test_tests_import_helpers_only_from_tests_support() -> None:
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        found += layout_violations(module, path.read_text())
    assert found == [], "helpers belong in tests/support/, fixtures in a conftest.py:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("module", "source", "seen"),
    [
        ("tests.test_slots", "from tests.test_logs import access", "tests.test_logs"),
        ("tests.polyglot.test_slots", "from tests.polyglot.conftest import Program", "tests.polyglot.conftest"),
        ("tests.polyglot.test_slots", "from tests.polyglot import conftest", "tests.polyglot"),
        ("tests.polyglot.test_slots", "from .conftest import Program", "tests.polyglot.conftest"),
        ("tests.polyglot.test_slots", "from ..test_helm import KUBE_VERSIONS", "tests.test_helm"),
        ("tests.polyglot.__init__", "from . import conftest", "tests.polyglot"),
        ("tests.test_slots", "import tests.test_replicas", "tests.test_replicas"),
        ("tests.support.logs", "from tests.conftest import name", "tests.conftest"),
        ("tests.test_slots", "def f() -> None:\n    from tests.test_metrics import scrape", "tests.test_metrics"),
    ],
)
def test_the_layout_check_sees_an_import_of_a_test_module_or_conftest(module: str, source: str, seen: str) -> None:
    line = source.count("\n") + 1
    assert layout_violations(module, source) == [f"{module}:{line} imports {seen}"]


def test_the_layout_check_lets_helpers_from_tests_support_through() -> None:
    source = "from tests.support.api import acquire\nfrom tests import support\nfrom .support import apps\n"
    assert layout_violations("tests.test_slots", source) == []


def test_the_layout_check_lets_the_fault_campaign_through() -> None:
    source = "from tests.chaos.checker import check\nfrom tests import chaos\nimport tests.chaos.campaign\n"
    assert layout_violations("tests.test_chaos", source) == []


# --- the system tier's folder ------------------------------------------------------------------------------------


def whole_module_marks(source: str) -> list[int]:
    """Lines where ``source`` marks all its tests at once (``pytestmark = ...``) with the system marker."""
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.Assign):
            continue
        named = any(isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets)
        if named and "system" in ast.unparse(node.value):
            found.append(node.lineno)
    return found


def test_a_module_wholly_of_the_system_tier_lives_in_tests_system() -> None:
    """tests/conftest.py marks every test under tests/system/ as system; a module elsewhere marks only the few tests
    of its own that need more, so the folder says which tier a module belongs to."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        if not path.is_relative_to(ROOT / "tests" / "system")
        for line in whole_module_marks(path.read_text())
    ]
    assert found == [], "move these modules under tests/system/:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "lines"),
    [
        ("import pytest\npytestmark = pytest.mark.system\n", [2]),
        ("import pytest\npytestmark = [pytest.mark.system, pytest.mark.slow]\n", [2]),
        ("import pytest\n\n@pytest.mark.system\ndef test_x() -> None: ...\n", []),
        ("import pytest\npytestmark = pytest.mark.filterwarnings('ignore')\n", []),
    ],
    ids=["the module marked", "a list of marks", "one test marked", "another marker"],
)
def test_the_tier_check_sees_a_module_marked_whole(source: str, lines: list[int]) -> None:
    assert whole_module_marks(source) == lines


# --- no private member of a dependency ---------------------------------------------------------------------------

#: The project's own top-level packages: everything else imported is the standard library's or a dependency's.
OWN = frozenset({"app", "schedlock", "bench", "tests"})


def private_imports(module: str, source: str) -> list[str]:
    """The imports of ``module`` that take a private name (a part starting with ``_``, dunders aside) from a
    third-party package: ``from asyncpg import connect_utils`` is fine, ``from asyncpg.connect_utils import
    _cancel`` or ``import uvicorn._types`` is not. ruff's SLF001 sees attribute access; this sees imports."""
    found = []
    for line, name in imported(module, source):
        top = name.split(".")[0]
        if top in OWN or top in sys.stdlib_module_names or top == "__future__":
            continue
        if any(part.startswith("_") and not part.endswith("__") for part in name.split(".")):
            found.append(f"{module}:{line} imports {name}")
    return sorted(set(found))


def test_no_module_imports_a_private_name_of_a_dependency() -> None:
    found = []
    for folder in ("app", "client/src", "bench"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            module = ".".join(path.relative_to(ROOT / folder if folder == "client/src" else ROOT).with_suffix("").parts)
            found += private_imports(module, path.read_text())
    assert found == [], "public APIs of dependencies only (STYLE.md):\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("source", "seen"),
    [
        ("from asyncpg.connect_utils import _cancel", "asyncpg.connect_utils._cancel"),
        ("import uvicorn._types", "uvicorn._types"),
        ("from starlette._utils import is_async_callable", "starlette._utils"),
    ],
)
def test_the_private_import_check_sees_a_planted_import(source: str, seen: str) -> None:
    assert any(line.endswith(f"imports {seen}") for line in private_imports("app.planted", source))


def test_the_private_import_check_lets_the_project_and_the_standard_library_through() -> None:
    source = (
        "from __future__ import annotations\nfrom app.api import _x\nimport os._y\nfrom schedlock._base import Call\n"
    )
    assert private_imports("app.fine", source) == []
