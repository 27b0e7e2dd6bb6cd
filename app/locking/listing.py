"""The list query: keyset pagination in name order (code point order), filtered by prefix, by the caller's scope
and by held/free, over the ``name COLLATE "C"`` index."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Sequence
from typing import Any

from app.db.params import Params
from app.locking.rows import NOW, ROW

#: The longest cursor accepted. A cursor carries the last name of a page, and a name is whatever the table holds:
#: a Java node may have written one the API's name rule refuses, and an adopted table may allow longer names than
#: 64. The name is the primary key, and a btree entry is at most 2,704 bytes: 3,608 characters of base64.
CURSOR_MAX = 4096


def encode_cursor(name: str) -> str:
    """The cursor after ``name``: its UTF-8 in URL-safe base64, unpadded."""
    return base64.urlsafe_b64encode(name.encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str | None:
    """The name a cursor stands for, or None when ``cursor`` is not one encode_cursor made. Any text the table
    can hold is a name here, whatever the API's name rule says: every cursor the API hands out is taken back."""
    try:
        name = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    # Only the one spelling encode_cursor makes (base64 decoding skips stray characters); text Postgres can store.
    if not name or "\x00" in name or encode_cursor(name) != cursor:
        return None
    return name


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
