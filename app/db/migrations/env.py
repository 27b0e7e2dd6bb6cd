"""Alembic environment: runs the revisions against the table named in the settings, over asyncpg."""

from __future__ import annotations

import asyncio

import asyncpg
from alembic import context
from sqlalchemy import inspect
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.migrate import UnsuitableDatabase
from app.db.revisions import encoding_problem, version_table_for
from app.settings import Settings

settings: Settings = context.config.attributes["settings"]


def _run(connection: Connection) -> None:
    problem = encoding_problem(str(connection.exec_driver_sql("SHOW server_encoding").scalar()))
    if problem is not None and context.config.attributes.get("require_utf8", True):
        raise UnsuitableDatabase(f"not migrating: {problem}")
    # Alembic begins (and owns) a transaction per migration only on a connection outside one when configured, and
    # again when the migrations start: a step that cannot run in a transaction (0007's concurrent index build)
    # needs that, for its autocommit block. So the transactions these reads begin are ended first.
    connection.commit()
    context.configure(
        connection=connection,
        version_table=version_table_for(settings),
        version_table_schema=settings.table_schema,
        transaction_per_migration=True,
    )
    existed = inspect(connection).has_table(settings.table_name, schema=settings.table_schema)
    before = context.get_context().get_current_revision()
    connection.commit()
    with context.begin_transaction():
        context.run_migrations(settings=settings)
    # What `schedlock-server migrate` reports (app.db.migrate.upgrade).
    context.config.attributes["outcome"] = (existed, before, context.get_context().get_current_revision())


async def _connect() -> asyncpg.Connection:
    # asyncpg reads the URL itself, as the serving pool does: SQLAlchemy's URL parser cannot read a multi-host URL
    # (postgresql://h1:5432,h2:5432/db?target_session_attrs=read-write), which finds the primary after a failover.
    return await asyncpg.connect(
        settings.asyncpg_dsn(),
        timeout=settings.db_connect_timeout,
        server_settings={"timezone": "UTC"},
        statement_cache_size=settings.db_statement_cache_size,
    )


async def _main() -> None:
    # Behind PgBouncer's transaction mode (SCHEDLOCK_DB_STATEMENT_CACHE_SIZE=0), SQLAlchemy's own cache of prepared
    # statements must be off too.
    cache = "" if settings.db_statement_cache_size else "?prepared_statement_cache_size=0"
    engine = create_async_engine(f"postgresql+asyncpg://{cache}", async_creator=_connect)
    try:
        async with engine.connect() as connection:
            if settings.table_schema:
                # The version table lives beside the lock table, so the schema must exist first.
                await connection.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{settings.table_schema}"')
                await connection.commit()
            await connection.run_sync(_run)
            await connection.commit()
    finally:
        await engine.dispose()


if context.is_offline_mode():
    raise SystemExit("offline (--sql) migrations are not supported; run schedlock-server migrate")
asyncio.run(_main())
