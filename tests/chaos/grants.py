"""Leases as the history shows them: each acknowledged grant, what later answers said of it, and the least the
database can have kept it for.

``until`` is a lower bound of when the lease stopped holding the name, on the database's clock: the last
acknowledged ``lock_until`` (acquire, extend), or the ``lock_until`` an acknowledged release answered. A release
without an answer may or may not have run; if it ran, it set ``lock_until`` to at least the database's now when it
ran (later than any ``db_time`` the lease had seen) and at least ``locked_at + lock_at_least_for``. An extend without
an answer can only have moved ``lock_until`` later. So a grant of the same name that starts before ``until`` is an
overlap whatever the unanswered requests did, and the checker never reports one that is not.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from tests.chaos.history import Op, db_time

ACQUIRES = ("acquire", "java_acquire")
EXTENDS = ("extend", "java_extend")
RELEASES = ("release", "java_unlock")


@dataclass
class Grant:
    """One acknowledged acquisition of ``name`` and what the history says of it afterwards."""

    name: str
    lease: str
    source: str  # "http" or "java"
    fencing_token: int
    locked_by: str
    locked_at: datetime
    at_least: timedelta
    until: datetime
    ops: list[Op]
    #: The acknowledged release (or Java unlock) and the lock_until it answered.
    release: Op | None = None
    released_until: datetime | None = None
    #: Acknowledged extends, in order.
    extends: list[Op] = field(default_factory=list)
    #: A release or extend was sent (answered or not): the table may no longer show the acquired lease.
    release_sent: Op | None = None
    #: The holder went on past its lock_until: an extend or release refused as not the holder, or a release that
    #: came after lock_until. The documented caveat (docs/reliability.md), reported apart, never a violation.
    outlived: bool = False
    #: The release came after lock_until: the run ends "expired", not "released" (docs/history.md).
    late: bool = False
    #: The release's db_time and lock_until are the same millisecond (the API truncates to ms): late or not, the
    #: answer cannot tell.
    borderline: bool = False
    slot: str | None = None

    @property
    def acquire(self) -> Op:
        return self.ops[0]

    @property
    def unknown_extends(self) -> bool:
        return any(op.kind in EXTENDS and op.unknown for op in self.ops)

    @property
    def last_extended_until(self) -> datetime | None:
        return max((_until(op) for op in self.extends), default=None)


def _until(op: Op) -> datetime:
    value = db_time((op.body or {}).get("lock_until"))
    assert value is not None, op
    return value


def _db_time(op: Op) -> datetime:
    value = db_time((op.body or {}).get("db_time"))
    assert value is not None, op
    return value


def grants_of(ops: list[Op]) -> list[Grant]:
    """Every acknowledged grant in ``ops``, with what its later operations said."""
    by_lease: dict[str, list[Op]] = defaultdict(list)
    for op in sorted(ops, key=lambda o: o.t0):
        by_lease[op.lease].append(op)
    grants = []
    for lease_ops in by_lease.values():
        first = lease_ops[0]
        if first.kind not in ACQUIRES or not first.ok:
            continue
        grants.append(_grant(first, lease_ops))
    return grants


def _grant(acquire: Op, ops: list[Op]) -> Grant:
    body = acquire.body or {}
    locked_at = db_time(body["locked_at"])
    assert locked_at is not None
    at_least = timedelta(milliseconds=acquire.req.get("lock_at_least_for", 0))
    last_until, last_db = _until(acquire), _db_time(acquire)
    grant = Grant(
        name=acquire.name,
        lease=acquire.lease,
        source="java" if acquire.is_java else "http",
        fencing_token=int(body["fencing_token"]),
        locked_by=str(body["locked_by"]),
        locked_at=locked_at,
        at_least=at_least,
        until=last_until,
        ops=ops,
        slot=body.get("slot"),
    )
    for op in ops[1:]:
        if op.kind in EXTENDS:
            if op.ok:
                grant.extends.append(op)
                last_until, last_db = max(last_until, _until(op)), _db_time(op)
            elif not op.unknown:
                grant.outlived = True  # refused: the lease had run out (or was taken over)
            continue
        if op.kind not in RELEASES:
            continue
        if grant.release_sent is None:
            grant.release_sent = op
        if op.is_java:  # Java decides its at-least window when it unlocks
            grant.at_least = timedelta(milliseconds=op.req.get("lock_at_least_for", 0))
        if op.ok and grant.release is None:
            grant.release, grant.released_until = op, _until(op)
            grant.late = _db_time(op) > last_until
            grant.borderline = _db_time(op) == last_until
            grant.outlived = grant.outlived or grant.late
        elif not op.ok and not op.unknown:
            grant.outlived = True
    if grant.released_until is not None:
        grant.until = grant.released_until
    elif grant.release_sent is not None and any(op.unknown for op in ops if op.kind in RELEASES):
        grant.until = min(last_until, max(last_db, locked_at + grant.at_least))
    else:
        grant.until = last_until
    return grant


def by_name(grants: list[Grant]) -> dict[str, list[Grant]]:
    """Grants per name, in the order the database granted them (locked_at, then fencing token)."""
    out: dict[str, list[Grant]] = defaultdict(list)
    for grant in sorted(grants, key=lambda g: (g.locked_at, g.fencing_token)):
        out[grant.name].append(grant)
    return out
