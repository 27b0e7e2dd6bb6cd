"""One version: the server's and the client's distributions, their ``__version__``, and the Helm chart agree."""

from __future__ import annotations

import tomllib
from pathlib import Path

import yaml

import app
import schedlock

ROOT = Path(__file__).parents[2]


def _project_version(pyproject: Path) -> str:
    return str(tomllib.loads(pyproject.read_text())["project"]["version"])


def test_server_client_and_chart_agree() -> None:
    server = _project_version(ROOT / "pyproject.toml")
    chart = yaml.safe_load((ROOT / "helm/schedlock/Chart.yaml").read_text())
    assert app.__version__ == server
    assert _project_version(ROOT / "client/pyproject.toml") == server
    assert schedlock.__version__ == server
    assert str(chart["version"]) == server
    assert str(chart["appVersion"]) == server
