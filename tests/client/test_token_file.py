"""SCHEDLOCK_TOKEN_FILE: the client and ``schedlock run`` send the token a file holds, and the current one after the
platform rotates it (a Kubernetes projected token: a new file swapped in), with a JWT of a trusted issuer."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from schedlock import AsyncLockClient, LockClient, LockNotFound, RequestRejected, Unauthorized
from tests.support.apps import in_process
from tests.support.cli import SCHEDLOCK, cli_env
from tests.support.issuer import Issuer, issuer_config, serving
from tests.support.servers import start_server, stop_server

PER_NAMESPACE = {"issuer": "cluster", "prefixes": ["{kubernetes.io.namespace}."], "access": "read-write"}


@pytest.fixture(scope="module")
def issuer() -> Iterator[Issuer]:
    with serving() as running:
        yield running


def rotate(path: Path, token: str) -> None:
    """As the kubelet does: the new token written beside, then swapped in (a new inode)."""
    fresh = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    fresh.write_text(token + "\n")
    os.replace(fresh, path)


async def test_the_client_sends_the_current_token_of_the_file(
    settings: Settings, issuer: Issuer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "token"
    rotate(file, issuer.token(issuer.claims(account="first")))
    monkeypatch.delenv("SCHEDLOCK_TOKEN", raising=False)
    monkeypatch.setenv("SCHEDLOCK_TOKEN_FILE", str(file))
    config = issuer_config(issuer, [PER_NAMESPACE])
    async with in_process(settings.model_copy(update={"tokens": config})) as (app, _):
        transport = httpx.ASGITransport(app=app)
        async with AsyncLockClient("http://t", transport=transport) as client:
            name = f"billing.{uuid.uuid4().hex[:8]}"
            first = await client.acquire(name, "1m")
            assert first is not None and "via system:serviceaccount:billing:first " in first.locked_by
            await first.release()
            rotate(file, issuer.token(issuer.claims(account="second")))
            second = await client.acquire(name, "1m")
            assert second is not None and "via system:serviceaccount:billing:second " in second.locked_by
            await second.release()
            rotate(file, "not-a-token-" + "x" * 40)
            with pytest.raises(Unauthorized):
                await client.acquire(name, "1m")
            file.unlink()  # gone after a good read: the last token is kept, not none sent
            with pytest.raises(Unauthorized):
                await client.acquire(name, "1m")


def test_the_token_argument_and_variable_come_before_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCHEDLOCK_TOKEN_FILE", str(tmp_path / "missing"))
    monkeypatch.setenv("SCHEDLOCK_TOKEN", "from-the-variable")
    seen: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers.get("authorization"))
        return httpx.Response(404, json={"error": {"code": "lock_not_found", "message": "no"}})

    with LockClient("http://t", transport=httpx.MockTransport(answer)) as client, pytest.raises(LockNotFound):
        client.get("x")
    with (
        LockClient("http://t", token="from-the-argument", transport=httpx.MockTransport(answer)) as client,
        pytest.raises(LockNotFound),
    ):
        client.get("x")
    assert seen == ["Bearer from-the-variable", "Bearer from-the-argument"]
    monkeypatch.delenv("SCHEDLOCK_TOKEN")
    with LockClient("http://t", transport=httpx.MockTransport(answer)) as client:
        with pytest.raises(RequestRejected) as refused:  # a file never read: a configuration error, not an outage
            client.get("x")
        assert refused.value.code == "token_file_unreadable"
    assert len(seen) == 2  # nothing was sent without the token


def test_schedlock_run_reads_the_token_file(settings: Settings, issuer: Issuer, tmp_path: Path) -> None:
    server = start_server(settings, {"SCHEDLOCK_TOKENS": issuer_config(issuer, [PER_NAMESPACE])})
    try:
        file = tmp_path / "token"
        rotate(file, issuer.token(issuer.claims(account="nightly")))
        env = cli_env(server.url, SCHEDLOCK_TOKEN_FILE=str(file))
        name = f"billing.{uuid.uuid4().hex[:8]}"
        command = [SCHEDLOCK, "run", "--name", name, "--at-most", "1m", "--", "sh", "-c", "echo ran"]
        ran = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert ran.returncode == 0 and "ran" in ran.stdout, ran.stderr
        shown = subprocess.run(
            [SCHEDLOCK, "runs", name, "--json"], env=env, capture_output=True, text=True, timeout=60, check=False
        )
        assert "system:serviceaccount:billing:nightly" in shown.stdout, shown.stdout
        rotate(file, issuer.token(issuer.claims(namespace="reports")))  # another namespace: not its names
        refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60, check=False)
        assert refused.returncode != 0 and "forbidden" in refused.stderr
    finally:
        stop_server(server)
