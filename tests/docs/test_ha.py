"""docs/high-availability.md's examples, as written: the table setting runs on a migrated table and keeps the API
working, the CloudNativePG Cluster asks for a synchronous standby, and the helm command renders what the page
says (the URL from the operator's app Secret, the tokens from the chart)."""

from __future__ import annotations

import itertools
import re
import shlex
from pathlib import Path
from typing import Any

import httpx
import yaml

from app.settings import Settings
from tests.support.api import acquire
from tests.support.docs import page_block, page_blocks
from tests.support.helm import FULLNAME, one, render

PAGE = Path(__file__).parents[2] / "docs" / "high-availability.md"


def blocks(language: str) -> list[str]:
    return page_blocks(PAGE.name, language)


async def test_the_table_setting_runs_and_the_api_still_works(
    db: Any, settings: Settings, client: httpx.AsyncClient, name: str
) -> None:
    sql = page_block(PAGE.name, "sql", "fillfactor")
    await db.execute(sql.replace("shedlock", settings.table))
    options = await db.fetchval("SELECT reloptions FROM pg_class WHERE oid = $1::regclass", settings.table)
    assert "fillfactor=50" in options
    assert (await acquire(client, name, "1m")).status_code == 200


def test_the_cloudnativepg_cluster_has_a_synchronous_standby() -> None:
    (manifest,) = blocks("yaml")
    cluster = yaml.safe_load(manifest)
    assert (cluster["apiVersion"], cluster["kind"]) == ("postgresql.cnpg.io/v1", "Cluster")
    spec = cluster["spec"]
    assert spec["instances"] >= 2 and spec["minSyncReplicas"] >= 1 and spec["maxSyncReplicas"] >= 1
    assert spec["postgresql"]["parameters"]["synchronous_commit"] == "on"
    # The app Secret the page hands to the chart is the operator's <cluster>-app.
    assert f"existingSecret={cluster['metadata']['name']}-app" in blocks("sh")[0]


def test_the_helm_command_renders_what_the_page_says() -> None:
    (command,) = blocks("sh")
    words = shlex.split(command.replace("\\\n", " "))
    values: dict[str, Any] = {}
    for flag, setting in itertools.pairwise(words):
        if flag in ("--set", "--set-file"):
            key, value = setting.split("=", 1)
            if flag == "--set-file":
                value = '{"tokens": []}'  # the file's content
            node = values
            *parents, leaf = key.split(".")
            for parent in parents:
                node = node.setdefault(parent, {})
            node[leaf] = value
    objects = render(values)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["SCHEDLOCK_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "jobs-db-app", "key": "uri"}
    assert next(v for v in pod["volumes"] if v["name"] == "tokens")["secret"]["secretName"] == FULLNAME


#: Other pages with ```yaml blocks, and the test that checks them (workload identity's values and Deployment).
YAML_CHECKED_ELSEWHERE = {
    "deploy.md": "tests/system/deploy/test_helm.py",
    "auth.md": "tests/system/deploy/test_helm_cronjob.py",
}


def test_sql_and_yaml_blocks_appear_only_on_this_page() -> None:
    """tests/docs/test_examples.py counts ```sql and ```yaml as checked: here, for this page only (and the yaml of
    the pages YAML_CHECKED_ELSEWHERE names, by their own tests)."""
    root = PAGE.parent.parent
    for page in [root / "README.md", *(root / "docs").glob("*.md"), root / "client" / "README.md"]:
        if page == PAGE:
            continue
        checked = YAML_CHECKED_ELSEWHERE.get(page.name) if page.parent.name == "docs" else None
        languages = "sql" if checked else "sql|yaml"
        assert not re.search(rf"^```({languages})$", page.read_text(), re.M), page
        if checked:
            assert page.name in (root / checked).read_text(), f"{checked} no longer checks {page.name}"
