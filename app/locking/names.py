"""What a lock name (and the free text stored beside it) may be.

ShedLock's ``name`` column is ``VARCHAR(64)``: a longer name must be refused, never truncated or silently skipped
(older ShedLock versions skipped such jobs). Control characters and "/" are refused too: a name travels in a URL
path and in log lines. Names starting with ``schedlock:`` are the service's own (its chores' locks): callers may read
them, never take, extend, release or force-release them.

That rule is for the names callers make. A row's name may be anything the column holds: a Java node's ShedLock takes
any text (``billing/``, a trailing space, a tab), and such a row can be listed, read, have its runs and skips read,
and be force-released (any 1-64 characters: ``RowName`` in app.api.routes.locks), never acquired, extended or
released over HTTP.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, TypeAdapter

from app.errors import InvalidRequest

NAME_MAX = 64
NAME_PATTERN = r"^[^\x00-\x1f\x7f-\x9f/]+$"
#: The name rule as a validator, for code that reads a name itself (auth's prefixes).
LOCK_NAME = TypeAdapter(Annotated[str, Field(min_length=1, max_length=NAME_MAX, pattern=NAME_PATTERN)])
#: Characters no name, prefix or holder text may contain: C0 and C1 controls.
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
HOLDER_MAX = 128
#: The prefix of the names the service's own chores lock (app.history.retention's ``schedlock:history-retention``).
RESERVED_PREFIX = "schedlock:"


def refuse_reserved(name: str) -> None:
    """422 for a caller that would take, extend, release or force-release one of the service's own locks: a job
    holding one would pause that chore (reading them is fine: they are listed and shown like any other)."""
    if name.startswith(RESERVED_PREFIX):
        raise InvalidRequest(
            f"name: {name!r} is reserved: names starting with {RESERVED_PREFIX!r} are the service's own locks, "
            "which callers may read but not take, extend, release or force-release",
            field="name",
        )
