"""Statements built from optional filters: the text is static for each combination of filters (never
``$1 IS NULL OR ...``, so a prepared statement's generic plan keeps its index use), the values are bound."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class Params:
    """The positional parameters of one statement: calling it with a value binds the value and returns its
    placeholder (``$1``, ``$2``, ...); ``values`` are the statement's arguments, in order."""

    def __init__(self) -> None:
        self.values: list[Any] = []

    def __call__(self, value: Any) -> str:
        self.values.append(value)
        return f"${len(self.values)}"


def name_filters(column: str, arg: Params, *, prefix: str | None, scope: Sequence[str] | None) -> list[str]:
    """Conditions on a name ``column``: it starts with ``prefix`` (None or empty: any); it starts with one of
    ``scope`` (a token's prefixes; None: any name, empty: none)."""
    where: list[str] = []
    if prefix:
        where.append(f"starts_with({column}, {arg(prefix)})")
    if scope is not None:
        where.append("(" + (" OR ".join(f"starts_with({column}, {arg(p)})" for p in scope) or "false") + ")")
    return where
