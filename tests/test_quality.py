"""Strict tooling is part of the suite: ruff (lint and format), mypy --strict and the import contracts of app/
(import-linter, ``[tool.importlinter]`` in pyproject.toml) must be clean."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


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
