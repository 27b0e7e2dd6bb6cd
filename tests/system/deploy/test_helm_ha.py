"""The chart's high-availability scenarios (helm/schedlock/ci/): CloudNativePG's app Secret and a Patroni
cluster's multi-host URL, rendered with the Helm SDK, and what reaches the pods and the migration Job checked:
the database URL the page documents, from where the page says (docs/high-availability.md).
tests/system/deploy/test_helm.py lints and validates every scenario, these two included."""

from __future__ import annotations

import base64
from typing import Any
from urllib.parse import parse_qs, urlsplit

from pydantic import SecretStr

from app.settings import Settings
from tests.support.helm import FULLNAME, SCENARIOS, one, render, values


def database_url_refs(objects: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The SCHEDLOCK_DATABASE_URL secret references of the server pods and of the migration Job."""
    pods = [one(objects, "Deployment")["spec"]["template"]["spec"], one(objects, "Job")["spec"]["template"]["spec"]]
    refs = []
    for pod in pods:
        env = {e["name"]: e for e in pod["containers"][0]["env"]}
        refs.append(env["SCHEDLOCK_DATABASE_URL"]["valueFrom"]["secretKeyRef"])
    return refs


def test_both_scenarios_exist() -> None:
    assert {"cloudnativepg", "patroni"} <= set(SCENARIOS)


def test_cloudnativepg_reads_the_operators_app_secret_and_keeps_only_the_tokens() -> None:
    objects = render(values("cloudnativepg"))
    # Pods and the migration Job alike: the operator's <cluster>-app Secret, key uri (the -rw Service's URL).
    assert database_url_refs(objects) == [{"name": "jobs-db-app", "key": "uri"}] * 2
    own = one(objects, "Secret", FULLNAME)
    assert set(own["data"]) == {"tokens.toml"}, "the chart's Secret holds the tokens, never a database URL"


def test_patroni_serves_from_a_multi_host_url_that_asks_for_the_primary() -> None:
    scenario = values("patroni")
    objects = render(scenario)
    refs = database_url_refs(objects)
    assert [ref["key"] for ref in refs] == ["database-url"] * 2
    # The pods' Secret and the migration Job's (a pre-install hook of its own) hold the same URL.
    urls = {base64.b64decode(one(objects, "Secret", ref["name"])["data"][ref["key"]]).decode() for ref in refs}
    assert urls == {scenario["database"]["url"]}
    (url,) = urls
    parts = urlsplit(url)
    hosts = parts.netloc.rsplit("@", 1)[1].split(",")
    assert len(hosts) == 3 and all(host.endswith(":5432") for host in hosts)
    assert parse_qs(parts.query) == {"target_session_attrs": ["read-write"]}
    assert Settings(database_url=SecretStr(url)).asyncpg_dsn() == url  # as the server hands it to asyncpg
    config = one(objects, "ConfigMap")["data"]
    assert config["SCHEDLOCK_DB_CONNECT_TIMEOUT"] == "2" and config["SCHEDLOCK_DB_STATEMENT_TIMEOUT"] == "2"
