"""What the service answers, as typed, immutable values. Times are aware UTC datetimes from the database clock."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
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
        return cls(tuple(LockInfo.from_json(item, db_time) for item in _objects(data)), _cursor(data), db_time)


@dataclass(frozen=True, slots=True)
class Run:
    """One acquisition of a lock and how it ended (docs/history.md). ``outcome`` is ``running``, ``released``,
    ``expired``, ``taken_over`` or ``force_released``; ``duration`` is the time so far while it runs."""

    name: str
    fencing_token: int
    locked_by: str
    token_name: str | None
    source: str
    acquired_at: datetime
    lock_until: datetime
    ended_at: datetime | None
    outcome: str
    duration: timedelta
    skipped: int
    forced_by: str | None
    force_reason: str | None

    @property
    def ended(self) -> bool:
        return self.outcome != "running"

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Run:
        ended_at = data.get("ended_at")
        return cls(
            name=_str(data, "name"),
            fencing_token=_int(data, "fencing_token"),
            locked_by=_str(data, "locked_by"),
            token_name=_optional_str(data, "token_name"),
            source=_str(data, "source"),
            acquired_at=_time(data, "acquired_at"),
            lock_until=_time(data, "lock_until"),
            ended_at=None if ended_at is None else _time(data, "ended_at"),
            outcome=_str(data, "outcome"),
            duration=timedelta(milliseconds=_int(data, "duration_ms")),
            skipped=_int(data, "skipped"),
            forced_by=_optional_str(data, "forced_by"),
            force_reason=_optional_str(data, "force_reason"),
        )


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of runs, newest first; pass ``next_cursor`` back as ``cursor`` for the next (None: last page)."""

    items: tuple[Run, ...]
    next_cursor: str | None
    db_time: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunPage:
        return cls(tuple(Run.from_json(item) for item in _objects(data)), _cursor(data), _time(data, "db_time"))


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A registered job and its state (docs/jobs.md): ``state`` is ``up``, ``late``, ``down``, ``paused`` or ``new``;
    ``recent``, the states of its latest due ticks, oldest first; ``last_tick`` and ``last_tick_state``, the latest."""

    name: str
    schedule: str
    timezone: str
    grace: str
    paused: bool
    state: str
    recent: tuple[str, ...]
    last_tick: datetime | None
    last_tick_state: str | None
    next_tick: datetime | None
    last_completed_at: datetime | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobInfo:
        last = data.get("last_tick")
        last = last if isinstance(last, dict) else None
        recent = data.get("recent")
        return cls(
            name=_str(data, "name"),
            schedule=_str(data, "schedule"),
            timezone=_str(data, "timezone"),
            grace=_str(data, "grace"),
            paused=_bool(data, "paused"),
            state=_str(data, "state"),
            recent=tuple(_str(t, "state") for t in recent if isinstance(t, dict)) if isinstance(recent, list) else (),
            last_tick=_time(last, "tick") if last else None,
            last_tick_state=_str(last, "state") if last else None,
            next_tick=_time(data, "next_tick") if data.get("next_tick") else None,
            last_completed_at=_time(data, "last_completed_at") if data.get("last_completed_at") else None,
        )


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of jobs by name; pass ``next_cursor`` back as ``cursor`` for the next (None: last page)."""

    items: tuple[JobInfo, ...]
    next_cursor: str | None
    db_time: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> JobPage:
        return cls(tuple(JobInfo.from_json(item) for item in _objects(data)), _cursor(data), _time(data, "db_time"))


@dataclass(frozen=True, slots=True)
class SkipHour:
    """Skipped acquire attempts in the hour starting at ``hour`` (database clock)."""

    hour: datetime
    skipped: int


@dataclass(frozen=True, slots=True)
class Skips:
    """A lock's skipped attempts per hour over the last ``hours`` hours, newest first (hours without any omitted)."""

    name: str
    hours: int
    items: tuple[SkipHour, ...]
    total: int
    db_time: datetime

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Skips:
        items = tuple(SkipHour(_time(item, "hour"), _int(item, "skipped")) for item in _objects(data))
        return cls(_str(data, "name"), _int(data, "hours"), items, _int(data, "total"), _time(data, "db_time"))


@dataclass(frozen=True, slots=True)
class ForceReleased:
    """A force-release: ``forced`` is False when the lock was not held (nothing changed); ``run`` is the run of the
    lock's row, if it has one."""

    name: str
    forced: bool
    lock_until: datetime
    db_time: datetime
    run: Run | None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ForceReleased:
        run = data.get("run")
        if run is not None and not isinstance(run, dict):
            raise ValueError("run: expected an object or null")
        return cls(
            name=_str(data, "name"),
            forced=_bool(data, "forced"),
            lock_until=_time(data, "lock_until"),
            db_time=_time(data, "db_time"),
            run=None if run is None else Run.from_json(run),
        )


def _objects(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    items = data.get("items")
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise ValueError("items: expected a list of objects")
    return items


def _cursor(data: Mapping[str, Any]) -> str | None:
    cursor = data.get("next_cursor")
    if cursor is not None and not isinstance(cursor, str):
        raise ValueError("next_cursor: expected a string or null")
    return cursor


def _get(data: Mapping[str, Any], key: str, kind: type) -> Any:
    value = data.get(key)
    # bool is an int in Python; a JSON true is not a fencing token.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{key}: expected {kind.__name__}, got {value!r}")
    return value


def _str(data: Mapping[str, Any], key: str) -> str:
    return str(_get(data, key, str))


def _optional_str(data: Mapping[str, Any], key: str) -> str | None:
    # Optional fields (slots, history): absent or null when an answer has none, or from an older server.
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
