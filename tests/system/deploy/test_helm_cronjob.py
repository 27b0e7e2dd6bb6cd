"""The CronJob of helm/schedlock/README.md: its manifests pass kubernetes-validate --strict, and its container's
command line (`schedlock run ... -- python /jobs/report.py`, the script from its ConfigMap) runs against a live
server that trusts a kube-apiserver-shaped issuer with the chart's default binding, the pod's projected token in the
file the CronJob names: the first run does the job, a second one right after skips it quietly."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.apps import migrated_table
from tests.support.cli import SCHEDLOCK
from tests.support.cli_impls import build_go
from tests.support.helm import KUBE_VERSIONS
from tests.support.issuer import AUDIENCE, Issuer, issuer_config, serving
from tests.support.servers import LiveServer, start_server, stop_server

pytestmark = pytest.mark.system  # kubernetes-validate, and the CronJob command against a server process

README = Path(__file__).parents[3] / "helm" / "schedlock" / "README.md"
DOCKERFILE = README.parents[2] / "Dockerfile"
CHART_VALUES = README.with_name("values.yaml")


@pytest.fixture(scope="module")
def go_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    binary, _ = build_go(tmp_path_factory.mktemp("go") / "schedlock")
    return binary


def manifests() -> list[dict[str, Any]]:
    blocks = re.findall(r"^```yaml\n(.*?)^```$", README.read_text(), re.M | re.S)
    return [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]


def deployment_of_docs_auth_md() -> dict[str, Any]:
    """The app Deployment of docs/auth.md ("Kubernetes"): a projected token for schedlock."""
    text = (README.parents[2] / "docs" / "auth.md").read_text()
    (block,) = re.findall(r"^```yaml\n(.*?)^```$", text, re.M | re.S)
    found: dict[str, Any] = yaml.safe_load(block)
    return found


def one(kind: str, name: str = "nightly-report") -> dict[str, Any]:
    (found,) = [m for m in manifests() if m["kind"] == kind and m["metadata"]["name"] == name]
    return found


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
def server(database_url: str, issuer: Issuer) -> Iterator[LiveServer]:
    """A server on a table of its own, trusting ``issuer`` with the chart's default bindings."""
    bindings = yaml.safe_load(CHART_VALUES.read_text())["auth"]["workloadIdentity"]["bindings"]
    config = issuer_config(issuer, [{"issuer": "cluster", **b} for b in bindings])
    with migrated_table(database_url, "test_cronjob") as settings:
        started = start_server(settings, {"SCHEDLOCK_TOKENS": config})
        yield started
        stop_server(started)


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS, ids=["oldest", "newest"])
def test_the_cronjob_manifests_pass_kubernetes_validate_strict(kube_version: str | None, tmp_path: Path) -> None:
    assert sorted(m["kind"] for m in manifests()) == ["ConfigMap", "ConfigMap", "CronJob", "CronJob"]
    manifest = tmp_path / "cronjob.yaml"
    manifest.write_text(yaml.safe_dump_all([*manifests(), deployment_of_docs_auth_md()]))
    version = ["--kubernetes-version", kube_version] if kube_version else []
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", *version, str(manifest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(re.findall(r"^INFO .* passed for resource", result.stdout, re.M)) == 5, result.stdout
    (source,) = deployment_of_docs_auth_md()["spec"]["template"]["spec"]["volumes"][0]["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == AUDIENCE


def test_the_cronjob_container_runs_its_job_under_the_lock(server: LiveServer, issuer: Issuer, tmp_path: Path) -> None:
    cronjob = one("CronJob")
    pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"].rsplit("/", 1)[-1].startswith("schedlock:")
    script = tmp_path / "report.py"
    script.write_text(one("ConfigMap")["data"]["report.py"])
    mount = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "jobs")
    local = {"schedlock": SCHEDLOCK, "python": sys.executable, f"{mount}/report.py": str(script)}
    argv = [local.get(arg, arg) for arg in [*container["command"], *container["args"]]]
    assert argv[:2] == [SCHEDLOCK, "run"] and str(script) in argv
    env_values = {e["name"]: e.get("value") for e in container["env"]}
    assert set(env_values) == {"SCHEDLOCK_URL", "SCHEDLOCK_TOKEN_FILE"}
    # The projected token: audience schedlock, in the file the variable names; here a token shaped as the kubelet's.
    (projected,) = [v["projected"] for v in pod["volumes"] if "projected" in v]
    (source,) = projected["sources"]
    assert source["serviceAccountToken"]["audience"] == AUDIENCE
    token_dir = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "schedlock-token")
    assert env_values["SCHEDLOCK_TOKEN_FILE"] == f"{token_dir}/{source['serviceAccountToken']['path']}"
    token_file = tmp_path / "token"
    token_file.write_text(issuer.token(issuer.claims(namespace=cronjob["metadata"]["namespace"], account="default")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    env["SCHEDLOCK_URL"] = server.url  # the cluster's Service, here
    env["SCHEDLOCK_TOKEN_FILE"] = str(token_file)

    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    assert re.fullmatch(r"sending the nightly report, fencing token \d+\n", first.stdout), first.stdout
    second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert (second.returncode, second.stdout, second.stderr) == (0, "", "")  # held (--at-least 5m): skipped
    lock = argv[argv.index("--name") + 1]
    held = httpx.get(f"{server.url}/v1/locks/{lock}", headers={"Authorization": f"Bearer {token_file.read_text()}"})
    assert " via system:serviceaccount:reports:default lease " in held.json()["locked_by"]


def test_the_init_container_cronjob_runs_its_job_with_the_go_binary(
    server: LiveServer, issuer: Issuer, go_binary: Path, tmp_path: Path
) -> None:
    """The CronJob for images without Python: an init container copies the Go binary out of the schedlock image
    (where the Dockerfile puts it), and the job's container runs under it with its projected token from a file."""
    pod = one("CronJob", "nightly-export")["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (container,) = pod["containers"]
    assert init["image"].rsplit("/", 1)[-1].startswith("schedlock:")
    source, target = init["command"][1:]
    assert source == "/opt/schedlock-cli/schedlock"
    assert "COPY --from=binary /schedlock /opt/schedlock-cli/schedlock" in DOCKERFILE.read_text()
    shared = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
    assert {m["name"]: m["mountPath"] for m in container["volumeMounts"]}["schedlock"] == shared["schedlock"]
    assert container["command"] == [target] and not container["image"].rsplit("/", 1)[-1].startswith("schedlock")

    script = tmp_path / "export.sh"
    script.write_text(one("ConfigMap", "nightly-export")["data"]["export.sh"])
    cronjob = one("CronJob", "nightly-export")
    (projected,) = [v["projected"] for v in pod["volumes"] if "projected" in v]
    (token_source,) = projected["sources"]
    assert token_source["serviceAccountToken"]["audience"] == AUDIENCE
    token = tmp_path / "token"
    token.write_text(issuer.token(issuer.claims(namespace=cronjob["metadata"]["namespace"], account="default")))
    local = {target: str(go_binary), "/jobs/export.sh": str(script)}
    argv = [local.get(arg, arg) for arg in [*container["command"], *container["args"]]]
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")}
    variables = {e["name"]: e["value"] for e in container["env"]}
    assert set(variables) == {"SCHEDLOCK_URL", "SCHEDLOCK_TOKEN_FILE"}
    env.update(SCHEDLOCK_URL=server.url, SCHEDLOCK_TOKEN_FILE=str(token))

    first = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert first.returncode == 0, first.stderr
    assert re.fullmatch(r"exporting, fencing token \d+\n", first.stdout), first.stdout
