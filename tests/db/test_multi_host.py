"""Database URLs as high-availability set-ups write them, against the shared test database: several hosts with
``target_session_attrs=read-write``, and what the service answers when only read-only servers are reachable (as
in the seconds of a failover before a standby is promoted): 503, never 500."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

import pytest
from pydantic import SecretStr

from app.settings import Settings
from tests.support.api import acquire
from tests.support.apps import in_process
from tests.support.servers import free_port


def with_query(url: str, query: str, *, dead_host_first: bool = False) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if dead_host_first:
        user, _, hosts = netloc.rpartition("@")
        netloc = f"{user}@127.0.0.1:{free_port()},{hosts}"
    return urlunsplit(parts._replace(netloc=netloc, query="&".join(q for q in (parts.query, query) if q)))


async def test_a_multi_host_url_serves_from_the_host_that_takes_writes(settings: Settings, name: str) -> None:
    url = with_query(settings.asyncpg_dsn(), "target_session_attrs=read-write", dead_host_first=True)
    async with in_process(settings.model_copy(update={"database_url": SecretStr(url)})) as (_, client):
        assert (await acquire(client, name, "1m")).status_code == 200
        assert (await client.get("/readyz")).status_code == 200


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        # Every host read-only, as while a failover has no primary yet: asyncpg finds none that takes writes.
        ("target_session_attrs=read-write&default_transaction_read_only=on", "TargetServerAttributeNotMatched"),
        # A connection whose server turned read-only under it (a switchover demoted it): the write is refused.
        ("default_transaction_read_only=on", "ReadOnlySQLTransactionError"),
    ],
)
async def test_no_writable_server_is_503_never_500(settings: Settings, name: str, query: str, reason: str) -> None:
    url = with_query(settings.asyncpg_dsn(), query)
    async with in_process(settings.model_copy(update={"database_url": SecretStr(url)})) as (app, client):
        for _ in range(3):
            r = await acquire(client, name, "1m")
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "storage_unavailable" and reason in r.json()["error"]["message"]
            assert r.headers["retry-after"] == "1"
        # No read-only connection is kept for the next request: the next one must look for the primary again.
        assert app.state.store.statements.pool.get_size() == 0
