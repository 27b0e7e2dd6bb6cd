"""The blocking client is generated from the asyncio one (scripts/unasync_client.py); the generated file is current."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).parent.parent.parent
SCRIPT = ROOT / "scripts" / "unasync_client.py"
GENERATED = ROOT / "client" / "src" / "schedlock" / "_sync.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync_client", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_blocking_client_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_sees_a_hand_edit(tmp_path: Path) -> None:
    edited = tmp_path / "_sync.py"
    edited.write_text(GENERATED.read_text().replace("time.sleep(delay)", "time.sleep(delay * 2)"))
    diff = load_script().stale(edited)
    assert diff is not None
    assert "-                time.sleep(delay * 2)" in diff and "+                time.sleep(delay)" in diff


def test_the_generated_file_says_so() -> None:
    header = GENERATED.read_text().splitlines()[:2]
    assert header[0].startswith("# GENERATED from _async.py by scripts/unasync_client.py: do not edit.")
    assert "run: python scripts/unasync_client.py" in header[1]
