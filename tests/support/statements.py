"""Watching what the service sends: a hook before and after each statement its lock store, history and skip counter
run (they share one app.db.runner.Statements)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

#: (operation, None) before a statement; (operation, its rows) after it.
Hook = Callable[[str, list[Any] | None], Awaitable[None]]


@contextlib.contextmanager
def watched(store: Any, hook: Hook) -> Iterator[None]:
    """While entered, ``hook`` sees every statement ``store``'s Statements run, and may delay or check it."""
    statements = store.statements
    real = statements.fetch

    async def fetch(operation: str, sql: str, *args: Any) -> list[Any]:
        await hook(operation, None)
        rows: list[Any] = await real(operation, sql, *args)
        await hook(operation, rows)
        return rows

    statements.fetch = fetch
    try:
        yield
    finally:
        del statements.fetch
