"""The chart's monitoring objects: the Grafana dashboard (a ConfigMap for Grafana's sidecar) and the PrometheusRule.

The rules are checked by Debian's promtool: ``check rules``, then ``test rules``, where each alert must fire on
series past its threshold and stay quiet on series under it. The dashboard's content and every query's metric
names are checked in tests/system/deploy/test_monitoring_queries.py.
"""

from __future__ import annotations

import copy
import json
import math
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from app.ops.metrics import LATENCY_BUCKETS
from tests.support.helm import CHART, FULLNAME, NAMESPACE, kinds, one, render, values

PROMTOOL = "/usr/bin/promtool"  # Debian's prometheus package (scripts/test installs it)
DASHBOARD = CHART / "dashboards" / "schedlock.json"
ALERTS = {
    "SchedlockServerErrors",
    "SchedlockStorageUnavailable",
    "SchedlockSlowLockOperations",
    "SchedlockPoolSaturated",
    "SchedlockNotReady",
    "SchedlockNoReadyPod",
    "SchedlockDown",
    "SchedlockLeasesLost",
    "SchedlockJobMissed",
    "SchedlockJobFailing",
    "SchedlockJobLate",
    "SchedlockJobWebhooksGivenUp",
}


def monitored(scenario: str = "default", **rule: Any) -> dict[str, Any]:
    """The scenario's values with the dashboard and the alerts on (``rule``: more prometheusRule values)."""
    vals = values(scenario)
    vals["grafanaDashboard"] = {**vals.get("grafanaDashboard", {}), "enabled": True}
    vals["prometheusRule"] = {**vals.get("prometheusRule", {}), "enabled": True, **rule}
    return vals


def rules_of(vals: dict[str, Any]) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = one(render(vals), "PrometheusRule")["spec"]["groups"]
    return [rule for group in groups for rule in group["rules"]]


def promtool(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PROMTOOL, *map(str, args)], capture_output=True, text=True, timeout=120)


def test_monitoring_is_opt_in() -> None:
    objects = render(values("default"))
    assert "PrometheusRule" not in kinds(objects)
    assert [o["metadata"]["name"] for o in objects if o["kind"] == "ConfigMap"] == [FULLNAME]


def test_dashboard_configmap_is_found_by_grafanas_sidecar() -> None:
    vals = values("all-enabled")
    config_map = one(render(vals), "ConfigMap", f"{FULLNAME}-dashboard")
    metadata = config_map["metadata"]
    assert metadata["namespace"] == vals["grafanaDashboard"]["namespace"] == "monitoring"
    assert metadata["labels"]["grafana_dashboard"] == "1"  # the sidecar's default label (kube-prometheus-stack)
    assert metadata["annotations"] == {"grafana_folder": "Platform"}
    assert json.loads(config_map["data"]["schedlock.json"]) == json.loads(DASHBOARD.read_text())
    custom = monitored()
    custom["grafanaDashboard"].update(sidecarLabel="dashboards.example/grafana", sidecarLabelValue="yes")
    labels = one(render(custom), "ConfigMap", f"{FULLNAME}-dashboard")["metadata"]["labels"]
    assert labels["dashboards.example/grafana"] == "yes" and "grafana_dashboard" not in labels


# kubernetes-validate has no schema for prometheus-operator's CRDs: check the fields the chart writes, strictly.
_PROMETHEUS_RULE = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "PrometheusRule"},
        "metadata": {"type": "object", "required": ["name", "namespace", "labels"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["groups"],
            "properties": {
                "groups": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name", "rules"],
                        "properties": {
                            "name": {"type": "string", "minLength": 1},
                            "rules": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["alert", "expr", "labels", "annotations"],
                                    "properties": {
                                        "alert": {"type": "string", "pattern": "^Schedlock[A-Za-z]+$"},
                                        "expr": {"type": "string", "minLength": 1},
                                        "for": {"type": "string", "pattern": "^[0-9]+[smh]$"},
                                        "labels": {
                                            "type": "object",
                                            "required": ["severity"],
                                            "additionalProperties": {"type": "string"},
                                            "properties": {"severity": {"enum": ["warning", "critical"]}},
                                        },
                                        "annotations": {
                                            "type": "object",
                                            "required": ["summary", "description"],
                                            "additionalProperties": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                }
            },
        },
    },
}


def test_prometheus_rule_object() -> None:
    vals = values("all-enabled")
    rule = one(render(vals), "PrometheusRule")
    jsonschema.validate(rule, _PROMETHEUS_RULE)
    assert rule["metadata"]["namespace"] == "monitoring"
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = {r["alert"]: r for r in rule["spec"]["groups"][0]["rules"]}
    assert set(alerts) == ALERTS - {"SchedlockLeasesLost"}  # disabled in that scenario
    assert all(r["labels"]["team"] == "platform" for r in alerts.values())
    # The series are the release's, in the release's namespace, wherever the rule object lives.
    assert f'namespace="{NAMESPACE}",service="{FULLNAME}"' in alerts["SchedlockServerErrors"]["expr"]
    assert "> 0.1" in alerts["SchedlockSlowLockOperations"]["expr"]
    assert f'deployment="{FULLNAME}"' in alerts["SchedlockNotReady"]["expr"]
    custom = rules_of(monitored(selector='job="schedlock",cluster="eu-1"'))
    assert {r["alert"] for r in custom} == ALERTS
    for r in custom:
        if "schedlock_" in r["expr"] or "up{" in r["expr"]:
            assert 'job="schedlock",cluster="eu-1"' in r["expr"] and "service=" not in r["expr"], r["alert"]


@pytest.mark.parametrize("scenario", ["default", "all-enabled"])
def test_promtool_checks_the_rules(scenario: str, tmp_path: Path) -> None:
    rules = rules_of(monitored(scenario))
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "schedlock", "rules": rules}]}))
    result = promtool("check", "rules", path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(rules)} rules found" in result.stdout


