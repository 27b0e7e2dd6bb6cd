"""Alembic environment: runs the revisions against the table named in the settings, over asyncpg."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import create_async_engine

from app.db.migrate import version_table_for
from app.settings import Settings

settings: Settings = context.config.attributes["settings"]


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        version_table=version_table_for(settings),
        version_table_schema=settings.table_schema,
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations(settings=settings)


async def _main() -> None:
    engine = create_async_engine(
        settings.sqlalchemy_url(),
        connect_args={"timeout": settings.db_connect_timeout, "server_settings": {"timezone": "UTC"}},
    )
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
