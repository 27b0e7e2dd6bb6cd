"""A real OpenID provider (zitadel/oidc's example provider, tests/system/integrations/oidc) issues JWT access tokens by
the client-credentials grant; schedlock trusts it by OIDC discovery and binds its clients by claims: one may take
billing's locks, one may only read, one has no binding at all."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from app.settings import Settings
from tests.support.apps import in_process
from tests.support.oidc_provider import Provider, build_provider, running

pytestmark = pytest.mark.system  # go build, and the provider as a process

CLIENTS = {"billing-app": "billing-secret", "reports-app": "reports-secret", "stranger": "stranger-secret"}


@pytest.fixture(scope="module")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provider]:
    folder = tmp_path_factory.mktemp("oidc")
    build_provider(folder)
    with running(folder / "oidc-provider", CLIENTS) as started:
        yield started


@pytest.fixture(scope="module")
async def api(settings: Settings, provider: Provider) -> AsyncIterator[httpx.AsyncClient]:
    config = {
        "issuers": [{"name": "idp", "issuer": provider.issuer, "audiences": ["schedlock"]}],
        "bindings": [
            {
                "issuer": "idp",
                "claims": {"sub": "billing-app"},
                "name": "idp:{client_id}",
                "prefixes": ["billing."],
                "access": "read-write",
            },
            {
                "issuer": "idp",
                "claims": {"sub": "reports-app"},
                "name": "idp:{sub}",
                "prefixes": ["*"],
                "access": "read",
            },
        ],
    }
    async with in_process(settings.model_copy(update={"tokens": json.dumps(config)})) as (_, client):
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_a_client_credentials_token_takes_extends_and_releases(
    api: httpx.AsyncClient, provider: Provider
) -> None:
    token = provider.access_token("billing-app", CLIENTS["billing-app"])
    assert token.count(".") == 2  # a JWT, not an opaque token
    name = f"billing.{uuid.uuid4().hex[:8]}"
    taken = await api.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"}, headers=bearer(token))
    assert taken.status_code == 200, taken.text
    lease = taken.json()
    assert " via idp:billing-app lease " in lease["locked_by"]
    extended = await api.post(
        f"/v1/locks/{name}/extend", json={"token": lease["token"], "lock_at_most_for": "2m"}, headers=bearer(token)
    )
    assert extended.json()["extended"] is True
    released = await api.post(f"/v1/locks/{name}/release", json={"token": lease["token"]}, headers=bearer(token))
    assert released.json()["released"] is True
    outside = await api.post("/v1/locks/reports.daily/acquire", json={"lock_at_most_for": "1m"}, headers=bearer(token))
    assert outside.status_code == 403


async def test_the_policy_follows_the_claims(api: httpx.AsyncClient, provider: Provider) -> None:
    reports = provider.access_token("reports-app", CLIENTS["reports-app"])
    listed = await api.get("/v1/locks", headers=bearer(reports))
    assert listed.status_code == 200
    write = await api.post("/v1/locks/billing.x/acquire", json={"lock_at_most_for": "1m"}, headers=bearer(reports))
    assert write.status_code == 403 and "read-only" in write.json()["error"]["message"]
    stranger = provider.access_token("stranger", CLIENTS["stranger"])
    refused = await api.get("/v1/locks", headers=bearer(stranger))
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"


def test_the_provider_is_configured_by_a_small_main_only() -> None:
    # No code of the provider is kept here: the Go module pins it, main.go only says which clients exist.
    folder = Path(__file__).parent / "oidc"
    assert sorted(p.name for p in folder.iterdir()) == ["go.mod", "go.sum", "main.go"]
