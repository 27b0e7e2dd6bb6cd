"""The client is its own small distribution: httpx only, typed, no import of the server."""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import subprocess
import sys

import schedlock


def test_the_distribution_depends_on_httpx_only_and_installs_the_command() -> None:
    requires = importlib.metadata.requires("schedlock") or []
    assert [r for r in requires if "extra ==" not in r] == ["httpx>=0.27"]  # the schedulers' adapters are extras
    scripts = importlib.metadata.entry_points(group="console_scripts", name="schedlock")
    assert [entry.value for entry in scripts] == ["schedlock._cli:main"]


def test_it_ships_py_typed_and_an_explicit_public_surface() -> None:
    assert (importlib.resources.files("schedlock") / "py.typed").is_file()
    assert all(not name.startswith("_") or name == "__version__" for name in schedlock.__all__)
    assert all(hasattr(schedlock, name) for name in schedlock.__all__)


def test_importing_the_client_imports_nothing_of_the_server() -> None:
    code = "import sys, schedlock, schedlock._cli; print(sorted(m for m in sys.modules if m.split('.')[0] == 'app'))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
