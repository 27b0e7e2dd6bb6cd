"""The README's Python examples run, as written, against the live server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).parents[2] / "README.md"


def python_blocks(section: str) -> list[str]:
    text = README.read_text()
    start = text.index(f"## {section}\n")
    end = text.find("\n## ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)


def test_the_python_client_examples_run(url: str, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> None:
    blocks = python_blocks("Python client")
    assert len(blocks) == 3
    monkeypatch.setenv("SCHEDLOCK_URL", url)
    namespace: dict[str, Any] = {}
    try:
        for block in blocks:
            exec(compile(block, str(README), "exec"), namespace)
    finally:
        if "client" in namespace:
            namespace["client"].close()
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "report sent"
    assert out[1].startswith("run ") and " until " in out[1]
