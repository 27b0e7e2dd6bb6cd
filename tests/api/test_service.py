"""Probes, the OpenAPI contract, the offline docs page, and storage failures reported as 503."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import httpx
from pydantic import SecretStr

from app.errors import ERROR_CODES
from app.main import create_app
from app.settings import Settings
from tests.support.apps import in_process

OPENAPI = Path(__file__).parents[2] / "openapi" / "openapi.json"


async def test_healthz_and_readyz(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {"status": "ready"}


async def test_readyz_is_503_on_an_unmigrated_table(settings: Settings) -> None:
    other = settings.model_copy(update={"table": f"{settings.table_schema}.never_migrated"})
    async with in_process(other) as (_, client):
        r = await client.get("/readyz")
        assert r.status_code == 503 and r.json()["error"]["code"] == "storage_unavailable"
        assert "migrate" in r.json()["error"]["message"]
        r = await client.post("/v1/locks/x/acquire", json={"lock_at_most_for": "1m"})
        assert r.status_code == 503 and r.json()["error"]["code"] == "storage_unavailable"


async def test_unreachable_database_gives_503_with_retry_after_and_no_secret() -> None:
    settings = Settings(
        database_url=SecretStr("postgresql://u:hunter2@127.0.0.1:1/nowhere"),
        db_connect_timeout=1.0,
    )
    async with in_process(settings) as (_, client):
        assert (await client.get("/healthz")).status_code == 200
        for r in (
            await client.get("/readyz"),
            await client.post("/v1/locks/x/acquire", json={"lock_at_most_for": "1m"}),
            await client.get("/v1/locks"),
        ):
            assert r.status_code == 503
            assert r.json()["error"]["code"] == "storage_unavailable"
            assert r.headers["retry-after"]
            assert "hunter2" not in r.text


def test_committed_openapi_matches_the_app() -> None:
    generated = create_app(Settings(database_url=SecretStr("postgresql://x@localhost/x"))).openapi()
    committed = json.loads(OPENAPI.read_text())
    assert committed == generated, (
        "openapi/openapi.json is stale: run `schedlock-server openapi --output openapi/openapi.json`"
    )


def test_every_route_is_described_and_declares_its_errors() -> None:
    spec = json.loads(OPENAPI.read_text())
    for path, operations in spec["paths"].items():
        for method, op in operations.items():
            assert op.get("description") and op.get("summary") and op.get("operationId"), (method, path)
            if path.startswith("/v1/"):  # each error's own schema: tests/api/test_openapi_contract.py
                assert {"422", "503"} <= set(op["responses"]), (method, path)


def test_error_codes_are_documented_in_the_spec() -> None:
    text = OPENAPI.read_text()
    for code in ("lock_held", "not_holder", "lock_not_found", "invalid_request", "storage_unavailable"):
        assert code in ERROR_CODES and f"`{code}`" in text


async def test_docs_page_is_served_without_internet(client: httpx.AsyncClient) -> None:
    page = await client.get("/docs")
    assert page.status_code == 200
    assert "cdn" not in page.text.lower() and "https://" not in page.text
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/static-offline-docs/{asset}" in page.text
        r = await client.get(f"/static-offline-docs/{asset}")
        assert r.status_code == 200 and len(r.content) > 10_000
    spec = await client.get("/openapi.json")
    assert spec.json()["info"]["title"] == "schedlock"


async def test_redoc_page_and_bundle_are_served_without_a_cdn(client: httpx.AsyncClient) -> None:
    page = await client.get("/redoc")
    assert page.status_code == 200 and "https://" not in page.text
    assert "/redoc/redoc.standalone.js" in page.text
    bundle = await client.get("/redoc/redoc.standalone.js")
    assert bundle.status_code == 200 and len(bundle.content) > 100_000
    assert b"cdn.redoc.ly" not in bundle.content and b"data:image/svg+xml" in bundle.content


async def test_a_served_app_freezes_what_start_up_left_alive(settings: Settings) -> None:
    """serve passes freeze_gc=True: a full collection must not walk the app's ~100k long-lived objects."""
    gc.unfreeze()
    try:
        async with in_process(settings, freeze_gc=False) as (_, client):
            assert (await client.get("/healthz")).status_code == 200
            assert gc.get_freeze_count() == 0
        async with in_process(settings, freeze_gc=True) as (_, client):
            assert gc.get_freeze_count() > 10_000
            assert (await client.get("/healthz")).status_code == 200
    finally:
        gc.unfreeze()  # this test process lives on: let the collector have them back
