"""SCHEDLOCK_TOKEN_FILE in the adapters: the Java provider and the node-cron coordinator send the token a file holds
(a Kubernetes projected service-account token, here a JWT of a loopback issuer) and, in the same provider or
coordinator, the new one once the file is rotated (a new file swapped in, as the kubelet does)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.auth.tokens import hash_secret
from app.settings import Settings
from tests.support.issuer import Issuer, issuer_config, serving
from tests.support.polyglot import node_command
from tests.support.servers import LiveServer, start_server, stop_server
from tests.support.shedlock_provider import Driver, build

pytestmark = pytest.mark.system  # a Maven build, a JVM and node

ROOT = Path(__file__).parents[3]
READER = "reader-secret-" + "r" * 40
PER_NAMESPACE = {"issuer": "cluster", "prefixes": ["{kubernetes.io.namespace}."], "access": "read-write"}


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with serving() as running:
        yield running


@pytest.fixture(scope="module")
def server(settings: Settings, issuer: Issuer) -> Iterator[LiveServer]:
    reader = {"name": "reader", "sha256": hash_secret(READER), "prefixes": ["*"], "access": "read"}
    running = start_server(settings, {"SCHEDLOCK_TOKENS": issuer_config(issuer, [PER_NAMESPACE], tokens=[reader])})
    yield running
    stop_server(running)


def rotate(path: Path, token: str) -> None:
    fresh = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    fresh.write_text(token + "\n")
    os.replace(fresh, path)


def token_names(server: LiveServer, name: str) -> list[str]:
    """The principals of the runs of ``name``, oldest first."""
    runs = httpx.get(f"{server.url}/v1/locks/{name}/runs", headers={"Authorization": f"Bearer {READER}"}).json()
    return [run["token_name"] for run in reversed(runs["items"])]


def test_the_java_provider_reads_the_token_file_again_when_it_rotates(
    server: LiveServer, issuer: Issuer, tmp_path: Path
) -> None:
    file = tmp_path / "token"
    rotate(file, issuer.token(issuer.claims(account="first")))
    driver = Driver(build().java("shedlock7", "dev.schedlock.it.Driver"), {"SCHEDLOCK_TOKEN_FILE": str(file)})
    try:
        name = f"billing.{uuid.uuid4().hex[:8]}"
        assert driver.send("run-kept", server.url, name, 60_000, 0)["executed"] is True
        rotate(file, issuer.token(issuer.claims(account="second")))
        assert driver.send("run-kept", server.url, name, 60_000, 0)["executed"] is True
    finally:
        driver.close()
    assert token_names(server, name) == ["system:serviceaccount:billing:first", "system:serviceaccount:billing:second"]


NODE_SCRIPT = """
import { createInterface } from 'node:readline';
import { SchedlockCoordinator } from '%s';
const coordinator = new SchedlockCoordinator({ url: process.argv[1] });
const lines = createInterface({ input: process.stdin });
for await (const key of lines) {
  const run = await coordinator.shouldRun(key, 60000);
  await coordinator.onComplete(key);
  console.log(JSON.stringify({ run }));
}
"""


def test_the_node_cron_coordinator_reads_the_token_file_again_when_it_rotates(
    server: LiveServer, issuer: Issuer, tmp_path: Path
) -> None:
    file = tmp_path / "token"
    rotate(file, issuer.token(issuer.claims(account="first")))
    script = NODE_SCRIPT % (ROOT / "integrations/node-cron/index.mjs").as_uri()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCHEDLOCK_")} | {"SCHEDLOCK_TOKEN_FILE": str(file)}
    command = [*node_command(), "--input-type=module", "-e", script, server.url]
    node = subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert node.stdin is not None and node.stdout is not None
    task = f"billing.{uuid.uuid4().hex[:8]}"
    try:
        node.stdin.write(f"{task}:2026-12-05T03:00:00.000Z\n")
        node.stdin.flush()
        assert json.loads(node.stdout.readline()) == {"run": True}
        rotate(file, issuer.token(issuer.claims(account="second")))
        node.stdin.write(f"{task}:2026-12-05T04:00:00.000Z\n")
        node.stdin.flush()
        assert json.loads(node.stdout.readline()) == {"run": True}
    finally:
        node.stdin.close()
        node.wait(timeout=30)
        node.stdout.close()
    assert token_names(server, task) == ["system:serviceaccount:billing:first", "system:serviceaccount:billing:second"]