# ---- each alert against series that cross its threshold, and series that stay under it --------------------------

SERIES = f'namespace="{NAMESPACE}",service="{FULLNAME}",pod="{FULLNAME}-7d9f-x2x4q"'
KSM = f'namespace="{NAMESPACE}",deployment="{FULLNAME}",job="kube-state-metrics"'
ACQUIRE = 'route="/v1/locks/{name}/acquire",method="POST"'


def _requests(per_minute: dict[str, int]) -> list[dict[str, str]]:
    """Counters of /v1 acquire requests by status, growing by ``per_minute`` for 40 minutes."""
    return [
        {"series": f'schedlock_http_requests_total{{{SERIES},{ACQUIRE},status="{status}"}}', "values": f"0+{n}x40"}
        for status, n in per_minute.items()
    ]


def _latency(above: float) -> list[dict[str, str]]:
    """A histogram of acquire latency whose every observation is just above ``above`` seconds."""
    buckets = [*LATENCY_BUCKETS, math.inf]
    name = "schedlock_http_request_duration_seconds_bucket"
    return [
        {
            "series": f'{name}{{{SERIES},{ACQUIRE},le="{"+Inf" if b == math.inf else b}"}}',
            "values": "0+100x40" if b > above else "0x40",
        }
        for b in buckets
    ]


def _replicas(available: int, wanted: int) -> list[dict[str, str]]:
    """kube-state-metrics' view of the Deployment: ``available`` ready pods of ``wanted``."""
    return [
        {"series": f"kube_deployment_status_replicas_available{{{KSM}}}", "values": f"{available}x40"},
        {"series": f"kube_deployment_spec_replicas{{{KSM}}}", "values": f"{wanted}x40"},
    ]


