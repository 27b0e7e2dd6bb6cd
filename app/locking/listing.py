"""The list query: keyset pagination in name order (code point order), filtered by prefix, by the caller's scope
and by held/free, over the ``name COLLATE "C"`` index."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from app.db.params import Params
from app.locking.rows import NOW, ROW


def list_query(
    table: str,
    *,
    prefix: str | None,
    held: bool | None,
    after: str | None,
    limit: int,
    scope: Sequence[str] | None = None,
) -> tuple[str, list[Any]]:
    # Static text per combination of filters (never "$1 IS NULL OR ..."), so each prepared statement keeps an
    # index range scan even once Postgres switches it to a generic plan.
    where: list[str] = []
    arg = Params()
    if after is not None:
        where.append(f'name COLLATE "C" > {arg(after)}')
    if prefix:
        where.append(f'name COLLATE "C" >= {arg(prefix)}')
        upper = prefix_upper_bound(prefix)
        if upper is not None:
            where.append(f'name COLLATE "C" < {arg(upper)}')
    if scope is not None:
        where.append(_scope_condition(scope, arg))
    if held is not None:
        where.append(f"lock_until {'>' if held else '<='} {NOW}")
    clause = f"WHERE {' AND '.join(where)}" if where else ""
    sql = f'SELECT {ROW}, {NOW} AS db_time FROM {table} {clause} ORDER BY name COLLATE "C" LIMIT {arg(limit + 1)}'
    return sql, arg.values


def _scope_condition(scope: Sequence[str], arg: Callable[[Any], str]) -> str:
    """Names starting with any of ``scope``: one index range per prefix. With several, the envelope from the
    least prefix to the greatest bound is added too, so the planner still walks one bounded index range in
    name order (the ORDER BY ... LIMIT stays cheap) and filters the ranges inside it."""
    if not scope:
        return "false"
    uppers = [prefix_upper_bound(p) for p in scope]
    ranges = [
        f'name COLLATE "C" >= {arg(p)}' + (f' AND name COLLATE "C" < {arg(u)}' if u is not None else "")
        for p, u in zip(scope, uppers, strict=True)
    ]
    if len(ranges) == 1:
        return ranges[0]
    envelope = f'name COLLATE "C" >= {arg(min(scope))}'
    if all(u is not None for u in uppers):
        envelope += f' AND name COLLATE "C" < {arg(max(u for u in uppers if u is not None))}'
    return f"{envelope} AND ({' OR '.join(f'({r})' for r in ranges)})"


def prefix_upper_bound(prefix: str) -> str | None:
    """The least string greater than every string starting with ``prefix``, in code point order (None: no
    bound). Code point order is byte order in UTF-8, which is what the "C" collation compares."""
    chars = list(prefix)
    while chars:
        code = ord(chars.pop()) + 1
        if 0xD800 <= code <= 0xDFFF:  # surrogates cannot be stored; skip them
            code = 0xE000
        if code <= 0x10FFFF:
            return "".join(chars) + chr(code)
    return None
