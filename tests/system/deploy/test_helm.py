"""The Helm chart: linted and rendered by the Helm SDK (helm-python-sdk, no helm binary), every manifest validated
with kubernetes-validate --strict, and the objects that keep a fleet's locks safe asserted one by one.

Scenarios are the values files in helm/schedlock/ci/, one per situation a platform team meets. The monitoring
objects (Grafana dashboard, alerts) have their own module, tests/system/deploy/test_helm_monitoring.py.
"""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import jsonschema
import pytest
import yaml

from app.auth.config import parse_config
from tests.support.helm import (
    CHART,
    FULLNAME,
    KUBE_VERSIONS,
    NAMESPACE,
    RELEASE,
    SCENARIOS,
    kinds,
    one,
    render,
    values,
)

HOOK_PHASES = {"pre-install", "pre-upgrade"}
#: Kinds of prometheus-operator's CRDs, which kubernetes-validate has no schema for (checked here and in
#: tests/system/deploy/test_helm_monitoring.py instead).
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}


def is_hook(obj: dict[str, Any]) -> bool:
    return "helm.sh/hook" in obj["metadata"].get("annotations", {})


@pytest.fixture(scope="module", params=sorted(SCENARIOS))
def scenario(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


def test_every_documented_scenario_exists() -> None:
    assert {"default", "existing-secret", "all-enabled", "no-auth", "cloudnativepg", "workload-identity"} <= set(
        SCENARIOS
    )


def test_chart_lints_clean(scenario: str) -> None:
    report = helm.lint(CHART, values(scenario), strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # 2 warning, 3 error; 1 is info
    assert not problems and not report["errors"], problems or report["errors"]


def test_lint_catches_values_the_schema_rejects() -> None:
    bad = {**values("default"), "replicaCount": "two", "replicas": 3, "config": {"logLevel": "LOUD"}}
    report = helm.lint(CHART, bad, strict=True)
    errors = " ".join(m["error"] for m in report["messages"] if m["severity"] == 3)
    assert "replicaCount" in errors and "'replicas' not allowed" in errors and "logLevel" in errors


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS, ids=["oldest", "newest"])
def test_rendered_manifests_pass_kubernetes_validate_strict(
    scenario: str, kube_version: str | None, tmp_path: Path
) -> None:
    objects = render(values(scenario))
    manifest = tmp_path / "manifest.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    version = ["--kubernetes-version", kube_version] if kube_version else []
    result = subprocess.run(
        [sys.executable, "-m", "kubernetes_validate", "--strict", *version, str(manifest)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    passed = re.findall(r"^INFO .* passed for resource (\S+)", result.stdout, re.MULTILINE)
    unknown = re.findall(r"^WARN .*kind (\S+) with api version", result.stdout, re.MULTILINE)
    # Every built-in object was checked against the schema; only the CRD kind has none there (see below).
    assert len(passed) + len(unknown) == len(objects), result.stdout
    assert set(unknown) <= CRD_KINDS, unknown


# kubernetes-validate has no schema for prometheus-operator's CRD: check the fields the chart writes, strictly.
_DURATION = {"type": "string", "pattern": r"^(0|(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$"}
_SERVICE_MONITOR = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": {"type": "object", "required": ["name", "namespace"]},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "jobLabel": {"type": "string"},
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchNames": {"type": "array", "items": {"type": "string"}}},
                },
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"matchLabels": {"type": "object", "additionalProperties": {"type": "string"}}},
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "relabelings": {"type": "array", "items": {"type": "object"}},
                            "metricRelabelings": {"type": "array", "items": {"type": "object"}},
                        },
                    },
                },
            },
        },
    },
}


def test_service_monitor_scrapes_the_server_service() -> None:
    objects = render(values("all-enabled"))
    monitor = one(objects, "ServiceMonitor")
    jsonschema.validate(monitor, _SERVICE_MONITOR)
    service = one(objects, "Service")
    endpoint = monitor["spec"]["endpoints"][0]
    assert (endpoint["port"], endpoint["path"], endpoint["interval"]) == ("http", "/metrics", "15s")
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert monitor["metadata"]["namespace"] == "monitoring"
    assert monitor["spec"]["namespaceSelector"]["matchNames"] == [NAMESPACE]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_defaults_render_what_a_fleet_needs() -> None:
    objects = render(values("default"))
    assert kinds(objects) == {
        "Deployment",
        "Service",
        "ServiceAccount",
        "ConfigMap",
        "Secret",
        "PodDisruptionBudget",
        "Job",
    }
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    pod = deployment["spec"]["template"]["spec"]
    spread = {c["topologyKey"]: c for c in pod["topologySpreadConstraints"]}
    assert spread["kubernetes.io/hostname"]["whenUnsatisfiable"] == "DoNotSchedule"
    assert (
        spread["kubernetes.io/hostname"]["labelSelector"]["matchLabels"]
        == deployment["spec"]["selector"]["matchLabels"]
    )
    pdb = one(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]
    assert not ({"HorizontalPodAutoscaler", "Ingress", "NetworkPolicy"} | CRD_KINDS) & kinds(objects)


