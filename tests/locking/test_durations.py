"""Duration syntax: ISO-8601 as java.time.Duration reads it, ShedLock's short form, bare milliseconds."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.locking.durations import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("PT10M", timedelta(minutes=10)),
        ("pt10m", timedelta(minutes=10)),
        ("P1D", timedelta(days=1)),
        ("PT0.5S", timedelta(milliseconds=500)),
        ("PT1,25S", timedelta(milliseconds=1250)),
        ("P1DT2H3M4S", timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("PT36H", timedelta(hours=36)),
        ("500ms", timedelta(milliseconds=500)),
        ("500MS", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("10m", timedelta(minutes=10)),
        ("10M", timedelta(minutes=10)),
        ("1h", timedelta(hours=1)),
        ("2d", timedelta(days=2)),
        ("1500", timedelta(milliseconds=1500)),
        ("0", timedelta(0)),
        (250, timedelta(milliseconds=250)),
    ],
)
def test_accepted(text: str | int, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "abc",
        "-1s",
        "+1s",
        "1.5s",
        "10 m",
        "P1M",
        "P1Y",
        "P2W",
        "P",
        "PT",
        "P1DT",
        "1x",
        "ms",
        "PT-1S",
        "-PT1S",
        "99999999999999999999",
        "999999999999999d",
        "10s\n",  # a trailing newline ($ would allow it)
        "\n10s",
        "\u0661\u0660s",  # Arabic-Indic digits
        "\uff11\uff10s",  # fullwidth digits
        "PT\u0661M",
        "10\u017f",  # U+017F, which IGNORECASE alone folds to "s"
        "P\uff11D",
        True,
        -5,
        1.0,
    ],
)
def test_refused(text: object) -> None:
    with pytest.raises(DurationError):
        parse_duration(text)  # type: ignore[arg-type]


@given(st.integers(min_value=0, max_value=10**12))
def test_bare_numbers_are_milliseconds(ms: int) -> None:
    assert parse_duration(str(ms)) == timedelta(milliseconds=ms)
    assert parse_duration(ms) == timedelta(milliseconds=ms)


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=1000)))
def test_iso_formatting_round_trips(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value


@given(st.text(max_size=12))
def test_anything_else_either_parses_or_raises_duration_error(text: str) -> None:
    try:
        result = parse_duration(text)
    except DurationError:
        return
    assert result >= timedelta(0)


@given(st.text(alphabet=st.characters(categories=["Nd"]), min_size=1, max_size=4), st.sampled_from(["", "s", "ms"]))
def test_only_ascii_digits_are_digits(digits: str, unit: str) -> None:
    text = digits + unit
    if digits.isascii():
        assert parse_duration(text) >= timedelta(0)
    else:
        with pytest.raises(DurationError):
            parse_duration(text)
