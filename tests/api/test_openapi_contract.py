"""openapi/openapi.json as a contract a generator can use: one schema per error response (with its headers), a
realistic example for every request and response that validates against its schema, and real answers of the
service that validate against what the document declares for them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from app.auth.tokens import hash_secret
from app.settings import Settings
from tests.support.api import acquire
from tests.support.apps import in_process
from tests.support.openapi import ACQUIRE, EXTEND, GET, LIST, RELEASE, SPEC, check, validator

OPERATIONS = [(path, method, operation) for path, item in SPEC["paths"].items() for method, operation in item.items()]

SECRET = "contract-secret-" + "c" * 40
TOKENS = json.dumps(
    {
        "tokens": [
            {"name": "billing-cron", "sha256": hash_secret(SECRET), "prefixes": ["billing."], "access": "read-write"}
        ]
    }
)

#: The schema each error status must have, per operation (409 differs: held on acquire, not_holder otherwise).
ERROR_SCHEMAS = {
    "401": "UnauthorizedError",
    "403": "ForbiddenError",
    "404": "LockNotFoundError",
    "413": "PayloadTooLargeError",
    "415": "UnsupportedMediaTypeError",
    "422": "InvalidRequestError",
    "429": "RateLimitedError",
    "503": "StorageUnavailableError",
}


def examples() -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, media type object) for every request body and response of the document."""
    for path, method, operation in OPERATIONS:
        for media in operation.get("requestBody", {}).get("content", {}).values():
            yield f"{method} {path} request", media
        for status, response in operation["responses"].items():
            for media_type, media in response.get("content", {}).items():
                yield f"{method} {path} {status} {media_type}", media


@pytest.mark.parametrize(("where", "media"), list(examples()), ids=[where for where, _ in examples()])
def test_every_request_and_response_has_an_example_that_fits_its_schema(where: str, media: dict[str, Any]) -> None:
    assert "example" in media, f'{where}: no example (Swagger UI would make up "string" values)'
    errors = [e.message for e in validator(media["schema"]).iter_errors(media["example"])]
    assert errors == [], f"{where}: {errors}"


def placeholders(value: Any) -> Iterator[str]:
    """What Swagger UI shows when it invents an example: "string", additionalProp1."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key.startswith("additionalProp"):
                yield key
            yield from placeholders(item)
    elif isinstance(value, list):
        for item in value:
            yield from placeholders(item)
    elif value == "string":
        yield value


def test_no_example_is_a_placeholder() -> None:
    assert [where for where, media in examples() if list(placeholders(media.get("example")))] == []


@pytest.mark.parametrize(("path", "method", "operation"), OPERATIONS, ids=[f"{m} {p}" for p, m, _ in OPERATIONS])
def test_each_error_status_has_its_own_schema_and_headers(path: str, method: str, operation: dict[str, Any]) -> None:
    for status, response in operation["responses"].items():
        if not status.startswith(("4", "5")):
            continue
        ref = response["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
        if status == "409":
            assert ref == ("LockHeldError" if operation["operationId"] == "acquireLock" else "NotHolderError")
        elif status == "404" and path.startswith("/v1/jobs/"):
            assert ref == "JobNotFoundError", (method, path)
        else:
            assert ref == ERROR_SCHEMAS[status], (method, path, status)
        headers = set(response.get("headers", {}))
        expected = {"401": {"WWW-Authenticate"}, "415": {"Accept"}, "429": {"Retry-After"}, "503": {"Retry-After"}}
        assert headers == expected.get(status, set()), (path, status)
    # Whoever may be refused for a token may be refused for its quota (docs/auth.md, Quotas).
    assert ("401" in operation["responses"]) == ("429" in operation["responses"]), (method, path)


def test_the_lock_held_schema_says_who_holds_it_until_when() -> None:
    detail = SPEC["components"]["schemas"]["LockHeldDetail"]
    assert {"code", "message", "locked_by", "locked_at", "lock_until"} <= set(detail["required"])
    assert detail["properties"]["code"]["const"] == "lock_held"
    invalid = SPEC["components"]["schemas"]["InvalidRequestDetail"]
    assert {"field", "problems"} <= set(invalid["required"])


# --- real answers fit the declared schemas ---------------------------------------------------------------------


async def test_real_answers_fit_their_schemas(client: httpx.AsyncClient, name: str) -> None:
    lease = await acquire(client, name, "1m", lock_at_least_for="1s", holder="contract test")
    check(lease, ACQUIRE, "post")
    check(await acquire(client, name, "1m"), ACQUIRE, "post")  # 409 lock_held
    token = lease.json()["token"]
    check(
        await client.post(f"/v1/locks/{name}/extend", json={"token": token, "lock_at_most_for": "2m"}), EXTEND, "post"
    )
    check(await client.get(f"/v1/locks/{name}"), GET, "get")
    check(await client.get("/v1/locks", params={"prefix": name}), LIST, "get")
    check(await client.post(f"/v1/locks/{name}/release", json={"token": token}), RELEASE, "post")
    check(
        await client.post(f"/v1/locks/{name}/extend", json={"token": token, "lock_at_most_for": "2m"}), EXTEND, "post"
    )
    check(await client.post(f"/v1/locks/{name}/release", json={"token": "not-a-lease"}), RELEASE, "post")  # 409
    check(await client.get(f"/v1/locks/{name}-never"), GET, "get")  # 404
    for bad in ({"lock_at_most_for": "14 minutes"}, {"lock_at_most_for": "0s"}, {}, {"lock_at_most_for": "1m", "x": 1}):
        answer = (
            await acquire(client, name, **bad)
            if "lock_at_most_for" in bad
            else await client.post(f"/v1/locks/{name}/acquire", json=bad)
        )
        assert answer.status_code == 422
        check(answer, ACQUIRE, "post")
    check(await client.get("/v1/locks", params={"limit": 0}), LIST, "get")  # 422 on a query parameter
    too_large = await client.post(
        f"/v1/locks/{name}/acquire", content=b" " * 20_000, headers={"content-type": "application/json"}
    )
    assert too_large.status_code == 413
    check(too_large, ACQUIRE, "post")
    not_json = await client.post(f"/v1/locks/{name}/acquire", content=b"{}", headers={"content-type": "text/plain"})
    assert not_json.status_code == 415 and not_json.headers["accept"] == "application/json"
    check(not_json, ACQUIRE, "post")


async def test_real_auth_and_storage_errors_fit_their_schemas(settings: Settings, name: str) -> None:
    async with in_process(settings.model_copy(update={"tokens": TOKENS})) as (_, client):
        unauthorized = await client.post(f"/v1/locks/billing.{name}/acquire", json={"lock_at_most_for": "1m"})
        assert unauthorized.status_code == 401 and unauthorized.headers["www-authenticate"].startswith("Bearer")
        check(unauthorized, ACQUIRE, "post")
        forbidden = await client.post(
            f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"}, headers={"Authorization": f"Bearer {SECRET}"}
        )
        assert forbidden.status_code == 403
        check(forbidden, ACQUIRE, "post")
    down = Settings(database_url=SecretStr("postgresql://u@127.0.0.1:1/nowhere"), db_connect_timeout=1.0)
    async with in_process(down) as (_, client):
        unavailable = await client.post(f"/v1/locks/{name}/acquire", json={"lock_at_most_for": "1m"})
        assert unavailable.status_code == 503 and unavailable.headers["retry-after"]
        check(unavailable, ACQUIRE, "post")
        check(await client.get("/readyz"), "/readyz", "get")
