"""Cron schedules (app.schedules.cron): parsing, aliases, the ticks around a moment, and the DST rule the docs
promise (Debian cron's, as cronsim implements it). No database: this is pure computation."""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.errors import InvalidRequest
from app.locking.slots import fixed
from app.locking.timefmt import format_time
from app.schedules.cron import ALIASES, parse_schedule
from app.schedules.ticks import around

BERLIN = ZoneInfo("Europe/Berlin")


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second)  # naive UTC, the database's convention


def latest(expression: str, at: datetime, zone: str | None = None) -> datetime:
    """The latest tick at or before ``at`` (naive UTC)."""
    return parse_schedule(expression, zone).ticks(at, at)[0]


def test_ticks_are_the_latest_at_or_before_lo_then_every_one_up_to_hi() -> None:
    schedule = parse_schedule("*/10 * * * *", None)
    assert schedule.ticks(utc(2026, 11, 30, 3, 5), utc(2026, 11, 30, 3, 31)) == [
        utc(2026, 11, 30, 3, 0),
        utc(2026, 11, 30, 3, 10),
        utc(2026, 11, 30, 3, 20),
        utc(2026, 11, 30, 3, 30),
    ]
    # A tick exactly at lo is "at or before".
    assert schedule.ticks(utc(2026, 11, 30, 3, 10), utc(2026, 11, 30, 3, 10)) == [utc(2026, 11, 30, 3, 10)]


@pytest.mark.parametrize(("alias", "at", "expected"), [
    ("@hourly", utc(2026, 11, 30, 3, 59, 59), utc(2026, 11, 30, 3)),
    ("@daily", utc(2026, 11, 30, 3), utc(2026, 11, 30)),
    ("@midnight", utc(2026, 11, 30, 3), utc(2026, 11, 30)),
    ("@weekly", utc(2026, 11, 30, 3), utc(2026, 11, 29)),  # the Sunday before
    ("@monthly", utc(2026, 11, 30, 3), utc(2026, 11, 1)),
    ("@yearly", utc(2026, 11, 30, 3), utc(2026, 1, 1)),
    ("@ANNUALLY", utc(2026, 11, 30, 3), utc(2026, 1, 1)),
])  # fmt: skip
def test_aliases(alias: str, at: datetime, expected: datetime) -> None:
    assert latest(alias, at) == expected


def test_names_ranges_lists_and_steps() -> None:
    assert latest("15 9-17/4 * * MON-FRI", utc(2026, 11, 29, 12)) == utc(2026, 11, 27, 17, 15)  # Sat -> Fri
    assert latest("0 0 1 jan,jul *", utc(2026, 11, 30)) == utc(2026, 7, 1)


def test_a_zone_moves_the_ticks() -> None:
    # 03:00 in Berlin is 02:00 UTC in winter.
    assert latest("0 3 * * *", utc(2026, 11, 30, 12), "Europe/Berlin") == utc(2026, 11, 30, 2)
    assert latest("0 3 * * *", utc(2026, 11, 30, 1), "Europe/Berlin") == utc(2026, 11, 29, 2)


def berlin(year: int, month: int, day: int, hour: int, minute: int = 0) -> datetime:
    """Berlin wall-clock time (the first one, when it happens twice) as naive UTC."""
    return datetime(year, month, day, hour, minute, tzinfo=BERLIN).astimezone(UTC).replace(tzinfo=None)


def test_dst_spring_forward_a_skipped_fixed_time_runs_right_after_the_jump() -> None:
    # 2026-03-29: Berlin's clocks jump from 02:00 to 03:00. 02:30 does not exist that day.
    ticks = parse_schedule("30 2 * * *", "Europe/Berlin").ticks(berlin(2026, 3, 28, 12), berlin(2026, 3, 30, 12))
    assert ticks == [berlin(2026, 3, 28, 2, 30), berlin(2026, 3, 29, 3, 0), berlin(2026, 3, 30, 2, 30)]


def test_dst_fall_back_a_fixed_time_in_the_repeated_hour_runs_once() -> None:
    # 2026-10-25: Berlin's clocks go from 03:00 back to 02:00. 02:30 happens twice; the job runs at the first.
    ticks = parse_schedule("30 2 * * *", "Europe/Berlin").ticks(berlin(2026, 10, 24, 12), berlin(2026, 10, 26, 12))
    first_0230 = datetime(2026, 10, 25, 0, 30)  # 02:30 CEST, in UTC
    assert ticks == [berlin(2026, 10, 24, 2, 30), first_0230, berlin(2026, 10, 26, 2, 30)]


def test_dst_fall_back_a_frequent_job_runs_in_both_copies_of_the_hour() -> None:
    # "*/30" starts with "*": no special handling, every real instant that reads hh:00 or hh:30 is a tick.
    ticks = parse_schedule("*/30 * * * *", "Europe/Berlin").ticks(utc(2026, 10, 25, 0, 0), utc(2026, 10, 25, 1, 30))
    assert ticks == [
        utc(2026, 10, 25, 0, 0),
        utc(2026, 10, 25, 0, 30),
        utc(2026, 10, 25, 1, 0),
        utc(2026, 10, 25, 1, 30),
    ]


def test_candidates_around_a_moment_are_formatted_like_every_api_time() -> None:
    candidates = around(parse_schedule("* * * * *", None), utc(2026, 11, 30, 3, 0, 30), timedelta(seconds=1))
    assert candidates.keys[0] == "2026-11-30T02:58:00.000Z"  # two minutes back
    assert candidates.keys == [format_time(t) for t in candidates.ats]
    assert candidates.lo == utc(2026, 11, 30, 2, 58, 30) and candidates.hi == utc(2026, 11, 30, 3, 2, 30)
    assert len(candidates.keys) == 5
    assert fixed("mine").keys == ["mine"]


@pytest.mark.parametrize(
    ("expression", "zone", "field"),
    [
        ("", None, "schedule"),
        ("@reboot", None, "schedule"),
        ("@often", None, "schedule"),
        ("* * * *", None, "schedule"),
        ("0 * * * * *", None, "schedule"),
        ("60 * * * *", None, "schedule"),
        ("* 24 * * *", None, "schedule"),
        ("* * 0 * *", None, "schedule"),
        ("* * * 13 *", None, "schedule"),
        ("* * * * 8", None, "schedule"),
        ("*/0 * * * *", None, "schedule"),
        ("5-1 * * * *", None, "schedule"),
        ("* * 30 2 *", None, "schedule"),
        ("¹ * * * *", None, "schedule"),
        ("* * * * *", "Nowhere/Atlantis", "timezone"),
        ("* * * * *", "localtime", "timezone"),
        ("* * * * *", "/etc/localtime", "timezone"),
        ("* * * * *", "Europe/../Europe/Berlin", "timezone"),
        ("* * * * *", "", "timezone"),
    ],
)
def test_bad_schedules_and_zones_name_their_field(expression: str, zone: str | None, field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        parse_schedule(expression, zone)
    assert caught.value.details["field"] == field


@given(st.text(max_size=40), st.one_of(st.none(), st.text(max_size=20)))
def test_any_text_parses_or_is_an_invalid_request(expression: str, zone: str | None) -> None:
    with contextlib.suppress(InvalidRequest):
        schedule = parse_schedule(expression, zone)
        assert schedule.ticks(utc(2026, 11, 30), utc(2026, 11, 30, 0, 5))  # and one that parses has ticks


def test_every_alias_is_five_fields() -> None:
    for alias, expression in ALIASES.items():
        assert len(parse_schedule(alias, None).expression.split()) == 5, alias
        assert parse_schedule(alias, None).expression == expression
