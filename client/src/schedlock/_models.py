"""What the service answers, as typed, immutable values. Times are aware UTC datetimes from the database clock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from schedlock._times import parse_time


@dataclass(frozen=True, slots=True)
class Acquired:
    """A successful acquire. The lease ``token`` is a secret: it is left out of ``repr``."""

    name: str
    token: str = field(repr=False)
    fencing_token: int
    locked_at: datetime
    lock_until: datetime
    locked_by: str
    db_time: datetime
    #: The tick this lease runs (``slot`` or ``once_per``); None without one.
    slot: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Acquired:
        return cls(
            name=_str(data, "name"),
            token=_str(data, "token"),
            fencing_token=_int(data, "fencing_token"),
            locked_at=_time(data, "locked_at"),
            lock_until=_time(data, "lock_until"),
            locked_by=_str(data, "locked_by"),
            db_time=_time(data, "db_time"),
            slot=_optional_str(data, "slot"),
        )


@dataclass(frozen=True, slots=True)
class Released:
    """A release: the lock is free from ``lock_until`` on (later than now while lock_at_least_for runs)."""

    name: str
    lock_until: datetime
    db_time: datetime
    #: The lease's slot, and whether it is now done (None for a lease without a slot).
    slot: str | None = None
    completed: bool | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Released:
        completed = data.get("completed")
        if completed is not None and not isinstance(completed, bool):
            raise ValueError(f"completed: expected bool, got {completed!r}")
        return cls(
            name=_str(data, "name"),
            lock_until=_time(data, "lock_until"),
            db_time=_time(data, "db_time"),
            slot=_optional_str(data, "slot"),
            completed=completed,
        )


@dataclass(frozen=True, slots=True)
class Extended:
    """An extension: the lease now runs until ``lock_until``."""

    name: str
    fencing_token: int
    locked_at: datetime
    lock_until: datetime
    db_time: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Extended:
        return cls(
            name=_str(data, "name"),
            fencing_token=_int(data, "fencing_token"),
            locked_at=_time(data, "locked_at"),
            lock_until=_time(data, "lock_until"),
            db_time=_time(data, "db_time"),
        )


@dataclass(frozen=True, slots=True)
class LockInfo:
    """One lock as the database has it; ``held`` is judged by the database's clock at ``db_time``."""

    name: str
    locked_by: str
    locked_at: datetime
    lock_until: datetime
    held: bool
    fencing_token: int
    db_time: datetime
    #: The last tick a holder released as completed, and when (None when none).
    last_completed_slot: str | None = None
    last_completed_at: datetime | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], db_time: datetime | None = None) -> LockInfo:
        return cls(
            name=_str(data, "name"),
            locked_by=_str(data, "locked_by"),
            locked_at=_time(data, "locked_at"),
            lock_until=_time(data, "lock_until"),
            held=_bool(data, "held"),
            fencing_token=_int(data, "fencing_token"),
            db_time=db_time if db_time is not None else _time(data, "db_time"),
            last_completed_slot=_optional_str(data, "last_completed_slot"),
            last_completed_at=_time(data, "last_completed_at") if data.get("last_completed_at") is not None else None,
        )


@dataclass(frozen=True, slots=True)
class LockPage:
    """One page of locks in name order; pass ``next_cursor`` back as ``cursor`` for the next (None: last page)."""

    items: tuple[LockInfo, ...]
    next_cursor: str | None
    db_time: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LockPage:
        db_time = _time(data, "db_time")
        items = data.get("items")
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise ValueError("items: expected a list of objects")
        cursor = data.get("next_cursor")
        if cursor is not None and not isinstance(cursor, str):
            raise ValueError("next_cursor: expected a string or null")
        return cls(tuple(LockInfo.from_json(item, db_time) for item in items), cursor, db_time)


def _get(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    # bool is an int in Python; a JSON true is not a fencing token.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{key}: expected {kind.__name__}, got {value!r}")
    return value


def _str(data: Mapping[str, Any], key: str) -> str:
    return str(_get(data, key, str))


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    # Fields added with slots: absent (or null) from servers, and answers, that have none.
    return None if data.get(key) is None else _str(data, key)


def _int(data: Mapping[str, Any], key: str) -> int:
    return int(_get(data, key, int))


def _bool(data: Mapping[str, Any], key: str) -> bool:
    return bool(_get(data, key, bool))


def _time(data: Mapping[str, Any], key: str) -> datetime:
    try:
        return parse_time(_str(data, key))
    except ValueError as exc:
        raise ValueError(f"{key}: {exc}") from None
