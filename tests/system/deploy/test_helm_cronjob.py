"""The CronJob of helm/schedlock/README.md: its manifests pass kubernetes-validate --strict, and its container's
command line (`schedlock run ... -- python /jobs/report.py`, the script from its ConfigMap) runs against a live
server: the first run does the job, a second one right after skips it quietly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.apps import migrated_table
from tests.support.cli import SCHEDLOCK
from tests.support.helm import KUBE_VERSIONS
from tests.support.servers import LiveServer, start_server, stop_server

README = Path(__file__).parents[3] / "helm" / "schedlock" / "README.md"


def manifests() -> list[dict[str, Any]]:
    blocks = re.findall(r"^```yaml\n(.*?)^```$", README.read_text(), re.M | re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def one(kind: str) -> dict[str, Any]:
    (found,) = [m for m in manifests() if m["kind"] == kind]
    return found


@pytest.fixture(scope="module")
def server(database_url: str) -> Iterator[LiveServer]:
    """A server on a table of its own: "nightly-report" is a name other tests' examples take too."""
    with migrated_table(database_url, "test_cronjob") as settings:
        started = start_server(settings)
        yield started
        stop_server(started)


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS, ids=["oldest", "newest"])
def test_the_cronjob_manifests_pass_kubernetes_validate_strict(kube_version: str | None, tmp_path: Path) -> None:
    assert {m["kind"] for m in manifests()} == {"ConfigMap", "CronJob"}
    manifest = tmp_path / "cronjob.yaml"
    manifest.write_text(yaml.safe_dump_all(manifests()))
    version = ["--kubernetes-version", kube_version] if kube_version else []
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", *version, str(manifest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(re.findall(r"^INFO .* passed for resource", result.stdout, re.M)) == 2, result.stdout


def test_the_cronjob_container_runs_its_job_under_the_lock(server: LiveServer, tmp_path: Path) -> None:
    pod = one("CronJob")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"].rsplit("/", 1)[-1].startswith("schedlock:")
    script = tmp_path / "report.py"
    script.write_text(one("ConfigMap")["data"]["report.py"])
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "jobs")
    local = {"schedlock": SCHEDLOCK, "python": sys.executable, f"{mount}/report.py": str(script)}
    argv = [local.get(arg, arg) for arg in [*container["command"], *container["args"]]]
    assert argv[:2] == [SCHEDLOCK, "run"] and str(script) in argv
    env_names = {e["name"] for e in container["env"]}
    assert env_names == {"SCHEDLOCK_URL", "SCHEDLOCK_TOKEN"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    env["SCHEDLOCK_URL"] = server.url  # the cluster's Service, here; this server requires no token

    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    assert re.fullmatch(r"sending the nightly report, fencing token \d+\n", first.stdout), first.stdout
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (second.returncode, second.stdout, second.stderr) == (0, "", "")  # held (--at-least 5m): skipped
