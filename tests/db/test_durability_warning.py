"""The start-up warning when the database acknowledges commits a failover could lose (app.db.durability):
``synchronous_commit`` off or local, or a primary whose standbys are all asynchronous. Said once, at start-up;
the server serves all the same."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from app.db.durability import durability_problem
from app.settings import Settings
from tests.support.api import acquire
from tests.support.apps import in_process
from tests.support.logs import captured, lines
from tests.support.replication import ReplicatedPair, replicated_pair


def warnings_at_start(stream_lines: list[dict[str, object]]) -> list[str]:
    return [str(r["message"]) for r in stream_lines if r["level"] == "warning" and "failover" in str(r["message"])]


@pytest.mark.parametrize(
    ("synchronous_commit", "standbys", "visible", "synchronous", "names", "expected"),
    [
        ("on", 0, 0, 0, False, None),  # one server: no failover to lose anything to
        ("on", 2, 2, 1, True, None),
        ("remote_apply", 1, 1, 1, True, None),
        ("on", 2, 0, 0, True, None),  # details hidden from this role; synchronous_standby_names says enough
        ("off", 0, 0, 0, False, "synchronous_commit is off"),
        ("local", 2, 2, 2, True, "synchronous_commit is local"),
        (
            "on",
            2,
            2,
            0,
            True,
            "the primary streams to 2 standby(s), none of them synchronous",
        ),  # named, but none connected
        ("on", 1, 0, 0, False, "the primary streams to 1 standby(s), none of them synchronous"),
    ],
)
def test_what_counts_as_losable(
    synchronous_commit: str, standbys: int, visible: int, synchronous: int, names: bool, expected: str | None
) -> None:
    problem = durability_problem(synchronous_commit, standbys, visible, synchronous, names)
    assert (problem is None) if expected is None else (problem is not None and problem.startswith(expected))


async def test_a_single_server_with_synchronous_commit_on_is_not_warned_about(settings: Settings, name: str) -> None:
    with captured() as stream:
        async with in_process(settings) as (_, client):
            assert (await acquire(client, name, "1m")).status_code == 200
    assert warnings_at_start(lines(stream)) == []


async def test_synchronous_commit_off_is_warned_about_once_and_the_server_serves(settings: Settings, name: str) -> None:
    url = settings.asyncpg_dsn()
    url += ("&" if "?" in url else "?") + "synchronous_commit=off"  # asyncpg sends unknown parameters as settings
    with captured() as stream:
        async with in_process(settings.model_copy(update={"database_url": SecretStr(url)})) as (_, client):
            for _ in range(3):
                assert (await acquire(client, f"{name}-{_}", "1m")).status_code == 200
    warned = warnings_at_start(lines(stream))
    assert len(warned) == 1, warned
    assert warned[0].startswith("synchronous_commit is off for schedlock's connections") and "docs/high-av" in warned[0]


@pytest.fixture(params=[False, True], ids=["asynchronous", "synchronous"])
def pair(request: pytest.FixtureRequest) -> Iterator[ReplicatedPair]:
    pair = replicated_pair(synchronous=request.param)
    yield pair
    pair.destroy()


@pytest.mark.system
async def test_a_primary_whose_standbys_are_all_asynchronous_is_warned_about(pair: ReplicatedPair) -> None:
    with captured() as stream:
        async with in_process(Settings(database_url=SecretStr(pair.url), table="shedlock")):
            pass
    warned = warnings_at_start(lines(stream))
    if pair.synchronous:
        assert warned == []
    else:
        assert len(warned) == 1 and warned[0].startswith("the primary streams to 1 standby(s), none of them"), warned
