"""A takeover written straight into the table, behind the service's back."""

from __future__ import annotations

from typing import Any


async def steal(db: Any, table: str, name: str) -> None:
    """What a takeover does to the row, written behind the service's back: another holder, a new lease."""
    await db.execute(
        f"UPDATE {table} SET locked_by = 'thief', lease_token_hash = NULL, locked_at = timezone('utc', now()), "
        "lock_until = timezone('utc', now()) + interval '1 hour' WHERE name = $1",
        name,
    )
