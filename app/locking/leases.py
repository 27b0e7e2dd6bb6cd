"""Lease tokens and ``locked_by``: how a schedlock lease is told apart from every other holder of a row.

Acquire generates a random secret and stores only its SHA-256 (``lease_token_hash``); release and extend match on
that hash. A released lease keeps a marker hash derived from it, so a repeated release is recognised (idempotent)
and an extend after release fails.
"""

from __future__ import annotations

import base64
import hashlib
import re

from app.randomness import random_bytes

#: The lease hash of a force-released row, as SQL bytea text: empty, so no token's hash (nor released marker) matches.
FORCED_MARKER_SQL = "\\x"


def new_token() -> str:
    """A lease's secret: 256 random bits, URL-safe, never starting with "-" (a command line would read it as an
    option: ``schedlock release NAME --token -x…``). Refusing that first character costs 1/64 of the choices."""
    while True:
        token = base64.urlsafe_b64encode(random_bytes(32)).rstrip(b"=").decode()
        if not token.startswith("-"):
            return token


def hash_token(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def released_marker(token_hash: bytes) -> bytes:
    return hashlib.sha256(b"released\0" + token_hash).digest()


def new_locked_by(holder: str | None, principal: str | None = None) -> str:
    """Unique per acquisition and never a bare hostname, so no Java node's ``locked_by = <hostname>`` guard can
    ever match a schedlock lease (and no schedlock token can match a Java row)."""
    lease_id = random_bytes(6).hex()
    via = f" via {principal}" if principal else ""
    return f"{holder or 'anonymous'} [schedlock{via} lease {lease_id}]"


#: What new_locked_by appends; a locked_by without it was written by someone else (a Java ShedLock node).
_SCHEDLOCK_SUFFIX = re.compile(r" \[schedlock(?: via [A-Za-z0-9._:@-]+)? lease [0-9a-f]+\]$")


def is_schedlock_holder(locked_by: str) -> bool:
    """Whether ``locked_by`` was made by new_locked_by (an acquisition through schedlock)."""
    return _SCHEDLOCK_SUFFIX.search(locked_by) is not None
