"""Schemathesis against the committed OpenAPI document, on the live ASGI app (lifespan, real Postgres, tokens on).

Positive and negative cases for every operation: no response is a 5xx, and every response (status, headers,
body) is one the document declares.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.core.result import Ok
from schemathesis.python import asgi
from schemathesis.specs.openapi.checks import positive_data_acceptance
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.auth.tokens import hash_secret
from app.main import create_app
from app.settings import Settings

OPENAPI = Path(__file__).parents[2] / "openapi" / "openapi.json"
SECRET = "fuzz-secret-" + "f" * 40


class LiveApp:
    """The app under test, built by the fixture below once the session's database exists. Schemathesis binds
    the schema to an app object when the module loads, so it gets this stand-in that forwards to the app."""

    def __init__(self) -> None:
        self.app: ASGIApp | None = None
        self.statuses: Counter[int] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert self.app is not None, "the live_app fixture did not run"

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.statuses[message["status"]] += 1
            await send(message)

        await self.app(scope, receive, counting_send)


live = LiveApp()
schema = schemathesis.openapi.from_path(OPENAPI)
schema.app = live
schema.config.update(headers={"Authorization": f"Bearer {SECRET}"})
# SCHEDLOCK_FUZZ_EXAMPLES=1000 for a longer hunt than the suite's default.
EXAMPLES = int(os.environ.get("SCHEDLOCK_FUZZ_EXAMPLES", "100"))
schema.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE], max_examples=EXAMPLES)


@pytest.fixture(scope="module", autouse=True)
def live_app(settings: Settings) -> Iterator[None]:
    """The session's table, one read-write token for every name."""
    tokens = {"tokens": [{"name": "fuzz", "sha256": hash_secret(SECRET), "prefixes": ["*"], "access": "read-write"}]}
    live.app = create_app(settings.model_copy(update={"tokens": json.dumps(tokens)}))
    yield
    asgi.shutdown_lifespans()  # the lifespan ran in schemathesis' event loop thread: close the pool there
    print(f"\nfuzz: {sum(live.statuses.values())} requests, by status: {dict(sorted(live.statuses.items()))}")


@schema.parametrize()
@hypothesis_settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_api_conforms_to_its_document(case: schemathesis.Case[Any]) -> None:
    # Every check but "schema-valid data is accepted": some rules are beyond JSON Schema (a duration must parse,
    # be > 0 and within the server's maximum, lock_at_least_for <= lock_at_most_for, limit <= the server's cap),
    # and break them is a documented 422. Negative data must still be rejected, with a declared response.
    case.call_and_validate(excluded_checks=[positive_data_acceptance])


def test_the_fuzzing_reaches_every_outcome() -> None:
    """Its own run over every operation, positive and negative (so it passes alone and in any order): the fuzzing
    gets past authentication and validation to the database and back, and nothing answers 5xx. Some draws send
    an unknown token (401)."""
    operations = []
    for result in schema.get_all_operations():
        assert isinstance(result, Ok), result.err()  # the committed document is valid (the drift test builds it)
        operations.append(result.ok())
    modes = [GenerationMode.POSITIVE, GenerationMode.NEGATIVE]
    before = live.statuses.copy()

    @given(data=st.data())
    @hypothesis_settings(max_examples=EXAMPLES * 2, deadline=None, suppress_health_check=list(HealthCheck))
    def fuzz(data: st.DataObject) -> None:
        operation = data.draw(st.sampled_from(operations))
        case = data.draw(operation.as_strategy(generation_mode=data.draw(st.sampled_from(modes))))
        token = data.draw(st.sampled_from([SECRET, SECRET, SECRET, "not-a-token"]))
        headers = {"Authorization": f"Bearer {token}"}
        case.call(headers=headers)

    fuzz()
    reached = live.statuses - before
    assert not [s for s in reached if s >= 500], reached
    assert {200, 401, 404, 422} <= set(reached), reached
