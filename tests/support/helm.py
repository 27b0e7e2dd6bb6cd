"""Render the Helm chart with the Helm SDK (helm-python-sdk, no helm binary) and pick objects out of it.

Scenarios are the values files in helm/schedlock/ci/, one per situation a platform team meets.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python as helm
import yaml

ROOT = Path(__file__).parent.parent.parent
CHART = ROOT / "helm" / "schedlock"
SCENARIOS = {p.name.removesuffix("-values.yaml"): p for p in sorted((CHART / "ci").glob("*-values.yaml"))}
RELEASE, NAMESPACE = "jobs", "platform"
FULLNAME = f"{RELEASE}-schedlock"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion) and the newest the validator knows (None).
KUBE_VERSIONS = ["1.25.0", None]


def values(scenario: str) -> dict[str, Any]:
    """The values of a scenario (helm/schedlock/ci/<scenario>-values.yaml)."""
    loaded: dict[str, Any] = yaml.safe_load(SCENARIOS[scenario].read_text()) or {}
    return loaded


def render(vals: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object the chart renders for ``vals``, as an install of release RELEASE in NAMESPACE."""
    with helm.Chart.load(CHART) as chart:
        files = chart.render(values=vals, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [
        doc for path, text in sorted(files.items()) if path.endswith(".yaml") for doc in yaml.safe_load_all(text) if doc
    ]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The only object of ``kind`` (and ``name``, if given); fails if there are none or several."""
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, (kind, name, [o["metadata"]["name"] for o in found])
    return found[0]


def kinds(objects: list[dict[str, Any]]) -> set[str]:
    return {o["kind"] for o in objects}
