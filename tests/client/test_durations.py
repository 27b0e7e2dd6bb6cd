"""The client reads durations exactly as the server does, and sends them in a form the server reads exactly."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.locking import durations as server
from app.locking.durations import DurationError
from app.locking.durations import parse_duration as server_parse
from schedlock import _durations as client
from schedlock import format_duration, parse_duration

EXAMPLES = [
    "500ms",
    "30s",
    "10m",
    "1h",
    "2d",
    "10M",
    "PT10M",
    "PT0.5S",
    "P1D",
    "P1DT2H",
    "pt1h30m",
    "0",
    "1500",
    "PT0,25S",
]
REJECTED = [
    *["", "-1s", "+1s", "10 m", "1w", "P1Y", "P", "PT", "P1DT", "ten", "1.5s"],
    # ASCII digits only (not Arabic-Indic, fullwidth or a long s), and the whole text
    *["10s\n", "PT10M\n", "\u0661\u0660s", "\uff11\uff10s", "PT\u0661M", "10\u017f", "P\uff11D"],
]


@pytest.mark.parametrize("text", EXAMPLES)
def test_accepted_spellings_agree_with_the_server(text: str) -> None:
    assert parse_duration(text) == server_parse(text)


@pytest.mark.parametrize("text", REJECTED)
def test_rejected_spellings_agree_with_the_server(text: str) -> None:
    with pytest.raises(DurationError):
        server_parse(text)
    with pytest.raises(ValueError):
        parse_duration(text)


def test_integers_are_milliseconds_and_booleans_are_refused() -> None:
    assert parse_duration(1500) == timedelta(milliseconds=1500)
    with pytest.raises(ValueError):
        parse_duration(True)
    with pytest.raises(ValueError):
        parse_duration(timedelta(seconds=-1))


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30)))
def test_the_wire_format_round_trips_through_the_server_parser(value: timedelta) -> None:
    assert server_parse(format_duration(value)) == value


def assert_same_verdict(text: str) -> None:
    try:
        expected = server_parse(text)
    except DurationError:
        with pytest.raises(ValueError):
            parse_duration(text)
        return
    assert parse_duration(text) == expected


@given(st.from_regex(r"\A(\d{1,6}(ms|s|m|h|d)?|P(\d{1,3}D)?(T(\d{1,3}H)?(\d{1,3}M)?(\d{1,3}(\.\d{1,9})?S)?)?)\Z"))
def test_generated_spellings_agree_with_the_server(text: str) -> None:
    assert_same_verdict(text)


def test_the_two_grammars_are_the_same_patterns() -> None:
    """The client cannot import the server, so it carries a copy: the same text and flags, or this fails."""
    for ours, theirs in ((client.SHORT, server.SHORT), (client.ISO, server.ISO)):
        assert (ours.pattern, ours.flags) == (theirs.pattern, theirs.flags), ours.pattern
    assert client.UNIT_MS == server.UNIT_MS


@given(st.text(alphabet=st.sampled_from("0123456789\u0661\u0660\uff11PTDHMSmshd.,\n \u017f+-"), max_size=12))
def test_any_text_gets_the_same_verdict_from_both(text: str) -> None:
    assert_same_verdict(text)