def _cases(thresholds: dict[str, float]) -> dict[str, tuple[str, dict[str, str], list[Any], list[Any]]]:
    """alert[:variant] -> (eval time, its own labels, series that fire it, series that do not)."""
    errors, unavailable = thresholds["serverErrorRatio"], thresholds["unavailableRatio"]
    latency, pool = thresholds["latencyP99Seconds"], thresholds["poolBusyRatio"]
    release = {"namespace": NAMESPACE, "service": FULLNAME}
    deployment = {"namespace": NAMESPACE, "deployment": FULLNAME, "job": "kube-state-metrics"}
    just_over = min(b for b in LATENCY_BUCKETS if b >= latency)  # every observation lands above the threshold
    max_connections = 16

    def pool_busy(busy: int) -> list[dict[str, str]]:
        return [
            {"series": f"schedlock_db_pool_max_connections{{{SERIES}}}", "values": f"{max_connections}x40"},
            {"series": f'schedlock_db_pool_connections{{{SERIES},state="busy"}}', "values": f"{busy}x40"},
            {
                "series": f'schedlock_db_pool_connections{{{SERIES},state="idle"}}',
                "values": f"{max_connections - busy}x40",
            },
        ]

    job = {**release, "job_name": "nightly-billing"}

    def ticks(state: str, values: str) -> dict[str, str]:
        name = "schedlock_job_ticks_total"
        return {"series": f'{name}{{{SERIES},job_name="nightly-billing",state="{state}"}}', "values": values}

    def job_state(state: str, values: str) -> dict[str, str]:
        name = "schedlock_job_state"
        return {"series": f'{name}{{{SERIES},job_name="nightly-billing",state="{state}"}}', "values": values}

    def webhook_posts(result: str, values: str) -> dict[str, str]:
        return {"series": f'schedlock_job_webhook_posts_total{{{SERIES},result="{result}"}}', "values": values}

    return {
        # One missed tick fires; ticks that complete, or a counter that stands still (a paused job), do not.
        "SchedlockJobMissed": (
            "10m",
            job,
            [ticks("missed", "0 0 0 1x40"), ticks("completed", "0+1x40")],
            [ticks("missed", "2x40"), ticks("completed", "0+1x40")],
        ),
        "SchedlockJobFailing": (
            "10m",
            job,
            [ticks("timed_out", "0 0 0 1x40"), ticks("failed", "0x40")],
            [ticks("failed", "1x40"), ticks("timed_out", "0x40"), ticks("missed", "0 0 0 1x40")],
        ),
        "SchedlockJobLate": (
            "10m",
            job,
            [job_state("late", "0 0 0 1x40"), job_state("up", "1 1 1 0x40")],
            # Late for a minute, then up: a run started inside the grace.
            [job_state("late", "0x7 1 0x40"), job_state("up", "1x7 0 1x40")],
        ),
        # An event given up fires; failures that are tried again, or an old count standing still, do not.
        "SchedlockJobWebhooksGivenUp": (
            "10m",
            release,
            [webhook_posts("given_up", "0 0 0 1x40"), webhook_posts("delivered", "0+1x40")],
            [webhook_posts("given_up", "2x40"), webhook_posts("failed", "0+3x40")],
        ),
        "SchedlockServerErrors": (
            "12m",
            release,
            # 503s are the other alert's: a flood of them alone must not fire this one.
            _requests({"200": 1000, "500": math.ceil(2000 * errors), "503": 10}),
            _requests({"200": 1000, "500": math.floor(500 * errors), "503": 500}),
        ),
        "SchedlockStorageUnavailable": (
            "10m",
            release,
            _requests({"200": 1000, "503": math.ceil(2000 * unavailable)}),
            _requests({"200": 1000, "503": math.floor(500 * unavailable), "500": 500}),
        ),
        "SchedlockSlowLockOperations": ("20m", release, _latency(just_over), _latency(0)),
        "SchedlockPoolSaturated": (
            "20m",
            {**release, "pod": f"{FULLNAME}-7d9f-x2x4q"},
            pool_busy(max_connections),
            pool_busy(math.floor(max_connections * pool) - 1),
        ),
        "SchedlockNotReady": ("15m", deployment, _replicas(available=1, wanted=2), _replicas(available=2, wanted=2)),
        # Scaled to zero on purpose is not "no ready pod".
        "SchedlockNoReadyPod": ("5m", deployment, _replicas(available=0, wanted=2), _replicas(available=0, wanted=0)),
        "SchedlockDown": (
            "10m",
            release,
            [{"series": f'up{{{SERIES},job="schedlock"}}', "values": "0x40"}],
            [{"series": f'up{{{SERIES},job="schedlock"}}', "values": "1x40"}],
        ),
        # No target at all (not even a failing one) is down too.
        "SchedlockDown:absent": (
            "10m",
            release,
            [{"series": f'up{{namespace="{NAMESPACE}",service="other",job="schedlock"}}', "values": "1x40"}],
            [{"series": f'up{{{SERIES},job="schedlock"}}', "values": "0 1x40"}],
        ),
        "SchedlockLeasesLost": (
            "5m",
            release,
            [
                {
                    "series": f'schedlock_lock_operations_total{{{SERIES},operation="extend",outcome="not_holder"}}',
                    "values": "0 0 0 1x40",
                }
            ],
            [
                {
                    "series": f'schedlock_lock_operations_total{{{SERIES},operation="extend",outcome="not_holder"}}',
                    "values": "3x40",
                },
                {
                    "series": f'schedlock_lock_operations_total{{{SERIES},operation="extend",outcome="extended"}}',
                    "values": "0+50x40",
                },
            ],
        ),
    }


@pytest.mark.parametrize("scenario", ["default", "all-enabled"])
def test_each_alert_fires_past_its_threshold_and_not_below(scenario: str, tmp_path: Path) -> None:
    vals = monitored(scenario)
    rules = rules_of(vals)
    with (CHART / "values.yaml").open() as f:
        thresholds = {
            **yaml.safe_load(f)["prometheusRule"]["thresholds"],
            **vals["prometheusRule"].get("thresholds", {}),
        }
    alert_labels = vals["prometheusRule"].get("alertLabels", {})
    # Annotations are templates that promtool check rules has parsed (above); here only when and with what labels.
    bare = [{k: v for k, v in copy.deepcopy(r).items() if k != "annotations"} for r in rules]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "schedlock", "rules": bare}]}))
    tests = []
    enabled = {rule["alert"]: rule for rule in rules}
    for case, (at, own, firing, quiet) in _cases(thresholds).items():
        rule = enabled.get(case.split(":")[0])
        if rule is None:
            continue
        expected = {**own, **alert_labels, "severity": rule["labels"]["severity"]}
        for series, alerts in ((firing, [{"exp_labels": expected}]), (quiet, [])):
            tests.append(
                {
                    "interval": "1m",
                    "input_series": series,
                    "alert_rule_test": [{"eval_time": at, "alertname": rule["alert"], "exp_alerts": alerts}],
                }
            )
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests})
    )
    result = promtool("test", "rules", tmp_path / "tests.yaml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(tests) >= 2 * len(rules) >= 14