def test_selectors_use_name_and_instance_only(scenario: str) -> None:
    objects = render(values(scenario))
    expected = {"app.kubernetes.io/name": "schedlock", "app.kubernetes.io/instance": RELEASE}
    deployment = one(objects, "Deployment")
    assert deployment["spec"]["selector"]["matchLabels"] == expected
    assert one(objects, "Service")["spec"]["selector"] == expected
    for obj in objects:
        if obj["kind"] in {"PodDisruptionBudget", "NetworkPolicy"}:
            selector = obj["spec"].get("selector") or obj["spec"]["podSelector"]
            assert selector["matchLabels"] == expected, obj["kind"]
        assert obj["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE, obj["kind"]


def test_probes_on_healthz_and_readyz() -> None:
    container = one(render(values("default")), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]


def test_pods_are_locked_down(scenario: str) -> None:
    objects = render(values(scenario))
    pods = [one(objects, "Deployment")["spec"]["template"]["spec"]]
    pods += [j["spec"]["template"]["spec"] for j in objects if j["kind"] == "Job"]
    for pod in pods:
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert pod["securityContext"]["runAsUser"] != 0
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert pod["automountServiceAccountToken"] is False
        # A Service named "schedlock" would otherwise inject SCHEDLOCK_PORT=tcp://... into the settings.
        assert pod["enableServiceLinks"] is False
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False
            assert context["readOnlyRootFilesystem"] is True
            assert context["capabilities"]["drop"] == ["ALL"]
            assert "add" not in context["capabilities"]
            # The only writable place is an emptyDir on /tmp.
            tmp = next(m for m in container["volumeMounts"] if m["mountPath"] == "/tmp")
            volume = next(v for v in pod["volumes"] if v["name"] == tmp["name"])
            assert "emptyDir" in volume


def test_migrations_run_as_a_hook_job_with_the_server_image(scenario: str) -> None:
    objects = render(values(scenario))
    deployment = one(objects, "Deployment")
    server = deployment["spec"]["template"]["spec"]["containers"][0]
    assert (server["command"], server["args"]) == (["schedlock-server"], ["serve"])
    jobs = [o for o in objects if o["kind"] == "Job"]
    if not values(scenario).get("migrations", {}).get("enabled", True):
        assert jobs == []
        return
    (job,) = jobs
    annotations = job["metadata"]["annotations"]
    assert set(annotations["helm.sh/hook"].split(",")) == HOOK_PHASES
    assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    assert "before-hook-creation" in annotations["helm.sh/hook-delete-policy"]
    pod = job["spec"]["template"]["spec"]
    (migrate,) = pod["containers"]
    assert migrate["image"] == server["image"]
    assert (migrate["command"], migrate["args"]) == (["schedlock-server"], ["migrate"])
    assert pod["restartPolicy"] == "Never"
    # Same table as the server, and never a listener: migrate binds nothing.
    env = {e["name"]: e for e in migrate["env"]}
    config = one(objects, "ConfigMap", FULLNAME)["data"]
    assert env["SCHEDLOCK_TABLE"]["value"] == config["SCHEDLOCK_TABLE"]
    assert env["SCHEDLOCK_HOST"]["value"] == "127.0.0.1"
    # No Service, PDB or NetworkPolicy selects the migration pod: it never receives traffic.
    labels = job["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert not selector.items() <= labels.items()
    # Every hook the Job depends on runs before it (a pre-install hook runs before the release's objects exist).
    ref = env["SCHEDLOCK_DATABASE_URL"]["valueFrom"]["secretKeyRef"]
    if values(scenario).get("existingSecret"):
        assert ref["name"] == values(scenario)["existingSecret"]
    else:
        secret = one(objects, "Secret", ref["name"])
        assert is_hook(secret) and set(secret["metadata"]["annotations"]["helm.sh/hook"].split(",")) == HOOK_PHASES
        assert int(secret["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(annotations["helm.sh/hook-weight"])
        assert ref["key"] in secret["data"]
    for name in ("configMapRef", "serviceAccountName"):
        assert name not in str(pod), f"the pre-install Job must not need the release's {name}"


def test_database_url_and_tokens_come_from_the_secret() -> None:
    vals = values("default")
    objects = render(vals)
    secret = one(objects, "Secret", FULLNAME)
    assert not is_hook(secret)
    decoded = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert decoded == {"database-url": vals["database"]["url"], "tokens.json": vals["auth"]["tokens"]}
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["SCHEDLOCK_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": FULLNAME, "key": "database-url"}
    config = one(objects, "ConfigMap", FULLNAME)["data"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "tokens")
    assert mount["readOnly"] is True and "subPath" not in mount  # so a rotated Secret reaches the pod
    assert config["SCHEDLOCK_TOKENS_FILE"] == f"{mount['mountPath']}/tokens.json"
    volume = next(v for v in pod["volumes"] if v["name"] == "tokens")
    assert volume["secret"]["secretName"] == FULLNAME
    assert "SCHEDLOCK_ALLOW_UNAUTHENTICATED" not in config
    # Neither credential appears anywhere but in the Secrets.
    for obj in objects:
        if obj["kind"] != "Secret":
            assert "change-me" not in yaml.safe_dump(obj), obj["kind"]


def test_existing_secret_is_used_and_none_is_created() -> None:
    vals = values("existing-secret")
    objects = render(vals)
    assert "Secret" not in kinds(objects)
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["SCHEDLOCK_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {"name": "schedlock-credentials", "key": "url"}
    volume = next(v for v in pod["volumes"] if v["name"] == "tokens")
    assert volume["secret"]["secretName"] == "schedlock-credentials"
    assert volume["secret"]["items"] == [{"key": "tokens.toml", "path": "tokens.toml"}]
    config = one(objects, "ConfigMap", FULLNAME)["data"]
    assert config["SCHEDLOCK_TOKENS_FILE"].endswith("/tokens.toml")
    assert config["SCHEDLOCK_TABLE"] == "jobs.shedlock"
    annotations = one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert "checksum/config" in annotations and "checksum/secret" not in annotations


def test_cloudnativepg_app_secret_gives_the_url_and_the_chart_keeps_the_tokens() -> None:
    """existingSecret is the operator's <cluster>-app Secret (the URL under "uri"); it has no tokens file."""
    vals = values("cloudnativepg")
    objects = render(vals)
    url_ref = {"name": "jobs-db-app", "key": "uri"}
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["SCHEDLOCK_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == url_ref
    (job,) = [o for o in objects if o["kind"] == "Job"]
    job_env = {e["name"]: e for e in job["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert job_env["SCHEDLOCK_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == url_ref, "the Job uses the pods' URL"
    secret = one(objects, "Secret", FULLNAME)  # the chart's own, holding the tokens file and nothing else
    assert {k: base64.b64decode(v).decode() for k, v in secret["data"].items()} == {
        "tokens.toml": vals["auth"]["tokens"]
    }
    volume = next(v for v in pod["volumes"] if v["name"] == "tokens")
    assert volume["secret"]["secretName"] == FULLNAME
    assert volume["secret"]["items"] == [{"key": "tokens.toml", "path": "tokens.toml"}]
    assert "checksum/secret" in one(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]


def test_tokens_from_a_secret_of_their_own() -> None:
    vals = {**values("cloudnativepg"), "auth": {"enabled": True, "existingSecret": "schedlock-tokens"}}
    objects = render(vals)
    assert "Secret" not in kinds(objects), "both Secrets are the user's: the chart makes none"
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert next(v for v in pod["volumes"] if v["name"] == "tokens")["secret"]["secretName"] == "schedlock-tokens"
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["SCHEDLOCK_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "jobs-db-app"
    without_auth = render({**vals, "auth": {"enabled": False}})
    assert "Secret" not in kinds(without_auth)


def test_config_changes_roll_the_pods() -> None:
    def checksums(vals: dict[str, Any]) -> dict[str, str]:
        annotations = one(render(vals), "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return {k: v for k, v in annotations.items() if k.startswith("checksum/")}

    base = values("default")
    before = checksums(base)
    assert checksums({**base, "config": {"logLevel": "DEBUG"}})["checksum/config"] != before["checksum/config"]
    rotated = {**base, "database": {"url": "postgresql://schedlock:rotated@postgres.db.svc:5432/jobs"}}
    assert checksums(rotated)["checksum/secret"] != before["checksum/secret"]
    assert checksums(base) == before


def test_image_tag_defaults_to_app_version() -> None:
    with helm.Chart.load(CHART) as chart:
        app_version = chart.metadata["appVersion"]
    image = one(render(values("default")), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == f"schedlock:{app_version}"
    tagged = {**values("default"), "image": {"repository": "r.example/schedlock", "tag": "1.2.3"}}
    assert (
        one(render(tagged), "Job")["spec"]["template"]["spec"]["containers"][0]["image"] == "r.example/schedlock:1.2.3"
    )
    digest = one(render(values("all-enabled")), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert re.fullmatch(r"registry\.example\.internal/platform/schedlock@sha256:[0-9a-f]{64}", digest)


def test_everything_enabled() -> None:
    objects = render(values("all-enabled"))
    assert {"HorizontalPodAutoscaler", "ServiceMonitor", "NetworkPolicy", "Ingress"} <= kinds(objects)
    deployment = one(objects, "Deployment")
    assert "replicas" not in deployment["spec"]  # the HPA owns the count
    hpa = one(objects, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": FULLNAME}
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 9)
    assert {m["resource"]["name"] for m in hpa["spec"]["metrics"]} == {"cpu", "memory"}
    assert one(objects, "PodDisruptionBudget")["spec"] == {
        "maxUnavailable": 1,
        "selector": deployment["spec"]["selector"],
    }
    policy = one(objects, "NetworkPolicy")["spec"]
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    assert policy["ingress"][0]["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert len(policy["ingress"][0]["from"]) == 2
    assert {p["port"] for rule in policy["egress"] for p in rule["ports"]} == {53, 5432}
    ingress = one(objects, "Ingress")["spec"]
    backend = ingress["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert backend == {"name": FULLNAME, "port": {"name": "http"}}
    assert ingress["tls"][0]["secretName"] == "schedlock-tls" and ingress["ingressClassName"] == "nginx"
    config = one(objects, "ConfigMap", FULLNAME)["data"]
    assert (config["SCHEDLOCK_LOG_LEVEL"], config["SCHEDLOCK_LOG_FORMAT"]) == ("DEBUG", "human")
    assert config["SCHEDLOCK_HISTORY_RETENTION"] == "P90D"
    pod = deployment["spec"]["template"]["spec"]
    assert pod["imagePullSecrets"] == [{"name": "registry-credentials"}]
    assert pod["priorityClassName"] == "platform-critical"
    assert {"name": "TZ", "value": "UTC"} in pod["containers"][0]["env"]


def test_without_auth_the_server_is_told_to_run_open_and_says_so() -> None:
    vals = values("no-auth")
    objects = render(vals)
    config = one(objects, "ConfigMap", FULLNAME)["data"]
    assert config["SCHEDLOCK_ALLOW_UNAUTHENTICATED"] == "true" and "SCHEDLOCK_TOKENS_FILE" not in config
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert all(v["name"] != "tokens" for v in pod["volumes"])
    assert "PodDisruptionBudget" not in kinds(objects)  # one replica: a PDB would block every drain
    assert "Job" not in kinds(objects)
    with helm.Chart.load(CHART) as chart:
        notes = chart.render(values=vals, name=RELEASE, namespace=NAMESPACE)["schedlock/templates/NOTES.txt"]
    assert "WARNING: auth.enabled=false" in notes


def test_workload_identity_trusts_the_clusters_issuer_with_the_servers_own_token() -> None:
    objects = render(values("workload-identity"))
    config = one(objects, "ConfigMap", FULLNAME)["data"]
    parsed = parse_config(config["SCHEDLOCK_TOKENS"], "SCHEDLOCK_TOKENS")  # what the server will read
    (issuer,) = parsed.issuers
    assert issuer.issuer == "https://kubernetes.default.svc.cluster.local" and issuer.audiences == ("schedlock",)
    assert issuer.jwks_url == "https://kubernetes.default.svc/openid/v1/jwks"
    assert [(b.issuer, b.prefixes, b.admin, b.rate) for b in parsed.bindings] == [
        ("cluster", ["*"], True, None),
        ("cluster", ["{kubernetes.io.namespace}."], False, 20),
    ]
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    mounts = {m["name"]: m["mountPath"] for m in server["volumeMounts"]}
    assert str(issuer.ca_file) == f"{mounts['kube-api']}/ca.crt"
    assert str(issuer.fetch_token_file) == f"{mounts['kube-api']}/token"
    (kube_api,) = [v for v in pod["volumes"] if v["name"] == "kube-api"]
    sources = kube_api["projected"]["sources"]
    assert sources[0]["serviceAccountToken"]["path"] == "token" and "audience" not in sources[0]["serviceAccountToken"]
    assert sources[1]["configMap"]["name"] == "kube-root-ca.crt"
    assert pod["automountServiceAccountToken"] is False  # only the projected token, not the default mount
    # with the default binding, a pod of namespace billing uses the names starting with "billing."
    defaults = render({**values("workload-identity"), "auth": {"workloadIdentity": {"enabled": True}}})
    only = parse_config(one(defaults, "ConfigMap", FULLNAME)["data"]["SCHEDLOCK_TOKENS"], "defaults").bindings
    assert [(b.prefixes, b.access) for b in only] == [(["{kubernetes.io.namespace}."], "read-write")]
    # an egress policy lets the pods reach the API server for the keys, only with workload identity on
    fenced = {"networkPolicy": {"enabled": True, "egress": {"enabled": True}}}
    for vals, reaches in ((values("workload-identity"), True), (values("default"), False)):
        policy = one(render({**vals, **fenced}), "NetworkPolicy")
        ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
        assert (6443 in ports and 443 in ports) is reaches


def test_the_workload_identity_values_of_docs_deploy_md_render() -> None:
    text = (Path(__file__).parents[3] / "docs" / "deploy.md").read_text()
    (block,) = re.findall(r"^```yaml\n(# values-identity.yaml.*?)^```$", text, re.M | re.S)
    objects = render({**values("default"), **yaml.safe_load(block)})
    parsed = parse_config(one(objects, "ConfigMap", FULLNAME)["data"]["SCHEDLOCK_TOKENS"], "docs/deploy.md")
    assert [b.admin for b in parsed.bindings] == [True, False] and parsed.bindings[1].quota is not None


def test_notes_tell_how_to_reach_the_api_and_docs() -> None:
    with helm.Chart.load(CHART) as chart:
        notes = chart.render(values=values("all-enabled"), name=RELEASE, namespace=NAMESPACE)[
            "schedlock/templates/NOTES.txt"
        ]
    assert f"http://{FULLNAME}.{NAMESPACE}.svc.cluster.local:8000" in notes
    assert "/docs" in notes and "port-forward" in notes
    assert "https://schedlock.example.internal/" in notes
    assert "WARNING" not in notes


@pytest.mark.parametrize(
    ("vals", "message"),
    [
        ({}, "set database.url"),
        ({"database": {"url": "postgresql://u:p@h/db"}}, "set auth.tokens"),
    ],
)
def test_missing_credentials_fail_with_a_clear_message(vals: dict[str, Any], message: str) -> None:
    with helm.Chart.load(CHART) as chart, pytest.raises(helm.HelmRenderError, match=message):
        chart.render(values=vals, name=RELEASE, namespace=NAMESPACE)


def test_readme_lists_every_value() -> None:
    readme = (CHART / "README.md").read_text()
    documented = set(re.findall(r"^\| `([^`]+)` \|", readme, re.MULTILINE))

    def leaves(node: Any, prefix: str = "") -> set[str]:
        if isinstance(node, dict) and node:
            return set().union(*(leaves(v, f"{prefix}{k}.") for k, v in node.items()))
        return {prefix.rstrip(".")}

    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    # Lists (probes are maps, tolerations etc. lists) are documented as a whole, not item by item.
    missing = {key for key in leaves(defaults) if not any(key == d or key.startswith(f"{d}.") for d in documented)}
    assert not missing, f"values missing from helm/schedlock/README.md: {sorted(missing)}"
    unknown = {d for d in documented if not any(k == d or k.startswith(f"{d}.") for k in leaves(defaults))}
    assert not unknown, f"README documents values that do not exist: {sorted(unknown)}"
