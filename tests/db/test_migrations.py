"""`schedlock-server migrate`: creates ShedLock's table, adopts an existing one with Java rows, runs twice."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from app.db import migrate, revisions
from app.settings import Settings
from tests.support.apps import in_process
from tests.support.java import JavaNode
from tests.support.servers import free_port

JAVA_DDL = """CREATE TABLE {t}(name VARCHAR(64) NOT NULL, lock_until {ts} NOT NULL,
    locked_at {ts} NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))"""


async def upgrade(settings: Settings) -> None:
    await asyncio.to_thread(migrate.upgrade, settings)


async def columns(conn: Any, settings: Settings) -> dict[str, tuple[str, str, str | None]]:
    rows = await conn.fetch(
        "SELECT column_name, data_type, is_nullable, column_default FROM information_schema.columns "
        "WHERE table_schema = $1 AND table_name = $2",
        settings.table_schema,
        settings.table_name,
    )
    return {r["column_name"]: (r["data_type"], r["is_nullable"], r["column_default"]) for r in rows}


async def test_creates_shedlocks_table_with_its_exact_columns(fresh: tuple[Any, Settings]) -> None:
    conn, settings = fresh
    await upgrade(settings)
    cols = await columns(conn, settings)
    assert cols["name"][:2] == ("character varying", "NO")
    assert cols["lock_until"][:2] == ("timestamp without time zone", "NO")
    assert cols["locked_at"][:2] == ("timestamp without time zone", "NO")
    assert cols["locked_by"][:2] == ("character varying", "NO")
    lengths = dict(
        await conn.fetch(
            "SELECT column_name, character_maximum_length FROM information_schema.columns "
            "WHERE table_schema = $1 AND table_name = $2 AND data_type = 'character varying'",
            settings.table_schema,
            settings.table_name,
        )
    )
    assert lengths == {"name": 64, "locked_by": 255}
    pk = await conn.fetchval(
        "SELECT array_agg(a.attname) FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid "
        "AND a.attnum = ANY(i.indkey) WHERE i.indrelid = $1::regclass AND i.indisprimary",
        settings.table,
    )
    assert pk == ["name"]
    extra = {k: v for k, v in cols.items() if k not in ("name", "lock_until", "locked_at", "locked_by")}
    assert extra, "schedlock's own columns"
    for column, (_, nullable, default) in extra.items():
        assert nullable == "YES" or default is not None, f"{column} would break Java's INSERT"


@pytest.mark.parametrize("timestamp_type", ["TIMESTAMP", "TIMESTAMPTZ"])
async def test_adopts_an_existing_java_table_without_touching_rows(
    fresh: tuple[Any, Settings], timestamp_type: str
) -> None:
    conn, settings = fresh
    await conn.execute(f'CREATE SCHEMA "{settings.table_schema}"')
    await conn.execute(JAVA_DDL.format(t=settings.table, ts=timestamp_type))
    java = JavaNode(conn, settings.table, hostname="java-host-7")
    for i in range(50):
        await java.insert_or_take_over(f"java-job-{i}", 600.0)
    before = await conn.fetch(f"SELECT name, lock_until, locked_at, locked_by FROM {settings.table} ORDER BY name")
    relfilenode = await conn.fetchval("SELECT relfilenode FROM pg_class WHERE oid = $1::regclass", settings.table)

    await upgrade(settings)

    after = await conn.fetch(f"SELECT name, lock_until, locked_at, locked_by FROM {settings.table} ORDER BY name")
    assert after == before
    assert (
        await conn.fetchval("SELECT relfilenode FROM pg_class WHERE oid = $1::regclass", settings.table) == relfilenode
    ), "adoption must not rewrite the table"
    # Java's statements, unaware of the new columns, keep working on the adopted table.
    assert not await java.insert_or_take_over("java-job-1", 600.0)
    assert await java.unlock("java-job-1", 0.0)
    assert await java.insert_or_take_over("java-job-1", 600.0)
    assert await java.insert_or_take_over("brand-new", 600.0)


async def test_running_twice_is_a_no_op(fresh: tuple[Any, Settings]) -> None:
    conn, settings = fresh
    await upgrade(settings)
    java = JavaNode(conn, settings.table, hostname="java-host-1")
    await java.insert_or_take_over("kept", 600.0)
    row = await java.row("kept")
    catalog = "SELECT count(*) FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal"
    await upgrade(settings)
    assert await java.row("kept") == row
    # the fencing trigger (0001), the history's (0002) and the slot trigger (0003)
    assert await conn.fetchval(catalog, settings.table) == 3
    runs = f'"{settings.table_schema}"."{settings.table_name}_runs"'
    assert await conn.fetchval(f"SELECT count(*) FROM {runs}") == 1
    version_table = f'"{settings.table_schema}"."{revisions.version_table_for(settings)}"'
    assert await conn.fetchval(f"SELECT version_num FROM {version_table}") == revisions.HEAD


async def test_the_cli_migrates(fresh: tuple[Any, Settings]) -> None:
    conn, settings = fresh
    env = {"SCHEDLOCK_DATABASE_URL": settings.asyncpg_dsn(), "SCHEDLOCK_TABLE": settings.table, "PATH": ""}
    result = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "app", "migrate"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", settings.table)
    assert f"created table {settings.table} at schema revision {revisions.HEAD}" in result.stderr
    again = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "app", "migrate"], env=env, capture_output=True, text=True
    )
    assert again.returncode == 0 and f"table {settings.table} is already current" in again.stderr, again.stderr


async def test_migrate_says_what_it_did(fresh: tuple[Any, Settings]) -> None:
    conn, settings = fresh
    await conn.execute(f'CREATE SCHEMA "{settings.table_schema}"')
    await conn.execute(JAVA_DDL.format(t=settings.table, ts="TIMESTAMP"))
    said = await asyncio.to_thread(migrate.upgrade, settings)
    assert said.startswith(f"adopted the existing table {settings.table} (its rows untouched)"), said
    assert migrate.describe_outcome("t", True, "0001", "0002") == "upgraded table t from schema revision 0001 to 0002"
    assert "already current" in await asyncio.to_thread(migrate.upgrade, settings)


async def test_migrate_reads_a_multi_host_url(fresh: tuple[Any, Settings], database_url: str) -> None:
    """The URL a failover-ready deployment uses (docs/high-availability.md): several hosts, the primary wanted.
    The first host here refuses connections; the second is the test database."""
    conn, settings = fresh
    parts = urlsplit(database_url)
    dead = f"127.0.0.1:{free_port()}"
    multi = urlunsplit(
        parts._replace(netloc=f"{parts.netloc.rsplit('@', 1)[0]}@{dead},{parts.hostname}:{parts.port or 5432}")
    )
    multi += ("&" if parts.query else "?") + "target_session_attrs=read-write"
    env = {"SCHEDLOCK_DATABASE_URL": multi, "SCHEDLOCK_TABLE": settings.table, "PATH": ""}
    result = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "app", "migrate"], env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", settings.table)


async def test_the_api_works_on_an_adopted_timestamptz_table(fresh: tuple[Any, Settings]) -> None:

    from tests.support.api import acquire, release, seconds

    conn, settings = fresh
    await conn.execute(f'CREATE SCHEMA "{settings.table_schema}"')
    await conn.execute(JAVA_DDL.format(t=settings.table, ts="TIMESTAMPTZ"))
    java = JavaNode(conn, settings.table, hostname="java-host-1")
    await java.insert_or_take_over("java-held", 600.0)
    await upgrade(settings)

    async with in_process(settings) as (_, client):
        held = await acquire(client, "java-held", "10m")
        assert held.status_code == 409
        assert seconds(held.json()["error"]["db_time"], held.json()["error"]["lock_until"]) == pytest.approx(600, abs=2)
        lease = (await acquire(client, "http-job", "10m", lock_at_least_for="1m")).json()
        assert seconds(lease["locked_at"], lease["lock_until"]) == pytest.approx(600, abs=0.002)
        released = (await release(client, "http-job", lease["token"])).json()
        assert seconds(lease["locked_at"], released["lock_until"]) == pytest.approx(60, abs=0.002)
        assert (await client.get("/readyz")).status_code == 200


async def test_readyz_accepts_a_newer_schema_and_refuses_none(fresh: tuple[Any, Settings]) -> None:

    conn, settings = fresh
    await upgrade(settings)
    version_table = f'"{settings.table_schema}"."{revisions.version_table_for(settings)}"'
    async with in_process(settings) as (_, client):
        assert (await client.get("/readyz")).status_code == 200
        # A newer release migrated ahead of this one (rolling upgrade): this one may keep serving.
        await conn.execute(f"UPDATE {version_table} SET version_num = 'from_a_newer_release'")
        assert (await client.get("/readyz")).status_code == 200
        # An older revision of this release's: not yet migrated to what this release needs.
        await conn.execute(f"UPDATE {version_table} SET version_num = $1", revisions.REVISIONS[-2])
        r = await client.get("/readyz")
        assert r.status_code == 503 and f"expected {revisions.HEAD}" in r.json()["error"]["message"]
        await conn.execute(f"DELETE FROM {version_table}")
        r = await client.get("/readyz")
        assert r.status_code == 503 and "migrate" in r.json()["error"]["message"]


def test_the_servers_revisions_are_the_migrations_alembic_finds() -> None:
    """app.db.revisions lists the revisions so that a serving process needs no Alembic: a new migration must be added
    there too, oldest first."""
    assert migrate.revisions() == revisions.REVISIONS
    assert revisions.REVISIONS[-1] == revisions.HEAD and frozenset(migrate.revisions()) == revisions.KNOWN


def test_serving_imports_neither_alembic_nor_a_jwt_library() -> None:
    """Alembic (~8 MB) is for `schedlock-server migrate`, PyJWT with cryptography (~9 MB) for workload identity:
    an app with static tokens (the default) loads neither."""
    code = (
        "import sys\n"
        "from app.main import create_app\n"
        "from app.settings import Settings\n"
        "create_app(Settings(tokens='{\"tokens\": []}'))\n"
        "print(sorted(m for m in ('alembic', 'jwt', 'cryptography') if m in sys.modules))\n"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert loaded.strip() == "[]", loaded
