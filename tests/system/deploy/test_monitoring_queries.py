"""The Grafana dashboard (helm/schedlock/dashboards/schedlock.json) and every query it and the chart's alerts make.

The dashboard is loaded into the typed model of the Grafana Foundation SDK and written back: a key the model drops
is one Grafana's dashboard schema does not know (a typo Grafana would ignore in silence). Every query is parsed
by promtool, and may name only metrics, labels and label values the server really exports, read from its
/metrics after a few lock operations: a renamed metric or outcome fails here, not on a dark panel in production.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import yaml
from fastapi import FastAPI
from grafana_foundation_sdk.cog import plugins
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import Dashboard
from prometheus_client.parser import text_string_to_metric_families

from tests.support.api import acquire, extend, release
from tests.support.helm import CHART, one, render, values

DASHBOARD = CHART / "dashboards" / "schedlock.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
#: What the dashboard's variables and Grafana's own stand for when promtool parses a query.
SUBSTITUTE = {"$__rate_interval": "5m", "$namespace": ".*", "$service": ".*", "$pod": ".*"}
#: Labels Prometheus' scrape adds, or that histograms carry: not the server's to export.
TARGET_LABELS = {"namespace", "service", "pod", "job", "instance", "container", "endpoint", "le"}
#: Labels whose values are an open set by design (any HTTP status or method a request had).
OPEN_VALUES = {"status", "method"}
#: Series from other exporters the alerts use (kube-state-metrics, Prometheus' own ``up``).
OTHERS = re.compile(r"^(kube_|up$)")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}")
_MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")


def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def dashboard_queries() -> list[str]:
    queries = [t["expr"] for p in dashboard()["panels"] for t in p.get("targets", [])]
    queries += [v["query"]["query"] for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    return queries


def alert_queries() -> list[str]:
    vals = values("default")
    vals["prometheusRule"] = {"enabled": True}
    groups = one(render(vals), "PrometheusRule")["spec"]["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def _lost_keys(original: Any, written: Any, path: str = "") -> list[str]:
    if isinstance(original, dict):
        lost = [f"{path}/{k}" for k in original if not isinstance(written, dict) or k not in written]
        return lost + [p for k in original if isinstance(written, dict) and k in written
                       for p in _lost_keys(original[k], written[k], f"{path}/{k}")]  # fmt: skip
    if isinstance(original, list):
        if not isinstance(written, list) or len(written) != len(original):
            return [path]
        return [
            p for i, (a, b) in enumerate(zip(original, written, strict=True)) for p in _lost_keys(a, b, f"{path}[{i}]")
        ]
    return [] if original == written else [f"{path}: {original!r} became {written!r}"]


def test_dashboard_loads_into_grafanas_typed_model_without_losing_a_key() -> None:
    plugins.register_default_plugins()
    original = dashboard()
    model = Dashboard.from_json(original)
    written = json.loads(json.dumps(model, cls=JSONEncoder))
    assert _lost_keys(original, written) == []
    # The panels' options were read by their plugin's own model (stat, timeseries), not kept as loose dicts.
    options = [getattr(panel, "options", None) for panel in model.panels or []]
    assert {type(o).__module__.rsplit(".", 1)[-1] for o in options if o is not None} == {"stat", "timeseries"}


def test_dashboard_layout_and_data_source() -> None:
    board = dashboard()
    assert board["uid"] == "schedlock-overview" and board["title"] == "schedlock"
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: dict[tuple[int, int], int] = {}
    for panel in panels:
        pos = panel["gridPos"]
        assert pos["x"] >= 0 and pos["x"] + pos["w"] <= 24, panel["title"]
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps panel {cells[(x, y)]}"
                cells[x, y] = panel["id"]
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == DATASOURCE and panel["description"], panel["title"]
        assert panel["targets"] and all(t["datasource"] == DATASOURCE and t["expr"] for t in panel["targets"])
    variables = {v["name"] for v in board["templating"]["list"]}
    used = set(re.findall(r"\$(\w+)", json.dumps(panels))) - {"__rate_interval", "__auto"}
    assert used <= variables, used - variables
    # "All" must also match series without the label (a scrape that sets no service label).
    assert all(v["allValue"] == ".*" for v in board["templating"]["list"] if v["type"] == "query")


def test_every_query_parses(tmp_path: Path) -> None:
    queries = [*dashboard_queries(), *alert_queries()]
    rules = []
    for i, query in enumerate(queries):
        for variable, value in SUBSTITUTE.items():
            query = query.replace(variable, value)
        if query.startswith("label_values("):  # a Grafana function: its argument is the query
            query = re.sub(r"^label_values\((.*),\s*\w+\)$", r"\1", query)
        rules.append({"record": f"schedlock:query_{i}", "expr": query})
    path = tmp_path / "queries.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "queries", "rules": rules}]}))
    result = subprocess.run(["/usr/bin/promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(rules) >= 25


async def exported(client: httpx.AsyncClient, name: str) -> dict[str, dict[str, set[str]]]:
    """metric sample name -> label -> values, from /metrics after each kind of lock operation."""
    lease = (await acquire(client, name)).json()
    assert (await acquire(client, name)).status_code == 409
    assert (await extend(client, name, lease["token"])).status_code == 200
    assert (await release(client, name, lease["token"])).status_code == 200
    assert (await extend(client, name, lease["token"])).status_code == 409
    assert (await client.get("/v1/locks")).status_code == 200
    # The jobs' metrics exist once a job does (computed on a scrape, like the held-lock count).
    assert (await client.put(f"/v1/jobs/{name}", json={"schedule": "@daily"})).status_code == 200
    await client.get("/metrics")  # the held-lock count is computed on a scrape
    text = (await client.get("/metrics")).text
    names: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = names[sample.name]
            for label, value in sample.labels.items():
                labels[label].add(value)
    return names


async def test_queries_name_only_what_the_server_exports(app: FastAPI, client: httpx.AsyncClient, name: str) -> None:
    app.state.metrics.held_locks_max_age = 0  # scrape-time gauges read now, not from an earlier test's scrape
    try:
        metrics = await exported(client, name)
    finally:
        app.state.metrics.held_locks_max_age = 5.0
    problems = []
    for query in [*dashboard_queries(), *alert_queries()]:
        selected: list[str] = []
        for metric, matchers in _SELECTOR.findall(query):
            if OTHERS.match(metric):
                continue
            selected.append(metric)
            if metric not in metrics:
                problems.append(f"{metric}: not exported")
                continue
            for label, op, value in _MATCHER.findall(matchers):
                if label in TARGET_LABELS:
                    continue
                known = metrics[metric].get(label)
                if not known:
                    problems.append(f"{metric}: no label {label}")
                elif op in ("=", "=~") and label not in OPEN_VALUES:
                    pattern = re.escape(value) if op == "=" else value
                    # Each alternative of a regex must exist on its own ("release|extend": both).
                    for alternative in pattern.split("|") if re.fullmatch(r"[\w|]+", pattern) else [pattern]:
                        if not any(re.fullmatch(alternative, v) for v in known):
                            problems.append(f"{metric}: {label}{op}{value!r} matches none of {sorted(known)}")
        for grouping in _GROUPING.findall(query):
            for label in (g.strip() for g in grouping.split(",")):
                if label and label not in TARGET_LABELS and not any(label in metrics[m] for m in selected):
                    problems.append(f"{query[:60]}…: groups by {label}, which none of its metrics has")
    assert problems == []


async def test_every_exported_metric_is_documented_and_nothing_else(
    app: FastAPI, client: httpx.AsyncClient, name: str
) -> None:
    # docs/operations.md's table of metrics against a live /metrics (after each kind of operation, with a job).
    app.state.metrics.held_locks_max_age = 0
    try:
        await exported(client, name)
        text = (await client.get("/metrics")).text
    finally:
        app.state.metrics.held_locks_max_age = 5.0
    families = {
        f.name + ("_total" if f.type == "counter" else "")
        for f in text_string_to_metric_families(text)
        if f.name.startswith("schedlock_")
    }
    table = (Path(__file__).parents[3] / "docs" / "operations.md").read_text()
    documented = set(re.findall(r"^\| `(schedlock_[a-z_]+)` \|", table, re.MULTILINE))
    assert families - documented == set(), "exported, not in docs/operations.md's table"
    assert documented - families == set(), "in docs/operations.md's table, not exported"
