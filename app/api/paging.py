"""What the list routes share (locks, runs, jobs, a job's ticks): the page size, the name prefix, and cursors.

A cursor is opaque to callers: the text of where the next page starts (``job:<name>``, ``runs:<fencing token>``,
...), UTF-8 in URL-safe base64, unpadded. Only the one spelling :func:`encode` makes is taken back, and anything
else, however near, is the caller's 422 with ``field: cursor``.
"""

from __future__ import annotations

import base64
import binascii
import re
from datetime import datetime, timedelta
from typing import Annotated

from fastapi import Query

from app.api.models import DIGITS_ONLY
from app.errors import InvalidRequest
from app.locking.names import NAME_MAX
from app.settings import Settings

#: The longest cursor accepted. The lock list's cursor carries the last name of a page, and a name is whatever the
#: table holds: a Java node may have written one the API's name rule refuses, and an adopted table may allow longer
#: names than 64. The name is the primary key, and a btree entry is at most 2,704 bytes: 3,608 characters of base64.
CURSOR_MAX = 4096

Limit = Annotated[
    int, Query(ge=1, description="Page size (at most the server's list limit, 1000 by default)."), DIGITS_ONLY
]
Cursor = Annotated[str | None, Query(max_length=CURSOR_MAX, description="`next_cursor` of the previous page.")]
Prefix = Annotated[
    str | None,
    Query(max_length=NAME_MAX, pattern=r"^[^\x00-\x1f\x7f-\x9f]*$", description="Only names starting with this."),
]

_EPOCH = datetime(1970, 1, 1)


def check_limit(settings: Settings, limit: int) -> None:
    if limit > settings.list_max_limit:
        raise InvalidRequest(f"limit: must be at most {settings.list_max_limit}", field="limit")


def not_a_cursor() -> InvalidRequest:
    return InvalidRequest("cursor: not a cursor returned by this API", field="cursor")


def encode(text: str) -> str:
    """The cursor standing for ``text``."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode(cursor: str) -> str | None:
    """The text a cursor stands for, or None when ``cursor`` is not one :func:`encode` made. The text may be any
    Postgres can store: every cursor the API hands out is taken back."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    # Only the one spelling encode makes (base64 decoding skips stray characters); text Postgres can store.
    if not text or "\x00" in text or encode(text) != cursor:
        return None
    return text


def read(cursor: str, pattern: re.Pattern[str]) -> re.Match[str]:
    """The fields of a cursor whose text matches ``pattern`` whole; 422 (field ``cursor``) for anything else."""
    text = decode(cursor)
    match = pattern.fullmatch(text) if text is not None else None
    if match is None:
        raise not_a_cursor()
    return match


def micros(at: datetime) -> str:
    """A naive UTC time as a cursor field: microseconds since 1970, exact."""
    return str((at - _EPOCH) // timedelta(microseconds=1))


def time_of(field: str) -> datetime:
    """The time :func:`micros` wrote (``field`` matched ``-?[0-9]{1,18}``); 422 when no datetime holds it."""
    try:
        return _EPOCH + timedelta(microseconds=int(field))
    except OverflowError:
        raise not_a_cursor() from None
